//! The stage runner against a real nats-server: a transient error is nacked and the input comes
//! back, a permanent one is dead-lettered with its reason (and the headers its error gives) and
//! acked; an input whose dead letter cannot be stored is not acked; a drain cut short by its deadline returns in time and
//! leaves the input to be redelivered; a side message and a tick publish what the stage returns
//! for them; a stop ends the runner with the input unacked. A holding stage's inputs are held
//! across batches and acked only once its flush's outputs are stored; an output's time to live
//! and a purge are carried out in order; a holding stage is flushed whenever it holds its
//! limit, once its first held input is `max_age` old, and before a side message; a decoder runs ahead of the stage, and drops what a replay already saw newer. Inputs that come densely wait
//! one linger for each other, and a runner drained mid-linger gives back what it gathered. An
//! overlapping stage's batches go on while a tick that waits for one of them is handled. Two
//! partitions of one stage each handle and publish only their own clusters'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt as _;
use sluice_bus::gather::Linger;
use sluice_bus::runner::{
    ending, Action, Claim, Decoder, Failure, Hold, Hooks, Input, Outcome, Output, Runner, Stage,
    Work,
};
use sluice_bus::topology::{self, Acks, ConsumerSpec};
use sluice_bus::{Bus, Delivered, Outgoing};
use sluice_testkit::{wait_for, NatsServer};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(15);

/// A consumer of its own on the desired-state stream, so its dead letters have their subject.
const SPEC: ConsumerSpec = ConsumerSpec {
    stream: topology::DESIRED,
    durable: "runner-test",
    acks: Acks::Each,
};

#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("server busy")]
    Busy,
    #[error("cannot be handled: {0}")]
    Broken(String),
    #[error("state lost")]
    Lost,
}

impl Failure for ProbeError {
    fn action(&self) -> Action {
        match self {
            ProbeError::Busy => Action::Retry,
            ProbeError::Broken(_) => Action::Reject,
            ProbeError::Lost => Action::Stop,
        }
    }

    fn dead_letter_headers(&self) -> Vec<(&'static str, String)> {
        vec![("Probe-Error", format!("{self:?}"))]
    }
}

/// Handles a body by what it says: `retry-once` fails transiently on its first delivery,
/// `reject` permanently, `hang` never finishes while `hang` is set; anything else is echoed
/// to the applied subject of its input.
#[derive(Clone, Default)]
struct Probe {
    attempts: Arc<Mutex<HashMap<String, usize>>>,
    hang: bool,
}

impl Probe {
    fn attempts(&self, body: &str) -> usize {
        self.attempts
            .lock()
            .expect("lock")
            .get(body)
            .copied()
            .unwrap_or(0)
    }
}

impl Stage for Probe {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        let mut out = Vec::new();
        for input in inputs {
            let body = input.value.as_str();
            let attempt = {
                let mut attempts = self.attempts.lock().expect("lock");
                let slot = attempts.entry(body.to_string()).or_default();
                *slot += 1;
                *slot
            };
            if body == "hang" && self.hang {
                std::future::pending::<()>().await;
            }
            out.push(match body {
                "retry-once" if attempt == 1 => Err(ProbeError::Busy),
                "reject" => Err(ProbeError::Broken("no template".into())),
                _ => Ok(vec![Output {
                    subject: topology::applied_subject_for(&input.delivered.subject)
                        .expect("a desired subject"),
                    payload: Bytes::from(format!("done {body}")),
                    ..Output::default()
                }]),
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

fn subject(name: &str) -> String {
    topology::desired_subject(name, &topology::cluster_tokens("sveltos", "default", "a"))
}

async fn send(bus: &Bus, name: &str, body: &str) -> anyhow::Result<()> {
    bus.publish_durably(Outgoing {
        ttl: None,
        subject: subject(name),
        msg_id: format!("{name}-{body}"),
        payload: Bytes::from(body.to_string()),
        traceparent: None,
    })
    .await?;
    Ok(())
}

/// A nats-server and its bus with `count` inputs waiting for the test consumer: `<prefix>-<n>`
/// with the body `input <n>`.
async fn backlog(prefix: &str, count: usize) -> anyhow::Result<(NatsServer, Bus)> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    for n in 0..count {
        send(&bus, &format!("{prefix}-{n}"), &format!("input {n}")).await?;
    }
    Ok((nats, bus))
}

async fn output(bus: &Bus, name: &str) -> Option<String> {
    let applied = topology::applied_subject_for(&subject(name))?;
    let stream = bus
        .jetstream()
        .get_stream(topology::APPLIED.name)
        .await
        .ok()?;
    let message = stream
        .get_last_raw_message_by_subject(&applied)
        .await
        .ok()?;
    Some(String::from_utf8_lossy(&message.payload).to_string())
}

/// A body as text; one that is not is rejected.
fn text(delivered: &Delivered) -> Result<String, ProbeError> {
    String::from_utf8(delivered.payload.to_vec()).map_err(|e| ProbeError::Broken(e.to_string()))
}

/// Waits until the test consumer has nothing unacked and nothing pending.
async fn every_input_acked(bus: &Bus) -> anyhow::Result<()> {
    wait_for("every input acked", DEADLINE, || async {
        matches!(consumer_state(bus).await, Ok((0, 0))).then_some(())
    })
    .await
}

/// Cancels a runner and waits for its drain.
async fn stop(
    token: CancellationToken,
    task: tokio::task::JoinHandle<sluice_bus::Result<()>>,
) -> anyhow::Result<()> {
    token.cancel();
    task.await??;
    Ok(())
}

/// (unacked, pending) of the test consumer.
async fn consumer_state(bus: &Bus) -> anyhow::Result<(usize, u64)> {
    let stream = bus.jetstream().get_stream(SPEC.stream.name).await?;
    let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream
        .get_consumer(SPEC.durable)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let info = consumer.info().await?;
    Ok((info.num_ack_pending, info.num_pending))
}

/// Runs `stage` on `runner` in a task; cancel the token to drain and end it.
fn spawn<S: Stage + 'static>(
    runner: Runner,
    mut stage: S,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<sluice_bus::Result<()>>,
) {
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let token = token.clone();
        async move {
            runner
                .run(&mut stage, futures::stream::pending(), token)
                .await
        }
    });
    (token, task)
}

fn counter() -> (Arc<AtomicU64>, sluice_bus::runner::Count) {
    let value = Arc::new(AtomicU64::new(0));
    let inner = value.clone();
    (
        value,
        Arc::new(move |n| {
            inner.fetch_add(n, Ordering::Relaxed);
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_come_back_and_permanent_ones_are_dead_lettered_with_the_reason(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let probe = Probe::default();
    let (handled, handled_hook) = counter();
    let (retried, retried_hook) = counter();
    let (rejected, rejected_hook) = counter();
    let health = sluice_runtime::Health::new();
    let runner = Runner::bind(&bus, SPEC).await?.with_hooks(Hooks {
        handled: handled_hook,
        retried: retried_hook,
        rejected: rejected_hook,
        trace: None,
        forgotten: Hooks::default().forgotten,
        health: Some(health.clone()),
    });
    let (token, task) = spawn(runner, probe.clone());
    // The good input carries a trace sluice began, which tells its age.
    let sent = std::time::Instant::now();
    bus.publish_durably(Outgoing {
        ttl: None,
        subject: subject("ok"),
        msg_id: "ok-fine".to_string(),
        payload: Bytes::from("fine"),
        traceparent: Some(sluice_runtime::new_traceparent()),
    })
    .await?;
    send(&bus, "flaky", "retry-once").await?;
    send(&bus, "bad", "reject").await?;

    assert_eq!(
        wait_for("output of a good input", DEADLINE, || output(&bus, "ok")).await?,
        "done fine"
    );
    // The transient failure was nacked and delivered again, then handled.
    assert_eq!(
        wait_for("output of a retried input", DEADLINE, || output(
            &bus, "flaky"
        ))
        .await?,
        "done retry-once"
    );
    assert_eq!(probe.attempts("retry-once"), 2);
    // The permanent failure is a dead letter with the reason and where it came from.
    let (payload, reason, origin) = wait_for("dead letter", DEADLINE, || {
        bus.last_dead_letter(SPEC.durable)
    })
    .await?;
    assert_eq!(payload, Bytes::from("reject"));
    assert_eq!(reason, "cannot be handled: no template");
    assert_eq!(origin, subject("bad"));
    // With the headers the error gives.
    let letter = bus
        .jetstream()
        .get_stream(topology::DEAD.name)
        .await?
        .get_last_raw_message_by_subject(&topology::dead_subject(SPEC.durable))
        .await?;
    assert_eq!(
        letter.headers.get("Probe-Error").map(|v| v.as_str()),
        Some("Broken(\"no template\")")
    );
    // Everything is acked, and the rejected input was handled once.
    every_input_acked(&bus).await?;
    assert_eq!(probe.attempts("reject"), 1);
    assert_eq!(handled.load(Ordering::Relaxed), 2);
    assert_eq!(retried.load(Ordering::Relaxed), 1);
    assert_eq!(rejected.load(Ordering::Relaxed), 1);
    // The runner measured every batch and input it handed the stage, and the traced input's age.
    let handed = ["fine", "retry-once", "reject"]
        .iter()
        .map(|body| probe.attempts(body))
        .sum::<usize>() as f64;
    let metrics = sluice_testkit::series(&health.render_metrics());
    let labels = format!(
        "consumer=\"{}\",stream=\"{}\"",
        SPEC.durable, SPEC.stream.name
    );
    let get = |name: &str| metrics.get(&format!("{name}{{{labels}}}")).copied();
    assert_eq!(
        get("sluice_stage_batch_inputs_sum"),
        Some(handed),
        "{metrics:#?}"
    );
    assert_eq!(get("sluice_stage_input_wait_seconds_count"), Some(handed));
    let batches = get("sluice_stage_batch_seconds_count").unwrap_or(0.0);
    assert!(batches >= 1.0 && batches <= handed, "{batches} batches");
    assert_eq!(get("sluice_stage_batch_inputs_count"), Some(batches));
    assert_eq!(get("sluice_event_age_seconds_count"), Some(1.0));
    let age = get("sluice_event_age_seconds_sum").unwrap_or(-1.0);
    // The trace id holds milliseconds: the age may read up to 1 ms more than the time since.
    assert!(
        (0.0..=sent.elapsed().as_secs_f64() + 0.001).contains(&age),
        "{age}"
    );
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_whose_dead_letter_is_not_stored_is_not_acked() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    // No stream takes the dead letters.
    bus.jetstream().delete_stream(topology::DEAD.name).await?;
    let probe = Probe::default();
    let runner = Runner::bind(&bus, SPEC).await?;
    let (token, task) = spawn(runner, probe.clone());
    send(&bus, "bad", "reject").await?;
    // Rejected again and again: each dead letter fails, so the input is never acked.
    wait_for("the input delivered again", DEADLINE, || async {
        (probe.attempts("reject") >= 2).then_some(())
    })
    .await?;
    let (unacked, pending) = consumer_state(&bus).await?;
    assert_eq!(unacked + pending as usize, 1, "the input is still there");
    // Once the dead letters have a stream again, the next delivery is parked and acked.
    Bus::connect(&nats.url()).await?;
    wait_for("dead letter stored", DEADLINE, || {
        bus.last_dead_letter(SPEC.durable)
    })
    .await?;
    every_input_acked(&bus).await?;
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_returns_by_its_deadline_and_leaves_the_input_to_come_back() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let first = Bus::connect(&nats.url()).await?;
    let deadline = Duration::from_millis(300);
    let hanging = Probe {
        hang: true,
        ..Probe::default()
    };
    let runner = Runner::bind(&first, SPEC)
        .await?
        .with_drain_deadline(deadline);
    let (token, task) = spawn(runner, hanging.clone());
    send(&first, "slow", "hang").await?;
    wait_for("the stage handling", DEADLINE, || async {
        (hanging.attempts("hang") == 1).then_some(())
    })
    .await?;
    let cancelled = Instant::now();
    token.cancel();
    tokio::time::timeout(DEADLINE, task).await???;
    let took = cancelled.elapsed();
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(2),
        "drain took {took:?}"
    );
    first.close().await;

    // The input was not acked: a new runner gets it at once (nacked, not left to ack wait).
    let second = Bus::connect(&nats.url()).await?;
    let runner = Runner::bind(&second, SPEC).await?;
    let (token, task) = spawn(runner, Probe::default());
    assert_eq!(
        wait_for(
            "the input handled after the restart",
            Duration::from_secs(5),
            || { output(&second, "slow") }
        )
        .await?,
        "done hang"
    );
    stop(token, task).await
}

/// Publishes `side <name>` for a side message `<name>` and asks for a tick 50 ms later, which
/// publishes `ticked`; an input `stop` stops it, any other input is handled without outputs.
#[derive(Default)]
struct Timed {
    tick_at: Option<tokio::time::Instant>,
}

fn applied_output(name: &str, body: String) -> Output {
    Output {
        subject: topology::applied_subject_for(&subject(name)).expect("a desired subject"),
        payload: Bytes::from(body),
        ..Output::default()
    }
}

impl Stage for Timed {
    type Input = String;
    type Side = String;
    type Error = ProbeError;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        inputs
            .iter()
            .map(|input| match input.value.as_str() {
                "stop" => Err(ProbeError::Lost),
                _ => Ok(Vec::new()),
            })
            .collect()
    }

    async fn on_side(
        &mut self,
        name: String,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        self.tick_at = Some(tokio::time::Instant::now() + Duration::from_millis(50));
        vec![applied_output(&name, format!("side {name}"))]
    }

    fn next_tick(&self) -> Option<tokio::time::Instant> {
        self.tick_at
    }

    async fn on_tick(&mut self) -> Vec<Output> {
        self.tick_at = None;
        vec![applied_output("tick", "ticked".to_string())]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_messages_and_ticks_publish_and_a_stop_ends_the_runner_leaving_its_input(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let runner = Runner::bind(&bus, SPEC).await?;
    let (side, feed) = futures::channel::mpsc::unbounded();
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let token = token.clone();
        async move { runner.run(&mut Timed::default(), feed, token).await }
    });
    side.unbounded_send("config".to_string())?;
    assert_eq!(
        wait_for("output of a side message", DEADLINE, || output(
            &bus, "config"
        ))
        .await?,
        "side config"
    );
    assert_eq!(
        wait_for("output of the tick", DEADLINE, || output(&bus, "tick")).await?,
        "ticked"
    );
    send(&bus, "fine", "ok").await?;
    every_input_acked(&bus).await?;
    send(&bus, "halt", "stop").await?;
    let ended = tokio::time::timeout(DEADLINE, task).await??;
    assert!(
        matches!(ended, Err(sluice_bus::Error::Stopped { .. })),
        "{ended:?}"
    );
    assert!(!token.is_cancelled());
    let (unacked, pending) = consumer_state(&bus).await?;
    assert_eq!(
        unacked + pending as usize,
        1,
        "the stopping input is still there"
    );
    Ok(())
}

/// Holds every input it handles (no outputs of their own), up to `MAX`, and, when flushed,
/// publishes one output naming how many it held to `flush_to`; counts its batches and records
/// how many inputs each flush had.
#[derive(Clone, Default)]
struct Holding<const MAX: usize> {
    held: Arc<AtomicU64>,
    batches: Arc<AtomicU64>,
    flushes: Arc<Mutex<Vec<u64>>>,
    handled: Arc<Mutex<HashMap<String, usize>>>,
    flush_to: String,
}

impl<const MAX: usize> Stage for Holding<MAX> {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    const HOLD: Option<Hold> = Some(Hold {
        max_inputs: MAX,
        max_age: Duration::from_secs(60),
    });

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.held.fetch_add(inputs.len() as u64, Ordering::Relaxed);
        let mut handled = self.handled.lock().expect("lock");
        for input in inputs {
            *handled.entry(input.value.clone()).or_default() += 1;
        }
        inputs.iter().map(|_| Ok(Vec::new())).collect()
    }

    async fn flush(&mut self) -> Vec<Output> {
        let held = self.held.swap(0, Ordering::Relaxed);
        self.flushes.lock().expect("lock").push(held);
        vec![Output::message(
            self.flush_to.clone(),
            Bytes::from(format!("flushed {held}")),
        )]
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holding_stage_is_flushed_once_for_a_backlog_and_its_inputs_acked_with_the_flush(
) -> anyhow::Result<()> {
    const BACKLOG: usize = 600;
    let (_nats, bus) = backlog("held", BACKLOG).await?;
    let stage = Holding::<10_000> {
        flush_to: topology::applied_subject_for(&subject("flush")).expect("a desired subject"),
        ..Holding::default()
    };
    let runner = Runner::bind(&bus, SPEC).await?;
    let (token, task) = spawn(runner, stage.clone());
    // The backlog comes in several batches (at most 256 each); while the consumer has more
    // waiting the stage holds, and it is flushed once, for all of them.
    assert_eq!(
        wait_for("the flush's output", DEADLINE, || output(&bus, "flush")).await?,
        format!("flushed {BACKLOG}")
    );
    assert!(stage.batches.load(Ordering::Relaxed) >= 2);
    assert_eq!(*stage.flushes.lock().expect("lock"), [BACKLOG as u64]);
    every_input_acked(&bus).await?;
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holding_stage_is_flushed_whenever_it_holds_its_limit() -> anyhow::Result<()> {
    const BACKLOG: usize = 600;
    const LIMIT: usize = 100;
    let (_nats, bus) = backlog("held", BACKLOG).await?;
    let stage = Holding::<LIMIT> {
        flush_to: topology::applied_subject_for(&subject("flush")).expect("a desired subject"),
        ..Holding::default()
    };
    let runner = Runner::bind(&bus, SPEC).await?;
    let (token, task) = spawn(runner, stage.clone());
    every_input_acked(&bus).await?;
    // Batches hold at most 256: behind the backlog every flush but the last held the limit
    // (at most 99 + 256 inputs).
    let flushes = stage.flushes.lock().expect("lock").clone();
    assert!(flushes.len() >= 2, "{flushes:?}");
    assert_eq!(flushes.iter().sum::<u64>(), BACKLOG as u64, "{flushes:?}");
    let (last, rest) = flushes.split_last().expect("flushes");
    assert!(rest.iter().all(|&n| n >= LIMIT as u64), "{flushes:?}");
    assert!(*last > 0);
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_input_whose_flush_is_not_stored_is_not_acked() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    // No stream takes the flush's output.
    let stage = Holding::<10_000> {
        flush_to: "nowhere.flushed".to_string(),
        ..Holding::default()
    };
    let runner = Runner::bind(&bus, SPEC).await?;
    let (token, task) = spawn(runner, stage.clone());
    send(&bus, "lost", "held").await?;
    wait_for("the held input delivered again", DEADLINE, || async {
        let handled = stage.handled.lock().expect("lock").get("held").copied();
        (handled >= Some(2)).then_some(())
    })
    .await?;
    let (unacked, pending) = consumer_state(&bus).await?;
    assert_eq!(unacked + pending as usize, 1, "the held input is not acked");
    stop(token, task).await
}

/// For input `first`: a member (with a time to live) of set `s`; for `purge`: another member,
/// the purge of the set's members, then its head.
struct Purging;

const CLUSTER: &str = "sveltos.default.a";

fn member(name: &str) -> String {
    topology::match_member_subject(CLUSTER, "s", "", "Service", "default", name)
}

async fn last_on(
    bus: &Bus,
    subject: &str,
) -> Option<async_nats::jetstream::message::StreamMessage> {
    let stream = bus
        .jetstream()
        .get_stream(topology::MATCH.name)
        .await
        .ok()?;
    stream.get_last_raw_message_by_subject(subject).await.ok()
}

impl Stage for Purging {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        inputs
            .iter()
            .map(|input| match input.value.as_str() {
                "first" => Ok(vec![Output {
                    ttl: Some(Duration::from_secs(3600)),
                    ..Output::message(member("x"), Bytes::from("x"))
                }]),
                _ => Ok(vec![
                    Output::message(member("y"), Bytes::from("y")),
                    Output::purge(
                        topology::MATCH,
                        topology::match_members_filter(CLUSTER, "s"),
                    ),
                    Output::message(topology::match_subject(CLUSTER, "s"), Bytes::from("head")),
                ]),
            })
            .collect()
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_keeps_its_time_to_live_and_a_purge_follows_the_outputs_before_it(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let runner = Runner::bind(&bus, SPEC).await?;
    let (token, task) = spawn(runner, Purging);
    send(&bus, "one", "first").await?;
    let (x, head) = (member("x"), topology::match_subject(CLUSTER, "s"));
    let stored = wait_for("the member", DEADLINE, || last_on(&bus, &x)).await?;
    let ttl = stored
        .headers
        .get("Nats-TTL")
        .map(|value| value.as_str().to_string());
    assert!(
        ttl.is_some(),
        "stored with its time to live: {:?}",
        stored.headers
    );
    send(&bus, "two", "purge").await?;
    let head = wait_for("the head", DEADLINE, || last_on(&bus, &head)).await?;
    assert_eq!(head.payload, Bytes::from("head"));
    // Both members are gone: the one published just before the purge too.
    assert!(last_on(&bus, &member("x")).await.is_none());
    assert!(last_on(&bus, &member("y")).await.is_none());
    let stream = bus.jetstream().get_stream(topology::MATCH.name).await?;
    assert_eq!(
        stream.get_info().await?.state.last_sequence,
        3,
        "x, y and the head were stored"
    );
    every_input_acked(&bus).await?;
    stop(token, task).await
}

/// Its decoder counts what it decoded; handling `first` waits (up to 5 s) until `second` is
/// decoded too, and publishes whether it was.
#[derive(Clone, Default)]
struct Ahead {
    decoded: Arc<Mutex<Vec<String>>>,
}

impl Stage for Ahead {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    fn decoder(&self) -> Option<Decoder<String, ProbeError>> {
        let decoded = self.decoded.clone();
        Some(Arc::new(move |delivered: &Delivered| {
            let body = String::from_utf8_lossy(&delivered.payload).to_string();
            decoded.lock().expect("lock").push(body.clone());
            Ok(body)
        }))
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        let mut outcomes = Vec::new();
        for input in inputs {
            let mut ahead = false;
            if input.value == "first" {
                let until = Instant::now() + Duration::from_secs(5);
                while Instant::now() < until && !ahead {
                    ahead = self
                        .decoded
                        .lock()
                        .expect("lock")
                        .iter()
                        .any(|b| b == "second");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            outcomes.push(Ok(vec![applied_output(
                &input.value,
                format!("{} ahead {ahead}", input.value),
            )]));
        }
        outcomes
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decoder_takes_and_decodes_the_next_batch_while_the_stage_handles_this_one(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let stage = Ahead::default();
    let runner = Runner::bind(&bus, SPEC).await?;
    let (token, task) = spawn(runner, stage.clone());
    send(&bus, "first", "first").await?;
    wait_for("the first input decoded", DEADLINE, || async {
        (!stage.decoded.lock().expect("lock").is_empty()).then_some(())
    })
    .await?;
    send(&bus, "second", "second").await?;
    assert_eq!(
        wait_for("the first output", DEADLINE, || output(&bus, "first")).await?,
        "first ahead true"
    );
    assert_eq!(
        wait_for("the second output", DEADLINE, || output(&bus, "second")).await?,
        "second ahead false"
    );
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decoder_drops_a_state_older_than_the_replay_saw() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    send(&bus, "seen", "old").await?;
    // A replay at start saw a newer state of that subject (sequence 2) than the one waiting.
    let mut replayed = sluice_bus::Freshness::default();
    replayed.record(&Delivered {
        subject: subject("seen"),
        sequence: 2,
        payload: Bytes::new(),
        traceparent: None,
    });
    let stage = Ahead::default();
    let runner = Runner::bind(&bus, SPEC).await?.with_freshness(replayed);
    let (token, task) = spawn(runner, stage.clone());
    // (`Ahead` publishes under the input's body.)
    send(&bus, "new", "new").await?;
    assert_eq!(
        wait_for("the fresh output", DEADLINE, || output(&bus, "new")).await?,
        "new ahead false"
    );
    every_input_acked(&bus).await?;
    assert_eq!(*stage.decoded.lock().expect("lock"), ["new"]);
    assert_eq!(output(&bus, "old").await, None);
    stop(token, task).await
}

/// Holds every input it handles (no outputs of their own) up to `AGE_MS` after the first;
/// when flushed, publishes `flushed <n>` for the `flush` subject and records the flush; for a
/// side message `<name>`, publishes `side <name> after <flushes>` for `<name>`.
#[derive(Clone, Default)]
struct Aging<const AGE_MS: u64> {
    held: Arc<AtomicU64>,
    flushes: Arc<Mutex<Vec<(u64, Instant)>>>,
}

impl<const AGE_MS: u64> Stage for Aging<AGE_MS> {
    type Input = String;
    type Side = String;
    type Error = ProbeError;

    const HOLD: Option<Hold> = Some(Hold {
        max_inputs: 10_000,
        max_age: Duration::from_millis(AGE_MS),
    });

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        self.held.fetch_add(inputs.len() as u64, Ordering::Relaxed);
        inputs.iter().map(|_| Ok(Vec::new())).collect()
    }

    async fn flush(&mut self) -> Vec<Output> {
        let held = self.held.swap(0, Ordering::Relaxed);
        self.flushes
            .lock()
            .expect("lock")
            .push((held, Instant::now()));
        vec![applied_output("flush", format!("flushed {held}"))]
    }

    async fn on_side(
        &mut self,
        name: String,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        let flushes = self.flushes.lock().expect("lock").len();
        vec![applied_output(
            &name,
            format!("side {name} after {flushes}"),
        )]
    }
}

/// A runner of the test consumer created with at most `limit` inputs unacked: while a stage
/// holds them, the server delivers nothing more and the consumer always has more waiting, so
/// neither a full hold nor an empty consumer flushes the stage.
async fn bind_limited(bus: &Bus, limit: i64) -> anyhow::Result<Runner> {
    use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
    let stream = bus.jetstream().get_stream(SPEC.stream.name).await?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(SPEC.durable.to_string()),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: limit,
            filter_subject: SPEC.stream.subjects.to_string(),
            ..Default::default()
        })
        .await?;
    Ok(Runner::bind(bus, SPEC).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holding_stage_is_flushed_once_its_first_held_input_is_max_age_old() -> anyhow::Result<()>
{
    const AGE: Duration = Duration::from_millis(400);
    let (_nats, bus) = backlog("held", 5).await?;
    let stage = Aging::<400>::default();
    let runner = bind_limited(&bus, 2).await?;
    let started = Instant::now();
    let (token, task) = spawn(runner, stage.clone());
    // Two inputs delivered, three waiting behind the limit: only their age flushes them.
    let (held, at) = wait_for("the first flush", DEADLINE, || async {
        stage.flushes.lock().expect("lock").first().copied()
    })
    .await?;
    assert!((1..=2).contains(&held), "{held} held");
    assert!(at - started >= AGE, "flushed after {:?}", at - started);
    // Their acks let the server deliver the rest; the last of them is flushed as the consumer
    // has nothing more.
    every_input_acked(&bus).await?;
    let flushes = stage.flushes.lock().expect("lock").clone();
    assert_eq!(
        flushes.iter().map(|(n, _)| n).sum::<u64>(),
        5,
        "{flushes:?}"
    );
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holding_stage_is_flushed_before_a_side_message_is_handled() -> anyhow::Result<()> {
    let (_nats, bus) = backlog("held", 5).await?;
    // Held for a minute, behind a limit of two unacked.
    let stage = Aging::<60_000>::default();
    let runner = bind_limited(&bus, 2).await?;
    let (side, feed) = futures::channel::mpsc::unbounded();
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let token = token.clone();
        let mut stage = stage.clone();
        async move { runner.run(&mut stage, feed, token).await }
    });
    wait_for("two inputs held", DEADLINE, || async {
        (stage.held.load(Ordering::Relaxed) == 2).then_some(())
    })
    .await?;
    assert!(stage.flushes.lock().expect("lock").is_empty());
    side.unbounded_send("config".to_string())?;
    // The stage saw the side message after its held inputs went out.
    assert_eq!(
        wait_for("output of the side message", DEADLINE, || output(
            &bus, "config"
        ))
        .await?,
        "side config after 1"
    );
    assert_eq!(stage.flushes.lock().expect("lock")[0].0, 2);
    stop(token, task).await
}

/// Records the bodies it handles (no outputs), taking `DELAY_MS` per batch; with `AHEAD`, its
/// batches are decoded ahead by a reader task ([`Stage::decoder`]).
#[derive(Clone, Default)]
struct Counting<const DELAY_MS: u64, const AHEAD: bool> {
    handled: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl<const DELAY_MS: u64, const AHEAD: bool> Stage for Counting<DELAY_MS, AHEAD> {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    fn decoder(&self) -> Option<Decoder<String, ProbeError>> {
        AHEAD.then(|| Arc::new(text) as Decoder<String, ProbeError>)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        tokio::time::sleep(Duration::from_millis(DELAY_MS)).await;
        let mut handled = self.handled.lock().expect("lock");
        handled.extend(inputs.iter().map(|input| input.value.clone()));
        inputs.iter().map(|_| Ok(Vec::new())).collect()
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

/// The server hands a pull request more than one batch: a runner drained mid-stream had
/// received inputs it never handled. It gives them back (nacked, no delay) once it no longer
/// pulls, so a runner started after it on the same durable gets them at once, not after the
/// ack wait (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_drained_mid_stream_gives_back_what_it_received_and_did_not_handle(
) -> anyhow::Result<()> {
    drained_mid_stream(Counting::<100, false>::default()).await
}

/// The same with a reader task decoding ahead of the stage: it gives back what its consumer
/// received, and the runner what the reader had decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_with_a_decoder_drained_mid_stream_gives_back_what_it_did_not_handle(
) -> anyhow::Result<()> {
    drained_mid_stream(Counting::<100, true>::default()).await
}

/// Drains `first` after its first batch of 1,500 waiting inputs; a runner started next on the
/// same durable must have the rest within 5 s.
async fn drained_mid_stream<const AHEAD: bool>(first: Counting<100, AHEAD>) -> anyhow::Result<()> {
    const INPUTS: usize = 1500;
    let (_nats, bus) = backlog("in", INPUTS).await?;
    let (token, task) = spawn(Runner::bind(&bus, SPEC).await?, first.clone());
    wait_for("a first batch handled", DEADLINE, || async {
        (!first.handled.lock().expect("lock").is_empty()).then_some(())
    })
    .await?;
    stop(token, task).await?;
    let done = first.handled.lock().expect("lock").len();
    assert!(
        done < INPUTS,
        "the first runner handled everything ({done})"
    );

    let second = Counting::<0, false>::default();
    let restarted = Instant::now();
    let (token, task) = spawn(Runner::bind(&bus, SPEC).await?, second.clone());
    wait_for("every input handled", DEADLINE, || async {
        let second = second.handled.lock().expect("lock");
        let all = first.handled.lock().expect("lock").union(&second).count();
        (all == INPUTS).then_some(())
    })
    .await?;
    let took = restarted.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the rest came after {took:?}, {done} handled by the first runner"
    );
    every_input_acked(&bus).await?;
    stop(token, task).await
}

/// A covering consumer's own, on the desired-state stream.
const COVERING: ConsumerSpec = ConsumerSpec {
    stream: topology::DESIRED,
    durable: "runner-covering",
    acks: Acks::Covering,
};

/// A delivery the server made that never reached the stage (sent into a connection that
/// dropped, as when the node the stage was connected to is lost): with covering acks, the ack
/// of a later input would settle it unread. The runner sees the skipped consumer sequence, and
/// the delivery comes again well before its 30 s ack wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_never_arrived_comes_again_before_a_covering_ack_settles_it(
) -> anyhow::Result<()> {
    lost_in_transit(Counting::<0, false>::default()).await
}

/// The same with a reader task decoding ahead of the stage (the evaluator's way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_never_arrived_comes_again_to_a_stage_with_a_decoder() -> anyhow::Result<()>
{
    lost_in_transit(Counting::<0, true>::default()).await
}

/// Another client takes one delivery of the covering durable from under a running stage and
/// drops it: to the server it was delivered, and the stage never sees it. Every input must
/// still be handled within 10 s, the consumer bound again once, and nothing left unacked.
async fn lost_in_transit<const AHEAD: bool>(stage: Counting<0, AHEAD>) -> anyhow::Result<()> {
    const INPUTS: usize = 10;
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let health = sluice_runtime::Health::new();
    let runner = Runner::bind(&bus, COVERING).await?.with_hooks(Hooks {
        health: Some(health.clone()),
        ..Hooks::default()
    });
    let (token, task) = spawn(runner, stage.clone());
    send(&bus, "in-0", "input 0").await?;
    wait_for("the first input handled", DEADLINE, || async {
        (!stage.handled.lock().expect("lock").is_empty()).then_some(())
    })
    .await?;
    let all: std::collections::HashSet<String> =
        (0..INPUTS).map(|n| format!("input {n}")).collect();
    let stolen = steal_one_of_the_next(&nats, &bus, COVERING, 1..INPUTS).await?;
    let result = wait_for(
        "every input handled, the one taken included",
        Duration::from_secs(10),
        || async { (*stage.handled.lock().expect("lock") == all).then_some(()) },
    )
    .await;
    if let Err(error) = result {
        let handled = stage.handled.lock().expect("lock").clone();
        anyhow::bail!("{error}: {stolen:?} was taken, handled {handled:?}");
    }
    assert_eq!(
        rebinds(&health, COVERING),
        Some(1.0),
        "{stolen:?} was taken"
    );
    settled_by(&bus, COVERING).await?;
    stop(token, task).await
}

/// With explicit acks and batches in flight (the applier's way), a delivery that never arrived
/// would come again only after the consumer's ack wait (30 s). It comes again at once: the
/// batch in flight when the gap shows (a slow one, its gate opened a second later) ends first,
/// then the consumer is bound again from its ack floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_never_arrived_comes_again_at_once_to_an_explicit_consumer(
) -> anyhow::Result<()> {
    const INPUTS: usize = 10;
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let health = sluice_runtime::Health::new();
    let runner = Runner::bind(&bus, SPEC).await?.with_hooks(Hooks {
        health: Some(health.clone()),
        ..Hooks::default()
    });
    let (open, stage, token, task) = slow_in_flight(&bus, runner, "in-0", "slow 0").await?;
    let stolen = steal_one_of_the_next(&nats, &bus, SPEC, 1..INPUTS).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    open.send(true)?;
    let mut all: std::collections::HashSet<String> =
        (1..INPUTS).map(|n| format!("input {n}")).collect();
    all.insert("slow 0".to_string());
    let started = || {
        stage
            .started()
            .into_iter()
            .collect::<std::collections::HashSet<_>>()
    };
    let result = wait_for(
        "every input handled, the one taken included",
        Duration::from_secs(10),
        || async { (started() == all).then_some(()) },
    )
    .await;
    if let Err(error) = result {
        anyhow::bail!("{error}: {stolen:?} was taken, handled {:?}", started());
    }
    assert_eq!(rebinds(&health, SPEC), Some(1.0), "{stolen:?} was taken");
    settled_by(&bus, SPEC).await?;
    let slow = stage
        .started()
        .iter()
        .filter(|body| *body == "slow 0")
        .count();
    assert_eq!(
        slow, 1,
        "the batch in flight ended before the consumer was reset, so its input did not come again"
    );
    for n in 1..INPUTS {
        assert_eq!(
            output(&bus, &format!("in-{n}")).await,
            Some(format!("done input {n}"))
        );
    }
    stop(token, task).await
}

/// Asks, as another client, for one delivery of `spec`'s durable, then sends `in-<n>` with the
/// body `input <n>` for each of `inputs`: the stage's pull request waits first, so the server
/// hands the first of them to it and the one after to this request of one. Returns the body
/// taken, which the stage never sees (to the server it was delivered).
async fn steal_one_of_the_next(
    nats: &NatsServer,
    bus: &Bus,
    spec: ConsumerSpec,
    inputs: std::ops::Range<usize>,
) -> anyhow::Result<String> {
    let thief = async_nats::connect(nats.url()).await?;
    let inbox = thief.new_inbox();
    let mut taken = thief.subscribe(inbox.clone()).await?;
    thief
        .publish_with_reply(
            format!(
                "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
                spec.stream.name, spec.durable
            ),
            inbox,
            Bytes::from_static(br#"{"batch":1,"expires":60000000000}"#),
        )
        .await?;
    thief.flush().await?;
    for n in inputs {
        send(bus, &format!("in-{n}"), &format!("input {n}")).await?;
    }
    let stolen = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut taken))
        .await?
        .ok_or_else(|| anyhow::anyhow!("the other client's subscription ended"))?;
    Ok(String::from_utf8_lossy(&stolen.payload).to_string())
}

/// How often the runner of `spec` bound its consumer again, by its counter.
fn rebinds(health: &sluice_runtime::Health, spec: ConsumerSpec) -> Option<f64> {
    sluice_testkit::series(&health.render_metrics())
        .get(&format!(
            "sluice_stage_rebinds_total{{consumer=\"{}\",stream=\"{}\"}}",
            spec.durable, spec.stream.name
        ))
        .copied()
}

/// Waits until `spec`'s durable has nothing pending and nothing unacked.
async fn settled_by(bus: &Bus, spec: ConsumerSpec) -> anyhow::Result<()> {
    wait_for("every input acked", DEADLINE, || async {
        let stream = bus.jetstream().get_stream(spec.stream.name).await.ok()?;
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            stream.get_consumer(spec.durable).await.ok()?;
        let info = consumer.info().await.ok()?;
        (info.num_ack_pending == 0 && info.num_pending == 0).then_some(())
    })
    .await
}

/// The runner's gauge of its stage's backlog: while a backlog is worked off, what waited behind
/// the last batch; once it is gone, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_gauge_says_what_waits_behind_the_last_batch() -> anyhow::Result<()> {
    const INPUTS: usize = 1500;
    let (_nats, bus) = backlog("in", INPUTS).await?;
    let health = sluice_runtime::Health::new();
    let stage = Counting::<100, false>::default();
    let runner = Runner::bind(&bus, SPEC).await?.with_hooks(Hooks {
        health: Some(health.clone()),
        ..Hooks::default()
    });
    let (token, task) = spawn(runner, stage.clone());
    let labels = format!(
        "consumer=\"{}\",stream=\"{}\"",
        SPEC.durable, SPEC.stream.name
    );
    let pending = || {
        sluice_testkit::series(&health.render_metrics())
            .get(&format!("sluice_stage_pending_inputs{{{labels}}}"))
            .copied()
    };
    wait_for("a first batch handled", DEADLINE, || async {
        (!stage.handled.lock().expect("lock").is_empty()).then_some(())
    })
    .await?;
    let behind_first = pending().unwrap_or(0.0);
    let first = stage.handled.lock().expect("lock").len();
    assert!(
        behind_first > 0.0 && behind_first <= (INPUTS - first) as f64,
        "{behind_first} said waiting behind a first batch of {first} of {INPUTS}"
    );
    wait_for("every input handled", DEADLINE, || async {
        (stage.handled.lock().expect("lock").len() == INPUTS).then_some(())
    })
    .await?;
    assert_eq!(pending(), Some(0.0));
    every_input_acked(&bus).await?;
    stop(token, task).await
}

/// Records the size of every batch it handles and the bodies (no outputs).
#[derive(Clone, Default)]
struct Sizes {
    batches: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Sizes {
    fn batches(&self) -> Vec<Vec<String>> {
        self.batches.lock().expect("lock").clone()
    }

    fn handled(&self) -> usize {
        self.batches().iter().map(Vec::len).sum()
    }
}

impl Stage for Sizes {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        let bodies = inputs.iter().map(|input| input.value.clone()).collect();
        self.batches.lock().expect("lock").push(bodies);
        inputs.iter().map(|_| Ok(Vec::new())).collect()
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

/// A bus whose runners linger `linger` for more inputs ([`sluice_bus::gather`]).
async fn lingering(nats: &NatsServer, linger: Duration) -> anyhow::Result<Bus> {
    let options = sluice_bus::BusOptions::new(nats.url()).with_linger(Linger(linger));
    Ok(Bus::connect(options).await?)
}

/// The first input after a quiet spell is handled at once; inputs that then come densely (the
/// next begins within two lingers of the last batch) wait for each other, one linger at most,
/// and are handled as one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_that_come_densely_wait_one_linger_for_each_other() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = lingering(&nats, Duration::from_millis(300)).await?;
    let stage = Sizes::default();
    let (token, task) = spawn(Runner::bind(&bus, SPEC).await?, stage.clone());
    send(&bus, "first", "first").await?;
    let started = Instant::now();
    wait_for("the first input handled", DEADLINE, || async {
        (stage.handled() == 1).then_some(())
    })
    .await?;
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "a first input waited {:?}",
        started.elapsed()
    );
    for n in 0..5 {
        send(&bus, &format!("dense-{n}"), &format!("dense {n}")).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_for("the dense inputs handled", DEADLINE, || async {
        (stage.handled() == 6).then_some(())
    })
    .await?;
    let batches = stage.batches();
    assert_eq!(
        batches.iter().map(Vec::len).collect::<Vec<_>>(),
        [1, 5],
        "{batches:?}"
    );
    every_input_acked(&bus).await?;
    stop(token, task).await
}

/// A runner drained while its batch lingers gives back what it had gathered: a runner started
/// next on the same durable has it at once, not after the ack wait (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_drained_while_its_batch_lingers_gives_the_batch_back() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = lingering(&nats, Duration::from_secs(20)).await?;
    let first = Sizes::default();
    let (token, task) = spawn(Runner::bind(&bus, SPEC).await?, first.clone());
    send(&bus, "first", "first").await?;
    wait_for("the first input handled", DEADLINE, || async {
        (first.handled() == 1).then_some(())
    })
    .await?;
    for n in 0..3 {
        send(&bus, &format!("held-{n}"), &format!("held {n}")).await?;
    }
    // Delivered and gathered, waiting out the linger.
    wait_for("the three inputs delivered", DEADLINE, || async {
        matches!(consumer_state(&bus).await, Ok((3, 0))).then_some(())
    })
    .await?;
    stop(token, task).await?;
    assert_eq!(first.handled(), 1, "{:?}", first.batches());

    let second = Sizes::default();
    let restarted = Instant::now();
    let plain = Bus::connect(&nats.url()).await?;
    let (token, task) = spawn(Runner::bind(&plain, SPEC).await?, second.clone());
    wait_for("the gathered inputs handled", DEADLINE, || async {
        (second.handled() == 3).then_some(())
    })
    .await?;
    let took = restarted.elapsed();
    assert!(took < Duration::from_secs(5), "they came after {took:?}");
    every_input_acked(&bus).await?;
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_forgets_the_freshness_its_consumers_ack_floor_makes_useless() -> anyhow::Result<()>
{
    forgets_at_the_ack_floor(Counting::<0, false>::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_with_a_decoder_forgets_the_freshness_its_consumers_ack_floor_makes_useless(
) -> anyhow::Result<()> {
    forgets_at_the_ack_floor(Counting::<0, true>::default()).await
}

/// Several times more subjects than a runner keeps before it prunes, each handled and acked:
/// most of them are forgotten on the way, and a new state of a forgotten subject is handled as
/// before.
async fn forgets_at_the_ack_floor<const AHEAD: bool>(
    stage: Counting<0, AHEAD>,
) -> anyhow::Result<()> {
    const SUBJECTS: usize = 10_000;
    let (_nats, bus) = backlog("s", SUBJECTS).await?;
    let (forgotten, forgotten_hook) = counter();
    let runner = Runner::bind(&bus, SPEC).await?.with_hooks(Hooks {
        forgotten: forgotten_hook,
        ..Hooks::default()
    });
    let handled = stage.handled.clone();
    let (token, task) = spawn(runner, stage);
    let handled_all = |body: &'static str, count: usize| {
        let handled = handled.clone();
        move || {
            let handled = handled.clone();
            async move {
                let handled = handled.lock().expect("lock");
                (handled.len() == count && (body.is_empty() || handled.contains(body)))
                    .then_some(())
            }
        }
    };
    wait_for("every input handled", DEADLINE, handled_all("", SUBJECTS)).await?;
    every_input_acked(&bus).await?;
    let forgotten = forgotten.load(Ordering::Relaxed);
    // It prunes each time it holds 4,096 subjects, keeping only those above the floor.
    assert!(
        forgotten >= SUBJECTS as u64 / 2 && forgotten <= SUBJECTS as u64,
        "{forgotten} of {SUBJECTS} subjects forgotten"
    );
    send(&bus, "s-0", "again").await?;
    wait_for(
        "a new state of a forgotten subject handled",
        DEADLINE,
        handled_all("again", SUBJECTS + 1),
    )
    .await?;
    stop(token, task).await
}

/// A stage whose batches overlap (`Stage::IN_FLIGHT`): an input `slow …` waits for the gate
/// to open, anything else ends at once; an input `… shared <g>` or `… whole <g>` claims group
/// `<g>` so. Records which inputs started, in order; each ends publishing `done <body>`.
#[derive(Clone)]
struct Overlapping {
    gate: tokio::sync::watch::Receiver<bool>,
    started: Arc<Mutex<Vec<String>>>,
}

impl Overlapping {
    fn new() -> (tokio::sync::watch::Sender<bool>, Overlapping) {
        let (open, gate) = tokio::sync::watch::channel(false);
        let stage = Overlapping {
            gate,
            started: Arc::default(),
        };
        (open, stage)
    }

    fn started(&self) -> Vec<String> {
        self.started.lock().expect("lock").clone()
    }

    /// The work of a batch: what each input's body says.
    async fn work(
        mut gate: tokio::sync::watch::Receiver<bool>,
        started: Arc<Mutex<Vec<String>>>,
        inputs: &[Input<String>],
    ) -> Vec<Outcome<ProbeError>> {
        let mut outcomes = Vec::new();
        for input in inputs {
            started.lock().expect("lock").push(input.value.clone());
            if input.value.starts_with("slow") {
                let _ = gate.wait_for(|open| *open).await;
            }
            outcomes.push(Ok(vec![applied_output_of(input)]));
        }
        outcomes
    }
}

fn applied_output_of(input: &Input<String>) -> Output {
    Output {
        subject: topology::applied_subject_for(&input.delivered.subject)
            .expect("a desired subject"),
        payload: Bytes::from(format!("done {}", input.value)),
        ..Output::default()
    }
}

impl Stage for Overlapping {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    const IN_FLIGHT: usize = 4;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    fn claim(&self, input: &String) -> Option<Claim> {
        let mut words = input.split(' ').skip(1);
        match (words.next(), words.next()) {
            (Some("shared"), Some(group)) => Some(Claim::Shared(group.to_string())),
            (Some("whole"), Some(group)) => Some(Claim::Whole(group.to_string())),
            _ => None,
        }
    }

    fn begin(&mut self, inputs: Arc<[Input<String>]>) -> Option<Work<Self>> {
        let (gate, started) = (self.gate.clone(), self.started.clone());
        Some(Box::pin(async move {
            let outcomes = Overlapping::work(gate, started, &inputs).await;
            ending(move |_: &mut Overlapping| async move { outcomes }.boxed())
        }))
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        Overlapping::work(self.gate.clone(), self.started.clone(), inputs).await
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

/// Whether `body` has not started after a while in which it would have.
async fn not_started(stage: &Overlapping, body: &str) -> bool {
    tokio::time::sleep(Duration::from_millis(300)).await;
    !stage.started().iter().any(|started| started == body)
}

/// `runner` running an overlapping stage, with `body` (a slow input) sent on `name` to `bus`
/// and in flight: a batch of its own, whatever is sent next.
async fn slow_in_flight(
    bus: &Bus,
    runner: Runner,
    name: &str,
    body: &str,
) -> anyhow::Result<(
    tokio::sync::watch::Sender<bool>,
    Overlapping,
    CancellationToken,
    tokio::task::JoinHandle<sluice_bus::Result<()>>,
)> {
    let (open, stage) = Overlapping::new();
    let (token, task) = spawn(runner, stage.clone());
    send(bus, name, body).await?;
    wait_for("the slow input started", DEADLINE, || async {
        (stage.started() == [body]).then_some(())
    })
    .await?;
    Ok((open, stage, token, task))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_stage_takes_the_next_batch_while_an_earlier_one_waits() -> anyhow::Result<()>
{
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let (open, _stage, token, task) =
        slow_in_flight(&bus, Runner::bind(&bus, SPEC).await?, "a", "slow").await?;
    send(&bus, "b", "fast").await?;
    assert_eq!(
        wait_for("the later input's output", DEADLINE, || output(&bus, "b")).await?,
        "done fast"
    );
    assert_eq!(output(&bus, "a").await, None, "the slow input still waits");
    open.send(true)?;
    assert_eq!(
        wait_for("the slow input's output", DEADLINE, || output(&bus, "a")).await?,
        "done slow"
    );
    every_input_acked(&bus).await?;
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_waits_while_its_subject_or_its_group_is_held_by_a_batch_in_flight(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let (open, stage, token, task) =
        slow_in_flight(&bus, Runner::bind(&bus, SPEC).await?, "a", "slow shared g").await?;
    // A newer state of the same subject waits for the one in flight.
    send(&bus, "a", "fast newer").await?;
    assert!(
        not_started(&stage, "fast newer").await,
        "{:?}",
        stage.started()
    );
    open.send(true)?;
    assert_eq!(
        wait_for("the newer state's output", DEADLINE, || async {
            output(&bus, "a")
                .await
                .filter(|body| body == "done fast newer")
        })
        .await?,
        "done fast newer"
    );
    assert_eq!(stage.started(), ["slow shared g", "fast newer"]);
    every_input_acked(&bus).await?;
    stop(token, task).await?;

    // A group held in common admits others sharing it and keeps out one taking it whole; an
    // input of another group goes ahead.
    let (open, stage, token, task) =
        slow_in_flight(&bus, Runner::bind(&bus, SPEC).await?, "x", "slow shared h").await?;
    send(&bus, "w", "fast whole k").await?;
    assert_eq!(
        wait_for("another group's input", DEADLINE, || output(&bus, "w")).await?,
        "done fast whole k"
    );
    send(&bus, "z", "fast shared h").await?;
    assert_eq!(
        wait_for("an input sharing the group", DEADLINE, || output(&bus, "z")).await?,
        "done fast shared h"
    );
    send(&bus, "y", "fast whole h").await?;
    assert!(
        not_started(&stage, "fast whole h").await,
        "{:?}",
        stage.started()
    );
    open.send(true)?;
    for (name, body) in [
        ("x", "done slow shared h"),
        ("y", "done fast whole h"),
        ("z", "done fast shared h"),
    ] {
        assert_eq!(
            wait_for("every output", DEADLINE, || output(&bus, name)).await?,
            body
        );
    }
    let started = stage.started();
    let at = |body: &str| started.iter().position(|s| s == body);
    assert!(
        at("fast whole h") > at("slow shared h"),
        "the whole claim started after the shared one it waited for: {started:?}"
    );
    every_input_acked(&bus).await?;
    stop(token, task).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_ends_the_batches_in_flight_or_gives_their_inputs_back() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let first = Bus::connect(&nats.url()).await?;
    let deadline = Duration::from_millis(300);
    let runner = Runner::bind(&first, SPEC)
        .await?
        .with_drain_deadline(deadline);
    let (open, stage, token, task) = slow_in_flight(&first, runner, "a", "slow").await?;
    send(&first, "b", "fast").await?;
    assert_eq!(
        wait_for("the fast input's output", DEADLINE, || output(&first, "b")).await?,
        "done fast"
    );
    let cancelled = Instant::now();
    token.cancel();
    tokio::time::timeout(DEADLINE, task).await???;
    let took = cancelled.elapsed();
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(2),
        "drain took {took:?}"
    );
    assert_eq!(output(&first, "a").await, None);
    first.close().await;

    // The slow input was given back: a new runner takes it at once, and a drain while it is
    // in flight ends it once it is done.
    let second = Bus::connect(&nats.url()).await?;
    let (token, task) = spawn(Runner::bind(&second, SPEC).await?, stage.clone());
    wait_for(
        "the slow input taken again",
        Duration::from_secs(5),
        || async { (stage.started().iter().filter(|s| *s == "slow").count() == 2).then_some(()) },
    )
    .await?;
    token.cancel();
    tokio::time::sleep(Duration::from_millis(50)).await;
    open.send(true)?;
    tokio::time::timeout(DEADLINE, task).await???;
    assert_eq!(output(&second, "a").await.as_deref(), Some("done slow"));
    every_input_acked(&second).await
}

/// An overlapping stage whose batches' work holds `lock` for a while, as the applier's units
/// hold a pair's listing gate while their LIST runs, and whose tick, due meanwhile, takes the
/// same lock, as the applier's repair of a unit of that pair does.
#[derive(Clone, Default)]
struct Locking {
    lock: Arc<tokio::sync::Mutex<()>>,
    tick_at: Option<tokio::time::Instant>,
}

impl Stage for Locking {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    const IN_FLIGHT: usize = 2;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    fn begin(&mut self, inputs: Arc<[Input<String>]>) -> Option<Work<Self>> {
        self.tick_at = Some(tokio::time::Instant::now() + Duration::from_millis(50));
        let lock = self.lock.clone();
        Some(Box::pin(async move {
            let held = lock.lock().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(held);
            let outcomes: Vec<Outcome<ProbeError>> = inputs
                .iter()
                .map(|input| Ok(vec![applied_output_of(input)]))
                .collect();
            ending(move |_: &mut Locking| async move { outcomes }.boxed())
        }))
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        inputs
            .iter()
            .map(|input| Ok(vec![applied_output_of(input)]))
            .collect()
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }

    fn next_tick(&self) -> Option<tokio::time::Instant> {
        self.tick_at
    }

    async fn on_tick(&mut self) -> Vec<Output> {
        self.tick_at = None;
        let _held = self.lock.lock().await;
        vec![applied_output("tick", "ticked".to_string())]
    }
}

/// A tick that waits for what a batch in flight holds does not stop that batch: the batches in
/// flight go on while the stage's tick (or side message) is handled, so both end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_that_waits_for_a_batch_in_flight_lets_that_batch_end() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let (token, task) = spawn(Runner::bind(&bus, SPEC).await?, Locking::default());
    send(&bus, "a", "locking").await?;
    assert_eq!(
        wait_for("the tick's output", DEADLINE, || output(&bus, "tick")).await?,
        "ticked"
    );
    assert_eq!(
        wait_for("the batch's output", DEADLINE, || output(&bus, "a")).await?,
        "done locking"
    );
    every_input_acked(&bus).await?;
    stop(token, task).await
}

/// Echoes each input to the applied subject of every cluster of `clusters`, its body the
/// runner's name; records the subjects it handled.
struct Everywhere {
    name: &'static str,
    clusters: Vec<String>,
    handled: Arc<Mutex<Vec<String>>>,
}

impl Stage for Everywhere {
    type Input = String;
    type Side = std::convert::Infallible;
    type Error = ProbeError;

    fn decode(&self, delivered: &Delivered) -> Result<String, ProbeError> {
        text(delivered)
    }

    async fn handle(&mut self, inputs: &[Input<String>]) -> Vec<Outcome<ProbeError>> {
        let mut handled = self.handled.lock().expect("lock");
        inputs
            .iter()
            .map(|input| {
                handled.push(input.delivered.subject.clone());
                Ok(self
                    .clusters
                    .iter()
                    .map(|cluster| Output {
                        subject: format!("sluice.v1.applied.t.{cluster}"),
                        payload: Bytes::from(self.name),
                        ..Output::default()
                    })
                    .collect())
            })
            .collect()
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}

/// Two partitions of one stage over the inputs of eight clusters (ADR 0051): each input is
/// handled by the partition of its cluster only and acked by both consumers, and of the
/// outputs each partition makes for every cluster only those of its own clusters are
/// published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_handle_their_clusters_inputs_and_publish_their_clusters_outputs(
) -> anyhow::Result<()> {
    use sluice_bus::Partition;
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let clusters: Vec<String> = (0..8)
        .map(|n| topology::cluster_tokens("sveltos", "default", &format!("c{n}")))
        .collect();
    for (n, cluster) in clusters.iter().enumerate() {
        bus.publish_durably(Outgoing {
            ttl: None,
            subject: topology::desired_subject("t", cluster),
            msg_id: format!("input-{n}"),
            payload: Bytes::from("x"),
            traceparent: None,
        })
        .await?;
    }
    let partitions = [Partition::new(0, 2)?, Partition::new(1, 2)?];
    for partition in &partitions {
        let owned = clusters
            .iter()
            .filter(|c| partition.owns(&topology::desired_subject("t", c)))
            .count();
        assert!((1..8).contains(&owned), "{partition}: {owned} of 8");
    }
    let mut runs = Vec::new();
    for (partition, name) in partitions.iter().zip(["p0", "p1"]) {
        let handled = Arc::new(Mutex::new(Vec::new()));
        let runner = Runner::bind(&bus, partition.consumer(SPEC))
            .await?
            .with_partition(*partition);
        let stage = Everywhere {
            name,
            clusters: clusters.clone(),
            handled: handled.clone(),
        };
        let (token, task) = spawn(runner, stage);
        runs.push((*partition, name, handled, token, task));
    }
    let stream = bus.jetstream().get_stream(topology::APPLIED.name).await?;
    for cluster in &clusters {
        let applied = format!("sluice.v1.applied.t.{cluster}");
        let body = wait_for("the cluster's output", DEADLINE, || async {
            let message = stream
                .get_last_raw_message_by_subject(&applied)
                .await
                .ok()?;
            Some(String::from_utf8_lossy(&message.payload).to_string())
        })
        .await?;
        let owner = runs
            .iter()
            .find(|run| run.0.owns(&applied))
            .map(|run| run.1);
        assert_eq!(Some(body.as_str()), owner, "{applied}");
    }
    for (partition, _, _, _, _) in &runs {
        let durable = partition.consumer(SPEC).durable;
        wait_for("every input acked", DEADLINE, || async {
            let stream = bus.jetstream().get_stream(SPEC.stream.name).await.ok()?;
            let mut consumer: async_nats::jetstream::consumer::PullConsumer =
                stream.get_consumer(durable).await.ok()?;
            let info = consumer.info().await.ok()?;
            (info.num_ack_pending == 0 && info.num_pending == 0).then_some(())
        })
        .await?;
    }
    // Each partition published, for each of its inputs, the outputs of its own clusters and
    // no other: its clusters' count squared.
    let owned = |partition: &Partition| {
        clusters
            .iter()
            .filter(|c| partition.owns(&topology::desired_subject("t", c)))
            .count() as u64
    };
    let expected: u64 = partitions.iter().map(|p| owned(p) * owned(p)).sum();
    let mut applied = bus.jetstream().get_stream(topology::APPLIED.name).await?;
    assert_eq!(applied.info().await?.state.last_sequence, expected);
    let mut all_handled = Vec::new();
    for (partition, name, handled, token, task) in runs {
        stop(token, task).await?;
        let handled = handled.lock().expect("lock").clone();
        assert!(
            handled.iter().all(|subject| partition.owns(subject)),
            "{name} handled another partition's input: {handled:?}"
        );
        all_handled.extend(handled);
    }
    all_handled.sort();
    let mut sent: Vec<String> = clusters
        .iter()
        .map(|c| topology::desired_subject("t", c))
        .collect();
    sent.sort();
    assert_eq!(all_handled, sent, "each input handled once");
    Ok(())
}
