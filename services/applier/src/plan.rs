//! The applier's pure part: desired objects and what a unit is known to hold (with the content
//! hashes last applied) in, an apply plan out: only the objects whose content changed are
//! applied, referenced ConfigMaps/Secrets before the ClusterProfiles that point at them; stale
//! ClusterProfiles are deleted before the objects they referenced.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_domain::cluster::ClusterId;
use sluice_domain::naming;
use sluice_proto::v1 as pb;
use sluice_wire::unit::{Unit, UnitKey};

/// Kinds the applier owns, in deletion order (ClusterProfiles before what they reference).
pub const OWNED: [(&str, &str); 3] = [
    ("config.projectsveltos.io/v1beta1", "ClusterProfile"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
];

/// The annotation on every object the applier writes that names the subject of the desired
/// state it comes from, so that an object deleted by hand is written again from its unit's
/// latest desired state (ADR 0039), also after a restart.
pub const DESIRED_SUBJECT_ANNOTATION: &str = "sluice.io/desired-subject";

/// The desired-state subject an object names in its [`DESIRED_SUBJECT_ANNOTATION`], when it
/// names one that is a desired unit's subject (no wildcard, no stream beyond its unit).
pub fn desired_subject_of(object: &Value) -> Option<String> {
    let subject = object
        .pointer("/metadata/annotations")?
        .get(DESIRED_SUBJECT_ANNOTATION)?
        .as_str()?;
    sluice_bus::topology::is_desired_unit_subject(subject).then(|| subject.to_string())
}

/// (kind, namespace, name) of an owned object.
pub type ObjectId = (String, String, String);

/// What a unit is known to hold: each owned object with the content hash last applied (empty
/// when only listed, so that it is applied again once).
pub type Known = BTreeMap<ObjectId, String>;

/// What to do, in order.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub apply: Vec<Value>,
    /// The content hash of each object of `apply`, in its order: what the unit is known to
    /// hold once it is applied.
    pub hashes: Vec<String>,
    pub delete: Vec<pb::ObjectRef>,
}

pub fn object_id(object: &Value) -> ObjectId {
    let r = sluice_wire::object_ref(object);
    (r.kind, r.namespace, r.name)
}

/// (kind, namespace, name) of an owned object's reference.
pub fn ref_id(r: &pb::ObjectRef) -> ObjectId {
    (r.kind.clone(), r.namespace.clone(), r.name.clone())
}

/// The hash of an object as applied: an unchanged one is not applied again.
pub fn content_hash(object: &Value) -> String {
    let bytes = serde_json::to_vec(object).unwrap_or_default();
    sluice_bus::content_id(&bytes)
}

fn rank(kind: &str) -> u8 {
    if kind == "ClusterProfile" {
        1
    } else {
        0
    }
}

/// Plans the writes: every desired object whose content differs from what is known to be
/// applied (server-side apply is idempotent), references before profiles; and every known
/// object not desired, profiles before what they reference.
pub fn plan(desired: &[Value], known: &Known) -> Plan {
    let mut wanted = std::collections::BTreeSet::new();
    let mut changed: Vec<(Value, String)> = Vec::new();
    for object in desired {
        let id = object_id(object);
        let hash = content_hash(object);
        if known.get(&id) != Some(&hash) {
            changed.push((object.clone(), hash));
        }
        wanted.insert(id);
    }
    changed.sort_by_key(|(o, _)| rank(o.get("kind").and_then(Value::as_str).unwrap_or("")));
    let (apply, hashes) = changed.into_iter().unzip();
    let mut delete = object_refs(known.keys().filter(|id| !wanted.contains(*id)));
    delete.sort_by_key(|r| std::cmp::Reverse(rank(&r.kind)));
    Plan {
        apply,
        hashes,
        delete,
    }
}

/// The references of owned objects, their apiVersion from [`OWNED`].
pub fn object_refs<'a>(ids: impl IntoIterator<Item = &'a ObjectId>) -> Vec<pb::ObjectRef> {
    ids.into_iter()
        .map(|(kind, namespace, name)| pb::ObjectRef {
            api_version: OWNED
                .iter()
                .find(|(_, k)| k == kind)
                .map_or("v1", |(a, _)| *a)
                .to_string(),
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
        })
        .collect()
}

/// The objects a desired state wants (none when it is removed), each annotated with its unit's
/// subject ([`DESIRED_SUBJECT_ANNOTATION`]); an object that does not decode is an error that
/// says which one, for the trigger's status and EventReport.
pub fn desired_objects(state: &pb::DesiredState) -> Result<Vec<Value>, String> {
    if state.removed {
        return Ok(Vec::new());
    }
    let subject = UnitKey::of(state)
        .map_err(|e| format!("eventtrigger {}: {e}", state.event_trigger))?
        .desired_subject();
    state
        .objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut object: Value = serde_json::from_slice(&o.object_json).map_err(|e| {
                format!(
                    "eventtrigger {}: desired object {i} is not valid JSON: {e}",
                    state.event_trigger
                )
            })?;
            annotate(&mut object, &subject).map_err(|what| {
                format!(
                    "eventtrigger {}: desired object {i} is not an object with metadata: {what}",
                    state.event_trigger
                )
            })?;
            Ok(object)
        })
        .collect()
}

/// Puts the unit's subject in an object's annotations.
fn annotate(object: &mut Value, subject: &str) -> Result<(), &'static str> {
    let Some(map) = object.as_object_mut() else {
        return Err("not a JSON object");
    };
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(metadata) = metadata.as_object_mut() else {
        return Err("metadata is not an object");
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if annotations.is_null() {
        *annotations = Value::Object(Default::default());
    }
    let Some(annotations) = annotations.as_object_mut() else {
        return Err("metadata.annotations is not an object");
    };
    annotations.insert(
        DESIRED_SUBJECT_ANNOTATION.to_string(),
        Value::String(subject.to_string()),
    );
    Ok(())
}

/// Which of the management cluster's objects a desired state's unit owns: those carrying the
/// owner labels of its trigger and cluster plus its unit's labels (the LIST's label selector).
/// The main unit does not own what carries another unit's labels, except when it is removed:
/// then everything of the trigger and cluster goes.
#[derive(Debug)]
pub struct Owner {
    labels: BTreeMap<String, String>,
    include_other_units: bool,
    /// A cluster-scoped resource's unit: its labels name no namespace, so the selector also
    /// picks a namespaced resource of the same name, which is not this unit's.
    cluster_scoped_resource: bool,
}

impl Owner {
    pub fn of(state: &pb::DesiredState, cluster: &ClusterId) -> Owner {
        let key = UnitKey {
            event_trigger: state.event_trigger.clone(),
            cluster: cluster.clone(),
            unit: Unit::of(state),
        };
        let unit = &key.unit;
        Owner {
            labels: key.owner_labels(),
            include_other_units: state.removed || *unit != Unit::Main,
            cluster_scoped_resource: matches!(unit, Unit::Resource { namespace, .. } if namespace.is_empty()),
        }
    }

    /// The label selector that lists the unit's objects.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// Whether the unit owns `object`.
    pub fn owns(&self, object: &Value) -> bool {
        self.labels
            .iter()
            .all(|(key, value)| label(object, key) == Some(value.as_str()))
            && (self.include_other_units || !in_own_unit(object))
            && !(self.cluster_scoped_resource
                && label(object, naming::LABEL_RESOURCE_NAMESPACE).is_some())
    }
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(key))
        .and_then(Value::as_str)
}

/// Whether an object of a (trigger, cluster) belongs to a unit other than the main one: what a
/// CloudEvent created, or what one resource of a `oneForEvent` trigger renders to.
fn in_own_unit(object: &Value) -> bool {
    [naming::LABEL_CE_SOURCE, naming::LABEL_RESOURCE_NAME]
        .iter()
        .any(|key| label(object, key).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(api_version: &str, k: &str, ns: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": k, "metadata": {"namespace": ns, "name": name}})
    }

    fn listed(objects: &[Value]) -> Known {
        objects
            .iter()
            .map(|o| (object_id(o), String::new()))
            .collect()
    }

    #[test]
    fn applies_references_first_and_deletes_profiles_first() {
        let desired = vec![
            obj(
                "config.projectsveltos.io/v1beta1",
                "ClusterProfile",
                "",
                "sveltos-a",
            ),
            obj("v1", "ConfigMap", "projectsveltos", "sveltos-b"),
        ];
        let existing = listed(&[
            obj("v1", "ConfigMap", "projectsveltos", "old-cm"),
            obj(
                "config.projectsveltos.io/v1beta1",
                "ClusterProfile",
                "",
                "old-cp",
            ),
            obj(
                "config.projectsveltos.io/v1beta1",
                "ClusterProfile",
                "",
                "sveltos-a",
            ),
        ]);
        let p = plan(&desired, &existing);
        let applied: Vec<_> = p
            .apply
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(applied, ["ConfigMap", "ClusterProfile"]);
        let deleted: Vec<_> = p
            .delete
            .iter()
            .map(|r| (r.api_version.as_str(), r.name.as_str()))
            .collect();
        assert_eq!(
            deleted,
            [
                ("config.projectsveltos.io/v1beta1", "old-cp"),
                ("v1", "old-cm")
            ]
        );
    }

    #[test]
    fn nothing_desired_deletes_everything_owned() {
        let existing = listed(&[obj("v1", "Secret", "projectsveltos", "s")]);
        let p = plan(&[], &existing);
        assert!(p.apply.is_empty());
        assert_eq!(p.delete.len(), 1);
        assert_eq!(p.delete[0].kind, "Secret");
    }

    #[test]
    fn an_object_applied_with_the_same_content_is_not_applied_again() {
        let same = obj("v1", "ConfigMap", "projectsveltos", "same");
        let changed = obj("v1", "ConfigMap", "projectsveltos", "changed");
        let mut known = listed(std::slice::from_ref(&changed));
        known.insert(object_id(&same), content_hash(&same));
        let p = plan(&[same, changed.clone()], &known);
        assert_eq!(p.hashes, vec![content_hash(&changed)]);
        assert_eq!(p.apply, vec![changed], "listed objects are applied once");
        assert!(p.delete.is_empty());
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn an_object_that_does_not_decode_is_an_error_that_says_which() {
        let object = |json: &[u8]| pb::ManagedObject {
            object_json: json.to_vec(),
            ..Default::default()
        };
        let cluster = ClusterId {
            cluster_type: sluice_domain::cluster::ClusterType::Sveltos,
            namespace: "default".into(),
            name: "cluster-a".into(),
        };
        let mut state = pb::DesiredState {
            event_trigger: "service-network-policy".into(),
            cluster: Some(sluice_wire::cluster_ref(&cluster)),
            resource_namespace: "default".into(),
            resource_name: "web".into(),
            objects: vec![
                object(br#"{"kind": "ConfigMap", "metadata": {"annotations": {"a": "b"}}}"#),
                object(br#"{"kind": "ConfigMap", "metadata": {"annotations": null}}"#),
                object(br#"{"kind": "#),
            ],
            ..Default::default()
        };
        assert_eq!(
            desired_objects(&state),
            Err(
                "eventtrigger service-network-policy: desired object 2 is not valid JSON: \
                 EOF while parsing a value at line 1 column 9"
                    .to_string()
            )
        );
        state.objects.pop();
        // each object names the subject of its unit
        let subject =
            "sluice.v1.desired.service-network-policy.sveltos.default.cluster-a.r.default.web";
        let objects = desired_objects(&state).unwrap();
        assert_eq!(
            objects,
            [
                json!({"kind": "ConfigMap", "metadata": {"annotations": {"a": "b", DESIRED_SUBJECT_ANNOTATION: subject}}}),
                json!({"kind": "ConfigMap", "metadata": {"annotations": {DESIRED_SUBJECT_ANNOTATION: subject}}}),
            ]
        );
        assert_eq!(desired_subject_of(&objects[0]).as_deref(), Some(subject));
        let mut wild = objects[0].clone();
        wild["metadata"]["annotations"][DESIRED_SUBJECT_ANNOTATION] =
            json!("sluice.v1.desired.service-network-policy.>");
        assert_eq!(desired_subject_of(&wild), None, "no filter is read");
        state.objects.push(object(br#"["not", "an", "object"]"#));
        assert_eq!(
            desired_objects(&state),
            Err(
                "eventtrigger service-network-policy: desired object 2 is not an object with \
                 metadata: not a JSON object"
                    .to_string()
            )
        );
        state.objects.pop();
        state.cluster = None;
        assert!(
            desired_objects(&state).is_err(),
            "a state naming no cluster names no subject"
        );
        state.removed = true;
        assert_eq!(
            desired_objects(&state),
            Ok(Vec::new()),
            "a removal wants nothing"
        );
    }

    #[test]
    fn a_unit_owns_its_labelled_objects_and_a_removed_main_unit_owns_all_of_the_pair() {
        use sluice_domain::cluster::ClusterType;
        let cluster = ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "fleet".into(),
            name: "a".into(),
        };
        let labelled = |extra: BTreeMap<String, String>| {
            let mut labels = naming::owner_labels("t", &cluster);
            labels.extend(extra);
            json!({"kind": "ConfigMap", "metadata": {"labels": labels}})
        };
        let main = labelled(BTreeMap::new());
        let web = labelled(naming::resource_labels("default", "web"));
        let cluster_web = labelled(naming::resource_labels("", "web"));
        let event = labelled(naming::cloud_event_labels("auth", "alice"));
        let foreign = json!({"kind": "ConfigMap", "metadata": {"labels": naming::owner_labels("other", &cluster)}});
        let state = |removed: bool, namespace: &str, name: &str| pb::DesiredState {
            event_trigger: "t".into(),
            removed,
            resource_namespace: namespace.into(),
            resource_name: name.into(),
            ..Default::default()
        };
        let owned = |state: &pb::DesiredState| {
            let owner = Owner::of(state, &cluster);
            [&main, &web, &cluster_web, &event, &foreign]
                .iter()
                .map(|o| owner.owns(o))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            owned(&state(false, "", "")),
            [true, false, false, false, false]
        );
        assert_eq!(owned(&state(true, "", "")), [true, true, true, true, false]);
        assert_eq!(
            owned(&state(false, "default", "web")),
            [false, true, false, false, false]
        );
        assert_eq!(
            owned(&state(true, "", "web")),
            [false, false, true, false, false]
        );
    }
}
