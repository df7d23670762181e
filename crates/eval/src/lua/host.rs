//! The host thread of a Lua state and the runner that performs one evaluation on it with the
//! Luau C API: a plain `lua_pcall` per evaluation instead of mlua's `exec_raw`, which takes
//! mlua's lock, copies every argument from its reference thread and allocates a C closure on
//! each call. Does not decide what a result means (see `lua.rs`).
//!
//! The host thread's stack holds, for the state's lifetime, the runner and the sandbox tables
//! in the first [`FIXED_SLOTS`] slots and then each compiled script as (chunk, global table).
//! Being on a live thread's stack keeps them from being collected.

use std::ffi::{c_int, c_void};

use mlua::ffi;

use super::{lazy, raw};
use crate::tape::NodeRef;

/// Stack slot of the runner closure.
pub(crate) const RUNNER: c_int = 1;
/// Stack slot of the `PTRS` table (also upvalue 1 of the runner and of the lazy functions).
pub(crate) const PTRS: c_int = 2;
/// Stack slot of the metatable of script global tables (also upvalue 3 of the runner).
pub(crate) const ENV_META: c_int = 3;
/// Stack slot of the string `"obj"`.
pub(crate) const OBJ_NAME: c_int = 4;
/// Stack slot of the string `"resources"`.
pub(crate) const RESOURCES_NAME: c_int = 5;
/// Slots before the first script.
pub(crate) const FIXED_SLOTS: c_int = 5;
/// Free stack slots kept reserved above the scripts: one evaluation pushes five values, and
/// reserving them up front means pushing them can never need an allocation (which could fail
/// outside a protected call). Luau's GC never shrinks a stack below a reserved top.
pub(crate) const RESERVED: c_int = 16;

/// Upvalue 2 of the runner: the metatable of lazily converted maps.
const LAZY_META: c_int = ffi::lua_upvalueindex(2);
/// Upvalue 3 of the runner: the metatable of script global tables.
const ENV_META_UPVALUE: c_int = ffi::lua_upvalueindex(3);
/// Upvalue 4 of the runner: the `SHAPES` table (see `shapes.rs`).
const SHAPES: c_int = ffi::lua_upvalueindex(4);
/// Upvalue 5 of the runner: the state's shape cache, as a light userdata.
const SHAPE_CACHE: c_int = ffi::lua_upvalueindex(5);

/// What one evaluation works on and where its fast verdict goes; passed to the runner as a
/// light userdata.
pub(crate) struct Run<'a> {
    pub input: raw::Input<'a>,
    /// Read a simple `{matching, message}` result directly (then the runner returns nil).
    pub want_verdict: bool,
    pub verdict: Option<(bool, String)>,
}

/// Pushes the runner closure over `PTRS`, the lazy metatable, the env metatable, `SHAPES` and
/// the shape cache (a light userdata), which must be the five values on top of the stack (they
/// are replaced by the closure).
///
/// # Safety
/// A live Luau state inside a protected call.
pub(crate) unsafe fn push_runner(state: *mut ffi::lua_State) {
    unsafe {
        ffi::lua_pushcclosurek(state, runner, c"sluice_run".as_ptr(), 5, None);
    }
}

/// Calls the runner on `host` for one evaluation of the script at `slot`. Returns the
/// `lua_pcall` status; the result (or the error value) is left on top of the stack.
///
/// # Safety
/// `host` is the host thread of a live state, no other evaluation is running on it, at least
/// five reserved slots are free, and `slot` is the slot of a compiled script.
pub(crate) unsafe fn call(
    host: *mut ffi::lua_State,
    slot: c_int,
    name: c_int,
    run: &mut Run<'_>,
) -> c_int {
    unsafe {
        ffi::lua_pushvalue(host, RUNNER);
        ffi::lua_pushvalue(host, slot);
        ffi::lua_pushvalue(host, slot + 1);
        ffi::lua_pushvalue(host, name);
        ffi::lua_pushlightuserdata(host, (run as *mut Run<'_>).cast::<c_void>());
        ffi::lua_pcall(host, 4, 1, 0)
    }
}

/// Empties a script's global table and restores its metatable and writability (a script may
/// have frozen it or replaced its metatable), and empties `PTRS`. Allocates nothing, so it is
/// safe outside a protected call.
///
/// # Safety
/// `env`, `env_meta` and `ptrs` are valid indices of the three tables on `state`.
pub(crate) unsafe fn reset(state: *mut ffi::lua_State, env: c_int, env_meta: c_int, ptrs: c_int) {
    unsafe {
        ffi::lua_setreadonly(state, env, 0);
        ffi::lua_cleartable(state, env);
        ffi::lua_pushvalue(state, env_meta);
        ffi::lua_setmetatable(state, env);
        ffi::lua_cleartable(state, ptrs);
    }
}

/// One evaluation, as sveltos-agent does it in a fresh state: run the chunk (which defines
/// `evaluate`), set the global input (`obj` or `resources`), call `evaluate(input)`.
/// Arguments: chunk, its global table, the global's name, the [`Run`].
///
/// # Safety
/// Called by Luau only, through [`call`].
unsafe extern "C-unwind" fn runner(state: *mut ffi::lua_State) -> c_int {
    const CHUNK: c_int = 1;
    const ENV: c_int = 2;
    const NAME: c_int = 3;
    const RUN: c_int = 4;
    const INPUT: c_int = 5;
    unsafe {
        // SAFETY: `call` passes a pointer to a `Run` that outlives the protected call.
        let run = &mut *ffi::lua_touserdata(state, RUN).cast::<Run<'_>>();
        reset(state, ENV, ENV_META_UPVALUE, lazy::PTRS);
        ffi::lua_pushvalue(state, CHUNK);
        ffi::lua_call(state, 0, 0);
        match &run.input {
            raw::Input::Object(object) => push_object(state, *object),
            raw::Input::List(values) => raw::push_list(state, values),
        }
        ffi::lua_pushvalue(state, NAME);
        ffi::lua_pushvalue(state, INPUT);
        ffi::lua_rawset(state, ENV);
        ffi::lua_rawgetfield(state, ENV, c"evaluate".as_ptr());
        if ffi::lua_type(state, -1) != ffi::LUA_TFUNCTION {
            let message =
                "attempt to call a non-function object (the script defines no evaluate function)";
            ffi::lua_pushlstring_(state, message.as_ptr().cast(), message.len());
            ffi::lua_error(state);
        }
        ffi::lua_pushvalue(state, INPUT);
        ffi::lua_call(state, 1, 1);
        if run.want_verdict {
            if let Some(verdict) = raw::read_simple_verdict(state, -1) {
                run.verdict = Some(verdict);
                ffi::lua_pop(state, 1);
                ffi::lua_pushnil(state);
            }
        }
        // Nothing may reach the object once this returns, and nothing this evaluation wrote
        // survives it.
        reset(state, ENV, ENV_META_UPVALUE, lazy::PTRS);
        1
    }
}

/// # Safety
/// Inside the runner.
unsafe fn push_object(state: *mut ffi::lua_State, object: NodeRef<'_>) {
    unsafe {
        let ctx = lazy::Ctx {
            ptrs: lazy::PTRS,
            meta: LAZY_META,
            shapes: SHAPES,
            cache: ffi::lua_touserdata(state, SHAPE_CACHE).cast(),
        };
        lazy::push_object(state, object, ctx);
    }
}
