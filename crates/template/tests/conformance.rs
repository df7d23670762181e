//! Runs every case of the shared template conformance corpus (expected outputs from the Go
//! oracle) through `oracle::answer`, the code behind `sluice render`, and fails on any miss.

use std::path::{Path, PathBuf};

use serde_json::{json, Value as Json};
use yaml_rust2::{Yaml, YamlLoader};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/conformance/templates")
}

/// YAML to JSON with the corpus' number rule: a YAML integer is a JSON integer, a YAML float
/// (or an integer too large for int64) a JSON float.
fn to_json(y: &Yaml) -> Json {
    match y {
        Yaml::Null | Yaml::BadValue => Json::Null,
        Yaml::Boolean(b) => Json::Bool(*b),
        Yaml::Integer(i) => json!(i),
        Yaml::Real(s) => {
            let f: f64 = s.parse().unwrap_or_else(|_| panic!("bad float {s}"));
            serde_json::Number::from_f64(f)
                .map(Json::Number)
                .unwrap_or(Json::Null)
        }
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Yaml::Hash(h) => Json::Object(
            h.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s.clone(),
                        Yaml::Integer(i) => i.to_string(),
                        Yaml::Boolean(b) => b.to_string(),
                        other => panic!("unsupported key {other:?}"),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        other => panic!("unsupported YAML node {other:?}"),
    }
}

/// Renders over eagerly converted data (`event_data`), or with `borrowed` over the decoded
/// JSON itself (`render_event`).
fn other_answer(request: &Json, borrowed: bool) -> Json {
    let options = sluice_template::Options {
        engine: match request.get("engine").and_then(Json::as_str) {
            Some("html") => sluice_template::Engine::Html,
            _ => sluice_template::Engine::Text,
        },
        missing_key: match request.get("missingkey").and_then(Json::as_str) {
            Some("default") => sluice_template::MissingKey::Default,
            Some("zero") => sluice_template::MissingKey::Zero,
            _ => sluice_template::MissingKey::Error,
        },
        name: sluice_template::oracle::DEFAULT_NAME.into(),
    };
    let template = match sluice_template::Template::parse(
        request["template"].as_str().unwrap_or_default(),
        &options,
    ) {
        Ok(t) => t,
        Err(e) => return json!({ "error": e.to_string() }),
    };
    let rendered = if borrowed {
        template.render_event(&sluice_template::Doc::from(&request["data"]))
    } else {
        template.render(&sluice_template::event_data(&request["data"]))
    };
    match rendered {
        Ok(output) => json!({ "output": output }),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

#[test]
fn conformance_corpus_renders_byte_for_byte() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("conformance corpus directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no case files in {}",
        corpus_dir().display()
    );
    let (mut passed, mut failures) = (0usize, Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read case file");
        let docs = YamlLoader::load_from_str(&text).expect("parse case file");
        let doc = to_json(&docs[0]);
        let cases = doc["cases"].as_array().expect("cases list");
        let file_name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        for case in cases {
            let name = case["name"].as_str().unwrap_or_default();
            let mut request = json!({ "template": case["template"], "data": case.get("data").cloned().unwrap_or(json!({})) });
            for key in ["engine", "missingkey"] {
                if let Some(v) = case.get(key) {
                    request[key] = v.clone();
                }
            }
            let answer = sluice_template::oracle::answer(&request);
            let expected = &case["expected"];
            let ok = if expected.get("error").and_then(Json::as_bool) == Some(true) {
                answer.get("error").is_some()
            } else {
                let want = expected
                    .get("output")
                    .expect("expected.output or expected.error");
                answer.get("output") == Some(want)
            };
            // The same case over eagerly converted data and over borrowed JSON must agree
            // with the lazy shared path, error texts included.
            let eager = other_answer(&request, false);
            let borrowed = other_answer(&request, true);
            let ok = ok && eager == answer && borrowed == answer;
            if ok {
                passed += 1;
            } else {
                failures.push(format!(
                    "{file_name} / {name}:\n  expected {expected}\n  got      {answer}\n  eager    {eager}\n  borrowed {borrowed}"
                ));
            }
        }
    }
    println!(
        "template conformance: {passed}/{} passed",
        passed + failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
