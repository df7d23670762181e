//! The stage runner: the one consumer loop of every stage that reads a durable consumer
//! ([`topology::ConsumerSpec`]), of the bus or ([`Runner::over`]) of another server (the
//! watcher's CloudEvent forwarder reads a managed cluster's JetStream). A stage is wiring plus
//! a [`Stage`]: it decodes a message and turns a batch of inputs into outputs or errors; the runner owns everything else. It pulls
//! batches (`coalesce::next_batch`), keeps only the newest fresh message per subject of a state
//! stream, decodes, gives every output its message id and trace context, publishes through the
//! [`AckWindow`] within its budget, nacks a [`Action::Retry`] error with a delay that grows with
//! the delivery count, dead-letters a [`Action::Reject`] error with its reason (acking the input
//! only once the dead letter is stored), stops on a [`Action::Stop`] error (the input nacked, the
//! process to restart and rebuild), counts what it did through [`Hooks`], and on cancellation
//! stops pulling, gives back (nacks) what its pull requests had received and nobody took, and
//! drains what is in flight within a deadline. Besides its inputs, a stage may
//! publish what a message of its side feed ([`Stage::on_side`]) or a tick it asked for
//! ([`Stage::next_tick`], [`Stage::on_tick`]) makes it publish; and a stage whose outputs are
//! computed for a batch as a whole ([`Stage::JOINT`]) has its batch acked as one.
//!
//! A stage may also hold its inputs across batches ([`Stage::HOLD`], ADR 0014): the runner
//! keeps them unacked until it flushes the stage ([`Stage::flush`]) once enough are held, the
//! consumer has nothing more waiting, the oldest is old enough, a side message comes or the
//! runner drains, and acks them once what the flush returned is stored. An output may carry
//! its own time to live ([`Output::ttl`]) or be a purge of a subject filter
//! ([`Output::purge`]), which the runner carries out only once every earlier output is
//! stored. A stage with a [`Stage::decoder`] has its batches taken, kept fresh and decoded by
//! a task of their own, up to two batches ahead of the stage. A stage whose batches wait on IO
//! may let them overlap ([`Stage::IN_FLIGHT`], ADR 0043): the runner takes the next batch while
//! earlier ones still run ([`Stage::begin`]), as long as none of its inputs claims what one in
//! flight holds ([`Stage::claim`]).
//!
//! It does not know what the payloads mean, and it holds no Kubernetes or process concerns: the
//! counters and the trace context come in as [`Hooks`] from the service.
//!
//! A runner serves one consumer, optionally restricted to a subject filter, so that units
//! partitioned by subject across replicas later need one consumer (and one runner) per
//! partition and nothing else.

pub mod publish;
pub mod timings;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt as _, Stream, StreamExt};
use sluice_runtime::spans::{Attribute, Kind, Span};
use sluice_runtime::{parse_traceparent, TraceContext};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::bus::{content_id, message_id, Bus, Outgoing};
use crate::coalesce;
use crate::error::{Error, Result};
use crate::feed::{Delivered, Freshness};
use crate::gather::Gather;
use crate::partition::Partition;
use crate::topology::{self, Acks, ConsumerSpec, StreamSpec};
use crate::transit::Missed;
use crate::window::{AckWindow, Settled};
use timings::Timings;

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

/// An action's name, as a failed input's span says it (`error.type`).
fn action_name(action: Action) -> &'static str {
    match action {
        Action::Retry => "retry",
        Action::Reject => "reject",
        Action::Stop => "stop",
    }
}

/// An error of a stage: its type says what becomes of the input.
pub trait Failure: std::error::Error + Send + Sync + 'static {
    fn action(&self) -> Action;

    /// Headers the dead letter of a rejected input carries besides its reason and origin
    /// subject (where the input came from, say): (name, value).
    fn dead_letter_headers(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// One decoded input and where it came from.
#[derive(Debug)]
pub struct Input<T> {
    pub delivered: Delivered,
    pub value: T,
    /// The trace context of the stage's span of this input, when spans are exported (ADR
    /// 0045): the context its outputs carry, and the parent of any span the stage records
    /// while handling it (the applier's API requests).
    pub span: Option<TraceContext>,
}

/// The message of the side feed that a side item is of (a configuration change, say): the
/// runner records the stage's span of it, and the outputs of the item continue its trace (ADR
/// 0045).
#[derive(Clone, Debug)]
pub struct SideMessage {
    /// The stream the side feed follows.
    pub stream: &'static str,
    pub subject: String,
    pub sequence: u64,
    /// The trace context the message carries; `None` begins a trace at the stage.
    pub traceparent: Option<String>,
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

/// One message a stage wants published for an input, or a purge ([`Output::purge`]). Unless
/// the stage names its message id (`id`), the runner derives it from the input (so a
/// redelivered input publishes duplicates JetStream drops); its trace context derives from the
/// input's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// The message's subject; a purge's subject filter.
    pub subject: String,
    pub payload: Bytes,
    /// The message id, when the stage names it (after the content it renders, say); an output
    /// of no input (of the side feed, a tick or a flush) without one is named by its subject
    /// and payload.
    pub id: Option<String>,
    /// How long the stream keeps the message (`Nats-TTL`, a tombstone); `None` for as long as
    /// the stream's own limits say.
    pub ttl: Option<Duration>,
    /// `Some(stream)`: not a message but a purge of the stream's messages on `subject` (a
    /// filter), carried out once every earlier output is stored; later outputs follow it.
    pub purge: Option<StreamSpec>,
    /// For an output of held inputs ([`Stage::flush`]): the stream sequence of the held input
    /// whose trace context it continues; `None` (or an input not held) starts a new trace. For
    /// an output of a side item: the sequence of its message ([`Stage::side_messages`]) whose
    /// trace it continues; `None`, the item's last message's.
    pub source: Option<u64>,
    /// For an output of no input: the trace context it carries, when the stage began a trace
    /// of its own for it (the span of an applier's repair, say); `None`: the runner's.
    pub trace: Option<TraceContext>,
}

impl Output {
    /// A message on `subject`, its id derived by the runner.
    pub fn message(subject: String, payload: Bytes) -> Output {
        Output {
            subject,
            payload,
            ..Output::default()
        }
    }

    /// A purge of `stream`'s messages on the subjects of `filter`.
    pub fn purge(stream: StreamSpec, filter: String) -> Output {
        Output {
            subject: filter,
            purge: Some(stream),
            ..Output::default()
        }
    }
}

/// How long a holding stage ([`Stage::HOLD`]) may keep inputs before they are flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Flushed once this many inputs are held: keep it well below the consumer's
    /// `max_ack_pending`, or the server stops delivering what the stage waits for.
    pub max_inputs: usize,
    /// Flushed at the latest this long after the first of them was held.
    pub max_age: Duration,
}

/// A decoder the runner runs in a task of its own, ahead of the stage ([`Stage::decoder`]).
pub type Decoder<T, E> = Arc<dyn Fn(&Delivered) -> std::result::Result<T, E> + Send + Sync>;

/// The outcome of one input: its outputs, or an error that says retry or reject.
pub type Outcome<E> = std::result::Result<Vec<Output>, E>;

/// What an input of an overlapping stage ([`Stage::IN_FLIGHT`]) holds while its batch is in
/// flight, besides its subject, which it always holds alone: a group it shares with the
/// group's other inputs, or one it holds whole.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Claim {
    Shared(String),
    Whole(String),
}

/// The end of a batch's work that ran beside later batches ([`Stage::begin`]): given the
/// stage back, it returns the batch's outcomes, one per input in order.
pub type Ending<S> =
    Box<dyn for<'a> FnOnce(&'a mut S) -> BoxFuture<'a, Vec<Outcome<<S as Stage>::Error>>> + Send>;

/// The work of a batch that runs beside later batches ([`Stage::begin`]): it owns what it
/// needs and ends with the stage ([`Ending`]).
pub type Work<S> = BoxFuture<'static, Ending<S>>;

/// An [`Ending`] from a closure (which gives the closure its higher-ranked signature).
pub fn ending<S, F>(end: F) -> Ending<S>
where
    S: Stage,
    F: for<'a> FnOnce(&'a mut S) -> BoxFuture<'a, Vec<Outcome<S::Error>>> + Send + 'static,
{
    Box::new(end)
}

/// A pipeline stage as the runner drives it.
pub trait Stage: Send {
    /// A decoded input.
    type Input: Send + Sync + 'static;
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

    /// Whether the stage holds the inputs it handled across batches (ADR 0014): with `Some`,
    /// the runner keeps every handled input unacked, with the outputs of its outcome, and
    /// calls [`Stage::flush`] once `max_inputs` are held, once the consumer has nothing more
    /// waiting (the last delivery's `pending` count is 0 and no decoded batch waits), at the
    /// latest `max_age` after the first was held, before a side message and before draining;
    /// the held inputs are acked once their outputs and the flush's are stored.
    const HOLD: Option<Hold> = None;

    /// How many batches may be in flight at once (ADR 0043). Above one, the runner starts each
    /// batch with [`Stage::begin`] and takes the next while earlier ones still wait (on an API
    /// server, say), as long as none of its inputs claims what one in flight holds: its
    /// subject, and its [`Stage::claim`]. Batches are settled (published, acked) in the order
    /// they end. A holding or joint stage, or one whose consumer has covering acks, runs one
    /// batch at a time whatever this says.
    const IN_FLIGHT: usize = 1;

    /// What `input` holds besides its subject while its batch is in flight
    /// ([`Stage::IN_FLIGHT`]); `None` for nothing more.
    fn claim(&self, _input: &Self::Input) -> Option<Claim> {
        None
    }

    /// Starts a batch whose work runs beside later batches ([`Stage::IN_FLIGHT`]); `None` has
    /// the batch handled ([`Stage::handle`]) before the next is taken.
    fn begin(&mut self, _inputs: Arc<[Input<Self::Input>]>) -> Option<Work<Self>>
    where
        Self: Sized + 'static,
    {
        None
    }

    /// Decodes one delivered message; an error is handled as any other (a payload that does
    /// not decode is a [`Action::Reject`]).
    fn decode(&self, delivered: &Delivered) -> std::result::Result<Self::Input, Self::Error>;

    /// A decoder for the runner to run in a task of its own, which takes, keeps fresh and
    /// decodes up to two batches ahead of the stage (for a decode that costs as much as the
    /// handling, a parse); `None` decodes with [`Stage::decode`] between batches.
    fn decoder(&self) -> Option<Decoder<Self::Input, Self::Error>> {
        None
    }

    /// The outputs of the inputs held since the last flush ([`Stage::HOLD`]); the runner acks
    /// those inputs once these are stored.
    fn flush(&mut self) -> impl Future<Output = Vec<Output>> + Send {
        async { Vec::new() }
    }

    /// Handles a batch of inputs (at most one per subject of a state stream, in stream order)
    /// and returns one outcome per input, in the same order.
    fn handle(
        &mut self,
        inputs: &[Input<Self::Input>],
    ) -> impl Future<Output = Vec<Outcome<Self::Error>>> + Send;

    /// Takes one message of the side feed; returns what it makes the stage publish (no input
    /// is acked for these). `span`: the trace context of the stage's span of the item's last
    /// message ([`Stage::side_messages`]), the parent of any span the stage records while
    /// handling it (the applier's API requests); `None` when it names none or spans are not
    /// exported.
    fn on_side(
        &mut self,
        side: Self::Side,
        span: Option<TraceContext>,
    ) -> impl Future<Output = Vec<Output>> + Send;

    /// The messages of the side feed that `side` is of, in their order, for the stage's span
    /// of each and the trace its outputs continue; none (the default) has its outputs begin a
    /// trace of their own.
    fn side_messages(&self, _side: &Self::Side) -> Vec<SideMessage> {
        Vec::new()
    }

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
    /// Subjects whose freshness was forgotten at the consumer's ack floor
    /// ([`Freshness::forget_through`]).
    pub forgotten: Count,
    /// Where the runner's histograms of its batches go ([`Timings`]); `None`: not measured.
    pub health: Option<sluice_runtime::Health>,
}

impl Default for Hooks {
    fn default() -> Hooks {
        let none: Count = Arc::new(|_| {});
        Hooks {
            handled: none.clone(),
            retried: none.clone(),
            rejected: none.clone(),
            trace: None,
            forgotten: none,
            health: None,
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
    /// How to bind a bus durable again whose deliveries ended because one never arrived
    /// ([`crate::transit`]); not for another server's consumer ([`Runner::over`]).
    rebind: Option<Rebind>,
    /// The connection of a consumer on another server ([`Runner::over`]), flushed in the drain.
    upstream: Option<async_nats::Client>,
    core: Core,
    /// Published before the first input is taken.
    first: Vec<Output>,
}

/// The messages a runner consumes: its durable consumer's, or another server's.
pub type Consumer = futures::stream::BoxStream<
    'static,
    std::result::Result<Message, async_nats::jetstream::consumer::pull::MessagesError>,
>;

/// What a runner binds again when a delivery never arrived: its durable's filter, the mark of
/// its current deliveries, and when it last bound them again.
struct Rebind {
    filter: Option<String>,
    missed: Missed,
    last: Option<tokio::time::Instant>,
}

/// The least time between two bindings again of one consumer: deliveries missed again at
/// once (a server that numbers them otherwise than expected) cost a reset a second, not a
/// busy loop of them.
const REBIND_SPACING: Duration = Duration::from_secs(1);

/// Everything of a runner but its consumer, which the drain drops first.
struct Core {
    bus: Bus,
    spec: ConsumerSpec,
    freshness: Freshness,
    hooks: Hooks,
    /// The histograms of the consumer's batches, from [`Hooks::health`].
    timings: Option<Timings>,
    drain_deadline: Duration,
    window: AckWindow,
    held: Held,
    /// Whether handled inputs are recorded in `freshness` here (not once a reader keeps it).
    keeps_freshness: bool,
    /// The stage's partition: the inputs and outputs of other partitions' clusters are not its
    /// own ([`Runner::with_partition`]).
    partition: Partition,
    /// Where the inputs of other partitions are counted, from [`Hooks::health`].
    others: Option<sluice_runtime::Counter>,
}

/// How a batch went.
enum Flow {
    Continue,
    /// The drain deadline passed while the stage handled these inputs: they are to be nacked
    /// once the consumer is gone.
    Cut(Vec<Message>),
}

/// A message to publish or a purge, in the order the stage returned them.
enum Out {
    Message(Outgoing),
    Purge(StreamSpec, String),
}

/// A batch kept fresh and decoded: its inputs, their messages, and whether the consumer had
/// more waiting when the batch's last message was delivered (its `pending` count).
struct Decoded<T> {
    inputs: Vec<Input<T>>,
    messages: Vec<Message>,
    behind: bool,
}

/// The inputs a holding stage handled since its last flush ([`Stage::HOLD`]): their messages,
/// the messages their outcomes named, the trace context of each by stream sequence, and when
/// the first of them was held.
#[derive(Default)]
struct Held {
    messages: Vec<Message>,
    outs: Vec<Out>,
    parents: Parents,
    since: Option<tokio::time::Instant>,
}

/// The trace contexts that outputs of no input continue: of held inputs or of a side item's
/// messages, by stream sequence ([`Output::source`]), and the one an output naming none
/// continues (a side item's last message's); a new trace's without.
#[derive(Default)]
struct Parents {
    by_sequence: HashMap<u64, String>,
    last: Option<String>,
}

/// What the batches in flight of an overlapping stage hold ([`Stage::IN_FLIGHT`]): subjects
/// alone, groups shared or whole.
#[derive(Debug, Default)]
struct Holds {
    subjects: HashSet<String>,
    groups: HashMap<String, Group>,
}

/// How a group is held: by how many inputs in common, or by one whole.
#[derive(Debug, Default)]
struct Group {
    shared: usize,
    whole: bool,
}

/// One input's claims: its subject and what its stage says it holds besides.
type Claims = (String, Option<Claim>);

impl Holds {
    /// Whether a batch with `claims` may start beside what is held: none of its subjects is
    /// held, none of its groups is held whole, and none it claims whole is held at all.
    fn admit(&self, claims: &[Claims]) -> bool {
        claims.iter().all(|(subject, claim)| {
            !self.subjects.contains(subject)
                && match claim {
                    None => true,
                    Some(Claim::Shared(group)) => {
                        self.groups.get(group).is_none_or(|held| !held.whole)
                    }
                    Some(Claim::Whole(group)) => !self.groups.contains_key(group),
                }
        })
    }

    fn take(&mut self, claims: &[Claims]) {
        for (subject, claim) in claims {
            self.subjects.insert(subject.clone());
            match claim {
                None => {}
                Some(Claim::Shared(group)) => {
                    self.groups.entry(group.clone()).or_default().shared += 1
                }
                Some(Claim::Whole(group)) => {
                    self.groups.entry(group.clone()).or_default().whole = true
                }
            }
        }
    }

    fn give_back(&mut self, claims: &[Claims]) {
        for (subject, claim) in claims {
            self.subjects.remove(subject);
            let (group, whole) = match claim {
                None => continue,
                Some(Claim::Shared(group)) => (group, false),
                Some(Claim::Whole(group)) => (group, true),
            };
            if let Some(held) = self.groups.get_mut(group) {
                if whole {
                    held.whole = false;
                } else {
                    held.shared = held.shared.saturating_sub(1);
                }
                if !held.whole && held.shared == 0 {
                    self.groups.remove(group);
                }
            }
        }
    }
}

/// When a batch began: on the runtime's clock for its histograms (when measured), and on the
/// wall clock for its spans.
struct Began {
    timed: Option<tokio::time::Instant>,
    at: SystemTime,
}

/// A batch in flight: its inputs, their messages, what they hold and when it began (when
/// measured).
struct Flight<T> {
    inputs: Arc<[Input<T>]>,
    messages: Vec<Message>,
    claims: Vec<Claims>,
    began: Began,
}

/// The batches of an overlapping stage in flight ([`Stage::IN_FLIGHT`]): their work, in the
/// order it ends, and what each holds.
struct Flights<S: Stage + 'static> {
    running: FuturesUnordered<BoxFuture<'static, (u64, Ending<S>)>>,
    batches: HashMap<u64, Flight<S::Input>>,
    holds: Holds,
    next: u64,
}

impl<S: Stage + 'static> Flights<S> {
    fn new() -> Flights<S> {
        Flights {
            running: FuturesUnordered::new(),
            batches: HashMap::new(),
            holds: Holds::default(),
            next: 0,
        }
    }

    fn len(&self) -> usize {
        self.batches.len()
    }

    fn start(&mut self, work: Work<S>, flight: Flight<S::Input>) {
        let id = self.next;
        self.next += 1;
        self.holds.take(&flight.claims);
        self.batches.insert(id, flight);
        self.running
            .push(work.map(move |ending| (id, ending)).boxed());
    }

    /// The batch whose work ended, its claims given back.
    fn ended(&mut self, id: u64) -> Option<Flight<S::Input>> {
        let flight = self.batches.remove(&id)?;
        self.holds.give_back(&flight.claims);
        Some(flight)
    }

    /// Awaits `hook` (the stage's [`Stage::on_side`] or [`Stage::on_tick`]) while the batches
    /// in flight go on, and returns the batches that ended meanwhile, to be settled once it
    /// returned. A batch's work runs only while it is polled, and a hook may wait for what a
    /// batch in flight holds: the applier's repair of a unit waits for its pair's listing, which
    /// a unit in flight holds while its LIST runs; not polled meanwhile, that batch would never
    /// give it back.
    async fn beside<T>(
        &mut self,
        hook: impl std::future::Future<Output = T>,
    ) -> (T, Vec<(u64, Ending<S>)>) {
        let mut hook = std::pin::pin!(hook);
        let mut ended = Vec::new();
        loop {
            tokio::select! {
                biased;
                out = &mut hook => return (out, ended),
                Some(done) = self.running.next(), if !self.running.is_empty() => ended.push(done),
            }
        }
    }

    /// Stops the work of every batch in flight and gives their inputs back at once.
    async fn abandon(&mut self) {
        self.running.clear();
        self.holds = Holds::default();
        for (_, flight) in self.batches.drain() {
            for message in &flight.messages {
                nack(message, Duration::ZERO).await;
            }
        }
    }
}

/// Where a runner's batches come from: its consumer, or the task that decodes them ahead.
enum Source<T> {
    Inline(Gather<Consumer>),
    Piped {
        decoded: tokio::sync::mpsc::Receiver<Decoded<T>>,
        /// Gives back the freshness it kept once it ends.
        reader: tokio::task::JoinHandle<Result<Freshness>>,
    },
}

/// A batch as its source gives it.
enum Next<T> {
    Raw(Vec<Message>),
    Decoded(Decoded<T>),
}

impl<T: Send + Sync + 'static> Source<T> {
    async fn next(&mut self) -> Option<Next<T>> {
        match self {
            Source::Inline(consumer) => coalesce::next_gathered(consumer).await.map(Next::Raw),
            Source::Piped { decoded, .. } => decoded.recv().await.map(Next::Decoded),
        }
    }

    /// Whether a decoded batch waits for the stage.
    fn waiting(&self) -> bool {
        match self {
            Source::Inline(_) => false,
            Source::Piped { decoded, .. } => !decoded.is_empty(),
        }
    }

    /// Why the source gave nothing more: the consumer ended, or the reader failed.
    async fn ended(&mut self, spec: &ConsumerSpec) -> Error {
        let ended = Error::Ended {
            what: format!("consumer {} on {}", spec.durable, spec.stream.name),
        };
        match self {
            Source::Inline(_) => ended,
            Source::Piped { reader, .. } => match reader.await {
                Ok(Err(error)) => error,
                Ok(Ok(_)) => ended,
                Err(panicked) => Error::Ended {
                    what: format!("reader of {}: {panicked}", spec.durable),
                },
            },
        }
    }

    /// Stops taking batches: releases the consumer ([`release`]), or stops the reader (which
    /// releases it), nacks what it decoded and the stage did not take, and waits for its drain.
    async fn stop(self, reader_token: &CancellationToken, within: Duration) {
        match self {
            Source::Inline(consumer) => release(consumer, within).await,
            Source::Piped {
                mut decoded,
                reader,
            } => {
                reader_token.cancel();
                decoded.close();
                while let Some(batch) = decoded.recv().await {
                    for message in &batch.messages {
                        nack(message, Duration::ZERO).await;
                    }
                }
                match reader.await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        tracing::warn!(error = %chain(&error), "reader ended with an error")
                    }
                    Err(panicked) => tracing::error!(error = %panicked, "reader panicked"),
                }
            }
        }
    }
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
        let (consumer, missed) = bus.durable_watched(spec, filter).await?;
        let mut runner = Runner::over(bus, consumer, None, spec);
        runner.rebind = Some(Rebind {
            filter: filter.map(str::to_string),
            missed,
            last: None,
        });
        Ok(runner)
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
            rebind: None,
            upstream,
            core: Core {
                bus: bus.clone(),
                spec,
                freshness: Freshness::default(),
                hooks: Hooks::default(),
                timings: None,
                drain_deadline: DRAIN_DEADLINE,
                window: AckWindow::new(topology::PUBLISH_WINDOW).acking(spec.acks),
                held: Held::default(),
                keeps_freshness: true,
                partition: Partition::WHOLE,
                others: None,
            },
            first: Vec::new(),
        }
    }

    /// Starts from the newest sequences a replay already processed (state streams only): an
    /// older delivery of their subjects is dropped.
    pub fn with_freshness(mut self, freshness: Freshness) -> Runner {
        self.core.freshness = freshness;
        self
    }

    /// Runs the stage as one partition of it (ADR 0051): an input of another partition's
    /// cluster is acked without work (it is that partition's, on a durable of its own), and an
    /// output or purge of another partition's cluster is not published (a stage may derive one
    /// from the configuration, which every partition reads whole). The runner must be bound to
    /// the partition's durable, [`Partition::consumer`].
    pub fn with_partition(mut self, partition: Partition) -> Runner {
        self.core.partition = partition;
        self
    }

    pub fn with_hooks(mut self, hooks: Hooks) -> Runner {
        self.core.timings = hooks
            .health
            .as_ref()
            .map(|health| Timings::new(health, &self.core.spec));
        self.core.others = self.core.timings.as_ref().map(Timings::others);
        self.core.hooks = hooks;
        self
    }

    /// How long the drain after cancellation may take before in-flight inputs are left to be
    /// redelivered.
    pub fn with_drain_deadline(mut self, deadline: Duration) -> Runner {
        self.core.drain_deadline = deadline;
        self
    }

    /// Outputs to publish, in their order and purges included, before the first input is
    /// taken (what a stage rebuilt at start found to differ from what is stored), as outputs
    /// of no input.
    pub fn publishing_first(mut self, outputs: Vec<Output>) -> Runner {
        self.first = outputs;
        self
    }

    /// Runs `stage` until `token` is cancelled, then drains within the deadline and returns.
    /// `side` is the stage's side feed; its end is an error, as is the consumer's. An error
    /// means the bus is unusable (the process restarts); with covering acks
    /// ([`Acks::Covering`]) an input to retry is one too, since a later ack would cover it.
    pub async fn run<S, F>(self, stage: &mut S, side: F, token: CancellationToken) -> Result<()>
    where
        S: Stage + 'static,
        F: Stream<Item = S::Side> + Send,
    {
        let Runner {
            consumer,
            mut rebind,
            upstream,
            mut core,
            first,
        } = self;
        let mut side = std::pin::pin!(side);
        tracing::info!(
            consumer = core.spec.durable,
            stream = core.spec.stream.name,
            "stage running"
        );
        // Whichever way this ends, the reader task (if any) stops with it.
        let reader_token = token.child_token();
        let _stop_reader = reader_token.clone().drop_guard();
        let mut source = match stage.decoder() {
            None => Source::Inline(gather(consumer, &core.bus)),
            Some(decoder) => core.spawn_reader(consumer, decoder, reader_token.clone()),
        };
        core.unprompted(first).await?;
        let overlapping =
            S::IN_FLIGHT > 1 && S::HOLD.is_none() && !S::JOINT && core.spec.acks != Acks::Covering;
        let mut flights = Flights::<S>::new();
        let mut cut = Vec::new();
        loop {
            let tick = stage.next_tick();
            let flush_at = S::HOLD.and_then(|hold| core.held.since.map(|at| at + hold.max_age));
            // Unbiased: a busy side feed must not starve the consumer, nor the other way round.
            tokio::select! {
                () = token.cancelled() => break,
                settled = core.window.next(), if !core.window.is_empty() => {
                    if let Some(settled) = settled {
                        core.settled(settled)?;
                    }
                }
                ended = flights.running.next(), if !flights.running.is_empty() => {
                    core.end_all(stage, &mut flights, ended).await?;
                }
                item = side.next() => {
                    let Some(item) = item else {
                        return Err(Error::Ended { what: format!("side feed of {}", core.spec.durable) });
                    };
                    // What is held goes out first, acked with its own outputs.
                    core.flush(stage).await?;
                    let (began, messages) = (SystemTime::now(), stage.side_messages(&item));
                    let contexts = core.side_contexts(&messages);
                    let span = contexts
                        .last()
                        .copied()
                        .filter(|_| sluice_runtime::spans::spans_enabled());
                    let (outputs, ended) = flights.beside(stage.on_side(item, span)).await;
                    let parents = core.side_spans(&messages, &contexts, began);
                    core.unprompted_of(outputs, &parents).await?;
                    core.end_all(stage, &mut flights, ended).await?;
                }
                () = sluice_runtime::schedule::sleep_until(tick), if tick.is_some() => {
                    let (outputs, ended) = flights.beside(stage.on_tick()).await;
                    core.unprompted(outputs).await?;
                    core.end_all(stage, &mut flights, ended).await?;
                }
                () = sluice_runtime::schedule::sleep_until(flush_at), if flush_at.is_some() => core.flush(stage).await?,
                next = source.next(), if !core.window.is_full() && flights.len() < S::IN_FLIGHT => {
                    let Some(next) = next else {
                        // A reader also ends when cancelled.
                        if token.is_cancelled() {
                            break;
                        }
                        match rebind.as_mut() {
                            Some(rebind) if rebind.missed.is_set() => {
                                // The batches in flight end first (or are given back): the
                                // reset below hands out again what is not acked by then.
                                core.land(stage, &mut flights).await;
                                source = core.bind_again(stage, source, rebind, &reader_token).await?;
                                continue;
                            }
                            _ => return Err(source.ended(&core.spec).await),
                        }
                    };
                    let decoded = match next {
                        Next::Raw(batch) => {
                            core.prune_freshness().await;
                            let (decoded, undecoded) = core.decode(|d| stage.decode(d), batch, false);
                            core.undecoded(undecoded).await?;
                            decoded
                        }
                        Next::Decoded(decoded) => decoded,
                    };
                    let behind = decoded.behind;
                    let flow = if overlapping {
                        core.begin(stage, decoded, &mut flights, &token).await
                    } else {
                        core.process(stage, decoded, &token).await
                    };
                    let flow = match flow {
                        Ok(flow) => flow,
                        Err(error) => {
                            flights.abandon().await;
                            return Err(error);
                        }
                    };
                    if let Flow::Cut(messages) = flow {
                        cut = messages;
                        break;
                    }
                    // Read once the batch is handled: the reader may have queued more meanwhile.
                    core.settle_held(stage, behind || source.waiting()).await?;
                }
            }
        }
        // The batches in flight end within the drain deadline, or come back.
        core.land(stage, &mut flights).await;
        // What is held goes out before the drain: its inputs are acked once it is stored.
        core.flush(stage).await?;
        // Stop pulling first: the server must not hand what is nacked below to a pull
        // request nobody reads any more (it would wait out its ack wait there).
        source
            .stop(&reader_token, core.drain_deadline.min(RELEASE_WITHIN))
            .await;
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
    /// Starts the task that takes, keeps fresh and decodes batches ahead of the stage, up to
    /// two of them; it takes over the freshness, and has a window of its own for the inputs it
    /// acks without work or dead-letters.
    fn spawn_reader<T, E>(
        &mut self,
        consumer: Consumer,
        decoder: Decoder<T, E>,
        token: CancellationToken,
    ) -> Source<T>
    where
        T: Send + Sync + 'static,
        E: Failure,
    {
        let (batches, decoded) = tokio::sync::mpsc::channel(2);
        let reader = Core {
            bus: self.bus.clone(),
            spec: self.spec,
            freshness: std::mem::take(&mut self.freshness),
            hooks: self.hooks.clone(),
            timings: None,
            drain_deadline: self.drain_deadline,
            window: AckWindow::new(topology::PUBLISH_WINDOW).acking(self.spec.acks),
            held: Held::default(),
            keeps_freshness: true,
            partition: self.partition,
            others: self.others.clone(),
        };
        self.keeps_freshness = false;
        let consumer = gather(consumer, &self.bus);
        let reader = tokio::spawn(reader.read(consumer, decoder, batches, token));
        Source::Piped { decoded, reader }
    }

    /// The reader task's loop: hands each decoded batch to the stage until `token` is
    /// cancelled or the stage is gone, then drains its own window.
    async fn read<T, E>(
        mut self,
        mut consumer: Gather<Consumer>,
        decoder: Decoder<T, E>,
        batches: tokio::sync::mpsc::Sender<Decoded<T>>,
        token: CancellationToken,
    ) -> Result<Freshness>
    where
        T: Send + Sync + 'static,
        E: Failure,
    {
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                settled = self.window.next(), if !self.window.is_empty() => {
                    if let Some(settled) = settled {
                        self.settled(settled)?;
                    }
                }
                batch = coalesce::next_gathered(&mut consumer), if !self.window.is_full() => {
                    // The consumer ended: what was taken settles, and the runner sees the end.
                    let Some(batch) = batch else { break };
                    self.prune_freshness().await;
                    let (decoded, undecoded) = self.decode(|d| decoder(d), batch, true);
                    self.undecoded(undecoded).await?;
                    if decoded.inputs.is_empty() {
                        continue;
                    }
                    if let Err(unsent) = batches.send(decoded).await {
                        for message in &unsent.0.messages {
                            nack(message, Duration::ZERO).await;
                        }
                        break;
                    }
                }
            }
        }
        release(consumer, self.drain_deadline.min(RELEASE_WITHIN)).await;
        self.drain().await;
        Ok(self.freshness)
    }

    /// Binds the consumer again after a delivery never arrived ([`crate::transit`]): what
    /// came before it is settled first (its outputs stored, its inputs acked, which covers
    /// nothing after it), then the durable is reset to its ack floor, so that the lost delivery
    /// and everything after it come again, to a source built as the first was.
    async fn bind_again<S: Stage + 'static>(
        &mut self,
        stage: &mut S,
        source: Source<S::Input>,
        rebind: &mut Rebind,
        reader_token: &CancellationToken,
    ) -> Result<Source<S::Input>> {
        if let Source::Piped { reader, .. } = source {
            self.freshness = match reader.await {
                Ok(result) => result?,
                Err(panicked) => {
                    return Err(Error::Ended {
                        what: format!("reader of {}: {panicked}", self.spec.durable),
                    })
                }
            };
        }
        self.flush(stage).await?;
        while let Some(settled) = self.window.next().await {
            self.settled(settled)?;
        }
        if let Err(error) = self.bus.client().flush().await {
            tracing::debug!(error = %error, "flush before binding the consumer again failed");
        }
        if let Some(last) = rebind.last {
            tokio::time::sleep_until(last + REBIND_SPACING).await;
        }
        rebind.last = Some(tokio::time::Instant::now());
        let (consumer, missed) = self
            .bus
            .durable_watched(self.spec, rebind.filter.as_deref())
            .await?;
        rebind.missed = missed;
        if let Some(timings) = &self.timings {
            timings.rebound();
        }
        tracing::info!(
            consumer = self.spec.durable,
            stream = self.spec.stream.name,
            "consumer bound again from its ack floor"
        );
        Ok(match stage.decoder() {
            None => Source::Inline(gather(consumer, &self.bus)),
            Some(decoder) => self.spawn_reader(consumer, decoder, reader_token.clone()),
        })
    }

    /// Keeps a batch fresh and decodes it; returns it with what did not decode, for
    /// [`Core::undecoded`]. A reader (`ahead`) decodes off the async executor and records an
    /// input's freshness as it hands it on (the stage records its own once handled).
    #[allow(clippy::type_complexity)]
    fn decode<T, E: Failure>(
        &mut self,
        decode: impl Fn(&Delivered) -> std::result::Result<T, E>,
        batch: Vec<Message>,
        ahead: bool,
    ) -> (Decoded<T>, Vec<(Delivered, Message, E)>) {
        let behind = batch
            .last()
            .and_then(|message| message.info().ok())
            .is_some_and(|info| info.pending > 0);
        let taken = self.fresh(batch);
        let decode_all = || {
            taken
                .into_iter()
                .map(|(delivered, message)| (decode(&delivered), delivered, message))
                .collect::<Vec<_>>()
        };
        let results = if ahead {
            off_executor(decode_all)
        } else {
            decode_all()
        };
        let mut decoded = Decoded {
            inputs: Vec::with_capacity(results.len()),
            messages: Vec::with_capacity(results.len()),
            behind,
        };
        let mut undecoded = Vec::new();
        let spans = sluice_runtime::spans::spans_enabled();
        for (value, delivered, message) in results {
            match value {
                Ok(value) => {
                    if ahead {
                        self.record_fresh(&delivered);
                    }
                    let span = spans.then(|| self.span_context(&delivered));
                    decoded.inputs.push(Input {
                        delivered,
                        value,
                        span,
                    });
                    decoded.messages.push(message);
                }
                Err(error) => undecoded.push((delivered, message, error)),
            }
        }
        (decoded, undecoded)
    }

    /// A batch of `messages` begins: measured when the runner measures.
    fn began(&self, messages: &[Message]) -> Began {
        Began {
            timed: self.timings.as_ref().map(|timings| timings.begin(messages)),
            at: SystemTime::now(),
        }
    }

    /// The stage is done with the batch that `began`.
    fn ended(&self, began: &Began) {
        if let (Some(timings), Some(at)) = (&self.timings, began.timed) {
            timings.end(at);
        }
    }

    /// Retries or rejects the inputs that did not decode, as their errors say.
    async fn undecoded<E: Failure>(
        &mut self,
        undecoded: Vec<(Delivered, Message, E)>,
    ) -> Result<()> {
        for (delivered, message, error) in undecoded {
            self.failed(&delivered, message, &error).await?;
        }
        Ok(())
    }

    /// Runs one batch.
    async fn process<S: Stage>(
        &mut self,
        stage: &mut S,
        decoded: Decoded<S::Input>,
        token: &CancellationToken,
    ) -> Result<Flow> {
        let Decoded {
            inputs, messages, ..
        } = decoded;
        let span = tracing::debug_span!("batch", consumer = self.spec.durable, size = inputs.len());
        if inputs.is_empty() {
            return Ok(Flow::Continue);
        }
        let deadline = self.drain_deadline;
        let cut = async {
            token.cancelled().await;
            tokio::time::sleep(deadline).await;
        };
        let began = self.began(&messages);
        let outcomes = tokio::select! {
            outcomes = stage.handle(&inputs).instrument(span) => outcomes,
            () = cut => {
                tracing::warn!(consumer = self.spec.durable, inputs = messages.len(), "drain deadline passed while handling, inputs will be redelivered");
                return Ok(Flow::Cut(messages));
            }
        };
        self.ended(&began);
        self.checked::<S>(&inputs, messages, outcomes, began.at)
            .await
    }

    /// Settles a handled batch ([`Core::settle`]) unless its stage returned a different number
    /// of outcomes than inputs (a stage bug): then the inputs come back rather than being
    /// acked unhandled.
    async fn checked<S: Stage>(
        &mut self,
        inputs: &[Input<S::Input>],
        messages: Vec<Message>,
        outcomes: Vec<Outcome<S::Error>>,
        began: SystemTime,
    ) -> Result<Flow> {
        if outcomes.len() != inputs.len() {
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
        self.settle::<S>(inputs, messages, outcomes, began).await?;
        Ok(Flow::Continue)
    }

    /// Publishes, holds or fails each input of a handled batch (begun at `began`) as its
    /// outcome says, and records each input's span when spans are exported.
    async fn settle<S: Stage>(
        &mut self,
        inputs: &[Input<S::Input>],
        messages: Vec<Message>,
        outcomes: Vec<Outcome<S::Error>>,
        began: SystemTime,
    ) -> Result<()> {
        let mut joint = (Vec::new(), Vec::new());
        let batch = inputs.len();
        let mut rest = inputs.iter().zip(messages).zip(outcomes);
        while let Some(((input, message), outcome)) = rest.next() {
            // What outputs of the input carry, now or (held) at the flush: its span's context.
            let traceparent = match (input.span, self.hooks.trace) {
                (Some(span), Some(_)) => Some(span.to_string()),
                _ => (S::HOLD.is_some()
                    || outcome.as_ref().is_ok_and(|outputs| !outputs.is_empty()))
                .then(|| self.traceparent(&input.delivered))
                .flatten(),
            };
            if let Some(span) = input.span {
                let failure = outcome
                    .as_ref()
                    .err()
                    .map(|error| (action_name(error.action()), chain(error)));
                self.record_span(&input.delivered, span, began, batch, failure);
            }
            match outcome {
                Ok(outputs) => {
                    let outgoing = self.outgoing(&input.delivered, outputs, traceparent.clone());
                    if S::HOLD.is_some() {
                        self.held
                            .add(&input.delivered, message, outgoing, traceparent);
                    } else if S::JOINT {
                        joint.0.extend(outgoing);
                        joint.1.push(message);
                    } else {
                        self.publish(outgoing, vec![message]).await?;
                    }
                    self.record_fresh(&input.delivered);
                    (self.hooks.handled)(1);
                    if let Some(timings) = &self.timings {
                        timings.handled(input.delivered.traceparent.as_deref());
                    }
                }
                Err(error) => {
                    if let Err(stopped) = self.failed(&input.delivered, message, &error).await {
                        // The runner ends: what it has not settled comes back at once, not
                        // after its ack wait.
                        let held = std::mem::take(&mut self.held.messages);
                        let unsettled = joint
                            .1
                            .into_iter()
                            .chain(held)
                            .chain(rest.map(|((_, m), _)| m));
                        for message in unsettled {
                            nack(&message, Duration::ZERO).await;
                        }
                        return Err(stopped);
                    }
                }
            }
        }
        if !joint.1.is_empty() {
            self.publish(joint.0, joint.1).await?;
        }
        Ok(())
    }

    /// Starts a batch of an overlapping stage ([`Stage::IN_FLIGHT`]) once nothing in flight
    /// holds what it claims, ending earlier batches until then.
    async fn begin<S: Stage + 'static>(
        &mut self,
        stage: &mut S,
        decoded: Decoded<S::Input>,
        flights: &mut Flights<S>,
        token: &CancellationToken,
    ) -> Result<Flow> {
        let Decoded {
            inputs, messages, ..
        } = decoded;
        if inputs.is_empty() {
            return Ok(Flow::Continue);
        }
        let claims: Vec<Claims> = inputs
            .iter()
            .map(|input| (input.delivered.subject.clone(), stage.claim(&input.value)))
            .collect();
        while !flights.holds.admit(&claims) {
            tokio::select! {
                ended = flights.running.next() => {
                    let Some((id, ending)) = ended else { break };
                    if let Err(error) = self.end(stage, flights, id, ending).await {
                        // The runner ends: this batch comes back at once too.
                        for message in &messages {
                            nack(message, Duration::ZERO).await;
                        }
                        return Err(error);
                    }
                }
                () = token.cancelled() => return Ok(Flow::Cut(messages)),
            }
        }
        // Fresh from now on: an older state of these subjects that comes while they are in
        // flight is superseded.
        for input in &inputs {
            self.record_fresh(&input.delivered);
        }
        let inputs: Arc<[Input<S::Input>]> = inputs.into();
        let span = tracing::debug_span!("batch", consumer = self.spec.durable, size = inputs.len());
        let began = self.began(&messages);
        match stage.begin(inputs.clone()) {
            Some(work) => {
                flights.start(
                    work.instrument(span).boxed(),
                    Flight {
                        inputs,
                        messages,
                        claims,
                        began,
                    },
                );
                Ok(Flow::Continue)
            }
            None => {
                let outcomes = stage.handle(&inputs).instrument(span).await;
                self.ended(&began);
                self.checked::<S>(&inputs, messages, outcomes, began.at)
                    .await
            }
        }
    }

    /// Settles the batches whose work ended, in turn; on an error the batches still in flight
    /// are given back and the runner ends with it.
    async fn end_all<S: Stage + 'static>(
        &mut self,
        stage: &mut S,
        flights: &mut Flights<S>,
        ended: impl IntoIterator<Item = (u64, Ending<S>)>,
    ) -> Result<()> {
        for (id, ending) in ended {
            if let Err(error) = self.end(stage, flights, id, ending).await {
                flights.abandon().await;
                return Err(error);
            }
        }
        Ok(())
    }

    /// Settles a batch whose work ended ([`Stage::begin`]).
    async fn end<S: Stage>(
        &mut self,
        stage: &mut S,
        flights: &mut Flights<S>,
        id: u64,
        ending: Ending<S>,
    ) -> Result<()> {
        let outcomes = ending(stage).await;
        let Some(flight) = flights.ended(id) else {
            return Ok(());
        };
        self.ended(&flight.began);
        self.checked::<S>(&flight.inputs, flight.messages, outcomes, flight.began.at)
            .await
            .map(|_| ())
    }

    /// Ends the batches in flight within the drain deadline; the inputs of those that do not
    /// end in time are given back.
    async fn land<S: Stage>(&mut self, stage: &mut S, flights: &mut Flights<S>) {
        let deadline = tokio::time::Instant::now() + self.drain_deadline;
        while !flights.running.is_empty() {
            let ended = tokio::time::timeout_at(deadline, flights.running.next()).await;
            let Ok(Some((id, ending))) = ended else {
                tracing::warn!(
                    consumer = self.spec.durable,
                    batches = flights.len(),
                    "drain deadline passed with batches in flight, their inputs will be redelivered"
                );
                break;
            };
            if let Err(error) = self.end(stage, flights, id, ending).await {
                tracing::warn!(consumer = self.spec.durable, error = %chain(&error), "a batch in flight failed while draining");
                break;
            }
        }
        flights.abandon().await;
    }

    /// Flushes a holding stage once enough inputs are held or nothing more waits for it
    /// (`more` says whether something does): behind a burst or a backlog a stage's outputs go
    /// out once per round, not once per batch (ADR 0014).
    async fn settle_held<S: Stage>(&mut self, stage: &mut S, more: bool) -> Result<()> {
        let Some(hold) = S::HOLD else {
            return Ok(());
        };
        if self.held.messages.len() >= hold.max_inputs || !more {
            self.flush(stage).await?;
        }
        Ok(())
    }

    /// Publishes the outputs of the held inputs, theirs and what [`Stage::flush`] returns,
    /// and has the window ack those inputs once all of them are stored.
    async fn flush<S: Stage>(&mut self, stage: &mut S) -> Result<()> {
        if S::HOLD.is_none() || self.held.messages.is_empty() {
            return Ok(());
        }
        let outputs = stage.flush().await;
        let Held {
            messages,
            mut outs,
            parents,
            since: _,
        } = std::mem::take(&mut self.held);
        outs.extend(self.unprompted_outs(outputs, &parents));
        self.publish(outs, messages).await?;
        Ok(())
    }

    /// Publishes `outs` in their order through the window, which acks `inputs` once all of
    /// them are stored. A purge waits until every earlier output is stored: one that was not
    /// is an error (the runner ends; the stage rebuilds on restart) and nothing is purged.
    /// Returns how many messages were published.
    async fn publish(&mut self, mut outs: Vec<Out>, inputs: Vec<Message>) -> Result<usize> {
        let partition = self.partition;
        outs.retain(|out| match out {
            Out::Message(message) => partition.owns(&message.subject),
            Out::Purge(_, filter) => partition.owns(filter),
        });
        let mut messages = Vec::new();
        let mut published = 0;
        for out in outs {
            match out {
                Out::Message(message) => messages.push(message),
                Out::Purge(stream, filter) => {
                    let earlier = std::mem::take(&mut messages);
                    published += self.window.publish(&self.bus, earlier, Vec::new()).await?;
                    while let Some(settled) = self.window.next().await {
                        if let Settled::Retried(error) = settled {
                            (self.hooks.retried)(1);
                            return Err(error);
                        }
                    }
                    self.bus.purge(stream, &filter).await?;
                }
            }
        }
        published += self.window.publish(&self.bus, messages, inputs).await?;
        Ok(published)
    }

    /// The newest message per subject of a state stream that no newer handled state of its
    /// subject supersedes (the others go to the window, to be acked in order without work);
    /// every message of a log. A redelivery of the state last handled is handled again: it
    /// comes back because its outputs or its dead letter were not stored.
    fn fresh(&mut self, mut batch: Vec<Message>) -> Vec<(Delivered, Message)> {
        let stream = self.spec.stream.name;
        if !self.partition.is_whole() {
            let partition = self.partition;
            let (ours, others): (Vec<Message>, Vec<Message>) = batch
                .into_iter()
                .partition(|message| partition.owns(&message.subject));
            if let Some(count) = &self.others {
                count.add(others.len() as u64);
            }
            for message in others {
                self.window.push(Vec::new(), Some(message));
            }
            batch = ours;
        }
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
        coalesce::fresh(stream, batch, &self.freshness, &mut self.window)
    }
    /// Records that `delivered` was handled, where freshness is kept here and its stream is a
    /// state stream (a log's messages are each handled: none supersedes another).
    fn record_fresh(&mut self, delivered: &Delivered) {
        if self.keeps_freshness && self.spec.stream.max_per_subject.is_some() {
            self.freshness.record(delivered);
        }
    }

    /// Forgets what the consumer's ack floor makes useless in `freshness`
    /// ([`Freshness::forget_through`]) once it has grown enough to be worth one request.
    async fn prune_freshness(&mut self) {
        if !self.keeps_freshness {
            return;
        }
        let forgotten = self
            .freshness
            .prune_at_ack_floor(&self.bus, &self.spec)
            .await;
        if forgotten > 0 {
            (self.hooks.forgotten)(forgotten as u64);
        }
    }

    /// Retries or rejects one input as its error says.
    async fn failed<E: Failure>(
        &mut self,
        delivered: &Delivered,
        message: Message,
        error: &E,
    ) -> Result<()> {
        let reason = chain(error);
        // So that the logs of a failed input are found from its trace (ADR 0045).
        let trace_id = delivered
            .traceparent
            .as_deref()
            .and_then(parse_traceparent)
            .map(|context| context.trace_id_hex())
            .unwrap_or_default();
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
                tracing::warn!(consumer = self.spec.durable, subject = %delivered.subject, trace_id, error = %reason, delay_ms = delay.as_millis() as u64, "input failed, will retry");
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
                tracing::warn!(consumer = self.spec.durable, subject = %delivered.subject, trace_id, error = %reason, "rejecting input to the dead letters");
                let headers = error.dead_letter_headers();
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(name, value)| (*name, value.as_str()))
                    .collect();
                let parked = self
                    .bus
                    .dead_letter(
                        self.spec.durable,
                        &delivered.subject,
                        delivered.payload.clone(),
                        &reason,
                        &headers,
                    )
                    .await;
                match parked {
                    // Acked once the dead letter is stored; nacked by the window if it is not.
                    Ok(ack) => {
                        self.window.push(vec![ack], Some(message));
                        self.record_fresh(delivered);
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

    /// The trace context an input's outputs carry, derived from the input's: the context of
    /// the stage's span of it.
    fn traceparent(&self, input: &Delivered) -> Option<String> {
        match self.hooks.trace {
            Some(trace) => Some(trace(input.traceparent.as_deref())),
            None => input.traceparent.clone(),
        }
    }

    /// The context of the stage's span of an input: the one its outputs carry (derived from
    /// the input's by [`Hooks::trace`]); for a stage that passes its inputs' context on as is,
    /// a child of the input's, so that it still has a span of its own.
    fn span_context(&self, input: &Delivered) -> TraceContext {
        self.context_under(input.traceparent.as_deref())
    }

    /// The context of the stage's span of a message that carries `traceparent`.
    fn context_under(&self, traceparent: Option<&str>) -> TraceContext {
        let parent = traceparent.and_then(parse_traceparent);
        let derived = self
            .hooks
            .trace
            .and_then(|trace| parse_traceparent(&trace(traceparent)));
        derived
            .unwrap_or_else(|| parent.map_or_else(TraceContext::new_root, |parent| parent.child()))
    }

    /// Exports the stage's span of an input (ADR 0045): its ids `context`, its parent the
    /// input's span, from the batch's beginning to now.
    fn record_span(
        &self,
        input: &Delivered,
        context: TraceContext,
        began: SystemTime,
        batch: usize,
        failure: Option<(&'static str, String)>,
    ) {
        let parent = input.traceparent.as_deref().and_then(parse_traceparent);
        let mut attributes = vec![
            Attribute::new("messaging.system", "nats"),
            Attribute::new("messaging.operation.type", "process"),
            Attribute::new("messaging.destination.name", input.subject.clone()),
            Attribute::new("messaging.consumer.group.name", self.spec.durable),
            Attribute::new("messaging.batch.message_count", batch as i64),
            Attribute::new("sluice.stream", self.spec.stream.name),
            Attribute::new("sluice.stream.sequence", input.sequence as i64),
        ];
        let error = failure.map(|(action, reason)| {
            attributes.push(Attribute::new("error.type", action));
            reason
        });
        sluice_runtime::spans::record(Span {
            context,
            parent: parent.map(|parent| parent.span_id),
            name: format!("process {}", self.spec.stream.name).into(),
            kind: Kind::Consumer,
            start: began,
            end: SystemTime::now(),
            attributes,
            error,
        });
    }

    /// The contexts of the stage's spans of a side item's `messages`, each a child of the
    /// message's own.
    fn side_contexts(&self, messages: &[SideMessage]) -> Vec<TraceContext> {
        messages
            .iter()
            .map(|message| self.context_under(message.traceparent.as_deref()))
            .collect()
    }

    /// The trace contexts a side item's outputs continue: for each of its `messages`, its span's
    /// context (`contexts`, [`Core::side_contexts`]); each span is exported (from `began`, when
    /// the item was taken, to now) when spans are.
    fn side_spans(
        &self,
        messages: &[SideMessage],
        contexts: &[TraceContext],
        began: SystemTime,
    ) -> Parents {
        let mut parents = Parents::default();
        let spans = sluice_runtime::spans::spans_enabled();
        for (message, context) in messages.iter().zip(contexts) {
            let context = *context;
            if spans {
                let parent = message.traceparent.as_deref().and_then(parse_traceparent);
                sluice_runtime::spans::record(Span {
                    context,
                    parent: parent.map(|parent| parent.span_id),
                    name: format!("process {}", message.stream).into(),
                    kind: Kind::Consumer,
                    start: began,
                    end: SystemTime::now(),
                    attributes: vec![
                        Attribute::new("messaging.system", "nats"),
                        Attribute::new("messaging.operation.type", "process"),
                        Attribute::new("messaging.destination.name", message.subject.clone()),
                        Attribute::new("messaging.batch.message_count", messages.len() as i64),
                        Attribute::new("sluice.stream", message.stream),
                        Attribute::new("sluice.stream.sequence", message.sequence as i64),
                        Attribute::new("sluice.stage", self.spec.durable),
                    ],
                    error: None,
                });
            }
            let traceparent = context.to_string();
            parents
                .by_sequence
                .insert(message.sequence, traceparent.clone());
            parents.last = Some(traceparent);
        }
        parents
    }

    /// The messages of `outputs`, with ids derived from the input and the trace context
    /// `traceparent`.
    fn outgoing(
        &self,
        input: &Delivered,
        outputs: Vec<Output>,
        traceparent: Option<String>,
    ) -> Vec<Out> {
        if outputs.is_empty() {
            return Vec::new();
        }
        let sequence = input.sequence.to_string();
        outputs
            .into_iter()
            .enumerate()
            .map(|(index, output)| {
                let derived = |subject: &str, _: &Bytes| {
                    message_id(&[
                        self.spec.durable,
                        &input.subject,
                        &sequence,
                        subject,
                        &index.to_string(),
                    ])
                };
                out(output, derived, traceparent.clone())
            })
            .collect()
    }

    /// The messages of outputs of no single input (of the side feed, a tick or a flush):
    /// named by subject and payload unless the stage named them, each carrying the trace
    /// context of the held input or side message it names (`parents`, by stream sequence: the
    /// context its own outputs carry), else a side item's last message's, else a new trace's.
    fn unprompted_outs(&self, outputs: Vec<Output>, parents: &Parents) -> Vec<Out> {
        let fresh = parents
            .last
            .clone()
            .or_else(|| self.hooks.trace.map(|trace| trace(None)));
        let derived = |subject: &str, payload: &Bytes| {
            message_id(&[self.spec.durable, subject, &content_id(payload)])
        };
        outputs
            .into_iter()
            .map(|output| {
                let parent = output
                    .source
                    .and_then(|sequence| parents.by_sequence.get(&sequence));
                let traceparent = output
                    .trace
                    .map(|trace| trace.to_string())
                    .or_else(|| parent.cloned())
                    .or_else(|| fresh.clone());
                out(output, derived, traceparent)
            })
            .collect()
    }

    /// Publishes outputs of no input (of the side feed, a tick or the start); the window keeps
    /// their acks in its budget.
    async fn unprompted(&mut self, outputs: Vec<Output>) -> Result<()> {
        self.unprompted_of(outputs, &Parents::default()).await
    }

    /// Publishes outputs of no input that continue the traces of `parents` (a side item's
    /// messages).
    async fn unprompted_of(&mut self, outputs: Vec<Output>, parents: &Parents) -> Result<()> {
        if outputs.is_empty() {
            return Ok(());
        }
        let outs = self.unprompted_outs(outputs, parents);
        self.publish(outs, Vec::new()).await?;
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

impl Held {
    /// Holds a handled input with the messages of its outcome and the trace context that
    /// outputs of it carry (`traceparent`).
    fn add(
        &mut self,
        delivered: &Delivered,
        message: Message,
        outs: Vec<Out>,
        traceparent: Option<String>,
    ) {
        self.since.get_or_insert_with(tokio::time::Instant::now);
        self.messages.push(message);
        self.outs.extend(outs);
        if let Some(traceparent) = traceparent {
            self.parents
                .by_sequence
                .insert(delivered.sequence, traceparent);
        }
    }
}

/// The message or purge of one output; a message without the stage's id is named by
/// `derived(subject, payload)`.
fn out(
    output: Output,
    derived: impl FnOnce(&str, &Bytes) -> String,
    traceparent: Option<String>,
) -> Out {
    let Output {
        subject,
        payload,
        id,
        ttl,
        purge,
        source: _,
        trace: _,
    } = output;
    if let Some(stream) = purge {
        return Out::Purge(stream, subject);
    }
    Out::Message(Outgoing {
        ttl,
        msg_id: id.unwrap_or_else(|| derived(&subject, &payload)),
        subject,
        payload,
        traceparent,
    })
}

/// Runs CPU-bound `work` where it does not hold up the executor's other tasks (a worker of a
/// multi-threaded runtime hands them on); on a single-threaded runtime, in place.
fn off_executor<R>(work: impl FnOnce() -> R) -> R {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// How long a drain reads on for what the server already handed the consumer's pull requests
/// (at most; it stops once nothing comes for [`RELEASE_QUIET`]).
const RELEASE_WITHIN: Duration = Duration::from_secs(1);
const RELEASE_QUIET: Duration = Duration::from_millis(50);

/// Stops pulling from `consumer` and gives back what it had gathered for a batch that lingers
/// ([`Gather`]) and what the server had already handed its pull requests that nobody took: a
/// pull request takes a batch of hundreds of messages, which would otherwise come back to the
/// durable only after their ack wait. It reads on until nothing
/// comes for [`RELEASE_QUIET`] (at most `within`), keeping what comes, drops the consumer (its
/// subscription, so that the server hands its pull requests nothing more), and only then nacks
/// without delay what it kept: nacked earlier, a message would come back to this consumer's
/// own pull request. Reading on pulls more of a backlog (up to the consumer's
/// `max_ack_pending`), which comes back just the same; what is on its way when the consumer is
/// dropped (a backlog longer than `within` takes to read) still waits out its ack wait.
async fn release(consumer: Gather<Consumer>, within: Duration) {
    let until = tokio::time::Instant::now() + within;
    let (mut consumer, gathered) = consumer.into_parts();
    let mut received: Vec<Message> = gathered.into_iter().filter_map(|item| item.ok()).collect();
    loop {
        let quiet = (tokio::time::Instant::now() + RELEASE_QUIET).min(until);
        match tokio::time::timeout_at(quiet, consumer.next()).await {
            Ok(Some(Ok(message))) => received.push(message),
            Ok(Some(Err(error))) => {
                tracing::debug!(error = %error, "consumer error while releasing it");
            }
            Ok(None) | Err(_) => break,
        }
    }
    drop(consumer);
    if !received.is_empty() {
        tracing::debug!(
            messages = received.len(),
            "giving back what the consumer received and nobody took"
        );
    }
    for message in &received {
        nack(message, Duration::ZERO).await;
    }
}

/// `consumer` batched as the bus says ([`Bus::linger`]).
fn gather(consumer: Consumer, bus: &Bus) -> Gather<Consumer> {
    Gather::new(consumer, coalesce::MAX_BATCH, bus.linger())
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

    fn claims(of: &[(&str, Option<Claim>)]) -> Vec<Claims> {
        of.iter()
            .map(|(subject, claim)| (subject.to_string(), claim.clone()))
            .collect()
    }

    fn shared(group: &str) -> Option<Claim> {
        Some(Claim::Shared(group.to_string()))
    }

    fn whole(group: &str) -> Option<Claim> {
        Some(Claim::Whole(group.to_string()))
    }

    #[test]
    fn a_batch_is_admitted_beside_what_is_in_flight_unless_it_claims_what_that_holds() {
        let mut holds = Holds::default();
        let first = claims(&[("a", shared("g")), ("b", None)]);
        assert!(holds.admit(&first));
        holds.take(&first);
        // A subject in flight is held alone, whatever else is claimed.
        assert!(!holds.admit(&claims(&[("a", None)])));
        assert!(!holds.admit(&claims(&[("c", None), ("b", shared("h"))])));
        // A group shared is shared further, and kept from one taking it whole.
        assert!(holds.admit(&claims(&[("c", shared("g"))])));
        assert!(!holds.admit(&claims(&[("c", whole("g"))])));
        assert!(holds.admit(&claims(&[("c", whole("h"))])));
        let second = claims(&[("c", shared("g"))]);
        holds.take(&second);
        holds.give_back(&first);
        assert!(
            !holds.admit(&claims(&[("d", whole("g"))])),
            "c still shares g"
        );
        holds.give_back(&second);
        assert!(holds.admit(&claims(&[("a", whole("g"))])));
        // A group held whole admits nothing of it.
        let removal = claims(&[("a", whole("g"))]);
        holds.take(&removal);
        assert!(!holds.admit(&claims(&[("c", shared("g"))])));
        assert!(holds.admit(&claims(&[("c", shared("h"))])));
        holds.give_back(&removal);
        assert!(holds.subjects.is_empty() && holds.groups.is_empty());
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
