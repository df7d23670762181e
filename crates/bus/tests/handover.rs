//! A durable consumer handed from one connection to the next, as when a stage restarts: a
//! message published right after the first connection is closed reaches the second one, once;
//! and what a process that died had received and never settled reaches its successor at once.
//!
//! Closing (`Bus::close`) makes the server drop the first connection's interest before it
//! returns, but the server prunes pull requests without interest only from time to time: under
//! load it can still hand the message to a pull request the closed connection left behind.
//! Binding the consumer resets its delivery state to the ack floor (`Bus::durable`), so such a
//! message, like one a dead process held, is delivered again to the new owner at once instead
//! of after the consumer's ack wait (30 s).

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use sluice_bus::{topology, Bus, Outgoing};
use sluice_testkit::NatsServer;

/// Well under the consumer's ack wait (30 s): a message handed to a pull request the old
/// connection left behind is delivered again when the new owner binds the consumer.
const HANDOVER: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_handed_to_a_new_connection_gets_every_later_message_once() -> anyhow::Result<()>
{
    let nats = NatsServer::start().await?;
    let publisher = Bus::connect(&nats.url()).await?;
    let subject = topology::cloudevent_subject("default.c1");
    for round in 0..3 {
        // The old owner takes one message, so its stream has a pull request outstanding when
        // it goes away.
        let old = Bus::connect(&nats.url()).await?;
        let mut messages = old.durable(topology::EVALUATOR_CLOUDEVENTS, None).await?;
        publish(&publisher, &subject, &format!("before-{round}")).await?;
        let first = tokio::time::timeout(HANDOVER, messages.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("consumer ended"))??;
        assert_eq!(first.payload, Bytes::from(format!("before-{round}")));
        first.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        drop(messages);
        old.close().await;
        // Published before the next owner pulls: only a pull request the old connection left
        // behind could take it.
        publish(&publisher, &subject, &format!("after-{round}")).await?;

        let start = Instant::now();
        let new = Bus::connect(&nats.url()).await?;
        let mut messages = new.durable(topology::EVALUATOR_CLOUDEVENTS, None).await?;
        let next = tokio::time::timeout(HANDOVER, messages.next())
            .await
            .map_err(|_| {
                anyhow::anyhow!("round {round}: message not handed over within {HANDOVER:?}")
            })?
            .ok_or_else(|| anyhow::anyhow!("consumer ended"))??;
        assert_eq!(next.payload, Bytes::from(format!("after-{round}")));
        eprintln!("round {round}: handed over in {:?}", start.elapsed());
        next.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        drop(messages);
        new.close().await;
    }
    // Exactly the six messages were delivered and acked: nothing is left to redeliver.
    let mut stream = publisher
        .jetstream()
        .get_stream(topology::CLOUDEVENTS.name)
        .await?;
    assert_eq!(stream.info().await?.state.messages, 6);
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream
        .get_consumer(topology::EVALUATOR_CLOUDEVENTS.durable)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let info = consumer.info().await?;
    assert_eq!((info.num_ack_pending, info.num_pending), (0, 0));
    Ok(())
}

async fn publish(bus: &Bus, subject: &str, body: &str) -> anyhow::Result<()> {
    bus.publish_durably(Outgoing {
        ttl: None,
        subject: subject.to_string(),
        payload: Bytes::from(body.to_string()),
        msg_id: body.to_string(),
        traceparent: None,
    })
    .await?;
    Ok(())
}

/// A process that received deliveries and died without settling them: its successor gets them
/// at once when it binds the consumer (its delivery state reset to the ack floor), not after
/// the consumer's ack wait (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_a_dead_process_never_settled_come_back_at_once() -> anyhow::Result<()> {
    const UNSETTLED: usize = 20;
    let nats = NatsServer::start().await?;
    let publisher = Bus::connect(&nats.url()).await?;
    let subject = topology::cloudevent_subject("default.c1");
    for i in 0..UNSETTLED {
        publish(&publisher, &subject, &format!("event-{i}")).await?;
    }
    let dead = Bus::connect(&nats.url()).await?;
    let mut messages = dead.durable(topology::EVALUATOR_CLOUDEVENTS, None).await?;
    for _ in 0..UNSETTLED {
        tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("consumer ended"))??;
    }
    // Dies holding all of them: no ack, no nak, no close.
    drop(messages);
    drop(dead);

    let start = Instant::now();
    let next = Bus::connect(&nats.url()).await?;
    let mut messages = next.durable(topology::EVALUATOR_CLOUDEVENTS, None).await?;
    let mut received = std::collections::BTreeSet::new();
    while received.len() < UNSETTLED {
        let message = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "{} of {UNSETTLED} redelivered after {:?}: the rest wait for the ack wait",
                    received.len(),
                    start.elapsed()
                )
            })?
            .ok_or_else(|| anyhow::anyhow!("consumer ended"))??;
        received.insert(String::from_utf8_lossy(&message.payload).into_owned());
        message.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    eprintln!(
        "{UNSETTLED} unsettled deliveries back after {:?}",
        start.elapsed()
    );
    Ok(())
}
