//! EventTrigger in every form users have: `lib.projectsveltos.io/v1beta1` and `v1alpha1`
//! EventTrigger, and the legacy `EventBasedAddOn`, normalised into one [`EventTrigger`].
//! Parsing only: what a trigger renders into lives in the renderer.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::cluster::{string_map, ClusterSelector};
use crate::selector::{LabelSelector, Selector};

/// Which API object a trigger was written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerKind {
    EventTrigger,
    /// The 2023 name of EventTrigger: it instantiates every referenced ConfigMap/Secret.
    EventBasedAddOn,
}

/// A `policyRefs` entry (and the shape of helm/kustomize `valuesFrom`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    /// `ConfigMap` or `Secret`.
    pub kind: String,
    /// Template; empty means the cluster's namespace.
    pub namespace: String,
    /// Template.
    pub name: String,
    /// Template.
    pub path: String,
    pub deployment_type: String,
    pub optional: bool,
}

/// A `configMapGenerator` / `secretGenerator` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratorRef {
    pub namespace: String,
    pub name: String,
    pub name_format: String,
    pub optional: bool,
}

/// A normalised EventTrigger.
#[derive(Clone, Debug, PartialEq)]
pub struct EventTrigger {
    pub name: String,
    pub kind: TriggerKind,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub source_cluster_selector: ClusterSelector,
    pub cluster_set_refs: Vec<String>,
    /// As it goes into the ClusterProfile `clusterSelector` (v1beta1 LabelSelector form).
    pub destination_cluster_selector: Option<LabelSelector>,
    /// `destinationCluster`, each field a template.
    pub destination_cluster: Option<Value>,
    pub one_for_event: bool,
    pub profile_name_format: Option<String>,
    /// Template over cluster data.
    pub event_source_name: String,
    /// Template; renders to `Create` or `Delete`.
    pub cloud_event_action: Option<String>,
    pub policy_refs: Vec<PolicyRef>,
    pub helm_charts: Vec<Value>,
    pub kustomization_refs: Vec<Value>,
    pub template_resource_refs: Vec<Value>,
    pub config_map_generator: Vec<GeneratorRef>,
    pub secret_generator: Vec<GeneratorRef>,
    /// Fields Sveltos copies verbatim into the ClusterProfile spec.
    pub copied_spec: Map<String, Value>,
    pub extra_labels: BTreeMap<String, String>,
    pub extra_annotations: BTreeMap<String, String>,
}

/// Why an EventTrigger could not be read; says which field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EventTriggerError {
    #[error("object is not an EventTrigger or EventBasedAddOn (kind {0:?})")]
    WrongKind(String),
    #[error("metadata.name is missing")]
    MissingName,
    #[error("spec.{field}: {message}")]
    Field { field: String, message: String },
}

/// Spec fields copied into the ClusterProfile unchanged (spec §2.1, "→CP").
const COPIED_FIELDS: [&str; 13] = [
    "syncMode",
    "tier",
    "continueOnConflict",
    "maxUpdate",
    "stopMatchingBehavior",
    "reloader",
    "dependsOn",
    "validateHealths",
    "preDeployChecks",
    "preDeleteChecks",
    "postDeleteChecks",
    "patches",
    "driftExclusions",
];

impl TriggerKind {
    /// The API kind.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::EventTrigger => "EventTrigger",
            TriggerKind::EventBasedAddOn => "EventBasedAddOn",
        }
    }
}

impl EventTrigger {
    /// Reads an EventTrigger or EventBasedAddOn object (any served version).
    pub fn from_object(object: &Value) -> Result<EventTrigger, EventTriggerError> {
        let kind = match object.get("kind").and_then(Value::as_str).unwrap_or("") {
            "EventTrigger" => TriggerKind::EventTrigger,
            "EventBasedAddOn" => TriggerKind::EventBasedAddOn,
            other => return Err(EventTriggerError::WrongKind(other.to_string())),
        };
        let metadata = object.get("metadata");
        let name = metadata
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .ok_or(EventTriggerError::MissingName)?
            .to_string();
        let empty = Value::Object(Map::new());
        let spec = object.get("spec").unwrap_or(&empty);
        let selector_value = spec
            .get("sourceClusterSelector")
            .or_else(|| spec.get("clusterSelector"));
        let source_cluster_selector = match selector_value {
            None | Some(Value::Null) => ClusterSelector::none(),
            Some(v) => ClusterSelector::new(parse_selector(v, "sourceClusterSelector")?),
        };
        let destination_cluster_selector = match spec.get("destinationClusterSelector") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let sel = label_selector(v, "destinationClusterSelector")?;
                (!(sel.match_labels.is_empty() && sel.match_expressions.is_empty())).then_some(sel)
            }
        };
        let mut copied_spec = Map::new();
        for field in COPIED_FIELDS {
            if let Some(v) = spec.get(field).filter(|v| !v.is_null()) {
                copied_spec.insert(field.to_string(), v.clone());
            }
        }
        Ok(EventTrigger {
            name,
            kind,
            labels: string_map(metadata.and_then(|m| m.get("labels"))),
            annotations: string_map(metadata.and_then(|m| m.get("annotations"))),
            source_cluster_selector,
            cluster_set_refs: string_list(spec.get("clusterSetRefs")),
            destination_cluster_selector,
            destination_cluster: spec
                .get("destinationCluster")
                .filter(|v| !v.is_null())
                .cloned(),
            one_for_event: spec
                .get("oneForEvent")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            profile_name_format: non_empty_str(spec.get("profileNameFormat")),
            event_source_name: non_empty_str(spec.get("eventSourceName")).ok_or_else(|| {
                EventTriggerError::Field {
                    field: "eventSourceName".to_string(),
                    message: "is required".to_string(),
                }
            })?,
            cloud_event_action: non_empty_str(spec.get("cloudEventAction")),
            policy_refs: array(spec.get("policyRefs"))
                .iter()
                .enumerate()
                .map(|(i, v)| policy_ref(v, &format!("policyRefs[{i}]")))
                .collect::<Result<_, _>>()?,
            helm_charts: array(spec.get("helmCharts")).to_vec(),
            kustomization_refs: array(spec.get("kustomizationRefs")).to_vec(),
            template_resource_refs: array(spec.get("templateResourceRefs")).to_vec(),
            config_map_generator: generators(spec.get("configMapGenerator"), "configMapGenerator")?,
            secret_generator: generators(spec.get("secretGenerator"), "secretGenerator")?,
            copied_spec,
            extra_labels: string_map(spec.get("extraLabels")),
            extra_annotations: string_map(spec.get("extraAnnotations")),
        })
    }

    /// Whether a referenced ConfigMap/Secret (`object`) is instantiated with event data:
    /// always for the legacy EventBasedAddOn (seed 000); otherwise with the instantiate
    /// annotation, or (ADR 0009) when it is marked as a deploy-time template
    /// (`projectsveltos.io/template`) yet reads event data, which only instantiation can
    /// provide (seed 003): addon-controller would fail on it.
    pub fn instantiates(&self, object: &Value) -> bool {
        let annotations = string_map(object.pointer("/metadata/annotations"));
        self.kind == TriggerKind::EventBasedAddOn
            || annotations.contains_key(INSTANTIATE_ANNOTATION)
            || (annotations.contains_key(TEMPLATE_ANNOTATION) && reads_event_data(object))
    }
}

/// The annotation that asks for a referenced ConfigMap/Secret to be rendered with event data.
pub const INSTANTIATE_ANNOTATION: &str = "projectsveltos.io/instantiate";
/// The annotation that marks a referenced object as a template addon-controller renders at
/// deploy time, with the cluster and `templateResourceRefs` but without event data.
pub const TEMPLATE_ANNOTATION: &str = "projectsveltos.io/template";

/// The event-data roots of the template data (spec §6.8).
const EVENT_FIELDS: [&str; 6] = [
    "Resource",
    "Resources",
    "MatchingResource",
    "MatchingResources",
    "CloudEvent",
    "CloudEvents",
];

/// Whether any data value of a ConfigMap/Secret has a template action that reads event data
/// (`.Resource`, `$.Resources`, ...). Secret values are base64-decoded first.
pub fn reads_event_data(object: &Value) -> bool {
    let is_secret = object.get("kind").and_then(Value::as_str) == Some("Secret");
    let Some(data) = object.get("data").and_then(Value::as_object) else {
        return false;
    };
    data.values().filter_map(Value::as_str).any(|text| {
        if is_secret {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .is_some_and(|t| actions_read_event_data(&t))
        } else {
            actions_read_event_data(text)
        }
    })
}

fn actions_read_event_data(text: &str) -> bool {
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after.find("}}").unwrap_or(after.len());
        let action = &after[..end];
        let reads = action.match_indices('.').any(|(i, _)| {
            let field = &action[i + 1..];
            let name_len = field
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(field.len());
            let before = action[..i].chars().next_back();
            EVENT_FIELDS.contains(&&field[..name_len])
                && before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ')'))
        });
        if reads {
            return true;
        }
        rest = &after[end..];
    }
    false
}

/// A selector written as a string (`env=fv`, v1alpha1) or as a LabelSelector (v1beta1).
fn parse_selector(value: &Value, field: &str) -> Result<Selector, EventTriggerError> {
    let err = |message: String| EventTriggerError::Field {
        field: field.to_string(),
        message,
    };
    match value {
        Value::String(text) => Selector::parse(text).map_err(|e| err(e.to_string())),
        Value::Object(_) => {
            let sel = label_selector(value, field)?;
            Selector::from_label_selector(&sel).map_err(|e| err(e.to_string()))
        }
        _ => Err(err("must be a string or a label selector".to_string())),
    }
}

/// A selector field as a LabelSelector: a v1alpha1 string is parsed and converted, a v1beta1
/// object is read as it is.
pub(crate) fn label_selector(
    value: &Value,
    field: &str,
) -> Result<LabelSelector, EventTriggerError> {
    let err = |message: String| EventTriggerError::Field {
        field: field.to_string(),
        message,
    };
    match value {
        Value::String(text) => {
            // A v1alpha1 string selector converts to matchLabels/matchExpressions the way
            // metav1.ParseToLabelSelector does; equality terms become matchLabels.
            let sel = Selector::parse(text).map_err(|e| err(e.to_string()))?;
            Ok(to_label_selector(&sel))
        }
        Value::Object(_) => serde_json::from_value(value.clone()).map_err(|e| err(e.to_string())),
        _ => Err(err("must be a string or a label selector".to_string())),
    }
}

/// The structured form of a parsed string selector, as metav1.ParseToLabelSelector builds it.
/// `!=` has no LabelSelector form; it becomes `NotIn` with one value, which selects the same.
fn to_label_selector(sel: &Selector) -> LabelSelector {
    use crate::selector::{LabelSelectorRequirement, Requirement};
    let mut out = LabelSelector::default();
    let expr = |key: &str, operator: &str, values: Vec<String>| LabelSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values,
    };
    for requirement in sel.requirements() {
        match requirement {
            Requirement::Equals { key, value } => {
                out.match_labels.insert(key.clone(), value.clone());
            }
            Requirement::NotEquals { key, value } => {
                out.match_expressions
                    .push(expr(key, "NotIn", vec![value.clone()]));
            }
            Requirement::In { key, values } => {
                out.match_expressions
                    .push(expr(key, "In", values.iter().cloned().collect()));
            }
            Requirement::NotIn { key, values } => {
                out.match_expressions
                    .push(expr(key, "NotIn", values.iter().cloned().collect()));
            }
            Requirement::Exists { key } => {
                out.match_expressions.push(expr(key, "Exists", Vec::new()))
            }
            Requirement::DoesNotExist { key } => {
                out.match_expressions
                    .push(expr(key, "DoesNotExist", Vec::new()))
            }
        }
    }
    out
}

fn policy_ref(value: &Value, field: &str) -> Result<PolicyRef, EventTriggerError> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind != "ConfigMap" && kind != "Secret" {
        return Err(EventTriggerError::Field {
            field: format!("{field}.kind"),
            message: format!("source kind {kind:?} not supported (ConfigMap or Secret)"),
        });
    }
    Ok(PolicyRef {
        kind,
        namespace: str_field(value, "namespace"),
        name: str_field(value, "name"),
        path: str_field(value, "path"),
        deployment_type: non_empty_str(value.get("deploymentType"))
            .unwrap_or_else(|| "Remote".to_string()),
        optional: value
            .get("optional")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

fn generators(value: Option<&Value>, field: &str) -> Result<Vec<GeneratorRef>, EventTriggerError> {
    array(value)
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let name_format = str_field(v, "nameFormat");
            if name_format.is_empty() {
                return Err(EventTriggerError::Field {
                    field: format!("{field}[{i}].nameFormat"),
                    message: "is required".to_string(),
                });
            }
            Ok(GeneratorRef {
                namespace: str_field(v, "namespace"),
                name: str_field(v, "name"),
                name_format,
                optional: v.get("optional").and_then(Value::as_bool).unwrap_or(false),
            })
        })
        .collect()
}

fn array(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    array(value)
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn str_field(value: &Value, field: &str) -> String {
    value
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn non_empty_str(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn legacy_event_based_addon_reads_string_cluster_selector() {
        let t = EventTrigger::from_object(&json!({
            "apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventBasedAddOn",
            "metadata": {"name": "service-network-policy"},
            "spec": {"clusterSelector": "env=fv", "eventSourceName": "sveltos-service",
                     "oneForEvent": true,
                     "policyRefs": [{"name": "network-policy", "namespace": "default", "kind": "ConfigMap"}]}
        }))
        .expect("trigger");
        assert_eq!(t.kind, TriggerKind::EventBasedAddOn);
        assert!(t.one_for_event);
        assert!(t.source_cluster_selector.matches(&labels(&[("env", "fv")])));
        assert!(!t
            .source_cluster_selector
            .matches(&labels(&[("env", "prod")])));
        assert_eq!(t.policy_refs[0].deployment_type, "Remote");
        assert!(t.instantiates(&json!({})));
    }

    #[test]
    fn v1beta1_trigger_reads_label_selector_and_copied_fields() {
        let t = EventTrigger::from_object(&json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": "create-namespace"},
            "spec": {"sourceClusterSelector": {"matchLabels": {"env": "production"}},
                     "eventSourceName": "user-operation", "syncMode": "ContinuousWithDriftDetection",
                     "cloudEventAction": "Create", "tier": 50}
        }))
        .expect("trigger");
        assert!(t
            .source_cluster_selector
            .matches(&labels(&[("env", "production")])));
        assert_eq!(
            t.copied_spec.get("syncMode"),
            Some(&json!("ContinuousWithDriftDetection"))
        );
        assert_eq!(t.copied_spec.get("tier"), Some(&json!(50)));
        assert!(!t.instantiates(&json!({})));
        assert!(
            t.instantiates(&json!({"metadata": {"annotations": {INSTANTIATE_ANNOTATION: "ok"}}}))
        );
    }

    #[test]
    fn instantiation_follows_the_form_the_annotations_and_event_data() {
        let parse = |kind: &str| {
            EventTrigger::from_object(&json!({
                "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": kind,
                "metadata": {"name": "t"}, "spec": {"eventSourceName": "es"}
            }))
            .expect("valid trigger")
        };
        let config_map = |annotations: Value, text: &str| {
            json!({"kind": "ConfigMap", "metadata": {"annotations": annotations},
                   "data": {"a.yaml": "plain", "b.yaml": text}})
        };
        let trigger = parse("EventTrigger");
        let legacy = parse("EventBasedAddOn");
        let event_text = "name: external-{{ .Resource.metadata.name }}";
        assert!(legacy.instantiates(&config_map(json!({}), "x")));
        assert!(!trigger.instantiates(&config_map(json!({}), event_text)));
        assert!(trigger.instantiates(&config_map(json!({INSTANTIATE_ANNOTATION: "ok"}), "x")));
        // Deploy-time templates stay with addon-controller unless they read event data.
        let template = json!({TEMPLATE_ANNOTATION: "ok"});
        assert!(trigger.instantiates(&config_map(template.clone(), event_text)));
        assert!(!trigger.instantiates(&config_map(
            template.clone(),
            "{{ .Cluster.metadata.name }} {{ (getResource \"Resource\").x }} {{ .Res }}"
        )));
        let secret = json!({"kind": "Secret", "metadata": {"annotations": template},
            "data": {"k": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "{{ $.MatchingResources }}")}});
        assert!(trigger.instantiates(&secret));
    }

    #[test]
    fn v1alpha1_destination_selector_string_becomes_match_labels() {
        let t = EventTrigger::from_object(&json!({
            "kind": "EventTrigger", "metadata": {"name": "service-policy"},
            "spec": {"sourceClusterSelector": "env=production",
                     "destinationClusterSelector": "dep=eng",
                     "eventSourceName": "load-balancer-service"}
        }))
        .expect("trigger");
        let dest = t.destination_cluster_selector.expect("destination");
        assert_eq!(
            dest.match_labels.get("dep").map(String::as_str),
            Some("eng")
        );
    }

    #[test]
    fn missing_selector_matches_nothing_and_bad_fields_say_where() {
        let t = EventTrigger::from_object(&json!({
            "kind": "EventTrigger", "metadata": {"name": "t"},
            "spec": {"eventSourceName": "es"}
        }))
        .expect("trigger");
        assert!(!t.source_cluster_selector.matches(&labels(&[("env", "fv")])));
        let err = EventTrigger::from_object(&json!({
            "kind": "EventTrigger", "metadata": {"name": "t"},
            "spec": {"eventSourceName": "es", "policyRefs": [{"kind": "Flux", "name": "x"}]}
        }))
        .expect_err("bad kind");
        assert!(err.to_string().contains("policyRefs[0].kind"), "{err}");
        let err = EventTrigger::from_object(&json!({
            "kind": "EventTrigger", "metadata": {"name": "t"},
            "spec": {"eventSourceName": "es", "sourceClusterSelector": "env in (a"}
        }))
        .expect_err("bad selector");
        assert!(err.to_string().contains("sourceClusterSelector"), "{err}");
    }
}
