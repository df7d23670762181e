//! Unit tests of the pure stage: what an object change, a batch and a configuration change
//! publish.

use serde_json::{json, Value};
use sluice_domain::config::ConfigState;
use sluice_proto::v1 as pb;
use sluice_wire::ConfigUpdate;

use sluice_wire::match_units::{Applied, HeadOutcome, MatchSets, Unit};

use super::{Evaluator, MatchOutput};

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
        sealed_object_json: Vec::new(),
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

/// A reader of the stage's outputs, as the renderer and the reporter read the MATCH stream.
#[derive(Default)]
struct Reader {
    sets: MatchSets,
}

/// (EventSource, names in the set once the head is read, failure message) per published head.
type Summary = Vec<(String, Vec<String>, String)>;

impl Reader {
    /// Reads a burst of outputs; summarises each head by the set it closes. Every head must
    /// agree with the members read before it.
    fn read(&mut self, outputs: &[MatchOutput]) -> Summary {
        let mut out = Vec::new();
        for (i, output) in outputs.iter().enumerate() {
            let unit = match output.clone() {
                MatchOutput::Member(m) => Unit::Member(m),
                MatchOutput::Head(h) => Unit::Head(h),
                MatchOutput::Purge { .. } => continue,
            };
            let Some((key, applied)) = self.sets.apply(unit, i as u64 + 1) else {
                continue;
            };
            if let Applied::Head(outcome) = applied {
                assert_ne!(outcome, HeadOutcome::Differs, "{outputs:#?}");
                let set = self.sets.assemble(&key).unwrap_or_default();
                let failure = match output {
                    MatchOutput::Head(h) => h.failure_message.clone(),
                    _ => String::new(),
                };
                out.push((
                    key.1.clone(),
                    set.matching.iter().map(|m| m.name.clone()).collect(),
                    failure,
                ));
            }
        }
        out
    }
}

/// The members an output list carries: (name, present).
fn members(outputs: &[MatchOutput]) -> Vec<(String, bool)> {
    member_fields(outputs, |m| m.present)
}

/// Each member an output list carries: its name and `field` of it.
fn member_fields<T>(
    outputs: &[MatchOutput],
    field: impl Fn(&pb::MatchMember) -> T,
) -> Vec<(String, T)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            MatchOutput::Member(m) => Some((
                m.object
                    .as_ref()
                    .map(|r| r.name.clone())
                    .unwrap_or_default(),
                field(m),
            )),
            _ => None,
        })
        .collect()
}

fn heads(outputs: &[MatchOutput]) -> Vec<&pb::MatchHead> {
    outputs
        .iter()
        .filter_map(|o| match o {
            MatchOutput::Head(h) => Some(h),
            _ => None,
        })
        .collect()
}

fn web_filter() -> Value {
    json!({"group": "", "version": "v1", "kind": "Service",
        "labelFilters": [{"key": "tier", "operation": "Equal", "value": "web"}]})
}

fn started(event_sources: &[Value]) -> (Evaluator, Reader) {
    let mut evaluator = Evaluator::new(config(event_sources));
    let boot = evaluator.recompute_all(1);
    assert_eq!(
        heads(&boot).len(),
        event_sources.len(),
        "every pair's head is published at boot"
    );
    let mut reader = Reader::default();
    reader.read(&boot);
    (evaluator, reader)
}

#[test]
fn only_changes_that_alter_a_set_publish_it() {
    let (mut ev, mut r) = started(&[event_source("web", web_filter(), false)]);
    let a = service("a", "web", 80);
    assert_eq!(
        r.read(&ev.on_change(&change(&a), 2)),
        [("web".into(), vec!["a".into()], String::new())]
    );
    // Still matching with other content: identities are unchanged, nothing to publish.
    assert!(ev
        .on_change(&change(&service("a", "web", 81)), 3)
        .is_empty());
    // Never matching: nothing to publish.
    assert!(ev.on_change(&change(&service("b", "db", 80)), 4).is_empty());
    let units = ev.on_change(&change(&service("c", "web", 80)), 5);
    assert_eq!(
        members(&units),
        [("c".into(), true)],
        "only the member that joined"
    );
    assert_eq!(
        r.read(&units),
        [("web".into(), vec!["a".into(), "c".into()], String::new())]
    );
    assert_eq!(heads(&units)[0].source_sequence, 5);
    let units = ev.on_change(&deletion("a"), 6);
    assert_eq!(members(&units), [("a".into(), false)], "a tombstone");
    assert_eq!(
        r.read(&units),
        [("web".into(), vec!["c".into()], String::new())]
    );
    assert_eq!(
        r.read(&ev.on_change(&change(&service("c", "db", 80)), 7)),
        [("web".into(), vec![], String::new())]
    );
}

/// One event costs one member and one head, however many objects already match.
#[test]
fn an_event_publishes_its_member_only_whatever_else_matches() {
    let (mut ev, mut r) = started(&[event_source("web", web_filter(), true)]);
    let batch: Vec<(pb::ResourceChange, u64)> = (0..2_000)
        .map(|i| (change(&service(&format!("s{i:04}"), "web", 80)), i + 2))
        .collect();
    let units = ev.on_changes(&batch);
    assert_eq!((members(&units).len(), heads(&units).len()), (2_000, 1));
    assert_eq!(r.read(&units)[0].1.len(), 2_000);
    let units = ev.on_change(&change(&service("s0500", "web", 81)), 5_000);
    assert_eq!(members(&units), [("s0500".into(), true)]);
    assert_eq!(heads(&units).len(), 1);
    assert_eq!(r.read(&units)[0].1.len(), 2_000);
    let units = ev.on_change(&deletion("s1000"), 5_001);
    assert_eq!(members(&units), [("s1000".into(), false)]);
    assert_eq!(r.read(&units)[0].1.len(), 1_999);
}

/// A restarted evaluator remembers what the stream holds and republishes only what differs.
#[test]
fn a_restart_republishes_only_what_differs() {
    let sources = [event_source("web", web_filter(), true)];
    let (mut ev, _) = started(&sources);
    let mut stream: Vec<MatchOutput> = Vec::new();
    for name in ["a", "b", "c"] {
        stream.extend(ev.on_change(&change(&service(name, "web", 80)), 2));
    }
    stream.extend(ev.on_change(&deletion("b"), 3));
    let mut restarted = Evaluator::new(config(&sources));
    for output in &stream {
        let unit = match output.clone() {
            MatchOutput::Member(m) => Unit::Member(m),
            MatchOutput::Head(h) => Unit::Head(h),
            MatchOutput::Purge { .. } => continue,
        };
        restarted.remember_published(&unit);
    }
    for (name, port) in [("a", 80), ("c", 80)] {
        restarted.load_object(&change(&service(name, "web", port)));
    }
    assert_eq!(restarted.recompute_all(10), [], "nothing differs");
    let mut restarted = Evaluator::new(config(&sources));
    for output in &stream {
        if let MatchOutput::Member(m) = output {
            restarted.remember_published(&Unit::Member(m.clone()));
        }
        if let MatchOutput::Head(h) = output {
            restarted.remember_published(&Unit::Head(h.clone()));
        }
    }
    // While it was down, "a" changed and "c" went away.
    restarted.load_object(&change(&service("a", "web", 81)));
    let units = restarted.recompute_all(10);
    assert_eq!(members(&units), [("c".into(), false), ("a".into(), true)]);
    assert_eq!(heads(&units).len(), 1);
}

/// A member whose object is over the bus's payload limit is published as its own failure.
#[test]
fn an_object_too_large_for_a_message_is_its_members_failure() {
    let mut ev =
        Evaluator::new(config(&[event_source("web", web_filter(), true)])).with_payload_limit(400);
    ev.recompute_all(1);
    let mut big = service("big", "web", 80);
    big["metadata"]["annotations"] = json!({"note": "x".repeat(1_000)});
    let units = ev.on_changes(&[(change(&big), 2), (change(&service("small", "web", 80)), 3)]);
    let failures = member_fields(&units, |m| m.failure_message.clone());
    assert_eq!(failures[1], ("small".into(), String::new()));
    assert_eq!(failures[0].0, "big");
    assert!(
        failures[0].1.starts_with("Service default/big takes ")
            && failures[0].1.contains("over the 400 bytes"),
        "{failures:?}"
    );
}
#[test]
fn collected_contents_republish_when_a_matching_object_changes() {
    let (mut ev, _) = started(&[event_source("web", web_filter(), true)]);
    assert_eq!(ev.on_change(&change(&service("a", "web", 80)), 2).len(), 2);
    let units = ev.on_change(&change(&service("a", "web", 81)), 3);
    assert_eq!(members(&units), [("a".into(), true)]);
    let MatchOutput::Member(member) = &units[0] else {
        panic!("a member first: {units:?}")
    };
    let collected: Value = serde_json::from_slice(&member.resource).expect("json");
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
    let (mut ev, mut r) = started(&sources);
    let batch = vec![
        (change(&service("a", "web", 443)), 10),
        (change(&service("b", "db", 80)), 11),
        (change(&service("c", "web", 80)), 12),
        (deletion("c"), 13),
        (change(&service("d", "other", 8080)), 14),
    ];
    let units = ev.on_changes(&batch);
    // The service parses a batch before the stage sees it: same units.
    let parsed: Vec<super::Parsed> = batch
        .iter()
        .map(|(change, sequence)| super::Parsed::new(change.clone(), *sequence))
        .collect();
    assert_eq!(started(&sources).0.on_parsed(&parsed), units);
    let mut got: Vec<_> = heads(&units)
        .iter()
        .map(|h| (h.event_source.clone(), h.source_sequence))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [("db".into(), 11), ("https".into(), 10), ("web".into(), 13)]
    );
    let mut summary = r.read(&units);
    summary.sort();
    assert_eq!(
        summary,
        [
            ("db".into(), vec!["b".into()], String::new()),
            ("https".into(), vec!["a".into()], String::new()),
            ("web".into(), vec!["a".into()], String::new()),
        ]
    );
}

/// A failing evaluation is the head's failure; member changes wait until it is gone, so a
/// failure never withdraws what exists.
#[test]
fn an_evaluation_error_is_published_and_withdrawn() {
    let lua = json!({"group": "", "version": "v1", "kind": "Service", "evaluate":
        "function evaluate() if obj.metadata.labels.tier == 'bad' then error('bad tier') end \
         return {matching = obj.metadata.labels.tier == 'web'} end"});
    let (mut ev, mut r) = started(&[event_source("lua", lua, false)]);
    r.read(&ev.on_change(&change(&service("b", "web", 80)), 2));
    let units = ev.on_change(&change(&service("a", "bad", 80)), 3);
    assert_eq!(members(&units), []);
    let summary = r.read(&units);
    assert!(summary[0].2.contains("bad tier"), "{summary:?}");
    // While it fails, "b" leaving is held back.
    let units = ev.on_change(&deletion("b"), 4);
    assert_eq!(members(&units), []);
    assert_eq!(
        r.read(&ev.on_change(&change(&service("a", "web", 80)), 5)),
        [("lua".into(), vec!["a".into()], String::new())]
    );
}

/// An object that is not JSON (only a hostile publisher sends one) is its set's failure, not
/// the object's deletion: what matched stays, and a readable state of it clears the failure.
#[test]
fn an_object_that_is_not_json_is_a_failure_not_a_deletion() {
    let (mut ev, mut r) = started(&[event_source("web", web_filter(), false)]);
    r.read(&ev.on_change(&change(&service("a", "web", 80)), 2));
    let mut broken = change(&service("a", "web", 80));
    broken.object_json = b"{\"metadata\": ".to_vec();
    let units = ev.on_change(&broken, 3);
    assert_eq!(members(&units), []);
    let summary = r.read(&units);
    assert!(
        summary[0]
            .2
            .contains("default/a: the object is not a JSON document"),
        "{summary:?}"
    );
    assert_eq!(
        r.read(&ev.on_change(&change(&service("a", "web", 81)), 4)),
        [("web".into(), vec!["a".into()], String::new())]
    );
}

#[test]
fn an_eventsource_change_reevaluates_cached_objects_and_a_removed_trigger_withdraws() {
    let (mut ev, mut r) = started(&[event_source("web", web_filter(), false)]);
    r.read(&ev.on_change(&change(&service("a", "web", 80)), 2));
    r.read(&ev.on_change(&change(&service("b", "db", 80)), 3));
    let db = json!({"group": "", "version": "v1", "kind": "Service",
        "labelFilters": [{"key": "tier", "operation": "Equal", "value": "db"}]});
    let update = ConfigUpdate {
        kind: "EventSource".into(),
        namespace: String::new(),
        name: "web".into(),
        object: Some(event_source("web", db, false)),
        sequence: 4,
        ..ConfigUpdate::default()
    };
    assert_eq!(
        r.read(&ev.on_config(&update)),
        [("web".into(), vec!["b".into()], String::new())]
    );
    let removal = ConfigUpdate {
        kind: "EventTrigger".into(),
        namespace: String::new(),
        name: "t-web".into(),
        object: None,
        sequence: 5,
        ..ConfigUpdate::default()
    };
    let units = ev.on_config(&removal);
    assert_eq!(heads(&units).len(), 1);
    assert!(heads(&units)[0].removed);
    assert!(
        matches!(&units[1], MatchOutput::Purge { event_source, .. } if event_source == "web"),
        "{units:?}"
    );
    assert_eq!(ev.deployed_len(), 0);
    // Objects of a kind nobody watches any more change nothing.
    assert!(ev.on_change(&change(&service("c", "db", 80)), 6).is_empty());
}

#[test]
fn a_cluster_registered_again_starts_from_what_it_holds_then() {
    let (mut ev, mut r) = started(&[event_source("web", web_filter(), false)]);
    r.read(&ev.on_change(&change(&service("a", "web", 80)), 2));
    let cluster = |object: Option<Value>, sequence| ConfigUpdate {
        kind: "SveltosCluster".into(),
        namespace: "mgmt".into(),
        name: "c1".into(),
        object,
        sequence,
        ..ConfigUpdate::default()
    };
    let gone = ev.on_config(&cluster(None, 3));
    assert!(heads(&gone).iter().all(|h| h.removed), "{gone:?}");
    r.read(&gone);
    // Registered again: what it held before (`a`, deleted meanwhile) is not evaluated again;
    // what it holds now comes from the watcher's new list.
    let registered = json!({"apiVersion": "lib.projectsveltos.io/v1beta1",
        "kind": "SveltosCluster",
        "metadata": {"name": "c1", "namespace": "mgmt", "labels": {"env": "prod"}},
        "status": {"ready": true}});
    assert_eq!(
        r.read(&ev.on_config(&cluster(Some(registered), 4))),
        [("web".into(), vec![], String::new())]
    );
    assert_eq!(
        r.read(&ev.on_change(&change(&service("b", "web", 80)), 5)),
        [("web".into(), vec!["b".into()], String::new())]
    );
}
