//! Key lookups in borrowed JSON objects for field chains, and a per-render memo of whole
//! chains: a template reads the same chains of the same objects again and again
//! (`.Resource.metadata.name` in every line), and the borrowed data cannot change during a
//! render. Owned `Value` maps are not memoised (functions may modify them).

use std::sync::Arc;

use crate::doc::Doc as Json;

use crate::ast::{Chain, Name};
use crate::doc::DocMap;
use crate::val::{child, Shape, Val};

/// Slots of the memo of whole chains (a power of two).
const CHAINS: usize = 32;

/// Remembers whole chains of two names or more, `(object, chain) -> node`, for one render, by
/// the address of the object (borrowed for the whole render) and the address and length of
/// the chain (equal chains of a template are shared at parse time, `ast::Names`):
/// `.Resource.metadata.name` on every line of a template is then one lookup. Single keys are
/// not remembered: a lookup in a small object costs less than the memo's own bookkeeping.
pub struct Memo<'a> {
    chains: [ChainSlot<'a>; CHAINS],
}

/// A remembered chain: the object's address, the chain's address and length, and the node.
type ChainSlot<'a> = (usize, usize, usize, Option<(&'a Json, Shape)>);

impl Memo<'_> {
    pub fn new() -> Self {
        Memo {
            chains: [(0, 0, 0, None); CHAINS],
        }
    }
}

/// A key lookup in a JSON object (sorted entries with inline key heads, ADR 0015).
#[inline]
pub(crate) fn lookup<'j>(entries: &'j DocMap, key: &str) -> Option<&'j Json> {
    entries.get(key)
}

/// A field chain over borrowed JSON when every step finds its key; `None` leaves missing keys,
/// non-objects and method calls to the general rules.
#[inline]
pub(crate) fn chain<'a>(
    memo: &mut Memo<'a>,
    node: &'a Json,
    shape: Shape,
    names: &Chain,
) -> Option<Val<'a>> {
    // Chains are shared per distinct text and owned only by the tree: one held more than once
    // appears more than once in the template, and only those are worth remembering (a chain
    // read once per render would pay for the memo and gain nothing).
    if names.len() < 2 || Arc::strong_count(names) < 2 {
        return steps(node, shape, names);
    }
    let object = node as *const Json as usize;
    let (key, len) = (names.as_ptr() as usize, names.len());
    let slot = (object >> 3 ^ key >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59;
    let entry = memo.chains[slot % CHAINS];
    if let (true, Some((found, shape))) = (
        entry.0 == object && entry.1 == key && entry.2 == len,
        entry.3,
    ) {
        return Some(Val::J(found, shape));
    }
    let value = steps(node, shape, names)?;
    if let Val::J(found, shape) = value {
        memo.chains[slot % CHAINS] = (object, key, len, Some((found, shape)));
    }
    Some(value)
}

/// [`chain`] step by step. Only the first step can meet event data's types (`child`): below
/// the top level every node is plain data, so the later steps are bare lookups.
#[inline]
fn steps<'a>(node: &'a Json, shape: Shape, names: &[Name]) -> Option<Val<'a>> {
    let (first, rest) = names.split_first()?;
    let Json::Object(entries) = node else {
        return None;
    };
    let found = child(shape, first, lookup(entries, first)?);
    if rest.is_empty() {
        return Some(found);
    }
    let Val::J(mut node, _) = found else {
        return None;
    };
    for name in rest {
        let Json::Object(entries) = node else {
            return None;
        };
        node = lookup(entries, name)?;
    }
    Some(Val::J(node, Shape::Plain))
}
