//! The EventSource API object (`lib.projectsveltos.io` v1beta1, v1alpha1 and the old flat v1alpha1
//! form) normalised into one shape. Parsing only: matching and evaluation live in `sluice-eval`.

use serde_json::{Map, Value};

use crate::pattern::Pattern;
use crate::selector::LabelSelector;

/// The API group every accepted EventSource belongs to.
pub const EVENT_SOURCE_GROUP: &str = "lib.projectsveltos.io";

/// An EventSource after parsing: its name and its normalised spec.
#[derive(Clone, Debug, PartialEq)]
pub struct EventSource {
    pub name: String,
    pub spec: EventSourceSpec,
}

/// `spec`, identical for every accepted API version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventSourceSpec {
    pub resource_selectors: Vec<ResourceSelector>,
    /// Lua source of `aggregatedSelection`; `None` when absent or empty.
    pub aggregated_selection: Option<String>,
    pub collect_resources: bool,
    pub messaging_match_criteria: Vec<MessagingMatchCriteria>,
}

/// One `resourceSelectors` entry: which objects of one group/version/kind are candidates, and how
/// each candidate is judged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceSelector {
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Empty means every namespace (or a cluster-scoped kind).
    pub namespace: String,
    /// Empty means any name.
    pub name: String,
    pub label_filters: Vec<LabelFilter>,
    pub selector: Option<LabelSelector>,
    /// Lua source defining `evaluate()`; `None` when absent or empty.
    pub evaluate: Option<String>,
    pub evaluate_cel: Vec<CelRule>,
}

/// One `labelFilters` entry; all entries of a selector must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelFilter {
    pub key: String,
    pub operation: LabelOperation,
    pub value: String,
}

/// The operations a label filter may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelOperation {
    Equal,
    Different,
    Has,
    DoesNotHave,
}

/// One `evaluateCEL` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CelRule {
    pub name: String,
    pub rule: String,
}

/// One `messagingMatchCriteria` entry; each field is an unanchored regular expression, compiled
/// when the EventSource is loaded; empty matches anything. `crate::cloudevent::matches` applies it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessagingMatchCriteria {
    /// Against the NATS subject the CloudEvent arrived on.
    pub subject: Pattern,
    pub cloud_event_source: Pattern,
    pub cloud_event_type: Pattern,
    pub cloud_event_subject: Pattern,
}

/// Why an object is not an EventSource we accept; `field` is the JSON path of the offending field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventSourceError {
    #[error("{field}: expected {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
    },
    #[error("{field}: required field is missing")]
    Missing { field: String },
    #[error("{field}: unknown label filter operation {operation:?} (expected Equal, Different, Has or DoesNotHave)")]
    UnknownOperation { field: String, operation: String },
    #[error("{field}: unsupported value {value:?}")]
    Unsupported { field: String, value: String },
    #[error("{field}: invalid regular expression {pattern:?}: {reason}")]
    InvalidRegex {
        field: String,
        pattern: String,
        reason: String,
    },
}

impl LabelOperation {
    /// The spelling used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            LabelOperation::Equal => "Equal",
            LabelOperation::Different => "Different",
            LabelOperation::Has => "Has",
            LabelOperation::DoesNotHave => "DoesNotHave",
        }
    }
}

/// Parses an EventSource object (JSON as the API server stores it) of any supported version.
///
/// The old flat v1alpha1 form (`group`/`version`/`kind`/`namespace`/`script` directly in `spec`)
/// becomes one resource selector; its label filter list may be spelled `labelFilters` or
/// `labelsFilters` (the latter is how the original documentation wrote it).
pub fn parse_event_source(obj: &Value) -> Result<EventSource, EventSourceError> {
    let root = as_object(obj, "")?;
    if let Some(api_version) = opt_str(root, "apiVersion", "apiVersion")? {
        let supported = [
            format!("{EVENT_SOURCE_GROUP}/v1beta1"),
            format!("{EVENT_SOURCE_GROUP}/v1alpha1"),
        ];
        if !supported.contains(&api_version) {
            return Err(EventSourceError::Unsupported {
                field: "apiVersion".into(),
                value: api_version,
            });
        }
    }
    if let Some(kind) = opt_str(root, "kind", "kind")? {
        if kind != "EventSource" {
            return Err(EventSourceError::Unsupported {
                field: "kind".into(),
                value: kind,
            });
        }
    }
    let metadata = root
        .get("metadata")
        .map(|m| as_object(m, "metadata"))
        .transpose()?;
    let name = metadata
        .map(|m| opt_str(m, "name", "metadata.name"))
        .transpose()?
        .flatten()
        .unwrap_or_default();
    let spec = match root.get("spec") {
        None | Some(Value::Null) => EventSourceSpec::default(),
        Some(spec) => parse_spec(as_object(spec, "spec")?)?,
    };
    Ok(EventSource { name, spec })
}

/// Whether a spec is the pre-2023-12 flat v1alpha1 form (`group`/`version`/`kind`/`script`
/// directly in `spec`) rather than a list of `resourceSelectors`.
pub fn is_flat_spec(spec: &Map<String, Value>) -> bool {
    !spec.contains_key("resourceSelectors") && spec.contains_key("kind")
}

/// The keys the flat v1alpha1 form accepts for its label filters, in the order they are read.
pub const FLAT_LABEL_FILTER_KEYS: [&str; 2] = ["labelFilters", "labelsFilters"];

fn parse_spec(spec: &Map<String, Value>) -> Result<EventSourceSpec, EventSourceError> {
    let flat = is_flat_spec(spec);
    let resource_selectors = if flat {
        vec![parse_selector(spec, "spec", true)?]
    } else {
        match spec.get("resourceSelectors") {
            None | Some(Value::Null) => Vec::new(),
            Some(list) => as_array(list, "spec.resourceSelectors")?
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let path = format!("spec.resourceSelectors[{i}]");
                    parse_selector(as_object(item, &path)?, &path, false)
                })
                .collect::<Result<_, _>>()?,
        }
    };
    let aggregated_selection =
        opt_str(spec, "aggregatedSelection", "spec.aggregatedSelection")?.filter(|s| !s.is_empty());
    let collect_resources = match spec.get("collectResources") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(wrong("spec.collectResources", "a boolean")),
    };
    let messaging_match_criteria = match spec.get("messagingMatchCriteria") {
        None | Some(Value::Null) => Vec::new(),
        Some(list) => as_array(list, "spec.messagingMatchCriteria")?
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let path = format!("spec.messagingMatchCriteria[{i}]");
                let m = as_object(item, &path)?;
                let field = |key: &str| -> Result<Pattern, EventSourceError> {
                    let field = format!("{path}.{key}");
                    let pattern = opt_str(m, key, &field)?.unwrap_or_default();
                    Pattern::new(&pattern).map_err(|error| EventSourceError::InvalidRegex {
                        field,
                        pattern,
                        reason: error.reason,
                    })
                };
                Ok(MessagingMatchCriteria {
                    subject: field("subject")?,
                    cloud_event_source: field("cloudEventSource")?,
                    cloud_event_type: field("cloudEventType")?,
                    cloud_event_subject: field("cloudEventSubject")?,
                })
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(EventSourceSpec {
        resource_selectors,
        aggregated_selection,
        collect_resources,
        messaging_match_criteria,
    })
}

/// Parses one selector; `flat` reads the pre-2023-12 v1alpha1 spec, whose Lua field is `script`.
fn parse_selector(
    m: &Map<String, Value>,
    path: &str,
    flat: bool,
) -> Result<ResourceSelector, EventSourceError> {
    let field = |key: &str| format!("{path}.{key}");
    let required = |key: &str| -> Result<String, EventSourceError> {
        opt_str(m, key, &field(key))?.ok_or_else(|| EventSourceError::Missing { field: field(key) })
    };
    let group = opt_str(m, "group", &field("group"))?.unwrap_or_default();
    let version = required("version")?;
    let kind = required("kind")?;
    if kind.is_empty() {
        return Err(wrong(&field("kind"), "a non-empty string"));
    }
    let namespace = opt_str(m, "namespace", &field("namespace"))?.unwrap_or_default();
    let name = opt_str(m, "name", &field("name"))?.unwrap_or_default();

    let mut label_filters = Vec::new();
    for key in FLAT_LABEL_FILTER_KEYS {
        let Some(list) = m.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        for (i, item) in as_array(list, &field(key))?.iter().enumerate() {
            label_filters.push(parse_label_filter(item, &format!("{path}.{key}[{i}]"))?);
        }
    }

    let selector = match m.get("selector") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(
            serde_json::from_value::<LabelSelector>(v.clone()).map_err(|_| {
                wrong(
                    &field("selector"),
                    "a label selector (matchLabels, matchExpressions)",
                )
            })?,
        ),
        Some(_) => return Err(wrong(&field("selector"), "an object")),
    };

    let lua_key = if flat { "script" } else { "evaluate" };
    let evaluate = opt_str(m, lua_key, &field(lua_key))?.filter(|s| !s.is_empty());

    let evaluate_cel = match m.get("evaluateCEL") {
        None | Some(Value::Null) => Vec::new(),
        Some(list) => as_array(list, &field("evaluateCEL"))?
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let p = format!("{path}.evaluateCEL[{i}]");
                let rule = as_object(item, &p)?;
                Ok(CelRule {
                    name: opt_str(rule, "name", &format!("{p}.name"))?.unwrap_or_default(),
                    rule: opt_str(rule, "rule", &format!("{p}.rule"))?.ok_or_else(|| {
                        EventSourceError::Missing {
                            field: format!("{p}.rule"),
                        }
                    })?,
                })
            })
            .collect::<Result<_, _>>()?,
    };

    Ok(ResourceSelector {
        group,
        version,
        kind,
        namespace,
        name,
        label_filters,
        selector,
        evaluate,
        evaluate_cel,
    })
}

fn parse_label_filter(item: &Value, path: &str) -> Result<LabelFilter, EventSourceError> {
    let m = as_object(item, path)?;
    let key =
        opt_str(m, "key", &format!("{path}.key"))?.ok_or_else(|| EventSourceError::Missing {
            field: format!("{path}.key"),
        })?;
    let op_path = format!("{path}.operation");
    let operation = match opt_str(m, "operation", &op_path)?.as_deref() {
        Some("Equal") => LabelOperation::Equal,
        Some("Different") => LabelOperation::Different,
        Some("Has") => LabelOperation::Has,
        Some("DoesNotHave") => LabelOperation::DoesNotHave,
        Some(other) => {
            return Err(EventSourceError::UnknownOperation {
                field: op_path,
                operation: other.to_string(),
            })
        }
        None => return Err(EventSourceError::Missing { field: op_path }),
    };
    let value = opt_str(m, "value", &format!("{path}.value"))?.unwrap_or_default();
    Ok(LabelFilter {
        key,
        operation,
        value,
    })
}

fn wrong(field: &str, expected: &'static str) -> EventSourceError {
    EventSourceError::WrongType {
        field: field.to_string(),
        expected,
    }
}

fn as_object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, EventSourceError> {
    v.as_object()
        .ok_or_else(|| wrong(if path.is_empty() { "." } else { path }, "an object"))
}

fn as_array<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>, EventSourceError> {
    v.as_array().ok_or_else(|| wrong(path, "a list"))
}

/// A string field; absent and `null` are `None`.
fn opt_str(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, EventSourceError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(wrong(path, "a string")),
    }
}

#[cfg(test)]
#[path = "eventsource/tests.rs"]
mod tests;
