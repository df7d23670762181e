//! The Lua engine of one EventSource: a Luau state (through mlua) holding its scripts compiled
//! once, run with an instruction budget and a memory limit per evaluation, each evaluation
//! starting from an empty global table of its script. Knows the sveltos-agent calling conventions (`obj` + `evaluate()`,
//! `resources` + `evaluate()`), not the EventSource match order (see `lib.rs`).
//!
//! Why Luau rather than PUC Lua 5.1: it formats numbers the way gopher-lua does (shortest round
//! trip) where 5.1 uses `%.14g` even for `..`, it has no `io`, no file loading and no loadable
//! bytecode at all, and its interrupt stops every loop shape. See `README.md`.

mod budget;
mod convert;
mod host;
mod lazy;
mod raw;
mod sandbox;
mod shapes;

use std::cell::Cell;
use std::ffi::c_int;

use mlua::chunk::ChunkMode;
use mlua::{ffi, Lua, Value as LuaValue};
use serde_json::Value;

use crate::tape::NodeRef;
use shapes::ShapeCache;

/// Per-evaluation resource limits of a Lua script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Interrupts (loop back-edges and function calls) one per-object evaluation may take.
    pub instructions: u64,
    /// Interrupts one `aggregatedSelection` run may take (it sees every selected object).
    pub aggregated_instructions: u64,
    /// Bytes one evaluation may allocate on top of what the state held before it (give or
    /// take a 64th: the limit is moved only when it is off by more).
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            instructions: 10_000_000,
            aggregated_instructions: 200_000_000,
            memory_bytes: 64 << 20,
        }
    }
}

/// Luau's GC goal: the heap may grow to this percentage of the live data before a cycle ends.
const GC_GOAL_PERCENT: c_int = 400;

/// A Lua script that failed to compile.
#[derive(Debug)]
pub(crate) struct CompileError {
    pub line: Option<u32>,
    pub message: String,
}

/// The Lua state of one EventSource. Not shared between threads at the same time: the owner
/// keeps it behind a mutex.
pub(crate) struct LuaRuntime {
    /// Declared first so the state is dropped before the cache its C functions point to.
    lua: Lua,
    /// The host thread (see `host.rs`): a thread of `lua`'s state, anchored in its registry.
    host: *mut ffi::lua_State,
    /// Stack slots in use on the host thread (the fixed ones and two per script).
    slots: Cell<c_int>,
    limits: Limits,
    /// The memory limit currently set on the state (bytes, 0 for none).
    memory_limit: Cell<usize>,
    /// The Rust side of the small-map templates (`shapes.rs`); the state's C functions hold a
    /// pointer to it, so it is boxed (its address never changes) and outlives the state.
    _shapes: Box<ShapeCache>,
}

// SAFETY: `host` points into the state that `lua` owns, which mlua lets move between threads
// (the `send` feature); the runtime is only ever used by one thread at a time (its owner keeps it
// behind a mutex), and the pointer is never used after `lua` is dropped.
unsafe impl Send for LuaRuntime {}

/// A compiled script: its chunk and its own global table live on the host thread's stack.
///
/// Isolation: sveltos-agent gives every object a new state, so nothing a script writes to its
/// globals (`hs = {}` in the seed scripts) survives to the next object. Here the script's
/// global table (reads fall through to the frozen globals) is emptied and the chunk is run
/// again for every evaluation, which gives the same guarantee without allocating anything.
pub(crate) struct Script {
    /// Host stack slot of the chunk; the global table is in the next one.
    slot: c_int,
}

impl LuaRuntime {
    pub(crate) fn new(limits: Limits) -> mlua::Result<LuaRuntime> {
        let lua = Lua::new();
        // The live heap of a state is small (the libraries, the scripts), so with Luau's
        // default goal (200%) every few hundred evaluations start a new mark of it. A higher
        // goal lets garbage accumulate a little longer: less GC work per evaluation.
        lua.gc_set_mode(mlua::state::GcMode::Incremental(
            mlua::state::GcIncParams::default().goal(GC_GOAL_PERCENT),
        ));
        let mut shape_cache = Box::new(ShapeCache::new());
        let cache: *mut ShapeCache = &mut *shape_cache;
        let sandbox::Sandbox {
            ptrs,
            lazy_meta,
            shapes,
            env_meta,
        } = sandbox::install(&lua, cache)?;
        let mut host = std::ptr::null_mut();
        // SAFETY: inside mlua's protected call: creates the host thread, anchors it in the
        // registry and moves the runner, PTRS, the env metatable and the two names onto it.
        // Nothing is left on mlua's stack.
        unsafe {
            lua.exec_raw::<()>((&ptrs, &lazy_meta, &env_meta, &shapes), |state| {
                budget::install(state);
                let thread = ffi::lua_newthread(state);
                ffi::lua_ref(state, -1);
                ffi::lua_pop(state, 1);
                ffi::lua_checkstack(thread, host::FIXED_SLOTS + host::RESERVED);
                // Stack: ptrs, lazy_meta, env_meta, shapes.
                ffi::lua_pushvalue(state, 1);
                ffi::lua_pushvalue(state, 2);
                ffi::lua_pushvalue(state, 3);
                ffi::lua_pushvalue(state, 4);
                ffi::lua_pushlightuserdata(state, cache.cast());
                host::push_runner(state);
                ffi::lua_pushvalue(state, 1);
                ffi::lua_pushvalue(state, 3);
                ffi::lua_pushlstring_(state, c"obj".as_ptr(), 3);
                ffi::lua_pushlstring_(state, c"resources".as_ptr(), 9);
                ffi::lua_xmove(state, thread, host::FIXED_SLOTS);
                ffi::lua_settop(state, 0);
                host = thread;
            })?
        };
        Ok(LuaRuntime {
            lua,
            host,
            slots: Cell::new(host::FIXED_SLOTS),
            limits,
            memory_limit: Cell::new(0),
            _shapes: shape_cache,
        })
    }

    /// Compiles `source` (text only: binary chunks are refused) under the chunk name `field`.
    pub(crate) fn compile(&self, source: &str, field: &str) -> Result<Script, CompileError> {
        let state_error = |e: mlua::Error| CompileError {
            line: None,
            message: root_message(&e),
        };
        let env = self.lua.create_table().map_err(state_error)?;
        let chunk = self
            .lua
            .load(source)
            .set_name(format!("={field}"))
            .set_mode(ChunkMode::Text)
            .set_environment(env.clone())
            .into_function()
            .map_err(|e| {
                let message = root_message(&e);
                let line = message
                    .strip_prefix(field)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .and_then(|rest| rest.split(':').next())
                    .and_then(|n| n.parse().ok());
                CompileError { line, message }
            })?;
        let slot = self.slots.get() + 1;
        let host = self.host;
        // SAFETY: inside mlua's protected call (no memory limit is set before the first
        // evaluation, and scripts are compiled before it): grows the host stack so that the
        // reserved slots stay free above the new script, and moves the chunk and its table there.
        unsafe {
            self.lua.exec_raw::<()>((&chunk, &env), |state| {
                ffi::lua_checkstack(host, 2 + host::RESERVED);
                ffi::lua_xmove(state, host, 2);
            })
        }
        .map_err(state_error)?;
        self.slots.set(slot + 1);
        Ok(Script { slot })
    }

    /// Runs a per-object `evaluate()` and reads `{matching, message}` from its result.
    pub(crate) fn evaluate(
        &self,
        script: &Script,
        object: NodeRef<'_>,
    ) -> Result<(bool, String), String> {
        let mut run = host::Run {
            input: raw::Input::Object(object),
            want_verdict: true,
            verdict: None,
        };
        let result = self.run(script, host::OBJ_NAME, self.limits.instructions, &mut run)?;
        match run.verdict {
            Some(verdict) => Ok(verdict),
            None => decode_verdict(&self.take_result(result)?),
        }
    }

    /// Runs `aggregatedSelection` over `objects` and returns the objects it selected and its message.
    pub(crate) fn aggregate(
        &self,
        script: &Script,
        objects: &[Value],
    ) -> Result<(Vec<Value>, String), String> {
        let mut run = host::Run {
            input: raw::Input::List(objects),
            want_verdict: false,
            verdict: None,
        };
        let result = self.run(
            script,
            host::RESOURCES_NAME,
            self.limits.aggregated_instructions,
            &mut run,
        )?;
        decode_aggregated(&self.take_result(result)?)
    }

    /// One evaluation on the host thread. On success the result stays on top of the host stack
    /// and the returned guard pops it.
    fn run(
        &self,
        script: &Script,
        name: c_int,
        budget: u64,
        run: &mut host::Run<'_>,
    ) -> Result<HostTop, String> {
        // The limit is "what the state holds now plus `memory_bytes`", give or take a 64th:
        // moving it only when it is off by more saves two calls per evaluation.
        let wanted = self
            .lua
            .used_memory()
            .saturating_add(self.limits.memory_bytes);
        if wanted.abs_diff(self.memory_limit.get()) > self.limits.memory_bytes / 64 {
            self.lua
                .set_memory_limit(wanted)
                .map_err(|e| format!("cannot set the memory limit: {e}"))?;
            self.memory_limit.set(wanted);
        }
        let host = self.host;
        budget::start(budget);
        // SAFETY: this runtime is used by one thread at a time and nothing else runs on the
        // host thread; five of the reserved slots are free (the stack is back at `slots` after
        // every evaluation); `script.slot` came from `compile` on this runtime. The runner
        // empties PTRS before it returns, and `reset` below does after an error, so no pointer
        // into `run.input` outlives this call.
        let status = unsafe { host::call(host, script.slot, name, run) };
        let exhausted = budget::finish();
        if status == ffi::LUA_OK {
            return Ok(HostTop {
                host,
                base: self.slots.get(),
            });
        }
        let top = HostTop {
            host,
            base: self.slots.get(),
        };
        // SAFETY: the script's table and PTRS are at known slots; `reset` allocates nothing.
        unsafe {
            host::reset(host, script.slot + 1, host::ENV_META, host::PTRS);
        }
        if exhausted {
            return Err(format!("instruction budget of {budget} exceeded"));
        }
        let (message, memory) = self.error_message(&top);
        if status == ffi::LUA_ERRMEM || memory || message.contains("not enough memory") {
            drop(top);
            // Garbage left by the failed run would count against the next limit.
            let _ = self.lua.gc_collect();
            let _ = self.lua.gc_collect();
            return Err(format!(
                "memory limit of {} bytes exceeded",
                self.limits.memory_bytes
            ));
        }
        Err(message)
    }

    /// The message of the error value on top of the host stack, and whether it is mlua's
    /// memory error.
    fn error_message(&self, _top: &HostTop) -> (String, bool) {
        let host = self.host;
        // SAFETY: the error value is on top of the host stack (kept there by `_top`).
        unsafe {
            if ffi::lua_type(host, -1) == ffi::LUA_TSTRING {
                let mut len = 0usize;
                let ptr = ffi::lua_tolstring(host, -1, &mut len);
                let bytes = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
                let full = String::from_utf8_lossy(bytes);
                let message = match full.split_once("\nstack traceback:") {
                    Some((message, _)) => message.to_string(),
                    None => full.into_owned(),
                };
                return (message, false);
            }
        }
        // Errors raised by mlua callbacks (the Rust helpers) are mlua error values: let mlua
        // read them.
        match self.take_top() {
            Ok(LuaValue::Error(e)) => (root_message(&e), is_memory_error(&e)),
            Ok(other) => (
                format!("(error object is a {} value)", other.type_name()),
                false,
            ),
            Err(e) => (root_message(&e), is_memory_error(&e)),
        }
    }

    /// Moves the value on top of the host stack to mlua.
    fn take_top(&self) -> mlua::Result<LuaValue> {
        let host = self.host;
        // SAFETY: a protected call that moves one value from the host thread to mlua's stack,
        // where mlua pops it as the result.
        unsafe {
            self.lua.exec_raw((), |state| {
                ffi::lua_xmove(host, state, 1);
            })
        }
    }

    fn take_result(&self, top: HostTop) -> Result<LuaValue, String> {
        let value = self.take_top().map_err(|e| root_message(&e));
        drop(top);
        value
    }
}

/// Pops the host stack back to the scripts when dropped.
struct HostTop {
    host: *mut ffi::lua_State,
    base: c_int,
}

impl Drop for HostTop {
    fn drop(&mut self) {
        // SAFETY: `base` is at or below the current top of the host stack; settop only pops.
        unsafe { ffi::lua_settop(self.host, self.base) }
    }
}

fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        mlua::Error::WithContext { cause, .. } => is_memory_error(cause),
        mlua::Error::RuntimeError(m) => m.contains("not enough memory"),
        _ => false,
    }
}

/// The message of the error that started it all, without mlua's wrapping and tracebacks.
fn root_message(e: &mlua::Error) -> String {
    let full = root_message_with_traceback(e);
    match full.split_once("\nstack traceback:") {
        Some((message, _)) => message.to_string(),
        None => full,
    }
}

fn root_message_with_traceback(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::CallbackError { cause, .. } => root_message_with_traceback(cause),
        mlua::Error::WithContext { cause, .. } => root_message_with_traceback(cause),
        other => other.to_string(),
    }
}

/// `{matching, message}` as sveltos-agent reads it: `ToGoValue`, `json.Marshal`, then
/// `json.Unmarshal` into `struct {Matching bool; Message string}` (keys match case-insensitively,
/// a later key wins, `null` leaves the field alone).
fn decode_verdict(result: &LuaValue) -> Result<(bool, String), String> {
    let fields = go_struct_fields(result, "eventMatchStatus")?;
    let (mut matching, mut message) = (false, String::new());
    for (key, value) in &fields {
        if key.eq_ignore_ascii_case("matching") {
            match value {
                Value::Bool(b) => matching = *b,
                Value::Null => {}
                other => return Err(unmarshal_error(other, "eventMatchStatus.matching", "bool")),
            }
        } else if key.eq_ignore_ascii_case("message") {
            match value {
                Value::String(s) => message = s.clone(),
                Value::Null => {}
                other => return Err(unmarshal_error(other, "eventMatchStatus.message", "string")),
            }
        }
    }
    Ok((matching, message))
}

/// `{resources, message}` as sveltos-agent reads it into `[]*unstructured.Unstructured`: an empty
/// table is a JSON object (an error), every object needs a non-empty string `kind`.
fn decode_aggregated(result: &LuaValue) -> Result<(Vec<Value>, String), String> {
    let fields = go_struct_fields(result, "aggregatedStatus")?;
    let (mut resources, mut message) = (Vec::new(), String::new());
    for (key, value) in &fields {
        if key.eq_ignore_ascii_case("resources") {
            match value {
                Value::Array(items) => resources = items.clone(),
                Value::Null => {}
                other => {
                    return Err(unmarshal_error(
                        other,
                        "aggregatedStatus.resources",
                        "[]json.RawMessage",
                    ))
                }
            }
        } else if key.eq_ignore_ascii_case("message") {
            match value {
                Value::String(s) => message = s.clone(),
                Value::Null => {}
                other => return Err(unmarshal_error(other, "aggregatedStatus.message", "string")),
            }
        }
    }
    for (i, object) in resources.iter().enumerate() {
        let has_kind = object
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| !k.is_empty());
        if !object.is_object() || !has_kind {
            return Err(format!(
                "resources[{i}]: Object 'Kind' is missing in '{object}'"
            ));
        }
    }
    Ok((resources, message))
}

/// The fields of a script's returned table as `json.Unmarshal` into the Go struct `go_type` meets
/// them: a table that is not a JSON object is an error; the keys in JSON order (sorted), so
/// that of two keys one struct field matches case-insensitively, the later one wins.
fn go_struct_fields(result: &LuaValue, go_type: &str) -> Result<Vec<(String, Value)>, String> {
    let LuaValue::Table(_) = result else {
        return Err("expected a lua table as return value".into());
    };
    match convert::to_json(result)? {
        Value::Object(fields) => {
            let mut fields: Vec<(String, Value)> = fields.into_iter().collect();
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(fields)
        }
        other => Err(format!(
            "json: cannot unmarshal {} into Go value of type {go_type}",
            convert::json_type_name(&other)
        )),
    }
}

fn unmarshal_error(value: &Value, field: &str, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {field} of type {go_type}",
        convert::json_type_name(value)
    )
}
