//! The stage on seed 000's NetworkPolicy trigger (`oneForEvent: true`): one unit per Service,
//! rendered only when that Service changed; a Service that leaves removes its unit; a failed
//! evaluation keeps every unit and misses nothing once it ends.

use serde_json::{json, Value};
use sluice_domain::config::ConfigState;
use sluice_proto::v1 as pb;

use super::*;

const EVENT_SOURCE: &str =
    include_str!("../../../../examples/seed-000-networkpolicy/eventsource.yaml");
const TRIGGER: &str =
    include_str!("../../../../examples/seed-000-networkpolicy/eventbasedaddon.yaml");

fn stage() -> Stage {
    let mut config = ConfigState::default();
    let cluster = json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
        "metadata": {"name": "cluster-a", "namespace": "default", "labels": {"env": "fv"}},
        "status": {"ready": true}
    });
    config.apply("SveltosCluster", "default", "cluster-a", Some(&cluster));
    for text in [EVENT_SOURCE, TRIGGER] {
        for doc in serde_yaml::Deserializer::from_str(text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("seed YAML parses");
            let field = |f: &str| value["metadata"][f].as_str().unwrap_or("").to_string();
            let kind = value["kind"].as_str().unwrap_or("").to_string();
            config.apply(&kind, &field("namespace"), &field("name"), Some(&value));
        }
    }
    Stage::new(config, "projectsveltos")
}

fn service(name: &str, port: u16) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "default", "labels": {"sveltos": "fv"}},
           "spec": {"selector": {"app": name}, "ports": [{"port": port}]}})
}

fn set(services: &[Value]) -> pb::MatchSet {
    pb::MatchSet {
        cluster: Some(sluice_wire::cluster_ref(&ClusterId {
            cluster_type: sluice_domain::cluster::ClusterType::Sveltos,
            namespace: "default".into(),
            name: "cluster-a".into(),
        })),
        event_source: "sveltos-service".into(),
        matching: services.iter().map(sluice_wire::object_ref).collect(),
        resources: services
            .iter()
            .map(|s| serde_json::to_vec(s).expect("json"))
            .collect(),
        ..Default::default()
    }
}

/// Records `report` and returns what was published: (resource name or "" for the main unit,
/// objects, failure, removed).
fn step(stage: &mut Stage, report: pb::MatchSet) -> Vec<(String, usize, String, bool)> {
    let change = stage
        .set_report(report)
        .expect("a report of a known cluster");
    stage
        .recompute(Some(&change), 1)
        .into_iter()
        .map(|s| {
            (
                s.resource_name,
                s.objects.len(),
                s.failure_message,
                s.removed,
            )
        })
        .collect()
}

fn unit(name: &str, objects: usize) -> (String, usize, String, bool) {
    (name.to_string(), objects, String::new(), false)
}

#[test]
fn each_resource_is_its_own_unit_rendered_only_when_it_changes() {
    let mut stage = stage();
    // The pair's main unit exists before anything matches, and holds no objects.
    let start = stage.recompute(None, 1);
    assert_eq!(start.len(), 1);
    assert!(start[0].resource_name.is_empty() && start[0].objects.is_empty());

    let (a, b, c) = (service("a", 80), service("b", 80), service("c", 80));
    let published = step(&mut stage, set(&[a.clone(), b.clone(), c.clone()]));
    // A ClusterProfile and the instantiated ConfigMap for each Service; the main unit is
    // unchanged and not published again.
    assert_eq!(published, vec![unit("a", 2), unit("b", 2), unit("c", 2)]);

    // One Service changes: one unit is rendered and published.
    let b2 = service("b", 8080);
    assert_eq!(
        step(&mut stage, set(&[a.clone(), b2.clone(), c.clone()])),
        vec![unit("b", 2)]
    );
    // Nothing changes: nothing is published.
    assert_eq!(
        step(&mut stage, set(&[a.clone(), b2.clone(), c.clone()])),
        vec![]
    );

    // One Service leaves: its unit is removed.
    assert_eq!(
        step(&mut stage, set(&[a.clone(), b2.clone()])),
        vec![("c".to_string(), 0, String::new(), true)]
    );
    // Starting over from the same state publishes nothing.
    assert!(stage.recompute(None, 2).is_empty());
}

#[test]
fn a_failed_evaluation_keeps_every_unit_and_misses_nothing_after_it() {
    let mut stage = stage();
    stage.recompute(None, 1);
    let (a, b) = (service("a", 80), service("b", 80));
    step(&mut stage, set(&[a.clone(), b.clone()]));

    let mut failed = set(&[]);
    failed.failure_message = "eventsource sveltos-service: lua: boom".into();
    let published = step(&mut stage, failed);
    assert_eq!(
        published,
        vec![(
            String::new(),
            0,
            "eventsource sveltos-service: lua: boom".to_string(),
            false
        )],
        "only the main unit says so; no resource unit is withdrawn"
    );

    // Recovered: b left and d joined while it failed; a is unchanged and not rendered again.
    let d = service("d", 80);
    let mut published = step(&mut stage, set(&[a.clone(), d.clone()]));
    published.sort();
    assert_eq!(
        published,
        vec![
            unit("", 0),
            ("b".to_string(), 0, String::new(), true),
            unit("d", 2),
        ]
    );
}

#[test]
fn member_diff_names_joined_changed_and_left_members() {
    let (a, b, c) = (service("a", 80), service("b", 80), service("c", 80));
    let before = set(&[a.clone(), b.clone()]);
    let after = set(&[a.clone(), service("b", 81), c.clone()]);
    let diff = member_diff(Some(&before), Some(&after));
    let key = |n: &str| ("default".to_string(), n.to_string());
    assert_eq!(diff.changed, vec![key("b"), key("c")]);
    assert_eq!(diff.removed, Vec::<Member>::new());
    let diff = member_diff(Some(&after), None);
    assert_eq!(diff.changed, Vec::<Member>::new());
    assert_eq!(diff.removed, vec![key("a"), key("b"), key("c")]);
}

#[test]
fn a_trigger_naming_an_event_source_that_does_not_exist_fails_until_it_does() {
    let mut stage = stage();
    let event_source = stage.config.event_sources.remove("sveltos-service");
    let start = stage.recompute(None, 1);
    assert_eq!(start.len(), 1);
    assert_eq!(
        start[0].status_message,
        "eventtrigger service-network-policy: spec.eventSourceName: eventsource \"sveltos-service\" does not exist"
    );
    assert_eq!(
        start[0].failure_message, "",
        "what was deployed is withdrawn"
    );
    stage.config.event_sources.insert(
        "sveltos-service".into(),
        event_source.expect("the seed's EventSource"),
    );
    let fixed = stage.recompute(None, 2);
    assert_eq!(fixed.len(), 1);
    assert_eq!(fixed[0].status_message, "");
}
