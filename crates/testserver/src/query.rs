//! Read filters and paging: label and field selectors applied to stored objects, and the opaque
//! `continue` token of paginated lists.

use base64::Engine;
use serde_json::Value;
use sluice_domain::selector::Selector;

use crate::cluster::ObjectKey;
use crate::error::ApiError;
use crate::object::meta_str;
use crate::resources::ResourceInfo;

/// Which objects a list or watch returns.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: Selector,
    /// `(field, equal, value)`: `equal` is false for `!=`; the fields are those the kind's
    /// registry lets clients select by (`selectable`).
    pub fields: Vec<(String, bool, String)>,
}

impl Filter {
    /// Builds a filter from the `labelSelector` and `fieldSelector` query parameters of a list or
    /// watch of `info`'s kind.
    pub fn new(
        info: &ResourceInfo,
        namespace: Option<String>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Filter, ApiError> {
        let labels = Selector::parse(label_selector.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
        let mut fields = Vec::new();
        for part in field_selector
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid fieldSelector {part:?}: expected field=value or field!=value"
                )));
            };
            let field = field.trim();
            let selectable = selectable(info);
            if !selectable.contains(&field) {
                return Err(ApiError::bad_request(if info.crd.is_some() {
                    format!("{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
                } else {
                    format!("field label not supported: {field}")
                }));
            }
            fields.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Filter {
            namespace,
            labels,
            fields,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace {
            if meta_str(obj, "namespace") != ns {
                return false;
            }
        }
        let fields_ok = self
            .fields
            .iter()
            .all(|(field, equal, value)| (field_value(obj, field) == *value) == *equal);
        if !fields_ok || self.labels.is_empty() {
            return fields_ok;
        }
        // Read in place: one LIST matches every object of the kind.
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        self.labels
            .matches_with(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str))
    }
}

/// The fields a list or watch of `info`'s kind may select by: `metadata.name` and
/// `metadata.namespace` of every kind, and those each built-in kind's registry adds.
fn selectable(info: &ResourceInfo) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name", "metadata.namespace"];
    if info.crd.is_some() {
        return fields;
    }
    fields.extend_from_slice(match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ][..],
        ("", "Secret") => &["type"][..],
        ("", "Namespace") => &["status.phase"][..],
        ("", "Node") => &["spec.unschedulable"][..],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ][..],
        ("apps", "ReplicaSet") => &["status.replicas"][..],
        ("batch", "Job") => &["status.successful"][..],
        _ => &[][..],
    });
    fields
}

/// The value at a dotted field path as a string; missing fields read as "".
fn field_value(obj: &Value, field: &str) -> String {
    match field.split('.').try_fold(obj, |v, seg| v.get(seg)) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Position of a paginated list: the snapshot's resourceVersion and the last key returned.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContinueToken {
    pub rv: u64,
    pub namespace: String,
    pub name: String,
}

impl ContinueToken {
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    pub fn decode(token: &str) -> Result<ContinueToken, ApiError> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| ApiError::bad_request("invalid continue token: not base64"))?;
        serde_json::from_slice(&bytes).map_err(|_| ApiError::bad_request("invalid continue token"))
    }

    pub fn key(&self) -> ObjectKey {
        (self.namespace.clone(), self.name.clone())
    }
}
