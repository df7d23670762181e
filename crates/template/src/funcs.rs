//! The function map: every function a template may call, with its Go parameter types (Go
//! checks argument types at run time and `"x" | lower 5`-style mistakes must fail the same way).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::value::Value;
use crate::Engine;

/// A Go parameter type, as far as argument checking needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `interface{}`: anything.
    Any,
    /// `string`
    Str,
    /// Go `int`
    Int,
    /// `float64`
    Float,
    Bool,
    /// `map[string]interface{}`
    Map,
    /// `[]interface{}`
    List,
}

impl Ty {
    pub fn go_name(self) -> &'static str {
        match self {
            Ty::Any => "interface {}",
            Ty::Str => "string",
            Ty::Int => "int",
            Ty::Float => "float64",
            Ty::Bool => "bool",
            Ty::Map => "map[string]interface {}",
            Ty::List => "[]interface {}",
        }
    }
}

/// Largest list a function may generate (`until`, `seq`, ...): templates are budgeted.
pub const MAX_GENERATED: i64 = 1 << 20;

/// Largest string a function may generate (`repeat`, `indent`, random strings), in bytes.
pub const MAX_STRING: i64 = 16 << 20;

/// Fails when a generated result would exceed `limit`.
pub fn budget(size: i64, limit: i64) -> Result<(), String> {
    if size > limit {
        return Err(format!(
            "result of {size} exceeds the template budget of {limit}"
        ));
    }
    Ok(())
}

/// The result of a function: a value, or the error text Go would wrap in `error calling f: ...`.
pub type FuncResult = Result<Value, String>;

#[derive(Clone, Copy)]
pub enum Imp {
    Plain(fn(Vec<Value>) -> FuncResult),
    /// `and`/`or` evaluate their arguments lazily.
    And,
    Or,
}

/// Which function maps hold a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Go builtins, sprig and the libsveltos overrides: text and html engines.
    All,
    /// event-manager extras (`getResource`, `copy`, ...): text engine only.
    EventManager,
}

/// Builtins the evaluator runs over borrowed data itself (they take only `interface{}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fast {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Not,
    Len,
    Index,
}

pub struct FuncDef {
    pub name: &'static str,
    pub params: &'static [Ty],
    pub variadic: Option<Ty>,
    pub imp: Imp,
    pub scope: Scope,
    pub fast: Option<Fast>,
    /// What the function does with exactly one string argument, appended to a buffer: the
    /// evaluator then calls it on borrowed text, without argument or result values, and a
    /// printed result goes straight to the output. Must equal `imp` for that case.
    pub text: Option<TextFn>,
}

/// A string function's result for one string argument, appended to `out`.
pub type TextFn = fn(text: &str, out: &mut String);

impl FuncDef {
    /// Marks a builtin the evaluator runs itself when its arguments allow.
    pub const fn fast(self, fast: Fast) -> FuncDef {
        FuncDef {
            fast: Some(fast),
            ..self
        }
    }

    /// Gives a string function its one-string-argument form (see [`FuncDef::text`]).
    pub const fn text(self, text: TextFn) -> FuncDef {
        FuncDef {
            text: Some(text),
            ..self
        }
    }
}

impl std::fmt::Debug for FuncDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Declares a function table entry: `def!("name", [Str, Int], variadic, implementation)`.
macro_rules! def {
    ($name:literal, [$($p:ident),*], ...$v:ident, $imp:expr) => {
        $crate::funcs::FuncDef {
            name: $name,
            params: &[$($crate::funcs::Ty::$p),*],
            variadic: Some($crate::funcs::Ty::$v),
            imp: $crate::funcs::Imp::Plain($imp),
            scope: $crate::funcs::Scope::All,
            fast: None,
            text: None,
        }
    };
    ($name:literal, [$($p:ident),*], $imp:expr) => {
        $crate::funcs::FuncDef {
            name: $name,
            params: &[$($crate::funcs::Ty::$p),*],
            variadic: None,
            imp: $crate::funcs::Imp::Plain($imp),
            scope: $crate::funcs::Scope::All,
            fast: None,
            text: None,
        }
    };
}
pub(crate) use def;

fn tables() -> [&'static [FuncDef]; 12] {
    [
        crate::builtins::FUNCS,
        crate::sprig::strings::FUNCS,
        crate::sprig::lists::FUNCS,
        crate::sprig::dicts::FUNCS,
        crate::sprig::math::FUNCS,
        crate::sprig::convert::FUNCS,
        crate::sprig::encoding::FUNCS,
        crate::sprig::dates::FUNCS,
        crate::sprig::semver::FUNCS,
        crate::sprig::crypto::FUNCS,
        crate::sprig::certs::FUNCS,
        crate::sveltos::FUNCS,
    ]
}

fn index() -> &'static HashMap<&'static str, &'static FuncDef> {
    static INDEX: OnceLock<HashMap<&'static str, &'static FuncDef>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut map = HashMap::new();
        // Later tables override earlier ones, as sprig's `slice` overrides Go's builtin.
        for table in tables() {
            for def in table {
                map.insert(def.name, def);
            }
        }
        map
    })
}

/// Looks a function up in the map of `engine`.
pub fn lookup(name: &str, engine: Engine) -> Option<&'static FuncDef> {
    let def = *index().get(name)?;
    match (def.scope, engine) {
        (Scope::EventManager, Engine::Html) => None,
        _ => Some(def),
    }
}

/// Whether `def` may modify a map it is given (sprig's `set`/`unset`/`merge*`, event-manager's
/// extras that strip fields from the caller's map). Keep in step with the `write()` callers.
pub fn mutates_maps(def: &FuncDef) -> bool {
    matches!(
        def.name,
        "set"
            | "unset"
            | "merge"
            | "mustMerge"
            | "mergeOverwrite"
            | "mustMergeOverwrite"
            | "getResource"
            | "copy"
            | "removeField"
            | "setField"
            | "chainSetField"
            | "chainRemoveField"
    )
}

/// Every function name of the text engine's map, sorted.
pub fn names() -> Vec<&'static str> {
    let mut names: Vec<_> = index().keys().copied().collect();
    names.sort_unstable();
    names
}

// Small helpers shared by the function tables.

/// The string argument at `i` (the checker guarantees the type for `Str` parameters).
pub fn arg_str(args: &[Value], i: usize) -> &str {
    args.get(i).and_then(Value::as_str).unwrap_or_default()
}

/// The integer argument at `i` (`Int`/`Int64` parameters).
pub fn arg_int(args: &[Value], i: usize) -> i64 {
    match args.get(i) {
        Some(Value::Int(n) | Value::GoInt(n)) => *n,
        Some(Value::Float(f)) => *f as i64,
        _ => 0,
    }
}
