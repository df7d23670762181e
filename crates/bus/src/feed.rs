//! Reading the pipeline: replaying the current state of a state stream, and the durable
//! consumer a stage acks after its outputs are stored.

use std::time::Duration;

use async_nats::jetstream::consumer::{self, pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::Message;
use bytes::Bytes;
use futures::StreamExt;

use crate::bus::Bus;
use crate::error::{Error, Result};
use crate::topology::{Acks, ConsumerSpec, StreamSpec, TRACEPARENT};
use crate::transit::{Arrival, Arrivals, Missed};

/// When a stream was made, in Unix nanoseconds, from its info: with its name, what tells a
/// stream made again (whose sequences start over) from the one before, on any server.
pub fn created_nanos(info: &async_nats::jetstream::stream::Info) -> u64 {
    u64::try_from(info.created.unix_timestamp_nanos()).unwrap_or(0)
}

/// Subjects a [`Freshness`] keeps before it asks to be pruned the first time.
const PRUNE_FROM: usize = 4096;

/// The newest stream sequence seen per subject: a message older than it is stale (a
/// redelivery overtaken by a newer state of the same key) and must not overwrite it.
///
/// Only a subject whose newest sequence is above its consumer's ack floor can supersede a
/// delivery: every delivery still to come is of an unacknowledged message, above the floor.
/// The others are forgotten ([`Freshness::forget_through`]), so what a stage keeps here is
/// bounded by what its consumer has in flight, not by every subject it ever saw (a cluster
/// whose Pods come and go under new names).
#[derive(Debug, Default)]
pub struct Freshness {
    /// FxHash: subjects are our own, and this map is read for every delivered message.
    seen: rustc_hash::FxHashMap<String, u64>,
    /// How many subjects it keeps before [`Freshness::wants_pruning`] says so again.
    prune_at: usize,
}

impl Freshness {
    /// Whether a newer state of the subject than this delivery was recorded (a redelivery of
    /// the recorded state itself is not superseded).
    pub fn is_superseded(&self, delivered: &Delivered) -> bool {
        self.seen
            .get(&delivered.subject)
            .is_some_and(|seen| *seen > delivered.sequence)
    }

    pub fn record(&mut self, delivered: &Delivered) {
        match self.seen.get_mut(&delivered.subject) {
            Some(seen) => *seen = delivered.sequence,
            None => {
                self.seen
                    .insert(delivered.subject.clone(), delivered.sequence);
            }
        }
    }

    /// Records `sequence` as the newest of `subject` unless a newer one was recorded; whether it
    /// was recorded (false: `sequence` is superseded). For a stage that keeps the freshness of
    /// its own keys, its outputs' subjects say, by the sequences of the inputs they came from.
    pub fn advance(&mut self, subject: &str, sequence: u64) -> bool {
        match self.seen.get_mut(subject) {
            Some(seen) if *seen > sequence => false,
            Some(seen) => {
                *seen = sequence;
                true
            }
            None => {
                self.seen.insert(subject.to_string(), sequence);
                true
            }
        }
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether it has grown enough since it was last pruned to be pruned again: twice what
    /// it kept then, and at least [`PRUNE_FROM`], so a prune (one request for the ack floor)
    /// is paid for by as many new subjects as it kept.
    pub fn wants_pruning(&self) -> bool {
        self.seen.len() >= self.prune_at.max(PRUNE_FROM)
    }

    /// Forgets every subject whose newest sequence is at or below `floor`, its consumer's
    /// ack floor (the stream sequence below which everything is acknowledged): no delivery
    /// still to come is superseded by it.
    pub fn forget_through(&mut self, floor: u64) {
        self.seen.retain(|_, seen| *seen > floor);
        self.prune_at = self.seen.len().saturating_mul(2);
    }

    /// Waits [`Freshness::wants_pruning`] out without a floor (it could not be read): asks
    /// again once it has doubled.
    pub fn postpone_pruning(&mut self) {
        self.prune_at = self.seen.len().saturating_mul(2);
    }

    /// Forgets through `floor` ([`Freshness::forget_through`]), or without one (it could not
    /// be read) postpones ([`Freshness::postpone_pruning`]); how many subjects it forgot.
    pub fn prune(&mut self, floor: Option<u64>) -> usize {
        let before = self.seen.len();
        match floor {
            Some(floor) => self.forget_through(floor),
            None => self.postpone_pruning(),
        }
        before - self.seen.len()
    }

    /// Once it [`Freshness::wants_pruning`], reads the ack floor of `spec` (one
    /// `CONSUMER.INFO`) and prunes at it ([`Freshness::prune`]); how many subjects it forgot.
    pub async fn prune_at_ack_floor(&mut self, bus: &Bus, spec: &ConsumerSpec) -> usize {
        if !self.wants_pruning() {
            return 0;
        }
        let before = self.seen.len();
        let floor = match bus.ack_floor(spec).await {
            Ok(floor) => Some(floor),
            Err(error) => {
                tracing::debug!(consumer = spec.durable, error = %crate::runner::chain(&error), "ack floor not read, freshness pruned later");
                None
            }
        };
        let forgotten = self.prune(floor);
        tracing::debug!(
            consumer = spec.durable,
            ?floor,
            before,
            after = self.seen.len(),
            "freshness pruned"
        );
        forgotten
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// How long a stage's start-up read of a stream is tried again while it fails: a nats-server
/// restarting on its store (a crash, a rolling upgrade) is back well within it, and a stage
/// waits for it instead of exiting.
pub const START_PATIENCE: Duration = Duration::from_secs(60);

/// Runs `read` until it succeeds or fails for good: a failure [`worth_another_read`] is tried
/// again after a pause growing from 250 ms to 4 s, while [`START_PATIENCE`] has not passed;
/// any other is returned at once.
async fn patiently<T, F, Fut>(bus: &Bus, stream: &str, mut read: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + START_PATIENCE;
    let mut pause = Duration::from_millis(250);
    loop {
        let disconnects = bus.disconnects();
        let error = match read().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let connection_dropped = disconnects.has_changed().unwrap_or(true) || !bus.is_connected();
        let reason = crate::runner::chain(&error);
        let transient = connection_dropped || worth_another_read(&reason, bus.is_clustered());
        if !transient || tokio::time::Instant::now() + pause >= deadline {
            return Err(error);
        }
        tracing::warn!(stream, error = %error, retry_in = ?pause, "reading the stream failed while the server was away, trying again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(4));
    }
}

/// Whether a read that failed with `reason` (its error chain), on a connection that stayed up,
/// may succeed if tried again:
/// - JetStream had no responder yet: a server back on its store recovers its streams first;
/// - JetStream answered 503, "JetStream system temporarily unavailable" (error code 10008):
///   the servers of a cluster that lost its quorum, or of one electing its meta leader,
///   answer so until it is back;
/// - on a JetStream cluster, the request went unanswered: the stream's or the consumer's
///   leader is being elected.
///
/// Any other failure (a refusal of this identity's permissions, a consumer of the wrong kind)
/// is for good.
pub(crate) fn worth_another_read(reason: &str, clustered: bool) -> bool {
    reason.contains("no responders")
        || reason.contains("(code 503")
        || (clustered && reason.contains("timed out"))
}

/// Reads what a new consumer's stream held when it was made: `pending` messages, or fewer if
/// one says that none is pending after it, each within 30 s.
async fn read_to_end<S, E>(
    messages: &mut S,
    stream: &'static str,
    pending: u64,
) -> Result<Vec<Delivered>>
where
    S: futures::Stream<Item = std::result::Result<async_nats::jetstream::Message, E>> + Unpin,
    E: std::error::Error + Send + Sync + 'static,
{
    let read_err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Read {
        stream: stream.to_string(),
        source,
    };
    let mut out = Vec::with_capacity(pending as usize);
    while out.len() < pending as usize {
        let message = match tokio::time::timeout(Duration::from_secs(30), messages.next()).await {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => return Err(read_err(Box::new(e))),
            Ok(None) => break,
            Err(elapsed) => return Err(read_err(Box::new(elapsed))),
        };
        let remaining = message.info().map(|i| i.pending).unwrap_or(0);
        out.push(Delivered::from_message(stream, &message)?);
        if remaining == 0 {
            break;
        }
    }
    Ok(out)
}

/// The live part of a followed state stream.
pub type LiveFeed = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Delivered>> + Send>>;

/// One message read from a stream, decoupled from the ack handle.
#[derive(Clone, Debug)]
pub struct Delivered {
    pub subject: String,
    pub sequence: u64,
    pub payload: Bytes,
    pub traceparent: Option<String>,
}

impl Delivered {
    /// This message as a stage's side feed of `stream` names it to the runner (its span, the
    /// trace its outputs continue).
    pub fn side_message(&self, stream: &'static str) -> crate::runner::SideMessage {
        crate::runner::SideMessage {
            stream,
            subject: self.subject.clone(),
            sequence: self.sequence,
            traceparent: self.traceparent.clone(),
        }
    }

    pub fn from_message(stream: &str, message: &Message) -> Result<Delivered> {
        let info = message.info().map_err(|source| Error::Read {
            stream: stream.to_string(),
            source,
        })?;
        Ok(Delivered {
            subject: message.subject.as_str().to_owned(),
            sequence: info.stream_sequence,
            payload: message.payload.clone(),
            traceparent: message
                .headers
                .as_ref()
                .and_then(|h| h.get(TRACEPARENT))
                .map(|v| v.as_str().to_string()),
        })
    }
}

impl Bus {
    /// The last message of every subject matching `filter`, in stream order, as stored now.
    /// A restarted stage rebuilds its state from this before it follows its durable consumer.
    /// A read that fails (the server lost or restarting while a stage starts) is tried again
    /// from the start for up to [`START_PATIENCE`].
    pub async fn replay_state(&self, spec: StreamSpec, filter: &str) -> Result<Vec<Delivered>> {
        patiently(self, spec.name, || self.replay_state_once(spec, filter)).await
    }

    /// When `spec`'s stream was made, in Unix nanoseconds: a stream made again starts its
    /// sequences over, so what orders by them names the stream with this. A start-up read: it
    /// waits for a server that is away, up to [`START_PATIENCE`].
    pub async fn stream_created(&self, spec: StreamSpec) -> Result<u64> {
        patiently(self, spec.name, || async {
            Ok(created_nanos(self.stream(spec).await?.cached_info()))
        })
        .await
    }

    /// The last message on one `subject` (no wildcards) of a state stream as stored now,
    /// `None` when it holds none: one request to the stream's leader (`STREAM.MSG.GET`), so
    /// the answer is never older than a message whose publish was acknowledged. Read once (a
    /// failure is the caller's to retry), so that a stage that asks while the server is away
    /// is not held up.
    pub async fn last_state(&self, spec: StreamSpec, subject: &str) -> Result<Option<Delivered>> {
        use async_nats::jetstream::stream::LastRawMessageErrorKind;
        let stream = self.stream_without_info(spec).await?;
        match stream.get_last_raw_message_by_subject(subject).await {
            Ok(message) => Ok(Some(Delivered {
                subject: message.subject.to_string(),
                sequence: message.sequence,
                traceparent: message
                    .headers
                    .get(TRACEPARENT)
                    .map(|v| v.as_str().to_string()),
                payload: message.payload,
            })),
            Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(error) => Err(Error::Read {
                stream: spec.name.to_string(),
                source: Box::new(error),
            }),
        }
    }

    /// The ack floor of a durable consumer: the stream sequence at and below which it has
    /// acknowledged everything (`CONSUMER.INFO`).
    pub async fn ack_floor(&self, spec: &ConsumerSpec) -> Result<u64> {
        let info = self
            .stream_without_info(spec.stream)
            .await?
            .consumer_info(spec.durable)
            .await
            .map_err(|source| Error::Read {
                stream: spec.stream.name.to_string(),
                source: Box::new(source),
            })?;
        Ok(info.ack_floor.stream_sequence)
    }

    /// A handle on a stream for one request, without asking the server for its info first.
    async fn stream_without_info(
        &self,
        spec: StreamSpec,
    ) -> Result<async_nats::jetstream::stream::Stream<()>> {
        self.js
            .get_stream_no_info(spec.name)
            .await
            .map_err(|source| Error::Stream {
                stream: spec.name.to_string(),
                source: Box::new(source),
            })
    }

    /// The subjects matching `filter` that hold a message now, read without their payloads
    /// (headers only). Tried again as [`Bus::replay_state`].
    pub async fn replay_subjects(
        &self,
        spec: StreamSpec,
        filter: &str,
    ) -> Result<std::collections::HashSet<String>> {
        patiently(self, spec.name, || async {
            let delivered = self.replay_once(spec, filter, true).await?;
            Ok(delivered.into_iter().map(|d| d.subject).collect())
        })
        .await
    }

    async fn replay_state_once(&self, spec: StreamSpec, filter: &str) -> Result<Vec<Delivered>> {
        self.replay_once(spec, filter, false).await
    }

    async fn replay_once(
        &self,
        spec: StreamSpec,
        filter: &str,
        headers_only: bool,
    ) -> Result<Vec<Delivered>> {
        // Each replay is a consumer on the stream while it reads, and nats-server 2.15 allows
        // a stream 1,000 consumers: a watcher starting on a fleet replays per cluster and kind
        // at once, so this process holds at most `REPLAYS_AT_ONCE` of them.
        let _permit = self.replay_permit().await;
        let stream = self.stream(spec).await?;
        let read_err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Read {
            stream: spec.name.to_string(),
            source,
        };
        let mut consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: filter.to_string(),
                deliver_policy: DeliverPolicy::LastPerSubject,
                headers_only,
                ..Default::default()
            })
            .await
            .map_err(|e| read_err(Box::new(e)))?;
        let name = consumer.cached_info().name.clone();
        let read = async {
            let pending = consumer
                .info()
                .await
                .map_err(|e| read_err(Box::new(e)))?
                .num_pending;
            if pending == 0 {
                return Ok(Vec::new());
            }
            let mut messages = consumer
                .messages()
                .await
                .map_err(|e| read_err(Box::new(e)))?;
            read_to_end(&mut messages, spec.name, pending).await
        };
        let out = read.await;
        // Done with it: deleted now rather than left for the server to drop after 30 s idle,
        // when it would still count against the stream's limit. A failure leaves it to expire.
        if let Err(error) = stream.delete_consumer(&name).await {
            tracing::debug!(stream = spec.name, consumer = %name, error = %error, "replay consumer not deleted; it expires");
        }
        out
    }

    /// Follows a state stream: returns the last message of every subject matching `filter` as
    /// stored now, and the stream of every later message. Nothing is acked: the stream itself
    /// is the state, and a restarted stage simply follows it again.
    /// Its start is tried again as [`Bus::replay_state`]'s.
    pub async fn follow_state(
        &self,
        spec: StreamSpec,
        filter: &str,
    ) -> Result<(Vec<Delivered>, LiveFeed)> {
        patiently(self, spec.name, || self.follow_state_once(spec, filter)).await
    }

    async fn follow_state_once(
        &self,
        spec: StreamSpec,
        filter: &str,
    ) -> Result<(Vec<Delivered>, LiveFeed)> {
        let stream = self.stream(spec).await?;
        let read_err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Read {
            stream: spec.name.to_string(),
            source,
        };
        let mut consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: filter.to_string(),
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .map_err(|e| read_err(Box::new(e)))?;
        let pending = consumer
            .info()
            .await
            .map_err(|e| read_err(Box::new(e)))?
            .num_pending;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| read_err(Box::new(e)))?;
        let initial = read_to_end(&mut messages, spec.name, pending).await?;
        let name = spec.name;
        let live = messages.map(move |m| {
            let message = m.map_err(|e| Error::Read {
                stream: name.to_string(),
                source: Box::new(e),
            })?;
            Delivered::from_message(name, &message)
        });
        Ok((initial, Box::pin(live)))
    }

    /// Resets the delivery state of `spec`'s durable to its ack floor (`CONSUMER.RESET`,
    /// nats-server 2.14): what an earlier process of the stage received and never settled (it
    /// was killed, or it lost its lease) is delivered again now instead of after the ack wait.
    /// Only the process that is to read the consumer calls it, as it binds: the one process of
    /// the stage, or the holder of its lease (ADR 0046). Whether it was reset (its deliveries
    /// are numbered from 1 again).
    async fn reset_delivery(&self, spec: ConsumerSpec) -> Result<bool> {
        let reset = reset_to_ack_floor(self.client(), spec.stream.name, spec.durable).await;
        match reset {
            Err(source) => Err(Error::Consumer {
                stream: spec.stream.name.to_string(),
                consumer: spec.durable.to_string(),
                source,
            }),
            Ok(false) => {
                tracing::warn!(
                    stream = spec.stream.name,
                    consumer = spec.durable,
                    "nats-server older than 2.14 (no CONSUMER.RESET): what an earlier process left unsettled comes back after the ack wait"
                );
                Ok(false)
            }
            Ok(true) => Ok(true),
        }
    }

    /// The durable consumer of a stage. Created on first use to start from the last message of
    /// every subject of a state stream (the current state), or from the first stored message of
    /// a log (every event is still to process); afterwards it resumes where the acks left it.
    /// A consumer whose ack policy is not the spec's (JetStream cannot change it in place) is
    /// recreated when the spec's acks cover (the stage rebuilds its state from the stream
    /// anyway) and refused otherwise.
    /// Binding it is tried again as [`Bus::replay_state`]'s read.
    pub async fn durable(
        &self,
        spec: ConsumerSpec,
        filter: Option<&str>,
    ) -> Result<crate::runner::Consumer> {
        Ok(self.durable_watched(spec, filter).await?.0)
    }

    /// [`Bus::durable`], and what marks its deliveries ended because one never arrived
    /// ([`crate::transit`]), for the runner to bind it again.
    pub async fn durable_watched(
        &self,
        spec: ConsumerSpec,
        filter: Option<&str>,
    ) -> Result<(crate::runner::Consumer, Missed)> {
        patiently(self, spec.stream.name, || self.durable_once(spec, filter)).await
    }

    async fn durable_once(
        &self,
        spec: ConsumerSpec,
        filter: Option<&str>,
    ) -> Result<(crate::runner::Consumer, Missed)> {
        let stream = self.stream(spec.stream).await?;
        let consumer_err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Consumer {
            stream: spec.stream.name.to_string(),
            consumer: spec.durable.to_string(),
            source,
        };
        let ack_policy = match spec.acks {
            Acks::Each => AckPolicy::Explicit,
            Acks::Covering => AckPolicy::All,
        };
        let config = pull::Config {
            durable_name: Some(spec.durable.to_string()),
            deliver_policy: if spec.stream.max_per_subject.is_some() {
                DeliverPolicy::LastPerSubject
            } else {
                DeliverPolicy::All
            },
            ack_policy,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: 20_000,
            filter_subject: filter.unwrap_or(spec.stream.subjects).to_string(),
            ..Default::default()
        };
        let mut consumer: consumer::Consumer<pull::Config> = stream
            .get_or_create_consumer(spec.durable, config.clone())
            .await
            .map_err(|e| consumer_err(Box::new(e)))?;
        let found = consumer.cached_info().config.ack_policy;
        if found != ack_policy {
            if spec.acks != Acks::Covering {
                return Err(consumer_err(
                    format!("it acks with {found:?}, this stage needs {ack_policy:?}: delete the consumer to let the stage create it").into(),
                ));
            }
            tracing::warn!(
                stream = spec.stream.name,
                consumer = spec.durable,
                found = ?found,
                "recreating the durable consumer with covering acks; the stage rebuilds its state from the stream"
            );
            stream
                .delete_consumer(spec.durable)
                .await
                .map_err(|e| consumer_err(Box::new(e)))?;
            consumer = stream
                .create_consumer(config)
                .await
                .map_err(|e| consumer_err(Box::new(e)))?;
        }
        let reset = self.reset_delivery(spec).await?;
        let messages = pull_messages(&consumer)
            .await
            .map_err(|e| consumer_err(Box::new(e)))?;
        let missed = Missed::default();
        let arrivals = if reset {
            Arrivals::after_reset()
        } else {
            Arrivals::default()
        };
        Ok((
            recovering(consumer, messages, arrivals, missed.clone()),
            missed,
        ))
    }
}

/// Resets the delivery state of the durable `consumer` of `stream` to its ack floor
/// (`$JS.API.CONSUMER.RESET`, nats-server 2.14): what was delivered and not acked is delivered
/// again at once, to whoever reads the consumer next, instead of after the ack wait. `false`
/// when the server does not have it (no responders: older than 2.14).
pub async fn reset_to_ack_floor(
    client: &async_nats::Client,
    stream: &str,
    consumer: &str,
) -> std::result::Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    let subject = format!("$JS.API.CONSUMER.RESET.{stream}.{consumer}");
    let reply = match client.request(subject, bytes::Bytes::new()).await {
        Ok(reply) => reply,
        Err(error) if error.kind() == async_nats::RequestErrorKind::NoResponders => {
            return Ok(false)
        }
        Err(error) => return Err(Box::new(error)),
    };
    let answer: serde_json::Value = serde_json::from_slice(&reply.payload)?;
    match answer.get("error") {
        Some(error) => Err(format!("resetting its delivery state failed: {error}").into()),
        None => Ok(true),
    }
}

/// The pull requests of a durable consumer: up to 500 messages each, expiring after 30 s, with
/// an idle heartbeat every 2 s (a request the server lost shows within two of them).
async fn pull_messages(
    consumer: &consumer::Consumer<pull::Config>,
) -> std::result::Result<pull::Stream, consumer::StreamError> {
    consumer
        .stream()
        .max_messages_per_batch(500)
        .heartbeat(Duration::from_secs(2))
        .expires(Duration::from_secs(30))
        .messages()
        .await
}

/// `messages` of `consumer`, asked for anew when a heartbeat is missed: the server that held
/// the pull request may be gone (a node of a JetStream cluster lost, the consumer's leader
/// moved), and async-nats, which goes on counting that request's messages as pending, would
/// never ask again. Nothing is buffered then (no heartbeat came for two of its periods), so
/// nothing received is dropped with the old requests; the consumer keeps its place.
/// The deliveries end at the first that never arrived ([`crate::transit`]), marked `missed`,
/// before anything after it is taken.
fn recovering(
    consumer: consumer::Consumer<pull::Config>,
    messages: pull::Stream,
    arrivals: Arrivals,
    missed: Missed,
) -> crate::runner::Consumer {
    futures::stream::unfold(
        (consumer, messages, arrivals, missed),
        |(consumer, mut messages, mut arrivals, missed)| async move {
            let item = messages.next().await?;
            match &item {
                Err(error) if error.kind() == pull::MessagesErrorKind::MissingHeartbeat => {
                    ask_again(&consumer, &mut messages).await;
                }
                Ok(message) => {
                    if let Ok(info) = message.info() {
                        if let Arrival::Missed { first, last } =
                            arrivals.arrive(info.consumer_sequence)
                        {
                            tracing::warn!(
                                stream = info.stream,
                                consumer = info.consumer,
                                first,
                                last,
                                "deliveries never arrived (their consumer sequences were skipped): binding the consumer again from its ack floor"
                            );
                            missed.set();
                            return None;
                        }
                    }
                }
                Err(_) => {}
            }
            Some((item, (consumer, messages, arrivals, missed)))
        },
    )
    .fuse()
    .boxed()
}

/// Replaces `messages` with new pull requests of `consumer`; when asking fails, the old ones
/// stay and the next missed heartbeat asks again.
async fn ask_again(consumer: &consumer::Consumer<pull::Config>, messages: &mut pull::Stream) {
    match pull_messages(consumer).await {
        Ok(fresh) => {
            tracing::info!("a heartbeat was missed: asking the consumer again");
            *messages = fresh;
        }
        Err(error) => {
            tracing::warn!(error = %error, "a heartbeat was missed and asking again failed: trying at the next one");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivered(subject: &str, sequence: u64) -> Delivered {
        Delivered {
            subject: subject.to_string(),
            sequence,
            payload: Bytes::new(),
            traceparent: None,
        }
    }

    #[test]
    fn a_read_is_tried_again_while_jetstream_is_away_and_not_when_it_refuses() {
        let unavailable = "failed to read from SLUICE_MATCH: JetStream error: JetStream system \
                           temporarily unavailable (code 503, error code 10008)";
        assert!(worth_another_read(unavailable, true));
        assert!(worth_another_read(unavailable, false));
        assert!(worth_another_read("failed to read: no responders", false));
        let timed_out = "failed to read from SLUICE_MATCH: timed out";
        assert!(worth_another_read(timed_out, true));
        assert!(
            !worth_another_read(timed_out, false),
            "a lone server that does not answer is not electing anyone"
        );
        let refused = "failed to read from SLUICE_MATCH: JetStream error: Permissions Violation \
                       for Publish to \"$JS.API.CONSUMER.CREATE.SLUICE_MATCH\" (code 403, error code 0)";
        assert!(!worth_another_read(refused, true));
        let wrong_kind = "JetStream error: consumer is push based (code 400, error code 10071)";
        assert!(!worth_another_read(wrong_kind, true));
    }

    #[test]
    fn only_older_sequences_of_a_subject_are_superseded() {
        let mut fresh = Freshness::default();
        assert!(!fresh.is_superseded(&delivered("a", 5)));
        fresh.record(&delivered("a", 5));
        assert!(fresh.is_superseded(&delivered("a", 3)));
        assert!(!fresh.is_superseded(&delivered("a", 6)));
        assert!(!fresh.is_superseded(&delivered("b", 1)));
        assert!(
            !fresh.is_superseded(&delivered("a", 5)),
            "the same state again"
        );
        assert!(fresh.is_superseded(&delivered("a", 4)));
    }

    #[test]
    fn advancing_records_what_is_not_superseded_as_recording_does() {
        let mut fresh = Freshness::default();
        assert!(fresh.advance("a", 5));
        assert!(!fresh.advance("a", 4), "older than what was recorded");
        assert!(fresh.advance("a", 5), "the same state again");
        assert!(fresh.is_superseded(&delivered("a", 4)));
        assert!(fresh.advance("a", 7));
        assert!(fresh.is_superseded(&delivered("a", 6)));
        assert!(fresh.advance("b", 1));
        assert_eq!(fresh.len(), 2);
    }

    #[test]
    fn pruning_at_the_ack_floor_supersedes_exactly_what_it_did_before() {
        let mut fresh = Freshness::default();
        for i in 0..PRUNE_FROM as u64 {
            fresh.record(&delivered(&format!("s{i}"), i + 1));
        }
        assert!(fresh.wants_pruning());
        let floor = 3000;
        let before: Vec<bool> = (0..PRUNE_FROM as u64)
            .flat_map(|i| (floor + 1..=PRUNE_FROM as u64 + 1).map(move |seq| (i, seq)))
            .map(|(i, seq)| fresh.is_superseded(&delivered(&format!("s{i}"), seq)))
            .collect();
        fresh.forget_through(floor);
        assert_eq!(fresh.len(), PRUNE_FROM - floor as usize);
        let after: Vec<bool> = (0..PRUNE_FROM as u64)
            .flat_map(|i| (floor + 1..=PRUNE_FROM as u64 + 1).map(move |seq| (i, seq)))
            .map(|(i, seq)| fresh.is_superseded(&delivered(&format!("s{i}"), seq)))
            .collect();
        assert_eq!(
            before, after,
            "every delivery above the floor is judged as before"
        );
        assert!(before.iter().any(|s| *s), "some of them are superseded");
        assert!(!fresh.wants_pruning(), "not again until it has doubled");
        for i in 0..PRUNE_FROM as u64 {
            fresh.record(&delivered(&format!("t{i}"), 10_000 + i));
        }
        assert!(fresh.wants_pruning());
        fresh.postpone_pruning();
        assert!(!fresh.wants_pruning(), "a failed read waits for doubling");
    }
}
