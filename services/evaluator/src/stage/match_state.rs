//! The match state of one (cluster, EventSource) pair: which objects match and which failed,
//! and how one evaluated change updates it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde_json::Value;
use sluice_eval::tape::NodeRef;
use sluice_eval::Tape;
use sluice_proto::v1 as pb;

use super::keys::Placed;

/// State kept per (cluster, EventSource).
#[derive(Debug, Default)]
pub(super) struct KeyState {
    /// Each matching object by (selector position, namespace, name): the API server's LIST
    /// order within a selector, selectors in spec order. Changed only through
    /// [`KeyState::insert`] and [`KeyState::remove`], which keep `objects` in step.
    order: BTreeSet<(usize, String, String)>,
    /// The matching objects' current contents by the same keys, hashed: most changes concern
    /// an object that stays in or out of the set, found without the ordered map's string
    /// comparisons (which miss the cache on a large set).
    objects: FxHashMap<(usize, String, String), Arc<Tape>>,
    /// Objects whose evaluation failed, with the reason.
    pub(super) errors: BTreeMap<(String, String, String), String>,
}

impl KeyState {
    /// The matching objects with their keys, in set order.
    pub(super) fn entries(&self) -> impl Iterator<Item = (&(usize, String, String), &Arc<Tape>)> {
        self.order
            .iter()
            .filter_map(|key| self.objects.get(key).map(|object| (key, object)))
    }

    /// The matching objects' contents, in set order.
    pub(super) fn objects(&self) -> impl Iterator<Item = &Arc<Tape>> {
        self.entries().map(|(_, object)| object)
    }

    /// The content of a matching object.
    pub(super) fn get(&self, key: &(usize, String, String)) -> Option<&Arc<Tape>> {
        self.objects.get(key)
    }

    /// Adds a matching object, or replaces its content.
    pub(super) fn insert(&mut self, key: (usize, String, String), object: &Arc<Tape>) {
        self.order.insert(key.clone());
        self.objects.insert(key, object.clone());
    }

    /// Removes a matching object; whether it was matching.
    fn remove(&mut self, position: usize, namespace: &str, name: &str) -> bool {
        let key: &dyn Placed = &(position, namespace, name);
        if self.objects.remove(key).is_none() {
            return false;
        }
        self.order.remove(key);
        true
    }

    /// The content of a matching object.
    fn get_mut(&mut self, position: usize, namespace: &str, name: &str) -> Option<&mut Arc<Tape>> {
        let key: &dyn Placed = &(position, namespace, name);
        self.objects.get_mut(key)
    }
}

/// An object's reference, read from its parsed document.
pub(super) fn tape_ref(object: &Tape) -> pb::ObjectRef {
    let root = object.root();
    let text = |v: Option<NodeRef<'_>>| {
        v.and_then(|v| v.as_str())
            .map(|s| s.into_owned())
            .unwrap_or_default()
    };
    let metadata = root.get("metadata");
    pb::ObjectRef {
        api_version: text(root.get("apiVersion")),
        kind: text(root.get("kind")),
        namespace: text(metadata.and_then(|m| m.get("namespace"))),
        name: text(metadata.and_then(|m| m.get("name"))),
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
    content_matters: bool,
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
                let changed = content_matters && previous.bytes() != object.bytes();
                *previous = object.clone();
                changed
            }
            None => {
                state.insert(owned_key(), object);
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

    fn object(name: &str) -> Arc<Tape> {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"{name}","namespace":"default"}}}}"#
        );
        Arc::new(Tape::parse(json.into_bytes()).expect("valid JSON"))
    }

    /// The hashed contents and the ordered references stay in step: after any sequence of
    /// inserts and removals the state answers as a plain ordered map does, in its order.
    #[test]
    fn the_hashed_members_answer_as_the_ordered_map() {
        let mut state = KeyState::default();
        let mut model: BTreeMap<(usize, String, String), Arc<Tape>> = BTreeMap::new();
        // A deterministic walk over 40 keys: inserts, removals and re-inserts in a scrambled order.
        for step in 0..2_000usize {
            let k = (step * 7919) % 40;
            let key = (k % 3, format!("ns-{}", k % 4), format!("svc-{k}"));
            if (step / 40) % 2 == 0 || step % 5 == 0 {
                let content = object(&key.2);
                state.insert(key.clone(), &content);
                model.insert(key, content);
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
        let keys: Vec<&(usize, String, String)> = state.entries().map(|(k, _)| k).collect();
        assert_eq!(keys, model.keys().collect::<Vec<_>>());
        let expected: Vec<pb::ObjectRef> = model.values().map(|o| tape_ref(o)).collect();
        let refs: Vec<pb::ObjectRef> = state.objects().map(|o| tape_ref(o)).collect();
        assert_eq!(refs, expected);
        let objects: Vec<*const Tape> = state.objects().map(Arc::as_ptr).collect();
        let in_order: Vec<*const Tape> = model.values().map(Arc::as_ptr).collect();
        assert_eq!(objects, in_order);
    }
}
