//! Pruning: fields a structural schema does not declare are removed, unless a
//! `x-kubernetes-preserve-unknown-fields` schema keeps them. The object root and embedded
//! resources keep `apiVersion`, `kind` and the `ObjectMeta` fields of `metadata`.

use serde_json::{Map, Value};

use super::{
    additional, child, embedded, index, items, preserves_unknown, property, OBJECT_META_FIELDS,
};

/// Removes unknown fields from `obj` (a whole object) and returns their paths (`spec.x`,
/// `spec.list[0].y`, `metadata.z`), sorted.
pub fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    resource(schema, obj, "", &mut pruned);
    pruned.sort();
    pruned
}

/// The object root and every `x-kubernetes-embedded-resource` object.
fn resource(s: &Value, v: &mut Value, path: &str, pruned: &mut Vec<String>) {
    if preserves_unknown(s) {
        skip(s, v, path, pruned, true);
    } else {
        walk(Some(s), v, path, pruned, true);
    }
}

fn walk(s: Option<&Value>, v: &mut Value, path: &str, pruned: &mut Vec<String>, is_resource: bool) {
    if let Some(s) = s {
        if preserves_unknown(s) {
            skip(s, v, path, pruned, is_resource || embedded(s));
            return;
        }
    }
    match v {
        Value::Object(map) => {
            let Some(s) = s else {
                for k in map.keys() {
                    pruned.push(child(path, k));
                }
                map.clear();
                return;
            };
            let resource = is_resource || embedded(s);
            let mut drop = Vec::new();
            for (k, value) in map.iter_mut() {
                if resource && meta_field(k, value, path, pruned) {
                    continue;
                }
                if let Some(p) = property(s, k) {
                    walk(Some(p), value, &child(path, k), pruned, embedded(p));
                } else if let Some(a) = additional(s) {
                    walk(schema_of(a), value, &child(path, k), pruned, embedded(a));
                } else {
                    pruned.push(child(path, k));
                    drop.push(k.clone());
                }
            }
            for k in drop {
                map.remove(&k);
            }
        }
        Value::Array(list) => {
            let item = s.and_then(items);
            for (i, value) in list.iter_mut().enumerate() {
                walk(
                    item,
                    value,
                    &index(path, i),
                    pruned,
                    item.is_some_and(embedded),
                );
            }
        }
        _ => {}
    }
}

/// Under `x-kubernetes-preserve-unknown-fields`: unknown fields stay, declared ones are still pruned inside.
fn skip(s: &Value, v: &mut Value, path: &str, pruned: &mut Vec<String>, is_resource: bool) {
    match v {
        Value::Object(map) => {
            for (k, value) in map.iter_mut() {
                if is_resource && meta_field(k, value, path, pruned) {
                    continue;
                }
                if let Some(p) = property(s, k) {
                    walk(Some(p), value, &child(path, k), pruned, embedded(p));
                } else if let Some(a) = additional(s) {
                    walk(schema_of(a), value, &child(path, k), pruned, embedded(a));
                }
            }
        }
        Value::Array(list) => {
            if let Some(item) = items(s) {
                for (i, value) in list.iter_mut().enumerate() {
                    let p = index(path, i);
                    if preserves_unknown(item) {
                        skip(item, value, &p, pruned, embedded(item));
                    } else {
                        walk(Some(item), value, &p, pruned, embedded(item));
                    }
                }
            }
        }
        _ => {}
    }
}

/// `additionalProperties: true` keeps everything below it.
fn schema_of(a: &Value) -> Option<&Value> {
    static KEEP: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    if a.is_boolean() {
        Some(KEEP.get_or_init(|| serde_json::json!({"x-kubernetes-preserve-unknown-fields": true})))
    } else {
        Some(a)
    }
}

/// `apiVersion`, `kind` and `metadata` of a resource: kept, with `metadata` reduced to `ObjectMeta`.
fn meta_field(k: &str, value: &mut Value, path: &str, pruned: &mut Vec<String>) -> bool {
    match k {
        "apiVersion" | "kind" => value.is_string(),
        "metadata" => {
            if let Value::Object(meta) = value {
                prune_meta(meta, &child(path, "metadata"), pruned);
            }
            true
        }
        _ => false,
    }
}

fn prune_meta(meta: &mut Map<String, Value>, path: &str, pruned: &mut Vec<String>) {
    let unknown: Vec<String> = meta
        .keys()
        .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for k in unknown {
        pruned.push(child(path, &k));
        meta.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value, obj: Value, want_obj: Value, want_pruned: &[&str]) {
        let mut obj = obj;
        let pruned = prune(&schema, &mut obj);
        assert_eq!(obj, want_obj);
        assert_eq!(pruned, want_pruned);
    }

    fn trigger_schema() -> Value {
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "a": {"type": "string"},
                "list": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"strict": {"type": "object", "properties": {"x": {"type": "string"}}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "x-kubernetes-preserve-unknown-fields": true}
            }},
        }})
    }

    #[test]
    fn unknown_fields_are_removed_and_reported() {
        check(
            trigger_schema(),
            json!({"apiVersion": "g/v1", "kind": "T", "metadata": {"name": "n", "bogus": 1},
                "top": 1,
                "spec": {"a": "x", "typo": true,
                    "list": [{"name": "a", "extra": 1}, {"name": "b"}],
                    "labels": {"k": "v"},
                    "free": {"anything": {"goes": 1}, "strict": {"x": "1", "y": "2"}},
                    "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "nope": 1}, "data": {"k": "v"}}}}),
            json!({"apiVersion": "g/v1", "kind": "T", "metadata": {"name": "n"},
                "spec": {"a": "x",
                    "list": [{"name": "a"}, {"name": "b"}],
                    "labels": {"k": "v"},
                    "free": {"anything": {"goes": 1}, "strict": {"x": "1"}},
                    "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}}}),
            &[
                "metadata.bogus",
                "spec.free.strict.y",
                "spec.list[0].extra",
                "spec.template.metadata.nope",
                "spec.typo",
                "top",
            ],
        );
    }

    #[test]
    fn a_preserving_spec_keeps_everything_but_metadata_is_still_object_meta() {
        check(
            json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}),
            json!({"apiVersion": "g/v1", "kind": "T", "metadata": {"name": "n", "x": 1}, "spec": {"any": [1, {"b": 2}]}}),
            json!({"apiVersion": "g/v1", "kind": "T", "metadata": {"name": "n"}, "spec": {"any": [1, {"b": 2}]}}),
            &["metadata.x"],
        );
    }
}
