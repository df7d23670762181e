//! Small accessors for objects stored as `serde_json::Value`: metadata fields, labels, timestamps.

use serde_json::{Map, Value};

/// The current time as Kubernetes prints it (RFC 3339, whole seconds, UTC).
pub fn now() -> String {
    format_time(time::OffsetDateTime::now_utc())
}

pub fn format_time(t: time::OffsetDateTime) -> String {
    let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.format(&f).unwrap_or_default()
}

pub fn parse_time(s: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

/// Whether an object is being deleted (it has a `deletionTimestamp`).
pub fn is_deleting(obj: &Value) -> bool {
    !meta_str(obj, "deletionTimestamp").is_empty()
}

/// A metadata string field, or "" when absent.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The metadata map, created when missing or not an object.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("obj was made an object above");
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
        .expect("metadata was made an object above")
}

pub fn set_meta(obj: &mut Value, field: &str, value: Value) {
    meta_mut(obj).insert(field.to_string(), value);
}

pub fn remove_meta(obj: &mut Value, field: &str) -> Option<Value> {
    meta_mut(obj).remove(field)
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Top-level fields other than metadata, status, apiVersion and kind: what `generation` tracks.
pub fn spec_part(obj: &Value) -> Map<String, Value> {
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}
