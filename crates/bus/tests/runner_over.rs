//! The stage runner over another server's pull consumer (`Runner::over`), as the watcher runs
//! its CloudEvent forwarder over a managed cluster's JetStream: outputs are stored on the bus,
//! an input is acked on its own server only once they are, a transient error nacks it there
//! (it comes back), a permanent one dead-letters it on the bus with the reason and then acks it
//! there, and a cancelled runner drains and returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use bytes::Bytes;
use futures::StreamExt;
use sluice_bus::runner::{Action, Failure, Input, Outcome, Output, Runner, Stage};
use sluice_bus::topology::{self, Acks, ConsumerSpec, StreamSpec};
use sluice_bus::{Bus, Delivered};
use sluice_testkit::{wait_for, NatsServer};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(15);

/// The other server's stream as the runner knows it: a log, acked message by message.
const UPSTREAM: ConsumerSpec = ConsumerSpec {
    stream: StreamSpec {
        name: "UPSTREAM",
        subjects: "up.>",
        max_per_subject: None,
        max_age: None,
        message_ttl: false,
    },
    durable: "runner-over-test",
    acks: Acks::Each,
};

#[derive(Debug, thiserror::Error)]
enum EchoError {
    #[error("server busy")]
    Busy,
    #[error("not an event: {0}")]
    Malformed(String),
}

impl Failure for EchoError {
    fn action(&self) -> Action {
        match self {
            EchoError::Busy => Action::Retry,
            EchoError::Malformed(_) => Action::Reject,
        }
    }
}

/// Echoes each body to a CloudEvent subject of the bus; `malformed` is rejected, `retry-once`
/// fails transiently on its first delivery.
#[derive(Clone, Default)]
struct Echo {
    attempts: Arc<Mutex<HashMap<String, usize>>>,
}

impl Stage for Echo {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = EchoError;

    fn decode(&self, delivered: &Delivered) -> Result<String, EchoError> {
        let body = String::from_utf8_lossy(&delivered.payload).to_string();
        if body == "malformed" {
            return Err(EchoError::Malformed(body));
        }
        Ok(body)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<EchoError>> {
        let mut out = Vec::new();
        for input in inputs {
            let attempt = {
                let mut attempts = self.attempts.lock().expect("lock");
                let slot = attempts.entry(input.value.clone()).or_default();
                *slot += 1;
                *slot
            };
            out.push(if input.value == "retry-once" && attempt == 1 {
                Err(EchoError::Busy)
            } else {
                Ok(vec![Output {
                    subject: topology::cloudevent_subject(&format!(
                        "sveltos.default.{}",
                        input.value
                    )),
                    payload: Bytes::from(input.value.clone()),
                    ..Output::default()
                }])
            });
        }
        out
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

/// Every payload stored on the bus's CloudEvent stream (one subject each), in stream order.
async fn stored(bus: &Bus) -> anyhow::Result<Vec<String>> {
    let delivered = bus
        .replay_state(topology::CLOUDEVENTS, topology::CLOUDEVENTS.subjects)
        .await?;
    Ok(delivered
        .iter()
        .map(|d| String::from_utf8_lossy(&d.payload).to_string())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_over_another_servers_consumer_acks_there_once_the_bus_stored_its_outputs(
) -> anyhow::Result<()> {
    let bus_nats = NatsServer::start().await?;
    let upstream_nats = NatsServer::start().await?;
    let bus = Bus::connect(&bus_nats.url()).await?;
    let upstream = async_nats::connect(upstream_nats.url()).await?;
    let js = jetstream::new(upstream.clone());
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: "UPSTREAM".into(),
            subjects: vec!["up.>".into()],
            ..Default::default()
        })
        .await?;
    for body in ["first", "malformed", "retry-once", "last"] {
        js.publish("up.events", body.into()).await?.await?;
    }
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("sluice-a".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;
    let messages = consumer.messages().await?;
    let runner = Runner::over(&bus, messages.boxed(), Some(upstream.clone()), UPSTREAM);
    let token = CancellationToken::new();
    let mut stage = Echo::default();
    let running = tokio::spawn({
        let token = token.clone();
        async move {
            runner
                .run(&mut stage, futures::stream::pending(), token)
                .await
        }
    });

    let outputs = wait_for("every event stored on the bus", DEADLINE, || async {
        let stored = stored(&bus).await.ok()?;
        (stored.len() >= 3).then_some(stored)
    })
    .await?;
    assert_eq!(
        outputs,
        ["first", "last", "retry-once"],
        "retried after the others"
    );
    let (payload, reason, origin) = wait_for("the dead letter", DEADLINE, || async {
        bus.last_dead_letter(UPSTREAM.durable).await
    })
    .await?;
    assert_eq!(payload, Bytes::from("malformed"));
    assert_eq!(reason, "not an event: malformed");
    assert_eq!(origin, "up.events");
    // Every input is acked on its own server: nothing pending, nothing unacked.
    wait_for("every input acked upstream", DEADLINE, || async {
        let mut consumer: jetstream::consumer::PullConsumer =
            stream.get_consumer("sluice-a").await.ok()?;
        let info = consumer.info().await.ok()?;
        (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
    })
    .await?;

    token.cancel();
    tokio::time::timeout(DEADLINE, running).await???;
    Ok(())
}
