//! EventTrigger status and finalizer, from what the applier did: `matchingClusters` and
//! `clusterInfo` (Provisioned, or Failed with the rendering failure) for every cluster the
//! trigger's main unit applies to, and the finalizer held exactly while sluice may own objects
//! for the trigger, so deleting a trigger waits until its ClusterProfiles, ConfigMaps and
//! Secrets are gone. Pure bookkeeping here; the writes are in `lib.rs`.

use std::collections::{BTreeMap, HashMap};

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

#[derive(Clone, Debug, Default)]
struct TriggerState {
    kind: String,
    clusters: BTreeMap<ClusterId, ClusterOutcome>,
    /// The resource units of each cluster (`oneForEvent` triggers, ADR 0018).
    units: BTreeMap<ClusterId, Units>,
}

/// (namespace, name) of a resource unit.
type Member = (String, String);

/// The outcomes of one cluster's resource units, kept so that one unit's result updates the
/// status in O(log n): the failing units, and every unit's hash folded by XOR.
#[derive(Clone, Debug, Default)]
struct Units {
    failures: BTreeMap<Member, String>,
    hashes: HashMap<Member, [u8; 32]>,
    fold: [u8; 32],
}

impl Units {
    fn record(&mut self, member: Member, failure: &str, hash: &[u8], removed: bool) {
        if let Some(previous) = self.hashes.remove(&member) {
            xor(&mut self.fold, &previous);
        }
        if removed || failure.is_empty() {
            self.failures.remove(&member);
        } else {
            self.failures.insert(member.clone(), failure.to_string());
        }
        if !removed {
            let hash = digest(hash);
            xor(&mut self.fold, &hash);
            self.hashes.insert(member, hash);
        }
    }

    /// What the status shows of these units: the first failure with the number of failing
    /// units, and the fold of their hashes.
    fn summary(&self) -> (Option<(&Member, &String)>, usize, [u8; 32]) {
        (self.failures.iter().next(), self.failures.len(), self.fold)
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    for (i, byte) in bytes.iter().take(32).enumerate() {
        out[i] = *byte;
    }
    out
}

fn xor(into: &mut [u8; 32], other: &[u8; 32]) {
    for (a, b) in into.iter_mut().zip(other) {
        *a ^= b;
    }
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
    /// Records an apply result of a main or resource unit; returns whether the trigger's
    /// status changed. CloudEvent units do not change the status (their trigger's main unit
    /// covers the cluster). The main unit's removal takes the cluster's resource units with it.
    pub fn record(&mut self, result: &pb::ApplyResult) -> bool {
        if result.cloud_event {
            return false;
        }
        let Ok(cluster) = sluice_wire::cluster_id(result.cluster.as_ref(), "apply result") else {
            return false;
        };
        let entry = self
            .triggers
            .entry(result.event_trigger.clone())
            .or_default();
        let mut changed = false;
        if !result.event_trigger_kind.is_empty() && entry.kind != result.event_trigger_kind {
            entry.kind = result.event_trigger_kind.clone();
            changed = true;
        }
        if !result.resource_name.is_empty() {
            let units = entry.units.entry(cluster.clone()).or_default();
            let before = units.summary();
            let before = (
                before.0.map(|(m, f)| (m.clone(), f.clone())),
                before.1,
                before.2,
            );
            units.record(
                (
                    result.resource_namespace.clone(),
                    result.resource_name.clone(),
                ),
                &result.failure_message,
                &result.deployed_hash,
                result.removed,
            );
            let after = units.summary();
            let after = (
                after.0.map(|(m, f)| (m.clone(), f.clone())),
                after.1,
                after.2,
            );
            return changed || (before != after && entry.clusters.contains_key(&cluster));
        }
        let before = entry.clusters.get(&cluster).cloned();
        if result.removed {
            entry.clusters.remove(&cluster);
            entry.units.remove(&cluster);
        } else {
            entry.clusters.insert(
                cluster.clone(),
                ClusterOutcome {
                    failure: result.failure_message.clone(),
                    hash: result.deployed_hash.clone(),
                },
            );
        }
        changed || entry.clusters.get(&cluster) != before.as_ref()
    }

    /// The trigger's kind as last reported (`EventTrigger` when never reported).
    pub fn kind(&self, trigger: &str) -> &str {
        match self.triggers.get(trigger).map(|t| t.kind.as_str()) {
            Some("") | None => "EventTrigger",
            Some(kind) => kind,
        }
    }

    /// Forgets a trigger for which nothing is recorded any more (no cluster, no resource
    /// unit): one that is gone. A trigger with anything recorded is kept.
    pub fn forget(&mut self, trigger: &str) {
        if self
            .triggers
            .get(trigger)
            .is_some_and(|t| t.clusters.is_empty() && t.units.is_empty())
        {
            self.triggers.remove(trigger);
        }
    }

    /// Whether anything is recorded for the trigger.
    pub fn knows(&self, trigger: &str) -> bool {
        self.triggers.contains_key(trigger)
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
            .map(|(cluster, main)| {
                let outcome = with_units(main, state.units.get(cluster));
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

/// A cluster's outcome with its resource units folded in: Failed while the main unit or any
/// resource unit failed (the first failure shown, with how many more), and a hash that changes
/// whenever any unit's does.
fn with_units(main: &ClusterOutcome, units: Option<&Units>) -> ClusterOutcome {
    let Some(units) = units else {
        return main.clone();
    };
    let (first, failing, fold) = units.summary();
    let mut hash = digest(&main.hash);
    xor(&mut hash, &fold);
    let failure = match first {
        _ if !main.failure.is_empty() => main.failure.clone(),
        None => String::new(),
        Some((_, failure)) if failing == 1 => failure.clone(),
        Some((_, failure)) => format!("{failure} (and {} more resources failed)", failing - 1),
    };
    ClusterOutcome {
        failure,
        hash: hash.to_vec(),
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

    fn resource(
        cluster: &str,
        name: &str,
        failure: &str,
        hash: u8,
        removed: bool,
    ) -> pb::ApplyResult {
        pb::ApplyResult {
            resource_namespace: "default".into(),
            resource_name: name.into(),
            deployed_hash: vec![hash; 32],
            ..result(cluster, failure, removed)
        }
    }

    #[test]
    fn resource_units_roll_up_into_their_clusters_status() {
        let mut s = Statuses::default();
        s.record(&result("a", "", false));
        let info = |s: &Statuses| s.status_object("t")["status"]["clusterInfo"][0].clone();
        let provisioned = info(&s);
        assert!(s.record(&resource("a", "web", "", 1, false)));
        let with_web = info(&s);
        assert_eq!(with_web["status"], "Provisioned");
        assert_ne!(
            with_web["hash"], provisioned["hash"],
            "a unit changes the hash"
        );
        assert!(!s.record(&resource("a", "web", "", 1, false)), "unchanged");

        assert!(s.record(&resource("a", "api", "template of api failed", 2, false)));
        assert!(s.record(&resource("a", "db", "template of db failed", 3, false)));
        assert_eq!(info(&s)["status"], "Failed");
        assert_eq!(
            info(&s)["failureMessage"],
            "template of api failed (and 1 more resources failed)"
        );
        assert!(s.record(&resource("a", "api", "", 2, true)));
        assert!(s.record(&resource("a", "db", "", 2, false)));
        assert_eq!(info(&s)["status"], "Provisioned");

        // Removing the pair's main unit takes its resource units with it.
        assert!(s.record(&result("a", "", true)));
        s.record(&result("a", "", false));
        assert_eq!(info(&s), provisioned);
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
