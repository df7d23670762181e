//! The Lua engine of one EventSource: a Luau state (through mlua) holding its scripts compiled
//! once, run with an instruction budget and a memory limit per evaluation, each evaluation in a
//! fresh global table. Knows the sveltos-agent calling conventions (`obj` + `evaluate()`,
//! `resources` + `evaluate()`), not the EventSource match order (see `lib.rs`).
//!
//! Why Luau rather than PUC Lua 5.1: it formats numbers the way gopher-lua does (shortest round
//! trip) where 5.1 uses `%.14g` even for `..`, it has no `io`, no file loading and no loadable
//! bytecode at all, and its interrupt stops every loop shape. See `README.md`.

mod convert;
mod lazy;
mod raw;
mod sandbox;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, Table, Value as LuaValue, VmState};
use serde_json::Value;

/// Per-evaluation resource limits of a Lua script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Interrupts (loop back-edges and function calls) one per-object evaluation may take.
    pub instructions: u64,
    /// Interrupts one `aggregatedSelection` run may take (it sees every selected object).
    pub aggregated_instructions: u64,
    /// Bytes one evaluation may allocate on top of what the state held before it.
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

/// A Lua script that failed to compile.
#[derive(Debug)]
pub(crate) struct CompileError {
    pub line: Option<u32>,
    pub message: String,
}

/// The Lua state of one EventSource. Not shared between threads at the same time: the owner
/// keeps it behind a mutex.
pub(crate) struct LuaRuntime {
    lua: Lua,
    driver: Function,
    lazy_box: Table,
    lazy_meta: Table,
    spent: Arc<AtomicU64>,
    budget: Arc<AtomicU64>,
    limits: Limits,
}

/// A compiled script and where it came from (`spec.resourceSelectors[0].evaluate`).
pub(crate) struct Script {
    chunk: Function,
}

impl LuaRuntime {
    pub(crate) fn new(limits: Limits) -> mlua::Result<LuaRuntime> {
        let lua = Lua::new();
        let sandbox::Sandbox {
            driver,
            lazy_box,
            lazy_meta,
        } = sandbox::install(&lua)?;
        let spent = Arc::new(AtomicU64::new(0));
        let budget = Arc::new(AtomicU64::new(u64::MAX));
        let (s, b) = (spent.clone(), budget.clone());
        lua.set_interrupt(move |_| {
            // Past the budget every later safepoint fails too, so `pcall` cannot swallow it.
            if s.fetch_add(1, Ordering::Relaxed) >= b.load(Ordering::Relaxed) {
                return Err(mlua::Error::runtime("instruction budget exceeded"));
            }
            Ok(VmState::Continue)
        });
        Ok(LuaRuntime {
            lua,
            driver,
            lazy_box,
            lazy_meta,
            spent,
            budget,
            limits,
        })
    }

    /// Compiles `source` (text only: binary chunks are refused) under the chunk name `field`.
    pub(crate) fn compile(&self, source: &str, field: &str) -> Result<Script, CompileError> {
        let chunk = self
            .lua
            .load(source)
            .set_name(format!("={field}"))
            .set_mode(ChunkMode::Text)
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
        Ok(Script { chunk })
    }

    /// Runs a per-object `evaluate()` and reads `{matching, message}` from its result.
    pub(crate) fn evaluate(
        &self,
        script: &Script,
        object: &Value,
    ) -> Result<(bool, String), String> {
        let mut fast = None;
        let result = self.run(
            script,
            "obj",
            self.limits.instructions,
            raw::Input::Object(object),
            Some(&mut fast),
        )?;
        match fast {
            Some(verdict) => Ok(verdict),
            None => decode_verdict(&result),
        }
    }

    /// Runs `aggregatedSelection` over `objects` and returns the objects it selected and its message.
    pub(crate) fn aggregate(
        &self,
        script: &Script,
        objects: &[Value],
    ) -> Result<(Vec<Value>, String), String> {
        let result = self.run(
            script,
            "resources",
            self.limits.aggregated_instructions,
            raw::Input::List(objects),
            None,
        )?;
        decode_aggregated(&result)
    }

    fn run(
        &self,
        script: &Script,
        global: &str,
        budget: u64,
        input: raw::Input<'_>,
        fast_verdict: Option<&mut Option<(bool, String)>>,
    ) -> Result<LuaValue, String> {
        self.spent.store(0, Ordering::Relaxed);
        self.budget.store(budget, Ordering::Relaxed);
        let limit = self
            .lua
            .used_memory()
            .saturating_add(self.limits.memory_bytes);
        self.lua
            .set_memory_limit(limit)
            .map_err(|e| format!("cannot set the memory limit: {e}"))?;
        // SAFETY: the closure runs inside mlua's protected call on this state, with the driver,
        // the chunk and the global's name on the stack; `push_input` only pushes and `lua_call`
        // consumes them, leaving the single result for mlua to pop. Lua errors raised in there
        // unwind through frames that own nothing.
        let outcome: mlua::Result<LuaValue> = unsafe {
            self.lua.exec_raw(
                (
                    &self.driver,
                    &script.chunk,
                    global,
                    &self.lazy_box,
                    &self.lazy_meta,
                ),
                |state| {
                    use mlua::ffi;
                    // Stack: driver, chunk, global, box, meta.
                    let meta = ffi::lua_gettop(state);
                    let lazy_box = meta - 1;
                    match &input {
                        raw::Input::Object(object) => {
                            ffi::lua_createtable(state, 0, 0);
                            ffi::lua_pushvalue(state, -1);
                            ffi::lua_rawseti_(state, lazy_box, 1);
                            let ptrs = ffi::lua_gettop(state);
                            lazy::push_object(state, object, ptrs, meta);
                        }
                        list @ raw::Input::List(_) => {
                            ffi::lua_pushnil(state);
                            raw::push_input(state, list);
                        }
                    }
                    // Stack: driver, chunk, global, box, meta, PTRS, input.
                    ffi::lua_replace(state, lazy_box);
                    ffi::lua_pop(state, 2);
                    ffi::lua_call(state, 3, 1);
                    if let Some(out) = fast_verdict {
                        if let Some(verdict) = raw::read_simple_verdict(state, -1) {
                            *out = Some(verdict);
                            ffi::lua_pop(state, 1);
                            ffi::lua_pushnil(state);
                        }
                    }
                },
            )
        };
        // The object may go away once this returns: no proxy may reach it any more.
        let _ = self.lua.set_memory_limit(0);
        let cleared = self.lazy_box.raw_set(1, LuaValue::Nil);
        self.budget.store(u64::MAX, Ordering::Relaxed);
        if let Err(e) = cleared {
            return Err(format!("cannot reset the lazy object table: {e}"));
        }
        match outcome {
            Ok(v) => Ok(v),
            Err(e) => {
                if self.spent.load(Ordering::Relaxed) > budget {
                    return Err(format!("instruction budget of {budget} exceeded"));
                }
                if is_memory_error(&e) {
                    // Garbage left by the failed run would count against the next limit.
                    let _ = self.lua.gc_collect();
                    let _ = self.lua.gc_collect();
                    return Err(format!(
                        "memory limit of {} bytes exceeded",
                        self.limits.memory_bytes
                    ));
                }
                Err(root_message(&e))
            }
        }
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
    let LuaValue::Table(_) = result else {
        return Err("expected a lua table as return value".into());
    };
    let fields = match convert::to_json(result)? {
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type eventMatchStatus",
                convert::json_type_name(&other)
            ))
        }
    };
    let mut keys: Vec<&String> = fields.keys().collect();
    keys.sort();
    let (mut matching, mut message) = (false, String::new());
    for key in keys {
        let value = &fields[key];
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
    let LuaValue::Table(_) = result else {
        return Err("expected a lua table as return value".into());
    };
    let fields = match convert::to_json(result)? {
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type aggregatedStatus",
                convert::json_type_name(&other)
            ))
        }
    };
    let mut keys: Vec<&String> = fields.keys().collect();
    keys.sort();
    let (mut resources, mut message) = (Vec::new(), String::new());
    for key in keys {
        let value = &fields[key];
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

fn unmarshal_error(value: &Value, field: &str, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {field} of type {go_type}",
        convert::json_type_name(value)
    )
}
