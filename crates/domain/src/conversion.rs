//! Conversion of EventSource and EventTrigger objects between `lib.projectsveltos.io/v1alpha1`
//! and `v1beta1` (the storage version), as a CRD conversion webhook answers it, and the
//! `ConversionReview` exchange around it. Pure functions over JSON objects; serving the webhook
//! over HTTPS is the caller's business.
//!
//! The shapes follow Sveltos's conversion (sveltos-events.md sections 1.2 and 2.3): selectors are
//! strings in v1alpha1 and LabelSelectors in v1beta1; the pre-2023-12 flat EventSource spec
//! becomes one resource selector. What one version cannot express travels in the annotation
//! [`CONVERSION_ANNOTATION`] so that a round trip through the other version gives it back:
//! a v1alpha1 object carries the v1beta1-only fields it lost (`messagingMatchCriteria`, a
//! selector's `selector` and `evaluateCEL`, the EventTrigger fields newer than v1alpha1), and a
//! v1beta1 object written flat carries that form (and the spelling of its label filter list).
//! Sveltos silently drops those fields instead; keeping them is deliberate (ADR 0019).

use serde_json::{json, Map, Value};

use crate::eventsource::{is_flat_spec, FLAT_LABEL_FILTER_KEYS};
use crate::eventtrigger::label_selector;
use crate::selector::{LabelSelector, Selector};

/// The group both kinds belong to.
pub const GROUP: &str = "lib.projectsveltos.io";
/// `apiVersion` of the legacy version.
pub const V1ALPHA1: &str = "lib.projectsveltos.io/v1alpha1";
/// `apiVersion` of the storage version.
pub const V1BETA1: &str = "lib.projectsveltos.io/v1beta1";
/// The annotation holding what the object's version cannot express (JSON).
pub const CONVERSION_ANNOTATION: &str = "sluice.io/conversion-data";
/// The `apiVersion` of the `ConversionReview` this module answers.
pub const REVIEW_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// EventTrigger v1beta1 spec fields that v1alpha1 does not have.
const TRIGGER_BETA_ONLY: [&str; 7] = [
    "driftExclusions",
    "patches",
    "preDeployChecks",
    "preDeleteChecks",
    "postDeleteChecks",
    "profileNameFormat",
    "cloudEventAction",
];

/// Why an object (or a review) could not be converted; `field` is the JSON path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("kind {kind:?} has no conversion (EventSource or EventTrigger)")]
    UnsupportedKind { kind: String },
    #[error("{field}: unsupported apiVersion {api_version:?} ({V1ALPHA1} or {V1BETA1})")]
    UnsupportedVersion { field: String, api_version: String },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

/// Converts one EventSource or EventTrigger object to `desired` (`lib.projectsveltos.io/v1alpha1`
/// or `v1beta1`). Metadata other than [`CONVERSION_ANNOTATION`] is left alone, as a conversion
/// webhook must.
pub fn convert(object: &Value, desired: &str) -> Result<Value, ConversionError> {
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    for (field, version) in [("apiVersion", from), ("desiredAPIVersion", desired)] {
        if version != V1ALPHA1 && version != V1BETA1 {
            return Err(ConversionError::UnsupportedVersion {
                field: field.to_string(),
                api_version: version.to_string(),
            });
        }
    }
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "EventSource" && kind != "EventTrigger" {
        return Err(ConversionError::UnsupportedKind {
            kind: kind.to_string(),
        });
    }
    let mut out = object.clone();
    if from == desired {
        return Ok(out);
    }
    let Some(root) = out.as_object_mut() else {
        return Err(invalid(".", "must be an object"));
    };
    root.insert("apiVersion".to_string(), json!(desired));
    let carried = take_carried(root)?;
    let mut spec = match root.remove("spec") {
        None => None,
        Some(Value::Object(spec)) => Some(spec),
        Some(_) => return Err(invalid("spec", "must be an object")),
    };
    let to_beta = desired == V1BETA1;
    let carry = match (kind, to_beta, spec.as_mut()) {
        (_, _, None) => Map::new(),
        ("EventSource", true, Some(spec)) => event_source_to_beta(spec, &carried)?,
        ("EventSource", false, Some(spec)) => event_source_to_alpha(spec, &carried)?,
        (_, true, Some(spec)) => event_trigger_to_beta(spec, &carried)?,
        (_, false, Some(spec)) => event_trigger_to_alpha(spec)?,
    };
    if let Some(spec) = spec {
        root.insert("spec".to_string(), Value::Object(spec));
    }
    put_carried(root, carry);
    Ok(out)
}

/// Answers a `ConversionReview` request: every object converted to `request.desiredAPIVersion`,
/// or a `Failure` result naming the first object that failed. Errors only when the review
/// itself is malformed (no `request.uid`).
pub fn review(request: &Value) -> Result<Value, ConversionError> {
    let req = request
        .get("request")
        .ok_or_else(|| invalid("request", "is required"))?;
    let uid = req
        .get("uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| invalid("request.uid", "is required"))?;
    let desired = req
        .get("desiredAPIVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let objects = req
        .get("objects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let converted: Result<Vec<Value>, String> = objects
        .iter()
        .map(|object| {
            convert(object, desired).map_err(|e| {
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                format!("failed to convert {name:?}: {e}")
            })
        })
        .collect();
    let response = match converted {
        Ok(objects) => json!({
            "uid": uid,
            "convertedObjects": objects,
            "result": {"status": "Success"},
        }),
        Err(message) => json!({
            "uid": uid,
            "convertedObjects": [],
            "result": {"status": "Failure", "message": message},
        }),
    };
    Ok(json!({
        "apiVersion": REVIEW_API_VERSION,
        "kind": "ConversionReview",
        "response": response,
    }))
}

fn invalid(field: &str, message: impl Into<String>) -> ConversionError {
    ConversionError::Invalid {
        field: field.to_string(),
        message: message.into(),
    }
}

fn annotation_path() -> String {
    format!("metadata.annotations[{CONVERSION_ANNOTATION}]")
}

/// Removes [`CONVERSION_ANNOTATION`] and returns what it carried (empty when absent). An
/// annotations map left empty is removed, so an object without carried data round-trips exactly.
fn take_carried(root: &mut Map<String, Value>) -> Result<Map<String, Value>, ConversionError> {
    let Some(annotations) = root
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    else {
        return Ok(Map::new());
    };
    let Some(text) = annotations.remove(CONVERSION_ANNOTATION) else {
        return Ok(Map::new());
    };
    if annotations.is_empty() {
        if let Some(meta) = root.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("annotations");
        }
    }
    match text.as_str().map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Object(map))) => Ok(map),
        _ => Err(invalid(&annotation_path(), "must be a JSON object")),
    }
}

fn put_carried(root: &mut Map<String, Value>, carried: Map<String, Value>) {
    if carried.is_empty() {
        return;
    }
    let meta = root
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(meta) = meta {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(
                CONVERSION_ANNOTATION.to_string(),
                json!(Value::Object(carried).to_string()),
            );
        }
    }
}

/// v1alpha1 → v1beta1. The flat form becomes one resource selector (`script` is its `evaluate`)
/// and the form is carried; fields carried from an earlier v1beta1 → v1alpha1 come back.
fn event_source_to_beta(
    spec: &mut Map<String, Value>,
    carried: &Map<String, Value>,
) -> Result<Map<String, Value>, ConversionError> {
    let mut carry = Map::new();
    if is_flat_spec(spec) {
        let mut selector = Map::new();
        selector.insert(
            "group".to_string(),
            spec.remove("group").unwrap_or_else(|| json!("")),
        );
        for key in ["version", "kind", "namespace"] {
            if let Some(v) = spec.remove(key) {
                selector.insert(key.to_string(), v);
            }
        }
        let mut filters = Vec::new();
        let mut spelling = None;
        for key in FLAT_LABEL_FILTER_KEYS {
            match spec.remove(key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(list)) => {
                    spelling.get_or_insert(key);
                    filters.extend(list);
                }
                Some(_) => return Err(invalid(&format!("spec.{key}"), "must be a list")),
            }
        }
        if let Some(key) = spelling {
            selector.insert("labelFilters".to_string(), Value::Array(filters));
            carry.insert("labelFiltersKey".to_string(), json!(key));
        }
        if let Some(script) = spec.remove("script") {
            selector.insert("evaluate".to_string(), script);
        }
        spec.insert(
            "resourceSelectors".to_string(),
            json!([Value::Object(selector)]),
        );
        carry.insert("v1alpha1Form".to_string(), json!("flat"));
    }
    if let Some(criteria) = carried.get("messagingMatchCriteria") {
        spec.entry("messagingMatchCriteria")
            .or_insert_with(|| criteria.clone());
    }
    let lost_selectors = carried.get("resourceSelectors").and_then(Value::as_array);
    let selectors = spec
        .get_mut("resourceSelectors")
        .and_then(Value::as_array_mut);
    if let (Some(lost), Some(selectors)) = (lost_selectors, selectors) {
        for (selector, lost) in selectors.iter_mut().zip(lost) {
            let (Some(selector), Some(lost)) = (selector.as_object_mut(), lost.as_object()) else {
                continue;
            };
            for (key, value) in lost {
                selector.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
    }
    Ok(carry)
}

/// v1beta1 → v1alpha1. `messagingMatchCriteria` and each selector's `selector` and
/// `evaluateCEL` are carried; a spec written flat goes back to the flat form while it still fits
/// it (one selector without a name).
fn event_source_to_alpha(
    spec: &mut Map<String, Value>,
    carried: &Map<String, Value>,
) -> Result<Map<String, Value>, ConversionError> {
    let mut carry = Map::new();
    if let Some(criteria) = spec.remove("messagingMatchCriteria") {
        if !criteria.is_null() {
            carry.insert("messagingMatchCriteria".to_string(), criteria);
        }
    }
    let mut lost_selectors = Vec::new();
    if let Some(selectors) = spec
        .get_mut("resourceSelectors")
        .and_then(Value::as_array_mut)
    {
        for selector in selectors.iter_mut() {
            let mut lost = Map::new();
            if let Some(selector) = selector.as_object_mut() {
                for key in ["selector", "evaluateCEL"] {
                    if let Some(v) = selector.remove(key).filter(|v| !v.is_null()) {
                        lost.insert(key.to_string(), v);
                    }
                }
            }
            lost_selectors.push(Value::Object(lost));
        }
    }
    if lost_selectors
        .iter()
        .any(|l| l.as_object().is_some_and(|l| !l.is_empty()))
    {
        carry.insert(
            "resourceSelectors".to_string(),
            Value::Array(lost_selectors),
        );
    }
    let written_flat = carried.get("v1alpha1Form").and_then(Value::as_str) == Some("flat");
    let one = match spec.get("resourceSelectors").and_then(Value::as_array) {
        Some(list) if list.len() == 1 => list[0].as_object().cloned(),
        _ => None,
    };
    let fits_flat = one.as_ref().is_some_and(|s| {
        s.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    });
    if let (true, true, Some(mut selector)) = (written_flat, fits_flat, one) {
        spec.remove("resourceSelectors");
        selector.remove("name");
        for key in ["group", "version", "kind", "namespace"] {
            if let Some(v) = selector.remove(key) {
                spec.insert(key.to_string(), v);
            }
        }
        if let Some(filters) = selector.remove("labelFilters") {
            let key = carried
                .get("labelFiltersKey")
                .and_then(Value::as_str)
                .filter(|k| FLAT_LABEL_FILTER_KEYS.contains(k))
                .unwrap_or("labelFilters");
            spec.insert(key.to_string(), filters);
        }
        if let Some(script) = selector.remove("evaluate") {
            spec.insert("script".to_string(), script);
        }
    }
    Ok(carry)
}

/// v1alpha1 → v1beta1: string selectors become LabelSelectors (`metav1.ParseToLabelSelector`;
/// an empty string is the empty selector, an absent or empty destination selector stays absent),
/// and fields carried from an earlier v1beta1 → v1alpha1 come back.
fn event_trigger_to_beta(
    spec: &mut Map<String, Value>,
    carried: &Map<String, Value>,
) -> Result<Map<String, Value>, ConversionError> {
    for key in ["sourceClusterSelector", "destinationClusterSelector"] {
        let Some(value) = spec.remove(key) else {
            continue;
        };
        let selector = match value {
            Value::Null => continue,
            Value::String(_) => {
                label_selector(&value, key).map_err(|e| ConversionError::Invalid {
                    field: format!("spec.{key}"),
                    message: match e {
                        crate::eventtrigger::EventTriggerError::Field { message, .. } => message,
                        other => other.to_string(),
                    },
                })?
            }
            _ => return Err(invalid(&format!("spec.{key}"), "must be a string")),
        };
        let empty = selector == LabelSelector::default();
        if key == "destinationClusterSelector" && empty {
            continue;
        }
        let value = serde_json::to_value(&selector).map_err(|e| invalid(key, e.to_string()))?;
        spec.insert(key.to_string(), value);
    }
    for key in TRIGGER_BETA_ONLY {
        if let Some(value) = carried.get(key) {
            spec.entry(key).or_insert_with(|| value.clone());
        }
    }
    Ok(Map::new())
}

/// v1beta1 → v1alpha1: LabelSelectors become strings (`LabelSelectorAsSelector().String()`;
/// an empty destination selector is dropped), and the fields v1alpha1 lacks are carried (a
/// `cloudEventAction` of `Create`, the default, is simply dropped).
fn event_trigger_to_alpha(
    spec: &mut Map<String, Value>,
) -> Result<Map<String, Value>, ConversionError> {
    for key in ["sourceClusterSelector", "destinationClusterSelector"] {
        let Some(value) = spec.remove(key) else {
            continue;
        };
        let field = format!("spec.{key}");
        let text = match value {
            Value::Null => continue,
            Value::Object(_) => {
                let structured: LabelSelector = serde_json::from_value(value)
                    .map_err(|e| invalid(&field, format!("not a label selector: {e}")))?;
                Selector::from_label_selector(&structured)
                    .map_err(|e| invalid(&field, e.to_string()))?
                    .to_string()
            }
            _ => return Err(invalid(&field, "must be a label selector object")),
        };
        if key == "destinationClusterSelector" && text.is_empty() {
            continue;
        }
        spec.insert(key.to_string(), json!(text));
    }
    let mut carry = Map::new();
    for key in TRIGGER_BETA_ONLY {
        let Some(value) = spec.remove(key) else {
            continue;
        };
        let default = key == "cloudEventAction" && value == json!("Create");
        if !value.is_null() && !default {
            carry.insert(key.to_string(), value);
        }
    }
    Ok(carry)
}

#[cfg(test)]
#[path = "conversion/tests.rs"]
mod tests;
