//! What an EventReport's `status.failureMessage` says: the EventSource's evaluation failure if
//! there is one, otherwise the rendering failures of the triggers that use this EventSource in
//! this cluster (from the applier's results), each naming its trigger, reference and place.

use std::collections::BTreeMap;

use sluice_domain::cluster::ClusterId;
use sluice_proto::v1 as pb;

/// How many rendering failures a report's message spells out; the rest are counted.
const SHOWN_FAILURES: usize = 5;

/// (cluster, EventSource): one EventReport.
pub type ReportKey = (ClusterId, String);

#[derive(Debug, Default)]
pub struct Failures {
    evaluation: BTreeMap<ReportKey, String>,
    /// Per report, the rendering failure of each failing unit: (trigger, resource namespace,
    /// resource name), the resource empty for a trigger's main unit.
    rendering: BTreeMap<ReportKey, BTreeMap<(String, String, String), String>>,
}

impl Failures {
    /// Records a match set's evaluation outcome.
    pub fn record_evaluation(&mut self, key: &ReportKey, failure: &str, removed: bool) {
        if failure.is_empty() || removed {
            self.evaluation.remove(key);
        } else {
            self.evaluation.insert(key.clone(), failure.to_string());
        }
        if removed {
            self.rendering.remove(key);
        }
    }

    /// Records an apply result; returns the reports whose message changed.
    pub fn record_result(&mut self, result: &pb::ApplyResult) -> Vec<ReportKey> {
        if result.cloud_event {
            return Vec::new();
        }
        let Ok(cluster) = sluice_wire::cluster_id(result.cluster.as_ref(), "apply result") else {
            return Vec::new();
        };
        let trigger = &result.event_trigger;
        if result.removed && result.resource_name.is_empty() {
            // The trigger's main unit is withdrawn, its resource units with it: from every
            // report of the cluster, since the removal of a pair that no longer exists names no
            // EventSource, and the trigger may have used another one before.
            let reports: Vec<ReportKey> = self
                .rendering
                .keys()
                .filter(|(c, _)| *c == cluster)
                .cloned()
                .collect();
            return reports
                .into_iter()
                .filter(|key| self.edit(key, |units| units.retain(|(t, _, _), _| t != trigger)))
                .collect();
        }
        if result.event_source.is_empty() {
            return Vec::new();
        }
        let key = (cluster, result.event_source.clone());
        let unit = (
            trigger.clone(),
            result.resource_namespace.clone(),
            result.resource_name.clone(),
        );
        let changed = self.edit(&key, |units| {
            if result.failure_message.is_empty() || result.removed {
                units.remove(&unit);
            } else {
                units.insert(unit, result.failure_message.clone());
            }
        });
        if changed {
            vec![key]
        } else {
            Vec::new()
        }
    }

    /// Edits the failing units of one report; whether its message changed.
    fn edit(
        &mut self,
        key: &ReportKey,
        edit: impl FnOnce(&mut BTreeMap<(String, String, String), String>),
    ) -> bool {
        let before = self.message(key);
        let units = self.rendering.entry(key.clone()).or_default();
        edit(units);
        if units.is_empty() {
            self.rendering.remove(key);
        }
        self.message(key) != before
    }

    /// The report's failure message; `None` when all is well.
    pub fn message(&self, key: &ReportKey) -> Option<String> {
        if let Some(failure) = self.evaluation.get(key) {
            return Some(failure.clone());
        }
        let failures = self.rendering.get(key)?;
        let mut message = failures
            .values()
            .take(SHOWN_FAILURES)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if failures.len() > SHOWN_FAILURES {
            message.push_str(&format!(
                "; and {} more failing units",
                failures.len() - SHOWN_FAILURES
            ));
        }
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::ClusterType;

    fn cluster() -> ClusterId {
        ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: "a".into(),
        }
    }

    fn result(trigger: &str, failure: &str) -> pb::ApplyResult {
        pb::ApplyResult {
            event_trigger: trigger.into(),
            event_source: "es".into(),
            cluster: Some(sluice_wire::cluster_ref(&cluster())),
            failure_message: failure.into(),
            ..Default::default()
        }
    }

    #[test]
    fn evaluation_failure_wins_then_rendering_failures_of_each_trigger_show() {
        let key = (cluster(), "es".to_string());
        let mut f = Failures::default();
        assert_eq!(
            f.record_result(&result(
                "t1",
                "eventtrigger t1: spec.policyRefs[0]: ConfigMap default/x not found"
            )),
            std::slice::from_ref(&key)
        );
        assert_eq!(
            f.record_result(&result("t2", "eventtrigger t2: bad")),
            std::slice::from_ref(&key)
        );
        assert_eq!(
            f.message(&key).as_deref(),
            Some("eventtrigger t1: spec.policyRefs[0]: ConfigMap default/x not found; eventtrigger t2: bad")
        );
        f.record_evaluation(&key, "eventsource es: lua error", false);
        assert_eq!(
            f.message(&key).as_deref(),
            Some("eventsource es: lua error")
        );
        f.record_evaluation(&key, "", false);
        assert_eq!(
            f.record_result(&result("t1", "")),
            std::slice::from_ref(&key)
        );
        assert!(f.record_result(&result("t1", "")).is_empty(), "unchanged");
        assert_eq!(
            f.record_result(&result("t2", "")),
            std::slice::from_ref(&key)
        );
        assert_eq!(f.message(&key), None);
    }

    #[test]
    fn a_deleted_triggers_failures_leave_every_report_of_the_cluster() {
        let mut f = Failures::default();
        let mut other = result("t1", "eventtrigger t1: bad before");
        other.event_source = "old-es".into();
        f.record_result(&other);
        f.record_result(&result("t1", "eventtrigger t1: bad"));
        f.record_result(&result("t2", "eventtrigger t2: bad"));
        // The removal of a pair that no longer exists names no EventSource.
        let removal = pb::ApplyResult {
            removed: true,
            event_source: String::new(),
            ..result("t1", "")
        };
        let changed = f.record_result(&removal);
        let key = |es: &str| (cluster(), es.to_string());
        assert_eq!(changed, [key("es"), key("old-es")]);
        assert_eq!(
            f.message(&key("es")).as_deref(),
            Some("eventtrigger t2: bad")
        );
        assert_eq!(f.message(&key("old-es")), None);
    }
}
