//! Keeps publish acks in flight and acks inputs in order once their outputs are stored.
//!
//! A publish ack is in flight from the publish until someone awaits it. The window bounds both
//! the inputs waiting (entries) and the acks they wait on, and [`AckWindow::publish`] makes room
//! by settling the oldest entries before it publishes more: a stage never holds an unbounded
//! number of acks, however many outputs one input or batch produces.

use std::time::Duration;

use async_nats::jetstream::context::{PublishAckFuture, PublishError, PublishErrorKind};
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::Message;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use crate::bus::{Bus, Outgoing};
use crate::error::{Error, Result};
use crate::topology::{self, Acks};
use crate::turns::Turn;

/// What became of one input once its outputs were published.
#[derive(Debug)]
pub enum Settled {
    /// Every output is stored; the input was acked.
    Acked,
    /// An output failed; the input was nacked so that it comes back.
    Retried(Error),
}

/// Bounded set of inputs waiting for their outputs' publish acks. Inputs are acked in the
/// order they were pushed, and only after all their outputs are durably stored.
pub struct AckWindow {
    /// Each entry resolves to the number of acks it held and what became of its inputs.
    inflight: FuturesOrdered<BoxFuture<'static, (usize, Settled)>>,
    limit: usize,
    acks: usize,
    ack_limit: usize,
    covering: bool,
}

impl AckWindow {
    /// A window of `limit` entries and at most [`topology::ACKS_IN_FLIGHT`] unresolved acks.
    pub fn new(limit: usize) -> AckWindow {
        AckWindow::with_budget(limit, topology::ACKS_IN_FLIGHT)
    }

    /// A window of `limit` entries and at most `ack_limit` unresolved acks (at least one).
    pub fn with_budget(limit: usize, ack_limit: usize) -> AckWindow {
        AckWindow {
            inflight: FuturesOrdered::new(),
            limit,
            acks: 0,
            ack_limit: ack_limit.max(1),
            covering: false,
        }
    }

    /// Acks inputs as their consumer expects ([`Acks`]): with covering acks an entry sends
    /// one ack, for its input of the highest stream sequence.
    pub fn acking(mut self, acks: Acks) -> AckWindow {
        self.covering = acks == Acks::Covering;
        self
    }

    /// Whether one ack covers earlier deliveries: a [`Settled::Retried`] input may then be
    /// covered by a later entry's ack, so the stage must not go on as if it came back.
    pub fn covers(&self) -> bool {
        self.covering
    }

    /// No more inputs should be taken until something settles.
    pub fn is_full(&self) -> bool {
        self.inflight.len() >= self.limit || self.acks >= self.ack_limit
    }

    pub fn is_empty(&self) -> bool {
        self.inflight.is_empty()
    }

    /// Entries (inputs or batches) waiting.
    pub fn len(&self) -> usize {
        self.inflight.len()
    }

    /// Publish acks not yet resolved.
    pub fn acks_in_flight(&self) -> usize {
        self.acks
    }

    /// Registers an input (if it came from a durable consumer) with the acks of its outputs.
    pub fn push(&mut self, acks: Vec<PublishAckFuture>, input: Option<Message>) {
        self.push_batch(acks, input.into_iter().collect());
    }

    /// Registers several inputs whose outputs were computed together (a batch): every input
    /// is acked once all of `acks` are stored, or nacked if one fails. Counts as one entry of
    /// the window.
    pub fn push_batch(&mut self, acks: Vec<PublishAckFuture>, inputs: Vec<Message>) {
        let held = acks.len();
        self.push_entry(held, await_all(acks).boxed(), inputs, None);
    }

    /// Publishes `outputs` and registers `inputs` (possibly none) to be acked once all of them
    /// are stored. Before each publish that would exceed the ack budget it waits for the
    /// oldest entry to settle, or, when this call's own outputs fill the budget, for those.
    /// Returns how many outputs were published. An output that cannot be sent is an error and
    /// registers nothing: the inputs come back after their ack wait. An output whose ack was
    /// still pending when the connection dropped is published again (same message id) instead
    /// of failing after the ack timeout: the server may have lost it, and its input need not
    /// come back for that.
    pub async fn publish(
        &mut self,
        bus: &Bus,
        outputs: impl IntoIterator<Item = Outgoing>,
        inputs: Vec<Message>,
    ) -> Result<usize> {
        let lost = bus.disconnects();
        let mut pending = Vec::new();
        let mut failure = None;
        let mut published = 0;
        for output in outputs {
            while self.acks + pending.len() >= self.ack_limit {
                if let Some((held, settled)) = self.inflight.next().await {
                    self.acks -= held;
                    if let Settled::Retried(error) = settled {
                        tracing::warn!(error = %error, "output not stored, input will be redelivered");
                    }
                } else {
                    let acks = std::mem::take(&mut pending);
                    if let Some(unstored) =
                        await_stored(bus.clone(), lost.clone(), acks).await.pop()
                    {
                        failure = Some(unstored.error);
                    }
                }
            }
            let turn = bus.turn(&output.subject);
            let ack = bus.publish(output.clone()).await?;
            pending.push(Sent { output, ack, turn });
            published += 1;
        }
        let held = pending.len();
        let stored = await_stored(bus.clone(), lost, pending)
            .map(|mut failed| failed.pop().map(|unstored| unstored.error));
        self.push_entry(held, stored.boxed(), inputs, failure);
        Ok(published)
    }

    /// Registers an entry: `held` acks that `stored` awaits (its failure, if any), and the
    /// inputs to ack once it and every earlier entry settled.
    fn push_entry(
        &mut self,
        held: usize,
        stored: BoxFuture<'static, Option<Error>>,
        inputs: Vec<Message>,
        earlier: Option<Error>,
    ) {
        self.acks += held;
        let covering = self.covering;
        let fut = async move {
            let failure = stored.await.or(earlier);
            let settled = match failure {
                None => {
                    let mut settled = Settled::Acked;
                    let inputs = if covering {
                        covering_ack(inputs)
                    } else {
                        inputs
                    };
                    for message in inputs {
                        if let Err(source) = message.ack().await {
                            settled = Settled::Retried(Error::Ack { source });
                        }
                    }
                    settled
                }
                Some(error) => {
                    let nak = async_nats::jetstream::AckKind::Nak(Some(
                        std::time::Duration::from_millis(500),
                    ));
                    for message in inputs {
                        // Best effort: without it the message still comes back after ack_wait.
                        let _ = message.ack_with(nak).await;
                    }
                    Settled::Retried(error)
                }
            };
            (held, settled)
        };
        self.inflight.push_back(fut.boxed());
    }

    /// Waits for the oldest input to settle. `None` when nothing is in flight.
    pub async fn next(&mut self) -> Option<Settled> {
        let (held, settled) = self.inflight.next().await?;
        self.acks -= held;
        Some(settled)
    }

    /// Waits for everything in flight (used on shutdown).
    pub async fn drain(&mut self) -> Result<()> {
        while let Some(settled) = self.next().await {
            if let Settled::Retried(error) = settled {
                return Err(error);
            }
        }
        Ok(())
    }
}

/// The inputs to ack under `AckPolicy::All`: the one of the highest stream sequence covers the
/// others (JetStream acks every pending delivery up to it); inputs without stream metadata
/// are acked on their own.
fn covering_ack(inputs: Vec<Message>) -> Vec<Message> {
    let mut highest: Option<(u64, Message)> = None;
    let mut out = Vec::new();
    for message in inputs {
        match message.info().map(|info| info.stream_sequence) {
            Ok(sequence) if highest.as_ref().is_none_or(|(top, _)| sequence > *top) => {
                highest = Some((sequence, message));
            }
            Ok(_) => {}
            Err(_) => out.push(message),
        }
    }
    out.extend(highest.map(|(_, message)| message));
    out
}

/// Awaits every ack; the last failure, if any.
async fn await_all(acks: Vec<PublishAckFuture>) -> Option<Error> {
    let mut failure = None;
    for ack in acks {
        if let Err(source) = ack.await {
            failure = Some(Error::Publish {
                subject: "(ack)".to_string(),
                source: Box::new(source),
            });
        }
    }
    failure
}

/// How long an output is published again while its stream cannot take it for now (a stream
/// leader lost on a JetStream cluster, a server restarting) before it counts as not stored.
pub const PUBLISH_RETRY_DEADLINE: Duration = Duration::from_secs(60);

/// How long the ack of an output's first publish is waited for before the output is published
/// again (same message id); it doubles with each attempt, up to the client's own ack timeout.
/// An ack that never comes (its request reached a node that then died) costs this, not the
/// client's timeout; a slow one costs a copy JetStream drops.
const ACK_PATIENCE: Duration = Duration::from_secs(2);

/// The pause before an output refused for now is published again; it doubles up to 1 s.
const REFUSED_PAUSE: Duration = Duration::from_millis(100);

/// Whether a publish that failed so may be stored when sent again: the ack did not come in
/// time, the connection broke, or the stream was still storing an earlier copy of the same
/// message (`code` 10158, "duplicate message id is in process": a copy sent again while the
/// first was being replicated); and, on a JetStream cluster (`clustered`), nobody answered:
/// "no stream found" is what no responders reads as, and a cluster has no responder for a
/// stream while it elects the stream's leader. A lone server without a stream for the subject
/// has none for good.
fn may_store_later(kind: PublishErrorKind, code: Option<ErrorCode>, clustered: bool) -> bool {
    match kind {
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => true,
        PublishErrorKind::StreamNotFound => clustered,
        PublishErrorKind::Other => code == Some(ErrorCode::STREAM_DUPLICATE_MESSAGE_CONFLICT),
        _ => false,
    }
}

/// The JetStream error code a refused publish carries, if the server sent one.
fn error_code(error: &PublishError) -> Option<ErrorCode> {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<async_nats::jetstream::Error>())
        .map(async_nats::jetstream::Error::error_code)
}

/// An output published, with the future of its ack and its turn on its subject.
pub(crate) struct Sent {
    pub(crate) output: Outgoing,
    pub(crate) ack: PublishAckFuture,
    pub(crate) turn: Turn,
}

/// An output that was not (known to be) stored, with its turn (to publish it again only while
/// nothing newer on its subject was published) and why.
pub(crate) struct Unstored {
    pub(crate) output: Outgoing,
    pub(crate) turn: Turn,
    pub(crate) error: Error,
}

/// One output waiting for its ack: when it was first published and how often so far.
struct Waiting {
    output: Outgoing,
    ack: PublishAckFuture,
    turn: Turn,
    since: Instant,
    attempt: u32,
}

/// Awaits the acks of `pending` (outputs published after `lost` was taken) and returns the
/// outputs that were not stored, with why. An output is published again (same message id:
/// JetStream drops the copy of one that did land) when the connection drops while its ack is
/// pending, when its ack is late ([`ACK_PATIENCE`]) and when the stream cannot take it for now
/// ([`may_store_later`]), until [`PUBLISH_RETRY_DEADLINE`]: so a stage rides through a stream
/// leader's election on a JetStream cluster instead of failing its inputs. An output that a
/// newer one on its subject superseded ([`Turn::superseded`]) is not published again: it counts
/// as stored, the newer one's fate deciding the subject.
pub(crate) async fn await_stored(
    bus: Bus,
    mut lost: tokio::sync::watch::Receiver<u64>,
    pending: Vec<Sent>,
) -> Vec<Unstored> {
    let now = Instant::now();
    let mut failed = Vec::new();
    let mut queue: std::collections::VecDeque<Waiting> = pending
        .into_iter()
        .map(|Sent { output, ack, turn }| Waiting {
            output,
            ack,
            turn,
            since: now,
            attempt: 0,
        })
        .collect();
    while let Some(waiting) = queue.pop_front() {
        let Waiting {
            output,
            ack,
            turn,
            since,
            attempt,
        } = waiting;
        let patience = ACK_PATIENCE * 2u32.pow(attempt.min(2));
        tokio::select! {
            biased;
            stored = tokio::time::timeout(patience, ack) => {
                let source = match stored {
                    Ok(Ok(_)) => continue,
                    Ok(Err(source)) => Some(source),
                    Err(_late) => None,
                };
                // A publish the server refused this identity is never stored.
                if let Some(refused) = bus.refused(&output.subject) {
                    failed.push(Unstored { output, turn, error: refused });
                    continue;
                }
                if turn.superseded() {
                    tracing::debug!(subject = %output.subject, "output without its ack superseded by a newer one, not published again");
                    continue;
                }
                let clustered = bus.is_clustered();
                let again = source
                    .as_ref()
                    .is_none_or(|source| may_store_later(source.kind(), error_code(source), clustered))
                    && since.elapsed() < PUBLISH_RETRY_DEADLINE;
                if !again {
                    let subject = output.subject.clone();
                    let source: Box<dyn std::error::Error + Send + Sync> = match source {
                        Some(source) => Box::new(source),
                        None => format!("no ack within {PUBLISH_RETRY_DEADLINE:?}").into(),
                    };
                    failed.push(Unstored { output, turn, error: Error::Publish { subject, source } });
                    continue;
                }
                if let Some(source) = &source {
                    // Refused for now: a pause, or the same refusal comes back at once.
                    let pause = (REFUSED_PAUSE * 2u32.pow(attempt.min(4))).min(Duration::from_secs(1));
                    tracing::debug!(subject = %output.subject, error = %source, ?pause, "output not stored for now, publishing again");
                    tokio::time::sleep(pause).await;
                } else {
                    tracing::debug!(subject = %output.subject, ?patience, "no ack in time, publishing again");
                }
                match bus.publish(output.clone()).await {
                    Ok(ack) => queue.push_back(Waiting { output, ack, turn, since, attempt: attempt + 1 }),
                    Err(error) => failed.push(Unstored { output, turn, error }),
                }
            }
            () = connection_lost(&mut lost) => {
                let again: Vec<(Outgoing, Turn, Instant, u32)> = std::iter::once((output, turn, since, attempt))
                    .chain(queue.drain(..).map(|w| (w.output, w.turn, w.since, w.attempt)))
                    .collect();
                tracing::debug!(outputs = again.len(), "connection dropped before the acks came, publishing again");
                for (output, turn, since, attempt) in again {
                    if turn.superseded() {
                        continue;
                    }
                    match bus.publish(output.clone()).await {
                        Ok(ack) => queue.push_back(Waiting { output, ack, turn, since, attempt }),
                        Err(error) => failed.push(Unstored { output, turn, error }),
                    }
                }
            }
        }
    }
    failed
}

/// Resolves when the connection drops (never once the client is gone for good).
pub(crate) async fn connection_lost(lost: &mut tokio::sync::watch::Receiver<u64>) {
    if lost.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_cluster_may_answer_later_for_a_stream_it_has_no_responder_for() {
        let in_process = Some(ErrorCode::STREAM_DUPLICATE_MESSAGE_CONFLICT);
        for clustered in [false, true] {
            assert!(may_store_later(PublishErrorKind::TimedOut, None, clustered));
            assert!(may_store_later(
                PublishErrorKind::BrokenPipe,
                None,
                clustered
            ));
            assert!(may_store_later(
                PublishErrorKind::Other,
                in_process,
                clustered
            ));
            let other = Some(ErrorCode::STREAM_NOT_FOUND);
            assert!(!may_store_later(PublishErrorKind::Other, other, clustered));
            assert!(!may_store_later(PublishErrorKind::Other, None, clustered));
            let payload = PublishErrorKind::MaxPayloadExceeded;
            assert!(!may_store_later(payload, None, clustered));
            let sequence = PublishErrorKind::WrongLastSequence;
            assert!(!may_store_later(sequence, None, clustered));
        }
        assert!(may_store_later(
            PublishErrorKind::StreamNotFound,
            None,
            true
        ));
        assert!(!may_store_later(
            PublishErrorKind::StreamNotFound,
            None,
            false
        ));
    }
}
