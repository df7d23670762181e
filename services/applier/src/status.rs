//! EventTrigger status and finalizer, from what the applier did: `matchingClusters` and
//! `clusterInfo` (Provisioned, or Failed with the rendering failure) for every cluster the
//! trigger's main unit applies to, and the finalizer held exactly while sluice may own objects
//! for the trigger, so deleting a trigger waits until its ClusterProfiles, ConfigMaps and
//! Secrets are gone. Pure bookkeeping here; the writes are in `lib.rs`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{json, Value};
use sluice_domain::cluster::ClusterId;
use sluice_domain::reference::object_reference;
use sluice_proto::v1 as pb;

/// Sveltos's EventTrigger finalizer (event-manager's `EventTriggerFinalizer`): a trigger a
/// Sveltos installation left behind is released by sluice too.
pub const FINALIZER: &str = "eventtrigger.finalizer.projectsveltos.io";

/// The API version a trigger kind's status is written through.
pub fn api_version(kind: &str) -> &'static str {
    match kind {
        "EventBasedAddOn" => "lib.projectsveltos.io/v1alpha1",
        _ => "lib.projectsveltos.io/v1beta1",
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct TriggerState {
    kind: String,
    clusters: BTreeMap<ClusterId, ClusterOutcome>,
}

/// What the trigger's main unit last did in one cluster.
#[derive(Clone, Debug, Default, PartialEq)]
struct ClusterOutcome {
    /// The rendering failure ("" when provisioned).
    failure: String,
    /// What was deployed (`ApplyResult::deployed_hash`).
    hash: Vec<u8>,
}

/// What each trigger's status should say.
#[derive(Debug, Default)]
pub struct Statuses {
    triggers: BTreeMap<String, TriggerState>,
}

impl Statuses {
    /// Records a main-unit apply result; returns whether the trigger's status changed.
    /// CloudEvent units do not change the status (their trigger's main unit covers the cluster).
    pub fn record(&mut self, result: &pb::ApplyResult) -> bool {
        if result.cloud_event {
            return false;
        }
        let Ok(cluster) = sluice_wire::cluster_id(result.cluster.as_ref(), "apply result") else {
            return false;
        };
        let before = self.triggers.get(&result.event_trigger).cloned();
        let entry = self
            .triggers
            .entry(result.event_trigger.clone())
            .or_default();
        if !result.event_trigger_kind.is_empty() {
            entry.kind = result.event_trigger_kind.clone();
        }
        if result.removed {
            entry.clusters.remove(&cluster);
        } else {
            entry.clusters.insert(
                cluster,
                ClusterOutcome {
                    failure: result.failure_message.clone(),
                    hash: result.deployed_hash.clone(),
                },
            );
        }
        self.triggers.get(&result.event_trigger) != before.as_ref()
    }

    /// The trigger's kind as last reported (`EventTrigger` when never reported).
    pub fn kind(&self, trigger: &str) -> &str {
        match self.triggers.get(trigger).map(|t| t.kind.as_str()) {
            Some("") | None => "EventTrigger",
            Some(kind) => kind,
        }
    }

    /// Whether sluice may own objects for the trigger (some cluster still applies).
    pub fn owns_anything(&self, trigger: &str) -> bool {
        self.triggers
            .get(trigger)
            .is_some_and(|t| !t.clusters.is_empty())
    }

    /// The status subresource object to server-side apply.
    pub fn status_object(&self, trigger: &str) -> Value {
        let empty = TriggerState::default();
        let state = self.triggers.get(trigger).unwrap_or(&empty);
        let reference = |c: &ClusterId| {
            let (api_version, kind) = c.cluster_type.api_version_kind();
            object_reference(api_version, kind, &c.namespace, &c.name)
        };
        let matching: Vec<Value> = state.clusters.keys().map(reference).collect();
        // `hash` is required by the CRD (`[]byte`, so base64 in JSON).
        let info: Vec<Value> = state
            .clusters
            .iter()
            .map(|(cluster, outcome)| {
                let hash = base64::engine::general_purpose::STANDARD.encode(&outcome.hash);
                if outcome.failure.is_empty() {
                    json!({"cluster": reference(cluster), "hash": hash, "status": "Provisioned"})
                } else {
                    json!({"cluster": reference(cluster), "hash": hash, "status": "Failed",
                           "failureMessage": outcome.failure})
                }
            })
            .collect();
        let kind = self.kind(trigger);
        json!({
            "apiVersion": api_version(kind),
            "kind": kind,
            "metadata": {"name": trigger},
            "status": {"matchingClusters": matching, "clusterInfo": info},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::ClusterType;

    fn result(cluster: &str, failure: &str, removed: bool) -> pb::ApplyResult {
        pb::ApplyResult {
            event_trigger: "t".into(),
            event_trigger_kind: "EventTrigger".into(),
            cluster: Some(sluice_wire::cluster_ref(&ClusterId {
                cluster_type: ClusterType::Sveltos,
                namespace: "default".into(),
                name: cluster.into(),
            })),
            failure_message: failure.into(),
            removed,
            deployed_hash: format!("hash-{cluster}").into_bytes(),
            ..Default::default()
        }
    }

    #[test]
    fn status_lists_matching_clusters_with_their_outcome() {
        let mut s = Statuses::default();
        assert!(s.record(&result("a", "", false)));
        assert!(s.record(&result(
            "b",
            "eventtrigger t: spec.policyRefs[0]: ConfigMap default/x not found",
            false
        )));
        assert!(!s.record(&result("a", "", false)), "unchanged");
        let status = s.status_object("t");
        assert_eq!(status["apiVersion"], "lib.projectsveltos.io/v1beta1");
        assert_eq!(status["status"]["matchingClusters"][1]["name"], "b");
        assert_eq!(status["status"]["clusterInfo"][0]["status"], "Provisioned");
        assert_eq!(status["status"]["clusterInfo"][0]["hash"], "aGFzaC1h");
        assert_eq!(status["status"]["clusterInfo"][1]["status"], "Failed");
        assert_eq!(
            status["status"]["clusterInfo"][1]["failureMessage"],
            "eventtrigger t: spec.policyRefs[0]: ConfigMap default/x not found"
        );
        assert!(s.owns_anything("t"));
        assert!(s.record(&result("a", "", true)));
        assert!(s.record(&result("b", "", true)));
        assert!(!s.owns_anything("t"));
        assert_eq!(
            s.status_object("t")["status"]["matchingClusters"],
            json!([])
        );
    }

    #[test]
    fn every_cluster_info_carries_the_hash_the_crd_requires() {
        let mut s = Statuses::default();
        s.record(&result("a", "", false));
        s.record(&result("b", "broken template", false));
        let info = s.status_object("t")["status"]["clusterInfo"].clone();
        for entry in info.as_array().expect("clusterInfo is a list") {
            assert!(entry["hash"].is_string(), "{entry}");
        }
        assert_eq!(info[1]["hash"], "aGFzaC1i");
    }

    #[test]
    fn the_finalizer_is_event_managers() {
        assert_eq!(FINALIZER, "eventtrigger.finalizer.projectsveltos.io");
    }

    #[test]
    fn cluster_references_omit_empty_fields() {
        let mut s = Statuses::default();
        s.record(&result("a", "", false));
        assert_eq!(
            s.status_object("t")["status"]["matchingClusters"][0],
            json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                   "namespace": "default", "name": "a"})
        );
    }

    #[test]
    fn cloud_event_units_leave_the_status_alone() {
        let mut s = Statuses::default();
        let mut unit = result("a", "", false);
        unit.cloud_event = true;
        assert!(!s.record(&unit));
        assert!(!s.owns_anything("t"));
    }
}
