//! A match set as the stage emits it: the object references already protobuf-encoded (each
//! matching object's reference is encoded once, when it joins the set, not at every
//! publication of the set), the rest of the message, and the hash of its content. Publishing a
//! set of a hundred objects is then one copy of their encoded references instead of four
//! string allocations and copies per object, an encoding pass and a hash of the payload.
//! It does not decide what a set holds: `match_state` and the stage do.

use prost::Message as _;
use sha2::{Digest, Sha256};
use sluice_proto::v1 as pb;

/// SHA-256 of what a match set says (not of when it was computed).
pub type ContentHash = [u8; 32];

/// The protobuf field number of `MatchSet.matching`.
const MATCHING_FIELD: u32 = 3;

/// A match set ready to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedSet {
    /// Every field but `matching`.
    head: pb::MatchSet,
    /// `matching` as protobuf field entries (tag, length, `ObjectRef`), in set order.
    matching: Vec<u8>,
    content: ContentHash,
}

impl EncodedSet {
    /// A set from its other fields and its encoded references (see [`encode_ref`]).
    pub(super) fn new(head: pb::MatchSet, matching: Vec<u8>) -> EncodedSet {
        debug_assert!(head.matching.is_empty(), "references travel encoded");
        let content = content_hash(
            &matching,
            &head.resources,
            &head.failure_message,
            head.removed,
        );
        EncodedSet {
            head,
            matching,
            content,
        }
    }

    pub fn cluster(&self) -> Option<&pb::ClusterRef> {
        self.head.cluster.as_ref()
    }

    pub fn event_source(&self) -> &str {
        &self.head.event_source
    }

    /// Stream sequence of the input that produced this set.
    pub fn source_sequence(&self) -> u64 {
        self.head.source_sequence
    }

    pub fn content(&self) -> &ContentHash {
        &self.content
    }

    /// The `MatchSet` message's bytes. Its other fields come first, then `matching`: protobuf
    /// readers accept fields in any order and keep a repeated field's entries in order.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.encoded_len() + self.matching.len());
        self.head
            .encode(&mut out)
            .expect("a Vec grows to hold any message");
        out.extend_from_slice(&self.matching);
        out
    }

    /// The set as a message (decoding what [`EncodedSet::encode`] writes).
    /// The set that replaces this one when its encoding (`size` bytes) exceeds what one
    /// message may carry (`limit`): no members, and a failure that says the size and the
    /// limit, so the EventReport shows it and the renderer keeps what exists.
    pub fn too_large(&self, size: usize, limit: usize) -> EncodedSet {
        let mut head = self.head.clone();
        head.resources.clear();
        head.failure_message = format!(
            "match set of eventsource {} takes {size} bytes, over the {limit} bytes one bus \
             message may carry (nats max_payload)",
            head.event_source
        );
        EncodedSet::new(head, Vec::new())
    }

    pub fn to_set(&self) -> pb::MatchSet {
        pb::MatchSet::decode(self.encode().as_slice()).expect("an encoded match set decodes as one")
    }
}

/// Appends `reference` to `out` as one entry of `MatchSet.matching`.
pub(super) fn encode_ref(reference: &pb::ObjectRef, out: &mut Vec<u8>) {
    prost::encoding::message::encode(MATCHING_FIELD, reference, out);
}

/// The content hash of a set received as a message (what the MATCH stream holds at start),
/// equal to the one [`EncodedSet::new`] computes for the same content.
pub(super) fn content_hash_of(set: &pb::MatchSet) -> ContentHash {
    let mut matching = Vec::new();
    for reference in &set.matching {
        encode_ref(reference, &mut matching);
    }
    content_hash(&matching, &set.resources, &set.failure_message, set.removed)
}

/// Hash of the encoded references, the collected resources, the failure and the removal:
/// neither the cluster and EventSource (the key's, the same for every set of the key) nor the
/// source sequence.
fn content_hash(
    matching: &[u8],
    resources: &[Vec<u8>],
    failure: &str,
    removed: bool,
) -> ContentHash {
    let mut hasher = Sha256::new();
    hasher.update((matching.len() as u64).to_le_bytes());
    hasher.update(matching);
    for resource in resources {
        hasher.update((resource.len() as u64).to_le_bytes());
        hasher.update(resource);
    }
    hasher.update(failure.as_bytes());
    hasher.update([0, u8::from(removed)]);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn set(names: &[&str]) -> pb::MatchSet {
        pb::MatchSet {
            cluster: Some(pb::ClusterRef {
                namespace: "mgmt".into(),
                name: "c1".into(),
                ..Default::default()
            }),
            event_source: "web".into(),
            matching: names.iter().map(|n| reference(n)).collect(),
            resources: vec![b"{}".to_vec()],
            failure_message: String::new(),
            removed: false,
            source_sequence: 7,
        }
    }

    fn encoded(set: &pb::MatchSet) -> EncodedSet {
        let mut matching = Vec::new();
        for r in &set.matching {
            encode_ref(r, &mut matching);
        }
        EncodedSet::new(
            pb::MatchSet {
                matching: Vec::new(),
                ..set.clone()
            },
            matching,
        )
    }

    #[test]
    fn an_encoded_set_decodes_as_the_set_it_stands_for() {
        let original = set(&["a", "b", "c"]);
        let encoded = encoded(&original);
        assert_eq!(encoded.to_set(), original);
        assert_eq!(
            pb::MatchSet::decode(original.encode_to_vec().as_slice()).expect("decodes"),
            encoded.to_set()
        );
    }

    #[test]
    fn the_content_hash_names_the_content_not_the_sequence() {
        let a = set(&["a", "b"]);
        let later = pb::MatchSet {
            source_sequence: 99,
            ..a.clone()
        };
        assert_eq!(encoded(&a).content(), encoded(&later).content());
        assert_eq!(content_hash_of(&a), *encoded(&a).content());
        for other in [
            set(&["a"]),
            set(&["b", "a"]),
            set(&["a", "b", "c"]),
            pb::MatchSet {
                failure_message: "x".into(),
                ..a.clone()
            },
            pb::MatchSet {
                resources: vec![b"{\"a\":1}".to_vec()],
                ..a.clone()
            },
            pb::MatchSet {
                removed: true,
                ..a.clone()
            },
        ] {
            assert_ne!(content_hash_of(&other), content_hash_of(&a), "{other:?}");
        }
    }

    #[test]
    fn a_set_too_large_becomes_a_failure_that_names_its_size_and_the_limit() {
        let mut head = set(&[]);
        head.matching.clear();
        let mut matching = Vec::new();
        for name in ["a", "b"] {
            encode_ref(&reference(name), &mut matching);
        }
        let whole = EncodedSet::new(head, matching);
        let failed = whole.too_large(whole.encode().len(), 10);
        let decoded = failed.to_set();
        assert!(decoded.matching.is_empty() && decoded.resources.is_empty());
        assert_eq!(
            decoded.failure_message,
            format!(
                "match set of eventsource web takes {} bytes, over the 10 bytes one bus message \
                 may carry (nats max_payload)",
                whole.encode().len()
            )
        );
        assert_eq!(decoded.source_sequence, 7);
        assert_ne!(failed.content(), whole.content());
    }
}
