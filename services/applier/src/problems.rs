//! EventTriggers sluice cannot load: what makes one unusable, and the Kubernetes Events that
//! tell a trigger's owner (`kubectl describe eventtrigger X`, `kubectl get events`) of that and
//! of a unit waiting until an object being deleted is gone. Sveltos's EventTrigger status has
//! no field for a trigger-wide problem, so the Event is where it shows. Pure: the runner writes
//! the Event.

use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use sluice_domain::eventtrigger::EventTrigger;
use sluice_proto::v1 as pb;

/// Events about cluster-scoped objects live in this namespace, as kube-apiserver's own do.
pub const EVENT_NAMESPACE: &str = "default";
/// The `reason` of the Event for an unusable trigger.
pub const REASON: &str = "InvalidSpec";
/// The `reason` of the Event for a unit that waits until an object being deleted is gone
/// (`sluice_kube::Error::Terminating`).
pub const WAITING_FOR_DELETION: &str = "WaitingForDeletion";
const COMPONENT: &str = "sluice-applier";

/// Why a trigger in the configuration feed cannot be used, if it cannot: its kind, name, uid
/// and the error that says where.
pub fn invalid_trigger(config: &pb::ConfigObject) -> Option<(String, String, String, String)> {
    if config.deleted {
        return None;
    }
    let object: Value = serde_json::from_slice(&config.object_json).ok()?;
    let error = EventTrigger::from_object(&object).err()?;
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Some((
        config.kind.clone(),
        config.name.clone(),
        uid,
        format!("{} {}: {error}", config.kind.to_lowercase(), config.name),
    ))
}

/// A Warning Event about a trigger, named after the trigger and the message so that the same
/// problem is one Event; `now` is an RFC 3339 time.
pub fn event(kind: &str, name: &str, uid: &str, reason: &str, message: &str, now: &str) -> Value {
    let digest = Sha256::digest(message.as_bytes());
    let suffix: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{name}.{suffix}"), "namespace": EVENT_NAMESPACE},
        "involvedObject": {
            "apiVersion": crate::status::api_version(kind),
            "kind": kind,
            "name": name,
            "uid": uid,
        },
        "reason": reason,
        "type": "Warning",
        "message": message,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(object: Value) -> pb::ConfigObject {
        pb::ConfigObject {
            kind: "EventTrigger".into(),
            name: "broken".into(),
            object_json: serde_json::to_vec(&object).expect("json"),
            ..Default::default()
        }
    }

    #[test]
    fn a_trigger_whose_selector_does_not_parse_is_invalid_and_says_where() {
        let broken = config(json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": "broken", "uid": "u-1"},
            "spec": {"eventSourceName": "es",
                     "sourceClusterSelector": {"matchExpressions": [{"key": "env", "operator": "Foo"}]}},
        }));
        let (kind, name, uid, message) = invalid_trigger(&broken).expect("invalid");
        assert_eq!(
            (kind.as_str(), name.as_str(), uid.as_str()),
            ("EventTrigger", "broken", "u-1")
        );
        assert!(
            message.starts_with("eventtrigger broken: ")
                && message.contains("sourceClusterSelector"),
            "{message}"
        );
        let event = event(&kind, &name, &uid, REASON, &message, "2026-11-24T10:00:00Z");
        assert_eq!(event["involvedObject"]["name"], "broken");
        assert_eq!(
            event["involvedObject"]["apiVersion"],
            "lib.projectsveltos.io/v1beta1"
        );
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["message"], message.as_str());
        assert!(event["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("broken.") && n.len() == "broken.".len() + 10));
    }

    #[test]
    fn a_valid_or_deleted_trigger_has_no_problem() {
        let valid = config(json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": "ok"},
            "spec": {"eventSourceName": "es", "sourceClusterSelector": {"matchLabels": {"env": "fv"}}},
        }));
        assert_eq!(invalid_trigger(&valid), None);
        let mut deleted = valid;
        deleted.deleted = true;
        assert_eq!(invalid_trigger(&deleted), None);
    }
}
