//! The stage runner: the one consumer loop of every stage that reads a durable consumer
//! ([`topology::ConsumerSpec`]), of the bus or ([`Runner::over`]) of another server (the
//! watcher's CloudEvent forwarder reads a managed cluster's JetStream). A stage is wiring plus a [`Stage`]: it decodes a message and
//! turns a batch of inputs into outputs or errors; the runner owns everything else. It pulls
//! batches (`coalesce::next_batch`), keeps only the newest fresh message per subject of a state
//! stream, decodes, gives every output its message id and trace context, publishes through the
//! [`AckWindow`] within its budget, nacks a [`Action::Retry`] error with a delay that grows with
//! the delivery count, dead-letters a [`Action::Reject`] error with its reason (acking the input
//! only once the dead letter is stored), stops on a [`Action::Stop`] error (the input nacked, the
//! process to restart and rebuild), counts what it did through [`Hooks`], and on cancellation
//! stops pulling and drains what is in flight within a deadline. Besides its inputs, a stage may
//! publish what a message of its side feed ([`Stage::on_side`]) or a tick it asked for
//! ([`Stage::next_tick`], [`Stage::on_tick`]) makes it publish; and a stage whose outputs are
//! computed for a batch as a whole ([`Stage::JOINT`]) has its batch acked as one.
//!
//! It does not know what the payloads mean, and it holds no Kubernetes or process concerns: the
//! counters and the trace context come in as [`Hooks`] from the service.
//!
//! A runner serves one consumer, optionally restricted to a subject filter, so that units
//! partitioned by subject across replicas later need one consumer (and one runner) per
//! partition and nothing else.

pub mod publish;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::bus::{content_id, message_id, Bus, Outgoing};
use crate::coalesce;
use crate::error::{Error, Result};
use crate::feed::{Delivered, Freshness};
use crate::topology::{self, Acks, ConsumerSpec};
use crate::window::{AckWindow, Settled};

/// What should happen to an input a stage could not handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Transient (a server busy or unreachable): nack, redelivered after a growing delay.
    Retry,
    /// Permanent (the input can never be handled): dead-letter with the reason, then ack.
    Reject,
    /// The stage's own state can no longer be trusted (a read it depends on failed half-way):
    /// the input is nacked and the runner returns an error, so that the process restarts and
    /// rebuilds its state from the streams.
    Stop,
}

/// An error of a stage: its type says what becomes of the input.
pub trait Failure: std::error::Error + Send + Sync + 'static {
    fn action(&self) -> Action;
}

/// One decoded input and where it came from.
#[derive(Debug)]
pub struct Input<T> {
    pub delivered: Delivered,
    pub value: T,
}

/// A decoded value that `handle` takes by value out of its batch, which the runner lends it by
/// reference (`Stage::Input = Owned<T>` for a stage that moves its inputs into its state).
#[derive(Debug)]
pub struct Owned<T>(std::sync::Mutex<Option<T>>);

impl<T> Owned<T> {
    pub fn new(value: T) -> Owned<T> {
        Owned(std::sync::Mutex::new(Some(value)))
    }

    /// The value, the first time only.
    pub fn take(&self) -> Option<T> {
        self.0.lock().ok()?.take()
    }
}

/// One message a stage wants published for an input. Unless the stage names its message id
/// (`id`), the runner derives it from the input (so a redelivered input publishes duplicates
/// JetStream drops); its trace context derives from the input's.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub subject: String,
    pub payload: Bytes,
    /// The message id, when the stage names it (after the content it renders, say); an output
    /// of no input (of the side feed or a tick) without one is named by its subject and payload.
    pub id: Option<String>,
}

/// The outcome of one input: its outputs, or an error that says retry or reject.
pub type Outcome<E> = std::result::Result<Vec<Output>, E>;

/// A pipeline stage as the runner drives it.
pub trait Stage: Send {
    /// A decoded input.
    type Input: Send + Sync;
    /// A message of the side feed the stage follows besides its consumer (the configuration,
    /// say); `std::convert::Infallible` for none.
    type Side: Send;
    type Error: Failure;

    /// Whether the outputs of a batch are computed together (the renderer renders a set's
    /// units as one): the runner then publishes the outputs of all the batch's handled inputs
    /// as one entry of its window, so that every one of those inputs is acked only once all
    /// of them are stored. A stage returns the outputs of a group of inputs on the group's last
    /// input, and no outputs on the others.
    const JOINT: bool = false;

    /// Decodes one delivered message; an error is handled as any other (a payload that does
    /// not decode is a [`Action::Reject`]).
    fn decode(&self, delivered: &Delivered) -> std::result::Result<Self::Input, Self::Error>;

    /// Handles a batch of inputs (at most one per subject of a state stream, in stream order)
    /// and returns one outcome per input, in the same order.
    fn handle(
        &mut self,
        inputs: &[Input<Self::Input>],
    ) -> impl Future<Output = Vec<Outcome<Self::Error>>> + Send;

    /// Takes one message of the side feed; returns what it makes the stage publish (no input
    /// is acked for these).
    fn on_side(&mut self, side: Self::Side) -> impl Future<Output = Vec<Output>> + Send;

    /// When the stage next wants [`Stage::on_tick`] (a schedule's next due time); `None` for
    /// no tick.
    fn next_tick(&self) -> Option<tokio::time::Instant> {
        None
    }

    /// Called once the time [`Stage::next_tick`] said has come; returns what it makes the
    /// stage publish (no input is acked for these).
    fn on_tick(&mut self) -> impl Future<Output = Vec<Output>> + Send {
        async { Vec::new() }
    }
}

/// A counter the service passes in (a Prometheus counter, say).
pub type Count = Arc<dyn Fn(u64) + Send + Sync>;

/// What the runner reports to the service: counters of inputs handled, retried and rejected,
/// and how an output's trace context derives from its input's.
#[derive(Clone)]
pub struct Hooks {
    pub handled: Count,
    pub retried: Count,
    pub rejected: Count,
    /// The `traceparent` of an output from its input's; `None` passes the input's on as is.
    pub trace: Option<fn(Option<&str>) -> String>,
}

impl Default for Hooks {
    fn default() -> Hooks {
        let none: Count = Arc::new(|_| {});
        Hooks {
            handled: none.clone(),
            retried: none.clone(),
            rejected: none,
            trace: None,
        }
    }
}

/// How long a drain may take by default: the in-flight batch and the window's acks.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);
/// Nack delay of a first retry; it doubles with every delivery up to [`MAX_RETRY_DELAY`].
pub const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// The nack delay of an input delivered `delivered` times (1 for the first delivery).
pub fn retry_delay(delivered: i64) -> Duration {
    let doublings = u32::try_from(delivered.saturating_sub(1).clamp(0, 16)).unwrap_or(16);
    FIRST_RETRY_DELAY
        .saturating_mul(1u32 << doublings)
        .min(MAX_RETRY_DELAY)
}

/// One durable consumer bound and ready to run a [`Stage`].
pub struct Runner {
    consumer: Consumer,
    /// The connection of a consumer on another server ([`Runner::over`]), flushed in the drain.
    upstream: Option<async_nats::Client>,
    core: Core,
}

/// The messages a runner consumes: its durable consumer's, or another server's.
pub type Consumer = futures::stream::BoxStream<
    'static,
    std::result::Result<Message, async_nats::jetstream::consumer::pull::MessagesError>,
>;

/// Everything of a runner but its consumer, which the drain drops first.
struct Core {
    bus: Bus,
    spec: ConsumerSpec,
    freshness: Freshness,
    hooks: Hooks,
    drain_deadline: Duration,
    window: AckWindow,
}

/// How a batch went.
enum Flow {
    Continue,
    /// The drain deadline passed while the stage handled these inputs: they are to be nacked
    /// once the consumer is gone.
    Cut(Vec<Message>),
}

impl Runner {
    /// Binds the stage's durable consumer (created on first use, [`Bus::durable`]). Once this
    /// returns the stage's input is bound: the service may report ready.
    pub async fn bind(bus: &Bus, spec: ConsumerSpec) -> Result<Runner> {
        Runner::bind_filtered(bus, spec, None).await
    }

    /// [`Runner::bind`] for the subjects of `filter` only: one partition of the stream, whose
    /// spec must name a durable of its own (a durable's filter is fixed when it is created).
    pub async fn bind_filtered(
        bus: &Bus,
        spec: ConsumerSpec,
        filter: Option<&str>,
    ) -> Result<Runner> {
        let consumer = bus.durable(spec, filter).await?;
        Ok(Runner::over(bus, consumer.boxed(), None, spec))
    }

    /// A runner over `consumer`, the messages of a pull consumer on another server (a managed
    /// cluster's JetStream, whose connection is `upstream`): inputs are acked and nacked there,
    /// outputs and dead letters go to `bus`. `spec` names the runner in logs and dead letters
    /// (`spec.durable`: `sluice.v1.dead.<durable>`, which the bus identity must allow) and says
    /// how its stream keeps messages and how it acks; its stream is not one of the bus's.
    pub fn over(
        bus: &Bus,
        consumer: Consumer,
        upstream: Option<async_nats::Client>,
        spec: ConsumerSpec,
    ) -> Runner {
        Runner {
            consumer,
            upstream,
            core: Core {
                bus: bus.clone(),
                spec,
                freshness: Freshness::default(),
                hooks: Hooks::default(),
                drain_deadline: DRAIN_DEADLINE,
                window: AckWindow::new(topology::PUBLISH_WINDOW).acking(spec.acks),
            },
        }
    }

    /// Starts from the newest sequences a replay already processed (state streams only): an
    /// older delivery of their subjects is dropped.
    pub fn with_freshness(mut self, freshness: Freshness) -> Runner {
        self.core.freshness = freshness;
        self
    }

    pub fn with_hooks(mut self, hooks: Hooks) -> Runner {
        self.core.hooks = hooks;
        self
    }

    /// How long the drain after cancellation may take before in-flight inputs are left to be
    /// redelivered.
    pub fn with_drain_deadline(mut self, deadline: Duration) -> Runner {
        self.core.drain_deadline = deadline;
        self
    }

    /// Runs `stage` until `token` is cancelled, then drains within the deadline and returns.
    /// `side` is the stage's side feed; its end is an error, as is the consumer's. An error
    /// means the bus is unusable (the process restarts); with covering acks
    /// ([`Acks::Covering`]) an input to retry is one too, since a later ack would cover it.
    pub async fn run<S, F>(self, stage: &mut S, side: F, token: CancellationToken) -> Result<()>
    where
        S: Stage,
        F: Stream<Item = S::Side> + Send,
    {
        let Runner {
            mut consumer,
            upstream,
            mut core,
        } = self;
        let mut side = std::pin::pin!(side);
        tracing::info!(
            consumer = core.spec.durable,
            stream = core.spec.stream.name,
            "stage running"
        );
        let mut cut = Vec::new();
        loop {
            let tick = stage.next_tick();
            // Unbiased: a busy side feed must not starve the consumer, nor the other way round.
            tokio::select! {
                () = token.cancelled() => break,
                settled = core.window.next(), if !core.window.is_empty() => {
                    if let Some(settled) = settled {
                        core.settled(settled)?;
                    }
                }
                item = side.next() => {
                    let Some(item) = item else {
                        return Err(Error::Ended { what: format!("side feed of {}", core.spec.durable) });
                    };
                    let outputs = stage.on_side(item).await;
                    core.unprompted(outputs).await?;
                }
                () = sleep_until(tick), if tick.is_some() => {
                    let outputs = stage.on_tick().await;
                    core.unprompted(outputs).await?;
                }
                batch = coalesce::next_batch(&mut consumer), if !core.window.is_full() => {
                    let Some(batch) = batch else {
                        return Err(Error::Ended { what: format!("consumer {} on {}", core.spec.durable, core.spec.stream.name) });
                    };
                    if let Flow::Cut(messages) = core.process(stage, batch, &token).await? {
                        cut = messages;
                        break;
                    }
                }
            }
        }
        // Stop pulling first: the server must not hand what is nacked below to a pull
        // request nobody reads any more (it would wait out its ack wait there).
        drop(consumer);
        let client = upstream.unwrap_or_else(|| core.bus.client().clone());
        if let Err(error) = client.flush().await {
            tracing::debug!(error = %error, "flush after dropping the consumer failed");
        }
        for message in cut {
            nack(&message, Duration::ZERO).await;
        }
        core.drain().await;
        // The drain's acks are only buffered: they reach the server before the runner returns
        // (and the process, perhaps, exits), or their inputs come back after the ack wait.
        let flushed = tokio::time::timeout(core.drain_deadline, client.flush()).await;
        if !matches!(flushed, Ok(Ok(()))) {
            tracing::debug!("the drain's acks were not flushed, their inputs come back");
        }
        Ok(())
    }
}

impl Core {
    /// Runs one batch.
    async fn process<S: Stage>(
        &mut self,
        stage: &mut S,
        batch: Vec<Message>,
        token: &CancellationToken,
    ) -> Result<Flow> {
        let span = tracing::debug_span!("batch", consumer = self.spec.durable, size = batch.len());
        let taken = self.fresh(batch);
        let mut inputs = Vec::with_capacity(taken.len());
        let mut messages = Vec::with_capacity(taken.len());
        for (delivered, message) in taken {
            match stage.decode(&delivered) {
                Ok(value) => {
                    inputs.push(Input { delivered, value });
                    messages.push(message);
                }
                Err(error) => self.failed(&delivered, message, &error).await?,
            }
        }
        if inputs.is_empty() {
            return Ok(Flow::Continue);
        }
        let deadline = self.drain_deadline;
        let cut = async {
            token.cancelled().await;
            tokio::time::sleep(deadline).await;
        };
        let outcomes = tokio::select! {
            outcomes = stage.handle(&inputs).instrument(span) => outcomes,
            () = cut => {
                tracing::warn!(consumer = self.spec.durable, inputs = messages.len(), "drain deadline passed while handling, inputs will be redelivered");
                return Ok(Flow::Cut(messages));
            }
        };
        if outcomes.len() != inputs.len() {
            // A stage bug; the inputs come back rather than being acked unhandled.
            tracing::error!(
                consumer = self.spec.durable,
                inputs = inputs.len(),
                outcomes = outcomes.len(),
                "stage returned a different number of outcomes than inputs"
            );
            for message in messages {
                nack(&message, FIRST_RETRY_DELAY).await;
            }
            return Ok(Flow::Continue);
        }
        let mut joint = (Vec::new(), Vec::new());
        let mut rest = inputs.into_iter().zip(messages).zip(outcomes);
        while let Some(((input, message), outcome)) = rest.next() {
            match outcome {
                Ok(outputs) => {
                    let outgoing = self.outgoing(&input.delivered, outputs);
                    if S::JOINT {
                        joint.0.extend(outgoing);
                        joint.1.push(message);
                    } else {
                        self.window
                            .publish(&self.bus, outgoing, vec![message])
                            .await?;
                    }
                    self.freshness.record(&input.delivered);
                    (self.hooks.handled)(1);
                }
                Err(error) => {
                    if let Err(stopped) = self.failed(&input.delivered, message, &error).await {
                        // The runner ends: what it has not settled comes back at once, not
                        // after its ack wait.
                        let unsettled = joint.1.into_iter().chain(rest.map(|((_, m), _)| m));
                        for message in unsettled {
                            nack(&message, Duration::ZERO).await;
                        }
                        return Err(stopped);
                    }
                }
            }
        }
        if !joint.1.is_empty() {
            self.window.publish(&self.bus, joint.0, joint.1).await?;
        }
        Ok(Flow::Continue)
    }

    /// The newest message per subject of a state stream that no newer handled state of its
    /// subject supersedes (the others go to the window, to be acked in order without work);
    /// every message of a log. A redelivery of the state last handled is handled again: it
    /// comes back because its outputs or its dead letter were not stored.
    fn fresh(&mut self, batch: Vec<Message>) -> Vec<(Delivered, Message)> {
        let stream = self.spec.stream.name;
        if self.spec.stream.max_per_subject.is_none() {
            let mut out = Vec::with_capacity(batch.len());
            for message in batch {
                match Delivered::from_message(stream, &message) {
                    Ok(delivered) => out.push((delivered, message)),
                    Err(error) => {
                        tracing::warn!(stream, error = %error, "skipping a message without stream metadata");
                    }
                }
            }
            return out;
        }
        let coalesced = coalesce::coalesce(stream, batch);
        for error in &coalesced.unreadable {
            tracing::warn!(stream, error = %error, "skipping a message without stream metadata");
        }
        for message in coalesced.superseded {
            self.window.push(Vec::new(), Some(message));
        }
        let mut out = Vec::with_capacity(coalesced.latest.len());
        for (delivered, message) in coalesced.latest {
            if self.freshness.is_superseded(&delivered) {
                self.window.push(Vec::new(), Some(message));
            } else {
                out.push((delivered, message));
            }
        }
        out
    }

    /// Retries or rejects one input as its error says.
    async fn failed<E: Failure>(
        &mut self,
        delivered: &Delivered,
        message: Message,
        error: &E,
    ) -> Result<()> {
        let reason = chain(error);
        match error.action() {
            Action::Retry => {
                (self.hooks.retried)(1);
                if self.spec.acks == Acks::Covering {
                    return Err(Error::Uncovered {
                        consumer: self.spec.durable.to_string(),
                        reason,
                    });
                }
                let delivered_count = message.info().map_or(1, |info| info.delivered);
                let delay = retry_delay(delivered_count);
                tracing::warn!(consumer = self.spec.durable, subject = %delivered.subject, error = %reason, delay_ms = delay.as_millis() as u64, "input failed, will retry");
                nack(&message, delay).await;
            }
            Action::Stop => {
                (self.hooks.retried)(1);
                nack(&message, Duration::ZERO).await;
                return Err(Error::Stopped {
                    consumer: self.spec.durable.to_string(),
                    reason,
                });
            }
            Action::Reject => {
                (self.hooks.rejected)(1);
                tracing::warn!(consumer = self.spec.durable, subject = %delivered.subject, error = %reason, "rejecting input to the dead letters");
                let parked = self
                    .bus
                    .dead_letter(
                        self.spec.durable,
                        &delivered.subject,
                        delivered.payload.clone(),
                        &reason,
                        &[],
                    )
                    .await;
                match parked {
                    // Acked once the dead letter is stored; nacked by the window if it is not.
                    Ok(ack) => {
                        self.window.push(vec![ack], Some(message));
                        self.freshness.record(delivered);
                    }
                    Err(error) => {
                        tracing::warn!(consumer = self.spec.durable, subject = %delivered.subject, error = %chain(&error), "dead letter not stored, the input will come back");
                        nack(
                            &message,
                            retry_delay(message.info().map_or(1, |i| i.delivered)),
                        )
                        .await;
                    }
                }
            }
        }
        Ok(())
    }

    /// What became of an earlier input's outputs.
    fn settled(&mut self, settled: Settled) -> Result<()> {
        if let Settled::Retried(error) = settled {
            (self.hooks.retried)(1);
            if self.window.covers() {
                return Err(Error::Uncovered {
                    consumer: self.spec.durable.to_string(),
                    reason: chain(&error),
                });
            }
            tracing::warn!(consumer = self.spec.durable, error = %chain(&error), "output not stored, input will be redelivered");
        }
        Ok(())
    }

    /// The messages of `outputs`, with ids and trace context derived from the input.
    fn outgoing(&self, input: &Delivered, outputs: Vec<Output>) -> Vec<Outgoing> {
        let sequence = input.sequence.to_string();
        let traceparent = match self.hooks.trace {
            Some(trace) => Some(trace(input.traceparent.as_deref())),
            None => input.traceparent.clone(),
        };
        outputs
            .into_iter()
            .enumerate()
            .map(|(index, output)| Outgoing {
                ttl: None,
                msg_id: output.id.unwrap_or_else(|| {
                    message_id(&[
                        self.spec.durable,
                        &input.subject,
                        &sequence,
                        &output.subject,
                        &index.to_string(),
                    ])
                }),
                subject: output.subject,
                payload: output.payload,
                traceparent: traceparent.clone(),
            })
            .collect()
    }

    /// Publishes outputs of no input (of the side feed or a tick); the window keeps their acks
    /// in its budget.
    async fn unprompted(&mut self, outputs: Vec<Output>) -> Result<()> {
        if outputs.is_empty() {
            return Ok(());
        }
        let traceparent = self.hooks.trace.map(|trace| trace(None));
        let outgoing: Vec<Outgoing> = outputs
            .into_iter()
            .map(|output| Outgoing {
                ttl: None,
                msg_id: output.id.unwrap_or_else(|| {
                    message_id(&[
                        self.spec.durable,
                        &output.subject,
                        &content_id(&output.payload),
                    ])
                }),
                subject: output.subject,
                payload: output.payload,
                traceparent: traceparent.clone(),
            })
            .collect();
        self.window.publish(&self.bus, outgoing, Vec::new()).await?;
        Ok(())
    }

    /// Settles what is in flight, within the drain deadline; what is left comes back after its
    /// ack wait.
    async fn drain(&mut self) {
        let window = &mut self.window;
        let durable = self.spec.durable;
        let drained = tokio::time::timeout(self.drain_deadline, async {
            while let Some(settled) = window.next().await {
                if let Settled::Retried(error) = settled {
                    tracing::warn!(consumer = durable, error = %chain(&error), "output not stored while draining, input will be redelivered");
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                consumer = durable,
                entries = window.len(),
                "drain deadline passed, unsettled inputs will be redelivered"
            );
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Nacks with a delay; best effort: without it the message still comes back after its ack
/// wait.
async fn nack(message: &Message, delay: Duration) {
    let kind = AckKind::Nak((!delay.is_zero()).then_some(delay));
    if let Err(error) = message.ack_with(kind).await {
        tracing::debug!(error = %error, "nack failed, the input comes back after its ack wait");
    }
}

/// An error with its sources, `: `-separated, as a dead letter's reason.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(next) = source {
        text.push_str(": ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_with_the_delivery_count_up_to_a_limit() {
        assert_eq!(retry_delay(0), FIRST_RETRY_DELAY);
        assert_eq!(retry_delay(1), FIRST_RETRY_DELAY);
        assert_eq!(retry_delay(2), FIRST_RETRY_DELAY * 2);
        assert_eq!(retry_delay(4), FIRST_RETRY_DELAY * 8);
        assert_eq!(retry_delay(50), MAX_RETRY_DELAY);
        assert_eq!(retry_delay(i64::MAX), MAX_RETRY_DELAY);
    }

    #[test]
    fn a_reason_names_every_source() {
        #[derive(Debug, thiserror::Error)]
        #[error("failed to apply ClusterProfile x")]
        struct Outer(#[source] std::io::Error);
        let error = Outer(std::io::Error::other("connection refused"));
        assert_eq!(
            chain(&error),
            "failed to apply ClusterProfile x: connection refused"
        );
    }
}
