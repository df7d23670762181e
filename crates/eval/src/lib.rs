//! EventSource evaluation: GVK/namespace/name/label filters, Lua and CEL, sandboxed and budgeted.
//! Pure and synchronous: no IO, no clock, no async. Lua may run for milliseconds, so callers on an
//! async executor run [`CompiledEventSource::evaluate`] on a blocking thread.
//!
//! Threading: a [`CompiledEventSource`] is `Send + Sync`. It owns one Lua state (Luau) holding its
//! compiled scripts behind a mutex, so evaluations of the same EventSource are serialized while
//! different EventSources run in parallel on different threads.

mod cel;
mod filters;
mod lua;
pub mod oracle;
pub mod tape;

use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use sluice_domain::eventsource::{EventSource, EventSourceError};
use sluice_domain::selector::SelectorError;

use crate::tape::NodeRef;

pub use crate::cel::CelDiagnostic;
pub use crate::lua::Limits;
pub use crate::tape::{Tape, TapeError};

/// A group/version/kind a selector lists.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// The verdict for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub matching: bool,
    /// The Lua `message` of the first selector listing the object that has a script.
    pub message: String,
}

/// The result of `aggregatedSelection` (or the input, when there is none).
#[derive(Clone, Debug, PartialEq)]
pub struct Aggregated {
    pub resources: Vec<Value>,
    pub message: String,
}

/// Why an EventSource cannot be loaded. Permanent: the EventSource must be fixed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid eventsource")]
    Parse(#[source] EventSourceError),
    #[error("eventsource {name}: {field}{}: lua syntax error: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    LuaSyntax {
        name: String,
        field: String,
        line: Option<u32>,
        message: String,
    },
    #[error("eventsource {name}: {field}: invalid label selector")]
    Selector {
        name: String,
        field: String,
        #[source]
        source: SelectorError,
    },
    #[error("eventsource {name}: failed to create the lua state: {message}")]
    LuaState { name: String, message: String },
}

/// Why an evaluation failed. Permanent for this object and EventSource version (a script error,
/// an exceeded budget or a wrong result shape); it fails this EventSource only.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// `reason` is Lua's message, which names the field and the line itself when the script
    /// raised it (`<field>:<line>: <message>`): the field is then not said twice.
    #[error("eventsource {name}: {}", field_and_reason(field, reason))]
    Script {
        name: String,
        field: String,
        reason: String,
    },
    #[error("eventsource {name}: the object is not a JSON document")]
    Object {
        name: String,
        #[source]
        source: TapeError,
    },
}

fn field_and_reason(field: &str, reason: &str) -> String {
    let placed = reason
        .strip_prefix(field)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(line, _)| !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()));
    if placed {
        reason.to_string()
    } else {
        format!("{field}: {reason}")
    }
}

/// One selector, compiled.
struct CompiledSelector {
    filter: filters::Filter,
    cel: cel::CelRules,
    /// Index into `LuaScripts::selectors`.
    has_lua: bool,
}

/// The Lua side of an EventSource: the state and the compiled scripts, used under one lock.
struct LuaScripts {
    runtime: lua::LuaRuntime,
    selectors: Vec<Option<lua::Script>>,
    aggregated: Option<lua::Script>,
}

/// An EventSource ready to evaluate: filters validated, Lua and CEL compiled once.
pub struct CompiledEventSource {
    name: String,
    collect_resources: bool,
    selectors: Vec<CompiledSelector>,
    lua: Option<Mutex<LuaScripts>>,
    diagnostics: Vec<CelDiagnostic>,
}

impl CompiledEventSource {
    /// Compiles with the default [`Limits`].
    pub fn compile(es: &EventSource) -> Result<CompiledEventSource, LoadError> {
        Self::compile_with_limits(es, Limits::default())
    }

    /// Compiles every script and rule of `es`; Lua syntax errors and invalid selectors fail here,
    /// naming the EventSource, the field and (for Lua) the line.
    pub fn compile_with_limits(
        es: &EventSource,
        limits: Limits,
    ) -> Result<CompiledEventSource, LoadError> {
        let name = es.name.clone();
        let spec = &es.spec;
        let needs_lua = spec.aggregated_selection.is_some()
            || spec.resource_selectors.iter().any(|s| s.evaluate.is_some());
        let runtime = if needs_lua {
            Some(
                lua::LuaRuntime::new(limits).map_err(|e| LoadError::LuaState {
                    name: name.clone(),
                    message: e.to_string(),
                })?,
            )
        } else {
            None
        };
        let compile_lua = |runtime: &lua::LuaRuntime, source: &str, field: String| {
            runtime
                .compile(source, &field)
                .map_err(|e| LoadError::LuaSyntax {
                    name: name.clone(),
                    field,
                    line: e.line,
                    message: e.message,
                })
        };

        let mut selectors = Vec::with_capacity(spec.resource_selectors.len());
        let mut lua_selectors = Vec::with_capacity(spec.resource_selectors.len());
        let mut diagnostics = Vec::new();
        for (i, rs) in spec.resource_selectors.iter().enumerate() {
            let path = format!("spec.resourceSelectors[{i}]");
            let filter = filters::Filter::new(rs).map_err(|source| LoadError::Selector {
                name: name.clone(),
                field: format!("{path}.selector"),
                source,
            })?;
            let (cel, mut diags) =
                cel::CelRules::compile(&rs.evaluate_cel, &format!("{path}.evaluateCEL"));
            diagnostics.append(&mut diags);
            let script = match (&runtime, &rs.evaluate) {
                (Some(rt), Some(source)) => {
                    Some(compile_lua(rt, source, format!("{path}.evaluate"))?)
                }
                _ => None,
            };
            selectors.push(CompiledSelector {
                filter,
                cel,
                has_lua: script.is_some(),
            });
            lua_selectors.push(script);
        }
        let lua = match runtime {
            Some(runtime) => {
                let aggregated = spec
                    .aggregated_selection
                    .as_deref()
                    .map(|source| {
                        compile_lua(&runtime, source, "spec.aggregatedSelection".to_string())
                    })
                    .transpose()?;
                Some(Mutex::new(LuaScripts {
                    runtime,
                    selectors: lua_selectors,
                    aggregated,
                }))
            }
            None => None,
        };
        Ok(CompiledEventSource {
            name,
            collect_resources: spec.collect_resources,
            selectors,
            lua,
            diagnostics,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn collect_resources(&self) -> bool {
        self.collect_resources
    }

    pub fn has_aggregation(&self) -> bool {
        self.lua
            .as_ref()
            .is_some_and(|l| lock(l).aggregated.is_some())
    }

    /// CEL rules that can never match because they do not compile (Sveltos skips them too).
    pub fn diagnostics(&self) -> &[CelDiagnostic] {
        &self.diagnostics
    }

    /// The group/version/kinds this EventSource's selectors list, deduplicated, in selector order:
    /// what the watcher has to watch.
    pub fn gvks(&self) -> Vec<Gvk> {
        let mut out: Vec<Gvk> = Vec::new();
        for s in &self.selectors {
            let (group, version, kind) = s.filter.gvk();
            let gvk = Gvk {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
            };
            if !out.contains(&gvk) {
                out.push(gvk);
            }
        }
        out
    }

    /// The verdict for one object: every selector that lists it is evaluated (CEL rules first,
    /// any true rule matches; otherwise its Lua script; neither means match), any error fails the
    /// whole evaluation, and the object matches when any selector accepts it.
    pub fn evaluate(&self, object: &Tape) -> Result<Verdict, EvalError> {
        let object = object.root();
        let mut verdict = Verdict {
            matching: false,
            message: String::new(),
        };
        let mut message_set = false;
        let mut guard = None;
        for (i, s) in self.selectors.iter().enumerate() {
            if !s.filter.lists(object) {
                continue;
            }
            let (ok, message) = self.evaluate_selector(i, s, object, &mut guard)?;
            if s.has_lua && !message_set {
                verdict.message = message;
                message_set = true;
            }
            verdict.matching |= ok;
        }
        Ok(verdict)
    }

    /// [`CompiledEventSource::evaluate`] for an object already decoded into a `Value`.
    pub fn evaluate_value(&self, object: &Value) -> Result<Verdict, EvalError> {
        self.evaluate(&self.tape_of(object)?)
    }

    fn tape_of(&self, object: &Value) -> Result<Tape, EvalError> {
        Tape::from_value(object).map_err(|source| EvalError::Object {
            name: self.name.clone(),
            source,
        })
    }

    /// The objects the per-object step accepts, selector by selector (input order within a
    /// selector; an object accepted by two selectors appears twice), as sveltos-agent lists them
    /// before `aggregatedSelection`.
    pub fn select(&self, objects: &[Value]) -> Result<Vec<Value>, EvalError> {
        let tapes = objects
            .iter()
            .map(|o| self.tape_of(o))
            .collect::<Result<Vec<Tape>, EvalError>>()?;
        let mut out = Vec::new();
        let mut guard = None;
        for (i, s) in self.selectors.iter().enumerate() {
            for (object, tape) in objects.iter().zip(&tapes) {
                let node = tape.root();
                if s.filter.lists(node) && self.evaluate_selector(i, s, node, &mut guard)?.0 {
                    out.push(object.clone());
                }
            }
        }
        Ok(out)
    }

    /// Runs `aggregatedSelection` over the objects selected by the per-object step and returns
    /// the objects it selects; without `aggregatedSelection`, the input unchanged.
    pub fn aggregate(&self, objects: &[Value]) -> Result<Aggregated, EvalError> {
        let script_error = |reason: String| EvalError::Script {
            name: self.name.clone(),
            field: "spec.aggregatedSelection".into(),
            reason,
        };
        if let Some(l) = &self.lua {
            let scripts = lock(l);
            if let Some(script) = &scripts.aggregated {
                let (resources, message) = scripts
                    .runtime
                    .aggregate(script, objects)
                    .map_err(script_error)?;
                return Ok(Aggregated { resources, message });
            }
        }
        Ok(Aggregated {
            resources: objects.to_vec(),
            message: String::new(),
        })
    }

    fn evaluate_selector<'a>(
        &'a self,
        index: usize,
        s: &CompiledSelector,
        object: NodeRef<'_>,
        guard: &mut Option<MutexGuard<'a, LuaScripts>>,
    ) -> Result<(bool, String), EvalError> {
        if !s.cel.is_empty() {
            if s.cel.any_true(object) {
                return Ok((true, String::new()));
            }
            if !s.has_lua {
                return Ok((false, String::new()));
            }
        }
        if !s.has_lua {
            return Ok((true, String::new()));
        }
        let Some(l) = &self.lua else {
            return Ok((true, String::new()));
        };
        let scripts = guard.get_or_insert_with(|| lock(l));
        let Some(script) = scripts.selectors.get(index).and_then(Option::as_ref) else {
            return Ok((true, String::new()));
        };
        scripts
            .runtime
            .evaluate(script, object)
            .map_err(|reason| EvalError::Script {
                name: self.name.clone(),
                field: format!("spec.resourceSelectors[{index}].evaluate"),
                reason,
            })
    }
}

/// A poisoned lock only means another evaluation panicked; the state is still usable because
/// every evaluation starts from a fresh global table.
fn lock(m: &Mutex<LuaScripts>) -> MutexGuard<'_, LuaScripts> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Parses and compiles an EventSource object in one step.
pub fn compile_object(obj: &Value) -> Result<CompiledEventSource, LoadError> {
    let es = sluice_domain::eventsource::parse_event_source(obj).map_err(LoadError::Parse)?;
    CompiledEventSource::compile(&es)
}
