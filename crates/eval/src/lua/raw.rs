//! The per-object hot path written against the Luau C API: builds the `MapToTable` conversion of
//! an object directly on the Lua stack and calls the driver, all inside one protected call.
//! mlua's safe API costs a protected call per table and per `raw_set` once a memory limit is set,
//! which made conversion ~90% of an evaluation. `MapToTable` rules: `null` map values are left
//! out; arrays keep only maps, non-integral numbers, strings and booleans.

use std::ffi::c_int;

use mlua::ffi;
use serde_json::{Map, Value};

use crate::tape::NodeRef;

/// Stack slots one nesting level needs: the table, a key and a value, plus headroom.
const SLOTS_PER_LEVEL: c_int = 4;

/// What the driver receives as its input argument.
pub(crate) enum Input<'a> {
    /// One object (`obj`), converted lazily (`lazy.rs`).
    Object(NodeRef<'a>),
    /// A list of objects (`resources`).
    List(&'a [Value]),
}

/// Pushes a list input (`resources`) onto the stack, converted whole.
///
/// # Safety
/// `state` must be a live Luau state and this must run inside a protected call (as within
/// `Lua::exec_raw`): allocation failures and stack overflow raise Lua errors that unwind through
/// this function, which holds no resources that need dropping.
pub(crate) unsafe fn push_list(state: *mut ffi::lua_State, values: &[Value]) {
    unsafe {
        check_stack(state);
        ffi::lua_createtable(state, len_hint(values.len()), 0);
        let mut index: c_int = 1;
        for value in values {
            if push_value(state, value) {
                ffi::lua_rawseti_(state, -2, index);
                index += 1;
            }
        }
    }
}

/// Pushes one value with the `MapToTable` rules; returns false (pushing nothing) for `null`.
///
/// # Safety
/// As [`push_input`].
unsafe fn push_value(state: *mut ffi::lua_State, value: &Value) -> bool {
    unsafe {
        match value {
            Value::Null => return false,
            Value::Bool(b) => ffi::lua_pushboolean(state, c_int::from(*b)),
            Value::Number(n) => ffi::lua_pushnumber(state, n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => push_str(state, s),
            Value::Object(map) => push_map(state, map),
            Value::Array(items) => {
                check_stack(state);
                ffi::lua_createtable(state, len_hint(items.len()), 0);
                let mut index: c_int = 1;
                for item in items {
                    let kept = match item {
                        Value::Object(_) | Value::String(_) | Value::Bool(_) => true,
                        // apimachinery decodes integral numbers as int64, which MapToTable drops.
                        Value::Number(n) => !n.is_i64(),
                        Value::Null | Value::Array(_) => false,
                    };
                    if kept && push_value(state, item) {
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
/// As [`push_input`].
unsafe fn push_map(state: *mut ffi::lua_State, map: &Map<String, Value>) {
    unsafe {
        check_stack(state);
        ffi::lua_createtable(state, 0, len_hint(map.len()));
        for (key, value) in map {
            if value.is_null() {
                continue;
            }
            push_str(state, key);
            if push_value(state, value) {
                ffi::lua_rawset(state, -3);
            } else {
                ffi::lua_pop(state, 1);
            }
        }
    }
}

/// # Safety
/// As [`push_input`].
unsafe fn push_str(state: *mut ffi::lua_State, s: &str) {
    unsafe {
        if s.is_empty() {
            ffi::lua_pushlstring_(state, c"".as_ptr(), 0);
        } else {
            ffi::lua_pushlstring_(state, s.as_ptr().cast(), s.len());
        }
    }
}

/// Raises a Lua error (instead of overflowing) when the stack cannot grow for one more level.
///
/// # Safety
/// As [`push_input`].
unsafe fn check_stack(state: *mut ffi::lua_State) {
    unsafe {
        ffi::luaL_checkstack(state, SLOTS_PER_LEVEL, c"object nests too deeply".as_ptr());
    }
}

fn len_hint(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// Reads `{matching, message}` straight from the result table at `idx` when the table is simple:
/// only string keys, only boolean, string or finite number values, `matching` a boolean and
/// `message` a string. Then Go's `ToGoValue` + JSON round trip cannot fail and yields exactly
/// this; anything else returns `None` and the caller takes the general path.
///
/// # Safety
/// As [`push_input`]; `idx` must be a valid negative or absolute stack index.
pub(crate) unsafe fn read_simple_verdict(
    state: *mut ffi::lua_State,
    idx: c_int,
) -> Option<(bool, String)> {
    unsafe {
        let t = ffi::lua_absindex(state, idx);
        if ffi::lua_type(state, t) != ffi::LUA_TTABLE || ffi::lua_objlen(state, t) != 0 {
            return None;
        }
        // Go decodes keys in sorted order and the last case-insensitive match wins.
        // Keys and values stay alive (and in place) while the table is on the stack.
        let mut matching: Option<(&[u8], bool)> = None;
        let mut message: Option<(&[u8], &[u8])> = None;
        let mut simple = true;
        ffi::lua_pushnil(state);
        while ffi::lua_next(state, t) != 0 {
            if ffi::lua_type(state, -2) != ffi::LUA_TSTRING {
                simple = false;
            } else {
                let mut len = 0usize;
                let ptr = ffi::lua_tolstring(state, -2, &mut len);
                let key = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
                let vtype = ffi::lua_type(state, -1);
                if key.eq_ignore_ascii_case(b"matching") {
                    if vtype != ffi::LUA_TBOOLEAN {
                        simple = false;
                    } else if matching.is_none_or(|(k, _)| key > k) {
                        matching = Some((key, ffi::lua_toboolean(state, -1) != 0));
                    }
                } else if key.eq_ignore_ascii_case(b"message") {
                    if vtype != ffi::LUA_TSTRING {
                        simple = false;
                    } else if message.is_none_or(|(k, _)| key > k) {
                        let mut vlen = 0usize;
                        let vptr = ffi::lua_tolstring(state, -1, &mut vlen);
                        message = Some((key, std::slice::from_raw_parts(vptr.cast::<u8>(), vlen)));
                    }
                } else {
                    simple &= match vtype {
                        ffi::LUA_TBOOLEAN | ffi::LUA_TSTRING => true,
                        ffi::LUA_TNUMBER => ffi::lua_tonumber(state, -1).is_finite(),
                        _ => false,
                    };
                }
            }
            ffi::lua_pop(state, 1);
            if !simple {
                ffi::lua_pop(state, 1);
                return None;
            }
        }
        Some((
            matching.is_some_and(|(_, b)| b),
            message
                .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
                .unwrap_or_default(),
        ))
    }
}
