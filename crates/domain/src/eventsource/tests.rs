//! Tests of EventSource parsing: every accepted form and the field paths of errors.

use super::*;
use serde_json::json;

#[test]
fn seed_000_flat_v1alpha1_with_labels_filters_spelling() {
    let es = parse_event_source(&json!({
        "apiVersion": "lib.projectsveltos.io/v1alpha1",
        "kind": "EventSource",
        "metadata": {"name": "sveltos-service"},
        "spec": {"collectResources": true, "group": "", "version": "v1", "kind": "Service",
                 "labelsFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]}
    }))
    .expect("seed 000 parses");
    assert_eq!(es.name, "sveltos-service");
    assert!(es.spec.collect_resources);
    assert_eq!(es.spec.resource_selectors.len(), 1);
    let sel = &es.spec.resource_selectors[0];
    assert_eq!(
        (sel.group.as_str(), sel.version.as_str(), sel.kind.as_str()),
        ("", "v1", "Service")
    );
    assert_eq!(
        sel.label_filters,
        vec![LabelFilter {
            key: "sveltos".into(),
            operation: LabelOperation::Equal,
            value: "fv".into()
        }]
    );
    assert_eq!(sel.evaluate, None);
}

#[test]
fn flat_v1alpha1_script_becomes_evaluate() {
    let es = parse_event_source(&json!({
        "apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventSource",
        "metadata": {"name": "s"},
        "spec": {"version": "v1", "kind": "Service", "namespace": "eng",
                 "labelFilters": [{"key": "a", "operation": "Has"}],
                 "script": "function evaluate() return {matching=true} end"}
    }))
    .expect("flat form parses");
    let sel = &es.spec.resource_selectors[0];
    assert_eq!(sel.namespace, "eng");
    assert_eq!(sel.label_filters[0].operation, LabelOperation::Has);
    assert_eq!(
        sel.evaluate.as_deref(),
        Some("function evaluate() return {matching=true} end")
    );
}

#[test]
fn v1beta1_resource_selectors_with_every_field() {
    let es = parse_event_source(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
        "metadata": {"name": "full"},
        "spec": {
            "resourceSelectors": [
                {"group": "apps", "version": "v1", "kind": "Deployment", "name": "web",
                 "selector": {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["x"]}]},
                 "evaluateCEL": [{"name": "r", "rule": "true"}], "evaluate": ""},
                {"group": "", "version": "v1", "kind": "Service",
                 "labelFilters": [{"key": "k", "operation": "DoesNotHave"}, {"key": "j", "operation": "Different", "value": "v"}]}
            ],
            "aggregatedSelection": "function evaluate() return {} end",
            "messagingMatchCriteria": [{"subject": "a.*", "cloudEventType": "t"}]
        }
    }))
    .expect("v1beta1 parses");
    let s0 = &es.spec.resource_selectors[0];
    assert_eq!(s0.name, "web");
    assert_eq!(s0.evaluate, None, "empty evaluate is no script");
    assert_eq!(
        s0.evaluate_cel,
        vec![CelRule {
            name: "r".into(),
            rule: "true".into()
        }]
    );
    let sel = s0.selector.as_ref().expect("selector");
    assert_eq!(sel.match_labels.get("a").map(String::as_str), Some("b"));
    assert_eq!(sel.match_expressions[0].operator, "In");
    let s1 = &es.spec.resource_selectors[1];
    assert_eq!(s1.label_filters[1].operation, LabelOperation::Different);
    assert!(es.spec.aggregated_selection.is_some());
    assert_eq!(es.spec.messaging_match_criteria[0].subject, "a.*");
    assert_eq!(es.spec.messaging_match_criteria[0].cloud_event_type, "t");
}

#[test]
fn v1alpha1_with_resource_selectors_parses_like_v1beta1() {
    let es = parse_event_source(&json!({
        "apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventSource", "metadata": {"name": "a"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod", "evaluate": "x"}]}
    }))
    .expect("parses");
    assert_eq!(es.spec.resource_selectors[0].evaluate.as_deref(), Some("x"));
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (json!({"spec": {"resourceSelectors": [{"version": "v1", "kind": "Pod", "labelFilters": [{"key": "a", "operation": "Like"}]}]}}),
         "spec.resourceSelectors[0].labelFilters[0].operation: unknown label filter operation \"Like\" (expected Equal, Different, Has or DoesNotHave)"),
        (json!({"spec": {"resourceSelectors": [{"version": "v1"}]}}), "spec.resourceSelectors[0].kind: required field is missing"),
        (json!({"spec": {"resourceSelectors": [{"version": "v1", "kind": "Pod", "evaluate": 3}]}}), "spec.resourceSelectors[0].evaluate: expected a string"),
        (json!({"spec": {"collectResources": "yes"}}), "spec.collectResources: expected a boolean"),
        (json!({"apiVersion": "v1", "kind": "EventSource"}), "apiVersion: unsupported value \"v1\""),
        (json!({"spec": {"resourceSelectors": [{"version": "v1", "kind": "Pod", "selector": {"matchLabels": 1}}]}}),
         "spec.resourceSelectors[0].selector: expected a label selector (matchLabels, matchExpressions)"),
        (json!({"spec": {"messagingMatchCriteria": [{"subject": "ok"}, {"subject": "a", "cloudEventType": "login("}]}}),
         "spec.messagingMatchCriteria[1].cloudEventType: invalid regular expression \"login(\": unclosed group"),
        (json!({"spec": {"messagingMatchCriteria": [{"cloudEventSource": 7}]}}),
         "spec.messagingMatchCriteria[0].cloudEventSource: expected a string"),
    ];
    for (input, want) in cases {
        let err = parse_event_source(&input).expect_err("must fail");
        assert_eq!(err.to_string(), want);
    }
}

#[test]
fn seed_004_messaging_criteria_compile_at_load() {
    let es = parse_event_source(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
        "metadata": {"name": "user-operation"},
        "spec": {"messagingMatchCriteria": [{"subject": "user-operation", "cloudEventSource": "auth.example.com"}]}
    }))
    .expect("seed 004 parses");
    let c = &es.spec.messaging_match_criteria[0];
    assert_eq!(c.subject, "user-operation");
    assert_eq!(c.cloud_event_source, "auth.example.com");
    assert!(c.cloud_event_type.is_empty() && c.cloud_event_subject.is_empty());
    assert!(c.subject.is_match("user-operation"));
}
