//! The watcher's CloudEvent path, nothing mocked: the API test server holds the management
//! cluster (seed 004's EventSource and EventTrigger) and the managed cluster `production` with
//! its `sveltos-nats` Secret; a separate nats-server with user `admin` / `my-password` stands for
//! the managed cluster's NATS; the watcher runs as its own process against the sluice bus.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sluice_bus::topology;
use sluice_proto::v1 as pb;
use sluice_testkit::{free_port, wait_for, NatsServer};

#[path = "cloudevents/fixture.rs"]
mod fixture;

use fixture::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_core_nats_events_reach_the_bus_and_a_changed_secret_reconnects(
) -> anyhow::Result<()> {
    let mut fx = Fixture::start().await?;
    // The seed's Secret, pointed at this test's NATS.
    fx.nats_secret(&json!({"nats": {"configuration": {
        "url": fx.managed_nats.url(), "subjects": ["user-operation"], "authorization": Fixture::auth()}}}))
        .await?;
    fx.start_watcher()?;
    let nats = fx.managed_client().await?;
    fx.wait_subscribed(&nats, "user-operation").await?;

    nats.publish("user-operation", SEED_LOGIN.into()).await?;
    nats.flush().await?;
    let (received, event) = fx
        .wait_event("the seed's login event", |e| {
            e["type"] == "auth.example.com.login"
        })
        .await?;
    assert_eq!(
        event,
        serde_json::from_str::<Value>(SEED_LOGIN)?,
        "the exact event"
    );
    assert_eq!(received.subject, "user-operation");
    let cluster = received.cluster.clone().expect("cluster");
    assert_eq!(
        (cluster.namespace.as_str(), cluster.name.as_str()),
        ("default", CLUSTER)
    );
    assert_eq!(cluster.r#type, pb::ClusterType::Sveltos as i32);

    // Only the sveltos-nats Secret was read and watched in the managed cluster: no Secret
    // access beyond it, the least a cluster admin has to grant.
    let secrets: Vec<_> = fx
        .server
        .audit(CLUSTER)
        .into_iter()
        .filter(|e| e.path.ends_with("/secrets") || e.path.contains("/secrets/"))
        .filter(|e| !e.query.contains("fieldManager=test")) // the test's own writes
        .collect();
    assert!(
        secrets.iter().any(|e| e.query.contains("watch=true")),
        "no watch of the Secret: {secrets:?}"
    );
    for request in &secrets {
        let one_secret = request.path == "/api/v1/namespaces/projectsveltos/secrets/sveltos-nats"
            || (request.path == "/api/v1/namespaces/projectsveltos/secrets"
                && request
                    .query
                    .contains("fieldSelector=metadata.name%3Dsveltos-nats"));
        assert!(
            one_secret && request.method == "GET",
            "the watcher read more than its Secret: {request:?}"
        );
    }

    // The logout has the same source and id as the login: it is a new event all the same.
    let logout = SEED_LOGIN
        .replace("auth.example.com.login", "auth.example.com.logout")
        .replace("login\"", "logout\"");
    nats.publish("user-operation", logout.clone().into())
        .await?;
    nats.flush().await?;
    let (_, event) = fx
        .wait_event("the seed's logout event", |e| {
            e["type"] == "auth.example.com.logout"
        })
        .await?;
    assert_eq!(event, serde_json::from_str::<Value>(&logout)?);

    // A malformed message is rejected (its dead letter names the cluster), the next one still
    // goes through.
    nats.publish("user-operation", "not a cloudevent".into())
        .await?;
    let binary = {
        let mut headers = async_nats::HeaderMap::new();
        for (k, v) in [
            ("ce-specversion", "1.0"),
            ("ce-id", "b1"),
            ("ce-source", "auth.example.com"),
            ("ce-type", "auth.example.com.login"),
            ("ce-subject", "binary-user"),
            ("content-type", "application/json"),
        ] {
            headers.insert(k, v);
        }
        headers
    };
    nats.publish_with_headers("user-operation", binary, r#"{"message":"binary"}"#.into())
        .await?;
    nats.flush().await?;
    let (_, event) = fx
        .wait_event("the binary-mode event", |e| e["id"] == "b1")
        .await?;
    assert_eq!(event["subject"], "binary-user");
    assert_eq!(event["data"], json!({"message": "binary"}));
    let all = fx.received().await?;
    assert!(all
        .iter()
        .all(|r| serde_json::from_slice::<Value>(&r.event_json).is_ok()));
    // Each keeps its place in the order its subscription received them (ADR 0049), the
    // rejected message's place left out.
    let places: Vec<u64> = all.iter().map(|r| r.origin_position).collect();
    let gaps: Vec<u64> = places.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    assert_eq!(
        (
            places.first(),
            gaps.iter().filter(|g| **g != 1).collect::<Vec<_>>()
        ),
        (Some(&1), vec![&2]),
        "{places:?}"
    );
    assert!(
        all.iter()
            .all(|r| r.origin == all[0].origin && r.origin.starts_with("core:")),
        "one subscription, one origin: {:?}",
        all.iter().map(|r| r.origin.clone()).collect::<Vec<_>>()
    );
    let letter = last_dead_letter(&fx).await?;
    assert_eq!(letter.payload, bytes::Bytes::from("not a cloudevent"));
    assert_eq!(
        letter.headers.get("Sluice-Cluster").map(|v| v.as_str()),
        Some("sveltos:default/production")
    );

    // A changed Secret reconnects without a restart: the new subject is heard, the old is not.
    fx.nats_secret(&json!({"nats": {"configuration": {
        "url": fx.managed_nats.url(), "subjects": ["user-operation-v2"], "authorization": Fixture::auth()}}}))
        .await?;
    fx.wait_subscribed(&nats, "user-operation-v2").await?;
    let before = fx.received().await?.len();
    nats.publish(
        "user-operation",
        SEED_LOGIN.replace("10001", "old-subject").into(),
    )
    .await?;
    nats.publish(
        "user-operation-v2",
        SEED_LOGIN.replace("10001", "new-subject").into(),
    )
    .await?;
    nats.flush().await?;
    fx.wait_event("event on the new subject", |e| e["id"] == "new-subject")
        .await?;
    let after = fx.received().await?;
    assert_ne!(
        after[before].origin, all[0].origin,
        "a new subscription starts another order"
    );
    assert!(
        after[before..]
            .iter()
            .all(|r| r.subject == "user-operation-v2"),
        "nothing from the unsubscribed subject: {:?}",
        after[before..]
            .iter()
            .map(|r| r.subject.clone())
            .collect::<Vec<_>>()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_watcher_killed_midway_loses_nothing_and_publishes_nothing_twice(
) -> anyhow::Result<()> {
    const EVENTS: usize = 600;
    let mut fx = Fixture::start().await?;
    let js = fx.jetstream_users().await?;
    let publish = |range: std::ops::Range<usize>| {
        let js = js.clone();
        async move {
            let mut acks = Vec::new();
            for i in range {
                // Same source and id for all, as seed 004's login and logout: only the stored
                // message identifies a delivery.
                let event = SEED_LOGIN.replace("User mgianluc login", &format!("event-{i}"));
                acks.push(js.publish("user-operation", event.into()).await?);
            }
            for ack in acks {
                ack.await?;
            }
            anyhow::Ok(())
        }
    };
    let stream = js.get_stream("USERS").await?;
    let consumer_name = format!(
        "sluice-{}",
        topology::encode_token("sveltos.default.production")
    );
    let consumer_state = || async {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            stream.get_consumer(&consumer_name).await.ok()?;
        let info = consumer.info().await.ok()?;
        Some((info.num_pending, info.num_ack_pending))
    };

    publish(0..EVENTS / 3).await?;
    fx.start_watcher()?;
    wait_for("first third forwarded", DEADLINE, || async {
        fx.received().await.ok().filter(|r| r.len() >= EVENTS / 3)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;

    // The bus goes away: the watcher receives the next events but cannot store them, so it
    // must not ack them. It is killed with those deliveries in flight.
    fx.bus_nats.stop();
    publish(EVENTS / 3..2 * EVENTS / 3).await?;
    wait_for("deliveries in flight, unacked", DEADLINE, || async {
        consumer_state().await.filter(|(_, unacked)| *unacked > 0)
    })
    .await?;
    fx.kill_watcher();
    publish(2 * EVENTS / 3..EVENTS).await?;
    fx.bus_nats.start_again().await?;
    fx.start_watcher()?;
    let restarted = std::time::Instant::now();

    let messages = |r: &[pb::CloudEventReceived]| -> Vec<String> {
        r.iter()
            .filter_map(|r| serde_json::from_slice::<Value>(&r.event_json).ok())
            .map(|e| {
                e["data"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let all_there = wait_for("every event on the bus", DEADLINE, || async {
        let received = fx.received().await.ok()?;
        let distinct: std::collections::BTreeSet<String> =
            messages(&received).into_iter().collect();
        (distinct.len() >= EVENTS).then_some(())
    })
    .await;
    all_there.map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    // What the killed watcher held unacked comes at once: the new one resets the managed
    // consumer to its ack floor as it binds (otherwise after the 10 s ack wait).
    let took = restarted.elapsed();
    assert!(
        took < std::time::Duration::from_secs(6),
        "every event came {took:?} after the restart (the ack wait is 10 s)\nwatcher log:\n{}",
        fx.log()
    );
    // Once the managed consumer has nothing pending or unacked, nothing more can be published.
    wait_for("managed consumer settled", DEADLINE, || async {
        consumer_state()
            .await
            .filter(|(pending, unacked)| *pending == 0 && *unacked == 0)
    })
    .await?;
    let received = fx.received().await?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for message in messages(&received) {
        *counts.entry(message).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "published more than once: {twice:?}");
    let expected: Vec<String> = (0..EVENTS).map(|i| format!("event-{i}")).collect();
    let mut got: Vec<String> = counts.into_keys().collect();
    got.sort_by_key(|m| {
        m.trim_start_matches("event-")
            .parse::<usize>()
            .unwrap_or(usize::MAX)
    });
    assert_eq!(got, expected, "no event lost");
    assert_eq!(received.len(), EVENTS);
    // Each keeps its place in the managed stream (ADR 0049), whatever order the kill and the
    // bus's absence left on the bus: event-i was stored at sequence i + 1.
    let created = js.get_stream("USERS").await?.cached_info().created;
    let origin = format!("jetstream:USERS:{}", created.unix_timestamp_nanos());
    let misplaced: Vec<_> = received
        .iter()
        .zip(messages(&received))
        .filter(|(r, message)| {
            let i: u64 = message.trim_start_matches("event-").parse().unwrap_or(0);
            r.origin != origin || r.origin_position != i + 1
        })
        .map(|(r, message)| (message, r.origin.clone(), r.origin_position))
        .collect();
    assert!(
        misplaced.is_empty(),
        "not at their place in {origin}: {misplaced:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_secrets_and_unreachable_nats_are_reported_and_touch_no_other_cluster(
) -> anyhow::Result<()> {
    let clusters = [
        "production",
        "broken",
        "unreachable",
        "wrong-password",
        "missing",
    ];
    let mut fx = Fixture::start_with(&clusters).await?;
    let url = fx.managed_nats.url();
    let good = json!({"nats": {"configuration": {
        "url": url, "subjects": ["user-operation"], "authorization": Fixture::auth()}}});
    fx.nats_secret_in("production", &good).await?;
    fx.nats_secret_in(
        "broken",
        &json!({"nats": {"configuration": {"subjects": ["user-operation"]}}}),
    )
    .await?;
    let closed = format!("nats://127.0.0.1:{}", free_port());
    fx.nats_secret_in(
        "unreachable",
        &json!({"nats": {"configuration": {
        "url": closed, "subjects": ["user-operation"], "authorization": Fixture::auth()}}}),
    )
    .await?;
    fx.nats_secret_in(
        "wrong-password",
        &json!({"nats": {"configuration": {
        "url": url, "subjects": ["user-operation"],
        "authorization": {"user": {"user": USER, "password": "not-my-password"}}}}}),
    )
    .await?;
    fx.start_watcher()?;

    // The healthy cluster works while the others fail.
    let nats = fx.managed_client().await?;
    fx.wait_subscribed_in("production", &nats, "user-operation")
        .await?;
    nats.publish("user-operation", SEED_LOGIN.into()).await?;
    nats.flush().await?;
    fx.wait_event("the login from production", |e| e["id"] == "10001")
        .await?;

    // Each failure is counted and logged with its reason.
    let counted = |name: &'static str, at_least: u64| {
        let fx = &fx;
        async move {
            wait_for(name, DEADLINE, || async {
                fx.counter(name).await.ok().filter(|n| *n >= at_least)
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))
        }
    };
    // "broken" (no url) and "missing" (no Secret).
    counted("sluice_watcher_nats_config_errors_total", 2).await?;
    // "unreachable" and "wrong-password", retried with backoff.
    counted("sluice_watcher_nats_connect_errors_total", 3).await?;
    let log = fx.log();
    for reason in [
        "nats.configuration.url: required field is missing or empty",
        "no sveltos-nats secret",
        &format!("failed to connect to {closed}"),
        "authorization violation",
    ] {
        assert!(log.contains(reason), "log lacks {reason:?}:\n{log}");
    }
    let from = |cluster: &str, all: &[pb::CloudEventReceived]| {
        all.iter()
            .filter(|r| r.cluster.as_ref().is_some_and(|c| c.name == cluster))
            .count()
    };
    let all = fx.received().await?;
    for cluster in ["broken", "unreachable", "wrong-password", "missing"] {
        assert_eq!(from(cluster, &all), 0, "{cluster} forwarded events");
    }

    // Fixing the Secrets is enough: no restart.
    for cluster in ["broken", "unreachable", "wrong-password", "missing"] {
        fx.nats_secret_in(cluster, &good).await?;
    }
    for cluster in ["broken", "unreachable", "wrong-password", "missing"] {
        fx.wait_subscribed_in(cluster, &nats, "user-operation")
            .await?;
    }

    // Deleting a cluster's Secret disconnects that cluster only: a fresh event arrives from
    // "broken" (same NATS, same subject) and no longer from "production".
    let client = fx.client("production").await?;
    let secrets = sluice_kube::apply::resolve(&client, "v1", "Secret").await?;
    sluice_kube::apply::delete(&client, &secrets, "projectsveltos", "sveltos-nats").await?;
    let mut round = 0;
    let stopped = wait_for("production disconnected", DEADLINE, || {
        round += 1;
        let id = format!("after-delete-{round}");
        let fx = &fx;
        let nats = &nats;
        async move {
            let event = json!({"specversion": "1.0", "id": id, "source": "probe", "type": "probe"});
            nats.publish("user-operation", event.to_string().into())
                .await
                .ok()?;
            nats.flush().await.ok()?;
            // Wait for this round's event from the cluster that still listens.
            let all = wait_for("event from broken", DEADLINE, || async {
                let all = fx.received().await.ok()?;
                let from_broken = all.iter().any(|r| {
                    r.cluster.as_ref().is_some_and(|c| c.name == "broken")
                        && serde_json::from_slice::<Value>(&r.event_json)
                            .is_ok_and(|e| e["id"] == id.as_str())
                });
                from_broken.then_some(all)
            })
            .await
            .ok()?;
            let from_production = all.iter().any(|r| {
                r.cluster.as_ref().is_some_and(|c| c.name == "production")
                    && serde_json::from_slice::<Value>(&r.event_json)
                        .is_ok_and(|e| e["id"] == id.as_str())
            });
            (!from_production).then_some(())
        }
    })
    .await;
    stopped.map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_older_subjects_form_with_token_auth() -> anyhow::Result<()> {
    let mut fx = Fixture::start().await?;
    // A NATS that wants a token instead of the seed's user and password.
    let token_nats = NatsServer::start_with_args(&["--auth", "s3cret-token"]).await?;
    let client = async_nats::ConnectOptions::with_token("s3cret-token".into())
        .connect(token_nats.url())
        .await?;
    let js = async_nats::jetstream::new(client);
    // The older form names the stream like the subject and consumes all of it.
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "user-operation".into(),
        subjects: vec!["user-operation".into()],
        ..Default::default()
    })
    .await?;
    js.publish("user-operation", SEED_LOGIN.into())
        .await?
        .await?;
    fx.nats_secret(&json!({"jetstream": {"configuration": {
        "url": token_nats.url(), "subjects": ["user-operation"],
        "authorization": {"token": "s3cret-token"}}}}))
        .await?;
    fx.start_watcher()?;
    let (received, event) = fx
        .wait_event("the login stored before the watcher started", |e| {
            e["id"] == "10001"
        })
        .await?;
    assert_eq!(event, serde_json::from_str::<Value>(SEED_LOGIN)?);
    assert_eq!(received.subject, "user-operation");
    Ok(())
}

/// The permissions a managed cluster's NATS user needs to be consumed (`docs/operating.md`,
/// "CloudEvents from a managed cluster's JetStream"), as a real server enforces them: with
/// exactly those the events are forwarded and the consumer is reset as the watcher binds; a
/// user that may not reset it is consumed all the same, after a warning that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_user_with_the_documented_permissions_is_consumed_and_reset_is_optional(
) -> anyhow::Result<()> {
    let mut fx = Fixture::start().await?;
    let durable = format!(
        "sluice-{}",
        topology::encode_token("sveltos.default.production")
    );
    let user = |name: &str, reset: bool| {
        let mut publish = vec![
            "$JS.API.STREAM.INFO.USERS".to_string(),
            format!("$JS.API.CONSUMER.CREATE.USERS.{durable}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.USERS.{durable}"),
            format!("$JS.ACK.USERS.{durable}.>"),
        ];
        if reset {
            publish.push(format!("$JS.API.CONSUMER.RESET.USERS.{durable}"));
        }
        let publish: Vec<String> = publish.iter().map(|s| format!("{s:?}")).collect();
        format!(
            "{{user: {name}, password: pw, permissions: {{publish: {{allow: [{}]}}, subscribe: {{allow: [\"_INBOX.>\"]}}}}}}",
            publish.join(", ")
        )
    };
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("managed.conf");
    std::fs::write(
        &config,
        format!(
            "authorization {{ users: [ {{user: owner, password: pw}}, {}, {} ] }}\n",
            user("consumer", true),
            user("noreset", false)
        ),
    )?;
    let managed = NatsServer::start_with_args(&["-c", &config.display().to_string()]).await?;
    let owner = async_nats::ConnectOptions::with_user_and_password("owner".into(), "pw".into())
        .connect(managed.url())
        .await?;
    let js = async_nats::jetstream::new(owner);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "USERS".into(),
        subjects: vec!["user-operation".into()],
        ..Default::default()
    })
    .await?;
    let secret = |user: &str| {
        json!({"jetstream": {"configuration": {
            "url": managed.url(),
            "streams": [{"name": "USERS", "subjects": ["user-operation"]}],
            "authorization": {"user": {"user": user, "password": "pw"}}}}})
    };
    let event = |i: usize| SEED_LOGIN.replace("User mgianluc login", &format!("event-{i}"));
    js.publish("user-operation", event(0).into()).await?.await?;
    fx.nats_secret(&secret("consumer")).await?;
    fx.start_watcher()?;
    fx.wait_event("an event read with the documented permissions", |e| {
        e["data"]["message"] == "event-0"
    })
    .await?;
    let log = fx.log();
    assert!(log.contains("consuming jetstream"), "{log}");
    for refused in ["Permissions Violation", "not reset"] {
        assert!(!log.contains(refused), "{refused}:\n{log}");
    }

    // The same stream read by a user that may not reset the consumer.
    fx.nats_secret(&secret("noreset")).await?;
    wait_for(
        "the warning that the consumer was not reset",
        DEADLINE,
        || async {
            fx.log()
                .contains("managed consumer not reset")
                .then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    js.publish("user-operation", event(1).into()).await?.await?;
    fx.wait_event("an event read without the reset", |e| {
        e["data"]["message"] == "event-1"
    })
    .await?;
    assert!(
        fx.log().contains("is CONSUMER.RESET permitted?"),
        "{}",
        fx.log()
    );
    Ok(())
}

/// The dedupe the kill test relies on, pinned on a real bus: the same stored message forwarded
/// twice is stored once; login and logout with the same `source` + `id` are two events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_jetstream_message_is_stored_once() -> anyhow::Result<()> {
    use sluice_watcher::cloudevents::forward::{outgoing, Delivery};
    let nats = NatsServer::start().await?;
    let bus = sluice_bus::Bus::connect(&nats.url()).await?;
    let cluster = sluice_domain::cluster::ClusterId {
        cluster_type: sluice_domain::cluster::ClusterType::Sveltos,
        namespace: "default".into(),
        name: CLUSTER.into(),
    };
    let logout = SEED_LOGIN.replace("auth.example.com.login", "auth.example.com.logout");
    let deliveries = [
        (SEED_LOGIN.to_string(), 1),
        (SEED_LOGIN.to_string(), 1), // redelivered
        (logout.clone(), 2),
        (logout, 2), // redelivered
    ];
    let mut duplicates = 0;
    for (event, sequence) in deliveries {
        let delivery = Delivery::Stream {
            stream: "USERS",
            created: 1,
            sequence,
        };
        let out = outgoing(&cluster, "user-operation", &[], event.as_bytes(), delivery)?;
        let ack = bus.publish(out).await?.await?;
        duplicates += usize::from(ack.duplicate);
    }
    assert_eq!(duplicates, 2);
    let mut stream = bus
        .jetstream()
        .get_stream(topology::CLOUDEVENTS.name)
        .await?;
    assert_eq!(stream.info().await?.state.messages, 2);
    Ok(())
}

/// A rotated kubeconfig restarts the cluster's listener: the stopped one drains (its runner
/// settles what it handled and gives back what it had received) instead of being aborted, and
/// the new one binds the managed consumer, resetting it, only once the stopped one has drained,
/// so the events it held (even those still on their way to it) reach the bus from the new
/// listener at once, not after the managed consumer's 10 s ack wait, and each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_events_held_by_a_listener_stopped_for_a_rotated_kubeconfig_come_at_once(
) -> anyhow::Result<()> {
    const EVENTS: usize = 3000;
    let mut fx = Fixture::start().await?;
    let js = fx.jetstream_users().await?;
    let event = |i: usize| SEED_LOGIN.replace("User mgianluc login", &format!("event-{i}"));
    js.publish("user-operation", event(0).into()).await?.await?;
    fx.start_watcher()?;
    fx.wait_event("the first event", |e| e["data"]["message"] == "event-0")
        .await?;

    // A burst, and the kubeconfig rotated (the same cluster, a different text) while the
    // listener forwards it.
    let mut acks = Vec::new();
    for i in 1..EVENTS {
        acks.push(js.publish("user-operation", event(i).into()).await?);
    }
    for ack in acks {
        ack.await?;
    }
    let rotated = format!(
        "{}\n# rotated\n",
        fx.server.kubeconfig_for(CLUSTER).trim_end()
    );
    fx.apply(
        MANAGEMENT,
        &[json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{CLUSTER}-sveltos-kubeconfig"), "namespace": "default"},
        "data": {"kubeconfig": base64_encode(&rotated)}})],
    )
    .await?;
    let since = std::time::Instant::now();
    wait_for("the listener restarted", DEADLINE, || async {
        fx.log()
            .contains("stopping cloudevent listener")
            .then_some(())
    })
    .await?;
    let stream = fx
        .bus
        .jetstream()
        .get_stream(topology::CLOUDEVENTS.name)
        .await?;
    let all_there = wait_for("every event on the bus", DEADLINE, || async {
        let mut stream = stream.clone();
        let stored = stream.info().await.ok()?.state.messages;
        (stored >= EVENTS as u64).then_some(())
    })
    .await;
    all_there.map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    let took = since.elapsed();
    assert!(
        took < std::time::Duration::from_secs(8),
        "the events came {took:?} after the rotation (the ack wait is 10 s)\nwatcher log:\n{}",
        fx.log()
    );
    // The new listener bound the managed consumer (and reset it) only once the stopped one had
    // drained: what was still on its way to the stopped one came back with the reset.
    let log = fx.log();
    let drained = log.find("jetstream consumers drained");
    let bound_again = log.rfind("consuming jetstream");
    assert!(
        drained.is_some() && drained < bound_again,
        "the new listener bound before the stopped one drained:\n{log}"
    );
    let received = fx.received().await?;
    let distinct: std::collections::BTreeSet<String> = received
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.event_json).ok())
        .filter_map(|e| e["data"]["message"].as_str().map(str::to_string))
        .collect();
    assert_eq!(distinct.len(), EVENTS);
    assert_eq!(received.len(), EVENTS, "each event once");
    Ok(())
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The watcher's last dead letter.
async fn last_dead_letter(
    fx: &Fixture,
) -> anyhow::Result<async_nats::jetstream::message::StreamMessage> {
    let stream = fx.bus.jetstream().get_stream(topology::DEAD.name).await?;
    let subject = topology::dead_subject("watcher");
    wait_for("the watcher's dead letter", DEADLINE, || async {
        stream.get_last_raw_message_by_subject(&subject).await.ok()
    })
    .await
}

/// A stored message that is not a CloudEvent is dead-lettered with the reason and the cluster
/// it came from (`Sluice-Cluster`), then acked on the managed server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jetstream_message_that_is_not_a_cloudevent_is_dead_lettered_with_its_cluster(
) -> anyhow::Result<()> {
    let mut fx = Fixture::start().await?;
    let js = fx.jetstream_users().await?;
    js.publish("user-operation", "not a cloudevent".into())
        .await?
        .await?;
    fx.start_watcher()?;
    let letter = last_dead_letter(&fx)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    assert_eq!(letter.payload, bytes::Bytes::from("not a cloudevent"));
    let header = |name: &str| letter.headers.get(name).map(|v| v.as_str().to_string());
    assert_eq!(
        header("Sluice-Cluster").as_deref(),
        Some("sveltos:default/production")
    );
    assert_eq!(
        header(topology::ORIGIN_SUBJECT_HEADER).as_deref(),
        Some("user-operation")
    );
    let reason = header(topology::ERROR_HEADER).unwrap_or_default();
    assert!(
        reason.starts_with(
            "not a cloudevent: message 1 of stream USERS in cluster sveltos:default/production"
        ),
        "{reason}"
    );
    Ok(())
}
