//! sprig defaults and flow control (`default empty coalesce all any ternary fail`), type
//! conversion, reflection (`typeOf kindOf ...`), paths, and the environment functions that
//! sluice deliberately answers from an empty environment.

use super::{deep_equal, empty, strslice, strval, to_float64, to_int64};
use crate::funcs::{arg_str, def, FuncDef};
use crate::value::Value;

pub static FUNCS: &[FuncDef] = &[
    def!("default", [Any], ...Any, |a| Ok(match a.get(1) {
        Some(given) if !empty(given) => given.clone(),
        _ => a[0].clone(),
    })),
    def!("empty", [Any], |a| Ok(Value::Bool(empty(&a[0])))),
    def!("coalesce", [], ...Any, |a| Ok(a.iter().find(|v| !empty(v)).cloned().unwrap_or(Value::Nil))),
    def!("all", [], ...Any, |a| Ok(Value::Bool(a.iter().all(|v| !empty(v))))),
    def!("any", [], ...Any, |a| Ok(Value::Bool(a.iter().any(|v| !empty(v))))),
    def!("ternary", [Any, Any, Bool], |a| Ok(
        if matches!(a[2], Value::Bool(true)) {
            a[0].clone()
        } else {
            a[1].clone()
        }
    )),
    def!("fail", [Str], |a| Err(arg_str(&a, 0).to_string())),
    def!("toString", [Any], |a| Ok(Value::string(strval(&a[0])))),
    def!("toStrings", [Any], |a| Ok(Value::list(
        strslice(&a[0]).into_iter().map(Value::string).collect()
    ))),
    def!("atoi", [Str], |a| Ok(Value::GoInt(
        arg_str(&a, 0).parse().unwrap_or(0)
    ))),
    def!("int", [Any], |a| Ok(Value::GoInt(to_int64(&a[0])))),
    def!("int64", [Any], |a| Ok(Value::Int(to_int64(&a[0])))),
    def!("float64", [Any], |a| Ok(Value::Float(to_float64(&a[0])))),
    def!("toDecimal", [Any], |a| Ok(Value::Int(
        i64::from_str_radix(&strval(&a[0]), 8).unwrap_or(0)
    ))),
    def!("typeOf", [Any], |a| Ok(Value::str(a[0].go_type()))),
    def!("typeIs", [Str, Any], |a| Ok(Value::Bool(
        arg_str(&a, 0) == a[1].go_type()
    ))),
    def!("typeIsLike", [Str, Any], |a| {
        let t = a[1].go_type();
        let target = arg_str(&a, 0);
        Ok(Value::Bool(
            target == t || target.strip_prefix('*') == Some(t),
        ))
    }),
    def!("kindOf", [Any], |a| Ok(Value::str(a[0].go_kind()))),
    def!("kindIs", [Str, Any], |a| Ok(Value::Bool(
        arg_str(&a, 0) == a[1].go_kind()
    ))),
    def!("deepEqual", [Any, Any], |a| Ok(Value::Bool(deep_equal(
        &a[0], &a[1]
    )))),
    // sluice never exposes its environment to templates: an empty environment.
    def!("env", [Str], |_| Ok(Value::str(""))),
    def!("expandenv", [Str], |a| Ok(Value::string(expand_empty(
        arg_str(&a, 0)
    )))),
    // No name resolution from templates either.
    def!("getHostByName", [Str], |_| Ok(Value::str(""))),
    def!("base", [Str], |a| Ok(Value::string(base(arg_str(&a, 0))))),
    def!("osBase", [Str], |a| Ok(Value::string(base(arg_str(&a, 0))))),
    def!("dir", [Str], |a| Ok(Value::string(dir(arg_str(&a, 0))))),
    def!("osDir", [Str], |a| Ok(Value::string(dir(arg_str(&a, 0))))),
    def!("clean", [Str], |a| Ok(Value::string(clean(arg_str(&a, 0))))),
    def!("osClean", [Str], |a| Ok(Value::string(clean(arg_str(
        &a, 0
    ))))),
    def!("ext", [Str], |a| Ok(Value::string(ext(arg_str(&a, 0))))),
    def!("osExt", [Str], |a| Ok(Value::string(ext(arg_str(&a, 0))))),
    def!("isAbs", [Str], |a| Ok(Value::Bool(
        arg_str(&a, 0).starts_with('/')
    ))),
    def!("osIsAbs", [Str], |a| Ok(Value::Bool(
        arg_str(&a, 0).starts_with('/')
    ))),
];

/// `os.ExpandEnv` against an empty environment: `$VAR` and `${VAR}` expand to nothing.
fn expand_empty(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('{') => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
            }
            Some(c) if c.is_alphanumeric() || *c == '_' => {
                while chars
                    .peek()
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                {
                    chars.next();
                }
            }
            Some(_) => {
                chars.next();
            }
            None => out.push('$'),
        }
    }
    out
}

/// Go's `path.Clean`.
pub fn clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

fn base(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".into();
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed).to_string()
}

fn dir(p: &str) -> String {
    let d = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    clean(d)
}

fn ext(p: &str) -> String {
    let name = p.rsplit('/').next().unwrap_or(p);
    match name.rfind('.') {
        Some(i) => name[i..].to_string(),
        None => String::new(),
    }
}
