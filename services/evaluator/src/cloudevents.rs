//! The evaluator's CloudEvent stage on the stage runner (`sluice_bus::runner`): follows the
//! configuration as its side feed, consumes `CloudEventReceived` with its own durable consumer
//! and publishes one `CloudEventMatch` per selecting EventSource; the runner acks the input once
//! those are stored. A message that does not decode, or whose CloudEvent is invalid, is
//! rejected to the dead letters. The matching itself is the pure [`select`] stage.

pub mod select;

use std::sync::Arc;

use sluice_bus::runner::{Action, Failure, Hooks, Input, Outcome, Output, Runner, Stage};
use sluice_bus::{topology, Bus, Delivered};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, Counter, Health};

pub use select::{CloudEventSelector, SelectError};

/// Runs until `token` is cancelled; an error means the bus is unusable (the process restarts).
/// `bound` is told once its configuration and consumer are bound, so that the evaluator is
/// ready only then (a bus lost before that fails the start, not a ready service).
pub async fn run(
    bus: Bus,
    partition: sluice_bus::Partition,
    health: Health,
    token: CancellationToken,
    bound: tokio::sync::oneshot::Sender<()>,
) -> anyhow::Result<()> {
    // The evaluator reads no Secret contents: it follows the configuration without the key.
    let (config, config_feed) = sluice_wire::follow_config(&bus, None).await?;
    let mut stage = CloudEventStage {
        selector: CloudEventSelector::new(config),
        received: health.counter("sluice_evaluator_cloudevents_received_total"),
        published: health.counter("sluice_evaluator_cloudevent_matches_published_total"),
    };
    let rejected = health.counter("sluice_evaluator_cloudevents_rejected_total");
    let runner = Runner::bind(&bus, partition.consumer(topology::EVALUATOR_CLOUDEVENTS))
        .await?
        .with_partition(partition)
        .with_hooks(Hooks {
            rejected: Arc::new(move |n| rejected.add(n)),
            trace: Some(sluice_runtime::child_traceparent),
            health: Some(health.clone()),
            ..Hooks::default()
        });
    // The stream is made by now: its events without an origin of their own are placed in it.
    let created = bus.stream_created(topology::CLOUDEVENTS).await?;
    stage.selector.set_stream_created(created);
    // The evaluator may have stopped waiting (it is shutting down): nothing to tell then.
    let _ = bound.send(());
    let updates = futures::stream::unfold(config_feed, |mut feed| async move {
        feed.next().await.map(|update| (update, feed))
    });
    runner.run(&mut stage, updates, token).await?;
    Ok(())
}

/// Why a received message is rejected; never worth a retry.
#[derive(Debug, thiserror::Error)]
pub enum CloudEventError {
    #[error("failed to decode the received cloudevent")]
    Decode(#[source] sluice_wire::Error),
    #[error("cloudevent cannot be matched")]
    Select(#[source] SelectError),
}

impl Failure for CloudEventError {
    fn action(&self) -> Action {
        Action::Reject
    }
}

/// The selector with the configuration it follows, and its counters.
struct CloudEventStage {
    selector: CloudEventSelector,
    received: Counter,
    published: Counter,
}

impl Stage for CloudEventStage {
    type Input = pb::CloudEventReceived;
    type Side = sluice_wire::Result<sluice_wire::ConfigUpdate>;
    type Error = CloudEventError;

    fn decode(&self, delivered: &Delivered) -> Result<pb::CloudEventReceived, CloudEventError> {
        self.received.inc();
        sluice_wire::decode("CloudEventReceived", delivered).map_err(CloudEventError::Decode)
    }

    async fn handle(
        &mut self,
        inputs: &[Input<pb::CloudEventReceived>],
    ) -> Vec<Outcome<CloudEventError>> {
        let mut outcomes = Vec::with_capacity(inputs.len());
        for input in inputs {
            let matched = self
                .selector
                .select(&input.value, input.delivered.sequence)
                .map_err(CloudEventError::Select)
                .and_then(|matches| matches.iter().map(output).collect::<Result<Vec<_>, _>>());
            if let Ok(outputs) = &matched {
                self.published.add(outputs.len() as u64);
            }
            outcomes.push(matched);
        }
        outcomes
    }

    async fn on_side(
        &mut self,
        update: sluice_wire::Result<sluice_wire::ConfigUpdate>,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match update {
            Ok(update) => self.selector.on_config(&update),
            Err(error) => tracing::warn!(error = %error, "skipping config message"),
        }
        Vec::new()
    }
}

/// The message of one match, on its cluster's and EventSource's subject. The runner derives its
/// id from the input's stream sequence and the subject, so a redelivered input publishes
/// duplicates JetStream drops.
pub fn output(m: &pb::CloudEventMatch) -> Result<Output, CloudEventError> {
    let cluster = sluice_wire::cluster_id(m.cluster.as_ref(), "cloudevent match")
        .map_err(|e| CloudEventError::Select(SelectError::Cluster(e)))?;
    let tokens = sluice_wire::cluster_tokens(&cluster);
    Ok(Output {
        subject: topology::cloudevent_match_subject(&tokens, &m.event_source),
        payload: sluice_wire::encode(m),
        ..Output::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::{ClusterId, ClusterType};

    fn matched(event_source: &str) -> pb::CloudEventMatch {
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
            source_sequence: 7,
            ..Default::default()
        }
    }

    #[test]
    fn a_match_goes_to_its_clusters_and_event_sources_subject() {
        let out = output(&matched("user-operation")).expect("valid");
        assert_eq!(
            out.subject,
            topology::cloudevent_match_subject("sveltos.default.production", "user-operation")
        );
        let no_cluster = pb::CloudEventMatch {
            cluster: None,
            ..matched("user-operation")
        };
        let error = output(&no_cluster).expect_err("no cluster");
        assert_eq!(error.action(), Action::Reject);
    }
}
