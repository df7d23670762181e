//! The EventSources of the seed documents (taken from the documents themselves), the sveltos-agent
//! Lua fixtures (https ports, label match, degraded deployment), load-time error locations and
//! the watch list (`gvks`).

use std::path::PathBuf;

use serde_json::{json, Value};
use sluice_eval::{compile_object, CompiledEventSource, Gvk, LoadError};

/// Every EventSource written in a ```yaml block of the seed documents, by name (later blocks
/// with the same name are kept too, in document order).
fn seed_event_sources() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/seeds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("seeds directory")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("seed readable");
        for block in text.split("```").skip(1).step_by(2) {
            if !block.starts_with("yaml") || !block.contains("kind: EventSource") {
                continue;
            }
            let body = block.split_once('\n').map_or("", |(_, b)| b);
            for doc in serde_yaml::Deserializer::from_str(body) {
                // Some documentation blocks elide parts with `...`; stop at the first bad document
                // (serde_yaml would report the same error forever).
                let Ok(value) = serde_yaml::Value::deserialize(doc) else {
                    break;
                };
                let value: Value = serde_json::to_value(value).expect("yaml is json");
                if value["kind"] == "EventSource" {
                    let name = value["metadata"]["name"].as_str().unwrap_or("").to_string();
                    out.push((name, value));
                }
            }
        }
    }
    out
}

use serde::Deserialize as _;

fn service(namespace: &str, labels: Value, ports: &[i64]) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|p| json!({"port": p, "protocol": "TCP"}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "my-service", "namespace": namespace, "labels": labels},
           "spec": {"ports": ports}})
}

fn matching(es: &CompiledEventSource, object: &Value) -> bool {
    es.evaluate_value(object).expect("evaluates").matching
}

#[test]
fn every_seed_event_source_parses_and_compiles() {
    let all = seed_event_sources();
    assert!(all.len() >= 4, "found only {} seed EventSources", all.len());
    for (name, es) in &all {
        compile_object(es).unwrap_or_else(|e| panic!("seed EventSource {name}: {e}"));
    }
}

#[test]
fn seed_sveltos_service_label_filter_and_lua_forms_agree() {
    let forms: Vec<CompiledEventSource> = seed_event_sources()
        .iter()
        .filter(|(n, _)| n == "sveltos-service")
        .map(|(_, es)| compile_object(es).expect("compiles"))
        .collect();
    assert!(forms.len() >= 2, "labelsFilters form and script form");
    for es in &forms {
        assert!(matching(
            es,
            &service("default", json!({"sveltos": "fv"}), &[80])
        ));
        assert!(!matching(
            es,
            &service("default", json!({"sveltos": "prod"}), &[80])
        ));
        assert!(!matching(es, &service("default", json!({}), &[80])));
        assert!(es.collect_resources());
    }
}

#[test]
fn seed_https_and_eng_http_services() {
    let all = seed_event_sources();
    let get = |name: &str| {
        let (_, es) = all.iter().find(|(n, _)| n == name).expect("seed present");
        compile_object(es).expect("compiles")
    };
    let https = get("https-service");
    assert!(matching(&https, &service("eng", json!({}), &[80, 443])));
    assert!(matching(&https, &service("eng", json!({}), &[8443])));
    assert!(!matching(&https, &service("eng", json!({}), &[80])));
    assert!(
        !matching(&https, &service("default", json!({}), &[443])),
        "namespace eng only"
    );
    let http = get("eng-http-service");
    assert!(matching(&http, &service("eng", json!({}), &[80])));
    assert!(!matching(&http, &service("eng", json!({}), &[8080])));
}

/// sveltos-agent `pkg/evaluation/events/service/https` and `.../labels`, and the degraded
/// Deployment script of `eventsource_evaluation_test.go`.
#[test]
fn sveltos_agent_fixtures() {
    let https = compile_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "https"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service",
          "evaluate": "function evaluate()\n  hs = {}\n  hs.matching = false\n  hs.message = \"\"\n  if obj.spec.ports ~= nil then\n    for _,p in pairs(obj.spec.ports) do\n      if p.port == 443 or p.port == 8443 then\n        hs.matching = true\n      end\n    end\n  end\n  return hs\nend"}]}
    }))
    .expect("compiles");
    assert!(matching(&https, &service("default", json!({}), &[80, 443])));
    assert!(!matching(&https, &service("default", json!({}), &[80])));

    let labels = compile_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "labels"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service",
          "evaluate": "function evaluate()\n  hs = {}\n  hs.matching = false\n  if obj.metadata.labels ~= nil then\n    for key, value in pairs(obj.metadata.labels) do\n      if key == \"sveltos\" and value == \"fv\" then hs.matching = true end\n    end\n  end\n  return hs\nend"}]}
    }))
    .expect("compiles");
    assert!(matching(
        &labels,
        &service("default", json!({"sveltos": "fv"}), &[80])
    ));

    let degraded = compile_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "degraded"},
        "spec": {"resourceSelectors": [{"group": "apps", "version": "v1", "kind": "Deployment",
          "evaluate": "function evaluate()\n  hs = {}\n  hs.matching = false\n  if obj.status ~= nil then\n    if obj.status.availableReplicas ~= obj.spec.replicas then\n      hs.matching = true\n    end\n  end\n  return hs\nend"}]}
    }))
    .expect("compiles");
    let deployment = |replicas: i64, available: i64| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
               "spec": {"replicas": replicas}, "status": {"availableReplicas": available}})
    };
    assert!(matching(&degraded, &deployment(3, 1)));
    assert!(!matching(&degraded, &deployment(3, 3)));
}

#[test]
fn lua_syntax_errors_say_eventsource_field_and_line() {
    let err = compile_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "broken"},
        "spec": {"resourceSelectors": [
            {"group": "", "version": "v1", "kind": "Pod"},
            {"group": "", "version": "v1", "kind": "Pod", "evaluate": "function evaluate()\n  return {matching = }\nend"}]}
    }))
    .err()
    .expect("syntax error");
    match &err {
        LoadError::LuaSyntax {
            name, field, line, ..
        } => {
            assert_eq!(name, "broken");
            assert_eq!(field, "spec.resourceSelectors[1].evaluate");
            assert_eq!(*line, Some(2));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        err.to_string().starts_with(
            "eventsource broken: spec.resourceSelectors[1].evaluate line 2: lua syntax error"
        ),
        "{err}"
    );

    let err = compile_object(&json!({
        "metadata": {"name": "agg"},
        "spec": {"aggregatedSelection": "function evaluate(\nend end"}
    }))
    .err()
    .expect("syntax error");
    assert!(
        err.to_string().contains("spec.aggregatedSelection line "),
        "{err}"
    );
}

#[test]
fn invalid_selectors_and_operations_fail_at_load() {
    let err = compile_object(&json!({
        "metadata": {"name": "sel"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod",
          "selector": {"matchExpressions": [{"key": "env", "operator": "Equals", "values": ["x"]}]}}]}
    }))
    .err()
    .expect("invalid selector");
    assert!(
        matches!(&err, LoadError::Selector { name, field, .. }
        if name == "sel" && field == "spec.resourceSelectors[0].selector"),
        "{err:?}"
    );

    let err = compile_object(&json!({
        "metadata": {"name": "op"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod",
          "labelFilters": [{"key": "a", "operation": "Like", "value": "b"}]}]}
    }))
    .err()
    .expect("unknown operation");
    assert!(err.to_string().contains("invalid eventsource"), "{err}");
    let source = std::error::Error::source(&err)
        .expect("has source")
        .to_string();
    assert!(
        source.starts_with("spec.resourceSelectors[0].labelFilters[0].operation"),
        "{source}"
    );
}

#[test]
fn bad_cel_rules_are_reported_but_do_not_fail_the_load() {
    let es = compile_object(&json!({
        "metadata": {"name": "cel"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod",
          "evaluateCEL": [{"name": "broken", "rule": "resource.metadata.name =="},
                          {"name": "ok", "rule": "resource.metadata.name == 'p'"}]}]}
    }))
    .expect("loads");
    assert_eq!(es.diagnostics().len(), 1);
    assert_eq!(
        es.diagnostics()[0].field,
        "spec.resourceSelectors[0].evaluateCEL[0]"
    );
    assert_eq!(es.diagnostics()[0].name, "broken");
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}});
    assert!(matching(&es, &pod));
}

#[test]
fn gvks_lists_each_selected_kind_once() {
    let es = compile_object(&json!({
        "metadata": {"name": "g"},
        "spec": {"resourceSelectors": [
            {"group": "apps", "version": "v1", "kind": "Deployment"},
            {"group": "", "version": "v1", "kind": "Service", "namespace": "a"},
            {"group": "apps", "version": "v1", "kind": "Deployment", "name": "x"}]}
    }))
    .expect("loads");
    let gvk = |g: &str, v: &str, k: &str| Gvk {
        group: g.into(),
        version: v.into(),
        kind: k.into(),
    };
    assert_eq!(
        es.gvks(),
        vec![gvk("apps", "v1", "Deployment"), gvk("", "v1", "Service")]
    );
    assert!(!es.has_aggregation());
}

#[test]
fn oracle_batch_form_answers_an_array() {
    let es = json!({"metadata": {"name": "b"}, "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod"}]}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let input = json!([{"eventSource": es, "object": pod}, {"eventSource": es, "objects": [pod]}, {"object": pod}]);
    let out: Value =
        serde_json::from_str(&sluice_eval::oracle::run(&input.to_string())).expect("json");
    assert_eq!(out[0], json!({"matching": true, "message": ""}));
    assert_eq!(out[1], json!({"message": "", "resources": [pod]}));
    assert_eq!(out[2], json!({"error": "eventSource is required"}));
    let bad: Value = serde_json::from_str(&sluice_eval::oracle::run("{")).expect("json");
    assert!(bad["error"]
        .as_str()
        .is_some_and(|e| e.starts_with("invalid request json")));
}
