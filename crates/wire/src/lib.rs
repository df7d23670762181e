//! Where the wire meets the domain: the only place protobuf messages and domain types are
//! converted into each other, plus the configuration feed every stage follows.
//! It decides nothing; the stages do.

pub mod managed;
pub mod match_units;
pub mod names;
pub mod seal;
pub mod service;
pub mod unit;

use bytes::Bytes;
use prost::Message;
use serde_json::Value;
use sluice_bus::{topology, Bus, Delivered, LiveFeed};
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_domain::config::ConfigState;
use sluice_domain::configdata::{self, BusForm};
use sluice_proto::v1 as pb;

pub use managed::{decode_change, seal_change};
pub use seal::{BusKey, SealError};

/// Why a stage without the bus key sees a Secret without its contents.
pub const NO_KEY: &str =
    "no bus key is configured (--bus-key-file), so Secret contents are not available";
/// Why a Secret arrives without its contents when the watcher that publishes it has no key.
pub const NO_KEY_AT_WATCHER: &str =
    "the watcher has no bus key (--bus-key-file), so Secret contents do not go on the bus";
/// Why a stage sees a Secret without its contents although it has a key.
pub const WRONG_KEY: &str = "the Secret's contents do not open with the configured bus key";

/// Why a message could not be read: a decode or an invalid field is permanent (the message is
/// dead-lettered); a failure of the bus under a read is the bus's error, as it is.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to decode {what} from {subject}")]
    Decode {
        what: &'static str,
        subject: String,
        #[source]
        source: prost::DecodeError,
    },
    #[error("message on {subject} has an invalid {field}")]
    Invalid {
        subject: String,
        field: &'static str,
    },
    #[error(transparent)]
    Bus(#[from] sluice_bus::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub fn encode<M: Message>(message: &M) -> Bytes {
    Bytes::from(message.encode_to_vec())
}

pub fn decode<M: Message + Default>(what: &'static str, delivered: &Delivered) -> Result<M> {
    M::decode(delivered.payload.as_ref()).map_err(|source| Error::Decode {
        what,
        subject: delivered.subject.clone(),
        source,
    })
}

pub fn cluster_ref(id: &ClusterId) -> pb::ClusterRef {
    pb::ClusterRef {
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        r#type: match id.cluster_type {
            ClusterType::Sveltos => pb::ClusterType::Sveltos as i32,
            ClusterType::Capi => pb::ClusterType::Capi as i32,
        },
    }
}

pub fn cluster_id(r: Option<&pb::ClusterRef>, subject: &str) -> Result<ClusterId> {
    let r = r.ok_or_else(|| invalid_cluster(subject))?;
    Ok(ClusterId {
        cluster_type: cluster_type(r, subject)?,
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    })
}

/// As [`cluster_id`], taking the reference's strings instead of copying them.
pub fn into_cluster_id(r: Option<pb::ClusterRef>, subject: &str) -> Result<ClusterId> {
    let r = r.ok_or_else(|| invalid_cluster(subject))?;
    Ok(ClusterId {
        cluster_type: cluster_type(&r, subject)?,
        namespace: r.namespace,
        name: r.name,
    })
}

fn cluster_type(r: &pb::ClusterRef, subject: &str) -> Result<ClusterType> {
    match pb::ClusterType::try_from(r.r#type) {
        Ok(pb::ClusterType::Sveltos) => Ok(ClusterType::Sveltos),
        Ok(pb::ClusterType::Capi) => Ok(ClusterType::Capi),
        _ => Err(invalid_cluster(subject)),
    }
}

fn invalid_cluster(subject: &str) -> Error {
    Error::Invalid {
        subject: subject.to_string(),
        field: "cluster",
    }
}

/// The `<type>.<namespace>.<name>` tokens of a cluster in subjects.
pub fn cluster_tokens(id: &ClusterId) -> String {
    topology::cluster_tokens(id.cluster_type.lower(), &id.namespace, &id.name)
}

/// An object's reference: its apiVersion, kind, namespace and name, each empty when missing or
/// not a string.
pub fn object_ref(object: &Value) -> pb::ObjectRef {
    // Plain lookups: `Value::pointer` allocates for each path segment it unescapes.
    let text = |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or("").to_string();
    let metadata = object.get("metadata");
    pb::ObjectRef {
        api_version: text(object.get("apiVersion")),
        kind: text(object.get("kind")),
        namespace: text(metadata.and_then(|m| m.get("namespace"))),
        name: text(metadata.and_then(|m| m.get("name"))),
    }
}

/// One configuration object's new state.
#[derive(Clone, Debug, Default)]
pub struct ConfigUpdate {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub object: Option<Value>,
    /// The message's sequence in `SLUICE_CONFIG`.
    pub sequence: u64,
    /// The trace context the message carries: the watcher's span of the change (ADR 0045).
    pub traceparent: Option<String>,
}

impl ConfigUpdate {
    /// Decodes one config message, opening a sealed Secret with `key`. A Secret that cannot be
    /// opened (no key, another key) arrives as a stand-in that says why
    /// (`sluice_domain::configdata::withheld`), so a stage that needs it reports that.
    pub fn from_delivered(delivered: &Delivered, key: Option<&BusKey>) -> Result<ConfigUpdate> {
        let message: pb::ConfigObject = decode("ConfigObject", delivered)?;
        let invalid = || Error::Invalid {
            subject: delivered.subject.clone(),
            field: "object_json",
        };
        let object = if message.deleted {
            None
        } else if !message.sealed_object_json.is_empty() {
            let about = seal::config_about(&message.kind, &message.namespace, &message.name);
            let opened = key.map(|key| key.open(&about, &message.sealed_object_json));
            Some(match opened {
                Some(Ok(json)) => serde_json::from_slice(&json).map_err(|_| invalid())?,
                Some(Err(_)) => withheld_stand_in(&message, WRONG_KEY),
                None => withheld_stand_in(&message, NO_KEY),
            })
        } else {
            Some(serde_json::from_slice(&message.object_json).map_err(|_| invalid())?)
        };
        Ok(ConfigUpdate {
            kind: message.kind,
            namespace: message.namespace,
            name: message.name,
            object,
            sequence: delivered.sequence,
            traceparent: delivered.traceparent.clone(),
        })
    }

    /// The message this update came in, as a stage's side feed names it to the runner (its
    /// span, the trace its outputs continue).
    pub fn side_message(&self) -> sluice_bus::runner::SideMessage {
        sluice_bus::runner::SideMessage {
            stream: topology::CONFIG.name,
            subject: topology::config_subject(&self.kind, &self.namespace, &self.name),
            sequence: self.sequence,
            traceparent: self.traceparent.clone(),
        }
    }

    pub fn apply_to(&self, state: &mut ConfigState) -> bool {
        state.apply(
            &self.kind,
            &self.namespace,
            &self.name,
            self.object.as_ref(),
        )
    }
}

fn withheld_stand_in(message: &pb::ConfigObject, reason: &str) -> Value {
    let key = serde_json::json!({"metadata": {"namespace": message.namespace, "name": message.name,
                                              "resourceVersion": message.resource_version}});
    configdata::withheld(&key, reason)
}

/// The config message for one object's state (`None`: deleted) in the form it travels in: a
/// sealed form is sealed with `key`, or without a key replaced by a stand-in that says so.
pub fn config_message(
    kind: &str,
    namespace: &str,
    name: &str,
    resource_version: &str,
    form: Option<&BusForm>,
    key: Option<&BusKey>,
) -> pb::ConfigObject {
    let json = |object: &Value| serde_json::to_vec(object).unwrap_or_default();
    let (object_json, sealed_object_json) = match form {
        None => (Vec::new(), Vec::new()),
        Some(BusForm::Plain(object)) => (json(object), Vec::new()),
        Some(BusForm::Sealed(object)) => match key {
            Some(key) => (
                Vec::new(),
                key.seal(&seal::config_about(kind, namespace, name), &json(object)),
            ),
            None => (
                json(&configdata::withheld(object, NO_KEY_AT_WATCHER)),
                Vec::new(),
            ),
        },
    };
    pb::ConfigObject {
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        deleted: form.is_none(),
        resource_version: resource_version.to_string(),
        object_json,
        sealed_object_json,
    }
}

/// What a sealed desired object is about: its trigger and its identity.
fn desired_about(state: &pb::DesiredState, object: &pb::ManagedObject) -> String {
    format!(
        "DesiredState {} {} {}/{}",
        state.event_trigger, object.kind, object.namespace, object.name
    )
}

/// `state` with every Secret's JSON sealed, ready to publish. Without a key a Secret cannot
/// go on the bus: the unit comes back as a failure that names it, with no objects (the
/// applier keeps what exists and the trigger's status shows why).
pub fn seal_desired(mut state: pb::DesiredState, key: Option<&BusKey>) -> pb::DesiredState {
    for index in 0..state.objects.len() {
        if state.objects[index].kind != "Secret" || state.objects[index].object_json.is_empty() {
            continue;
        }
        let Some(key) = key else {
            let object = &state.objects[index];
            let failure = format!(
                "eventtrigger {}: Secret {}/{} cannot go on the bus: {NO_KEY}",
                state.event_trigger, object.namespace, object.name
            );
            return failed(state, failure);
        };
        let about = desired_about(&state, &state.objects[index]);
        let object = &mut state.objects[index];
        object.sealed_object_json = key.seal(&about, &object.object_json);
        object.object_json = Vec::new();
    }
    state
}

/// `state` as a failure with no objects.
fn failed(state: pb::DesiredState, failure_message: String) -> pb::DesiredState {
    pb::DesiredState {
        objects: Vec::new(),
        failure_message,
        ..state
    }
}

/// `state` with every sealed object opened. A unit with an object that does not open (no key,
/// another key) comes back as a failure that names it, with no objects.
pub fn open_desired(mut state: pb::DesiredState, key: Option<&BusKey>) -> pb::DesiredState {
    for index in 0..state.objects.len() {
        if state.objects[index].sealed_object_json.is_empty() {
            continue;
        }
        let about = desired_about(&state, &state.objects[index]);
        let opened = key.map(|key| key.open(&about, &state.objects[index].sealed_object_json));
        match opened {
            Some(Ok(json)) => {
                let object = &mut state.objects[index];
                object.object_json = json;
                object.sealed_object_json = Vec::new();
            }
            unopened => {
                let object = &state.objects[index];
                let reason = if unopened.is_some() {
                    WRONG_KEY
                } else {
                    NO_KEY
                };
                let failure = format!(
                    "eventtrigger {}: {} {}/{}: {reason}",
                    state.event_trigger, object.kind, object.namespace, object.name
                );
                return failed(state, failure);
            }
        }
    }
    state
}

/// Decodes a desired state and opens its sealed objects ([`open_desired`]; one that does not
/// open makes the unit a failure).
pub fn decode_desired(delivered: &Delivered, key: Option<&BusKey>) -> Result<pb::DesiredState> {
    let state = decode::<pb::DesiredState>("DesiredState", delivered)?;
    Ok(open_desired(state, key))
}

/// Follows the configuration stream: the current configuration, and a feed of later updates.
/// Sealed Secrets are opened with `key`; without one (a stage that reads no Secret contents)
/// they arrive as stand-ins that say their contents are withheld.
pub async fn follow_config(bus: &Bus, key: Option<&BusKey>) -> Result<(ConfigState, ConfigFeed)> {
    let (initial, live) = bus
        .follow_state(topology::CONFIG, topology::CONFIG.subjects)
        .await?;
    let mut state = ConfigState::default();
    let mut unreadable = Vec::new();
    for delivered in initial {
        match ConfigUpdate::from_delivered(&delivered, key) {
            Ok(update) => {
                update.apply_to(&mut state);
            }
            Err(error) => {
                tracing::warn!(error = %error, "skipping unreadable config message");
                unreadable.push((delivered, error));
            }
        }
    }
    let key = key.cloned();
    let bus = bus.clone();
    let feed = ConfigFeed { live, key, bus };
    // An unreadable update stored while this process was not following is dead-lettered as
    // one received live is (the same message id: a follower that saw it live stored it once).
    for (delivered, error) in unreadable {
        feed.dead_letter(delivered, &error);
    }
    Ok((state, feed))
}

/// Later configuration updates.
pub struct ConfigFeed {
    live: LiveFeed,
    key: Option<BusKey>,
    /// Where an unreadable update is dead-lettered.
    bus: Bus,
}

impl ConfigFeed {
    /// The next update; `None` when the connection is gone for good.
    pub async fn next(&mut self) -> Option<Result<ConfigUpdate>> {
        use futures::StreamExt;
        let delivered = match self.live.next().await? {
            Ok(delivered) => delivered,
            Err(error) => return Some(Err(Error::Bus(error))),
        };
        let update = ConfigUpdate::from_delivered(&delivered, self.key.as_ref());
        if let Err(error) = &update {
            self.dead_letter(delivered, error);
        }
        Some(update)
    }

    /// Parks an unreadable update on this identity's dead-letter subject, in the background
    /// (the configuration is followed, not acked, so nothing waits for it; a failed dead letter
    /// is only logged). Every follower of one identity derives the same message id from the
    /// update's sequence, so a process with two followers stores the dead letter once.
    fn dead_letter(&self, delivered: Delivered, error: &Error) {
        let bus = self.bus.clone();
        let reason = error.to_string();
        tokio::spawn(async move {
            let id = sluice_bus::message_id(&[
                "dead-config",
                bus.identity(),
                &delivered.sequence.to_string(),
            ]);
            let stored = match bus
                .dead_letter(
                    bus.identity(),
                    &delivered.subject,
                    delivered.payload,
                    &reason,
                    &[("Nats-Msg-Id", id.as_str())],
                )
                .await
            {
                Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = stored {
                tracing::warn!(error = %e, subject = %delivered.subject, "failed to dead-letter a config message");
            }
        });
    }

    /// The next update and every further one already received, up to 256: a stage applies
    /// them all and recomputes once. `None` when the connection is gone for good.
    /// Cancel-safe like [`ConfigFeed::next`].
    pub async fn next_batch(&mut self) -> Option<Vec<Result<ConfigUpdate>>> {
        use futures::FutureExt;
        let mut batch = vec![self.next().await?];
        while batch.len() < 256 {
            match self.next().now_or_never() {
                Some(Some(update)) => batch.push(update),
                _ => break,
            }
        }
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_objects_reference_takes_what_it_has() {
        let reference =
            |api_version: &str, kind: &str, namespace: &str, name: &str| pb::ObjectRef {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: namespace.into(),
                name: name.into(),
            };
        assert_eq!(
            object_ref(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": "projectsveltos", "name": "a/b~c"}})),
            reference("v1", "ConfigMap", "projectsveltos", "a/b~c")
        );
        assert_eq!(
            object_ref(
                &serde_json::json!({"apiVersion": "config.projectsveltos.io/v1beta1",
                "kind": "ClusterProfile", "metadata": {"name": "p"}})
            ),
            reference(
                "config.projectsveltos.io/v1beta1",
                "ClusterProfile",
                "",
                "p"
            )
        );
        assert_eq!(
            object_ref(&serde_json::json!({"kind": 3, "metadata": "x"})),
            reference("", "", "", "")
        );
    }

    #[test]
    fn cluster_refs_round_trip() {
        for cluster_type in [ClusterType::Sveltos, ClusterType::Capi] {
            let id = ClusterId {
                cluster_type,
                namespace: "ns".into(),
                name: "n".into(),
            };
            let r = cluster_ref(&id);
            assert_eq!(cluster_id(Some(&r), "s").expect("id"), id);
        }
        assert!(cluster_id(None, "s").is_err());
        assert!(cluster_id(Some(&pb::ClusterRef::default()), "s").is_err());
    }

    fn delivered(message: &pb::ConfigObject) -> Delivered {
        Delivered {
            subject: "s".into(),
            sequence: 1,
            payload: encode(message),
            traceparent: None,
        }
    }

    #[test]
    fn secrets_travel_sealed_and_open_only_with_the_key() {
        let secret = serde_json::json!({"kind": "Secret", "type": configdata::CLUSTER_PROFILE_SECRET_TYPE,
            "metadata": {"namespace": "ns", "name": "s", "resourceVersion": "3"},
            "data": {"k": "dG9wLXNlY3JldA=="}});
        let form = configdata::bus_form(configdata::DataKind::Secret, &secret);
        let key = BusKey::from_bytes(&[1; 32]).expect("key");
        let other = BusKey::from_bytes(&[2; 32]).expect("key");
        let message = config_message("Secret", "ns", "s", "3", Some(&form), Some(&key));
        assert!(message.object_json.is_empty());
        let bytes = encode(&message);
        assert!(!bytes.windows(8).any(|w| w == b"dG9wLXNl"));
        let read = |key: Option<&BusKey>| {
            ConfigUpdate::from_delivered(&delivered(&message), key)
                .expect("decodes")
                .object
                .expect("present")
        };
        assert_eq!(read(Some(&key)), secret);
        let stand_in = read(Some(&other));
        assert_eq!(configdata::withheld_reason(&stand_in), Some(WRONG_KEY));
        assert_eq!(stand_in.get("data"), None);
        assert_eq!(
            configdata::withheld_reason(&read(None)),
            Some(NO_KEY),
            "a stage without the key sees a stand-in"
        );
        // The watcher without a key publishes the stand-in itself, never the contents.
        let unkeyed = config_message("Secret", "ns", "s", "3", Some(&form), None);
        assert!(unkeyed.sealed_object_json.is_empty());
        let object: Value = serde_json::from_slice(&unkeyed.object_json).expect("json");
        assert_eq!(
            configdata::withheld_reason(&object),
            Some(NO_KEY_AT_WATCHER)
        );
        assert_eq!(object.get("data"), None);
        // A deletion carries nothing.
        let deleted = config_message("Secret", "ns", "s", "4", None, Some(&key));
        assert!(
            deleted.deleted
                && deleted.object_json.is_empty()
                && deleted.sealed_object_json.is_empty()
        );
    }

    #[test]
    fn desired_secrets_travel_sealed_and_a_unit_that_cannot_seal_or_open_fails() {
        let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"namespace": "projectsveltos", "name": "copy"}, "data": {"k": "dG9wLXNlY3JldA=="}});
        let profile = serde_json::json!({"kind": "ClusterProfile", "metadata": {"name": "p"}});
        let managed = |object: &Value| pb::ManagedObject {
            kind: object["kind"].as_str().unwrap_or("").into(),
            namespace: object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .into(),
            name: object["metadata"]["name"].as_str().unwrap_or("").into(),
            object_json: serde_json::to_vec(object).expect("json"),
            ..Default::default()
        };
        let state = pb::DesiredState {
            event_trigger: "t".into(),
            objects: vec![managed(&secret), managed(&profile)],
            ..Default::default()
        };
        let key = BusKey::from_bytes(&[1; 32]).expect("key");
        let sealed = seal_desired(state.clone(), Some(&key));
        let bytes = encode(&sealed);
        assert!(!bytes.windows(8).any(|w| w == b"dG9wLXNl"));
        assert!(sealed.objects[0].object_json.is_empty());
        assert_eq!(
            sealed.objects[1], state.objects[1],
            "only Secrets are sealed"
        );
        assert_eq!(open_desired(sealed.clone(), Some(&key)), state);
        let other = BusKey::from_bytes(&[2; 32]).expect("key");
        for (key, reason) in [(Some(&other), WRONG_KEY), (None, NO_KEY)] {
            let failed = open_desired(sealed.clone(), key);
            assert!(failed.objects.is_empty());
            assert_eq!(
                failed.failure_message,
                format!("eventtrigger t: Secret projectsveltos/copy: {reason}")
            );
        }
        let unkeyed = seal_desired(state, None);
        assert!(unkeyed.objects.is_empty());
        assert!(unkeyed
            .failure_message
            .contains("Secret projectsveltos/copy cannot go on the bus"));
    }
}
