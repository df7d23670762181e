//! The stage on seed 000's NetworkPolicy trigger (`oneForEvent: true`), fed match units as the
//! evaluator publishes them: one unit per Service, rendered only when that Service's member
//! changed; a Service that leaves removes its unit; a failed evaluation keeps every unit and
//! misses nothing once it ends; a missed tombstone is found by the head.

use serde_json::{json, Value};
use sluice_domain::config::ConfigState;
use sluice_proto::v1 as pb;

use std::collections::BTreeMap;

use sluice_wire::match_units::{fold, member_hash, member_id_of, HeadOutcome};

use super::*;

const EVENT_SOURCE: &str =
    include_str!("../../../../examples/seed-000-networkpolicy/eventsource.yaml");
const TRIGGER: &str =
    include_str!("../../../../examples/seed-000-networkpolicy/eventbasedaddon.yaml");

fn stage() -> Stage {
    stage_with(|_| {})
}

/// The seed's stage with its trigger changed by `edit`.
fn stage_with(edit: impl Fn(&mut Value)) -> Stage {
    let mut config = ConfigState::default();
    let cluster = json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
        "metadata": {"name": "cluster-a", "namespace": "default", "labels": {"env": "fv"}},
        "status": {"ready": true}
    });
    config.apply("SveltosCluster", "default", "cluster-a", Some(&cluster));
    for text in [EVENT_SOURCE, TRIGGER] {
        for doc in serde_yaml::Deserializer::from_str(text) {
            let mut value: Value = serde::Deserialize::deserialize(doc).expect("seed YAML parses");
            if value["kind"] != "EventSource" {
                edit(&mut value);
            }
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

fn cluster() -> ClusterId {
    ClusterId {
        cluster_type: sluice_domain::cluster::ClusterType::Sveltos,
        namespace: "default".into(),
        name: "cluster-a".into(),
    }
}

/// What the evaluator publishes, emulated: the members of each new set that differ from the
/// last, then a head.
#[derive(Default)]
struct Evaluator {
    published: BTreeMap<String, pb::MatchMember>,
    sequence: u64,
}

impl Evaluator {
    fn units(&mut self, services: &[Value], failure: &str) -> Vec<(Unit, u64)> {
        let mut out = Vec::new();
        let mut next = BTreeMap::new();
        if failure.is_empty() {
            for service in services {
                let member = pb::MatchMember {
                    cluster: Some(sluice_wire::cluster_ref(&cluster())),
                    event_source: "sveltos-service".into(),
                    object: Some(sluice_wire::object_ref(service)),
                    resource: serde_json::to_vec(service).expect("json"),
                    present: true,
                    ..Default::default()
                };
                let name = service["metadata"]["name"]
                    .as_str()
                    .expect("named")
                    .to_string();
                next.insert(name, member);
            }
            for (name, old) in &self.published {
                if !next.contains_key(name) {
                    out.push(Unit::Member(pb::MatchMember {
                        present: false,
                        resource: Vec::new(),
                        ..old.clone()
                    }));
                }
            }
            for (name, member) in &next {
                if self.published.get(name) != Some(member) {
                    out.push(Unit::Member(member.clone()));
                }
            }
            self.published = next;
        }
        let mut digest = [0; 16];
        for member in self.published.values() {
            fold(&mut digest, &member_hash(member));
        }
        out.push(Unit::Head(pb::MatchHead {
            cluster: Some(sluice_wire::cluster_ref(&cluster())),
            event_source: "sveltos-service".into(),
            members: self.published.len() as u64,
            digest: digest.to_vec(),
            failure_message: failure.into(),
            ..Default::default()
        }));
        out.into_iter()
            .map(|unit| {
                self.sequence += 1;
                (unit, self.sequence)
            })
            .collect()
    }
}

/// Feeds units to the stage as the service does (one set's units together, a head closing
/// them) and returns what was published: (resource name or "" for the main unit, objects,
/// failure, removed).
fn feed(stage: &mut Stage, units: Vec<(Unit, u64)>) -> Vec<(String, usize, String, bool)> {
    let mut published = Vec::new();
    let mut change: Option<SetChange> = None;
    for (unit, sequence) in units {
        let member = match &unit {
            Unit::Member(m) => Some(member_id_of(m)),
            Unit::Head(_) => None,
        };
        let (key, applied) = stage
            .apply(unit, sequence)
            .expect("a unit of a known cluster");
        let group = change.get_or_insert_with(|| SetChange::new(&key));
        match applied {
            Applied::Member { changed: true } => group.add_members(&stage.sets, member),
            Applied::Member { changed: false } => {}
            Applied::Head(outcome) => {
                assert_ne!(outcome, HeadOutcome::Differs);
                group.head = true;
            }
        }
        if group.head {
            let group = change.take().expect("a group");
            published.extend(stage.recompute(Some(&group), sequence));
        }
    }
    published
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

    let mut evaluator = Evaluator::default();
    let (a, b, c) = (service("a", 80), service("b", 80), service("c", 80));
    let published = feed(
        &mut stage,
        evaluator.units(&[a.clone(), b.clone(), c.clone()], ""),
    );
    // A ClusterProfile and the instantiated ConfigMap for each Service; the main unit is
    // unchanged and not published again.
    assert_eq!(published, vec![unit("a", 2), unit("b", 2), unit("c", 2)]);

    // One Service changes: one unit is rendered and published.
    let b2 = service("b", 8080);
    assert_eq!(
        feed(
            &mut stage,
            evaluator.units(&[a.clone(), b2.clone(), c.clone()], "")
        ),
        vec![unit("b", 2)]
    );
    // Nothing changes: nothing is published.
    assert_eq!(
        feed(
            &mut stage,
            evaluator.units(&[a.clone(), b2.clone(), c.clone()], "")
        ),
        vec![]
    );

    // One Service leaves: its unit is removed.
    assert_eq!(
        feed(&mut stage, evaluator.units(&[a.clone(), b2.clone()], "")),
        vec![("c".to_string(), 0, String::new(), true)]
    );
    // Starting over from the same state publishes nothing.
    assert!(stage.recompute(None, 2).is_empty());
}

#[test]
fn a_failed_evaluation_keeps_every_unit_and_misses_nothing_after_it() {
    let mut stage = stage();
    stage.recompute(None, 1);
    let mut evaluator = Evaluator::default();
    let (a, b) = (service("a", 80), service("b", 80));
    feed(&mut stage, evaluator.units(&[a.clone(), b.clone()], ""));

    let failed = evaluator.units(&[], "eventsource sveltos-service: lua: boom");
    let published = feed(&mut stage, failed);
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
    let mut published = feed(&mut stage, evaluator.units(&[a.clone(), d.clone()], ""));
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

/// A reader that missed a tombstone (it expired while the renderer was away) re-reads the
/// set when the head disagrees, and the member that left loses its unit.
#[test]
fn a_missed_tombstone_is_found_by_the_head_and_its_unit_removed() {
    let mut stage = stage();
    stage.recompute(None, 1);
    let mut evaluator = Evaluator::default();
    let (a, b) = (service("a", 80), service("b", 80));
    feed(&mut stage, evaluator.units(&[a.clone(), b.clone()], ""));
    // "b" left; the renderer sees only the head (the tombstone expired).
    let units = evaluator.units(std::slice::from_ref(&a), "");
    let (head, sequence) = units.last().cloned().expect("a head");
    let key = (cluster(), "sveltos-service".to_string());
    assert_eq!(
        stage.apply(head, sequence).map(|(_, applied)| applied),
        Some(Applied::Head(HeadOutcome::Differs))
    );
    // Re-read from the stream: what it holds now is "a" only.
    let (a_member, a_sequence) = (evaluator.published["a"].clone(), 1);
    let changed = stage.sets.resync(&key, [(a_member, a_sequence)]);
    let mut change = SetChange::new(&key);
    change.add_members(&stage.sets, changed);
    change.head = true;
    let published: Vec<(String, bool)> = stage
        .recompute(Some(&change), sequence)
        .into_iter()
        .map(|s| (s.resource_name, s.removed))
        .collect();
    assert_eq!(published, [("b".to_string(), true)]);
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

/// A collection trigger (`oneForEvent: false`) renders over all members once the head closes
/// a burst, never per member.
#[test]
fn a_collection_is_rendered_once_per_burst_when_the_head_arrives() {
    let mut stage = stage_with(|object| {
        if object["kind"] == "ConfigMap" {
            object["data"]["networkpolicy.yaml"] = json!(
                "kind: ConfigMap\napiVersion: v1\nmetadata:\n  name: services\n  namespace: default\ndata:\n  count: \"{{ len .Resources }}\"\n"
            );
        } else {
            object["spec"]["oneForEvent"] = json!(false);
        }
    });
    stage.recompute(None, 1);
    let mut evaluator = Evaluator::default();
    let services: Vec<Value> = (0..5).map(|i| service(&format!("s{i}"), 80)).collect();
    let mut units = evaluator.units(&services, "");
    let head = units.pop().expect("a head");
    let mut rendered = Vec::new();
    for (unit, sequence) in units {
        let member = match &unit {
            Unit::Member(m) => Some(member_id_of(m)),
            Unit::Head(_) => None,
        };
        let (key, _) = stage.apply(unit, sequence).expect("known cluster");
        let mut change = SetChange::new(&key);
        change.add_members(&stage.sets, member);
        rendered.extend(stage.recompute(Some(&change), sequence));
    }
    assert!(
        rendered.is_empty(),
        "members alone render nothing: {rendered:?}"
    );
    let published = feed(&mut stage, vec![head]);
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].0, "", "the main unit");
    assert_eq!(
        published[0].1, 2,
        "a ClusterProfile and one rendering over all five: {published:?}"
    );
    assert_eq!(published[0].2, "", "{published:?}");
}

const SEED_004: &str = include_str!("../../../../examples/seed-004-cloudevents/eventtrigger.yaml");

/// Seed 004's trigger, deploying to cluster `default/workload` (`env: production`).
fn cloud_event_stage() -> Stage {
    let mut config = ConfigState::default();
    let cluster = json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
        "metadata": {"name": "workload", "namespace": "default", "labels": {"env": "production"}},
        "status": {"ready": true}
    });
    config.apply("SveltosCluster", "default", "workload", Some(&cluster));
    for doc in serde_yaml::Deserializer::from_str(SEED_004) {
        let value: Value = serde::Deserialize::deserialize(doc).expect("seed YAML parses");
        let field = |f: &str| value["metadata"][f].as_str().unwrap_or("").to_string();
        let kind = value["kind"].as_str().unwrap_or("").to_string();
        config.apply(&kind, &field("namespace"), &field("name"), Some(&value));
    }
    Stage::new(config, "projectsveltos")
}

/// The seed's login (or logout) of `user` as the evaluator matched it.
fn user_event(user: &str, logout: bool) -> pb::CloudEventMatch {
    let kind = if logout { "logout" } else { "login" };
    let event = json!({
        "specversion": "1.0", "type": format!("auth.example.com.{kind}"),
        "source": "auth.example.com", "id": format!("{user}-{kind}"), "subject": user,
        "data": {"message": format!("User {user} {kind}")}
    });
    pb::CloudEventMatch {
        cluster: Some(sluice_wire::cluster_ref(&ClusterId {
            cluster_type: sluice_domain::cluster::ClusterType::Sveltos,
            namespace: "default".into(),
            name: "workload".into(),
        })),
        event_source: "user-operation".into(),
        nats_subject: "user-operation".into(),
        event_json: serde_json::to_vec(&event).expect("json"),
        ..Default::default()
    }
}

#[test]
fn an_older_cloud_event_match_is_not_rendered_and_the_ack_floor_forgets_only_older_units() {
    let mut stage = cloud_event_stage();
    let users = 4096;
    for i in 0..users {
        let states = stage.cloud_event(&user_event(&format!("u{i}"), false), 10 + i);
        assert_eq!(states.len(), 1, "one unit per user");
        assert!(!states[0].objects.is_empty(), "{:?}", states[0]);
    }
    let logout = stage.cloud_event(&user_event("u0", true), 5000);
    assert!(logout.len() == 1 && logout[0].removed, "{logout:?}");
    assert!(
        stage.cloud_event(&user_event("u0", false), 10).is_empty(),
        "the login delivered again after the logout is stale"
    );
    assert!(stage.cloud_event_order().wants_pruning());

    // Every match still to come is above the floor: what is forgotten could supersede none.
    assert_eq!(
        stage.cloud_event_order().prune(Some(4200)),
        users as usize - 1
    );
    assert!(!stage.cloud_event_order().wants_pruning());
    assert!(
        stage.cloud_event(&user_event("u0", false), 4300).is_empty(),
        "the logout above the floor is remembered"
    );
    assert_eq!(stage.cloud_event(&user_event("u0", false), 6000).len(), 1);
    assert_eq!(stage.cloud_event(&user_event("u1", true), 6001).len(), 1);

    // A floor that could not be read forgets nothing.
    assert_eq!(stage.cloud_event_order().prune(None), 0);
}

/// The seed's login (or logout) of `user`, stored at `position` of the managed cluster's stream.
fn placed(user: &str, logout: bool, position: u64) -> pb::CloudEventMatch {
    pb::CloudEventMatch {
        origin: "jetstream:USERS:1".into(),
        origin_position: position,
        ..user_event(user, logout)
    }
}

#[test]
fn a_cloud_event_published_again_after_a_later_one_does_not_overwrite_it() {
    let mut stage = cloud_event_stage();
    // Stored at 79 and 92 in the managed stream; the login's publish was retried on the way
    // and reached the renderer after the logout, at a later sequence.
    let logout = stage.cloud_event(&placed("u20", true, 92), 10);
    assert!(logout.len() == 1 && logout[0].removed, "{logout:?}");
    assert_eq!(
        (
            logout[0].cloud_event_origin.as_str(),
            logout[0].cloud_event_position
        ),
        ("jetstream:USERS:1", 92),
        "the state says where its event stands"
    );
    assert!(
        stage.cloud_event(&placed("u20", false, 79), 11).is_empty(),
        "the older login is not rendered over the logout"
    );
    assert_eq!(stage.cloud_event(&placed("u20", false, 93), 12).len(), 1);

    // A renderer started on what the bus holds knows the logout's place.
    let mut restarted = cloud_event_stage();
    restarted.remember_published(&logout[0]);
    assert!(restarted
        .cloud_event(&placed("u20", false, 79), 1)
        .is_empty());
    assert_eq!(restarted.cloud_event(&placed("u20", false, 93), 2).len(), 1);
}
