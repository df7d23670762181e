//! Validation of an object against a structural schema, with kube-apiserver's messages: the
//! kube-openapi schema validator's errors converted to field errors, then the embedded-resource
//! checks, then `x-kubernetes-list-type` uniqueness. Every error is collected, not just the first.

use serde_json::{Map, Value};
use sluice_domain::crds::type_name;

use super::{additional, child, embedded, format, index, items, nullable, properties};
use crate::field_error::{ErrorType, FieldError};

/// All validation errors of `obj` (pruned and defaulted) against `schema`. On updates `old` is
/// the stored object: schema errors of values the update leaves unchanged are ratcheted (dropped),
/// as apiserver does since CRD validation ratcheting (GA in 1.33).
pub fn validate(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut walk = Walk::default();
    walk.value(schema, obj, "");
    let mut out = walk.schema;
    if let Some(old) = old {
        out.retain(|e| !unchanged(e, obj, old));
    }
    out.extend(walk.embedded);
    out.extend(walk.lists);
    out
}

/// Whether the value an error is about is the same in both objects. `required` is not ratcheted,
/// and inside a list the whole list must be unchanged (items are not correlated).
fn unchanged(e: &FieldError, new: &Value, old: &Value) -> bool {
    if e.kind == ErrorType::Required || e.field == "<nil>" {
        return false;
    }
    let path = e.field.split('[').next().unwrap_or("");
    let (a, b) = (lookup(new, path), lookup(old, path));
    a.is_some() && a == b
}

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|k| !k.is_empty())
        .try_fold(v, |v, k| v.get(k))
}

#[derive(Default)]
struct Walk {
    schema: Vec<FieldError>,
    embedded: Vec<FieldError>,
    lists: Vec<FieldError>,
}

/// The field path of an error, `<nil>` at the object root (where apiserver's path is nil).
fn at(path: &str) -> String {
    if path.is_empty() {
        "<nil>".to_string()
    } else {
        path.to_string()
    }
}

fn declared_types(s: &Value) -> Vec<&str> {
    if s.get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return vec!["integer", "string"];
    }
    s.get("type")
        .and_then(Value::as_str)
        .map(|t| vec![t])
        .unwrap_or_default()
}

fn type_matches(types: &[&str], v: &Value) -> bool {
    let actual = type_name(v);
    types.contains(&actual)
        || (actual == "number"
            && types.contains(&"integer")
            && v.as_f64().is_some_and(|f| f.fract() == 0.0))
        || (actual == "integer" && types.contains(&"number"))
}

/// A schema number as Go's `%v` prints it.
fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e21 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

impl Walk {
    fn value(&mut self, s: &Value, v: &Value, path: &str) {
        let types = declared_types(s);
        if v.is_null() {
            if !types.is_empty() && !nullable(s) {
                self.type_error(path, &types.join(","), "null");
            }
            return;
        }
        if !types.is_empty() && !type_matches(&types, v) {
            self.type_error(path, &types.join(","), type_name(v));
        }
        match v {
            Value::String(text) => self.string(s, text, path),
            Value::Number(_) => self.number(s, v, path),
            _ => {}
        }
        if let Value::Array(list) = v {
            self.array(s, list, path);
        }
        if let Some(allowed) = s.get("enum").and_then(Value::as_array) {
            if !allowed.contains(v) {
                let names: Vec<String> = allowed
                    .iter()
                    .map(|a| match a {
                        Value::String(x) => x.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                self.schema
                    .push(FieldError::not_supported(at(path), v.clone(), &names));
            }
        }
        if let Value::Object(map) = v {
            self.object(s, map, path);
        }
    }

    fn type_error(&mut self, path: &str, expected: &str, actual: &str) {
        self.schema.push(FieldError::new(
            ErrorType::TypeInvalid,
            at(path),
            Value::from(actual),
            format!("{path} in body must be of type {expected}: \"{actual}\""),
        ));
    }

    /// Length and pattern stop at the first failure, as kube-openapi's string validator does; the format is checked apart.
    fn string(&mut self, s: &Value, text: &str, path: &str) {
        let chars = text.chars().count() as u64;
        let value = Value::from(text);
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
            if chars > max {
                self.schema.push(FieldError::too_long(at(path), max as i64));
                return self.format(s, text, path);
            }
        }
        if let Some(min) = s.get("minLength").and_then(Value::as_u64) {
            if chars < min {
                self.schema.push(FieldError::invalid(
                    at(path),
                    value,
                    format!("{path} in body should be at least {min} chars long"),
                ));
                return self.format(s, text, path);
            }
        }
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str) {
            let matched = regex::Regex::new(pattern).map(|re| re.is_match(text));
            let detail = match matched {
                Ok(true) => None,
                Ok(false) => Some(format!("{path} in body should match '{pattern}'")),
                Err(e) => Some(format!(
                    "{path} in body should match '{pattern}, but pattern is invalid: {e}'"
                )),
            };
            if let Some(detail) = detail {
                self.schema
                    .push(FieldError::invalid(at(path), value, detail));
            }
        }
        self.format(s, text, path);
    }

    fn format(&mut self, s: &Value, text: &str, path: &str) {
        let Some(f) = s.get("format").and_then(Value::as_str) else {
            return;
        };
        if format::valid(f, text) == Some(false) {
            self.schema.push(FieldError::new(
                ErrorType::TypeInvalid,
                at(path),
                Value::from(text),
                format!(
                    "{path} in body must be of type {f}: {}",
                    crate::field_error::go_quote(text)
                ),
            ));
        }
    }

    fn number(&mut self, s: &Value, v: &Value, path: &str) {
        let types = declared_types(s);
        if !types.contains(&"integer") && !types.contains(&"number") {
            return;
        }
        let x = v.as_f64().unwrap_or(0.0);
        let format = s.get("format").and_then(Value::as_str).unwrap_or("");
        let out_of_range = match (types.contains(&"integer"), format) {
            (true, "int32") => v.as_i64().is_none_or(|i| i32::try_from(i).is_err()),
            (true, _) => {
                v.as_i64().is_none() && !(v.is_f64() && x.fract() == 0.0 && x.abs() < 9.2e18)
            }
            (false, "float") => x.is_finite() && (x as f32).is_infinite(),
            _ => false,
        };
        if out_of_range {
            let kind = if types.contains(&"integer") {
                "integer"
            } else {
                "number"
            };
            let detail = if format.is_empty() {
                format!("Checked value must be of type {kind} (default format) in {path}")
            } else {
                format!("Checked value must be of type {kind} with format {format} in {path}")
            };
            // A plain error in kube-openapi: apiserver reports it at the object root with an empty value.
            self.schema
                .push(FieldError::invalid("<nil>", Value::from(""), detail));
        }
        let exclusive = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
        if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
            let (bad, word) = if exclusive("exclusiveMaximum") {
                (x >= max, "less than")
            } else {
                (x > max, "less than or equal to")
            };
            if bad {
                self.schema.push(FieldError::invalid(
                    at(path),
                    v.clone(),
                    format!("{path} in body should be {word} {}", number_text(max)),
                ));
            }
        }
        if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
            let (bad, word) = if exclusive("exclusiveMinimum") {
                (x <= min, "greater than")
            } else {
                (x < min, "greater than or equal to")
            };
            if bad {
                self.schema.push(FieldError::invalid(
                    at(path),
                    v.clone(),
                    format!("{path} in body should be {word} {}", number_text(min)),
                ));
            }
        }
    }

    fn array(&mut self, s: &Value, list: &[Value], path: &str) {
        if let Some(item) = items(s) {
            for (i, v) in list.iter().enumerate() {
                self.value(item, v, &index(path, i));
            }
        }
        let size = list.len() as i64;
        if let Some(min) = s.get("minItems").and_then(Value::as_i64) {
            if size < min {
                self.schema.push(FieldError::invalid(
                    at(path),
                    Value::from(size),
                    format!("{path} in body should have at least {min} items"),
                ));
            }
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_i64) {
            if size > max {
                self.schema.push(FieldError::too_many(at(path), size, max));
            }
        }
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => {
                for (i, v) in list.iter().enumerate() {
                    if list[..i].contains(v) {
                        self.lists.push(FieldError::new(
                            ErrorType::Duplicate,
                            index(path, i),
                            v.clone(),
                            "",
                        ));
                    }
                }
            }
            Some("map") => self.list_map(s, list, path),
            _ => {}
        }
    }

    fn list_map(&mut self, s: &Value, list: &[Value], path: &str) {
        let keys: Vec<&str> = s
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut seen: Vec<Map<String, Value>> = Vec::new();
        for (i, v) in list.iter().enumerate() {
            let Some(item) = v.as_object() else {
                self.lists.push(FieldError::invalid(
                    index(path, i),
                    v.clone(),
                    "must be an object for an array of list-type map",
                ));
                continue;
            };
            let key: Map<String, Value> = keys
                .iter()
                .filter_map(|k| item.get(*k).map(|x| (k.to_string(), x.clone())))
                .collect();
            if seen.contains(&key) {
                self.lists.push(FieldError::new(
                    ErrorType::Duplicate,
                    index(path, i),
                    Value::Object(key),
                    "",
                ));
            } else {
                seen.push(key);
            }
        }
    }

    fn object(&mut self, s: &Value, map: &Map<String, Value>, path: &str) {
        let size = map.len() as i64;
        if let Some(max) = s.get("maxProperties").and_then(Value::as_i64) {
            if size > max {
                self.schema.push(FieldError::too_many(at(path), size, max));
            }
        }
        if let Some(min) = s.get("minProperties").and_then(Value::as_i64) {
            if size < min {
                self.schema.push(FieldError::invalid(
                    at(path),
                    Value::from(size),
                    format!("{path} in body should have at least {min} properties"),
                ));
            }
        }
        let props = properties(s);
        if let Some(a) = additional(s).filter(|a| a.is_object()) {
            for (k, v) in map {
                if props.is_none_or(|p| !p.contains_key(k)) {
                    self.value(a, v, &child(path, k));
                }
            }
        }
        if let Some(props) = props {
            for (k, p) in props {
                if let Some(v) = map.get(k) {
                    self.value(p, v, &child(path, k));
                }
            }
        }
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for k in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(k) {
                    self.schema.push(FieldError::required(child(path, k), ""));
                }
            }
        }
        if embedded(s) {
            self.embedded_resource(map, path);
        }
    }

    fn embedded_resource(&mut self, map: &Map<String, Value>, path: &str) {
        for field in ["apiVersion", "kind"] {
            let p = child(path, field);
            match map.get(field) {
                None => self
                    .embedded
                    .push(FieldError::required(p, "must not be empty")),
                Some(Value::String(x)) if x.is_empty() => {
                    self.embedded
                        .push(FieldError::invalid(p, Value::from(""), "must not be empty"))
                }
                Some(Value::String(_)) => {}
                Some(other) => {
                    self.embedded
                        .push(FieldError::invalid(p, other.clone(), "must be a string"))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Validates `obj` against `schema` and compares the rendered errors, in order.
    fn check(schema: &Value, obj: Value, want: &[&str]) {
        let got: Vec<String> = validate(schema, &obj, None)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, want, "object {obj}");
    }

    fn trigger() -> Value {
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "spec": {"type": "object", "required": ["sourceClusterSelector"], "properties": {
                "sourceClusterSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                "oneForEvent": {"type": "boolean"},
                "syncMode": {"type": "string", "enum": ["OneTime", "Continuous", "ContinuousWithDriftDetection", "DryRun"]},
                "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10},
                "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0},
                "port": {"x-kubernetes-int-or-string": true},
                "data": {"type": "string", "format": "byte"},
                "since": {"type": "string", "format": "date-time"},
                "maybe": {"type": "string", "nullable": true},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "maxItems": 3},
                "policyRefs": {"type": "array", "minItems": 1, "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["kind", "name"],
                    "items": {"type": "object", "required": ["kind", "name"], "properties": {
                        "kind": {"type": "string", "enum": ["ConfigMap", "Secret"]},
                        "name": {"type": "string"}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}
            }}
        }})
    }

    fn obj(spec: Value) -> Value {
        let mut spec = spec;
        if spec.get("sourceClusterSelector").is_none() {
            spec["sourceClusterSelector"] = json!({"env": "prod"});
        }
        json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger", "metadata": {"name": "t"}, "spec": spec})
    }

    #[test]
    fn a_valid_object_has_no_errors() {
        check(
            &trigger(),
            obj(
                json!({"oneForEvent": true, "syncMode": "Continuous", "name": "abc", "replicas": 3,
                "ratio": 0.5, "port": "http", "data": "aGk=", "since": "2026-01-01T00:00:00Z", "maybe": null,
                "tags": ["a", "b"], "policyRefs": [{"kind": "ConfigMap", "name": "a"}, {"kind": "Secret", "name": "a"}],
                "template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"x": "y"}}}),
            ),
            &[],
        );
    }

    #[test]
    fn schema_violations_have_the_api_server_messages() {
        let s = trigger();
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"oneForEvent": "string"}), vec![
                "spec.oneForEvent: Invalid value: \"string\": spec.oneForEvent in body must be of type boolean: \"string\""]),
            (json!({"syncMode": "Sometimes"}), vec![
                "spec.syncMode: Unsupported value: \"Sometimes\": supported values: \"OneTime\", \"Continuous\", \"ContinuousWithDriftDetection\", \"DryRun\""]),
            (json!({"name": "abcdefg"}), vec!["spec.name: Too long: may not be more than 5 bytes"]),
            (json!({"name": "a"}), vec!["spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long"]),
            (json!({"name": "AB"}), vec!["spec.name: Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'"]),
            (json!({"replicas": 11}), vec!["spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"]),
            (json!({"replicas": -1}), vec!["spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"]),
            (json!({"replicas": 3_000_000_000_i64}), vec![
                "<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.replicas",
                "spec.replicas: Invalid value: 3000000000: spec.replicas in body should be less than or equal to 10"]),
            (json!({"replicas": 1.5}), vec!["spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\"",
                "<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.replicas"]),
            (json!({"ratio": 0}), vec!["spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"]),
            (json!({"port": true}), vec!["spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""]),
            (json!({"data": "not base64!"}), vec!["spec.data: Invalid value: \"not base64!\": spec.data in body must be of type byte: \"not base64!\""]),
            (json!({"since": "yesterday"}), vec!["spec.since: Invalid value: \"yesterday\": spec.since in body must be of type date-time: \"yesterday\""]),
            (json!({"tags": ["a", "b", "a", "c"]}), vec![
                "spec.tags: Too many: 4: must have at most 3 items",
                "spec.tags[2]: Duplicate value: \"a\""]),
            (json!({"tags": [1]}), vec!["spec.tags[0]: Invalid value: \"integer\": spec.tags[0] in body must be of type string: \"integer\""]),
            (json!({"policyRefs": []}), vec!["spec.policyRefs: Invalid value: 0: spec.policyRefs in body should have at least 1 items"]),
            (json!({"policyRefs": [{"kind": "ConfigMap", "name": "a"}, {"kind": "Pod"}, {"kind": "ConfigMap", "name": "a"}]}), vec![
                "spec.policyRefs[1].kind: Unsupported value: \"Pod\": supported values: \"ConfigMap\", \"Secret\"",
                "spec.policyRefs[1].name: Required value",
                "spec.policyRefs[2]: Duplicate value: {\"kind\":\"ConfigMap\",\"name\":\"a\"}"]),
            (json!({"template": {"data": {}}}), vec![
                "spec.template.apiVersion: Required value: must not be empty",
                "spec.template.kind: Required value: must not be empty"]),
            (json!({"sourceClusterSelector": {"env": 1}}), vec![
                "spec.sourceClusterSelector.env: Invalid value: \"integer\": spec.sourceClusterSelector.env in body must be of type string: \"integer\""]),
        ];
        for (spec, want) in cases {
            check(&s, obj(spec), &want);
        }
    }

    #[test]
    fn every_error_is_collected_and_required_fields_are_named() {
        check(
            &trigger(),
            json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger", "metadata": {"name": "t"},
                "spec": {"oneForEvent": "yes", "syncMode": 3}}),
            &[
                "spec.oneForEvent: Invalid value: \"string\": spec.oneForEvent in body must be of type boolean: \"string\"",
                "spec.syncMode: Invalid value: \"integer\": spec.syncMode in body must be of type string: \"integer\"",
                "spec.syncMode: Unsupported value: 3: supported values: \"OneTime\", \"Continuous\", \"ContinuousWithDriftDetection\", \"DryRun\"",
                "spec.sourceClusterSelector: Required value",
            ],
        );
        check(
            &json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}}),
            json!({"apiVersion": "g/v1", "kind": "K"}),
            &["spec: Required value"],
        );
    }

    #[test]
    fn updates_ratchet_errors_of_unchanged_values() {
        let s = trigger();
        let old = obj(json!({"syncMode": "Legacy", "name": "UPPER", "tags": ["a", "a"]}));
        let errors = |new: &Value| -> Vec<String> {
            validate(&s, new, Some(&old))
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        // Unchanged invalid values pass; list-type uniqueness is not ratcheted.
        assert_eq!(errors(&old), ["spec.tags[1]: Duplicate value: \"a\""]);
        let mut changed = old.clone();
        changed["spec"]["syncMode"] = json!("Other");
        changed["spec"]["oneForEvent"] = json!("no");
        assert_eq!(
            errors(&changed),
            [
                "spec.oneForEvent: Invalid value: \"string\": spec.oneForEvent in body must be of type boolean: \"string\"",
                "spec.syncMode: Unsupported value: \"Other\": supported values: \"OneTime\", \"Continuous\", \"ContinuousWithDriftDetection\", \"DryRun\"",
                "spec.tags[1]: Duplicate value: \"a\"",
            ]
        );
    }

    #[test]
    fn nulls_are_type_errors_unless_nullable() {
        let s = json!({"type": "object", "properties": {"list": {"type": "array", "items": {"type": "string"}}}});
        check(
            &s,
            json!({"list": [null]}),
            &["list[0]: Invalid value: \"null\": list[0] in body must be of type string: \"null\""],
        );
    }
}
