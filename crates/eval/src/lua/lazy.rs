//! Lazy `MapToTable` for per-object evaluations: `obj` starts as an empty proxy table and each
//! map is converted only when a script reads one of its keys (then cached in the table), so a
//! script that reads three fields of a 45-field object converts three fields. Arrays are
//! converted whole when reached (their maps again as proxies). Iteration (`pairs`, `next`,
//! `rawget`, `json.encode`) first materializes the proxy fully, see `sandbox.rs`.
//!
//! Memory safety: a proxy finds its JSON node through the per-evaluation table `PTRS`
//! (proxy -> light userdata pointer), reachable only through `BOX[1]`. The runtime sets `BOX[1]`
//! right before an evaluation and clears it right after, before the borrowed object can go away;
//! a proxy used at any other time finds no pointer and behaves as an empty table.
//!
//! Known deviations: a key the script deletes (`obj.spec = nil`) reappears on the next read; an
//! unmaterialized map has a protected metatable (`getmetatable` is `false`, `setmetatable` fails).

use std::ffi::{c_int, c_void};

use mlua::ffi;
use serde_json::{Map, Value};

/// Upvalue 1 of the C functions: the box whose slot 1 holds the current `PTRS` table.
const BOX: c_int = ffi::lua_upvalueindex(1);
/// Upvalue 2 of the C functions: the metatable of proxies.
const META: c_int = ffi::lua_upvalueindex(2);

/// Pushes the proxy of an object. `ptrs` and `meta` are absolute stack indices of the current
/// `PTRS` table and the proxy metatable.
///
/// # Safety
/// Inside a protected call on a live state; `node` must stay alive while `PTRS` is reachable
/// from the box (the runtime clears it after the evaluation).
pub(crate) unsafe fn push_object(
    state: *mut ffi::lua_State,
    node: &Value,
    ptrs: c_int,
    meta: c_int,
) {
    unsafe {
        if !push_lazy(state, node, ptrs, meta) {
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
        let Some(child) = std::str::from_utf8(bytes)
            .ok()
            .and_then(|k| crate::filters::get(map, k))
        else {
            return 0;
        };
        // Stack: t, k, PTRS.
        let ptrs = 3;
        ffi::lua_pushvalue(state, META);
        let meta = ffi::lua_gettop(state);
        if !push_lazy(state, child, ptrs, meta) {
            return 0;
        }
        ffi::lua_pushvalue(state, 2);
        ffi::lua_pushvalue(state, -2);
        ffi::lua_rawset(state, 1);
        1
    }
}

/// Converts every remaining key of a proxy into the table and drops its metatable, so the table
/// is an ordinary one from then on. Does nothing to other values.
///
/// # Safety
/// Called by Luau only, as a C closure with the two upvalues above.
pub(crate) unsafe extern "C-unwind" fn materialize(state: *mut ffi::lua_State) -> c_int {
    unsafe {
        if ffi::lua_type(state, 1) != ffi::LUA_TTABLE {
            return 0;
        }
        let Some(map) = node_of(state, 1) else {
            return 0;
        };
        // Stack: t, PTRS.
        let ptrs = 2;
        ffi::lua_pushvalue(state, META);
        let meta = ffi::lua_gettop(state);
        for (key, value) in map {
            if value.is_null() {
                continue;
            }
            push_str(state, key);
            ffi::lua_rawget(state, 1);
            let present = ffi::lua_type(state, -1) != ffi::LUA_TNIL;
            ffi::lua_pop(state, 1);
            if present {
                continue;
            }
            push_str(state, key);
            if push_lazy(state, value, ptrs, meta) {
                ffi::lua_rawset(state, 1);
            } else {
                ffi::lua_pop(state, 1);
            }
        }
        ffi::lua_pushnil(state);
        ffi::lua_setmetatable(state, 1);
        ffi::lua_pushvalue(state, 1);
        ffi::lua_pushnil(state);
        ffi::lua_rawset(state, ptrs);
        0
    }
}

/// The JSON map behind the proxy at `idx`, leaving `PTRS` pushed on the stack (or nil).
///
/// # Safety
/// As [`index`].
unsafe fn node_of<'a>(state: *mut ffi::lua_State, idx: c_int) -> Option<&'a Map<String, Value>> {
    unsafe {
        ffi::lua_rawgeti_(state, BOX, 1);
        if ffi::lua_type(state, -1) != ffi::LUA_TTABLE {
            return None;
        }
        ffi::lua_pushvalue(state, idx);
        ffi::lua_rawget(state, -2);
        let ptr = if ffi::lua_type(state, -1) == ffi::LUA_TLIGHTUSERDATA {
            ffi::lua_touserdata(state, -1)
        } else {
            std::ptr::null_mut()
        };
        ffi::lua_pop(state, 1);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: PTRS only holds pointers to nodes of the object being evaluated, and it is
        // reachable only while that evaluation runs (module documentation).
        (*ptr.cast::<Value>()).as_object()
    }
}

/// Pushes a value with the `MapToTable` rules, maps as proxies; false (nothing pushed) for null.
///
/// # Safety
/// As [`push_object`].
unsafe fn push_lazy(state: *mut ffi::lua_State, value: &Value, ptrs: c_int, meta: c_int) -> bool {
    unsafe {
        match value {
            Value::Null => return false,
            Value::Bool(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
            Value::Number(n) => ffi::lua_pushnumber(state, n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => push_str(state, s),
            Value::Object(map) => {
                ffi::luaL_checkstack(state, 4, c"object nests too deeply".as_ptr());
                // Room for a few cached keys avoids rehashing on the first reads.
                ffi::lua_createtable(state, 0, c_int::try_from(map.len().min(4)).unwrap_or(4));
                ffi::lua_pushvalue(state, meta);
                ffi::lua_setmetatable(state, -2);
                ffi::lua_pushvalue(state, -1);
                ffi::lua_pushlightuserdata(
                    state,
                    (value as *const Value).cast_mut().cast::<c_void>(),
                );
                ffi::lua_rawset(state, ptrs);
            }
            Value::Array(items) => {
                ffi::luaL_checkstack(state, 4, c"object nests too deeply".as_ptr());
                ffi::lua_createtable(state, c_int::try_from(items.len()).unwrap_or(c_int::MAX), 0);
                let mut index: c_int = 1;
                for item in items {
                    let kept = match item {
                        Value::Object(_) | Value::String(_) | Value::Bool(_) => true,
                        Value::Number(n) => !n.is_i64(),
                        Value::Null | Value::Array(_) => false,
                    };
                    if kept && push_lazy(state, item, ptrs, meta) {
                        ffi::lua_rawseti_(state, -2, index);
                        index += 1;
                    }
                }
            }
        }
        true
    }
}

/// # Safety
/// As [`push_object`].
unsafe fn push_str(state: *mut ffi::lua_State, s: &str) {
    unsafe {
        if s.is_empty() {
            ffi::lua_pushlstring_(state, c"".as_ptr(), 0);
        } else {
            ffi::lua_pushlstring_(state, s.as_ptr().cast(), s.len());
        }
    }
}
