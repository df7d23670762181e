//! The typed conversion server-side apply makes of an applied configuration before merging it
//! (structured-merge-diff): a field the schema does not declare, or a value of the wrong kind,
//! fails the whole request, with structured-merge-diff's own messages (`.spec.x: field not
//! declared in schema`, `.spec.b: expected boolean, got &{yes}`). Range, enum and format rules are
//! left to validation, which runs on the merged object.

use serde_json::Value;

use super::{additional, embedded, items, preserves_unknown, property, OBJECT_META_FIELDS};

/// The conversion errors of an applied configuration, in path order.
pub fn apply_errors(schema: &Value, config: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    walk(schema, config, "", true, &mut errors);
    errors
}

fn walk(s: &Value, v: &Value, path: &str, is_resource: bool, errors: &mut Vec<String>) {
    if v.is_null() {
        return;
    }
    let int_or_string = s
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ty = s.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "" if int_or_string && (v.is_object() || v.is_array()) => {
            errors.push(format!("{path}: expected any scalar, got {}", go_v(v)));
        }
        "object" => {
            let Some(map) = v.as_object() else {
                errors.push(format!("{path}: expected map, got {}", go_v(v)));
                return;
            };
            let resource = is_resource || embedded(s);
            for (k, value) in map {
                let p = format!("{path}.{k}");
                if resource && matches!(k.as_str(), "apiVersion" | "kind") && value.is_string() {
                    continue;
                }
                if resource && k == "metadata" {
                    if let Some(meta) = value.as_object() {
                        for mk in meta
                            .keys()
                            .filter(|mk| !OBJECT_META_FIELDS.contains(&mk.as_str()))
                        {
                            errors.push(format!("{p}.{mk}: field not declared in schema"));
                        }
                    }
                    continue;
                }
                if let Some(prop) = property(s, k) {
                    walk(prop, value, &p, false, errors);
                } else if let Some(a) = additional(s) {
                    if a.is_object() {
                        walk(a, value, &p, false, errors);
                    }
                } else if !preserves_unknown(s) {
                    errors.push(format!("{p}: field not declared in schema"));
                }
            }
        }
        "array" => {
            let Some(list) = v.as_array() else {
                errors.push(format!("{path}: expected list, got {}", go_v(v)));
                return;
            };
            if let Some(item) = items(s) {
                for (i, value) in list.iter().enumerate() {
                    walk(item, value, &format!("{path}[{i}]"), false, errors);
                }
            }
        }
        "string" if !v.is_string() => {
            errors.push(format!("{path}: expected string, got {}", go_sharp_v(v)));
        }
        "boolean" if !v.is_boolean() => {
            errors.push(format!("{path}: expected boolean, got {}", go_v(v)));
        }
        "integer" | "number" if !v.is_number() => {
            errors.push(format!(
                "{path}: expected numeric (int or float), got {}",
                go_type(v)
            ));
        }
        _ => {}
    }
}

/// Go's `%v` of structured-merge-diff's value wrapper: `&{yes}`, `&{map[a:1]}`.
fn go_v(v: &Value) -> String {
    format!("&{{{}}}", plain(v))
}

fn plain(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(plain).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", plain(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => other.to_string(),
    }
}

/// Go's `%#v` of the wrapper: `&value.valueUnstructured{Value:false}`.
fn go_sharp_v(v: &Value) -> String {
    format!("&value.valueUnstructured{{Value:{}}}", sharp(v))
}

fn sharp(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::String(s) => crate::field_error::go_quote(s),
        Value::Array(a) => format!(
            "[]interface {{}}{{{}}}",
            a.iter().map(sharp).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "map[string]interface {{}}{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}:{}", crate::field_error::go_quote(k), sharp(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Go's `%T` of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::Null => "<nil>",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(config: Value, want: &[&str]) {
        let schema = json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "flag": {"type": "boolean"}, "name": {"type": "string"}, "count": {"type": "integer"},
                "port": {"x-kubernetes-int-or-string": true},
                "list": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        assert_eq!(apply_errors(&schema, &config), want, "{config}");
    }

    #[test]
    fn undeclared_fields_and_wrong_kinds_fail_the_conversion() {
        check(
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "x"},
                "spec": {"flag": true, "name": "n", "count": 1, "port": "http", "list": [{"n": "a"}],
                    "labels": {"a": "b"}, "free": {"any": {"thing": 1}}}}),
            &[],
        );
        check(
            json!({"metadata": {"name": "x", "bogus": 1},
                "spec": {"flag": "yes", "name": false, "count": "3", "port": [1], "list": [{"m": 1}],
                    "labels": {"a": 1}, "typo": 1}}),
            &[
                ".metadata.bogus: field not declared in schema",
                ".spec.count: expected numeric (int or float), got string",
                ".spec.flag: expected boolean, got &{yes}",
                ".spec.labels.a: expected string, got &value.valueUnstructured{Value:1}",
                ".spec.list[0].m: field not declared in schema",
                ".spec.name: expected string, got &value.valueUnstructured{Value:false}",
                ".spec.port: expected any scalar, got &{[1]}",
                ".spec.typo: field not declared in schema",
            ],
        );
        check(json!({"spec": "x"}), &[".spec: expected map, got &{x}"]);
    }
}
