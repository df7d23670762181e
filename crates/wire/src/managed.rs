//! Managed clusters' Secrets on the bus: a Secret an EventSource selects travels in
//! `SLUICE_CHANGES` (the evaluator's input) and, when collected, in its match members, always
//! with its JSON sealed with the bus key (ADR 0023). The watcher seals a change, the evaluator
//! opens it and seals a collected member, the renderer and the reporter open members; each
//! at its decode or encode, so a stage in between only ever holds the opened object.
//! Without the key, or with another, a Secret's contents stay off the bus: what travels or
//! what a stage reads is the Secret without `data`, `stringData` and the last-applied
//! annotation, with `sluice.io/withheld` saying why.

use serde_json::Value;
use sluice_bus::Delivered;
use sluice_domain::configdata;
use sluice_proto::v1 as pb;

use crate::{decode, BusKey, Result, NO_KEY, NO_KEY_AT_WATCHER, WRONG_KEY};

/// kubectl's copy of the applied object, which holds a Secret's data in clear.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether an object of this apiVersion and kind is a core Secret, whose contents travel sealed.
pub fn is_secret(api_version: &str, kind: &str) -> bool {
    kind == "Secret" && api_version == "v1"
}

/// A Secret's JSON without its contents, saying why. Labels and annotations stay, so an
/// EventSource's selectors still read them.
pub fn without_contents(json: &[u8], reason: &str) -> Vec<u8> {
    let mut object: Value = serde_json::from_slice(json).unwrap_or(Value::Null);
    let Some(fields) = object.as_object_mut() else {
        return Vec::new();
    };
    fields.remove("data");
    fields.remove("stringData");
    if let Some(annotations) = fields
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED);
    }
    fields.insert(
        configdata::WITHHELD_FIELD.to_string(),
        Value::String(reason.to_string()),
    );
    serde_json::to_vec(&object).unwrap_or_default()
}

/// A stand-in for a Secret whose sealed JSON did not open: only what the message names.
fn stand_in(namespace: &str, name: &str, reason: &str) -> Vec<u8> {
    let object = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": namespace, "name": name}, configdata::WITHHELD_FIELD: reason});
    serde_json::to_vec(&object).unwrap_or_default()
}

fn cluster_text(cluster: Option<&pb::ClusterRef>) -> String {
    cluster.map_or_else(String::new, |c| {
        format!("{}/{}/{}", c.r#type, c.namespace, c.name)
    })
}

/// What a sealed change is about: its cluster and its object.
fn change_about(change: &pb::ResourceChange) -> String {
    format!(
        "ResourceChange {} {} {} {}/{}",
        cluster_text(change.cluster.as_ref()),
        change.api_version,
        change.kind,
        change.namespace,
        change.name
    )
}

/// `change` as it goes on the bus: a Secret's JSON sealed with `key`, or without a key its
/// object without contents.
pub fn seal_change(mut change: pb::ResourceChange, key: Option<&BusKey>) -> pb::ResourceChange {
    if !is_secret(&change.api_version, &change.kind) || change.object_json.is_empty() {
        return change;
    }
    match key {
        Some(key) => {
            change.sealed_object_json = key.seal(&change_about(&change), &change.object_json);
            change.object_json = Vec::new();
        }
        None => change.object_json = without_contents(&change.object_json, NO_KEY_AT_WATCHER),
    }
    change
}

/// Decodes a change and opens a sealed Secret with `key`; one that does not open (no key,
/// another key) is read as a Secret without contents that says why.
pub fn decode_change(delivered: &Delivered, key: Option<&BusKey>) -> Result<pb::ResourceChange> {
    let mut change = decode::<pb::ResourceChange>("ResourceChange", delivered)?;
    if change.sealed_object_json.is_empty() {
        return Ok(change);
    }
    let sealed = std::mem::take(&mut change.sealed_object_json);
    change.object_json = match key.map(|key| key.open(&change_about(&change), &sealed)) {
        Some(Ok(json)) => json,
        Some(Err(_)) => stand_in(&change.namespace, &change.name, WRONG_KEY),
        None => stand_in(&change.namespace, &change.name, NO_KEY),
    };
    Ok(change)
}

fn member_secret(member: &pb::MatchMember) -> Option<&pb::ObjectRef> {
    member
        .object
        .as_ref()
        .filter(|o| is_secret(&o.api_version, &o.kind))
}

/// What a sealed member is about: its set and its object.
fn member_about(member: &pb::MatchMember, object: &pb::ObjectRef) -> String {
    format!(
        "MatchMember {} {} {} {} {}/{}",
        cluster_text(member.cluster.as_ref()),
        member.event_source,
        object.api_version,
        object.kind,
        object.namespace,
        object.name
    )
}

/// `member` as it goes on the bus: a collected Secret's JSON sealed with `key`, or without a
/// key the Secret without contents.
pub fn seal_member(mut member: pb::MatchMember, key: Option<&BusKey>) -> pb::MatchMember {
    if member.resource.is_empty() {
        return member;
    }
    let Some(object) = member_secret(&member) else {
        return member;
    };
    match key {
        Some(key) => {
            member.sealed_resource = key.seal(&member_about(&member, object), &member.resource);
            member.resource = Vec::new();
        }
        None => member.resource = without_contents(&member.resource, NO_KEY),
    }
    member
}

/// `member` with a sealed Secret opened with `key`; one that does not open is read as the
/// Secret without contents, saying why.
pub fn open_member(mut member: pb::MatchMember, key: Option<&BusKey>) -> pb::MatchMember {
    if member.sealed_resource.is_empty() {
        return member;
    }
    let sealed = std::mem::take(&mut member.sealed_resource);
    let object = member.object.clone().unwrap_or_default();
    member.resource = match key.map(|key| key.open(&member_about(&member, &object), &sealed)) {
        Some(Ok(json)) => json,
        Some(Err(_)) => stand_in(&object.namespace, &object.name, WRONG_KEY),
        None => stand_in(&object.namespace, &object.name, NO_KEY),
    };
    member
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode;

    const TOKEN: &str = "dG9wLXNlY3JldA==";

    fn secret_json() -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"namespace": "eng", "name": "app", "labels": {"team": "a"},
                         "annotations": {LAST_APPLIED: format!("{{\"data\":{{\"k\":\"{TOKEN}\"}}}}")}},
            "data": {"k": TOKEN}, "stringData": {"s": "plain"}}))
        .expect("json")
    }

    fn change(kind: &str, json: Vec<u8>) -> pb::ResourceChange {
        pb::ResourceChange {
            cluster: Some(pb::ClusterRef {
                namespace: "default".into(),
                name: "c".into(),
                r#type: pb::ClusterType::Sveltos as i32,
            }),
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: "eng".into(),
            name: "app".into(),
            object_json: json,
            ..Default::default()
        }
    }

    fn delivered(payload: bytes::Bytes) -> Delivered {
        Delivered {
            subject: "s".into(),
            sequence: 1,
            payload,
            traceparent: None,
        }
    }

    fn carries(bytes: &[u8], text: &str) -> bool {
        bytes.windows(text.len()).any(|w| w == text.as_bytes())
    }

    fn reason(json: &[u8]) -> Option<String> {
        let object: Value = serde_json::from_slice(json).expect("json");
        configdata::withheld_reason(&object).map(str::to_string)
    }

    #[test]
    fn secret_changes_travel_sealed_and_open_only_with_the_key() {
        let key = BusKey::from_bytes(&[1; 32]).expect("key");
        let other = BusKey::from_bytes(&[2; 32]).expect("key");
        let sealed = seal_change(change("Secret", secret_json()), Some(&key));
        let bytes = encode(&sealed);
        assert!(sealed.object_json.is_empty());
        assert!(!carries(&bytes, "dG9wLXNl") && !carries(&bytes, "plain"));
        let read = |key| decode_change(&delivered(bytes.clone()), key).expect("decodes");
        assert_eq!(read(Some(&key)).object_json, secret_json());
        assert!(read(Some(&key)).sealed_object_json.is_empty());
        assert_eq!(
            reason(&read(Some(&other)).object_json).as_deref(),
            Some(WRONG_KEY)
        );
        assert_eq!(reason(&read(None).object_json).as_deref(), Some(NO_KEY));
        // Moved to another object, it does not open.
        let mut moved = sealed.clone();
        moved.name = "other".into();
        let moved = decode_change(&delivered(encode(&moved)), Some(&key)).expect("decodes");
        assert_eq!(reason(&moved.object_json).as_deref(), Some(WRONG_KEY));
        // Other kinds and deletions are untouched.
        let map = change("ConfigMap", b"{\"data\":{\"k\":\"v\"}}".to_vec());
        assert_eq!(seal_change(map.clone(), Some(&key)), map);
        let deleted = change("Secret", Vec::new());
        assert_eq!(seal_change(deleted.clone(), Some(&key)), deleted);
    }

    #[test]
    fn without_a_key_a_secret_change_keeps_its_labels_but_not_its_contents() {
        let unkeyed = seal_change(change("Secret", secret_json()), None);
        assert!(unkeyed.sealed_object_json.is_empty());
        assert!(!carries(&unkeyed.object_json, "dG9wLXNl"));
        assert!(!carries(&unkeyed.object_json, "plain"));
        let object: Value = serde_json::from_slice(&unkeyed.object_json).expect("json");
        assert_eq!(object["metadata"]["labels"]["team"], "a");
        assert_eq!(
            configdata::withheld_reason(&object),
            Some(NO_KEY_AT_WATCHER)
        );
    }

    #[test]
    fn collected_secret_members_travel_sealed() {
        let key = BusKey::from_bytes(&[1; 32]).expect("key");
        let member = pb::MatchMember {
            event_source: "es".into(),
            object: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "Secret".into(),
                namespace: "eng".into(),
                name: "app".into(),
            }),
            resource: secret_json(),
            present: true,
            ..Default::default()
        };
        let sealed = seal_member(member.clone(), Some(&key));
        assert!(sealed.resource.is_empty());
        assert!(!carries(&encode(&sealed), "dG9wLXNl"));
        assert_eq!(open_member(sealed.clone(), Some(&key)), member);
        let mut moved = sealed.clone();
        moved.event_source = "another".into();
        let moved = open_member(moved, Some(&key));
        assert_eq!(reason(&moved.resource).as_deref(), Some(WRONG_KEY));
        assert_eq!(
            reason(&open_member(sealed, None).resource).as_deref(),
            Some(NO_KEY)
        );
        let unkeyed = seal_member(member.clone(), None);
        assert!(!carries(&unkeyed.resource, "dG9wLXNl"));
        // A member of another kind, or one that collects nothing, is untouched.
        let mut pod = member.clone();
        pod.object.as_mut().expect("object").kind = "Pod".into();
        assert_eq!(seal_member(pod.clone(), Some(&key)), pod);
        let bare = pb::MatchMember {
            resource: Vec::new(),
            ..member
        };
        assert_eq!(seal_member(bare.clone(), Some(&key)), bare);
    }
}
