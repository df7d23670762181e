//! Defaulting: `default` values of a structural schema fill absent fields (and non-nullable
//! nulls) wherever the enclosing object exists, including inside array items and map values.
//! Non-nullable nulls without a default are dropped first, as the API server does.

use serde_json::Value;

use super::{additional, items, nullable, properties};

/// Drops non-nullable nulls that have no default, then fills defaults, in place.
pub fn default(schema: &Value, obj: &mut Value) {
    prune_nulls(Some(schema), obj);
    fill(Some(schema), obj);
}

fn field_schema<'a>(s: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = s?;
    properties(s)
        .and_then(|p| p.get(key))
        .or_else(|| additional(s).filter(|a| a.is_object()))
}

fn non_nullable_null(v: &Value, s: Option<&Value>) -> bool {
    v.is_null() && s.is_some_and(|s| !nullable(s))
}

fn prune_nulls(s: Option<&Value>, v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, value| {
                let fs = field_schema(s, k);
                !(non_nullable_null(value, fs) && fs.is_some_and(|fs| fs.get("default").is_none()))
            });
            for (k, value) in map.iter_mut() {
                prune_nulls(field_schema(s, k), value);
            }
        }
        Value::Array(list) => {
            let item = s.and_then(items);
            for value in list {
                prune_nulls(item, value);
            }
        }
        _ => {}
    }
}

fn fill(s: Option<&Value>, v: &mut Value) {
    let Some(s) = s else {
        return;
    };
    match v {
        Value::Object(map) => {
            if let Some(props) = properties(s) {
                for (k, prop) in props {
                    let Some(d) = prop.get("default") else {
                        continue;
                    };
                    let absent = map.get(k).is_none_or(|x| non_nullable_null(x, Some(prop)));
                    if absent {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, value) in map.iter_mut() {
                if let Some(prop) = properties(s).and_then(|p| p.get(k)) {
                    fill(Some(prop), value);
                } else if let Some(a) = additional(s).filter(|a| a.is_object()) {
                    if let (true, Some(d)) = (non_nullable_null(value, Some(a)), a.get("default")) {
                        *value = d.clone();
                    }
                    fill(Some(a), value);
                }
            }
        }
        Value::Array(list) => {
            let Some(item) = items(s) else {
                return;
            };
            for value in list {
                if let (true, Some(d)) = (non_nullable_null(value, Some(item)), item.get("default"))
                {
                    *value = d.clone();
                }
                fill(Some(item), value);
            }
        }
        _ => {}
    }
}

/// Whether any schema below `schema` declares a default (objects of schemas without one are left alone on reads).
pub fn has_defaults(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.contains_key("default") || m.values().any(has_defaults),
        Value::Array(a) => a.iter().any(has_defaults),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value, obj: Value, want: Value) {
        let mut obj = obj;
        default(&schema, &mut obj);
        assert_eq!(obj, want);
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "mode": {"type": "string", "default": "Continuous"},
            "one": {"type": "boolean", "default": false},
            "opt": {"type": "string"},
            "maybe": {"type": "string", "nullable": true},
            "nested": {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}},
            "rules": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "kind": {"type": "string", "default": "All"}}}},
            "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "weight": {"type": "integer", "default": 1}}}}
        }}}})
    }

    #[test]
    fn defaults_fill_absent_fields_where_the_parent_exists() {
        check(
            schema(),
            json!({"spec": {"rules": [{"name": "a"}, {"name": "b", "kind": "Some"}], "byName": {"x": {}}}}),
            json!({"spec": {"mode": "Continuous", "one": false,
                "rules": [{"name": "a", "kind": "All"}, {"name": "b", "kind": "Some"}],
                "byName": {"x": {"weight": 1}}}}),
        );
        // `nested` is absent, so its defaults are not applied; no spec, no spec defaults.
        check(
            schema(),
            json!({"metadata": {"name": "x"}}),
            json!({"metadata": {"name": "x"}}),
        );
        check(
            schema(),
            json!({"spec": {"nested": {}}}),
            json!({"spec": {"mode": "Continuous", "one": false, "nested": {"n": 3}}}),
        );
    }

    #[test]
    fn nulls_are_defaulted_dropped_or_kept_by_nullability() {
        check(
            schema(),
            json!({"spec": {"mode": null, "opt": null, "maybe": null}}),
            json!({"spec": {"mode": "Continuous", "one": false, "maybe": null}}),
        );
    }

    #[test]
    fn has_defaults_finds_nested_defaults() {
        assert!(has_defaults(&schema()));
        assert!(!has_defaults(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}})
        ));
    }
}
