//! Go text/template's predefined functions (`and or not len index eq ne lt le gt ge print
//! printf println html js urlquery call`). Go's own `slice` is absent: sprig replaces it.

use std::cmp::Ordering;
use std::fmt::Write;

use crate::funcs::{def, Fast, FuncDef, FuncResult, Imp, Scope, Ty};
use crate::gofmt::{sprint, sprintf, sprintln};
use crate::value::Value;

pub static FUNCS: &[FuncDef] = &[
    FuncDef {
        name: "and",
        params: &[Ty::Any],
        variadic: Some(Ty::Any),
        imp: Imp::And,
        scope: Scope::All,
        fast: None,
        text: None,
    },
    FuncDef {
        name: "or",
        params: &[Ty::Any],
        variadic: Some(Ty::Any),
        imp: Imp::Or,
        scope: Scope::All,
        fast: None,
        text: None,
    },
    def!("not", [Any], |a| Ok(Value::Bool(!a[0].truth()))).fast(Fast::Not),
    def!("len", [Any], len).fast(Fast::Len),
    def!("index", [Any], ...Any, index).fast(Fast::Index),
    def!("eq", [Any], ...Any, eq).fast(Fast::Eq),
    def!("ne", [Any, Any], |a| Ok(Value::Bool(!equal(&a[0], &a[1])?))).fast(Fast::Ne),
    def!("lt", [Any, Any], |a| Ok(Value::Bool(less(&a[0], &a[1])?))).fast(Fast::Lt),
    def!("le", [Any, Any], |a| Ok(Value::Bool(
        less(&a[0], &a[1])? || equal(&a[0], &a[1])?
    )))
    .fast(Fast::Le),
    def!("gt", [Any, Any], |a| Ok(Value::Bool(
        !(less(&a[0], &a[1])? || equal(&a[0], &a[1])?)
    )))
    .fast(Fast::Gt),
    def!("ge", [Any, Any], |a| Ok(Value::Bool(!less(&a[0], &a[1])?))).fast(Fast::Ge),
    def!("print", [], ...Any, |a| Ok(Value::string(sprint(&a)))),
    def!("println", [], ...Any, |a| Ok(Value::string(sprintln(&a)))),
    def!("printf", [Str], ...Any, |a| Ok(Value::string(sprintf(a[0].as_str().unwrap_or_default(), &a[1..])))),
    def!("html", [], ...Any, |a| Ok(Value::string(html_escape(&eval_args(&a))))),
    def!("js", [], ...Any, |a| Ok(Value::string(js_escape(&eval_args(&a))))),
    def!("urlquery", [], ...Any, |a| Ok(Value::string(query_escape(&eval_args(&a))))),
    def!("call", [Any], ...Any, |a| Err(format!("non-function of type {}", a[0].go_type()))),
];

fn len(a: Vec<Value>) -> FuncResult {
    let n = match &a[0] {
        Value::String(s) => s.len(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.len(),
        Value::Nil => return Err("len of nil pointer".into()),
        other => return Err(format!("len of type {}", other.go_type())),
    };
    Ok(Value::GoInt(n as i64))
}

fn index(a: Vec<Value>) -> FuncResult {
    let mut item = a[0].clone();
    for key in &a[1..] {
        item = match (&item, key) {
            (Value::Nil, _) => return Err("index of untyped nil".into()),
            (Value::List(l), Value::Int(i) | Value::GoInt(i)) => {
                match usize::try_from(*i).ok().and_then(|i| l.get(i)) {
                    Some(v) => v.clone(),
                    None => return Err(format!("index out of range: {i}")),
                }
            }
            (Value::String(s), Value::Int(i) | Value::GoInt(i)) => {
                match usize::try_from(*i).ok().and_then(|i| s.as_bytes().get(i)) {
                    Some(b) => Value::Int(*b as i64),
                    None => return Err(format!("index out of range: {i}")),
                }
            }
            (Value::List(_) | Value::String(_), k) => {
                return Err(format!(
                    "cannot index slice/array with type {}",
                    k.go_type()
                ))
            }
            (Value::Map(m), Value::String(k)) => m.get(k).unwrap_or(Value::Nil),
            (Value::Map(_), Value::Nil) => Value::Nil,
            (Value::Map(_), k) => {
                return Err(format!("value has type {}; should be string", k.go_type()))
            }
            (other, _) => return Err(format!("can't index item of type {}", other.go_type())),
        };
    }
    Ok(item)
}

/// Go's comparison classes: ints of any size compare with each other, nothing else mixes.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Kind {
    Bool,
    Int,
    Float,
    String,
    Other,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Bool(_) => Kind::Bool,
        Value::Int(_) | Value::GoInt(_) => Kind::Int,
        Value::Float(_) => Kind::Float,
        Value::String(_) => Kind::String,
        _ => Kind::Other,
    }
}

fn eq(a: Vec<Value>) -> FuncResult {
    if a.len() < 2 {
        return Err("missing argument for comparison".into());
    }
    for other in &a[1..] {
        if equal(&a[0], other)? {
            return Ok(Value::Bool(true));
        }
    }
    Ok(Value::Bool(false))
}

/// Go's `eq` for two arguments.
pub fn equal(a: &Value, b: &Value) -> Result<bool, String> {
    let (ka, kb) = (kind(a), kind(b));
    if ka != kb {
        if a.is_nil() || b.is_nil() {
            return Ok(false);
        }
        return Err("incompatible types for comparison".into());
    }
    Ok(match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x) | Value::GoInt(x), Value::Int(y) | Value::GoInt(y)) => x == y,
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Nil, Value::Nil) => true,
        (Value::Nil, _) | (_, Value::Nil) => false,
        (Value::List(_), _) => return Err(non_comparable(a)),
        (_, Value::List(_)) => return Err(non_comparable(b)),
        (Value::Map(_), _) => return Err(non_comparable(a)),
        (_, Value::Map(_)) => return Err(non_comparable(b)),
        (Value::Time(x), Value::Time(y)) => x == y,
        (Value::Semver(x), Value::Semver(y)) => std::sync::Arc::ptr_eq(x, y),
        _ => return Err("incompatible types for comparison".into()),
    })
}

fn non_comparable(v: &Value) -> String {
    let mut s = String::from("non-comparable type ");
    s.push_str(&crate::printf::sprintf("%s", std::slice::from_ref(v)));
    let _ = write!(s, ": {}", v.go_type());
    s
}

/// Go's `lt` for two arguments.
pub fn less(a: &Value, b: &Value) -> Result<bool, String> {
    let (ka, kb) = (kind(a), kind(b));
    if ka == Kind::Other || kb == Kind::Other || ka == Kind::Bool || kb == Kind::Bool {
        return Err("invalid type for comparison".into());
    }
    if ka != kb {
        return Err("incompatible types for comparison".into());
    }
    Ok(match (a, b) {
        (Value::Int(x) | Value::GoInt(x), Value::Int(y) | Value::GoInt(y)) => x < y,
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y) == Some(Ordering::Less),
        (Value::String(x), Value::String(y)) => x < y,
        _ => false,
    })
}

/// Go's `evalArgs`: a single string argument as is, otherwise `fmt.Sprint` of all.
fn eval_args(a: &[Value]) -> String {
    match a {
        [Value::String(s)] => s.to_string(),
        _ => sprint(a),
    }
}

/// Go's `template.HTMLEscapeString`.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Go's `template.JSEscapeString`.
pub fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c if (c as u32) >= 0x80 && c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}
