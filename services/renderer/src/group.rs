//! How the match stage reads a batch of match units: consecutive units of one set form a group,
//! which a head closes; a closed group is rendered once, over the members that changed in it
//! (and the pair's main unit when a head closed it). Pure: the stage applies each unit to its
//! sets and re-reads a set whose head differs before recording the head.

use sluice_wire::match_units::{member_id_of, Applied, MatchSets, MemberId, SetKey, Unit};

use crate::SetChange;

/// Units of one set read together: what changed, and the position and stream sequence of the
/// last of them (whose outcome carries the group's outputs).
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub change: SetChange,
    pub last: usize,
    pub sequence: u64,
}

impl Group {
    /// A group opened by the unit of set `key` at `index`, read at stream `sequence`.
    pub fn new(key: &SetKey, index: usize, sequence: u64) -> Group {
        Group {
            change: SetChange::new(key),
            last: index,
            sequence,
        }
    }

    /// The group the unit of set `key` at `index` belongs to, which `slot` then holds: the open
    /// one if the unit joins it, else a new one; with the group that the unit closed, if any.
    pub fn join<'a>(
        slot: &'a mut Option<Group>,
        key: &SetKey,
        index: usize,
        sequence: u64,
    ) -> (Option<Group>, &'a mut Group) {
        let closed = if slot.as_ref().is_some_and(|g| g.takes(key)) {
            None
        } else {
            slot.replace(Group::new(key, index, sequence))
        };
        (
            closed,
            slot.get_or_insert_with(|| Group::new(key, index, sequence)),
        )
    }

    /// The id of a unit that is a member (what [`Group::record`] takes).
    pub fn member_id(unit: &Unit) -> Option<MemberId> {
        match unit {
            Unit::Member(member) => Some(member_id_of(member)),
            Unit::Head(_) => None,
        }
    }

    /// Whether a unit of `key` joins this group: a head closes it.
    pub fn takes(&self, key: &SetKey) -> bool {
        !self.change.head && self.change.cluster == key.0 && self.change.event_source == key.1
    }

    /// Records the unit at `index` (a member, by its id, or a head) as `sets` applied it: a
    /// member that changed the view joins the change; a head closes the group. A head that
    /// differs from the view is recorded once the set was re-read and what changed added.
    pub fn record(
        &mut self,
        sets: &MatchSets,
        applied: &Applied,
        member: Option<MemberId>,
        index: usize,
        sequence: u64,
    ) {
        match applied {
            Applied::Member { changed: true } => self.change.add_members(sets, member),
            Applied::Member { changed: false } => {}
            Applied::Head(_) => self.change.head = true,
        }
        self.last = index;
        self.sequence = sequence;
    }

    /// Whether rendering the group can change anything: a head closed it or a member changed.
    pub fn renders(&self) -> bool {
        self.change.head
            || !self.change.members.changed.is_empty()
            || !self.change.members.removed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::{ClusterId, ClusterType};
    use sluice_proto::v1 as pb;
    use sluice_wire::match_units::HeadOutcome;

    fn key(event_source: &str) -> SetKey {
        let cluster = ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "fleet".into(),
            name: "a".into(),
        };
        (cluster, event_source.into())
    }

    fn member(name: &str, present: bool) -> pb::MatchMember {
        pb::MatchMember {
            cluster: Some(sluice_wire::cluster_ref(&key("es").0)),
            event_source: "es".into(),
            object: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "Service".into(),
                namespace: "default".into(),
                name: name.into(),
            }),
            present,
            ..Default::default()
        }
    }

    #[test]
    fn members_that_change_the_view_join_the_group_and_a_head_closes_it() {
        let mut sets = MatchSets::default();
        let mut group = Group::new(&key("es"), 0, 1);
        assert!(!group.renders(), "nothing changed yet");
        for (index, (unit, id)) in [
            (member("web", true), Some("web")),
            (member("web", true), None),   // the same again: no change
            (member("gone", false), None), // never present: no change
            (member("api", true), Some("api")),
            (member("web", false), Some("web")),
        ]
        .into_iter()
        .enumerate()
        {
            let member_id = member_id_of(&unit);
            let (set, applied) = sets
                .apply(Unit::Member(unit), index as u64 + 1)
                .expect("a valid cluster");
            assert!(group.takes(&set));
            assert_eq!(applied == (Applied::Member { changed: true }), id.is_some());
            group.record(&sets, &applied, Some(member_id), index, index as u64 + 1);
        }
        let names = |ids: &[MemberId]| ids.iter().map(|id| id.3.clone()).collect::<Vec<_>>();
        assert_eq!(names(&group.change.members.changed), ["api"]);
        assert_eq!(names(&group.change.members.removed), ["web"]);
        assert!(group.renders() && !group.change.head);
        assert!(
            !group.takes(&key("other")),
            "another set opens its own group"
        );
        group.record(&sets, &Applied::Head(HeadOutcome::InStep), None, 5, 6);
        assert!(group.change.head && group.renders());
        assert_eq!((group.last, group.sequence), (5, 6));
        assert!(!group.takes(&key("es")), "a head closes the group");
    }
}
