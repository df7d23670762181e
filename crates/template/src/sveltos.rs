//! The Sveltos template functions: libsveltos' overrides (`toYaml fromYaml fromYamlArray toJson
//! fromJson fromJsonArray toToml fromToml`, both engines) and event-manager's extras
//! (`getResource copy getField setField removeField chainSetField chainRemoveField`, text only),
//! with their Go quirks: `from*` report errors in the result, the extras modify the caller's map.

use std::fmt::Write;

use crate::funcs::{arg_str, FuncDef, Imp, Scope, Ty};
use crate::gojson;
use crate::sprig::encoding::{from_json_floats, go_json};
use crate::value::{Map, MapRef, Value};
use crate::yaml::{load::load, to_yaml, Flavor};

macro_rules! sveltos {
    ($name:literal, [$($p:ident),*], $scope:ident, $imp:expr) => {
        FuncDef { name: $name, params: &[$(Ty::$p),*], variadic: None, imp: Imp::Plain($imp), scope: Scope::$scope, fast: None, text: None }
    };
}

pub static FUNCS: &[FuncDef] = &[
    sveltos!("toYaml", [Any], All, |a| Ok(Value::string(trim_newline(
        to_yaml(&a[0], Flavor::V2).unwrap_or_default()
    )))),
    sveltos!("fromYaml", [Str], All, |a| Ok(from_yaml(arg_str(&a, 0)))),
    sveltos!("fromYamlArray", [Str], All, |a| Ok(from_yaml_array(
        arg_str(&a, 0)
    ))),
    sveltos!("toJson", [Any], All, |a| Ok(Value::string(
        go_json(&a[0], true, false).unwrap_or_default()
    ))),
    sveltos!("fromJson", [Str], All, |a| Ok(from_json(
        arg_str(&a, 0),
        false
    ))),
    sveltos!("fromJsonArray", [Str], All, |a| Ok(from_json(
        arg_str(&a, 0),
        true
    ))),
    sveltos!("toToml", [Any], All, |a| Ok(Value::string(to_toml(&a[0])))),
    sveltos!("fromToml", [Str], All, |a| Ok(from_toml(arg_str(&a, 0)))),
    sveltos!("getResource", [Map], EventManager, |a| Ok(reset_fields(
        &a[0]
    ))),
    sveltos!("copy", [Map], EventManager, |a| Ok(Value::string(yaml_v3(
        &reset_fields(&a[0])
    )))),
    sveltos!("getField", [Map, Str], EventManager, |a| {
        let path: Vec<&str> = arg_str(&a, 1).split('.').collect();
        Ok(match nested(&a[0], &path) {
            Some(v) => v.deep_copy(),
            None => Value::str(""),
        })
    }),
    sveltos!("removeField", [Map, Str], EventManager, |a| {
        remove_nested(&a[0], &arg_str(&a, 1).split('.').collect::<Vec<_>>());
        Ok(Value::string(yaml_v3(&reset_fields(&a[0]))))
    }),
    sveltos!("setField", [Map, Str, Any], EventManager, |a| {
        let copy = deep_copy_json(&a[2])?;
        if set_nested(&a[0], &arg_str(&a, 1).split('.').collect::<Vec<_>>(), copy).is_err() {
            return Ok(Value::str(""));
        }
        Ok(Value::string(yaml_v3(&reset_fields(&a[0]))))
    }),
    sveltos!("chainRemoveField", [Map, Str], EventManager, |a| {
        remove_nested(&a[0], &arg_str(&a, 1).split('.').collect::<Vec<_>>());
        Ok(a[0].clone())
    }),
    sveltos!("chainSetField", [Map, Str, Any], EventManager, |a| {
        let copy = deep_copy_json(&a[2])?;
        match set_nested(&a[0], &arg_str(&a, 1).split('.').collect::<Vec<_>>(), copy) {
            Ok(()) => Ok(a[0].clone()),
            // Go returns a nil map[string]interface{}: it prints as map[] and has no keys.
            Err(()) => Ok(Value::map(Map::new())),
        }
    }),
];

fn trim_newline(mut s: String) -> String {
    if s.ends_with('\n') {
        s.pop();
    }
    s
}

fn yaml_v3(v: &Value) -> String {
    trim_newline(to_yaml(v, Flavor::V3).unwrap_or_default())
}

fn error_map(message: String) -> Value {
    let mut map = Map::new();
    map.insert("Error".into(), Value::string(message));
    Value::map(map)
}

fn from_yaml(text: &str) -> Value {
    match load(text) {
        Ok(v @ Value::Map(_)) => v,
        Ok(Value::Nil) => Value::map(Map::new()),
        Ok(other) => error_map(format!(
            "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_kind_of(&other)
        )),
        Err(e) => error_map(e),
    }
}

fn from_yaml_array(text: &str) -> Value {
    match load(text) {
        Ok(v @ Value::List(_)) => v,
        Ok(Value::Nil) => Value::list(Vec::new()),
        Ok(other) => Value::list(vec![Value::string(format!(
            "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type []interface {{}}",
            json_kind_of(&other)
        ))]),
        Err(e) => Value::list(vec![Value::string(e)]),
    }
}

fn json_kind_of(v: &Value) -> &'static str {
    match v {
        Value::Map(_) => "object",
        Value::List(_) => "array",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Nil => "null",
        _ => "number",
    }
}

fn from_json(text: &str, array: bool) -> Value {
    let wrap = |message: String| {
        if array {
            Value::list(vec![Value::string(message)])
        } else {
            error_map(message)
        }
    };
    if let Some(e) = gojson::syntax_error(text) {
        return wrap(e);
    }
    let json: serde_json::Value = match serde_json::from_str(text) {
        Ok(j) => j,
        Err(e) => return wrap(e.to_string()),
    };
    match (&json, array) {
        (serde_json::Value::Object(_), false) | (serde_json::Value::Array(_), true) => {
            from_json_floats(&json)
        }
        (serde_json::Value::Null, false) => Value::map(Map::new()),
        (serde_json::Value::Null, true) => Value::list(Vec::new()),
        (other, _) => {
            let target = if array {
                "[]interface {}"
            } else {
                "map[string]interface {}"
            };
            wrap(format!(
                "json: cannot unmarshal {} into Go value of type {target}",
                gojson::json_kind(other)
            ))
        }
    }
}

/// event-manager `resetFields`: drops server-set metadata from the caller's own map.
fn reset_fields(v: &Value) -> Value {
    for field in ["managedFields", "resourceVersion", "uid"] {
        remove_nested(v, &["metadata", field]);
    }
    v.clone()
}

fn map_of(v: &Value) -> Option<&MapRef> {
    match v {
        Value::Map(m) => Some(m),
        _ => None,
    }
}

fn nested(v: &Value, path: &[&str]) -> Option<Value> {
    let mut current = v.clone();
    for field in path {
        current = map_of(&current)?.get(field)?;
    }
    Some(current)
}

fn remove_nested(v: &Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = v.clone();
    for field in parents {
        let Some(next) = map_of(&current).and_then(|m| m.get(field)) else {
            return;
        };
        if map_of(&next).is_none() {
            return;
        }
        current = next;
    }
    if let Some(m) = map_of(&current) {
        m.write().remove(*last);
    }
}

/// `unstructured.SetNestedField`; Err when a path element exists but is not a map.
fn set_nested(v: &Value, path: &[&str], value: Value) -> Result<(), ()> {
    let Some((last, parents)) = path.split_last() else {
        return Err(());
    };
    let mut current = map_of(v).ok_or(())?.clone();
    for field in parents {
        let next = current.get(field);
        current = match next {
            Some(Value::Map(m)) => m,
            Some(_) => return Err(()),
            None => {
                let created = MapRef::new(Map::new());
                current
                    .write()
                    .insert(field.to_string(), Value::Map(created.clone()));
                created
            }
        };
    }
    current.write().insert(last.to_string(), value);
    Ok(())
}

/// `runtime.DeepCopyJSONValue`: only JSON types (int64, not Go int) can be copied.
fn deep_copy_json(v: &Value) -> Result<Value, String> {
    Ok(match v {
        Value::Nil | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::String(_) => {
            v.clone()
        }
        Value::List(items) => {
            Value::list(items.iter().map(deep_copy_json).collect::<Result<_, _>>()?)
        }
        Value::Map(m) => Value::map(
            m.read()
                .iter()
                .map(|(k, v)| Ok((k.clone(), deep_copy_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => return Err(format!("cannot deep copy {}", other.go_type())),
    })
}

/// BurntSushi/toml encoding: scalar keys first, then tables, sub-tables indented two spaces.
fn to_toml(v: &Value) -> String {
    let Value::Map(m) = v else {
        return "toml: top-level values must be Go maps or structs".into();
    };
    let mut out = String::new();
    toml_table(&mut out, m, &mut Vec::new());
    out
}

fn toml_table(out: &mut String, m: &MapRef, path: &mut Vec<String>) {
    let indent = "  ".repeat(path.len());
    let entries: Vec<(String, Value)> = m
        .read()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in entries.iter().filter(|(_, v)| !matches!(v, Value::Map(_))) {
        if v.is_nil() {
            continue;
        }
        let _ = writeln!(out, "{indent}{} = {}", toml_key(k), toml_value(v));
    }
    for (k, v) in entries.iter() {
        if let Value::Map(sub) = v {
            // BurntSushi/toml separates top-level tables by a blank line.
            if path.is_empty() && !out.is_empty() {
                out.push('\n');
            }
            path.push(toml_key(k));
            let _ = writeln!(out, "{indent}[{}]", path.join("."));
            toml_table(out, sub, path);
            path.pop();
        }
    }
}

fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        crate::gofmt::quote(k)
    }
}

fn toml_value(v: &Value) -> String {
    match v {
        Value::String(s) => crate::gofmt::quote(s),
        Value::Float(f) => {
            let s = format!("{f}");
            if s.contains(['.', 'e', 'i', 'N']) {
                s
            } else {
                format!("{s}.0")
            }
        }
        Value::List(items) => format!(
            "[{}]",
            items.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Map(_) => "{}".into(),
        other => crate::gofmt::to_string(other),
    }
}

fn from_toml(text: &str) -> Value {
    match text.parse::<toml::Table>() {
        Ok(table) => toml_to_value(&toml::Value::Table(table)),
        Err(e) => error_map(e.message().to_string()),
    }
}

fn toml_to_value(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::str(s),
        toml::Value::Integer(i) => Value::Int(*i),
        toml::Value::Float(f) => Value::Float(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::string(d.to_string()),
        toml::Value::Array(items) => Value::list(items.iter().map(toml_to_value).collect()),
        toml::Value::Table(t) => Value::map(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_value(v)))
                .collect(),
        ),
    }
}
