//! Which objects a resource selector lists, before any script runs: group/version/kind,
//! namespace, name, `labelFilters` and `selector`, and never an object being deleted. This is what
//! the agent's LIST (label and field selectors) does; no Lua or CEL here.

use std::collections::BTreeMap;

use sluice_domain::eventsource::{LabelFilter, LabelOperation, ResourceSelector};
use sluice_domain::selector::{Selector, SelectorError};

use crate::tape::{Kind, NodeRef};

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
    pub(crate) fn lists(&self, object: NodeRef<'_>) -> bool {
        let metadata = object.get("metadata");
        let meta = |key: &str| metadata.and_then(|m| m.get(key));
        if meta("deletionTimestamp").is_some_and(|ts| ts.kind() == Kind::String && !ts.str_eq("")) {
            return false;
        }
        if !object.get("kind").is_some_and(|k| k.str_eq(&self.kind)) {
            return false;
        }
        let api_version = object.get("apiVersion").and_then(|v| v.as_str());
        let api_version = api_version.as_deref().unwrap_or("");
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        if group != self.group || version != self.version {
            return false;
        }
        let text_is = |key: &str, want: &str| match meta(key) {
            Some(v) if v.kind() == Kind::String => v.str_eq(want),
            _ => want.is_empty(),
        };
        if !self.namespace.is_empty() && !text_is("namespace", &self.namespace) {
            return false;
        }
        if !self.name.is_empty() && !text_is("name", &self.name) {
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

/// `metadata.labels` as a string map; a label set holding a non-string value is treated as empty,
/// as the agent's unstructured accessor does.
fn object_labels(metadata: Option<NodeRef<'_>>) -> BTreeMap<String, String> {
    let Some(raw) = metadata.and_then(|m| m.get("labels")) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for (k, v) in raw.sorted_entries() {
        match (k.as_str(), v.as_str()) {
            (Some(k), Some(v)) => {
                out.insert(k.into_owned(), v.into_owned());
            }
            _ => return BTreeMap::new(),
        }
    }
    out
}
