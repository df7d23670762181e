//! The management-cluster configuration as the services see it (EventSources, EventTriggers,
//! clusters, ClusterSets, ConfigMaps, Secrets), and the decisions that follow from it alone:
//! which EventSource is deployed to which cluster, and which triggers apply to a cluster.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::cluster::{string_map, Cluster, ClusterId};
use crate::eventsource::EventSource;
use crate::eventtrigger::EventTrigger;

/// Kinds mirrored from the management cluster, as named in config subjects.
pub const CONFIG_KINDS: [&str; 8] = [
    "EventSource",
    "EventTrigger",
    "EventBasedAddOn",
    "SveltosCluster",
    "Cluster",
    "ClusterSet",
    "ConfigMap",
    "Secret",
];

/// The current configuration. Objects that fail to parse are kept with their error, so the
/// failure is reported where it belongs and nothing else is affected.
#[derive(Clone, Debug, Default)]
pub struct ConfigState {
    pub event_sources: BTreeMap<String, Result<EventSource, String>>,
    pub event_triggers: BTreeMap<String, Result<EventTrigger, String>>,
    pub clusters: BTreeMap<ClusterId, Cluster>,
    /// ClusterSet name -> selected clusters (`status.selectedClusterRefs`).
    pub cluster_sets: BTreeMap<String, Vec<ClusterId>>,
    /// (namespace, name) -> object.
    pub config_maps: BTreeMap<(String, String), Value>,
    pub secrets: BTreeMap<(String, String), Value>,
}

impl ConfigState {
    /// Applies one object's new state (`None` when deleted). Returns whether the state changed:
    /// false for kinds not mirrored, and for an object that reads as before (a status write on a
    /// trigger, say), so that readers do not redo their work for it.
    pub fn apply(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
        object: Option<&Value>,
    ) -> bool {
        let key = (namespace.to_string(), name.to_string());
        match kind {
            "EventSource" => set(
                &mut self.event_sources,
                name.to_string(),
                object
                    .map(|o| crate::eventsource::parse_event_source(o).map_err(|e| e.to_string())),
            ),
            // A trigger being deleted (its finalizer holds it) already counts as gone: what it
            // created is withdrawn, then the applier releases the finalizer.
            "EventTrigger" | "EventBasedAddOn" => set(
                &mut self.event_triggers,
                name.to_string(),
                object
                    .filter(|o| o.pointer("/metadata/deletionTimestamp").is_none())
                    .map(|o| EventTrigger::from_object(o).map_err(|e| e.to_string())),
            ),
            "SveltosCluster" | "Cluster" => {
                let cluster_type = if kind == "Cluster" {
                    crate::cluster::ClusterType::Capi
                } else {
                    crate::cluster::ClusterType::Sveltos
                };
                let id = ClusterId {
                    cluster_type,
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                };
                set(
                    &mut self.clusters,
                    id,
                    object.and_then(Cluster::from_object),
                )
            }
            "ClusterSet" => set(
                &mut self.cluster_sets,
                name.to_string(),
                object.map(selected_cluster_refs),
            ),
            "ConfigMap" => set(&mut self.config_maps, key, object.cloned()),
            "Secret" => set(&mut self.secrets, key, object.cloned()),
            _ => false,
        }
    }

    /// The EventTriggers that loaded (a broken one is reported elsewhere, never acted on).
    pub fn valid_event_triggers(&self) -> impl Iterator<Item = &EventTrigger> {
        self.event_triggers.values().filter_map(|t| t.as_ref().ok())
    }

    /// Usable clusters a trigger's source selector or cluster sets select.
    pub fn source_clusters(&self, trigger: &EventTrigger) -> BTreeSet<ClusterId> {
        let mut out: BTreeSet<ClusterId> = self
            .clusters
            .values()
            .filter(|c| c.is_usable() && trigger.source_cluster_selector.matches(&c.labels))
            .map(|c| c.id.clone())
            .collect();
        for set_name in &trigger.cluster_set_refs {
            for id in self.cluster_sets.get(set_name).into_iter().flatten() {
                if self.clusters.get(id).is_some_and(Cluster::is_usable) {
                    out.insert(id.clone());
                }
            }
        }
        out
    }

    /// Whether `id` is one of [`ConfigState::source_clusters`] of `trigger`, without listing
    /// them: a change in one cluster asks this once per trigger, whatever the fleet's size.
    pub fn is_source_cluster(&self, trigger: &EventTrigger, id: &ClusterId) -> bool {
        let Some(cluster) = self.clusters.get(id) else {
            return false;
        };
        cluster.is_usable()
            && (trigger.source_cluster_selector.matches(&cluster.labels)
                || trigger.cluster_set_refs.iter().any(|set| {
                    self.cluster_sets
                        .get(set)
                        .is_some_and(|members| members.contains(id))
                }))
    }

    /// Every (cluster, EventSource name) some trigger asks to watch, with the triggers asking.
    /// `event_source_name` renders the trigger's (possibly templated) eventSourceName for a cluster.
    pub fn deployments<F>(
        &self,
        mut event_source_name: F,
    ) -> BTreeMap<(ClusterId, String), BTreeSet<String>>
    where
        F: FnMut(&EventTrigger, &Cluster) -> Option<String>,
    {
        let mut out: BTreeMap<(ClusterId, String), BTreeSet<String>> = BTreeMap::new();
        for trigger in self.valid_event_triggers() {
            for id in self.source_clusters(trigger) {
                let Some(cluster) = self.clusters.get(&id) else {
                    continue;
                };
                if let Some(es) = event_source_name(trigger, cluster) {
                    out.entry((id, es))
                        .or_default()
                        .insert(trigger.name.clone());
                }
            }
        }
        out
    }
}

/// Sets or removes `key`; returns whether that changed the map.
fn set<K: Ord, V: PartialEq>(map: &mut BTreeMap<K, V>, key: K, value: Option<V>) -> bool {
    match value {
        Some(v) if map.get(&key) == Some(&v) => false,
        Some(v) => {
            map.insert(key, v);
            true
        }
        None => map.remove(&key).is_some(),
    }
}

fn selected_cluster_refs(object: &Value) -> Vec<ClusterId> {
    object
        .pointer("/status/selectedClusterRefs")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let kind = r.get("kind").and_then(Value::as_str)?;
                    let cluster_type = match kind {
                        "Cluster" => crate::cluster::ClusterType::Capi,
                        _ => crate::cluster::ClusterType::Sveltos,
                    };
                    Some(ClusterId {
                        cluster_type,
                        namespace: r.get("namespace").and_then(Value::as_str)?.to_string(),
                        name: r.get("name").and_then(Value::as_str)?.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Labels of an object's metadata.
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    string_map(object.pointer("/metadata/labels"))
}

/// Annotations of an object's metadata.
pub fn annotations_of(object: &Value) -> BTreeMap<String, String> {
    string_map(object.pointer("/metadata/annotations"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> ConfigState {
        let mut s = ConfigState::default();
        s.apply(
            "SveltosCluster",
            "default",
            "a",
            Some(&json!({"kind": "SveltosCluster", "metadata": {"name": "a", "namespace": "default", "labels": {"env": "fv"}}, "status": {"ready": true}})),
        );
        s.apply(
            "SveltosCluster",
            "default",
            "b",
            Some(&json!({"kind": "SveltosCluster", "metadata": {"name": "b", "namespace": "default", "labels": {"env": "prod"}}, "status": {"ready": true}})),
        );
        s.apply(
            "EventBasedAddOn",
            "",
            "t",
            Some(&json!({"kind": "EventBasedAddOn", "metadata": {"name": "t"}, "spec": {"clusterSelector": "env=fv", "eventSourceName": "es"}})),
        );
        s
    }

    #[test]
    fn deployments_follow_selectors_and_deletions() {
        let mut s = state();
        let d = s.deployments(|t, _| Some(t.event_source_name.clone()));
        let keys: Vec<_> = d.keys().map(|(c, es)| format!("{}/{es}", c.name)).collect();
        assert_eq!(keys, ["a/es"]);
        s.apply("EventBasedAddOn", "", "t", None);
        assert!(s
            .deployments(|t, _| Some(t.event_source_name.clone()))
            .is_empty());
    }

    /// A write that leaves an object reading as before (the trigger's status, which the applier
    /// writes as events flow) is no change: readers would otherwise redo all their work for it.
    #[test]
    fn only_what_reads_differently_is_a_change() {
        let mut s = state();
        let trigger = |selector: &str, status: &str| {
            json!({"kind": "EventBasedAddOn", "metadata": {"name": "t"},
                   "spec": {"clusterSelector": selector, "eventSourceName": "es"},
                   "status": {"clusterInfo": [{"status": status}]}})
        };
        assert!(!s.apply(
            "EventBasedAddOn",
            "",
            "t",
            Some(&trigger("env=fv", "Provisioning"))
        ));
        assert!(!s.apply(
            "EventBasedAddOn",
            "",
            "t",
            Some(&trigger("env=fv", "Provisioned"))
        ));
        assert!(s.apply(
            "EventBasedAddOn",
            "",
            "t",
            Some(&trigger("env=prod", "Provisioned"))
        ));
        let map = json!({"kind": "ConfigMap", "metadata": {"name": "m", "namespace": "ns"}});
        assert!(s.apply("ConfigMap", "ns", "m", Some(&map)));
        assert!(!s.apply("ConfigMap", "ns", "m", Some(&map)));
        assert!(s.apply("ConfigMap", "ns", "m", None));
        assert!(!s.apply("ConfigMap", "ns", "m", None));
        assert!(!s.apply("Deployment", "ns", "d", Some(&map)));
    }

    #[test]
    fn a_trigger_held_by_its_finalizer_counts_as_gone() {
        let mut s = state();
        s.apply(
            "EventBasedAddOn",
            "",
            "t",
            Some(&json!({"kind": "EventBasedAddOn",
                "metadata": {"name": "t", "deletionTimestamp": "2026-11-22T07:00:00Z",
                             "finalizers": ["eventtrigger.finalizer.projectsveltos.io"]},
                "spec": {"clusterSelector": "env=fv", "eventSourceName": "es"}})),
        );
        assert!(s.event_triggers.is_empty());
        assert!(s
            .deployments(|t, _| Some(t.event_source_name.clone()))
            .is_empty());
    }

    #[test]
    fn broken_objects_are_kept_with_their_error() {
        let mut s = state();
        s.apply(
            "EventTrigger",
            "",
            "bad",
            Some(&json!({"kind": "EventTrigger", "metadata": {"name": "bad"}, "spec": {}})),
        );
        let err = s.event_triggers["bad"].as_ref().expect_err("broken");
        assert!(err.contains("eventSourceName"), "{err}");
        // The good trigger still deploys.
        assert_eq!(
            s.deployments(|t, _| Some(t.event_source_name.clone()))
                .len(),
            1
        );
    }

    #[test]
    fn cluster_sets_add_clusters() {
        let mut s = state();
        s.apply("ClusterSet", "", "set", Some(&json!({"status": {"selectedClusterRefs": [{"kind": "SveltosCluster", "namespace": "default", "name": "b"}]}})));
        s.apply(
            "EventTrigger",
            "",
            "t2",
            Some(&json!({"kind": "EventTrigger", "metadata": {"name": "t2"}, "spec": {"clusterSetRefs": ["set"], "eventSourceName": "es2"}})),
        );
        let d = s.deployments(|t, _| Some(t.event_source_name.clone()));
        assert!(d.keys().any(|(c, es)| c.name == "b" && es == "es2"));
    }

    /// Asked of one cluster, a trigger's source clusters answer as the whole list does: by
    /// selector, by cluster set, never for an unusable cluster or one that does not exist.
    #[test]
    fn one_cluster_is_a_source_exactly_when_the_list_holds_it() {
        let mut s = state();
        s.apply("ClusterSet", "", "set", Some(&json!({"status": {"selectedClusterRefs": [{"kind": "SveltosCluster", "namespace": "default", "name": "b"}, {"kind": "SveltosCluster", "namespace": "default", "name": "c"}]}})));
        s.apply(
            "SveltosCluster",
            "default",
            "c",
            Some(&json!({"kind": "SveltosCluster", "metadata": {"name": "c", "namespace": "default", "labels": {"env": "fv"}}, "status": {"ready": false}})),
        );
        s.apply(
            "EventTrigger",
            "",
            "t2",
            Some(&json!({"kind": "EventTrigger", "metadata": {"name": "t2"}, "spec": {"clusterSetRefs": ["set"], "eventSourceName": "es2"}})),
        );
        let mut ids: Vec<ClusterId> = s.clusters.keys().cloned().collect();
        let mut missing = ids[0].clone();
        missing.name = "missing".into();
        ids.push(missing);
        let mut seen = 0;
        for trigger in s.valid_event_triggers() {
            let listed = s.source_clusters(trigger);
            for id in &ids {
                assert_eq!(
                    s.is_source_cluster(trigger, id),
                    listed.contains(id),
                    "{} {}",
                    trigger.name,
                    id.name
                );
                seen += usize::from(listed.contains(id));
            }
        }
        // t: a (env=fv; c is not ready); t2: b through the set (c is not ready).
        assert_eq!(seen, 2);
    }
}
