//! Which objects a resource selector lists, before any script runs: group/version/kind,
//! namespace, name, `labelFilters` and `selector`, and never an object being deleted. This is what
//! the agent's LIST (label and field selectors) does; no Lua or CEL here.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_domain::eventsource::{LabelFilter, LabelOperation, ResourceSelector};
use sluice_domain::selector::{Selector, SelectorError};

/// The listing part of one resource selector, validated.
pub(crate) struct Filter {
    group: String,
    version: String,
    kind: String,
    namespace: String,
    name: String,
    label_filters: Vec<LabelFilter>,
    selector: Option<Selector>,
}

impl Filter {
    pub(crate) fn new(rs: &ResourceSelector) -> Result<Filter, SelectorError> {
        let selector = rs
            .selector
            .as_ref()
            .map(Selector::from_label_selector)
            .transpose()?;
        Ok(Filter {
            group: rs.group.clone(),
            version: rs.version.clone(),
            kind: rs.kind.clone(),
            namespace: rs.namespace.clone(),
            name: rs.name.clone(),
            label_filters: rs.label_filters.clone(),
            selector,
        })
    }

    pub(crate) fn gvk(&self) -> (&str, &str, &str) {
        (&self.group, &self.version, &self.kind)
    }

    /// Whether this selector lists the object.
    pub(crate) fn lists(&self, object: &Value) -> bool {
        let metadata = field(Some(object), "metadata");
        let meta_str = |key: &str| field(metadata, key).and_then(Value::as_str);
        if meta_str("deletionTimestamp").is_some_and(|ts| !ts.is_empty()) {
            return false;
        }
        if field(Some(object), "kind").and_then(Value::as_str) != Some(self.kind.as_str()) {
            return false;
        }
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        if group != self.group || version != self.version {
            return false;
        }
        if !self.namespace.is_empty() && meta_str("namespace").unwrap_or("") != self.namespace {
            return false;
        }
        if !self.name.is_empty() && meta_str("name").unwrap_or("") != self.name {
            return false;
        }
        if self.label_filters.is_empty() && self.selector.is_none() {
            return true;
        }
        let labels = object_labels(metadata);
        let filters_hold = self.label_filters.iter().all(|f| {
            let got = labels.get(&f.key);
            match f.operation {
                LabelOperation::Equal => got == Some(&f.value),
                LabelOperation::Different => got != Some(&f.value),
                LabelOperation::Has => got.is_some(),
                LabelOperation::DoesNotHave => got.is_none(),
            }
        });
        filters_hold && self.selector.as_ref().is_none_or(|s| s.matches(&labels))
    }
}

/// A key of a JSON object. Kubernetes objects are mostly small maps, where comparing keys in
/// order beats hashing the key with SipHash.
pub(crate) fn get<'a>(map: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() <= 12 {
        map.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

/// A key of a JSON value that may be an object.
fn field<'a>(v: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    match v {
        Some(Value::Object(m)) => get(m, key),
        _ => None,
    }
}

/// `metadata.labels` as a string map; a label set holding a non-string value is treated as empty,
/// as the agent's unstructured accessor does.
fn object_labels(metadata: Option<&Value>) -> BTreeMap<String, String> {
    let Some(Value::Object(raw)) = field(metadata, "labels") else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for (k, v) in raw {
        match v.as_str() {
            Some(s) => {
                out.insert(k.clone(), s.to_string());
            }
            None => return BTreeMap::new(),
        }
    }
    out
}
