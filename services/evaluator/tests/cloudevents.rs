//! The evaluator's CloudEvent path against a real nats-server: seed 004's configuration on the
//! config stream, `CloudEventReceived` in, `CloudEventMatch` out only for the EventSources
//! deployed to the event's cluster whose criteria select it; a restart publishes nothing twice.

use std::time::Duration;

use prost::Message as _;
use serde_json::{json, Value};
use sluice_bus::{topology, Bus};
use sluice_proto::v1 as pb;
use sluice_testkit::{wait_for, NatsServer};

#[path = "common/pipeline.rs"]
mod common;
use common::{cluster, config, publish, start_evaluator};

const DEADLINE: Duration = Duration::from_secs(30);
/// The consumer's ack wait (30 s) and a margin.
const AFTER_RESTART: Duration = Duration::from_secs(45);

/// Seed 004 (EventSource `user-operation`, EventTrigger `manage-namespace` on env: production),
/// plus an EventSource that selects only logins and one deployed nowhere.
async fn seed_config(bus: &Bus) -> anyhow::Result<()> {
    for (name, env) in [("prod", "production"), ("dev", "dev")] {
        config(
            bus,
            "SveltosCluster",
            "default",
            name,
            json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
            "metadata": {"name": name, "namespace": "default", "labels": {"env": env}},
            "status": {"ready": true}}),
        )
        .await?;
    }
    let sources = [
        (
            "user-operation",
            json!([{"subject": "user-operation", "cloudEventSource": "auth.example.com"}]),
        ),
        ("logins", json!([{"cloudEventType": "\\.login$"}])),
        ("undeployed", json!([{}])),
    ];
    for (name, criteria) in sources {
        config(
            bus,
            "EventSource",
            "",
            name,
            json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
            "metadata": {"name": name}, "spec": {"messagingMatchCriteria": criteria}}),
        )
        .await?;
    }
    for (trigger, source) in [
        ("manage-namespace", "user-operation"),
        ("count-logins", "logins"),
    ] {
        config(bus, "EventTrigger", "", trigger, json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": trigger},
            "spec": {"sourceClusterSelector": {"matchLabels": {"env": "production"}},
                     "eventSourceName": source, "oneForEvent": true,
                     "cloudEventAction": "{{if eq .CloudEvent.type \"auth.example.com.logout\"}}Delete{{else}}Create{{end}}",
                     "policyRefs": [{"name": "namespace", "namespace": "default", "kind": "ConfigMap"}]}})).await?;
    }
    Ok(())
}

fn event(event_type: &str, id: &str) -> Value {
    json!({"specversion": "1.0", "type": event_type, "source": "auth.example.com", "id": id,
           "subject": "mgianluc", "datacontenttype": "application/json",
           "data": {"message": format!("User mgianluc {event_type}")}})
}

/// Publishes one CloudEventReceived as the watcher would; `key` makes its message id unique.
async fn receive(
    bus: &Bus,
    cluster_name: &str,
    subject: &str,
    event: &Value,
    key: &str,
) -> anyhow::Result<()> {
    let id = cluster(cluster_name);
    let message = pb::CloudEventReceived {
        cluster: Some(sluice_wire::cluster_ref(&id)),
        subject: subject.into(),
        event_json: serde_json::to_vec(event)?,
        ..Default::default()
    };
    let tokens = sluice_wire::cluster_tokens(&id);
    publish(
        bus,
        topology::cloudevent_subject(&tokens),
        key,
        message.encode_to_vec(),
    )
    .await
}

/// Every CloudEventMatch stored in the CEMATCH stream, in order.
async fn matches(bus: &Bus) -> anyhow::Result<Vec<pb::CloudEventMatch>> {
    let mut stream = bus.jetstream().get_stream(topology::CEMATCH.name).await?;
    let state = stream.info().await?.state.clone();
    let mut out = Vec::new();
    if state.messages == 0 {
        return Ok(out);
    }
    for sequence in state.first_sequence..=state.last_sequence {
        let message = stream.get_raw_message(sequence).await?;
        out.push(pb::CloudEventMatch::decode(message.payload)?);
    }
    Ok(out)
}

fn summary(m: &pb::CloudEventMatch) -> (String, String, String, String) {
    let event: Value = serde_json::from_slice(&m.event_json).unwrap_or(Value::Null);
    let cluster = m
        .cluster
        .as_ref()
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let id = event["id"].as_str().unwrap_or_default().to_string();
    (cluster, m.event_source.clone(), m.nats_subject.clone(), id)
}

/// Waits until `count` matches of the event with `id` are stored; everything published before
/// them is then stored too, because the evaluator publishes in input order.
async fn until_seen(bus: &Bus, id: &str, count: usize) -> anyhow::Result<Vec<pb::CloudEventMatch>> {
    until_seen_within(bus, id, count, DEADLINE).await
}

/// [`until_seen`] with its own deadline. One event matched by two EventSources is two matches,
/// which may be stored one after the other: waiting for the first alone raced the second.
async fn until_seen_within(
    bus: &Bus,
    id: &str,
    count: usize,
    deadline: Duration,
) -> anyhow::Result<Vec<pb::CloudEventMatch>> {
    wait_for(
        &format!("{count} matches of event {id}"),
        deadline,
        || async {
            let all = matches(bus).await.ok()?;
            let seen = all.iter().filter(|m| summary(m).3 == id).count();
            (seen >= count).then_some(all)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_deployed_selecting_event_sources_match() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    seed_config(&bus).await?;
    let (token, task) = start_evaluator(&nats.url());

    let login = event("auth.example.com.login", "10001");
    let logout = event("auth.example.com.logout", "10001");
    receive(&bus, "prod", "user-operation", &login, "1").await?;
    // Same events in a cluster no trigger selects, and on a subject user-operation ignores.
    receive(&bus, "dev", "user-operation", &login, "2").await?;
    receive(
        &bus,
        "prod",
        "other-subject",
        &event("auth.example.com.logout", "20002"),
        "3",
    )
    .await?;
    // Seed 004 sends the logout with the same source and id as the login: it is a new event.
    receive(&bus, "prod", "user-operation", &logout, "4").await?;
    let marker = event("auth.example.com.login", "marker");
    receive(&bus, "prod", "user-operation", &marker, "5").await?;

    let all = until_seen(&bus, "marker", 2).await?;
    let got: Vec<_> = all.iter().map(summary).collect();
    let want = |es: &str, subject: &str, id: &str| {
        (
            "prod".to_string(),
            es.to_string(),
            subject.to_string(),
            id.to_string(),
        )
    };
    assert_eq!(
        got,
        [
            want("logins", "user-operation", "10001"),
            want("user-operation", "user-operation", "10001"),
            want("user-operation", "user-operation", "10001"),
            want("logins", "user-operation", "marker"),
            want("user-operation", "user-operation", "marker"),
        ]
    );
    let logout_match = &all[2];
    assert_eq!(
        serde_json::from_slice::<Value>(&logout_match.event_json)?,
        logout
    );
    assert_eq!(
        logout_match.cluster.as_ref().map(|c| c.namespace.as_str()),
        Some("default")
    );
    assert!(logout_match.source_sequence > 0);

    // A restart resumes the durable consumer: nothing already matched is published again.
    token.cancel();
    task.await??;
    let (token, task) = start_evaluator(&nats.url());
    receive(
        &bus,
        "prod",
        "user-operation",
        &event("auth.example.com.login", "after"),
        "6",
    )
    .await?;
    // The first evaluator closed its connection, but under load the server can still hand this
    // event to a pull request it left behind; JetStream then redelivers it after the consumer's
    // ack wait (30 s), which is the bound at-least-once delivery gives across a restart
    // (`crates/bus/tests/handover.rs`).
    let all = until_seen_within(&bus, "after", 2, AFTER_RESTART).await?;
    assert_eq!(
        all.len(),
        7,
        "{:?}",
        all.iter().map(summary).collect::<Vec<_>>()
    );
    token.cancel();
    task.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_cloudevents_are_dead_lettered_and_do_not_block() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    seed_config(&bus).await?;
    let (token, task) = start_evaluator(&nats.url());
    receive(
        &bus,
        "prod",
        "user-operation",
        &json!({"specversion": "1.0", "id": "x"}),
        "bad",
    )
    .await?;
    receive(
        &bus,
        "prod",
        "user-operation",
        &event("auth.example.com.login", "good"),
        "good",
    )
    .await?;
    let all = until_seen(&bus, "good", 2).await?;
    assert_eq!(all.len(), 2, "only the valid event matched");
    let dead = wait_for("dead letter", DEADLINE, || async {
        let mut stream = bus.jetstream().get_stream(topology::DEAD.name).await.ok()?;
        let state = stream.info().await.ok()?.state.clone();
        (state.messages > 0).then_some(state.first_sequence)
    })
    .await?;
    let stream = bus.jetstream().get_stream(topology::DEAD.name).await?;
    let message = stream.get_raw_message(dead).await?;
    let reason = message
        .headers
        .get(topology::ERROR_HEADER)
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    assert!(
        reason.contains("required attribute source is missing"),
        "{reason}"
    );
    token.cancel();
    task.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_regex_is_a_load_error_reported_for_the_event_source() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    seed_config(&bus).await?;
    config(&bus, "EventSource", "", "user-operation", json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
        "metadata": {"name": "user-operation"},
        "spec": {"messagingMatchCriteria": [{"subject": "user-operation"}, {"cloudEventType": "login("}]}}))
        .await?;
    let (token, task) = start_evaluator(&nats.url());
    // The EventSource's match head carries the error, naming the EventSource, field and index.
    let subject = topology::match_subject(
        &sluice_wire::cluster_tokens(&cluster("prod")),
        "user-operation",
    );
    let failure = wait_for("match head with the load error", DEADLINE, || async {
        let heads = bus.replay_state(topology::MATCH, &subject).await.ok()?;
        let sluice_wire::match_units::Unit::Head(head) =
            sluice_wire::match_units::decode(heads.last()?, None).ok()?
        else {
            return None;
        };
        (!head.failure_message.is_empty()).then_some(head.failure_message)
    })
    .await?;
    assert_eq!(
        failure,
        "eventsource user-operation: spec.messagingMatchCriteria[1].cloudEventType: invalid regular expression \"login(\": unclosed group"
    );
    // It selects no CloudEvent; the other EventSource still does.
    receive(
        &bus,
        "prod",
        "user-operation",
        &event("auth.example.com.login", "10001"),
        "1",
    )
    .await?;
    let all = until_seen(&bus, "10001", 1).await?;
    let names: Vec<_> = all.iter().map(|m| m.event_source.as_str()).collect();
    assert_eq!(names, ["logins"]);
    token.cancel();
    task.await??;
    Ok(())
}
