//! The match state of one (cluster, EventSource) pair: which objects match and which failed,
//! how one evaluated change updates it, and what identifies a match set's content.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};
use serde_json::Value;
use sluice_eval::tape::NodeRef;
use sluice_eval::Tape;
use sluice_proto::v1 as pb;

use super::encoded::encode_ref;
use super::keys::Placed;
use super::Compiled;

/// State kept per (cluster, EventSource).
#[derive(Debug, Default)]
pub(super) struct KeyState {
    /// Matching objects by (selector position, namespace, name): the API server's LIST order
    /// within a selector, selectors in spec order. Changed only through [`KeyState::insert`]
    /// and [`KeyState::remove`], which keep `hashes` in step.
    matching: BTreeMap<(usize, String, String), Matched>,
    /// How many keys of `matching` have each hash: a key whose hash is absent is not matching,
    /// found without searching the ordered map (whose string comparisons miss the cache on a
    /// large set). Most changes concern objects outside the set.
    hashes: FxHashMap<u64, u32>,
    /// Objects whose evaluation failed, with the reason.
    pub(super) errors: BTreeMap<(String, String, String), String>,
}

impl KeyState {
    /// The matching objects in set order.
    pub(super) fn matching(&self) -> impl ExactSizeIterator<Item = &Matched> {
        self.matching.values()
    }

    pub(super) fn insert(&mut self, key: (usize, String, String), matched: Matched) {
        let hash = key_hash(key.0, &key.1, &key.2);
        if self.matching.insert(key, matched).is_none() {
            *self.hashes.entry(hash).or_default() += 1;
        }
    }

    /// Removes a matching object; whether it was matching.
    fn remove(&mut self, position: usize, namespace: &str, name: &str) -> bool {
        let hash = key_hash(position, namespace, name);
        let Some(count) = self.hashes.get_mut(&hash) else {
            return false;
        };
        let key: &dyn Placed = &(position, namespace, name);
        if self.matching.remove(key).is_none() {
            return false;
        }
        *count -= 1;
        if *count == 0 {
            self.hashes.remove(&hash);
        }
        true
    }

    fn get_mut(&mut self, position: usize, namespace: &str, name: &str) -> Option<&mut Matched> {
        if !self
            .hashes
            .contains_key(&key_hash(position, namespace, name))
        {
            return None;
        }
        let key: &dyn Placed = &(position, namespace, name);
        self.matching.get_mut(key)
    }
}

fn key_hash(position: usize, namespace: &str, name: &str) -> u64 {
    let mut hasher = FxHasher::default();
    (position, namespace, name).hash(&mut hasher);
    hasher.finish()
}

/// A matching object and its reference, encoded once when it joins the set (as an entry of
/// `MatchSet.matching`, see `encoded.rs`).
#[derive(Debug)]
pub(super) struct Matched {
    pub(super) object: Arc<Tape>,
    pub(super) encoded: Box<[u8]>,
}

impl Matched {
    pub(super) fn new(object: &Arc<Tape>) -> Matched {
        let root = object.root();
        let text = |v: Option<NodeRef<'_>>| {
            v.and_then(|v| v.as_str())
                .map(|s| s.into_owned())
                .unwrap_or_default()
        };
        let metadata = root.get("metadata");
        let reference = pb::ObjectRef {
            api_version: text(root.get("apiVersion")),
            kind: text(root.get("kind")),
            namespace: text(metadata.and_then(|m| m.get("namespace"))),
            name: text(metadata.and_then(|m| m.get("name"))),
        };
        let mut encoded = Vec::new();
        encode_ref(&reference, &mut encoded);
        Matched {
            object: object.clone(),
            encoded: encoded.into_boxed_slice(),
        }
    }
}

/// What one pair makes of one object change.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Deleted or unreadable.
    Absent,
    Matching,
    NotMatching,
    Failed(String),
}

/// Updates one key's state for an object change; returns whether its match set may differ.
pub(super) fn update_key(
    state: &mut KeyState,
    compiled: &Compiled,
    position: usize,
    change: &pb::ResourceChange,
    object: Option<&Arc<Tape>>,
    outcome: Outcome,
) -> bool {
    let owned_key = || (position, change.namespace.clone(), change.name.clone());
    let err_key = || {
        (
            change.kind.clone(),
            change.namespace.clone(),
            change.name.clone(),
        )
    };
    let (now_matching, now_error) = match outcome {
        Outcome::Absent | Outcome::NotMatching => (false, None),
        Outcome::Matching => (true, None),
        Outcome::Failed(reason) => (false, Some(reason)),
    };
    let error_changed = match now_error {
        Some(reason) => state.errors.insert(err_key(), reason.clone()).as_ref() != Some(&reason),
        None => !state.errors.is_empty() && state.errors.remove(&err_key()).is_some(),
    };
    let membership_changed = match (now_matching, object) {
        // Still matching: the reference stays, the content is replaced.
        (true, Some(object)) => match state.get_mut(position, &change.namespace, &change.name) {
            Some(previous) => {
                // Equal text is equal content; different text may still be equal content, which
                // the published set's content hash then finds unchanged.
                let changed = compiled.content_matters && previous.object.bytes() != object.bytes();
                previous.object = object.clone();
                changed
            }
            None => {
                state.insert(owned_key(), Matched::new(object));
                true
            }
        },
        _ => state.remove(position, &change.namespace, &change.name),
    };
    error_changed || membership_changed
}

/// An object's identity as published, read directly (no JSON pointer parsing).
pub(super) fn object_ref(object: &Value) -> pb::ObjectRef {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let metadata = object.get("metadata");
    pb::ObjectRef {
        api_version: text(object.get("apiVersion")),
        kind: text(object.get("kind")),
        namespace: text(metadata.and_then(|m| m.get("namespace"))),
        name: text(metadata.and_then(|m| m.get("name"))),
    }
}

pub(super) fn to_json(object: &Value) -> Vec<u8> {
    serde_json::to_vec(object).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matched(name: &str) -> Matched {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}","namespace":"default"}}}}"#
        );
        let tape = Tape::parse(json.into_bytes()).expect("valid JSON");
        Matched::new(&Arc::new(tape))
    }

    /// The hash filter never hides a member: after any sequence of inserts and removals the
    /// state answers as a plain ordered map does.
    #[test]
    fn the_hash_filter_answers_as_the_ordered_map() {
        let mut state = KeyState::default();
        let mut model: BTreeMap<(usize, String, String), ()> = BTreeMap::new();
        // A deterministic walk over 40 keys: inserts, removals and re-inserts in a scrambled order.
        for step in 0..2_000usize {
            let k = (step * 7919) % 40;
            let key = (k % 3, format!("ns-{}", k % 4), format!("svc-{k}"));
            if (step / 40) % 2 == 0 || step % 5 == 0 {
                state.insert(key.clone(), matched(&key.2));
                model.insert(key, ());
            } else {
                let removed = state.remove(key.0, &key.1, &key.2);
                assert_eq!(removed, model.remove(&key).is_some(), "step {step}");
            }
            let probe = (k % 3, format!("ns-{}", k % 4), format!("svc-{k}"));
            assert_eq!(
                state.get_mut(probe.0, &probe.1, &probe.2).is_some(),
                model.contains_key(&probe)
            );
        }
        assert_eq!(state.matching().len(), model.len());
        let counted: u32 = state.hashes.values().sum();
        assert_eq!(counted as usize, model.len());
    }
}
