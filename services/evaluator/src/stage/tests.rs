//! Unit tests of the pure stage: what an object change, a batch and a configuration change
//! publish.

use serde_json::{json, Value};
use sluice_domain::config::ConfigState;
use sluice_proto::v1 as pb;
use sluice_wire::ConfigUpdate;

use super::{EncodedSet, Evaluator};

fn cluster_ref() -> pb::ClusterRef {
    sluice_wire::cluster_ref(&sluice_domain::cluster::ClusterId {
        cluster_type: sluice_domain::cluster::ClusterType::Sveltos,
        namespace: "mgmt".into(),
        name: "c1".into(),
    })
}

fn config(event_sources: &[Value]) -> ConfigState {
    let mut state = ConfigState::default();
    let cluster = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
        "metadata": {"name": "c1", "namespace": "mgmt", "labels": {"env": "prod"}},
        "status": {"ready": true}});
    state.apply("SveltosCluster", "mgmt", "c1", Some(&cluster));
    for es in event_sources {
        let name = es["metadata"]["name"].as_str().expect("named");
        state.apply("EventSource", "", name, Some(es));
        let trigger = trigger(name);
        state.apply("EventTrigger", "", &format!("t-{name}"), Some(&trigger));
    }
    state
}

fn trigger(es: &str) -> Value {
    json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
        "metadata": {"name": format!("t-{es}")},
        "spec": {"sourceClusterSelector": {"matchLabels": {"env": "prod"}}, "eventSourceName": es}})
}

fn event_source(name: &str, selector: Value, collect: bool) -> Value {
    json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
        "metadata": {"name": name},
        "spec": {"collectResources": collect, "resourceSelectors": [selector]}})
}

fn service(name: &str, tier: &str, port: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "labels": {"tier": tier}},
        "spec": {"ports": [{"port": port}]}})
}

fn change(object: &Value) -> pb::ResourceChange {
    pb::ResourceChange {
        cluster: Some(cluster_ref()),
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: "default".into(),
        name: object["metadata"]["name"].as_str().expect("named").into(),
        deleted: false,
        resource_version: String::new(),
        object_json: serde_json::to_vec(object).expect("serializes"),
    }
}

fn deletion(name: &str) -> pb::ResourceChange {
    pb::ResourceChange {
        deleted: true,
        object_json: Vec::new(),
        ..change(&service(name, "", 0))
    }
}

/// The names in each published set, with the EventSource and the failure message.
fn summary(sets: &[EncodedSet]) -> Vec<(String, Vec<String>, String)> {
    sets.iter()
        .map(EncodedSet::to_set)
        .map(|s| {
            (
                s.event_source.clone(),
                s.matching.iter().map(|m| m.name.clone()).collect(),
                s.failure_message.clone(),
            )
        })
        .collect()
}

fn web_filter() -> Value {
    json!({"group": "", "version": "v1", "kind": "Service",
        "labelFilters": [{"key": "tier", "operation": "Equal", "value": "web"}]})
}

fn started(event_sources: &[Value]) -> Evaluator {
    let mut evaluator = Evaluator::new(config(event_sources));
    let boot = evaluator.recompute_all(1);
    assert_eq!(
        boot.len(),
        event_sources.len(),
        "every pair is published at boot"
    );
    evaluator
}

#[test]
fn only_changes_that_alter_a_set_publish_it() {
    let mut ev = started(&[event_source("web", web_filter(), false)]);
    let a = service("a", "web", 80);
    assert_eq!(
        summary(&ev.on_change(&change(&a), 2)),
        [("web".into(), vec!["a".into()], String::new())]
    );
    // Still matching with other content: identities are unchanged, nothing to publish.
    assert!(ev
        .on_change(&change(&service("a", "web", 81)), 3)
        .is_empty());
    // Never matching: nothing to publish.
    assert!(ev.on_change(&change(&service("b", "db", 80)), 4).is_empty());
    let sets = ev.on_change(&change(&service("c", "web", 80)), 5);
    assert_eq!(
        summary(&sets),
        [("web".into(), vec!["a".into(), "c".into()], String::new())]
    );
    assert_eq!(sets[0].source_sequence(), 5);
    assert_eq!(
        summary(&ev.on_change(&deletion("a"), 6)),
        [("web".into(), vec!["c".into()], String::new())]
    );
    assert_eq!(
        summary(&ev.on_change(&change(&service("c", "db", 80)), 7)),
        [("web".into(), vec![], String::new())]
    );
}

#[test]
fn collected_contents_republish_when_a_matching_object_changes() {
    let mut ev = started(&[event_source("web", web_filter(), true)]);
    assert_eq!(ev.on_change(&change(&service("a", "web", 80)), 2).len(), 1);
    let sets = ev.on_change(&change(&service("a", "web", 81)), 3);
    assert_eq!(sets.len(), 1);
    let collected: Value = serde_json::from_slice(&sets[0].to_set().resources[0]).expect("json");
    assert_eq!(collected["spec"]["ports"][0]["port"], 81);
    assert!(ev
        .on_change(&change(&service("a", "web", 81)), 4)
        .is_empty());
}

#[test]
fn a_batch_publishes_each_changed_set_once_with_its_last_sequence() {
    let lua = json!({"group": "", "version": "v1", "kind": "Service", "evaluate":
        "function evaluate() hs = {} hs.matching = obj.spec.ports[1].port == 443 return hs end"});
    let cel = json!({"group": "", "version": "v1", "kind": "Service",
        "evaluateCEL": [{"name": "db", "rule": "resource.metadata.labels.tier == 'db'"}]});
    let sources = [
        event_source("web", web_filter(), false),
        event_source("https", lua, false),
        event_source("db", cel, false),
    ];
    let mut ev = started(&sources);
    let batch = vec![
        (change(&service("a", "web", 443)), 10),
        (change(&service("b", "db", 80)), 11),
        (change(&service("c", "web", 80)), 12),
        (deletion("c"), 13),
        (change(&service("d", "other", 8080)), 14),
    ];
    let sets = ev.on_changes(&batch);
    // The service parses a batch before the stage sees it: same sets.
    let parsed: Vec<super::Parsed> = batch
        .iter()
        .map(|(change, sequence)| super::Parsed::new(change.clone(), *sequence))
        .collect();
    assert_eq!(started(&sources).on_parsed(&parsed), sets);
    let mut got: Vec<_> = sets
        .iter()
        .map(|s| (s.event_source().to_string(), s.source_sequence()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [("db".into(), 11), ("https".into(), 10), ("web".into(), 13)]
    );
    assert_eq!(
        summary(&sets),
        [
            ("db".into(), vec!["b".into()], String::new()),
            ("https".into(), vec!["a".into()], String::new()),
            ("web".into(), vec!["a".into()], String::new()),
        ]
    );
}

#[test]
fn an_evaluation_error_is_published_and_withdrawn() {
    let lua = json!({"group": "", "version": "v1", "kind": "Service", "evaluate":
        "function evaluate() if obj.metadata.labels.tier == 'bad' then error('bad tier') end \
         return {matching = true} end"});
    let mut ev = started(&[event_source("lua", lua, false)]);
    let sets = ev.on_change(&change(&service("a", "bad", 80)), 2);
    assert_eq!(sets.len(), 1);
    let failure = sets[0].to_set().failure_message;
    assert!(failure.contains("bad tier"), "{failure}");
    assert_eq!(
        summary(&ev.on_change(&change(&service("a", "web", 80)), 3)),
        [("lua".into(), vec!["a".into()], String::new())]
    );
}

#[test]
fn an_eventsource_change_reevaluates_cached_objects_and_a_removed_trigger_withdraws() {
    let mut ev = started(&[event_source("web", web_filter(), false)]);
    ev.on_change(&change(&service("a", "web", 80)), 2);
    ev.on_change(&change(&service("b", "db", 80)), 3);
    let db = json!({"group": "", "version": "v1", "kind": "Service",
        "labelFilters": [{"key": "tier", "operation": "Equal", "value": "db"}]});
    let update = ConfigUpdate {
        kind: "EventSource".into(),
        namespace: String::new(),
        name: "web".into(),
        object: Some(event_source("web", db, false)),
        sequence: 4,
    };
    assert_eq!(
        summary(&ev.on_config(&update)),
        [("web".into(), vec!["b".into()], String::new())]
    );
    let removal = ConfigUpdate {
        kind: "EventTrigger".into(),
        namespace: String::new(),
        name: "t-web".into(),
        object: None,
        sequence: 5,
    };
    let sets = ev.on_config(&removal);
    assert_eq!(sets.len(), 1);
    assert!(sets[0].to_set().removed);
    assert_eq!(ev.deployed_len(), 0);
    // Objects of a kind nobody watches any more change nothing.
    assert!(ev.on_change(&change(&service("c", "db", 80)), 6).is_empty());
}
