//! Runs every case of the shared EventSource conformance corpus (expected outputs produced by the
//! reference oracle) through `sluice_eval::oracle`, the code behind `sluice eval`. No case is
//! skipped; every failure is reported by file and case name.

use std::path::PathBuf;

use serde_json::{Map, Value};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/conformance/eventsources")
}

/// Compares one answer with one `expected` block as the corpus README says.
fn check(answer: &Value, expected: &Value) -> Result<(), String> {
    if expected.get("error").and_then(Value::as_bool) == Some(true) {
        return match answer.get("error") {
            Some(_) => Ok(()),
            None => Err(format!("expected an error, got {answer}")),
        };
    }
    if let Some(err) = answer.get("error") {
        return Err(format!("unexpected error {err}, expected {expected}"));
    }
    if let Some(want) = expected.get("matching") {
        if answer.get("matching") != Some(want) {
            return Err(format!("matching: got {answer}, expected {expected}"));
        }
    }
    if answer.get("message") != expected.get("message") {
        return Err(format!("message: got {answer}, expected {expected}"));
    }
    if let Some(want) = expected.get("resources") {
        let got = answer.get("resources").unwrap_or(&Value::Null);
        if !json_eq(got, want) {
            return Err(format!("resources: got {got}, expected {want}"));
        }
    }
    Ok(())
}

/// JSON equality with numbers compared by value (Sveltos holds them as int64 or float64).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// The oracle request of a case: its inputs without name, description and expected.
fn request(case: &Map<String, Value>) -> Value {
    let mut req = Map::new();
    for key in ["eventSource", "object", "objects"] {
        if let Some(v) = case.get(key) {
            req.insert(key.to_string(), v.clone());
        }
    }
    Value::Object(req)
}

#[test]
fn every_eventsource_case_matches_the_oracle() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("corpus directory exists")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no corpus files found in {:?}",
        corpus_dir()
    );

    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("corpus file readable");
        let doc: Value = serde_yaml::from_str(&text).expect("corpus file is YAML");
        assert_eq!(doc["kind"], "eventsource-cases", "{file:?}");
        let cases = doc["cases"].as_array().expect("cases list");
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut passed = 0;
        for case in cases {
            let case = case.as_object().expect("case is a map");
            let case_name = case["name"].as_str().unwrap_or("?");
            let answer = sluice_eval::oracle::answer(&request(case));
            match check(&answer, &case["expected"]) {
                Ok(()) => passed += 1,
                Err(e) => failures.push(format!("{name}: {case_name}: {e}")),
            }
        }
        summary.push(format!("{name}: {passed}/{} passed", cases.len()));
    }
    println!("{}", summary.join("\n"));
    assert!(
        failures.is_empty(),
        "{} conformance failures:\n{}\n\n{}",
        failures.len(),
        failures.join("\n"),
        summary.join("\n")
    );
}

#[test]
fn the_comparison_detects_differences() {
    let expected = serde_json::json!({"matching": true, "message": "a"});
    assert!(check(
        &serde_json::json!({"matching": true, "message": "a"}),
        &expected
    )
    .is_ok());
    assert!(check(
        &serde_json::json!({"matching": false, "message": "a"}),
        &expected
    )
    .is_err());
    assert!(check(
        &serde_json::json!({"matching": true, "message": "b"}),
        &expected
    )
    .is_err());
    assert!(check(&serde_json::json!({"error": "x"}), &expected).is_err());
    let expected = serde_json::json!({"error": true, "go_error": "x"});
    assert!(check(
        &serde_json::json!({"matching": true, "message": ""}),
        &expected
    )
    .is_err());
    let expected = serde_json::json!({"resources": [{"n": 3}], "message": ""});
    assert!(check(
        &serde_json::json!({"resources": [{"n": 3.0}], "message": ""}),
        &expected
    )
    .is_ok());
    assert!(check(
        &serde_json::json!({"resources": [{"n": 4}], "message": ""}),
        &expected
    )
    .is_err());
    assert!(check(
        &serde_json::json!({"resources": [], "message": ""}),
        &expected
    )
    .is_err());
}
