//! The stage runner's spans against a real nats-server and an OTLP receiver (ADR 0045): each
//! input a stage handles is one span whose ids are the ones its outputs carry, whose parent is
//! the input's span, and a failed input's span is an error naming what became of it; a message
//! of the side feed is a span too, which the side item's outputs continue. One test in a binary
//! of its own: span export is set once per process.

use std::time::Duration;

use bytes::Bytes;
use sluice_bus::runner::{
    Action, Failure, Hooks, Input, Outcome, Output, Runner, SideMessage, Stage,
};
use sluice_bus::topology::{self, Acks, ConsumerSpec};
use sluice_bus::{Bus, Delivered, Outgoing};
use sluice_runtime::{parse_traceparent, TraceContext};
use sluice_testkit::{wait_for, NatsServer, OtlpReceiver};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(15);

const SPEC: ConsumerSpec = ConsumerSpec {
    stream: topology::DESIRED,
    durable: "spans-test",
    acks: Acks::Each,
};

#[derive(Debug, thiserror::Error)]
#[error("cannot be handled: {0}")]
struct Broken(String);

impl Failure for Broken {
    fn action(&self) -> Action {
        Action::Reject
    }
}

/// Echoes a body to the applied subject of its input; `reject` is rejected. A side message
/// (a configuration change, say) is echoed likewise, as `side`, and the span the runner gave
/// its handling is kept in `side_spans`.
#[derive(Default)]
struct Echo {
    side_spans: std::sync::Arc<std::sync::Mutex<Vec<Option<TraceContext>>>>,
}

impl Stage for Echo {
    type Input = String;
    type Side = SideMessage;
    type Error = Broken;

    fn decode(&self, delivered: &Delivered) -> Result<String, Broken> {
        String::from_utf8(delivered.payload.to_vec()).map_err(|e| Broken(e.to_string()))
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<Broken>> {
        inputs
            .iter()
            .map(|input| match input.value.as_str() {
                "reject" => Err(Broken("no template".into())),
                body => Ok(vec![Output {
                    subject: topology::applied_subject_for(&input.delivered.subject)
                        .expect("a desired subject"),
                    payload: Bytes::from(format!("done {body}")),
                    ..Output::default()
                }]),
            })
            .collect()
    }

    fn side_messages(&self, side: &SideMessage) -> Vec<SideMessage> {
        vec![side.clone()]
    }

    async fn on_side(&mut self, side: SideMessage, span: Option<TraceContext>) -> Vec<Output> {
        self.side_spans.lock().expect("not poisoned").push(span);
        vec![Output::message(
            topology::applied_subject_for(&side.subject).expect("a desired subject"),
            Bytes::from("side"),
        )]
    }
}

fn subject(name: &str) -> String {
    topology::desired_subject(name, &topology::cluster_tokens("sveltos", "default", "a"))
}

/// The trace context of the output the stage published for the unit `name`, once stored.
async fn carried_by_output(bus: &Bus, name: &str) -> anyhow::Result<TraceContext> {
    let applied = topology::applied_subject_for(&subject(name)).expect("applied subject");
    let output = wait_for(&format!("the output of {name}"), DEADLINE, || async {
        bus.jetstream()
            .get_stream(topology::APPLIED.name)
            .await
            .ok()?
            .get_last_raw_message_by_subject(&applied)
            .await
            .ok()
    })
    .await?;
    output
        .headers
        .get(sluice_runtime::TRACEPARENT_HEADER)
        .and_then(|value| parse_traceparent(value.as_str()))
        .ok_or_else(|| anyhow::anyhow!("the output of {name} carries no traceparent"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_handled_input_is_a_span_that_its_outputs_continue() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    sluice_runtime::spans::init_spans_to("spans-test", &receiver.endpoint())
        .map_err(anyhow::Error::msg)?;
    assert!(sluice_runtime::spans::spans_enabled());
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let runner = Runner::bind(&bus, SPEC).await?.with_hooks(Hooks {
        trace: Some(sluice_runtime::child_traceparent),
        ..Hooks::default()
    });
    let token = CancellationToken::new();
    let (side, side_feed) = futures::channel::mpsc::unbounded();
    let mut echo = Echo::default();
    let side_spans = echo.side_spans.clone();
    let task = tokio::spawn({
        let token = token.clone();
        async move { runner.run(&mut echo, side_feed, token).await }
    });
    let sent_at = std::time::SystemTime::now();
    let mut parents = Vec::new();
    for (name, body) in [("ok", "fine"), ("bad", "reject")] {
        let parent = TraceContext::new_root();
        parents.push(parent);
        bus.publish_durably(Outgoing {
            ttl: None,
            subject: subject(name),
            msg_id: format!("{name}-{body}"),
            payload: Bytes::from(body),
            traceparent: Some(parent.to_string()),
        })
        .await?;
    }
    // The output's trace context.
    let carried = carried_by_output(&bus, "ok").await?;
    wait_for("the rejected input's dead letter", DEADLINE, || {
        bus.last_dead_letter(SPEC.durable)
    })
    .await?;
    // A side message whose trace the watcher began.
    let side_parent = TraceContext::new_root();
    side.unbounded_send(SideMessage {
        stream: topology::CONFIG.name,
        subject: subject("side"),
        sequence: 7,
        traceparent: Some(side_parent.to_string()),
    })?;
    let side_carried = carried_by_output(&bus, "side").await?;
    token.cancel();
    task.await??;
    tokio::task::spawn_blocking(sluice_runtime::spans::flush_spans).await?;

    let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
    let spans = wait_for("three spans received", DEADLINE, || async {
        let spans = receiver.spans();
        (spans.len() >= 3).then_some(spans)
    })
    .await?;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let good = spans
        .iter()
        .find(|span| span.trace_id == hex(&parents[0].trace_id))
        .expect("the good input's span");
    // The span is the one the output continues, under the input's.
    assert_eq!(carried.trace_id, parents[0].trace_id);
    assert_eq!(good.span_id, hex(&carried.span_id));
    assert_eq!(good.parent_span_id, hex(&parents[0].span_id));
    assert_eq!(good.service, "sluice-spans-test");
    assert_eq!(good.name, "process SLUICE_DESIRED");
    assert_eq!(good.kind, 5, "a consumer span");
    assert_eq!(good.attributes["messaging.system"], "nats");
    assert_eq!(good.attributes["messaging.destination.name"], subject("ok"));
    assert_eq!(
        good.attributes["messaging.consumer.group.name"],
        SPEC.durable
    );
    assert_eq!(good.error, None);
    let sent = sent_at.duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64;
    assert!(
        sent <= good.start_unix_nanos && good.start_unix_nanos <= good.end_unix_nanos,
        "{good:?}"
    );
    // The rejected input's span says so.
    let bad = spans
        .iter()
        .find(|span| span.trace_id == hex(&parents[1].trace_id))
        .expect("the rejected input's span");
    assert_eq!(bad.parent_span_id, hex(&parents[1].span_id));
    assert_eq!(bad.error.as_deref(), Some("cannot be handled: no template"));
    assert_eq!(bad.attributes["error.type"], "reject");
    // The side message's span, under the message's own, is the one its output continues.
    assert_eq!(side_carried.trace_id, side_parent.trace_id);
    let from_side = spans
        .iter()
        .find(|span| span.trace_id == hex(&side_parent.trace_id))
        .expect("the side message's span");
    assert_eq!(from_side.span_id, hex(&side_carried.span_id));
    assert_eq!(from_side.parent_span_id, hex(&side_parent.span_id));
    assert_eq!(from_side.name, "process SLUICE_CONFIG");
    assert_eq!(from_side.kind, 5, "a consumer span");
    assert_eq!(
        from_side.attributes["messaging.destination.name"],
        subject("side")
    );
    assert_eq!(from_side.attributes["sluice.stream.sequence"], "7");
    assert_eq!(from_side.attributes["sluice.stage"], SPEC.durable);
    assert_eq!(from_side.error, None);
    assert!(from_side.start_unix_nanos <= from_side.end_unix_nanos);
    // The stage handled the side message knowing that span, to record its requests under it.
    let given = side_spans.lock().expect("not poisoned").clone();
    assert_eq!(given.len(), 1, "{given:?}");
    let given = given[0].expect("the side message's span given to the stage");
    assert_eq!(
        (hex(&given.trace_id), hex(&given.span_id)),
        (from_side.trace_id.clone(), from_side.span_id.clone())
    );
    Ok(())
}
