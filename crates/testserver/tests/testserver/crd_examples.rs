//! Every Sveltos or CAPI object of `examples/` and of the seeds' examples
//! (`tests/fixtures/seed-objects.yaml`) fits the schema of its kind and version in `k8s/crds/`,
//! by `sluice_domain::crds::check` (what `sluice dry-run` asks): a structural walk that reports
//! unknown fields, wrong types, values outside an enum, lengths and bounds, bad formats and
//! missing required fields. It is a check of the schemas, not of the test server's own
//! validation.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sluice_domain::crds::{check, check_against, schema_of};

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
        if schema_of(api_version, kind).is_none() {
            problems.push(format!(
                "{file}: {api_version} {kind} {name}: no served CRD version"
            ));
            continue;
        }
        problems.extend(
            check(object)
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
    let object = serde_json::json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger", "metadata": {"name": "t"},
        "spec": {"sourceClusterSelector": {"matchLabels": {"env": "fv"}}, "syncMode": "Sometimes",
                 "oneForEvent": "yes", "tier": 0, "surprise": 1, "policyRefs": [{"name": "a", "kind": "Deployment"}]}});
    let mut found = check(&object);
    found.sort();
    assert_eq!(
        found,
        vec![
            "spec.eventSourceName: Required value",
            "spec.oneForEvent: Invalid value: \"string\": spec.oneForEvent in body must be of type boolean: \"string\"",
            "spec.policyRefs[0].kind: Unsupported value: \"Deployment\": supported values: \"GitRepository\", \"OCIRepository\", \"Bucket\", \"ConfigMap\", \"Secret\"",
            "spec.surprise: unknown field",
            "spec.syncMode: Unsupported value: \"Sometimes\": supported values: \"OneTime\", \"Continuous\", \"ContinuousWithDriftDetection\", \"DryRun\"",
            "spec.tier: Invalid value: 0: spec.tier in body should be greater than or equal to 1",
        ]
    );
    // The legacy string selector is not a v1beta1 selector, and v1alpha1 takes it.
    let legacy = serde_json::json!({
        "apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventTrigger", "metadata": {"name": "t"},
        "spec": {"sourceClusterSelector": "env=fv", "eventSourceName": "es"}});
    let beta =
        schema_of("lib.projectsveltos.io/v1beta1", "EventTrigger").expect("EventTrigger v1beta1");
    assert_eq!(
        check_against(beta, &legacy),
        vec!["spec.sourceClusterSelector: Invalid value: \"string\": spec.sourceClusterSelector in body must be of type object: \"string\""]
    );
    assert_eq!(check(&legacy), Vec::<String>::new());
}
