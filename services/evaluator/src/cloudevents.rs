//! The evaluator's CloudEvent runner: follows the configuration, consumes `CloudEventReceived`
//! with its own durable consumer, publishes one `CloudEventMatch` per selecting EventSource and
//! acks the input once those are stored. The matching itself is the pure [`select`] stage.

pub mod select;

use futures::StreamExt;
use sluice_bus::window::Settled;
use sluice_bus::{message_id, topology, AckWindow, Bus, Delivered, Outgoing};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, Health};

pub use select::{CloudEventSelector, SelectError};

/// Runs until `token` is cancelled; an error means the bus is unusable (the process restarts).
pub async fn run(bus: Bus, health: Health, token: CancellationToken) -> anyhow::Result<()> {
    let published = health.counter("sluice_evaluator_cloudevent_matches_published_total");
    let received = health.counter("sluice_evaluator_cloudevents_received_total");
    let rejected = health.counter("sluice_evaluator_cloudevents_rejected_total");

    // The evaluator reads no Secret contents: it follows the configuration without the key.
    let (config, mut config_feed) = sluice_wire::follow_config(&bus, None).await?;
    let mut selector = CloudEventSelector::new(config);
    let mut events = bus.durable(topology::EVALUATOR_CLOUDEVENTS, None).await?;
    let mut window = AckWindow::new(topology::PUBLISH_WINDOW);
    tracing::info!(
        consumer = topology::EVALUATOR_CLOUDEVENTS.durable,
        stream = topology::CLOUDEVENTS.name,
        "matching cloudevents"
    );
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            update = config_feed.next() => {
                let Some(update) = update else { anyhow::bail!("configuration feed ended") };
                match update {
                    Ok(update) => selector.on_config(&update),
                    Err(error) => tracing::warn!(error = %error, "skipping config message"),
                }
            }
            message = events.next(), if !window.is_full() => {
                let Some(message) = message else { anyhow::bail!("cloudevent consumer ended") };
                let message = match message {
                    Ok(message) => message,
                    Err(error) => {
                        tracing::warn!(error = %error, "cloudevent consumer error");
                        continue;
                    }
                };
                let delivered = Delivered::from_message(topology::CLOUDEVENTS.name, &message)?;
                received.inc();
                let matches = sluice_wire::decode::<pb::CloudEventReceived>("CloudEventReceived", &delivered)
                    .map_err(|error| error.to_string())
                    .and_then(|event| selector.select(&event, delivered.sequence).map_err(|e| sluice_runtime::error_chain(&e)));
                let matches = match matches {
                    Ok(matches) => matches,
                    Err(reason) => {
                        rejected.inc();
                        tracing::warn!(subject = %delivered.subject, sequence = delivered.sequence, reason = %reason, "rejecting cloudevent");
                        let dead = dead_letter(&bus, &delivered, &reason).await;
                        window.push(dead.into_iter().collect(), Some(message));
                        continue;
                    }
                };
                let mut acks = Vec::with_capacity(matches.len());
                for m in matches {
                    acks.push(bus.publish(outgoing(&m, &delivered)?).await?);
                }
                published.add(acks.len() as u64);
                window.push(acks, Some(message));
            }
            settled = window.next(), if !window.is_empty() => {
                if let Some(Settled::Retried(error)) = settled {
                    tracing::warn!(error = %error, "cloudevent match not stored, input will be redelivered");
                }
            }
        }
    }
    window.drain().await?;
    Ok(())
}

/// The message of one match. Its id is derived from the input's stream sequence and the
/// EventSource, so a redelivered input publishes duplicates JetStream drops.
pub fn outgoing(m: &pb::CloudEventMatch, input: &Delivered) -> anyhow::Result<Outgoing> {
    let cluster = sluice_wire::cluster_id(m.cluster.as_ref(), "cloudevent match")?;
    let tokens = sluice_wire::cluster_tokens(&cluster);
    let sequence = m.source_sequence.to_string();
    Ok(Outgoing {
        subject: topology::cloudevent_match_subject(&tokens, &m.event_source),
        msg_id: message_id(&["cematch", &tokens, &sequence, &m.event_source]),
        payload: sluice_wire::encode(m),
        traceparent: Some(sluice_runtime::child_traceparent(
            input.traceparent.as_deref(),
        )),
    })
}

/// Parks a CloudEvent that can never be matched, with the reason; returns the publish ack.
async fn dead_letter(
    bus: &Bus,
    delivered: &Delivered,
    reason: &str,
) -> Option<sluice_bus::PublishAckFuture> {
    match bus
        .dead_letter(
            "evaluator",
            &delivered.subject,
            delivered.payload.clone(),
            reason,
            &[],
        )
        .await
    {
        Ok(ack) => Some(ack),
        Err(error) => {
            tracing::warn!(error = %error, "failed to dead-letter cloudevent");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::{ClusterId, ClusterType};

    fn input(sequence: u64) -> Delivered {
        Delivered {
            subject: "in".into(),
            sequence,
            payload: Default::default(),
            traceparent: None,
        }
    }

    fn matched(event_source: &str, sequence: u64) -> pb::CloudEventMatch {
        let cluster = ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: "production".into(),
        };
        pb::CloudEventMatch {
            cluster: Some(sluice_wire::cluster_ref(&cluster)),
            event_source: event_source.into(),
            nats_subject: "user-operation".into(),
            event_json: br#"{"id":"10001"}"#.to_vec(),
            source_sequence: sequence,
        }
    }

    #[test]
    fn a_redelivered_input_publishes_the_same_ids() {
        let id = |es: &str, seq: u64| {
            outgoing(&matched(es, seq), &input(seq))
                .expect("valid")
                .msg_id
        };
        assert_eq!(id("user-operation", 7), id("user-operation", 7));
        assert_ne!(
            id("user-operation", 7),
            id("user-operation", 8),
            "same event content, new input"
        );
        assert_ne!(id("user-operation", 7), id("logins", 7));
        let out = outgoing(&matched("user-operation", 7), &input(7)).expect("valid");
        assert_eq!(
            out.subject,
            topology::cloudevent_match_subject("sveltos.default.production", "user-operation")
        );
    }
}
