//! The dry run over the repository's examples: what it writes, what it says when nothing is
//! written, and failures that say where they are.

use super::*;
use serde_json::Value;

use crate::examples::{seed_000_networkpolicy as seed_000, seed_003, seed_004};

/// Seed 000's first example: its EventSource, EventBasedAddOn and ConfigMap, and its Service.
fn seed_000() -> String {
    [
        seed_000::EVENT_SOURCE,
        seed_000::EVENT_BASED_ADDON,
        seed_000::SERVICE,
    ]
    .join("\n---\n")
}

/// Seed 003's EventSource and EventTrigger (with its ConfigMap).
fn seed_003() -> String {
    [seed_003::EVENT_SOURCE, seed_003::EVENT_TRIGGER].join("\n---\n")
}

fn documents(texts: &[&str]) -> Vec<Document> {
    let mut out = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        parse_documents(&format!("file{i}"), text, false, &mut out).expect("parses");
    }
    out
}

fn labelled(labels: &[(&str, &str)]) -> Options {
    Options {
        cluster_labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Options::default()
    }
}

/// Seed 003 with `from` replaced by `to` in its EventSource or EventTrigger, over its workload
/// in a production cluster: it writes nothing.
fn seed_003_with(from: &str, to: &str) -> Outcome {
    let broken = seed_003().replace(from, to);
    assert_ne!(broken, seed_003(), "{from:?} is in seed 003");
    let outcome = dry_run(
        &documents(&[&broken, seed_003::WORKLOAD]),
        &labelled(&[("env", "production")]),
    )
    .expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    outcome
}

/// Some problem of the outcome says every one of `needles`.
fn assert_problem(outcome: &Outcome, needles: &[&str]) {
    assert!(
        outcome
            .problems
            .iter()
            .any(|p| needles.iter().all(|n| p.contains(n))),
        "no problem says {needles:?}: {:#?}",
        outcome.problems
    );
}

fn kinds(outcome: &Outcome) -> Vec<(&str, &str)> {
    outcome
        .objects
        .iter()
        .map(|w| (text(&w.object, "/kind"), w.unit.as_str()))
        .collect()
}

#[test]
fn seed_000_becomes_a_cluster_profile_and_its_network_policy_for_the_service() {
    let outcome = dry_run(&documents(&[&seed_000()]), &labelled(&[("env", "fv")])).expect("runs");
    assert_eq!(outcome.problems, Vec::<String>::new());
    assert_eq!(outcome.cluster, "sveltos:default/dry-run");
    assert_eq!(
        kinds(&outcome),
        vec![
            ("ConfigMap", "resource default/my-service"),
            ("ClusterProfile", "resource default/my-service"),
        ]
    );
    let config_map = &outcome.objects[0].object;
    let profile = &outcome.objects[1].object;
    assert_eq!(
        profile["spec"]["clusterRefs"],
        json!([{"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                "namespace": "default", "name": "dry-run"}])
    );
    assert_eq!(
        profile["spec"]["policyRefs"][0]["name"],
        config_map["metadata"]["name"]
    );
    // The applier's own annotation names the unit's subject.
    assert!(
        text(profile, "/metadata/annotations/sluice.io~1desired-subject")
            .ends_with(".r.default.my-service"),
        "{profile:#}"
    );
    let policy = text(config_map, "/data/networkpolicy.yaml");
    assert!(policy.contains("name: front-my-service"), "{policy}");
    assert!(policy.contains("namespace: default"), "{policy}");
    assert!(policy.contains("app.kubernetes.io/name: MyApp"), "{policy}");
    assert!(policy.contains("- port: 80"), "{policy}");
    // The EventReport lists the Service.
    assert_eq!(outcome.reports.len(), 1);
    assert_eq!(
        outcome.reports[0]["spec"]["matchingResources"][0]["name"],
        "my-service"
    );
}

#[test]
fn a_trigger_that_selects_no_cluster_writes_nothing_and_says_why() {
    let outcome = dry_run(&documents(&[&seed_000()]), &Options::default()).expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert!(outcome.problems.is_empty(), "{:#?}", outcome.problems);
    let note = outcome
        .notes
        .iter()
        .find(|n| n.contains("sourceClusterSelector"))
        .expect("a note on the selector");
    assert!(
        note.contains("eventtrigger service-network-policy"),
        "{note}"
    );
    assert!(note.contains("--cluster-label"), "{note}");
}

#[test]
fn an_unmatched_resource_renders_nothing_and_a_deleted_label_is_no_event() {
    let other = seed_000().replace("sveltos: fv", "sveltos: other");
    let outcome = dry_run(&documents(&[&other]), &labelled(&[("env", "fv")])).expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert!(outcome.problems.is_empty(), "{:#?}", outcome.problems);
    assert_eq!(
        outcome.reports[0]["spec"]["matchingResources"],
        json!([]),
        "{:#}",
        outcome.reports[0]
    );
}

#[test]
fn a_script_that_does_not_compile_is_its_eventsources_problem_and_names_the_field() {
    let outcome = seed_003_with("hs.matching = false", "hs.matching = = false");
    assert_problem(
        &outcome,
        &[
            "load-balancer-service",
            "spec.resourceSelectors[0].evaluate",
        ],
    );
}

#[test]
fn seed_003_deploys_to_the_destination_clusters_once_the_service_has_an_address() {
    let destination = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: SveltosCluster
metadata: {name: eng, namespace: default, labels: {dep: eng}}
status: {ready: true}
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: SveltosCluster
metadata: {name: gke, namespace: default, labels: {env: production}}
status: {ready: true}
"#;
    let options = Options {
        cluster: Some("default/gke".into()),
        ..Options::default()
    };
    // As written, the Service has no status: the script fails on it, as the note warns (the
    // API server would have given it `status.loadBalancer: {}`).
    let outcome = dry_run(
        &documents(&[&seed_003(), seed_003::WORKLOAD, destination]),
        &options,
    )
    .expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert_eq!(outcome.problems.len(), 1, "{:#?}", outcome.problems);
    assert!(
        outcome.problems[0].contains("attempt to index nil with 'loadBalancer'"),
        "{:#?}",
        outcome.problems
    );
    assert!(
        outcome
            .notes
            .iter()
            .any(|n| n.contains("2 resources") && n.contains("metadata.uid")),
        "{:#?}",
        outcome.notes
    );

    // With the status a cluster gives it but no ingress address, the script does not match.
    let no_address = format!("{}\nstatus:\n  loadBalancer: {{}}\n", seed_003::WORKLOAD);
    let outcome = dry_run(
        &documents(&[&seed_003(), &no_address, destination]),
        &options,
    )
    .expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert!(outcome.problems.is_empty(), "{:#?}", outcome.problems);

    let with_address = format!(
        "{}\nstatus:\n  loadBalancer:\n    ingress:\n    - ip: 192.0.2.7\n",
        seed_003::WORKLOAD
    );
    let outcome = dry_run(
        &documents(&[&seed_003(), &with_address, destination]),
        &options,
    )
    .expect("runs");
    assert!(outcome.problems.is_empty(), "{:#?}", outcome.problems);
    assert_eq!(outcome.cluster, "sveltos:default/gke");
    let profile = &outcome.objects[1].object;
    assert_eq!(text(profile, "/kind"), "ClusterProfile");
    assert_eq!(
        profile["spec"]["clusterSelector"],
        json!({"matchLabels": {"dep": "eng"}}),
        "{profile:#}"
    );
    let config_map = &outcome.objects[0].object;
    assert!(
        text(config_map, "/data/endpoint.yaml").contains("ip: 192.0.2.7"),
        "{config_map:#}"
    );
}

#[test]
fn a_missing_policy_source_is_the_triggers_problem_and_names_the_reference() {
    let without_config_map = seed_000().replace(
        "  name: network-policy\n  namespace: default\ndata:",
        "  name: another\n  namespace: default\ndata:",
    );
    assert_ne!(without_config_map, seed_000());
    let outcome = dry_run(
        &documents(&[&without_config_map]),
        &labelled(&[("env", "fv")]),
    )
    .expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert_problem(
        &outcome,
        &["eventtrigger service-network-policy", "network-policy"],
    );
}

#[test]
fn several_clusters_need_to_be_told_apart_and_an_unnamed_document_is_refused() {
    let two = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: SveltosCluster
metadata: {name: a, namespace: default}
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: SveltosCluster
metadata: {name: b, namespace: default}
"#;
    let error = dry_run(&documents(&[&seed_000(), two]), &Options::default())
        .expect_err("which cluster?")
        .to_string();
    assert!(error.contains("SveltosCluster default/a"), "{error}");
    assert!(error.contains("--cluster"), "{error}");

    let outcome = dry_run(
        &documents(&[&seed_000(), two]),
        &Options {
            cluster: Some("b".into()),
            cluster_labels: vec![("env".into(), "fv".into())],
            ..Options::default()
        },
    )
    .expect("runs");
    assert_eq!(outcome.cluster, "sveltos:default/b");
    assert_eq!(outcome.objects.len(), 2, "{:#?}", outcome.objects);
    assert!(
        outcome.notes.iter().any(|n| n.contains("has no status")),
        "{:#?}",
        outcome.notes
    );

    let unnamed = "apiVersion: v1\nkind: Service\nmetadata: {generateName: x-}\n";
    let outcome = dry_run(
        &documents(&[&seed_000(), unnamed]),
        &labelled(&[("env", "fv")]),
    )
    .expect("runs");
    assert_problem(
        &outcome,
        &["file1, document 1", "metadata.name: Required value"],
    );
    assert_eq!(outcome.objects.len(), 2, "the rest is written");
}

#[test]
fn a_list_stands_for_its_items() {
    let mut out = Vec::new();
    parse_documents(
        "f",
        r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}]}"#,
        false,
        &mut out,
    )
    .expect("parses");
    let names: Vec<(&str, &str)> = out
        .iter()
        .map(|d| (d.origin.as_str(), text(&d.object, "/metadata/name")))
        .collect();
    assert_eq!(
        names,
        vec![
            ("f, document 1, items[0]", "a"),
            ("f, document 1, items[1]", "b")
        ]
    );
}

#[test]
fn seed_004_a_login_creates_the_namespace_profile_and_a_logout_after_it_deletes_it() {
    let (login, logout) = (seed_004::LOGIN, seed_004::LOGOUT);
    let event = |subject: &str, json: &str| CloudEventInput {
        origin: "event".into(),
        subject: subject.into(),
        json: json.as_bytes().to_vec(),
    };
    let options = |events: Vec<CloudEventInput>| Options {
        cloud_events: events,
        ..labelled(&[("env", "production")])
    };

    let outcome = dry_run(
        &documents(&[seed_004::CONFIG]),
        &options(vec![event("user-operation", login)]),
    )
    .expect("runs");
    assert!(outcome.problems.is_empty(), "{:#?}", outcome.problems);
    let unit = "CloudEvent source auth.example.com subject mgianluc";
    assert_eq!(
        kinds(&outcome),
        vec![("ConfigMap", unit), ("ClusterProfile", unit)]
    );
    assert!(
        text(&outcome.objects[0].object, "/data/namespace.yaml").contains("name: mgianluc"),
        "{:#}",
        outcome.objects[0].object
    );

    let outcome = dry_run(
        &documents(&[seed_004::CONFIG]),
        &options(vec![
            event("user-operation", login),
            event("user-operation", logout),
        ]),
    )
    .expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert!(
        outcome
            .notes
            .iter()
            .any(|n| n.contains(unit) && n.contains("deleted")),
        "{:#?}",
        outcome.notes
    );

    // On a subject no criteria name, nothing matches, and the note says so.
    let outcome = dry_run(
        &documents(&[seed_004::CONFIG]),
        &options(vec![event("other", login)]),
    )
    .expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert!(
        outcome.notes.iter().any(|n| n.contains("no EventSource")),
        "{:#?}",
        outcome.notes
    );

    // An event that is not a CloudEvent is a problem naming where it came from.
    let outcome = dry_run(
        &documents(&[seed_004::CONFIG]),
        &options(vec![event("user-operation", "{\"type\": 1}")]),
    )
    .expect("runs");
    assert_problem(&outcome, &["event (subject user-operation): "]);
}

#[test]
fn a_trigger_the_api_server_would_refuse_is_said_with_its_field_and_not_used() {
    let typo = seed_000().replace("oneForEvent: true", "oneForEvnet: true");
    let outcome = dry_run(&documents(&[&typo]), &labelled(&[("env", "fv")])).expect("runs");
    assert!(outcome.objects.is_empty(), "{:#?}", outcome.objects);
    assert_eq!(
        outcome.problems,
        vec![
            "file0, document 2: EventBasedAddOn service-network-policy: the API server refuses \
              it: spec.oneForEvnet: unknown field"
                .to_string()
        ]
    );
}

#[test]
fn an_object_the_webhook_cannot_convert_is_its_own_problem() {
    // v1alpha1 takes a string selector; one the conversion cannot parse is that trigger's
    // problem, and the dry run goes on.
    let outcome = seed_003_with(
        "sourceClusterSelector: env=production",
        "sourceClusterSelector: \"env in (production\"",
    );
    assert_problem(
        &outcome,
        &[
            "EventTrigger service-policy",
            "the conversion webhook refuses it",
            "sourceClusterSelector",
        ],
    );
}

#[test]
fn against_what_exists_the_run_says_what_it_would_create_change_and_delete() {
    let options = labelled(&[("env", "fv")]);
    let outcome = dry_run(&documents(&[&seed_000()]), &options).expect("runs");
    assert_eq!(outcome.objects.len(), 2);
    // What the API server stores: the run's objects with defaults and fields of its own added.
    let mut existing: Vec<Value> = outcome.objects.iter().map(|w| w.object.clone()).collect();
    existing[1]["spec"]["policyRefs"][0]["tier"] = json!(100);
    existing[1]["metadata"]["uid"] = json!("u1");
    existing[1]["status"] = json!({"matchingClusters": []});
    // A profile of the same trigger and cluster for a Service that no longer matches, and one
    // of another trigger, which the run says nothing about.
    let mut stale = existing[1].clone();
    stale["metadata"]["name"] = json!("sveltos-stale");
    let mut other = existing[1].clone();
    other["metadata"]["name"] = json!("sveltos-other");
    other["metadata"]["labels"][sluice_domain::naming::LABEL_EVENT_TRIGGER] = json!("another");
    existing.extend([stale, other]);

    let (differences, unchanged) = compare(&outcome, &existing);
    assert_eq!(unchanged, 2, "{differences:#?}");
    assert_eq!(
        differences,
        vec![Difference {
            action: Action::Delete,
            kind: "ClusterProfile".into(),
            namespace: String::new(),
            name: "sveltos-stale".into(),
            owner: "eventtrigger service-network-policy".into(),
        }]
    );

    // The Service's port changed: its NetworkPolicy's ConfigMap changes, its profile does not.
    let changed = seed_000().replace("port: 80", "port: 8080");
    let outcome = dry_run(&documents(&[&changed]), &options).expect("runs");
    let (differences, unchanged) = compare(&outcome, &existing[..2]);
    assert_eq!(unchanged, 1);
    let actions: Vec<(&Action, &str)> = differences
        .iter()
        .map(|d| (&d.action, d.kind.as_str()))
        .collect();
    assert_eq!(actions, vec![(&Action::Change, "ConfigMap")]);
    assert_eq!(
        differences[0].owner,
        "eventtrigger service-network-policy, resource default/my-service"
    );

    // Nothing exists yet: both are created.
    let (differences, unchanged) = compare(&outcome, &[]);
    assert_eq!(unchanged, 0);
    assert!(differences.iter().all(|d| d.action == Action::Create));
    assert_eq!(differences.len(), 2);
}
