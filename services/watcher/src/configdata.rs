//! The management cluster's ConfigMaps and Secrets on `SLUICE_CONFIG`: exactly those some
//! EventTrigger makes the renderer read (`sluice_domain::configdata::References`), each in the
//! form it may travel in (a Secret's contents sealed with the bus key). The watcher keeps every
//! ConfigMap and Secret in its own state (it reads kubeconfigs from there); this decides which
//! of them the bus carries, and withdraws one that stops being referenced or is deleted: its
//! subject gets a deletion that expires (`topology::CONFIG_TOMBSTONE_TTL`). What an earlier run
//! published is read back at start, so what is no longer referenced is withdrawn then too.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use sluice_bus::{message_id, topology, Bus, Delivered, Outgoing};
use sluice_domain::config::ConfigState;
use sluice_domain::configdata::{self, BusForm, DataKind, References};
use sluice_proto::v1 as pb;
use sluice_runtime::{Counter, Health};
use sluice_wire::BusKey;

use crate::sent::{self, Sent};

/// (kind, namespace, name) of a ConfigMap or Secret.
type Key = (DataKind, String, String);

/// The form an object has on the stream, as far as deciding whether to republish it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// A ConfigMap, or a Secret's metadata without contents.
    Plain,
    Sealed,
    /// A stand-in saying the contents are withheld (no bus key).
    Withheld,
    /// A Secret in clear (what an earlier version published) or sealed with another key:
    /// always replaced.
    Stale,
}

/// What the stream holds for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    resource_version: String,
    form: Form,
}

/// One thing to do to the stream.
#[derive(Debug, PartialEq)]
enum Step {
    Publish {
        key: Key,
        resource_version: String,
        form: BusForm,
    },
    Withdraw {
        key: Key,
    },
}

/// What the stream must change so that it holds exactly the referenced objects of `state`, each
/// in its current form. `keyed`: whether Secrets can be sealed (otherwise they are withheld).
fn plan(
    state: &ConfigState,
    references: &References,
    held: &HashMap<Key, Held>,
    keyed: bool,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut wanted: BTreeSet<Key> = BTreeSet::new();
    let objects = [
        (DataKind::ConfigMap, &state.config_maps),
        (DataKind::Secret, &state.secrets),
    ];
    for (kind, map) in objects {
        for ((namespace, name), object) in map {
            if !references.needs(kind, namespace, name) {
                continue;
            }
            let key = (kind, namespace.clone(), name.clone());
            let form = configdata::bus_form(kind, object);
            let resource_version = object
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let now = Held {
                resource_version: resource_version.clone(),
                form: match &form {
                    BusForm::Plain(_) => Form::Plain,
                    BusForm::Sealed(_) if keyed => Form::Sealed,
                    BusForm::Sealed(_) => Form::Withheld,
                },
            };
            if held.get(&key) != Some(&now) {
                steps.push(Step::Publish {
                    key: key.clone(),
                    resource_version,
                    form,
                });
            }
            wanted.insert(key);
        }
    }
    let mut gone: Vec<&Key> = held.keys().filter(|key| !wanted.contains(*key)).collect();
    gone.sort();
    steps.extend(
        gone.into_iter()
            .map(|key| Step::Withdraw { key: key.clone() }),
    );
    steps
}

/// What the stream holds for a config message of a ConfigMap or Secret, if it is one that
/// holds an object. With a key, a sealed payload that does not open with it is stale.
fn held_of(message: &pb::ConfigObject, key: Option<&BusKey>) -> Option<(Key, Held)> {
    let kind = DataKind::of_config_kind(&message.kind)?;
    if message.deleted {
        return None;
    }
    let form = if !message.sealed_object_json.is_empty() {
        let about =
            sluice_wire::seal::config_about(&message.kind, &message.namespace, &message.name);
        match key.map(|key| key.open(&about, &message.sealed_object_json)) {
            Some(Err(_)) => Form::Stale,
            _ => Form::Sealed,
        }
    } else {
        let object: Value = serde_json::from_slice(&message.object_json).unwrap_or(Value::Null);
        if configdata::withheld_reason(&object).is_some() {
            Form::Withheld
        } else if kind == DataKind::Secret
            && (object.get("data").is_some() || object.get("stringData").is_some())
        {
            Form::Stale
        } else {
            Form::Plain
        }
    };
    let key = (kind, message.namespace.clone(), message.name.clone());
    Some((
        key,
        Held {
            resource_version: message.resource_version.clone(),
            form,
        },
    ))
}

/// The ConfigMaps and Secrets on the stream, and the key that seals Secrets.
pub struct ConfigData {
    bus: Bus,
    key: Option<BusKey>,
    held: HashMap<Key, Held>,
    /// Kinds whose first complete list has arrived: until both have, the watcher's state may
    /// lack objects that exist, so nothing is withdrawn.
    listed: BTreeSet<DataKind>,
    errors: Counter,
}

impl ConfigData {
    pub fn new(bus: Bus, key: Option<BusKey>, health: &Health) -> ConfigData {
        ConfigData {
            bus,
            key,
            held: HashMap::new(),
            listed: BTreeSet::new(),
            errors: health.counter("sluice_watcher_config_data_errors_total"),
        }
    }

    /// Takes a replayed config message if it is a ConfigMap's or Secret's (their state comes
    /// from the watcher's own list, never from the stream); false for other kinds.
    pub fn seed(&mut self, delivered: &Delivered) -> bool {
        let Ok(message) = sluice_wire::decode::<pb::ConfigObject>("ConfigObject", delivered) else {
            return false;
        };
        if DataKind::of_config_kind(&message.kind).is_none() {
            return false;
        }
        if let Some((key, held)) = held_of(&message, self.key.as_ref()) {
            self.held.insert(key, held);
        }
        true
    }

    /// A complete list of `kind` has arrived.
    pub fn listed(&mut self, kind: DataKind) {
        self.listed.insert(kind);
    }

    /// Whether both kinds have been listed completely, so the state holds every Secret.
    pub fn is_listed(&self) -> bool {
        self.listed.len() == 2
    }

    /// Publishes and withdraws until the stream holds exactly the referenced objects of
    /// `state`. A step that fails is logged and counted and tried again at the next call.
    pub async fn reconcile(&mut self, state: &ConfigState) {
        if !self.is_listed() {
            return;
        }
        let references = References::of(state);
        for step in plan(state, &references, &self.held, self.key.is_some()) {
            match step {
                Step::Publish {
                    key,
                    resource_version,
                    form,
                } => {
                    let message = sluice_wire::config_message(
                        key.0.as_str(),
                        &key.1,
                        &key.2,
                        &resource_version,
                        Some(&form),
                        self.key.as_ref(),
                    );
                    // What was just sealed opens with the same key: no need to try.
                    let Some(held) = held_of(&message, None).map(|(_, held)| held) else {
                        continue;
                    };
                    match self.send(&key, &message, None).await {
                        Ok(()) => {
                            tracing::debug!(kind = key.0.as_str(), namespace = %key.1, name = %key.2, "published referenced config data");
                            self.held.insert(key, held);
                        }
                        Err(error) => self.failed(&key, &error, "failed to publish config data"),
                    }
                }
                Step::Withdraw { key } => {
                    let message =
                        sluice_wire::config_message(key.0.as_str(), &key.1, &key.2, "", None, None);
                    let ttl = Some(topology::CONFIG_TOMBSTONE_TTL);
                    match self.send(&key, &message, ttl).await {
                        Ok(()) => {
                            tracing::debug!(kind = key.0.as_str(), namespace = %key.1, name = %key.2, "withdrew config data");
                            self.held.remove(&key);
                        }
                        Err(error) => self.failed(&key, &error, "failed to withdraw config data"),
                    }
                }
            }
        }
    }

    /// Publishes one step and waits for it to be stored (a tombstone with `ttl`); a stored
    /// step's span is exported ([`Sent`]).
    async fn send(
        &self,
        key: &Key,
        message: &pb::ConfigObject,
        ttl: Option<std::time::Duration>,
    ) -> Result<(), sluice_bus::Error> {
        let seen = std::time::SystemTime::now();
        let out = self.outgoing(key, message);
        let (subject, traceparent) = (out.subject.clone(), out.traceparent.clone());
        match ttl {
            Some(ttl) => self.bus.publish_expiring_durably(out, ttl).await?,
            None => self.bus.publish_durably(out).await?,
        }
        let span = Sent::new(
            topology::CONFIG,
            subject,
            seen,
            std::time::SystemTime::now(),
        );
        let attributes = sent::config_object(key.0.as_str(), &key.1, &key.2);
        span.record(traceparent.as_deref(), attributes);
        Ok(())
    }

    fn outgoing(&self, key: &Key, message: &pb::ConfigObject) -> Outgoing {
        let payload = sluice_wire::encode(message);
        Outgoing {
            ttl: None,
            subject: topology::config_subject(key.0.as_str(), &key.1, &key.2),
            // Unique per step: the same content may go, be withdrawn and come back within the
            // dedupe window, and each of those must be stored. A step is published once (its
            // ack awaited); a retry after a failure repeats a state, which is harmless.
            msg_id: message_id(&[
                "config-data",
                key.0.as_str(),
                &key.1,
                &key.2,
                &uuid::Uuid::new_v4().to_string(),
            ]),
            payload,
            traceparent: Some(sluice_runtime::new_traceparent()),
        }
    }

    fn failed(&self, key: &Key, error: &sluice_bus::Error, what: &'static str) {
        self.errors.inc();
        tracing::warn!(kind = key.0.as_str(), namespace = %key.1, name = %key.2, error = %error, "{what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_domain::configdata::CLUSTER_PROFILE_SECRET_TYPE;

    /// Trigger `t` over the `env: prod` clusters with these policyRefs.
    fn trigger(policy_refs: Value) -> Value {
        json!({"kind": "EventTrigger", "metadata": {"name": "t"},
            "spec": {"sourceClusterSelector": {"matchLabels": {"env": "prod"}},
                     "eventSourceName": "es", "policyRefs": policy_refs}})
    }

    fn state() -> ConfigState {
        let mut s = ConfigState::default();
        s.apply(
            "SveltosCluster",
            "default",
            "c1",
            Some(&json!({"kind": "SveltosCluster",
                "metadata": {"name": "c1", "namespace": "default", "labels": {"env": "prod"}},
                "spec": {"kubeconfigName": "c1-kubeconfig"},
                "status": {"ready": true}})),
        );
        s.apply(
            "EventTrigger",
            "",
            "t",
            Some(&trigger(json!([{"kind": "ConfigMap", "name": "policy"},
                                 {"kind": "Secret", "name": "credentials"},
                                 {"kind": "Secret", "name": "opaque"}]))),
        );
        for (kind, name, kind_type) in [
            ("ConfigMap", "policy", None),
            ("ConfigMap", "unrelated", None),
            ("Secret", "credentials", Some(CLUSTER_PROFILE_SECRET_TYPE)),
            ("Secret", "opaque", Some("Opaque")),
            ("Secret", "c1-kubeconfig", Some("Opaque")),
        ] {
            let mut object = json!({"kind": kind,
                "metadata": {"namespace": "default", "name": name, "resourceVersion": "1"},
                "data": {"k": "dmFsdWU="}});
            if let Some(kind_type) = kind_type {
                object["type"] = json!(kind_type);
            }
            s.apply(kind, "default", name, Some(&object));
        }
        s
    }

    fn summary(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|step| match step {
                Step::Publish { key, form, .. } => format!(
                    "+{}/{} {}",
                    key.0.as_str(),
                    key.2,
                    match form {
                        BusForm::Plain(o) if o.get("data").is_some() => "plain",
                        BusForm::Plain(_) => "metadata",
                        BusForm::Sealed(_) => "sealed",
                    }
                ),
                Step::Withdraw { key } => format!("-{}/{}", key.0.as_str(), key.2),
            })
            .collect()
    }

    fn held_after(steps: &[Step], keyed: bool) -> HashMap<Key, Held> {
        let key = keyed.then(|| BusKey::from_bytes(&[3; 32]).expect("key"));
        steps
            .iter()
            .filter_map(|step| match step {
                Step::Publish {
                    key: k,
                    resource_version,
                    form,
                } => {
                    let message = sluice_wire::config_message(
                        k.0.as_str(),
                        &k.1,
                        &k.2,
                        resource_version,
                        Some(form),
                        key.as_ref(),
                    );
                    held_of(&message, None)
                }
                Step::Withdraw { .. } => None,
            })
            .collect()
    }

    #[test]
    fn only_referenced_objects_go_out_secrets_sealed_or_reduced() {
        let s = state();
        let steps = plan(&s, &References::of(&s), &HashMap::new(), true);
        assert_eq!(
            summary(&steps),
            [
                "+ConfigMap/policy plain",
                "+Secret/credentials sealed",
                "+Secret/opaque metadata"
            ]
        );
        // Nothing changed: nothing to do.
        let held = held_after(&steps, true);
        assert!(plan(&s, &References::of(&s), &held, true).is_empty());
    }

    #[test]
    fn a_reference_removed_or_an_object_deleted_withdraws_it() {
        let mut s = state();
        let held = held_after(&plan(&s, &References::of(&s), &HashMap::new(), true), true);
        s.apply("ConfigMap", "default", "policy", None);
        s.apply(
            "EventTrigger",
            "",
            "t",
            Some(&trigger(json!([{"kind": "Secret", "name": "opaque"}]))),
        );
        assert_eq!(
            summary(&plan(&s, &References::of(&s), &held, true)),
            ["-ConfigMap/policy", "-Secret/credentials"]
        );
        s.apply("EventTrigger", "", "t", None);
        assert_eq!(
            summary(&plan(&s, &References::of(&s), &held, true)),
            ["-ConfigMap/policy", "-Secret/credentials", "-Secret/opaque"]
        );
    }

    #[test]
    fn what_an_earlier_run_left_is_withdrawn_or_replaced() {
        let s = state();
        let clear = |name: &str, data: bool| {
            let mut object = json!({"kind": "Secret", "type": CLUSTER_PROFILE_SECRET_TYPE,
                "metadata": {"namespace": "default", "name": name, "resourceVersion": "1"}});
            if data {
                object["data"] = json!({"k": "dmFsdWU="});
            }
            let message = pb::ConfigObject {
                kind: "Secret".into(),
                namespace: "default".into(),
                name: name.into(),
                resource_version: "1".into(),
                object_json: serde_json::to_vec(&object).expect("json"),
                ..Default::default()
            };
            held_of(&message, None).expect("held")
        };
        // A kubeconfig and a referenced Secret published in clear by an earlier version.
        let held: HashMap<Key, Held> = [clear("c1-kubeconfig", true), clear("credentials", true)]
            .into_iter()
            .collect();
        assert_eq!(
            summary(&plan(&s, &References::of(&s), &held, true)),
            [
                "+ConfigMap/policy plain",
                "+Secret/credentials sealed",
                "+Secret/opaque metadata",
                "-Secret/c1-kubeconfig"
            ]
        );
    }

    #[test]
    fn without_a_key_secrets_are_withheld_and_sealed_once_a_key_comes() {
        let s = state();
        let steps = plan(&s, &References::of(&s), &HashMap::new(), false);
        let held = held_after(&steps, false);
        let credentials = (DataKind::Secret, "default".into(), "credentials".into());
        assert_eq!(held[&credentials].form, Form::Withheld);
        assert!(plan(&s, &References::of(&s), &held, false).is_empty());
        assert_eq!(
            summary(&plan(&s, &References::of(&s), &held, true)),
            ["+Secret/credentials sealed"]
        );
    }

    #[test]
    fn secrets_sealed_with_another_key_are_sealed_again() {
        let s = state();
        let old = BusKey::from_bytes(&[4; 32]).expect("key");
        let new = BusKey::from_bytes(&[5; 32]).expect("key");
        let secret = s.secrets[&("default".to_string(), "credentials".to_string())].clone();
        let form = configdata::bus_form(DataKind::Secret, &secret);
        let message = sluice_wire::config_message(
            "Secret",
            "default",
            "credentials",
            "1",
            Some(&form),
            Some(&old),
        );
        let (key, held) = held_of(&message, Some(&new)).expect("held");
        assert_eq!(held.form, Form::Stale);
        assert_eq!(
            held_of(&message, Some(&old)).expect("held").1.form,
            Form::Sealed
        );
        let steps = plan(&s, &References::of(&s), &HashMap::from([(key, held)]), true);
        assert!(summary(&steps).contains(&"+Secret/credentials sealed".to_string()));
    }
}
