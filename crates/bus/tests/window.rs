//! The ack window against a real nats-server: a batch of inputs is acked once its outputs are
//! stored and comes back when one is lost; one input whose outputs outnumber the ack budget is
//! published whole without ever holding more acks than allowed, and older entries settle to
//! make room for new outputs.

use std::time::Duration;

use bytes::Bytes;
use sluice_bus::{topology, AckWindow, Bus, Outgoing};
use sluice_testkit::NatsServer;

fn report(cluster: &str, n: usize) -> Outgoing {
    let subject = topology::desired_subject(&format!("t{n}"), cluster);
    Outgoing {
        ttl: None,
        msg_id: subject.clone(),
        subject,
        payload: Bytes::from(format!("out{n}")),
        traceparent: None,
    }
}

/// Messages stored in the DESIRED stream.
async fn stored(bus: &Bus) -> anyhow::Result<u64> {
    let mut stream = bus.jetstream().get_stream(topology::DESIRED.name).await?;
    Ok(stream.info().await?.state.messages)
}

/// Stores inputs `in0..` on the CloudEvent match log and takes them from the renderer's
/// consumer (kept so that a nacked input comes back to it).
async fn inputs(
    bus: &Bus,
    cluster: &str,
    count: usize,
) -> anyhow::Result<(
    sluice_bus::runner::Consumer,
    Vec<async_nats::jetstream::Message>,
)> {
    inputs_for(bus, topology::RENDERER_CEMATCH, cluster, count).await
}

async fn inputs_for(
    bus: &Bus,
    spec: topology::ConsumerSpec,
    cluster: &str,
    count: usize,
) -> anyhow::Result<(
    sluice_bus::runner::Consumer,
    Vec<async_nats::jetstream::Message>,
)> {
    for n in 0..count {
        let subject = topology::cloudevent_match_subject(cluster, &format!("e{n}"));
        bus.publish_durably(Outgoing {
            ttl: None,
            msg_id: subject.clone(),
            subject,
            payload: Bytes::from(format!("in{n}")),
            traceparent: None,
        })
        .await?;
    }
    let mut consumer = bus.durable(spec, None).await?;
    let taken = take(&mut consumer, count).await?;
    Ok((consumer, taken))
}

async fn take(
    consumer: &mut sluice_bus::runner::Consumer,
    want: usize,
) -> anyhow::Result<Vec<async_nats::jetstream::Message>> {
    let mut taken = Vec::new();
    while taken.len() < want {
        let batch = tokio::time::timeout(
            Duration::from_secs(10),
            sluice_bus::coalesce::next_batch(consumer),
        )
        .await?
        .ok_or_else(|| anyhow::anyhow!("consumer ended"))?;
        taken.extend(batch);
    }
    Ok(taken)
}

async fn wait_acked(bus: &Bus, floor: u64) -> anyhow::Result<()> {
    wait_acked_by(bus, topology::RENDERER_CEMATCH, floor).await
}

async fn wait_acked_by(bus: &Bus, spec: topology::ConsumerSpec, floor: u64) -> anyhow::Result<()> {
    let stream = bus.jetstream().get_stream(spec.stream.name).await?;
    sluice_testkit::wait_for("inputs acked", Duration::from_secs(10), || {
        let stream = stream.clone();
        async move {
            let mut consumer = stream
                .get_consumer::<async_nats::jetstream::consumer::pull::Config>(spec.durable)
                .await
                .ok()?;
            let state = consumer.info().await.ok()?;
            (state.num_ack_pending == 0 && state.ack_floor.stream_sequence == floor).then_some(())
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn outputs_beyond_the_ack_budget_are_published_whole_and_ack_their_inputs(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let (_consumer, taken) = inputs(&bus, &cluster, 2).await?;

    let mut window = AckWindow::with_budget(4, 16);
    let published = window
        .publish(&bus, (0..100).map(|n| report(&cluster, n)), taken)
        .await?;
    assert_eq!(published, 100);
    assert!(
        window.acks_in_flight() <= 16,
        "{} acks held against a budget of 16",
        window.acks_in_flight()
    );
    assert_eq!(window.len(), 1, "one batch is one entry");
    window.drain().await?;
    assert_eq!(window.acks_in_flight(), 0);
    assert_eq!(stored(&bus).await?, 100);
    wait_acked(&bus, 2).await
}

#[tokio::test]
async fn older_entries_settle_to_make_room_and_the_window_reports_full_by_acks(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let (_consumer, taken) = inputs(&bus, &cluster, 3).await?;
    let mut taken = taken.into_iter();

    let mut window = AckWindow::with_budget(100, 10);
    for batch in 0..2 {
        let outputs = (batch * 5..batch * 5 + 5).map(|n| report(&cluster, n));
        window
            .publish(&bus, outputs, taken.next().into_iter().collect())
            .await?;
    }
    assert_eq!((window.len(), window.acks_in_flight()), (2, 10));
    assert!(window.is_full(), "a window holding its ack budget is full");

    // The third input's outputs need room: the oldest entries settle first, in order.
    let outputs = (10..14).map(|n| report(&cluster, n));
    window.publish(&bus, outputs, taken.collect()).await?;
    assert!(window.acks_in_flight() <= 10);
    assert!(window.len() < 3, "an older entry settled to make room");
    window.drain().await?;
    assert_eq!(stored(&bus).await?, 14);
    wait_acked(&bus, 3).await
}

/// Before the budget, a stage collected every output's ack before it handed any to the window,
/// and async-nats makes a publish wait once 20,000 acks are unresolved: a batch with more
/// outputs waited forever on acks that only it could resolve.
#[tokio::test]
async fn a_batch_with_more_outputs_than_the_client_allows_in_flight_completes() -> anyhow::Result<()>
{
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let (_consumer, taken) = inputs(&bus, &cluster, 1).await?;
    let mut window = AckWindow::new(topology::PUBLISH_WINDOW);
    let outputs = (0..21_000).map(|n| report(&cluster, n));
    let published = tokio::time::timeout(
        Duration::from_secs(120),
        window.publish(&bus, outputs, taken),
    )
    .await??;
    assert_eq!(published, 21_000);
    tokio::time::timeout(Duration::from_secs(60), window.drain()).await??;
    assert_eq!(stored(&bus).await?, 21_000);
    wait_acked(&bus, 1).await
}

#[tokio::test]
async fn a_batch_is_acked_once_its_outputs_are_stored_and_comes_back_when_one_fails(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let (mut consumer, taken) = inputs(&bus, &cluster, 3).await?;
    let mut window = AckWindow::new(4);

    // An output to a subject no stream captures is never stored: all three inputs come back.
    let lost = bus
        .publish(Outgoing {
            ttl: None,
            msg_id: "lost".into(),
            subject: "nowhere.stored".into(),
            payload: Bytes::from_static(b"out"),
            traceparent: None,
        })
        .await?;
    window.push_batch(vec![lost], taken);
    assert!(
        window.drain().await.is_err(),
        "a lost output must fail the batch"
    );
    let again = take(&mut consumer, 3).await?;
    let bodies: Vec<String> = again
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).to_string())
        .collect();
    assert_eq!(bodies, ["in0", "in1", "in2"]);

    // A stored output acks the whole batch: nothing is pending on the consumer afterwards.
    window.publish(&bus, [report(&cluster, 0)], again).await?;
    window.drain().await?;
    wait_acked(&bus, 3).await
}

/// A consumer with covering acks (`AckPolicy::All`), as the evaluator's on CHANGES.
const COVERING: topology::ConsumerSpec = topology::ConsumerSpec {
    stream: topology::CEMATCH,
    durable: "covering",
    acks: topology::Acks::Covering,
};

/// Ack messages the consumer `spec` receives, as seen by a plain subscriber.
async fn ack_counter(
    bus: &Bus,
    spec: topology::ConsumerSpec,
) -> anyhow::Result<async_nats::Subscriber> {
    let subject = format!("$JS.ACK.{}.{}.>", spec.stream.name, spec.durable);
    let subscriber = bus.client().subscribe(subject).await?;
    bus.client().flush().await?;
    Ok(subscriber)
}

async fn count_acks(subscriber: &mut async_nats::Subscriber) -> usize {
    let mut count = 0;
    while let Ok(Some(_)) = tokio::time::timeout(
        Duration::from_millis(300),
        futures::StreamExt::next(subscriber),
    )
    .await
    {
        count += 1;
    }
    count
}

#[tokio::test]
async fn with_covering_acks_a_batch_is_acked_by_one_message_for_its_highest_sequence(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let (_consumer, taken) = inputs_for(&bus, COVERING, &cluster, 5).await?;
    let mut acks = ack_counter(&bus, COVERING).await?;

    let mut window = AckWindow::new(4).acking(topology::Acks::Covering);
    assert!(window.covers());
    // Out of delivery order on purpose: the ack goes to the highest stream sequence.
    let mut taken = taken;
    taken.swap(1, 4);
    window.publish(&bus, [report(&cluster, 0)], taken).await?;
    window.drain().await?;
    wait_acked_by(&bus, COVERING, 5).await?;
    assert_eq!(count_acks(&mut acks).await, 1, "one ack for the batch");
    Ok(())
}

#[tokio::test]
async fn with_per_message_acks_every_input_is_acked() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let (_consumer, taken) = inputs(&bus, &cluster, 5).await?;
    let mut acks = ack_counter(&bus, topology::RENDERER_CEMATCH).await?;
    let mut window = AckWindow::new(4);
    assert!(!window.covers());
    window.publish(&bus, [report(&cluster, 0)], taken).await?;
    window.drain().await?;
    wait_acked(&bus, 5).await?;
    assert_eq!(count_acks(&mut acks).await, 5);
    Ok(())
}

#[tokio::test]
async fn a_covering_batch_whose_output_is_lost_is_not_acked() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let (_consumer, taken) = inputs_for(&bus, COVERING, &cluster, 3).await?;
    let mut window = AckWindow::new(4).acking(topology::Acks::Covering);
    let lost = bus
        .publish(Outgoing {
            ttl: None,
            msg_id: "lost".into(),
            subject: "nowhere.stored".into(),
            payload: Bytes::from_static(b"out"),
            traceparent: None,
        })
        .await?;
    window.push_batch(vec![lost], taken);
    assert!(
        window.drain().await.is_err(),
        "a lost output fails the batch"
    );
    let mut consumer = bus
        .jetstream()
        .get_stream(topology::CEMATCH.name)
        .await?
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(COVERING.durable)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let info = consumer.info().await?;
    assert_eq!(info.ack_floor.stream_sequence, 0, "nothing acked");
    Ok(())
}

#[tokio::test]
async fn a_consumer_with_the_wrong_ack_policy_is_recreated_only_when_acks_cover(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    // Streams exist once a durable was made through the bus.
    drop(bus.durable(topology::RENDERER_CEMATCH, None).await?);
    let stream = bus.jetstream().get_stream(topology::CEMATCH.name).await?;
    for name in [COVERING.durable, "each"] {
        stream
            .create_consumer(async_nats::jetstream::consumer::pull::Config {
                durable_name: Some(name.to_string()),
                ack_policy: if name == "each" {
                    async_nats::jetstream::consumer::AckPolicy::All
                } else {
                    async_nats::jetstream::consumer::AckPolicy::Explicit
                },
                ..Default::default()
            })
            .await?;
    }
    drop(bus.durable(COVERING, None).await?);
    let mut recreated = stream
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(COVERING.durable)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(
        recreated.info().await?.config.ack_policy,
        async_nats::jetstream::consumer::AckPolicy::All
    );
    let each = topology::ConsumerSpec {
        durable: "each",
        acks: topology::Acks::Each,
        ..COVERING
    };
    let refused = bus
        .durable(each, None)
        .await
        .err()
        .map(|e| format!("{e:#}"));
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("consumer each")),
        "{refused:?}"
    );
    Ok(())
}
