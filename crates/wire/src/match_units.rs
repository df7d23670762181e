//! The match units on the wire (ADR 0018): how a head is told from a member, what identifies a
//! member and its content (the hash the head's digest folds), and `MatchSets`, the view of every
//! set a reader (the renderer, the reporter) keeps from the members it read. It decides nothing
//! about what matches; the evaluator does.

use std::collections::BTreeMap;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use sluice_bus::{topology, Delivered};
use sluice_domain::cluster::ClusterId;
use sluice_proto::v1 as pb;

use crate::{BusKey, Error, Result};

/// A message of SLUICE_MATCH.
#[derive(Clone, Debug, PartialEq)]
pub enum Unit {
    Head(pb::MatchHead),
    Member(pb::MatchMember),
}

/// The one place that tells a head from a member: the `MatchUnit` wrapper's case. A member's
/// sealed Secret is opened with `key` (`crate::managed::open_member`).
pub fn decode(delivered: &Delivered, key: Option<&BusKey>) -> Result<Unit> {
    let unit = crate::decode::<pb::MatchUnit>("MatchUnit", delivered)?;
    match unit.unit {
        Some(pb::match_unit::Unit::Head(head)) => Ok(Unit::Head(head)),
        Some(pb::match_unit::Unit::Member(member)) => {
            Ok(Unit::Member(crate::managed::open_member(member, key)))
        }
        None => Err(Error::Invalid {
            subject: delivered.subject.clone(),
            field: "unit",
        }),
    }
}

/// The bytes of a unit as published, a collected Secret sealed with `key`
/// (`crate::managed::seal_member`).
pub fn encode(unit: Unit, key: Option<&BusKey>) -> Bytes {
    let unit = match unit {
        Unit::Head(head) => pb::match_unit::Unit::Head(head),
        Unit::Member(member) => {
            pb::match_unit::Unit::Member(crate::managed::seal_member(member, key))
        }
    };
    crate::encode(&pb::MatchUnit { unit: Some(unit) })
}

/// The first half of a SHA-256: what a member's content hashes to, and a set's digest (the XOR
/// of its present members' hashes, so that one member changes it in O(1)).
pub type MemberHash = [u8; 16];

/// (group, kind, namespace, name) of a member: what its subject names.
pub type MemberId = (String, String, String, String);

/// The identity of the object a reference names (`v1` is the core group, empty).
pub fn member_id(object: &pb::ObjectRef) -> MemberId {
    let group = object
        .api_version
        .split_once('/')
        .map(|(g, _)| g)
        .unwrap_or("");
    (
        group.to_string(),
        object.kind.clone(),
        object.namespace.clone(),
        object.name.clone(),
    )
}

/// The identity of the object a member names (an empty reference when it names none).
pub fn member_id_of(member: &pb::MatchMember) -> MemberId {
    member
        .object
        .as_ref()
        .map_or_else(|| member_id(&pb::ObjectRef::default()), member_id)
}

/// The hash of what a present member says (its reference, order, resource and failure), not of
/// when it was published nor of the set it belongs to.
pub fn member_hash(member: &pb::MatchMember) -> MemberHash {
    let mut hasher = Sha256::new();
    let object = member.object.as_ref();
    let field = |f: fn(&pb::ObjectRef) -> &str| object.map_or("", f);
    for text in [
        field(|o| o.api_version.as_str()),
        field(|o| o.kind.as_str()),
        field(|o| o.namespace.as_str()),
        field(|o| o.name.as_str()),
        member.failure_message.as_str(),
    ] {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.update(member.order.to_le_bytes());
    hasher.update((member.resource.len() as u64).to_le_bytes());
    hasher.update(&member.resource);
    let digest = hasher.finalize();
    let mut out = [0; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// Folds a member's hash into (or, again, out of) a digest.
pub fn fold(digest: &mut MemberHash, hash: &MemberHash) {
    for (d, h) in digest.iter_mut().zip(hash) {
        *d ^= h;
    }
}

/// (cluster, EventSource): one match set.
pub type SetKey = (ClusterId, String);

/// One set as a reader knows it: its present members, their digest, and the last head.
#[derive(Clone, Debug, Default)]
pub struct SetView {
    members: FxHashMap<MemberId, (pb::MatchMember, MemberHash)>,
    digest: MemberHash,
    head: Option<pb::MatchHead>,
    /// Highest stream sequence of a member applied.
    member_sequence: u64,
}

impl SetView {
    pub fn head(&self) -> Option<&pb::MatchHead> {
        self.head.as_ref()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn member(&self, id: &MemberId) -> Option<&pb::MatchMember> {
        self.members.get(id).map(|(member, _)| member)
    }

    /// The present members in no particular order.
    pub fn members(&self) -> impl Iterator<Item = &pb::MatchMember> {
        self.members.values().map(|(member, _)| member)
    }

    /// The present members in set order: by (order, namespace, name).
    pub fn ordered(&self) -> Vec<&pb::MatchMember> {
        self.ordered_where(|_| true)
    }

    /// The present members `keep` keeps, in set order: only they are sorted.
    pub fn ordered_where(&self, keep: impl Fn(&pb::MatchMember) -> bool) -> Vec<&pb::MatchMember> {
        let mut members: Vec<&pb::MatchMember> = self.members().filter(|m| keep(m)).collect();
        members.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
        members
    }

    /// Whether the members held are the ones `head` counts.
    pub fn agrees_with(&self, head: &pb::MatchHead) -> bool {
        self.members.len() as u64 == head.members && self.digest.as_slice() == head.digest
    }

    /// Applies a member; returns whether the view changed.
    fn apply(&mut self, member: pb::MatchMember, sequence: u64) -> bool {
        self.member_sequence = self.member_sequence.max(sequence);
        let id = member_id_of(&member);
        if !member.present {
            return match self.members.remove(&id) {
                Some((_, hash)) => {
                    fold(&mut self.digest, &hash);
                    true
                }
                None => false,
            };
        }
        let hash = member_hash(&member);
        match self.members.insert(id, (member, hash)) {
            Some((_, old)) if old == hash => false,
            Some((_, old)) => {
                fold(&mut self.digest, &old);
                fold(&mut self.digest, &hash);
                true
            }
            None => {
                fold(&mut self.digest, &hash);
                true
            }
        }
    }
}

fn order_key(member: &pb::MatchMember) -> (u32, &str, &str, &str, &str) {
    let object = member.object.as_ref();
    let text = |f: fn(&pb::ObjectRef) -> &str| object.map_or("", f);
    (
        member.order,
        text(|o| o.namespace.as_str()),
        text(|o| o.name.as_str()),
        text(|o| o.kind.as_str()),
        text(|o| o.api_version.as_str()),
    )
}

/// What a head means for the reader that holds the set.
#[derive(Clone, Debug, PartialEq)]
pub enum HeadOutcome {
    /// The view holds what the head counts (or members newer than the head were read already,
    /// so a newer head follows): act on it.
    InStep,
    /// The view differs from what the head counts, with nothing newer read: a tombstone expired
    /// before this reader saw it (or a member was lost). Re-read the set's members
    /// ([`MatchSets::resync`]) before acting on the head.
    Differs,
    /// The set is gone (`removed`): the reader withdraws what it derived from it.
    Removed,
}

/// Every match set a reader holds.
#[derive(Debug, Default)]
pub struct MatchSets {
    sets: BTreeMap<SetKey, SetView>,
}

impl MatchSets {
    pub fn get(&self, key: &SetKey) -> Option<&SetView> {
        self.sets.get(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &SetKey> {
        self.sets.keys()
    }

    /// Applies one unit read at stream `sequence`. Returns the set it concerns (`None` when it
    /// names no valid cluster) and, for a member, whether the view changed; for a head, what the
    /// head means.
    pub fn apply(&mut self, unit: Unit, sequence: u64) -> Option<(SetKey, Applied)> {
        match unit {
            Unit::Member(member) => {
                let key = set_key(member.cluster.as_ref(), &member.event_source)?;
                let changed = self
                    .sets
                    .entry(key.clone())
                    .or_default()
                    .apply(member, sequence);
                Some((key, Applied::Member { changed }))
            }
            Unit::Head(head) => {
                let key = set_key(head.cluster.as_ref(), &head.event_source)?;
                if head.removed {
                    self.sets.remove(&key);
                    return Some((key, Applied::Head(HeadOutcome::Removed)));
                }
                let view = self.sets.entry(key.clone()).or_default();
                let outcome = if view.agrees_with(&head) || view.member_sequence > sequence {
                    HeadOutcome::InStep
                } else {
                    HeadOutcome::Differs
                };
                view.head = Some(head);
                Some((key, Applied::Head(outcome)))
            }
        }
    }

    /// Replaces a set's members with those re-read from the stream (its members' subjects, last
    /// per subject, tombstones included); returns the ids of the members that changed (joined,
    /// left or differ).
    pub fn resync(
        &mut self,
        key: &SetKey,
        members: impl IntoIterator<Item = (pb::MatchMember, u64)>,
    ) -> Vec<MemberId> {
        let view = self.sets.entry(key.clone()).or_default();
        let mut fresh = SetView {
            head: view.head.take(),
            ..SetView::default()
        };
        for (member, sequence) in members {
            fresh.apply(member, sequence);
        }
        let mut changed: Vec<MemberId> = Vec::new();
        for (id, (_, hash)) in &fresh.members {
            if view.members.get(id).map(|(_, h)| h) != Some(hash) {
                changed.push(id.clone());
            }
        }
        for id in view.members.keys() {
            if !fresh.members.contains_key(id) {
                changed.push(id.clone());
            }
        }
        changed.sort();
        *view = fresh;
        changed
    }

    /// Re-reads a set's members from the MATCH stream (when its head says the view differs:
    /// a tombstone expired before this reader saw it); returns the members that changed.
    pub async fn reread(
        &mut self,
        bus: &sluice_bus::Bus,
        key: &SetKey,
        bus_key: Option<&BusKey>,
    ) -> Result<Vec<MemberId>> {
        let filter = topology::match_members_filter(&crate::cluster_tokens(&key.0), &key.1);
        let mut members = Vec::new();
        for delivered in bus.replay_state(topology::MATCH, &filter).await? {
            if let Ok(Unit::Member(member)) = decode(&delivered, bus_key) {
                members.push((member, delivered.sequence));
            }
        }
        let changed = self.resync(key, members);
        tracing::info!(cluster = %key.0, event_source = %key.1, changed = changed.len(), "match set re-read from the stream");
        Ok(changed)
    }

    /// The whole set as templates and the EventReport read it, members in set order.
    pub fn assemble(&self, key: &SetKey) -> Option<pb::MatchSet> {
        self.assemble_with(key, true)
    }

    /// The set without its lists (`matching` and `resources` empty): what a reader that will
    /// not show the members needs, without copying or sorting them.
    pub fn assemble_unlisted(&self, key: &SetKey) -> Option<pb::MatchSet> {
        self.assemble_with(key, false)
    }

    fn assemble_with(&self, key: &SetKey, lists: bool) -> Option<pb::MatchSet> {
        let view = self.sets.get(key)?;
        let head = view.head.as_ref();
        let ordered = if lists { view.ordered() } else { Vec::new() };
        let collected = ordered.iter().any(|m| !m.resource.is_empty());
        Some(pb::MatchSet {
            cluster: Some(crate::cluster_ref(&key.0)),
            event_source: key.1.clone(),
            matching: ordered
                .iter()
                .map(|m| m.object.clone().unwrap_or_default())
                .collect(),
            resources: if collected {
                ordered.iter().map(|m| m.resource.clone()).collect()
            } else {
                Vec::new()
            },
            failure_message: head.map(|h| h.failure_message.clone()).unwrap_or_default(),
            removed: false,
            source_sequence: head.map_or(view.member_sequence, |h| h.source_sequence),
        })
    }
}

/// How a unit changed a reader's view.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    Member { changed: bool },
    Head(HeadOutcome),
}

fn set_key(cluster: Option<&pb::ClusterRef>, event_source: &str) -> Option<SetKey> {
    let cluster = crate::cluster_id(cluster, "match unit").ok()?;
    Some((cluster, event_source.to_string()))
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

    fn member(name: &str, present: bool, resource: &str) -> Unit {
        Unit::Member(pb::MatchMember {
            cluster: Some(crate::cluster_ref(&cluster())),
            event_source: "es".into(),
            object: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "Service".into(),
                namespace: "default".into(),
                name: name.into(),
            }),
            resource: resource.as_bytes().to_vec(),
            present,
            ..Default::default()
        })
    }

    /// The head the evaluator would publish for these present members.
    fn head_of(members: &[Unit]) -> Unit {
        let mut digest = [0; 16];
        for unit in members {
            if let Unit::Member(m) = unit {
                fold(&mut digest, &member_hash(m));
            }
        }
        Unit::Head(pb::MatchHead {
            cluster: Some(crate::cluster_ref(&cluster())),
            event_source: "es".into(),
            members: members.len() as u64,
            digest: digest.to_vec(),
            ..Default::default()
        })
    }

    fn key() -> SetKey {
        (cluster(), "es".into())
    }

    fn names(sets: &MatchSets) -> Vec<String> {
        sets.assemble(&key())
            .map(|s| s.matching.into_iter().map(|m| m.name).collect())
            .unwrap_or_default()
    }

    #[test]
    fn members_build_the_set_and_the_head_agrees() {
        let mut sets = MatchSets::default();
        let (b, a) = (member("b", true, "{}"), member("a", true, "{}"));
        for (sequence, unit) in [b.clone(), a.clone()].into_iter().enumerate() {
            let (_, applied) = sets.apply(unit, sequence as u64 + 1).expect("valid");
            assert_eq!(applied, Applied::Member { changed: true });
        }
        assert_eq!(
            sets.apply(head_of(&[a.clone(), b.clone()]), 3)
                .map(|(_, o)| o),
            Some(Applied::Head(HeadOutcome::InStep))
        );
        assert_eq!(names(&sets), ["a", "b"]);
        // The same member again changes nothing; a tombstone removes it.
        assert_eq!(
            sets.apply(a.clone(), 4).map(|(_, o)| o),
            Some(Applied::Member { changed: false })
        );
        sets.apply(member("a", false, ""), 5);
        assert_eq!(
            sets.apply(head_of(std::slice::from_ref(&b)), 6)
                .map(|(_, o)| o),
            Some(Applied::Head(HeadOutcome::InStep))
        );
        assert_eq!(names(&sets), ["b"]);
        assert_eq!(
            sets.apply(
                Unit::Head(pb::MatchHead {
                    removed: true,
                    ..match head_of(&[]) {
                        Unit::Head(h) => h,
                        Unit::Member(_) => unreachable!(),
                    }
                }),
                7
            )
            .map(|(_, o)| o),
            Some(Applied::Head(HeadOutcome::Removed))
        );
        assert!(sets.get(&key()).is_none());
    }

    /// A reader that missed a tombstone (it expired while the reader was away) finds out from
    /// the head and, re-reading the members, learns which member left.
    #[test]
    fn a_missed_tombstone_is_found_by_the_head_and_resynced() {
        let mut sets = MatchSets::default();
        let (a, b) = (member("a", true, "{}"), member("b", true, "{}"));
        sets.apply(a.clone(), 1);
        sets.apply(b.clone(), 2);
        // "a" left; its tombstone expired before this reader got to it.
        let head = head_of(std::slice::from_ref(&b));
        assert_eq!(
            sets.apply(head.clone(), 10).map(|(_, o)| o),
            Some(Applied::Head(HeadOutcome::Differs))
        );
        let Unit::Member(b_member) = b.clone() else {
            unreachable!()
        };
        let changed = sets.resync(&key(), [(b_member, 2)]);
        assert_eq!(
            changed,
            [(
                String::new(),
                "Service".into(),
                "default".into(),
                "a".into()
            )]
        );
        assert_eq!(names(&sets), ["b"]);
        assert_eq!(
            sets.apply(head, 11).map(|(_, o)| o),
            Some(Applied::Head(HeadOutcome::InStep))
        );
    }

    /// A head read after members newer than it (a batch keeps only the newest message per
    /// subject) is not a divergence: the newer head follows.
    #[test]
    fn a_head_behind_the_members_read_is_in_step() {
        let mut sets = MatchSets::default();
        sets.apply(member("a", true, "{}"), 5);
        let stale_head = head_of(&[]);
        assert_eq!(
            sets.apply(stale_head, 3).map(|(_, o)| o),
            Some(Applied::Head(HeadOutcome::InStep))
        );
    }

    #[test]
    fn units_round_trip_through_the_wrapper() {
        let unit = member("a", true, "{\"x\":1}");
        let delivered = Delivered {
            subject: "s".into(),
            sequence: 1,
            payload: encode(unit.clone(), None),
            traceparent: None,
        };
        assert_eq!(decode(&delivered, None).expect("decodes"), unit);
    }
}
