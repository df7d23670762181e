//! The CloudEvent forwarder as a stage of the runner (`Runner::over` a managed cluster's
//! JetStream consumer): one stored message in, its `CloudEventReceived` out, named by where the
//! message is stored (a redelivery is a duplicate the bus drops, ADR 0008). A message that is
//! not a CloudEvent is rejected: the runner dead-letters it on `sluice.v1.dead.watcher` with the
//! reason and the cluster (`Sluice-Cluster`) and only then acks it on the managed server; an output that is not stored is retried
//! (nacked there, redelivered with backoff). Pure: no IO.

use std::convert::Infallible;

use sluice_bus::runner::{Action, Failure, Input, Outcome, Output, Stage};
use sluice_bus::topology::{Acks, ConsumerSpec, StreamSpec};
use sluice_bus::Delivered;
use sluice_domain::cloudevent::CloudEventError;
use sluice_domain::cluster::ClusterId;

use super::forward::{self, Delivery};

/// How the runner knows a managed cluster's stream: a log (every message is forwarded, none
/// replaces another), acked message by message, and `watcher` in logs and dead letters (the
/// watcher's identity may publish `sluice.v1.dead.watcher`).
pub const MANAGED_STREAM: ConsumerSpec = ConsumerSpec {
    stream: StreamSpec {
        name: "managed-cluster-jetstream",
        subjects: ">",
        max_per_subject: None,
        max_age: None,
        message_ttl: false,
    },
    durable: "watcher",
    acks: Acks::Each,
};

/// The header of a dead letter of the watcher that names the managed cluster the message came
/// from (`sveltos:default/production`).
pub const CLUSTER_HEADER: &str = "Sluice-Cluster";

/// Forwards the messages of one stream of one managed cluster.
#[derive(Clone, Debug)]
pub struct Forwarder {
    cluster: ClusterId,
    stream: String,
    /// When the stream was made (Unix nanoseconds): with its name, the origin of its events'
    /// order (`Delivery::origin`).
    created: u64,
}

/// A message of a managed cluster's stream that is not a CloudEvent. Permanent: rejected.
#[derive(Debug, thiserror::Error)]
#[error("not a cloudevent: message {sequence} of stream {stream} in cluster {cluster}")]
pub struct NotACloudEvent {
    cluster: String,
    stream: String,
    sequence: u64,
    #[source]
    source: CloudEventError,
}

impl Failure for NotACloudEvent {
    fn action(&self) -> Action {
        Action::Reject
    }

    fn dead_letter_headers(&self) -> Vec<(&'static str, String)> {
        vec![(CLUSTER_HEADER, self.cluster.clone())]
    }
}

impl Forwarder {
    pub fn new(cluster: ClusterId, stream: String, created: u64) -> Forwarder {
        Forwarder {
            cluster,
            stream,
            created,
        }
    }
}

impl Stage for Forwarder {
    type Input = Output;
    type Side = Infallible;
    type Error = NotACloudEvent;

    /// The message as the watcher read it (`forward::structured`: binary mode already folded
    /// into structured JSON) becomes the `CloudEventReceived` to publish.
    fn decode(&self, delivered: &Delivered) -> Result<Output, NotACloudEvent> {
        let delivery = Delivery::Stream {
            stream: &self.stream,
            created: self.created,
            sequence: delivered.sequence,
        };
        let out = forward::outgoing(
            &self.cluster,
            &delivered.subject,
            &[],
            &delivered.payload,
            delivery,
        )
        .map_err(|source| NotACloudEvent {
            cluster: self.cluster.to_string(),
            stream: self.stream.clone(),
            sequence: delivered.sequence,
            source,
        })?;
        Ok(Output {
            subject: out.subject,
            payload: out.payload,
            id: Some(out.msg_id),
            ..Output::default()
        })
    }

    async fn handle(&mut self, inputs: &[Input<Output>]) -> Vec<Outcome<NotACloudEvent>> {
        inputs
            .iter()
            .map(|input| Ok(vec![input.value.clone()]))
            .collect()
    }

    async fn on_side(
        &mut self,
        side: Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use sluice_domain::cluster::ClusterType;
    use sluice_proto::v1 as pb;

    fn forwarder() -> Forwarder {
        let cluster = ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: "production".into(),
        };
        Forwarder::new(cluster, "USERS".into(), 1_700_000_000_000_000_000)
    }

    fn delivered(sequence: u64, payload: &str) -> Delivered {
        Delivered {
            subject: "user-operation".into(),
            sequence,
            payload: bytes::Bytes::from(payload.to_string()),
            traceparent: None,
        }
    }

    const LOGIN: &str = r#"{"specversion":"1.0","type":"auth.example.com.login","source":"auth.example.com","id":"10001","data":{}}"#;

    #[test]
    fn a_stored_cloudevent_is_forwarded_under_the_id_of_where_it_is_stored() {
        let stage = forwarder();
        let out = stage.decode(&delivered(5, LOGIN)).expect("a cloudevent");
        assert_eq!(
            out.id.as_deref(),
            Some(
                forward::cloudevent_message_id(
                    "sveltos.default.production",
                    Delivery::Stream {
                        stream: "USERS",
                        created: 1_700_000_000_000_000_000,
                        sequence: 5
                    }
                )
                .as_str()
            )
        );
        let again = stage.decode(&delivered(5, LOGIN)).expect("a cloudevent");
        assert_eq!(out, again, "a redelivery is the same output");
        let received = pb::CloudEventReceived::decode(out.payload).expect("decodes");
        assert_eq!(received.subject, "user-operation");
        assert_eq!(
            (received.origin.as_str(), received.origin_position),
            ("jetstream:USERS:1700000000000000000", 5),
            "its place in the stream travels with it"
        );
    }

    #[test]
    fn what_is_not_a_cloudevent_is_rejected_with_where_it_came_from() {
        let error = forwarder()
            .decode(&delivered(9, r#"{"specversion":"1.0","id":"1"}"#))
            .expect_err("no source");
        assert_eq!(error.action(), Action::Reject);
        assert_eq!(
            sluice_runtime::error_chain(&error),
            "not a cloudevent: message 9 of stream USERS in cluster sveltos:default/production: \
             required attribute source is missing or empty"
        );
    }
}
