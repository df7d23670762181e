//! What the stage emits (ADR 0018): one member per matching object that joined, changed or
//! left, the head of each set that changed, and the purge of a removed set's members; and what
//! it remembers of what it published per set (each member's hash, the digest, the head), so
//! that only what differs goes out, after a restart too. It does not decide what a set holds:
//! `match_state` and the stage do.

use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use sluice_bus::topology;
use sluice_domain::cluster::ClusterId;
use sluice_proto::v1 as pb;
use sluice_wire::match_units::{fold, member_hash, member_id_of, MemberHash, MemberId};

/// One output of the stage, in publication order: a set's members come before its head.
#[derive(Clone, Debug, PartialEq)]
pub enum MatchOutput {
    Member(pb::MatchMember),
    Head(pb::MatchHead),
    /// Forget every member of a removed set (its head says `removed`).
    Purge {
        cluster: ClusterId,
        event_source: String,
    },
}

impl MatchOutput {
    /// Stream sequence of the input that produced this output (0 for a purge).
    pub fn source_sequence(&self) -> u64 {
        match self {
            MatchOutput::Member(m) => m.source_sequence,
            MatchOutput::Head(h) => h.source_sequence,
            MatchOutput::Purge { .. } => 0,
        }
    }

    /// How long the stream keeps this output when it is a tombstone: a member that left
    /// (`MEMBER_TOMBSTONE_TTL`: a reader that misses it finds out from the head), or the head
    /// of a set that is gone (`TOMBSTONE_TTL`: a reader that misses it finds no set, which
    /// reads as gone; the reporter deletes at start the reports of sets it does not find).
    pub fn tombstone_ttl(&self) -> Option<std::time::Duration> {
        match self {
            MatchOutput::Member(m) if !m.present => Some(topology::MEMBER_TOMBSTONE_TTL),
            MatchOutput::Head(h) if h.removed => Some(topology::TOMBSTONE_TTL),
            _ => None,
        }
    }

    /// An id of what this output says, for its message id.
    pub fn content_id(&self) -> String {
        match self {
            MatchOutput::Member(m) if m.present => sluice_bus::hex16(&member_hash(m)),
            MatchOutput::Member(_) => "gone".to_string(),
            MatchOutput::Head(h) => sluice_bus::hex16(&head_hash(&HeadState::of(h))),
            MatchOutput::Purge { .. } => "purge".to_string(),
        }
    }
}

/// What a head says, without its key and sequence.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct HeadState {
    pub(super) members: u64,
    pub(super) digest: MemberHash,
    pub(super) failure: String,
    pub(super) removed: bool,
}

impl HeadState {
    pub(super) fn of(head: &pb::MatchHead) -> HeadState {
        let mut digest = [0; 16];
        if head.digest.len() == digest.len() {
            digest.copy_from_slice(&head.digest);
        }
        HeadState {
            members: head.members,
            digest,
            failure: head.failure_message.clone(),
            removed: head.removed,
        }
    }
}

fn head_hash(head: &HeadState) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(head.members.to_le_bytes());
    hasher.update(head.digest);
    hasher.update(head.failure.as_bytes());
    hasher.update([0, u8::from(head.removed)]);
    hasher.finalize().into()
}

/// What was published for one set: each present member's hash, their digest, the last head.
#[derive(Debug, Default)]
pub(super) struct Published {
    members: FxHashMap<MemberId, MemberHash>,
    digest: MemberHash,
    head: Option<HeadState>,
}

impl Published {
    /// Remembers a unit found on the MATCH stream (startup replay).
    pub(super) fn remember(&mut self, unit: &sluice_wire::match_units::Unit) {
        match unit {
            sluice_wire::match_units::Unit::Member(member) => {
                let id = member_id_of(member);
                if member.present {
                    self.record(id, Some(member_hash(member)));
                } else {
                    self.record(id, None);
                }
            }
            sluice_wire::match_units::Unit::Head(head) => self.head = Some(HeadState::of(head)),
        }
    }

    /// Whether anything of the set is still out there to withdraw.
    pub(super) fn is_live(&self) -> bool {
        !self.members.is_empty() || self.head.as_ref().is_some_and(|h| !h.removed)
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = &MemberId> {
        self.members.keys()
    }

    pub(super) fn hash(&self, id: &MemberId) -> Option<&MemberHash> {
        self.members.get(id)
    }

    /// Records a member's new hash (`None`: it left).
    pub(super) fn record(&mut self, id: MemberId, hash: Option<MemberHash>) {
        let old = match hash {
            Some(hash) => {
                fold(&mut self.digest, &hash);
                self.members.insert(id, hash)
            }
            None => self.members.remove(&id),
        };
        if let Some(old) = old {
            fold(&mut self.digest, &old);
        }
    }

    /// The head for the members published, with `failure`; `Some` when it differs from the
    /// last head published (which it then becomes).
    pub(super) fn next_head(&mut self, failure: &str, force: bool) -> Option<HeadState> {
        let head = HeadState {
            members: self.members.len() as u64,
            digest: self.digest,
            failure: failure.to_string(),
            removed: false,
        };
        if !force && self.head.as_ref() == Some(&head) {
            return None;
        }
        self.head = Some(head.clone());
        Some(head)
    }
}

/// The head message of a set.
pub(super) fn head_message(
    cluster: &ClusterId,
    event_source: &str,
    head: HeadState,
    sequence: u64,
) -> pb::MatchHead {
    pb::MatchHead {
        cluster: Some(sluice_wire::cluster_ref(cluster)),
        event_source: event_source.to_string(),
        members: head.members,
        digest: head.digest.to_vec(),
        failure_message: head.failure,
        removed: head.removed,
        source_sequence: sequence,
    }
}

/// A tombstone for a member that left. Its reference names the group only (`<group>/`, empty
/// for the core group): the version is not part of a member's identity.
pub(super) fn tombstone(
    cluster: &ClusterId,
    event_source: &str,
    id: &MemberId,
    sequence: u64,
) -> pb::MatchMember {
    let (group, kind, namespace, name) = id;
    pb::MatchMember {
        cluster: Some(sluice_wire::cluster_ref(cluster)),
        event_source: event_source.to_string(),
        object: Some(pb::ObjectRef {
            api_version: if group.is_empty() {
                String::new()
            } else {
                format!("{group}/")
            },
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
        }),
        present: false,
        source_sequence: sequence,
        ..Default::default()
    }
}

/// A member whose encoding exceeds what one message may carry (`limit`) loses its resource and
/// says so in its failure, which the EventReport shows; the rest of the set flows on.
pub(super) fn bounded(mut member: pb::MatchMember, limit: usize) -> pb::MatchMember {
    use prost::Message as _;
    let size = pb::MatchUnit {
        unit: Some(pb::match_unit::Unit::Member(member.clone())),
    }
    .encoded_len();
    if size <= limit {
        return member;
    }
    member.resource.clear();
    let object = member.object.clone().unwrap_or_default();
    member.failure_message = format!(
        "{} {}/{} takes {size} bytes, over the {limit} bytes one bus message may carry (nats \
         max_payload)",
        object.kind, object.namespace, object.name
    );
    member
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> MemberId {
        (
            String::new(),
            "Service".into(),
            "default".into(),
            name.into(),
        )
    }

    #[test]
    fn the_digest_follows_the_members_whatever_the_order() {
        let (a, b) = ([1; 16], [2; 16]);
        let mut one = Published::default();
        one.record(id("a"), Some(a));
        one.record(id("b"), Some(b));
        let mut two = Published::default();
        two.record(id("b"), Some(b));
        two.record(id("a"), Some([9; 16]));
        two.record(id("a"), Some(a));
        assert_eq!(one.digest, two.digest);
        two.record(id("a"), None);
        let mut only_b = Published::default();
        only_b.record(id("b"), Some(b));
        assert_eq!(two.digest, only_b.digest);
        assert_eq!(
            only_b.next_head("", false).map(|h| h.members),
            Some(1),
            "first head"
        );
        assert_eq!(only_b.next_head("", false), None, "unchanged");
        assert!(
            only_b.next_head("boom", false).is_some(),
            "failure changes it"
        );
    }

    #[test]
    fn a_member_too_large_becomes_its_failure_without_its_resource() {
        let member = pb::MatchMember {
            object: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "default".into(),
                name: "big".into(),
            }),
            resource: vec![b'x'; 1000],
            present: true,
            ..Default::default()
        };
        assert_eq!(bounded(member.clone(), 2000), member);
        let failed = bounded(member, 100);
        assert!(failed.resource.is_empty());
        assert!(
            failed
                .failure_message
                .starts_with("ConfigMap default/big takes "),
            "{}",
            failed.failure_message
        );
        assert!(failed.failure_message.contains("over the 100 bytes"));
    }

    #[test]
    fn a_member_that_left_and_the_head_of_a_set_that_went_are_tombstones() {
        let member = |present| {
            MatchOutput::Member(pb::MatchMember {
                present,
                ..Default::default()
            })
        };
        let head = |removed| {
            MatchOutput::Head(pb::MatchHead {
                removed,
                ..Default::default()
            })
        };
        let ttls: Vec<_> = [member(true), member(false), head(false), head(true)]
            .iter()
            .map(MatchOutput::tombstone_ttl)
            .collect();
        assert_eq!(
            ttls,
            [
                None,
                Some(topology::MEMBER_TOMBSTONE_TTL),
                None,
                Some(topology::TOMBSTONE_TTL)
            ]
        );
    }
}
