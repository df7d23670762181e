//! Tests of the v1alpha1 ⇄ v1beta1 conversion: every seed and example object round-trips and
//! reads the same through the domain parsers in both versions; hand-written cases pin the shapes.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;
use crate::eventsource::parse_event_source;
use crate::eventtrigger::EventTrigger;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every EventSource and EventTrigger of `examples/*/` and of the seeds' objects.
fn seed_and_example_objects() -> Vec<(String, Value)> {
    let root = repo_root();
    let mut files = vec![root.join("crates/testserver/tests/fixtures/seed-objects.yaml")];
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("examples"))
        .expect("examples/ is readable")
        .map(|e| e.expect("directory entry").path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let mut yamls: Vec<_> = std::fs::read_dir(&dir)
            .expect("example dir is readable")
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        yamls.sort();
        files.extend(yamls);
    }
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("fixture is readable");
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let value: Value =
                serde::Deserialize::deserialize(doc).expect("fixture document is YAML");
            let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
            if kind == "EventSource" || kind == "EventTrigger" {
                out.push((format!("{} doc {i}", file.display()), value));
            }
        }
    }
    out
}

fn other_version(object: &Value) -> &'static str {
    if object["apiVersion"] == V1ALPHA1 {
        V1BETA1
    } else {
        V1ALPHA1
    }
}

/// The normalised form, without annotations (the conversion annotation may differ).
fn normalised(object: &Value) -> String {
    if object["kind"] == "EventSource" {
        format!("{:?}", parse_event_source(object).expect("parses"))
    } else {
        let mut trigger = EventTrigger::from_object(object).expect("parses");
        trigger.annotations.clear();
        format!("{trigger:?}")
    }
}

#[test]
fn every_seed_and_example_object_round_trips_and_reads_the_same() {
    let objects = seed_and_example_objects();
    assert!(
        objects.len() >= 10,
        "expected the seeds' and examples' objects, found {}",
        objects.len()
    );
    let mut alpha = 0;
    for (name, object) in objects {
        let there = convert(&object, other_version(&object))
            .unwrap_or_else(|e| panic!("{name}: to {}: {e}", other_version(&object)));
        assert_eq!(there["apiVersion"], other_version(&object), "{name}");
        let back = convert(&there, object["apiVersion"].as_str().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{name}: back: {e}"));
        assert_eq!(back, object, "{name}: round trip");
        if object["apiVersion"] == V1ALPHA1 {
            // v1beta1 expresses everything v1alpha1 does (the reverse is carried, not read).
            assert_eq!(normalised(&there), normalised(&object), "{name}: meaning");
            alpha += 1;
            assert!(
                there.pointer("/spec/resourceSelectors").is_some()
                    || there
                        .pointer("/spec/sourceClusterSelector")
                        .is_some_and(Value::is_object),
                "{name}: v1beta1 shape: {there}"
            );
        }
    }
    assert!(alpha >= 5, "the seeds have v1alpha1 objects");
}

fn check(input: Value, desired: &str, expected: Value) {
    let got = convert(&input, desired).unwrap_or_else(|e| panic!("{input}: {e}"));
    assert_eq!(got, expected, "converting {input}");
    let back = convert(&got, input["apiVersion"].as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("back from {got}: {e}"));
    assert_eq!(back, input, "round trip of {input}");
}

#[test]
fn conversions_give_each_version_its_shape() {
    let cases = [
        // The seed 000 flat EventSource: one selector, `labelsFilters` remembered.
        (
            json!({"apiVersion": V1ALPHA1, "kind": "EventSource", "metadata": {"name": "s"},
                   "spec": {"collectResources": true, "group": "", "version": "v1", "kind": "Service",
                            "labelsFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]}}),
            V1BETA1,
            json!({"apiVersion": V1BETA1, "kind": "EventSource",
                   "metadata": {"name": "s", "annotations": {CONVERSION_ANNOTATION: r#"{"labelFiltersKey":"labelsFilters","v1alpha1Form":"flat"}"#}},
                   "spec": {"collectResources": true, "resourceSelectors": [{"group": "", "version": "v1", "kind": "Service",
                            "labelFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]}]}}),
        ),
        // Flat with a script: `script` is `evaluate`; other annotations stay.
        (
            json!({"apiVersion": V1ALPHA1, "kind": "EventSource", "metadata": {"name": "s", "annotations": {"a": "b"}},
                   "spec": {"group": "", "version": "v1", "kind": "Service", "namespace": "x", "script": "function evaluate() end"}}),
            V1BETA1,
            json!({"apiVersion": V1BETA1, "kind": "EventSource",
                   "metadata": {"name": "s", "annotations": {"a": "b", CONVERSION_ANNOTATION: r#"{"v1alpha1Form":"flat"}"#}},
                   "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service", "namespace": "x",
                            "evaluate": "function evaluate() end"}]}}),
        ),
        // v1beta1 fields v1alpha1 lacks are carried in the annotation.
        (
            json!({"apiVersion": V1BETA1, "kind": "EventSource", "metadata": {"name": "s"},
                   "spec": {"messagingMatchCriteria": [{"subject": "a"}],
                            "resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod"},
                                                  {"group": "", "version": "v1", "kind": "Service", "evaluateCEL": [{"name": "r", "rule": "true"}],
                                                   "selector": {"matchLabels": {"a": "b"}}}]}}),
            V1ALPHA1,
            json!({"apiVersion": V1ALPHA1, "kind": "EventSource",
                   "metadata": {"name": "s", "annotations": {CONVERSION_ANNOTATION:
                       r#"{"messagingMatchCriteria":[{"subject":"a"}],"resourceSelectors":[{},{"evaluateCEL":[{"name":"r","rule":"true"}],"selector":{"matchLabels":{"a":"b"}}}]}"#}},
                   "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod"},
                                                  {"group": "", "version": "v1", "kind": "Service"}]}}),
        ),
        // String selectors (canonical: sorted by key) become LabelSelectors.
        (
            json!({"apiVersion": V1ALPHA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                   "spec": {"sourceClusterSelector": "env=fv,!gpu,zone in (a,b)", "destinationClusterSelector": "dep=eng",
                            "eventSourceName": "e", "oneForEvent": true}}),
            V1BETA1,
            json!({"apiVersion": V1BETA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                   "spec": {"sourceClusterSelector": {"matchLabels": {"env": "fv"}, "matchExpressions": [
                                {"key": "gpu", "operator": "DoesNotExist", "values": []},
                                {"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                            "destinationClusterSelector": {"matchLabels": {"dep": "eng"}},
                            "eventSourceName": "e", "oneForEvent": true}}),
        ),
        // An empty string selector is the empty LabelSelector; an empty destination is dropped.
        (
            json!({"apiVersion": V1ALPHA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                   "spec": {"sourceClusterSelector": "", "eventSourceName": "e"}}),
            V1BETA1,
            json!({"apiVersion": V1BETA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                   "spec": {"sourceClusterSelector": {}, "eventSourceName": "e"}}),
        ),
        // EventTrigger fields newer than v1alpha1 are carried; the default cloudEventAction is not.
        (
            json!({"apiVersion": V1BETA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                   "spec": {"sourceClusterSelector": {"matchLabels": {"env": "fv"}}, "eventSourceName": "e",
                            "profileNameFormat": "p-{{ .Cluster.metadata.name }}", "patches": [{"patch": "x"}],
                            "syncMode": "Continuous"},
                   "status": {"matchingClusters": [{"kind": "SveltosCluster", "name": "c", "namespace": "n"}]}}),
            V1ALPHA1,
            json!({"apiVersion": V1ALPHA1, "kind": "EventTrigger",
                   "metadata": {"name": "t", "annotations": {CONVERSION_ANNOTATION:
                       r#"{"patches":[{"patch":"x"}],"profileNameFormat":"p-{{ .Cluster.metadata.name }}"}"#}},
                   "spec": {"sourceClusterSelector": "env=fv", "eventSourceName": "e", "syncMode": "Continuous"},
                   "status": {"matchingClusters": [{"kind": "SveltosCluster", "name": "c", "namespace": "n"}]}}),
        ),
    ];
    for (input, desired, expected) in cases {
        check(input, desired, expected);
    }
}

#[test]
fn a_flat_object_edited_in_v1beta1_beyond_the_flat_form_reads_as_resource_selectors() {
    let beta = json!({"apiVersion": V1BETA1, "kind": "EventSource",
        "metadata": {"name": "s", "annotations": {CONVERSION_ANNOTATION: r#"{"v1alpha1Form":"flat"}"#}},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod"}, {"group": "", "version": "v1", "kind": "Service"}]}});
    let alpha = convert(&beta, V1ALPHA1).expect("converts");
    assert_eq!(
        alpha,
        json!({"apiVersion": V1ALPHA1, "kind": "EventSource", "metadata": {"name": "s"},
               "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod"}, {"group": "", "version": "v1", "kind": "Service"}]}})
    );
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (
            json!({"apiVersion": V1ALPHA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                   "spec": {"sourceClusterSelector": "env in (", "eventSourceName": "e"}}),
            V1BETA1,
            "spec.sourceClusterSelector: invalid label selector",
        ),
        (
            json!({"apiVersion": V1BETA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                   "spec": {"sourceClusterSelector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}}}),
            V1ALPHA1,
            "spec.sourceClusterSelector: invalid label selector at position 0: \"Bad\" is not a valid label selector operator",
        ),
        (
            json!({"apiVersion": V1ALPHA1, "kind": "EventBasedAddOn", "metadata": {"name": "t"}}),
            V1BETA1,
            "kind \"EventBasedAddOn\" has no conversion (EventSource or EventTrigger)",
        ),
        (
            json!({"apiVersion": V1ALPHA1, "kind": "EventSource", "metadata": {"name": "t"}}),
            "lib.projectsveltos.io/v1",
            "desiredAPIVersion: unsupported apiVersion \"lib.projectsveltos.io/v1\"",
        ),
        (
            json!({"apiVersion": V1BETA1, "kind": "EventSource",
                   "metadata": {"name": "t", "annotations": {CONVERSION_ANNOTATION: "{"}}}),
            V1ALPHA1,
            "metadata.annotations[sluice.io/conversion-data]: must be a JSON object",
        ),
    ];
    for (input, desired, expected) in cases {
        let error = convert(&input, desired).expect_err("conversion fails");
        assert!(
            error.to_string().starts_with(expected),
            "{input}: got {error:?}, expected {expected:?}"
        );
    }
}

#[test]
fn a_review_converts_every_object_or_fails_as_a_whole() {
    let source = json!({"apiVersion": V1ALPHA1, "kind": "EventSource", "metadata": {"name": "s"},
                        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod"}]}});
    let ok = review(
        &json!({"apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview",
        "request": {"uid": "u1", "desiredAPIVersion": V1BETA1, "objects": [source]}}),
    )
    .expect("well-formed review");
    let mut expected = source.clone();
    expected["apiVersion"] = json!(V1BETA1);
    assert_eq!(
        ok,
        json!({"apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview",
               "response": {"uid": "u1", "convertedObjects": [expected], "result": {"status": "Success"}}})
    );
    let bad = json!({"apiVersion": V1ALPHA1, "kind": "EventTrigger", "metadata": {"name": "t"},
                     "spec": {"sourceClusterSelector": "a in (", "eventSourceName": "e"}});
    let failed = review(
        &json!({"request": {"uid": "u2", "desiredAPIVersion": V1BETA1, "objects": [source, bad]}}),
    )
    .expect("well-formed review");
    assert_eq!(failed["response"]["uid"], "u2");
    assert_eq!(failed["response"]["result"]["status"], "Failure");
    let message = failed["response"]["result"]["message"]
        .as_str()
        .unwrap_or("");
    assert!(
        message.starts_with(
            "failed to convert \"t\": spec.sourceClusterSelector: invalid label selector"
        ),
        "{message}"
    );
    assert_eq!(
        review(&json!({"request": {"desiredAPIVersion": V1BETA1}})),
        Err(invalid("request.uid", "is required"))
    );
}
