//! Adoption of what event-manager generated before sluice took over (docs/operating.md,
//! "Hand over"; ADR 0024). event-manager names a ClusterProfile and an instantiated
//! ConfigMap/Secret `sveltos-` + 20 random characters and finds it again by its labels; sluice
//! derives the same kind of name from the labels (ADR 0004). Left alone, sluice would create a
//! second object next to event-manager's — two ClusterProfiles deploying the same add-on — and
//! delete the first. Instead a desired object takes the name of the existing object that is
//! the same thing (same kind, namespace and identity labels), and ClusterProfiles point at the
//! adopted names of the ConfigMaps/Secrets they reference. Pure: objects in, objects out.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use sha2::{Digest as _, Sha256};
use sluice_domain::naming;

/// The labels that say which object of a (trigger, cluster) something is, as event-manager looks
/// it up (spec §6.3, §6.4): the base labels before `eventsourcename` is added, and the
/// resource's or CloudEvent's labels.
const IDENTITY: [&str; 9] = [
    naming::LABEL_EVENT_TRIGGER,
    naming::LABEL_CLUSTER_NAMESPACE,
    naming::LABEL_CLUSTER_NAME,
    naming::LABEL_CLUSTER_TYPE,
    naming::LABEL_EVENT_REPORT,
    naming::LABEL_RESOURCE_NAMESPACE,
    naming::LABEL_RESOURCE_NAME,
    naming::LABEL_CE_SOURCE,
    naming::LABEL_CE_SUBJECT,
];

/// An instantiated ConfigMap/Secret is also told apart by the object it was rendered from. (A
/// ClusterProfile of event-manager may carry these too, from a label map it shares with the
/// last instantiated reference: they do not identify a ClusterProfile.)
const REFERENCE: [&str; 2] = [naming::LABEL_REF_NAMESPACE, naming::LABEL_REF_NAME];

/// What the applier found in the management cluster for a (trigger, cluster).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owned {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl Owned {
    /// An object as listed; `kind` is the listed kind (list items may omit it).
    pub(crate) fn of(kind: &str, object: &Value) -> Owned {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Owned {
            kind: kind.to_string(),
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name"),
            labels: labels_of(object),
        }
    }
}

fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// Whether `name` has the form of a generated name, sluice's or event-manager's: `sveltos-` and
/// 20 characters of `[0-9a-z]`. Other names come from the user (`profileNameFormat`, a
/// generator's `nameFormat`) and are the same under both.
fn is_generated(name: &str) -> bool {
    name.strip_prefix("sveltos-").is_some_and(|suffix| {
        suffix.len() == 20
            && suffix
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    })
}

/// The identity of an object of `kind` with `labels`: each identity label's value or absence.
fn identity<'a>(kind: &str, labels: &'a BTreeMap<String, String>) -> Vec<Option<&'a String>> {
    let keys = IDENTITY.iter().chain(if kind == "ClusterProfile" {
        [].iter()
    } else {
        REFERENCE.iter()
    });
    keys.map(|key| labels.get(*key)).collect()
}

/// The existing objects with generated names by identity, so that adopting one desired state
/// looks at its own candidates, not at every object of the pair (a pair may hold thousands).
/// Kept for as long as the pair is, so compact: an identity's digest and each candidate's name
/// (its kind, namespace and identity labels are the identity's), about a hundred bytes per
/// object instead of its whole label map.
#[derive(Debug, Default)]
pub(crate) struct Adoptable {
    by_identity: HashMap<[u8; 32], Vec<Box<str>>>,
}

/// SHA-256 of an identity: kind, namespace and each identity label's value or absence.
fn identity_digest(kind: &str, namespace: &str, labels: &BTreeMap<String, String>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in [kind, namespace] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    for value in identity(kind, labels) {
        match value {
            Some(value) => {
                hasher.update([1]);
                hasher.update((value.len() as u64).to_be_bytes());
                hasher.update(value.as_bytes());
            }
            None => hasher.update([0]),
        }
    }
    hasher.finalize().into()
}

impl Adoptable {
    #[cfg(test)]
    pub(crate) fn new(existing: impl IntoIterator<Item = Owned>) -> Adoptable {
        let mut adoptable = Adoptable::default();
        for owned in existing {
            adoptable.add(owned);
        }
        adoptable
    }

    /// Takes what another snapshot (of another kind) found.
    pub(crate) fn extend(&mut self, other: Adoptable) {
        for (identity, names) in other.by_identity {
            self.by_identity.entry(identity).or_default().extend(names);
        }
    }

    /// Takes one more existing object (a listing, a page at a time).
    pub(crate) fn add(&mut self, owned: Owned) {
        if is_generated(&owned.name) {
            self.by_identity
                .entry(identity_digest(
                    &owned.kind,
                    &owned.namespace,
                    &owned.labels,
                ))
                .or_default()
                .push(owned.name.into_boxed_str());
        }
    }

    /// [`adopt`] over the existing objects that are the same thing as a desired one: each
    /// candidate stands for the existing object with its name and the desired one's identity.
    pub(crate) fn adopt(&self, desired: Vec<Value>) -> Vec<Value> {
        let mut seen = HashSet::new();
        let mut candidates = Vec::new();
        for object in &desired {
            let own = Owned::of(
                object.get("kind").and_then(Value::as_str).unwrap_or(""),
                object,
            );
            let key = identity_digest(&own.kind, &own.namespace, &own.labels);
            if let Some(found) = self.by_identity.get(&key) {
                if seen.insert(key) {
                    candidates.extend(found.iter().map(|name| Owned {
                        name: name.to_string(),
                        ..own.clone()
                    }));
                }
            }
        }
        adopt(desired, &candidates)
    }
}

/// Renames each desired object with a generated name to the existing object that is the same
/// thing and also has a generated name: same kind, same namespace, same identity labels. When
/// several exist (event-manager can leave duplicates), the object keeps its own name if one of
/// them has it, else takes the first in name order; the others are not desired and are
/// removed as before. ClusterProfiles' references to renamed ConfigMaps/Secrets follow.
pub(crate) fn adopt(desired: Vec<Value>, existing: &[Owned]) -> Vec<Value> {
    let mut renamed: Vec<(String, String, String, String)> = Vec::new();
    let mut taken: Vec<&Owned> = Vec::new();
    let mut out: Vec<Value> = desired
        .into_iter()
        .map(|mut object| {
            let own = Owned::of(
                object.get("kind").and_then(Value::as_str).unwrap_or(""),
                &object,
            );
            if !is_generated(&own.name) || own.labels.contains_key(naming::LABEL_FROM_GENERATOR) {
                return object;
            }
            let wanted = identity(&own.kind, &own.labels);
            let mut same: Vec<&Owned> = existing
                .iter()
                .filter(|e| {
                    e.kind == own.kind
                        && e.namespace == own.namespace
                        && is_generated(&e.name)
                        && !taken.contains(e)
                        && identity(&e.kind, &e.labels) == wanted
                })
                .collect();
            same.sort_by(|a, b| a.name.cmp(&b.name));
            let chosen = same
                .iter()
                .find(|e| e.name == own.name)
                .or_else(|| same.first())
                .copied();
            if let Some(chosen) = chosen {
                taken.push(chosen);
                if chosen.name != own.name {
                    object["metadata"]["name"] = Value::from(chosen.name.clone());
                    renamed.push((own.kind, own.namespace, own.name, chosen.name.clone()));
                }
            }
            object
        })
        .collect();
    for object in out
        .iter_mut()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ClusterProfile"))
    {
        if let Some(spec) = object.get_mut("spec") {
            for (kind, namespace, from, to) in &renamed {
                repoint(spec, kind, namespace, from, to);
            }
        }
    }
    out
}

/// Points every reference `{kind, namespace, name}` in `value` (policyRefs, valuesFrom, at any
/// depth) from `from` to `to`.
fn repoint(value: &mut Value, kind: &str, namespace: &str, from: &str, to: &str) {
    match value {
        Value::Object(map) => {
            let is_reference = map.get("kind").and_then(Value::as_str) == Some(kind)
                && map.get("namespace").and_then(Value::as_str) == Some(namespace)
                && map.get("name").and_then(Value::as_str) == Some(from);
            if is_reference {
                map.insert("name".into(), Value::from(to));
            }
            for child in map.values_mut() {
                repoint(child, kind, namespace, from, to);
            }
        }
        Value::Array(items) => {
            for item in items {
                repoint(item, kind, namespace, from, to);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SLUICE_CP: &str = "sveltos-0123456789abcdefghij";
    const SLUICE_CM: &str = "sveltos-kkkkkkkkkkkkkkkkkkkk";
    const MANAGER_CP: &str = "sveltos-zq3x9w1m2n4b5v6c7x8l";
    const MANAGER_CM: &str = "sveltos-a1b2c3d4e5f6g7h8i9j0";

    fn base(resource: &str) -> BTreeMap<String, String> {
        [
            (naming::LABEL_EVENT_TRIGGER, "service-network-policy"),
            (naming::LABEL_CLUSTER_NAMESPACE, "default"),
            (naming::LABEL_CLUSTER_NAME, "cluster-a"),
            (naming::LABEL_CLUSTER_TYPE, "Sveltos"),
            (naming::LABEL_EVENT_REPORT, "sveltos-service"),
            (naming::LABEL_EVENT_SOURCE, "sveltos-service"),
            (naming::LABEL_RESOURCE_NAMESPACE, "default"),
            (naming::LABEL_RESOURCE_NAME, resource),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn with_ref(mut labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
        labels.insert(naming::LABEL_REF_NAMESPACE.into(), "default".into());
        labels.insert(naming::LABEL_REF_NAME.into(), "network-policy".into());
        labels
    }

    fn profile(name: &str, labels: &BTreeMap<String, String>, config_map: &str) -> Value {
        json!({"apiVersion": "config.projectsveltos.io/v1beta1", "kind": "ClusterProfile",
               "metadata": {"name": name, "labels": labels},
               "spec": {"policyRefs": [{"kind": "ConfigMap", "namespace": "projectsveltos", "name": config_map}],
                        "helmCharts": [{"valuesFrom": [{"kind": "ConfigMap", "namespace": "projectsveltos", "name": config_map}]}]}})
    }

    fn config_map(name: &str, labels: &BTreeMap<String, String>) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "projectsveltos", "labels": labels},
               "data": {"networkpolicy.yaml": "kind: NetworkPolicy"}})
    }

    fn owned(objects: &[Value]) -> Vec<Owned> {
        objects
            .iter()
            .map(|o| Owned::of(o["kind"].as_str().unwrap_or(""), o))
            .collect()
    }

    fn names(objects: &[Value]) -> Vec<&str> {
        objects
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or(""))
            .collect()
    }

    fn desired() -> Vec<Value> {
        vec![
            config_map(SLUICE_CM, &with_ref(base("my-service"))),
            profile(SLUICE_CP, &base("my-service"), SLUICE_CM),
        ]
    }

    #[test]
    fn the_index_adopts_as_a_scan_of_everything_does() {
        let mut existing = owned(&[
            config_map(MANAGER_CM, &with_ref(base("my-service"))),
            profile(MANAGER_CP, &with_ref(base("my-service")), MANAGER_CM),
            profile(
                "sveltos-00000000000000000000",
                &base("my-service"),
                MANAGER_CM,
            ),
            profile("user-named", &base("my-service"), MANAGER_CM),
        ]);
        for i in 0..50 {
            let other = format!("other-{i}");
            existing.extend(owned(&[
                config_map(&format!("sveltos-{i:020}"), &with_ref(base(&other))),
                profile(
                    &format!("sveltos-{:020}", i + 100),
                    &base(&other),
                    MANAGER_CM,
                ),
            ]));
        }
        let index = Adoptable::new(existing.clone());
        // As listed a kind at a time: the ConfigMaps, then the ClusterProfiles.
        let mut by_kind = Adoptable::default();
        for kind in ["ConfigMap", "ClusterProfile"] {
            by_kind.extend(Adoptable::new(
                existing.iter().filter(|o| o.kind == kind).cloned(),
            ));
        }
        for wanted in [desired(), vec![desired()[1].clone()], Vec::new()] {
            assert_eq!(
                index.adopt(wanted.clone()),
                adopt(wanted.clone(), &existing)
            );
            assert_eq!(by_kind.adopt(wanted.clone()), adopt(wanted, &existing));
        }
        assert_eq!(
            names(&index.adopt(desired())),
            [MANAGER_CM, "sveltos-00000000000000000000"],
            "of two the same, the first in name order"
        );
    }

    #[test]
    fn takes_event_managers_names_and_repoints_the_profile() {
        // event-manager's profile also carries the reference labels (its shared label map)
        let existing = owned(&[
            config_map(MANAGER_CM, &with_ref(base("my-service"))),
            profile(MANAGER_CP, &with_ref(base("my-service")), MANAGER_CM),
        ]);
        let adopted = adopt(desired(), &existing);
        assert_eq!(names(&adopted), [MANAGER_CM, MANAGER_CP]);
        assert_eq!(adopted[1]["spec"]["policyRefs"][0]["name"], MANAGER_CM);
        assert_eq!(
            adopted[1]["spec"]["helmCharts"][0]["valuesFrom"][0]["name"],
            MANAGER_CM
        );
    }

    #[test]
    fn what_is_not_the_same_thing_is_not_adopted() {
        let cases: Vec<(&str, Vec<Value>)> = vec![
            ("nothing exists", vec![]),
            (
                "another resource's objects",
                vec![
                    config_map(MANAGER_CM, &with_ref(base("other"))),
                    profile(MANAGER_CP, &base("other"), MANAGER_CM),
                ],
            ),
            (
                "a ConfigMap rendered from another source, in another namespace",
                vec![config_map(MANAGER_CM, &base("my-service")), {
                    let mut cm = config_map(MANAGER_CP, &with_ref(base("my-service")));
                    cm["metadata"]["namespace"] = json!("default");
                    cm
                }],
            ),
            (
                "names that are not generated (profileNameFormat, nameFormat)",
                vec![
                    config_map("my-config", &with_ref(base("my-service"))),
                    profile("my-profile", &base("my-service"), "my-config"),
                ],
            ),
        ];
        for (case, existing) in cases {
            let adopted = adopt(desired(), &owned(&existing));
            assert_eq!(adopted, desired(), "{case}");
        }
    }

    #[test]
    fn its_own_name_wins_and_user_names_stay() {
        let existing = owned(&[
            profile(MANAGER_CP, &base("my-service"), MANAGER_CM),
            profile(SLUICE_CP, &base("my-service"), SLUICE_CM),
        ]);
        assert_eq!(adopt(desired(), &existing), desired());
        // of two duplicates, the first by name; a name the user gave is never changed
        let duplicates = owned(&[
            profile(MANAGER_CP, &base("my-service"), MANAGER_CM),
            profile(
                "sveltos-00000000000000000000",
                &base("my-service"),
                MANAGER_CM,
            ),
        ]);
        let adopted = adopt(desired(), &duplicates);
        assert_eq!(names(&adopted)[1], "sveltos-00000000000000000000");
        let named = vec![profile("my-profile", &base("my-service"), SLUICE_CM)];
        assert_eq!(adopt(named.clone(), &duplicates), named);
    }

    #[test]
    fn generator_outputs_and_two_desired_objects_never_share_a_name() {
        let mut generated = with_ref(base("my-service"));
        generated.insert(naming::LABEL_FROM_GENERATOR.into(), "ok".into());
        let output = config_map(SLUICE_CM, &generated);
        let existing = owned(&[config_map(MANAGER_CM, &generated)]);
        assert_eq!(adopt(vec![output.clone()], &existing), vec![output]);

        let one = owned(&[profile(MANAGER_CP, &base("my-service"), MANAGER_CM)]);
        let twice = vec![
            profile(SLUICE_CP, &base("my-service"), SLUICE_CM),
            profile(
                "sveltos-11111111111111111111",
                &base("my-service"),
                SLUICE_CM,
            ),
        ];
        assert_eq!(
            names(&adopt(twice, &one)),
            [MANAGER_CP, "sveltos-11111111111111111111"]
        );
    }
}
