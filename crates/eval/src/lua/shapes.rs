//! Templates for the small maps of scalars that `lazy.rs` converts whole (labels, annotations,
//! the items of `spec.ports`). Objects of one kind repeat the same few key sets, often with the
//! same values, and building a table key by key costs an interned string and a new hash slot
//! per key and per value. So a map is kept as the template of its key set; a later map with the
//! same keys is a clone of the template (same layout, so `pairs` visits keys in the same order
//! as in a freshly built table) in which only the values that differ are overwritten.
//!
//! The cache is direct-mapped on a hash of the key set: [`SLOTS`] slots, each holding one map
//! (its keys and values on the Rust side, to compare without touching Lua; its table and
//! interned keys in the `SHAPES` table, an upvalue no script can reach). A key set that misses
//! twice in a row replaces the one held, so alternating key sets do not evict each other on
//! every map. Templates are never given to a script, only their clones, so nothing an
//! evaluation does can change what the next one gets.

use std::ffi::c_int;

use mlua::ffi;

use crate::tape::{Kind, NodeRef, Tape};

/// Slots of the cache; a slot holds one key set.
pub(crate) const SLOTS: usize = 256;

/// The Rust side of the cache: which key set each slot of `SHAPES` holds. It also holds the
/// document being evaluated, which the lazy conversion's C functions (that get this cache as an
/// upvalue) read their nodes from (`lazy.rs`).
pub(crate) struct ShapeCache {
    slots: Vec<Slot>,
    /// The tape of the running evaluation; only read while `PTRS` holds entries.
    pub(crate) document: *const Tape,
}

/// One key and value of a template as raw JSON bytes (equal bytes are equal values), the value
/// with its kind.
type Held = (Box<[u8]>, Kind, Box<[u8]>);

#[derive(Default)]
struct Slot {
    /// Hash of the key set held; meaningful only when `entries` is not empty.
    hash: u64,
    /// The template's keys and values, in map (and so in `SHAPES` entry) order.
    entries: Box<[Held]>,
    /// Hash of the last other key set that missed here.
    last_miss: u64,
}

impl ShapeCache {
    pub(crate) fn new() -> ShapeCache {
        ShapeCache {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            document: std::ptr::null(),
        }
    }
}

/// Pushes a new table holding the non-null values of `map`, an object holding scalars only.
///
/// # Safety
/// Inside a protected call on a live state; `shapes` is a valid index of the `SHAPES` table
/// and `cache` is the cache of this state, used by nobody else meanwhile.
pub(crate) unsafe fn push_flat_map(
    state: *mut ffi::lua_State,
    map: NodeRef<'_>,
    shapes: c_int,
    cache: &mut ShapeCache,
) {
    unsafe {
        ffi::luaL_checkstack(state, 6, c"object nests too deeply".as_ptr());
        let Some(hash) = key_set_hash(map) else {
            push_fresh(state, map);
            return;
        };
        let index = usize::try_from(hash % SLOTS as u64).unwrap_or(0);
        let lua_slot = c_int::try_from(index + 1).unwrap_or(1);
        let slot = &mut cache.slots[index];
        if slot.hash == hash
            && slot.entries.len() == map.len()
            && push_from_template(state, map, &slot.entries, shapes, lua_slot)
        {
            return;
        }
        push_fresh(state, map);
        if !slot.entries.is_empty() && slot.hash != hash && slot.last_miss != hash {
            slot.last_miss = hash;
            return;
        }
        if slot.hash == hash && !slot.entries.is_empty()
            || map.entries().any(|(_, v)| v.kind() == Kind::Null)
        {
            // Another key set with the same hash is held (keep it), or this table leaves out
            // a null and so does not hold the map's key set.
            return;
        }
        // Keep this map's table as the template of its key set.
        let table = ffi::lua_gettop(state);
        let keys = c_int::try_from(map.len()).unwrap_or(0);
        ffi::lua_createtable(state, keys + 1, 0);
        let entry = ffi::lua_gettop(state);
        ffi::lua_clonetable(state, table);
        ffi::lua_rawseti_(state, entry, 1);
        for (i, (key, _)) in map.entries().enumerate() {
            push_str(state, &key.as_str().unwrap_or_default());
            ffi::lua_rawseti_(state, entry, c_int::try_from(i).unwrap_or(0) + 2);
        }
        ffi::lua_rawseti_(state, shapes, lua_slot);
        *slot = Slot {
            hash,
            entries: map
                .entries()
                .map(|(k, v)| (Box::from(k.raw()), v.kind(), Box::from(v.raw())))
                .collect(),
            last_miss: 0,
        };
    }
}

/// Pushes a clone of the slot's template with the values of `map` that differ from it, if
/// `map` has the template's keys and no null; otherwise pushes nothing and returns false.
///
/// # Safety
/// As [`push_flat_map`]; `lua_slot` holds the entry of `entries` in `SHAPES`.
unsafe fn push_from_template(
    state: *mut ffi::lua_State,
    map: NodeRef<'_>,
    entries: &[Held],
    shapes: c_int,
    lua_slot: c_int,
) -> bool {
    unsafe {
        ffi::lua_rawgeti_(state, shapes, lua_slot);
        let entry = ffi::lua_gettop(state);
        ffi::lua_rawgeti_(state, entry, 1);
        ffi::lua_clonetable(state, -1);
        let table = ffi::lua_gettop(state);
        // The entry holds the template at 1 and the interned keys from 2 on.
        for (key, ((name, value), (held_name, held_kind, held_value))) in
            (2..).zip(map.entries().zip(entries))
        {
            if name.raw() != &**held_name || value.kind() == Kind::Null {
                ffi::lua_settop(state, entry - 1);
                return false;
            }
            if value.kind() != *held_kind || value.raw() != &**held_value {
                ffi::lua_rawgeti_(state, entry, key);
                push_scalar(state, value);
                ffi::lua_rawset(state, table);
            }
        }
        ffi::lua_replace(state, entry);
        ffi::lua_settop(state, entry);
        true
    }
}

/// Builds the table key by key: keys in `serde_json`'s map order, null values left out.
///
/// # Safety
/// As [`push_flat_map`].
unsafe fn push_fresh(state: *mut ffi::lua_State, map: NodeRef<'_>) {
    unsafe {
        ffi::lua_createtable(state, 0, c_int::try_from(map.len()).unwrap_or(0));
        for (key, value) in map.sorted_entries() {
            if value.kind() == Kind::Null {
                continue;
            }
            push_str(state, &key.as_str().unwrap_or_default());
            push_scalar(state, value);
            ffi::lua_rawset(state, -3);
        }
    }
}

/// Pushes a bool, number or string; anything else (never passed here) as nil.
///
/// # Safety
/// On a live state with a free stack slot.
unsafe fn push_scalar(state: *mut ffi::lua_State, value: NodeRef<'_>) {
    unsafe {
        match value.kind() {
            Kind::True => ffi::lua_pushboolean(state, 1),
            Kind::False => ffi::lua_pushboolean(state, 0),
            Kind::Number => ffi::lua_pushnumber(state, value.as_f64().unwrap_or(f64::NAN)),
            Kind::String => push_str(state, &value.as_str().unwrap_or_default()),
            Kind::Null | Kind::Array | Kind::Object => ffi::lua_pushnil(state),
        }
    }
}

/// # Safety
/// On a live state with a free stack slot.
pub(crate) unsafe fn push_str(state: *mut ffi::lua_State, s: &str) {
    unsafe {
        if s.is_empty() {
            ffi::lua_pushlstring_(state, c"".as_ptr(), 0);
        } else {
            ffi::lua_pushlstring_(state, s.as_ptr().cast(), s.len());
        }
    }
}

/// A hash of the map's key set (its size, first and last key: keys are compared in full on a
/// hit), for maps worth a template: ordered objects (whose entries are in map order) of at
/// least two keys.
fn key_set_hash(map: NodeRef<'_>) -> Option<u64> {
    if map.len() < 2 || !map.is_ordered_object() {
        return None;
    }
    let mut keys = map.entries().map(|(k, _)| k.raw());
    let first = keys.next()?;
    let last = keys.last()?;
    let mut hash = mix(0x9e37_79b9_7f4a_7c15, map.len() as u64);
    for key in [first, last] {
        hash = mix(hash, key.len() as u64);
        hash = mix(hash, prefix_word(key));
        hash = mix(hash, prefix_word(key.get(8..).unwrap_or_default()));
    }
    Some(hash)
}

/// The first eight bytes, zero-padded, as a word.
fn prefix_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(word)
}

fn mix(hash: u64, word: u64) -> u64 {
    (hash ^ word)
        .wrapping_mul(0x2127_599b_f432_5c37)
        .rotate_left(29)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn hash(v: Value) -> Option<u64> {
        key_set_hash(Tape::from_value(&v).expect("a document").root())
    }

    #[test]
    fn key_sets_hash_apart_and_single_keys_get_no_template() {
        let ports =
            hash(json!({"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}));
        let same =
            hash(json!({"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}));
        let fewer = hash(json!({"name": "http", "port": 80, "targetPort": 8080}));
        let longer = hash(json!({"name": "http", "port": 80, "protocol": "TCP", "targetPortX": 1}));
        assert!(ports.is_some());
        assert_eq!(ports, same);
        assert_ne!(ports, fewer);
        assert_ne!(ports, longer);
        assert_eq!(hash(json!({"a": 1})), None);
        let unordered = Tape::parse(br#"{"b": 1, "a": 2}"#.to_vec()).expect("a document");
        assert_eq!(
            key_set_hash(unordered.root()),
            None,
            "unordered keys get no template"
        );
    }
}
