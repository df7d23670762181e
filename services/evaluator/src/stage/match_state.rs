//! The match state of one (cluster, EventSource) pair: which objects match and which failed,
//! how one evaluated change updates it, and what identifies a match set's content.

use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// within a selector, selectors in spec order.
    pub(super) matching: BTreeMap<(usize, String, String), Matched>,
    /// Objects whose evaluation failed, with the reason.
    pub(super) errors: BTreeMap<(String, String, String), String>,
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
    let map_key: &dyn Placed = &(position, change.namespace.as_str(), change.name.as_str());
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
        (true, Some(object)) => match state.matching.get_mut(map_key) {
            Some(previous) => {
                // Equal text is equal content; different text may still be equal content, which
                // the published set's content hash then finds unchanged.
                let changed = compiled.content_matters && previous.object.bytes() != object.bytes();
                previous.object = object.clone();
                changed
            }
            None => {
                state.matching.insert(owned_key(), Matched::new(object));
                true
            }
        },
        _ => !state.matching.is_empty() && state.matching.remove(map_key).is_some(),
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
