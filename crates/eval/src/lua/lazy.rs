//! Lazy `MapToTable` for per-object evaluations: `obj` starts as an empty proxy table and each
//! map is converted only when a script reads one of its keys (then cached in the table), so a
//! script that reads three fields of a 45-field object converts three fields. Arrays are
//! converted whole when reached (their maps again as proxies). Iteration (`pairs`, `next`,
//! `rawget`, `json.encode`) first materializes the proxy fully: `pairs`, `next` and `rawget` are
//! replaced by the C functions below, `json.encode` by a Lua wrapper (see `sandbox.rs`).
//!
//! The object is a [`Tape`](crate::tape::Tape): maps are converted in `serde_json`'s key order (the order of an
//! ordered object's document; others are sorted), a repeated key with its last value.
//!
//! Memory safety: a proxy finds its JSON node through the table `PTRS` (proxy -> light userdata
//! holding the node's index in the tape, plus one) and the cache's `document` (the tape being
//! evaluated); `PTRS` is an upvalue of these C functions that no script can reach. `PTRS` holds
//! entries only while an evaluation runs: the runtime clears it before the borrowed object can go
//! away, so a proxy used at any other time finds no index and behaves as an empty table. The
//! table is kept (and so keeps its size) from one evaluation to the next instead of being
//! allocated anew.
//!
//! Known deviations: a key the script deletes (`obj.spec = nil`) reappears on the next read; an
//! unmaterialized map has a protected metatable (`getmetatable` is `false`, `setmetatable` fails).

use std::ffi::{c_int, c_void};

use super::shapes::{self, push_str, ShapeCache};
use crate::tape::{Kind, NodeRef};
use mlua::ffi;

/// Upvalue 1 of the C functions: the `PTRS` table.
pub(crate) const PTRS: c_int = ffi::lua_upvalueindex(1);
/// Upvalue 2 of the C functions: the metatable of proxies.
const META: c_int = ffi::lua_upvalueindex(2);
/// Upvalue 3 of the C functions: the `SHAPES` table (see `shapes.rs`).
const SHAPES: c_int = ffi::lua_upvalueindex(3);
/// Upvalue 4 of the C functions: the state's [`ShapeCache`], as a light userdata.
const CACHE: c_int = ffi::lua_upvalueindex(4);
/// Upvalues every C function of this module has.
pub(crate) const UPVALUES: c_int = 4;

/// Upvalue 5 of `pairs`: the original `next`.
const NEXT: c_int = ffi::lua_upvalueindex(5);

/// Where the conversion finds its tables: indices (absolute or upvalue pseudo-indices) of
/// `PTRS`, the proxy metatable and `SHAPES`, and the state's shape cache.
#[derive(Clone, Copy)]
pub(crate) struct Ctx {
    pub ptrs: c_int,
    pub meta: c_int,
    pub shapes: c_int,
    pub cache: *mut ShapeCache,
}

impl Ctx {
    /// The context of a C function of this module.
    ///
    /// # Safety
    /// Called from a C function created with this module's upvalues.
    unsafe fn of_upvalues(state: *mut ffi::lua_State) -> Ctx {
        unsafe {
            Ctx {
                ptrs: PTRS,
                meta: META,
                shapes: SHAPES,
                cache: ffi::lua_touserdata(state, CACHE).cast::<ShapeCache>(),
            }
        }
    }
}

/// Pushes the proxy of an object.
///
/// # Safety
/// Inside a protected call on a live state; `node`'s tape must stay alive until `PTRS` is cleared
/// (the runtime clears it at the end of the evaluation); `ctx.cache` is this state's cache.
pub(crate) unsafe fn push_object(state: *mut ffi::lua_State, node: NodeRef<'_>, ctx: Ctx) {
    unsafe {
        (*ctx.cache).document = node.tape();
        if !push_lazy(state, node, ctx) {
            ffi::lua_pushnil(state);
        }
    }
}

/// `__index` of proxies: converts and caches the child named by the key.
///
/// # Safety
/// Called by Luau only, as a C closure with the two upvalues above.
pub(crate) unsafe extern "C-unwind" fn index(state: *mut ffi::lua_State) -> c_int {
    unsafe {
        if ffi::lua_type(state, 2) != ffi::LUA_TSTRING {
            return 0;
        }
        let Some(map) = node_of(state, 1) else {
            return 0;
        };
        let mut len = 0usize;
        let ptr = ffi::lua_tolstring(state, 2, &mut len);
        let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
        let Some(child) = std::str::from_utf8(bytes).ok().and_then(|k| map.get(k)) else {
            return 0;
        };
        if !push_lazy(state, child, Ctx::of_upvalues(state)) {
            return 0;
        }
        ffi::lua_pushvalue(state, 2);
        ffi::lua_pushvalue(state, -2);
        ffi::lua_rawset(state, 1);
        1
    }
}

/// `materialize(t)`: converts every remaining key of a proxy into the table and drops its
/// metatable, so the table is an ordinary one from then on. Does nothing to other values.
///
/// # Safety
/// Called by Luau only, as a C closure with the two upvalues above.
pub(crate) unsafe extern "C-unwind" fn materialize(state: *mut ffi::lua_State) -> c_int {
    unsafe {
        materialize_at(state, 1);
        0
    }
}

/// `pairs(t)` that materializes a proxy first; then as Luau's `pairs` (`next, t, nil`).
///
/// # Safety
/// Called by Luau only, as a C closure with the two upvalues above and the original `next`.
pub(crate) unsafe extern "C-unwind" fn pairs(state: *mut ffi::lua_State) -> c_int {
    unsafe {
        ffi::luaL_checktype(state, 1, ffi::LUA_TTABLE);
        materialize_at(state, 1);
        ffi::lua_pushvalue(state, NEXT);
        ffi::lua_pushvalue(state, 1);
        ffi::lua_pushnil(state);
        3
    }
}

/// `next(t, k)` that materializes a proxy first.
///
/// # Safety
/// Called by Luau only, as a C closure with the two upvalues above.
pub(crate) unsafe extern "C-unwind" fn next(state: *mut ffi::lua_State) -> c_int {
    unsafe {
        ffi::luaL_checktype(state, 1, ffi::LUA_TTABLE);
        ffi::lua_settop(state, 2);
        materialize_at(state, 1);
        ffi::lua_settop(state, 2);
        if ffi::lua_next(state, 1) != 0 {
            2
        } else {
            ffi::lua_pushnil(state);
            1
        }
    }
}

/// `rawget(t, k)` that materializes a proxy first.
///
/// # Safety
/// Called by Luau only, as a C closure with the two upvalues above.
pub(crate) unsafe extern "C-unwind" fn rawget(state: *mut ffi::lua_State) -> c_int {
    unsafe {
        ffi::luaL_checktype(state, 1, ffi::LUA_TTABLE);
        ffi::luaL_checkany(state, 2);
        ffi::lua_settop(state, 2);
        materialize_at(state, 1);
        ffi::lua_settop(state, 2);
        ffi::lua_rawget(state, 1);
        1
    }
}

/// Materializes the proxy at the absolute index `t`, if it is one; leaves values pushed above
/// the caller's top.
///
/// # Safety
/// As [`index`].
unsafe fn materialize_at(state: *mut ffi::lua_State, t: c_int) {
    unsafe {
        if ffi::lua_type(state, t) != ffi::LUA_TTABLE {
            return;
        }
        let Some(map) = node_of(state, t) else {
            return;
        };
        let ctx = Ctx::of_upvalues(state);
        for (key, value) in map.sorted_entries() {
            if value.kind() == Kind::Null {
                continue;
            }
            push_str(state, &key.as_str().unwrap_or_default());
            ffi::lua_pushvalue(state, -1);
            let present = ffi::lua_rawget(state, t) != ffi::LUA_TNIL;
            ffi::lua_pop(state, 1);
            if !present && push_lazy(state, value, ctx) {
                ffi::lua_rawset(state, t);
            } else {
                ffi::lua_pop(state, 1);
            }
        }
        ffi::lua_pushnil(state);
        ffi::lua_setmetatable(state, t);
        ffi::lua_pushvalue(state, t);
        ffi::lua_pushnil(state);
        ffi::lua_rawset(state, PTRS);
    }
}

/// The JSON map behind the proxy at the absolute index `idx`.
///
/// # Safety
/// As [`index`].
unsafe fn node_of<'a>(state: *mut ffi::lua_State, idx: c_int) -> Option<NodeRef<'a>> {
    unsafe {
        ffi::lua_pushvalue(state, idx);
        ffi::lua_rawget(state, PTRS);
        let tag = if ffi::lua_type(state, -1) == ffi::LUA_TLIGHTUSERDATA {
            ffi::lua_touserdata(state, -1) as usize
        } else {
            0
        };
        ffi::lua_pop(state, 1);
        let document = (*ffi::lua_touserdata(state, CACHE).cast::<ShapeCache>()).document;
        if tag == 0 || document.is_null() {
            return None;
        }
        // SAFETY: PTRS only holds indices into the document being evaluated, and it is emptied
        // when that evaluation ends (module documentation).
        let node = (*document).node_at(tag - 1)?;
        (node.kind() == Kind::Object).then_some(node)
    }
}

/// Pushes a value with the `MapToTable` rules, maps as proxies; false (nothing pushed) for null.
///
/// # Safety
/// As [`push_object`].
unsafe fn push_lazy(state: *mut ffi::lua_State, value: NodeRef<'_>, ctx: Ctx) -> bool {
    unsafe {
        match value.kind() {
            Kind::Null => return false,
            Kind::True => ffi::lua_pushboolean(state, 1),
            Kind::False => ffi::lua_pushboolean(state, 0),
            Kind::Number => ffi::lua_pushnumber(state, value.as_f64().unwrap_or(f64::NAN)),
            Kind::String => push_str(state, &value.as_str().unwrap_or_default()),
            Kind::Object if is_small_and_flat(value) => {
                // Labels, annotations, ports: converting them whole is cheaper than a proxy
                // that `pairs` would materialize anyway.
                // SAFETY: the cache is this state's, used only by the running evaluation.
                shapes::push_flat_map(state, value, ctx.shapes, &mut *ctx.cache);
            }
            Kind::Object => {
                ffi::luaL_checkstack(state, 4, c"object nests too deeply".as_ptr());
                // Room for a few cached keys avoids rehashing on the first reads.
                ffi::lua_createtable(state, 0, c_int::try_from(value.len().min(4)).unwrap_or(4));
                ffi::lua_pushvalue(state, ctx.meta);
                ffi::lua_setmetatable(state, -2);
                ffi::lua_pushvalue(state, -1);
                // The tag is the node's index plus one, so that it is never null.
                ffi::lua_pushlightuserdata(state, (value.index() + 1) as *mut c_void);
                ffi::lua_rawset(state, ctx.ptrs);
            }
            Kind::Array => {
                ffi::luaL_checkstack(state, 4, c"object nests too deeply".as_ptr());
                ffi::lua_createtable(state, c_int::try_from(value.len()).unwrap_or(c_int::MAX), 0);
                let mut index: c_int = 1;
                for item in value.items() {
                    let kept = match item.kind() {
                        Kind::Object | Kind::String | Kind::True | Kind::False => true,
                        Kind::Number => item.as_i64().is_none(),
                        Kind::Null | Kind::Array => false,
                    };
                    if kept && push_lazy(state, item, ctx) {
                        ffi::lua_rawseti_(state, -2, index);
                        index += 1;
                    }
                }
            }
        }
        true
    }
}

/// Maps up to this many keys whose values are all scalars are converted whole, not lazily.
const EAGER_KEYS: usize = 8;

fn is_small_and_flat(map: NodeRef<'_>) -> bool {
    map.len() <= EAGER_KEYS
        && map
            .entries()
            .all(|(_, v)| !matches!(v.kind(), Kind::Object | Kind::Array))
}
