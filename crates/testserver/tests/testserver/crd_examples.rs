//! Every Sveltos or CAPI object of `examples/` and of the seeds' examples
//! (`tests/fixtures/seed-objects.yaml`) fits the schema of its kind and version in `k8s/crds/`:
//! a structural walk that reports unknown fields, wrong types, values outside an enum, strings
//! shorter than minLength, numbers below minimum, bad formats and missing required fields. It is a
//! check of the schemas, not of the test server's own validation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

use super::crd_facts::load_crds;

/// The schema of `apiVersion`/`kind`, if a CRD of `k8s/crds/` serves it.
fn schema_for<'a>(
    crds: &'a BTreeMap<String, Value>,
    api_version: &str,
    kind: &str,
) -> Option<&'a Value> {
    let (group, version) = api_version.split_once('/')?;
    crds.values()
        .filter(|c| c["spec"]["group"] == group && c["spec"]["names"]["kind"] == kind)
        .flat_map(|c| c["spec"]["versions"].as_array().into_iter().flatten())
        .find(|v| v["name"] == version && v["served"] == true)
        .map(|v| &v["schema"]["openAPIV3Schema"])
}

/// Problems of `value` against `schema`, each with its field path.
pub fn check(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let here = if path.is_empty() { "<root>" } else { path };
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            out.push(format!(
                "{here}: must be an integer or a string, got {value}"
            ));
        }
        return;
    }
    let type_ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        out.push(format!(
            "{here}: must be of type {}, got {value}",
            schema["type"]
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            out.push(format!("{here}: {value} is not one of {}", schema["enum"]));
        }
    }
    if let (Some(min), Some(s)) = (schema["minLength"].as_u64(), value.as_str()) {
        if (s.chars().count() as u64) < min {
            out.push(format!("{here}: shorter than {min}"));
        }
    }
    if let (Some(max), Some(s)) = (schema["maxLength"].as_u64(), value.as_str()) {
        if (s.chars().count() as u64) > max {
            out.push(format!("{here}: longer than {max}"));
        }
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64()) {
        if n < min {
            out.push(format!("{here}: {n} is below the minimum {min}"));
        }
    }
    if let Some(s) = value.as_str() {
        match schema["format"].as_str() {
            Some("byte") if base64::engine::general_purpose::STANDARD.decode(s).is_err() => {
                out.push(format!("{here}: not base64"))
            }
            Some("date-time")
                if time::OffsetDateTime::parse(
                    s,
                    &time::format_description::well_known::Rfc3339,
                )
                .is_err() =>
            {
                out.push(format!("{here}: not an RFC 3339 date-time"))
            }
            _ => {}
        }
    }
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    if let Some(object) = value.as_object() {
        let properties = schema["properties"].as_object();
        for (key, child) in object {
            let child_path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match (
                properties.and_then(|p| p.get(key)),
                schema["additionalProperties"].is_object(),
            ) {
                (Some(s), _) => check(s, child, &child_path, out),
                (None, true) => check(&schema["additionalProperties"], child, &child_path, out),
                // The root's metadata is ObjectMeta, which the API server checks itself.
                (None, false) if path == "metadata" || preserve => {}
                (None, false) => out.push(format!("{child_path}: unknown field")),
            }
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if !object.contains_key(name) {
                let p = if path.is_empty() {
                    name.to_string()
                } else {
                    format!("{path}.{name}")
                };
                out.push(format!("{p}: required"));
            }
        }
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            check(&schema["items"], item, &format!("{path}[{i}]"), out);
        }
    }
}

/// Every document of the YAML files under `dir`, with the file it came from.
fn documents(files: &[PathBuf]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("example is readable");
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
            if !value.is_null() {
                out.push((file.display().to_string(), value));
            }
        }
    }
    out
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("directory is readable")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            yaml_files(&entry, out);
        } else if entry.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(entry);
        }
    }
}

/// Checks each document of a Sveltos or CAPI group; returns how many were checked and the problems.
fn check_all(documents: &[(String, Value)]) -> (usize, Vec<String>) {
    let crds = load_crds();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (file, object) in documents {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let ours = api_version.contains("projectsveltos.io")
            || api_version.starts_with("cluster.x-k8s.io/");
        if !ours {
            continue;
        }
        let name = object["metadata"]["name"].as_str().unwrap_or("?");
        let Some(schema) = schema_for(&crds, api_version, kind) else {
            problems.push(format!(
                "{file}: {api_version} {kind} {name}: no served CRD version"
            ));
            continue;
        };
        let mut found = Vec::new();
        check(schema, object, "", &mut found);
        problems.extend(
            found
                .into_iter()
                .map(|p| format!("{file}: {kind} {name} ({api_version}): {p}")),
        );
        checked += 1;
    }
    (checked, problems)
}

#[test]
fn every_example_object_fits_its_crd_schema() {
    let mut files = Vec::new();
    yaml_files(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples"),
        &mut files,
    );
    let (checked, problems) = check_all(&documents(&files));
    assert!(
        problems.is_empty(),
        "examples that do not fit k8s/crds:\n  {}",
        problems.join("\n  ")
    );
    // examples/ holds EventSources, EventTriggers and EventBasedAddOns of both versions.
    assert!(checked >= 10, "only {checked} example objects were checked");
}

#[test]
fn every_seed_example_object_fits_its_crd_schema() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed-objects.yaml");
    let (checked, problems) = check_all(&documents(&[file]));
    assert!(
        problems.is_empty(),
        "seed examples that do not fit k8s/crds:\n  {}",
        problems.join("\n  ")
    );
    assert_eq!(checked, 9, "the fixture holds nine Sveltos objects");
}

/// The walk rejects what a real API server would: the check is not vacuous.
#[test]
fn the_structural_check_rejects_unknown_fields_types_enums_and_missing_required() {
    let crds = load_crds();
    let schema = schema_for(&crds, "lib.projectsveltos.io/v1beta1", "EventTrigger")
        .expect("EventTrigger v1beta1");
    let object = serde_json::json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger", "metadata": {"name": "t"},
        "spec": {"sourceClusterSelector": {"matchLabels": {"env": "fv"}}, "syncMode": "Sometimes",
                 "oneForEvent": "yes", "tier": 0, "surprise": 1, "policyRefs": [{"name": "a", "kind": "Deployment"}]}});
    let mut found = Vec::new();
    check(schema, &object, "", &mut found);
    found.sort();
    assert_eq!(
        found,
        vec![
            "spec.eventSourceName: required",
            "spec.oneForEvent: must be of type \"boolean\", got \"yes\"",
            "spec.policyRefs[0].kind: \"Deployment\" is not one of [\"GitRepository\",\"OCIRepository\",\"Bucket\",\"ConfigMap\",\"Secret\"]",
            "spec.surprise: unknown field",
            "spec.syncMode: \"Sometimes\" is not one of [\"OneTime\",\"Continuous\",\"ContinuousWithDriftDetection\",\"DryRun\"]",
            "spec.tier: 0 is below the minimum 1",
        ]
    );
    // The legacy string selector is not a v1beta1 selector, and v1alpha1 takes it.
    let legacy = serde_json::json!({
        "apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventTrigger", "metadata": {"name": "t"},
        "spec": {"sourceClusterSelector": "env=fv", "eventSourceName": "es"}});
    let mut found = Vec::new();
    check(schema, &legacy, "", &mut found);
    assert_eq!(
        found,
        vec!["spec.sourceClusterSelector: must be of type \"object\", got \"env=fv\""]
    );
    let alpha = schema_for(&crds, "lib.projectsveltos.io/v1alpha1", "EventTrigger")
        .expect("EventTrigger v1alpha1");
    let mut found = Vec::new();
    check(alpha, &legacy, "", &mut found);
    assert_eq!(found, Vec::<String>::new());
}
