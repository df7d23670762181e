//! Durable consumers against a real nats-server: a consumer created after messages were stored
//! starts from the current state of a state stream, and from the first event of a log.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use sluice_bus::{topology, Bus, Outgoing};
use sluice_testkit::NatsServer;

async fn publish(bus: &Bus, subject: &str, body: &str, id: &str) -> anyhow::Result<()> {
    bus.publish_durably(Outgoing {
        ttl: None,
        subject: subject.to_string(),
        payload: Bytes::from(body.to_string()),
        msg_id: id.to_string(),
        traceparent: None,
    })
    .await?;
    Ok(())
}

async fn first_bodies(
    bus: &Bus,
    spec: topology::ConsumerSpec,
    n: usize,
) -> anyhow::Result<Vec<String>> {
    let mut consumer = bus.durable(spec, None).await?;
    let mut bodies = Vec::new();
    while bodies.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await?;
        let message = next.ok_or_else(|| anyhow::anyhow!("consumer ended"))??;
        bodies.push(String::from_utf8_lossy(&message.payload).to_string());
        message.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(bodies)
}

#[tokio::test]
async fn a_late_consumer_gets_every_event_of_a_log_and_the_last_state_of_a_state_stream(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    // A login then a logout on the same subject of the CloudEvent-match log.
    let log = topology::cloudevent_match_subject(&cluster, "user-operation");
    publish(&bus, &log, "login", "1").await?;
    publish(&bus, &log, "logout", "2").await?;
    assert_eq!(
        first_bodies(&bus, topology::RENDERER_CEMATCH, 2).await?,
        ["login", "logout"]
    );
    // Two states of one match set: only the current one matters.
    let state = topology::match_subject(&cluster, "es");
    publish(&bus, &state, "old", "3").await?;
    publish(&bus, &state, "current", "4").await?;
    assert_eq!(
        first_bodies(&bus, topology::REPORTER_MATCH, 1).await?,
        ["current"]
    );
    Ok(())
}

#[tokio::test]
async fn a_batch_keeps_the_newest_message_per_subject_and_acks_the_rest() -> anyhow::Result<()> {
    use sluice_bus::coalesce::{coalesce, next_batch, Coalesced};
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    // A log keeps every message, so one subject can have several in a batch.
    let a = topology::cloudevent_match_subject(&cluster, "a");
    let b = topology::cloudevent_match_subject(&cluster, "b");
    publish(&bus, &a, "a1", "1").await?;
    publish(&bus, &b, "b1", "2").await?;
    publish(&bus, &a, "a2", "3").await?;
    let mut consumer = bus.durable(topology::RENDERER_CEMATCH, None).await?;
    let mut taken = Vec::new();
    while taken.len() < 3 {
        let batch = tokio::time::timeout(Duration::from_secs(10), next_batch(&mut consumer))
            .await?
            .ok_or_else(|| anyhow::anyhow!("consumer ended"))?;
        taken.extend(batch);
    }
    let Coalesced {
        latest,
        superseded,
        unreadable,
    } = coalesce(topology::CEMATCH.name, taken);
    assert!(unreadable.is_empty());
    let body = |payload: &Bytes| String::from_utf8_lossy(payload).to_string();
    let latest_bodies: Vec<String> = latest.iter().map(|(d, _)| body(&d.payload)).collect();
    assert_eq!(latest_bodies, ["b1", "a2"]);
    let superseded_bodies: Vec<String> = superseded.iter().map(|m| body(&m.payload)).collect();
    assert_eq!(superseded_bodies, ["a1"]);
    for message in superseded.iter().chain(latest.iter().map(|(_, m)| m)) {
        message.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    // Everything acked: a new message is the next one delivered.
    publish(&bus, &b, "b2", "4").await?;
    let next = tokio::time::timeout(Duration::from_secs(10), next_batch(&mut consumer))
        .await?
        .ok_or_else(|| anyhow::anyhow!("consumer ended"))?;
    let bodies: Vec<String> = next.iter().map(|m| body(&m.payload)).collect();
    assert_eq!(bodies, ["b2"]);
    Ok(())
}

#[tokio::test]
async fn an_expiring_message_leaves_its_subject_after_its_ttl() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let kept = topology::config_subject("ConfigMap", "default", "kept");
    let gone = topology::config_subject("ConfigMap", "default", "gone");
    publish(&bus, &kept, "kept", "1").await?;
    publish(&bus, &gone, "contents", "2").await?;
    // The deletion replaces the contents at once and expires by itself.
    bus.publish_expiring_durably(
        Outgoing {
            ttl: None,
            subject: gone.clone(),
            payload: Bytes::from("deleted"),
            msg_id: "3".into(),
            traceparent: None,
        },
        Duration::from_secs(1),
    )
    .await?;
    let subjects = |bus: Bus| async move {
        let delivered = bus
            .replay_state(topology::CONFIG, topology::CONFIG.subjects)
            .await?;
        anyhow::Ok(
            delivered
                .into_iter()
                .map(|d| (d.subject, String::from_utf8_lossy(&d.payload).to_string()))
                .collect::<Vec<_>>(),
        )
    };
    let now = subjects(bus.clone()).await?;
    assert!(
        now.contains(&(gone.clone(), "deleted".into())),
        "the deletion is stored first: {now:?}"
    );
    sluice_testkit::wait_for(
        "the expired deletion to leave the stream",
        Duration::from_secs(10),
        || {
            let bus = bus.clone();
            let kept = kept.clone();
            async move {
                let left = subjects(bus).await?;
                if left == [(kept, "kept".to_string())] {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!("the stream still holds {left:?}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn the_last_state_of_one_subject_is_its_newest_message_or_none() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let state = topology::match_subject(&cluster, "es");
    let other = topology::match_subject(&cluster, "other");
    publish(&bus, &state, "old", "1").await?;
    publish(&bus, &other, "unrelated", "2").await?;
    bus.publish_durably(Outgoing {
        ttl: None,
        subject: state.clone(),
        payload: Bytes::from("current"),
        msg_id: "3".to_string(),
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
    })
    .await?;
    let last = bus
        .last_state(topology::MATCH, &state)
        .await?
        .expect("a message");
    assert_eq!(last.subject, state);
    assert_eq!(last.payload, "current");
    assert_eq!(last.sequence, 3);
    assert_eq!(
        last.traceparent.as_deref(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    let none = topology::match_subject(&cluster, "never");
    assert!(bus.last_state(topology::MATCH, &none).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn the_ack_floor_is_where_everything_below_is_acknowledged() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    for (i, trigger) in ["a", "b", "c"].iter().enumerate() {
        let id = (i + 1).to_string();
        let subject = topology::desired_subject(trigger, &cluster);
        publish(&bus, &subject, trigger, &id).await?;
    }
    // The applier acks each message on its own.
    let spec = topology::APPLIER_DESIRED;
    let mut consumer = bus.durable(spec, None).await?;
    assert_eq!(bus.ack_floor(&spec).await?, 0, "nothing acknowledged yet");
    let mut messages = Vec::new();
    for _ in 0..3 {
        let next = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await?;
        messages.push(next.ok_or_else(|| anyhow::anyhow!("consumer ended"))??);
    }
    // The second alone leaves the floor where it was.
    messages[1]
        .double_ack()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(bus.ack_floor(&spec).await?, 0);
    messages[0]
        .double_ack()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(bus.ack_floor(&spec).await?, 2);
    messages[2]
        .double_ack()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(bus.ack_floor(&spec).await?, 3);
    Ok(())
}

/// An installation from before a stream allowed message TTLs: connecting updates it, and a
/// tombstone with a time to live is stored.
#[tokio::test]
async fn a_stream_of_an_older_install_is_updated_to_allow_tombstones_that_expire(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let client = async_nats::connect(nats.url()).await?;
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: topology::CHANGES.name.to_string(),
        subjects: vec![topology::CHANGES.subjects.to_string()],
        max_messages_per_subject: 1,
        ..Default::default()
    })
    .await?;
    let bus = Bus::connect(&nats.url()).await?;
    let mut stream = js.get_stream(topology::CHANGES.name).await?;
    assert!(stream.info().await?.config.allow_message_ttl);
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let subject = topology::change_subject(&cluster, "", "Service", "default", "gone");
    bus.publish_expiring_durably(
        Outgoing {
            ttl: None,
            subject: subject.clone(),
            payload: Bytes::from("deleted"),
            msg_id: "1".to_string(),
            traceparent: None,
        },
        Duration::from_secs(1),
    )
    .await?;
    sluice_testkit::wait_for("the tombstone expired", Duration::from_secs(10), || {
        let stream = stream.clone();
        let subject = subject.clone();
        async move {
            stream
                .get_last_raw_message_by_subject(&subject)
                .await
                .is_err()
                .then_some(())
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_stream_made_again_has_another_creation_time() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let created = bus.stream_created(topology::CLOUDEVENTS).await?;
    let mut stream = bus
        .jetstream()
        .get_stream(topology::CLOUDEVENTS.name)
        .await?;
    let info = stream.info().await?.created.unix_timestamp_nanos();
    assert_eq!(i128::from(created), info);
    bus.jetstream()
        .delete_stream(topology::CLOUDEVENTS.name)
        .await?;
    let again = Bus::connect(&nats.url()).await?;
    let recreated = again.stream_created(topology::CLOUDEVENTS).await?;
    assert!(recreated > created, "{recreated} after {created}");
    Ok(())
}
