//! sprig dict functions. Dicts are shared references: `set`, `unset`, `merge` and
//! `mergeOverwrite` change the map they are given, as in Go.

use super::{empty, strval};
use crate::funcs::{arg_str, def, FuncDef, FuncResult};
use crate::value::{Map, MapRef, Value};

pub static FUNCS: &[FuncDef] = &[
    def!("dict", [], ...Any, dict),
    def!("get", [Map, Str], |a| Ok(with_map(&a[0], |m| m
        .get(arg_str(&a, 1))
        .cloned())
    .flatten()
    .unwrap_or(Value::str("")))),
    def!("set", [Map, Str, Any], |a| {
        if let Value::Map(m) = &a[0] {
            // Go would build the cycle and overflow its stack printing it.
            if m.is_within(&a[2])? {
                return Err("cannot set a map inside itself".into());
            }
            m.write().insert(arg_str(&a, 1).to_string(), a[2].clone());
        }
        Ok(a[0].clone())
    }),
    def!("unset", [Map, Str], |a| {
        if let Value::Map(m) = &a[0] {
            m.write().remove(arg_str(&a, 1));
        }
        Ok(a[0].clone())
    }),
    def!("hasKey", [Map, Str], |a| Ok(Value::Bool(
        with_map(&a[0], |m| m.contains_key(arg_str(&a, 1))).unwrap_or(false)
    ))),
    def!("pluck", [Str], ...Map, |a| {
        let key = arg_str(&a, 0);
        Ok(Value::list(a[1..].iter().filter_map(|d| with_map(d, |m| m.get(key).cloned()).flatten()).collect()))
    }),
    def!("keys", [], ...Map, |a| {
        let mut keys = Vec::new();
        for d in &a {
            with_map(d, |m| keys.extend(m.keys().map(|k| Value::str(k))));
        }
        Ok(Value::list(keys))
    }),
    def!("values", [Map], |a| Ok(Value::list(
        with_map(&a[0], |m| m.values().cloned().collect()).unwrap_or_default()
    ))),
    def!("pick", [Map], ...Str, |a| {
        let keys: Vec<&str> = a[1..].iter().filter_map(Value::as_str).collect();
        let picked = with_map(&a[0], |m| m.iter().filter(|(k, _)| keys.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect());
        Ok(Value::map(picked.unwrap_or_default()))
    }),
    def!("omit", [Map], ...Str, |a| {
        let keys: Vec<&str> = a[1..].iter().filter_map(Value::as_str).collect();
        let kept = with_map(&a[0], |m| m.iter().filter(|(k, _)| !keys.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect());
        Ok(Value::map(kept.unwrap_or_default()))
    }),
    def!("merge", [Map], ...Map, |a| merge(a, false)),
    def!("mustMerge", [Map], ...Map, |a| merge(a, false)),
    def!("mergeOverwrite", [Map], ...Map, |a| merge(a, true)),
    def!("mustMergeOverwrite", [Map], ...Map, |a| merge(a, true)),
    def!("dig", [Any], ...Any, dig),
    def!("deepCopy", [Any], |a| Ok(a[0].deep_copy())),
    def!("mustDeepCopy", [Any], |a| match &a[0] {
        Value::Nil => Err("copy: cannot copy nil".into()),
        v => Ok(v.deep_copy()),
    }),
];

fn with_map<T>(v: &Value, f: impl FnOnce(&Map) -> T) -> Option<T> {
    match v {
        Value::Map(m) => Some(f(&m.read())),
        _ => None,
    }
}

fn dict(a: Vec<Value>) -> FuncResult {
    let mut map = Map::new();
    let mut it = a.chunks(2);
    for pair in &mut it {
        let key = strval(&pair[0]);
        let value = pair.get(1).cloned().unwrap_or(Value::str(""));
        map.insert(key, value);
    }
    Ok(Value::map(map))
}

/// mergo's deep merge over `map[string]interface{}`: maps merge key by key; otherwise the
/// destination keeps its value unless it is empty (zero), and with `overwrite` the source
/// value wins unless it is nil (a source `0` or `""` still overwrites, as measured against Go).
fn merge(a: Vec<Value>, overwrite: bool) -> FuncResult {
    let Value::Map(dst) = &a[0] else {
        return Ok(a[0].clone());
    };
    for src in &a[1..] {
        if let Value::Map(src) = src {
            if !src.ptr_eq(dst) {
                merge_into(dst, src, overwrite);
            }
        }
    }
    Ok(a[0].clone())
}

fn merge_into(dst: &MapRef, src: &MapRef, overwrite: bool) {
    let entries: Vec<(String, Value)> = src
        .read()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, value) in entries {
        let existing = dst.get(&key);
        match (existing, &value) {
            (Some(Value::Map(d)), Value::Map(s)) => {
                if !d.ptr_eq(s) {
                    merge_into(&d, s, overwrite);
                }
            }
            (Some(current), _) => {
                if (overwrite && !value.is_nil()) || empty(&current) {
                    dst.write().insert(key, value.deep_copy());
                }
            }
            (None, _) => {
                dst.write().insert(key, value.deep_copy());
            }
        }
    }
}

fn dig(a: Vec<Value>) -> FuncResult {
    if a.len() < 3 {
        return Err("dig needs at least three arguments".into());
    }
    let n = a.len();
    let Value::Map(dict) = &a[n - 1] else {
        return Err(format!(
            "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
            a[n - 1].go_type()
        ));
    };
    let default = a[n - 2].clone();
    let keys = &a[..n - 2];
    let mut current = Value::Map(dict.clone());
    for key in keys {
        let key = key
            .as_str()
            .ok_or("interface conversion: key is not a string")?;
        let next = match &current {
            Value::Map(m) => m.get(key),
            other => {
                return Err(format!(
                    "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                    other.go_type()
                ))
            }
        };
        match next {
            Some(v) => current = v,
            None => return Ok(default),
        }
    }
    Ok(current)
}
