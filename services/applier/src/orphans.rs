//! Units whose removal the applier never took: every unit's removal expires from SLUICE_DESIRED
//! after a day (`topology::TOMBSTONE_TTL`), so an applier away longer finds no desired state for
//! a unit whose last result still stands. The unit is then removed at start, as the expired
//! removal would have done: what a resource or CloudEvent unit held, and for a pair's main unit
//! everything of the pair (its removal takes the pair's other units with it). Pure: results in,
//! removals out.

use std::collections::HashSet;

use sluice_proto::v1 as pb;
use sluice_wire::unit::UnitKey;

use crate::stage::Desired;

/// Whether a replayed result is one whose unit may have been removed unseen: a pair's main
/// unit's result that is not a removal (the pair's other units may hold objects when it holds
/// none), or a resource or CloudEvent unit's result that holds objects.
fn may_be_orphaned(result: &pb::ApplyResult) -> bool {
    let main = result.resource_name.is_empty() && !result.cloud_event;
    !result.removed && (main || !result.held.is_empty())
}

/// A replayed result that [`may_be_orphaned`], with only what its unit's removal needs: a start
/// with 100,000 units standing holds one per unit until SLUICE_DESIRED's subjects are read.
pub(crate) fn candidate(result: pb::ApplyResult) -> Option<pb::ApplyResult> {
    may_be_orphaned(&result).then(|| pb::ApplyResult {
        event_trigger: result.event_trigger,
        cluster: result.cluster,
        event_source: result.event_source,
        event_trigger_kind: result.event_trigger_kind,
        source_sequence: result.source_sequence,
        resource_namespace: result.resource_namespace,
        resource_name: result.resource_name,
        cloud_event: result.cloud_event,
        cloud_event_source: result.cloud_event_source,
        cloud_event_subject: result.cloud_event_subject,
        ..Default::default()
    })
}

/// The removals, each with its desired-state subject, of the units whose results (by that
/// subject, each a [`candidate`]) held objects while no desired state of theirs is `present`
/// on SLUICE_DESIRED. A result whose fields do not name its own subject's unit is left alone
/// (and logged): it cannot be removed by its subject.
pub(crate) fn removals(
    candidates: Vec<(String, pb::ApplyResult)>,
    present: &HashSet<String>,
) -> Vec<(String, Desired)> {
    let mut out = Vec::new();
    for (subject, result) in candidates {
        if present.contains(&subject) {
            continue;
        }
        let state = pb::DesiredState {
            event_trigger: result.event_trigger,
            cluster: result.cluster,
            event_source: result.event_source,
            removed: true,
            event_trigger_kind: result.event_trigger_kind,
            resource_namespace: result.resource_namespace,
            resource_name: result.resource_name,
            cloud_event_source: result.cloud_event_source,
            cloud_event_subject: result.cloud_event_subject,
            source_sequence: result.source_sequence,
            ..Default::default()
        };
        // A CloudEvent unit's result of an older applier does not name its unit: it reads as
        // the main unit here, whose subject is not its own, and is left alone.
        let named = UnitKey::of(&state)
            .ok()
            .filter(|key| key.desired_subject() == subject);
        let (Some(key), Some(applied_subject)) =
            (named, sluice_bus::topology::applied_subject_for(&subject))
        else {
            tracing::warn!(%subject, "a result names another unit than its subject's: its objects are left as they are");
            continue;
        };
        out.push((
            subject,
            Desired {
                state,
                cluster: key.cluster,
                applied_subject,
            },
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_bus::topology;
    use sluice_domain::cluster::ClusterId;
    use sluice_wire::unit::Unit;

    fn candidates(results: Vec<(String, pb::ApplyResult)>) -> Vec<(String, pb::ApplyResult)> {
        results
            .into_iter()
            .filter_map(|(subject, result)| Some((subject, candidate(result)?)))
            .collect()
    }

    /// The one removal of `results` when the second's desired state is present.
    fn only_removal(results: &[(String, pb::ApplyResult)]) -> (String, Desired) {
        let present = HashSet::from([results[1].0.clone()]);
        let mut removals = removals(candidates(results.to_vec()), &present);
        assert_eq!(removals.len(), 1, "{removals:?}");
        removals.remove(0)
    }

    fn cluster() -> ClusterId {
        ClusterId::sveltos("default", "c")
    }

    fn held(name: &str, removed: bool, objects: usize) -> (String, pb::ApplyResult) {
        let tokens = sluice_wire::cluster_tokens(&cluster());
        let subject = topology::desired_resource_subject("t", &tokens, "default", name);
        let result = pb::ApplyResult {
            event_trigger: "t".into(),
            cluster: Some(sluice_wire::cluster_ref(&cluster())),
            event_trigger_kind: "EventTrigger".into(),
            event_source: "es".into(),
            resource_namespace: "default".into(),
            resource_name: name.into(),
            removed,
            held: (0..objects)
                .map(|i| pb::ObjectRef {
                    kind: "ClusterProfile".into(),
                    name: format!("sveltos-{name}-{i}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        (subject, result)
    }

    #[test]
    fn a_unit_that_holds_objects_and_has_no_desired_state_is_removed() {
        let results = vec![
            held("gone", false, 2),
            held("desired", false, 2),
            held("removed", true, 0),
            held("holds-nothing", false, 0),
        ];
        let (subject, removal) = only_removal(&results);
        assert_eq!(subject, results[0].0);
        assert!(removal.state.removed);
        assert_eq!(removal.state.resource_name, "gone");
        assert_eq!(removal.state.event_trigger_kind, "EventTrigger");
        assert_eq!(removal.cluster, cluster());
        assert_eq!(
            removal.applied_subject,
            topology::applied_subject_for(&results[0].0).expect("applied")
        );
    }

    /// A CloudEvent unit's result, on its subject.
    fn cloud_event_held(subject: &str, objects: usize) -> (String, pb::ApplyResult) {
        let tokens = sluice_wire::cluster_tokens(&cluster());
        let desired =
            topology::desired_cloudevent_subject("t", &tokens, "github.com/org/repo", subject);
        let (_, mut result) = held("unused", false, objects);
        result.resource_namespace.clear();
        result.resource_name.clear();
        result.cloud_event = true;
        result.cloud_event_source = "github.com/org/repo".into();
        result.cloud_event_subject = subject.into();
        (desired, result)
    }

    #[test]
    fn a_cloud_event_unit_that_holds_objects_and_has_no_desired_state_is_removed() {
        let results = vec![cloud_event_held("gone", 1), cloud_event_held("kept", 1)];
        let (subject, removal) = only_removal(&results);
        assert_eq!(subject, results[0].0);
        assert!(removal.state.removed);
        assert_eq!(removal.state.cloud_event_source, "github.com/org/repo");
        assert_eq!(removal.state.cloud_event_subject, "gone");
        assert!(removal.state.resource_name.is_empty());
    }

    #[test]
    fn a_cloud_event_result_that_does_not_name_its_unit_is_left_alone() {
        let (subject, mut result) = cloud_event_held("gone", 1);
        result.cloud_event_source.clear();
        result.cloud_event_subject.clear();
        assert!(may_be_orphaned(&result));
        assert!(removals(candidates(vec![(subject, result)]), &HashSet::new()).is_empty());
    }

    /// The pair's main unit's result on its subject: holding nothing, as a `oneForEvent`
    /// trigger's does (its resource units hold the objects), or removed.
    fn main_held(removed: bool) -> (String, pb::ApplyResult) {
        let tokens = sluice_wire::cluster_tokens(&cluster());
        let (_, mut result) = held("unused", removed, 0);
        result.resource_namespace.clear();
        result.resource_name.clear();
        (topology::desired_subject("t", &tokens), result)
    }

    #[test]
    fn a_main_unit_without_a_desired_state_is_removed_with_its_pair() {
        let (subject, removal) = only_removal(&[main_held(false), held("desired", false, 1)]);
        assert_eq!(subject, main_held(false).0);
        assert!(removal.state.removed);
        assert_eq!(Unit::of(&removal.state), Unit::Main);
        // Its removal takes the pair's other units off the streams, as the expired one would.
        let purged = crate::stage::followups(&removal.state, &removal.cluster).purge;
        let filters: Vec<&str> = purged.iter().map(|(_, f)| f.as_str()).collect();
        let tokens = sluice_wire::cluster_tokens(&cluster());
        assert!(filters.contains(&topology::desired_units_filter("t", &tokens).as_str()));
        assert!(filters.contains(&topology::applied_units_filter("t", &tokens).as_str()));
        // A main unit whose removal was taken, or whose desired state stands, stays as it is.
        let (subject, result) = main_held(true);
        assert!(!may_be_orphaned(&result));
        let present = HashSet::from([subject.clone()]);
        assert!(removals(candidates(vec![main_held(false)]), &present).is_empty());
    }

    #[test]
    fn a_result_that_names_another_unit_than_its_subject_is_left_alone() {
        let (subject, mut result) = held("web", false, 1);
        result.resource_name = "other".into();
        assert!(removals(candidates(vec![(subject, result)]), &HashSet::new()).is_empty());
    }
}
