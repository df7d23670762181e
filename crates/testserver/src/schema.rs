//! Structural OpenAPI v3 schemas of CRD versions (`openAPIV3Schema`), enforced the way
//! kube-apiserver enforces them: pruning of unknown fields, defaulting, and validation with the
//! real server's error messages. Schemas stay JSON values; these are pure functions over them.
//! Not supported: `allOf`/`anyOf`/`oneOf`/`not`, `x-kubernetes-validations` (CEL rules),
//! `multipleOf`, `patternProperties`.

pub mod builtin;
mod default;
mod format;
mod prune;
mod typed;
mod validate;

use std::sync::Arc;

use serde_json::{Map, Value};

pub use default::default;
pub use prune::prune;
pub use typed::apply_errors;
pub use validate::validate;

/// The fields of `ObjectMeta`: anything else under `metadata` is unknown and dropped.
pub const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

pub(crate) fn property<'a>(s: &'a Value, key: &str) -> Option<&'a Value> {
    properties(s).and_then(|p| p.get(key))
}

/// The schema of map values (`additionalProperties` as a schema; `true` allows anything).
pub(crate) fn additional(s: &Value) -> Option<&Value> {
    match s.get("additionalProperties") {
        Some(a @ Value::Object(_)) => Some(a),
        Some(Value::Bool(true)) => Some(&Value::Bool(true)),
        _ => None,
    }
}

pub(crate) fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn preserves_unknown(s: &Value) -> bool {
    flag(s, "x-kubernetes-preserve-unknown-fields")
}

fn embedded(s: &Value) -> bool {
    flag(s, "x-kubernetes-embedded-resource")
}

fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// The schema of one CRD version.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionSchema {
    pub version: String,
    pub schema: Arc<Value>,
    /// Whether any field has a `default`: reads of stored objects are defaulted only then.
    pub has_defaults: bool,
}

/// The `openAPIV3Schema` of each version a CRD defines.
pub fn crd_schemas(crd: &Value) -> Vec<VersionSchema> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|versions| {
            versions
                .iter()
                .filter_map(|v| {
                    let version = v.get("name")?.as_str()?.to_string();
                    let schema = v.pointer("/schema/openAPIV3Schema")?.clone();
                    Some(VersionSchema {
                        version,
                        has_defaults: default::has_defaults(&schema),
                        schema: Arc::new(schema),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Defaults an object read from storage, as apiserver does when it decodes stored objects (a
/// default added to the schema after the object was written shows on reads).
pub fn default_on_read(schemas: &[VersionSchema], version: &str, obj: &mut Value) {
    if let Some(s) = schemas
        .iter()
        .find(|s| s.version == version && s.has_defaults)
    {
        default(&s.schema, obj);
    }
}
