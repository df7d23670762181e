//! EventReports whose set went while the reporter was away: the head that says a set is gone
//! expires from SLUICE_MATCH after a day (`topology::TOMBSTONE_TTL`), so a reporter away longer
//! finds no set for a report it wrote. Such a report is deleted at start, as the head would
//! have had it deleted. Pure: a listed report and the sets in, its name out.

use serde_json::Value;
use sluice_domain::naming;
use sluice_wire::match_units::MatchSets;

/// The (namespace, name) of `report` (its metadata, as listed) when `manager` wrote it (it is
/// among its `managedFields`) and `sets` holds no set its name may stand for. A report that
/// someone else wrote (Sveltos's agent before a handover), or whose name names no set, is left
/// alone.
pub fn orphaned(report: &Value, sets: &MatchSets, manager: &str) -> Option<(String, String)> {
    let meta = report.get("metadata")?;
    let field = |name: &str| meta.get(name).and_then(Value::as_str).unwrap_or_default();
    let (namespace, name) = (field("namespace"), field("name"));
    let written = meta
        .get("managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
        });
    let keys = naming::event_report_keys(namespace, name);
    let gone = !keys.is_empty() && keys.iter().all(|key| sets.get(key).is_none());
    (written && gone).then(|| (namespace.to_string(), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_domain::cluster::ClusterId;
    use sluice_proto::v1 as pb;
    use sluice_wire::match_units::Unit;

    fn report(name: &str, managers: &[&str]) -> Value {
        let fields: Vec<Value> = managers
            .iter()
            .map(|m| json!({"manager": m, "operation": "Apply"}))
            .collect();
        json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventReport",
               "metadata": {"namespace": "default", "name": name, "managedFields": fields}})
    }

    /// The sets with one head: cluster-a's `sveltos-service`.
    fn sets() -> MatchSets {
        let mut sets = MatchSets::default();
        let head = pb::MatchHead {
            cluster: Some(sluice_wire::cluster_ref(&ClusterId::sveltos(
                "default",
                "cluster-a",
            ))),
            event_source: "sveltos-service".into(),
            ..Default::default()
        };
        sets.apply(Unit::Head(head), 1);
        sets
    }

    #[test]
    fn a_report_this_reporter_wrote_whose_set_is_gone_is_deleted() {
        let sets = sets();
        let gone = report("sveltos--sveltos-service--cluster-b", &["sluice-reporter"]);
        assert_eq!(
            orphaned(&gone, &sets, "sluice-reporter"),
            Some((
                "default".into(),
                "sveltos--sveltos-service--cluster-b".into()
            ))
        );
        // Taken over from Sveltos's agent: written by both.
        let taken_over = report(
            "sveltos--sveltos-service--cluster-b",
            &["sveltos-agent", "sluice-reporter"],
        );
        assert!(orphaned(&taken_over, &sets, "sluice-reporter").is_some());
    }

    #[test]
    fn a_report_whose_set_stands_or_that_someone_else_wrote_stays() {
        let sets = sets();
        let standing = report("sveltos--sveltos-service--cluster-a", &["sluice-reporter"]);
        assert_eq!(orphaned(&standing, &sets, "sluice-reporter"), None);
        let agents = report("sveltos--sveltos-service--cluster-b", &["sveltos-agent"]);
        assert_eq!(orphaned(&agents, &sets, "sluice-reporter"), None);
        let unnamed = report("not-a-report-name", &["sluice-reporter"]);
        assert_eq!(orphaned(&unnamed, &sets, "sluice-reporter"), None);
    }
}
