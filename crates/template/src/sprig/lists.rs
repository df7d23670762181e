//! sprig list functions. Like sprig, they accept any slice and fail on other types; the
//! non-`must` forms turn failures into template errors too (sprig panics, Go reports it).

use super::{deep_equal, empty, to_int64};
use crate::funcs::{arg_int, budget, def, FuncDef, FuncResult, MAX_GENERATED};
use crate::value::Value;

pub static FUNCS: &[FuncDef] = &[
    def!("list", [], ...Any, |a| Ok(Value::list(a))),
    def!("tuple", [], ...Any, |a| Ok(Value::list(a))),
    def!("first", [Any], |a| first(&a[0])),
    def!("mustFirst", [Any], |a| first(&a[0])),
    def!("last", [Any], |a| last(&a[0])),
    def!("mustLast", [Any], |a| last(&a[0])),
    def!("rest", [Any], |a| sub(&a[0], "rest", |l| l
        .get(1..)
        .map(<[Value]>::to_vec))),
    def!("mustRest", [Any], |a| sub(&a[0], "rest", |l| l
        .get(1..)
        .map(<[Value]>::to_vec))),
    def!("initial", [Any], |a| sub(&a[0], "initial", |l| l
        .get(..l.len().saturating_sub(1))
        .map(<[Value]>::to_vec))),
    def!("mustInitial", [Any], |a| sub(&a[0], "initial", |l| l
        .get(..l.len().saturating_sub(1))
        .map(<[Value]>::to_vec))),
    def!("reverse", [Any], |a| sub(&a[0], "reverse", |l| Some(
        l.iter().rev().cloned().collect()
    ))),
    def!("mustReverse", [Any], |a| sub(&a[0], "reverse", |l| Some(
        l.iter().rev().cloned().collect()
    ))),
    def!("uniq", [Any], |a| sub(&a[0], "uniq", |l| Some(uniq(l)))),
    def!("mustUniq", [Any], |a| sub(&a[0], "uniq", |l| Some(uniq(l)))),
    def!("compact", [Any], |a| sub(&a[0], "compact", |l| Some(
        l.iter().filter(|v| !empty(v)).cloned().collect()
    ))),
    def!("mustCompact", [Any], |a| sub(&a[0], "compact", |l| Some(
        l.iter().filter(|v| !empty(v)).cloned().collect()
    ))),
    def!("without", [Any], ...Any, without),
    def!("mustWithout", [Any], ...Any, without),
    def!("has", [Any, Any], has),
    def!("mustHas", [Any, Any], has),
    def!("append", [Any, Any], push),
    def!("push", [Any, Any], push),
    def!("mustAppend", [Any, Any], push),
    def!("mustPush", [Any, Any], push),
    def!("prepend", [Any, Any], prepend),
    def!("mustPrepend", [Any, Any], prepend),
    def!("concat", [], ...Any, concat),
    def!("slice", [Any], ...Any, slice),
    def!("mustSlice", [Any], ...Any, slice),
    def!("chunk", [Int, Any], chunk),
    def!("mustChunk", [Int, Any], chunk),
    def!("until", [Int], |a| {
        let n = arg_int(&a, 0);
        budget(n.saturating_abs(), MAX_GENERATED)?;
        Ok(int_list(if n >= 0 {
            (0..n).collect()
        } else {
            (n + 1..=0).rev().collect()
        }))
    }),
    def!("untilStep", [Int, Int, Int], |a| {
        let (start, stop, step) = (arg_int(&a, 0), arg_int(&a, 1), arg_int(&a, 2));
        if step != 0 {
            budget(
                stop.saturating_sub(start).saturating_div(step),
                MAX_GENERATED,
            )?;
        }
        Ok(int_list(until_step(start, stop, step)))
    }),
    def!("seq", [], ...Int, seq),
];

fn list_of<'v>(v: &'v Value, what: &str) -> Result<&'v [Value], String> {
    match v {
        Value::List(l) => Ok(l),
        Value::Nil => {
            Err("runtime error: invalid memory address or nil pointer dereference".into())
        }
        other => Err(format!("Cannot find {what} on type {}", other.go_kind())),
    }
}

fn first(v: &Value) -> FuncResult {
    Ok(list_of(v, "first")?.first().cloned().unwrap_or(Value::Nil))
}

fn last(v: &Value) -> FuncResult {
    Ok(list_of(v, "last")?.last().cloned().unwrap_or(Value::Nil))
}

/// Applies `f` to a list; an empty list gives an empty list.
fn sub(v: &Value, what: &str, f: impl Fn(&[Value]) -> Option<Vec<Value>>) -> FuncResult {
    let l = list_of(v, what)?;
    Ok(Value::list(f(l).unwrap_or_default()))
}

fn uniq(l: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for v in l {
        if !out.iter().any(|o| deep_equal(o, v)) {
            out.push(v.clone());
        }
    }
    out
}

fn without(a: Vec<Value>) -> FuncResult {
    let l = list_of(&a[0], "without")?;
    Ok(Value::list(
        l.iter()
            .filter(|v| !a[1..].iter().any(|o| deep_equal(o, v)))
            .cloned()
            .collect(),
    ))
}

fn has(a: Vec<Value>) -> FuncResult {
    match &a[1] {
        Value::Nil => Ok(Value::Bool(false)),
        Value::List(l) => Ok(Value::Bool(l.iter().any(|v| deep_equal(v, &a[0])))),
        other => Err(format!("Cannot find has on type {}", other.go_kind())),
    }
}

fn push(a: Vec<Value>) -> FuncResult {
    let mut l = list_of(&a[0], "push")?.to_vec();
    l.push(a[1].clone());
    Ok(Value::list(l))
}

fn prepend(a: Vec<Value>) -> FuncResult {
    let mut l = vec![a[1].clone()];
    l.extend_from_slice(list_of(&a[0], "prepend")?);
    Ok(Value::list(l))
}

fn concat(a: Vec<Value>) -> FuncResult {
    let mut out = Vec::new();
    for l in &a {
        match l {
            Value::List(items) => out.extend(items.iter().cloned()),
            other => return Err(format!("Cannot concat type {} as list", other.go_kind())),
        }
    }
    Ok(Value::list(out))
}

fn slice(a: Vec<Value>) -> FuncResult {
    let l = match &a[0] {
        Value::List(l) => l,
        Value::Nil => {
            return Err("runtime error: invalid memory address or nil pointer dereference".into())
        }
        other => {
            return Err(format!(
                "list should be type of slice or array but {}",
                other.go_kind()
            ))
        }
    };
    if l.is_empty() {
        return Ok(Value::Nil);
    }
    let start = a.get(1).map(to_int64).unwrap_or(0);
    let end = a.get(2).map(to_int64).unwrap_or(l.len() as i64);
    if start < 0 || end < start || end > l.len() as i64 {
        return Err(format!("reflect: slice index out of range [{start}:{end}]"));
    }
    Ok(Value::list(l[start as usize..end as usize].to_vec()))
}

fn chunk(a: Vec<Value>) -> FuncResult {
    let size = arg_int(&a, 0);
    let l = list_of(&a[1], "chunk")?;
    if size <= 0 {
        return Err("runtime error: integer divide by zero".into());
    }
    Ok(Value::list(
        l.chunks(size as usize)
            .map(|c| Value::list(c.to_vec()))
            .collect(),
    ))
}

fn int_list(v: Vec<i64>) -> Value {
    Value::list(v.into_iter().map(Value::GoInt).collect())
}

fn until_step(start: i64, stop: i64, step: i64) -> Vec<i64> {
    let mut v = Vec::new();
    if step == 0 || (stop < start && step > 0) || (stop > start && step < 0) {
        return v;
    }
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        v.push(i);
        i += step;
    }
    v
}

/// sprig `seq`: Bash `seq` semantics, space-separated.
fn seq(a: Vec<Value>) -> FuncResult {
    let p: Vec<i64> = a.iter().map(to_int64).collect();
    let (start, step, end) = match p.as_slice() {
        [] => return Ok(Value::str("")),
        [end] => (1, if *end >= 1 { 1 } else { -1 }, *end),
        [start, end] => (*start, if end >= start { 1 } else { -1 }, *end),
        [start, step, end, ..] => (*start, *step, *end),
    };
    if step != 0 {
        budget(
            end.saturating_sub(start).saturating_div(step),
            MAX_GENERATED,
        )?;
    }
    let values: Vec<String> = if step == 0 || (end > start && step < 0) || (end < start && step > 0)
    {
        Vec::new()
    } else {
        let mut out = Vec::new();
        let mut i = start;
        while (step > 0 && i <= end) || (step < 0 && i >= end) {
            out.push(i.to_string());
            i += step;
        }
        out
    };
    Ok(Value::string(values.join(" ")))
}
