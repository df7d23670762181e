//! Coalescing of level-based inputs: when a consumer has fallen behind, only the newest
//! message per subject matters (each one carries the whole state of its key), so a stage takes
//! every message its pull consumer has already buffered and processes the newest per subject.
//! The superseded ones are acked without work: the newer message of the same subject is only
//! acked once its outputs are stored, so a crash redelivers the state that counts.

use async_nats::jetstream::consumer::pull;
use async_nats::jetstream::Message;
use futures::{Stream, StreamExt};

use crate::error::Error;
use crate::feed::{Delivered, Freshness};
use crate::gather::{Gather, Linger};
use crate::window::AckWindow;

/// How many buffered messages one batch takes at most.
pub const MAX_BATCH: usize = 256;

/// A batch of inputs split into the newest message per subject and the rest.
#[derive(Default)]
pub struct Coalesced {
    /// The newest message of each subject, in stream order.
    pub latest: Vec<(Delivered, Message)>,
    /// Messages a newer one of the same subject replaces.
    pub superseded: Vec<Message>,
    /// Messages that could not be read (no JetStream metadata), with the reason.
    pub unreadable: Vec<Error>,
}

/// Waits for the next message, then takes every further one the consumer already holds, up to
/// [`MAX_BATCH`] in all. `None` when the consumer ended. Cancel-safe: without a linger a
/// [`Gather`] suspends only until the first message, and nothing is taken before it comes.
pub async fn next_batch<S>(stream: &mut S) -> Option<Vec<Message>>
where
    S: Stream<Item = std::result::Result<Message, pull::MessagesError>> + Unpin,
{
    next_gathered(&mut Gather::new(stream, MAX_BATCH, Linger::OFF)).await
}

/// The next batch of a [`Gather`]ed consumer: as [`next_batch`], and while messages come
/// densely, also what comes within the linger after the first. Cancel-safe: what is gathered
/// stays in `batches`.
pub async fn next_gathered<S>(batches: &mut Gather<S>) -> Option<Vec<Message>>
where
    S: Stream<Item = std::result::Result<Message, pull::MessagesError>> + Unpin,
{
    let items = batches.next().await?;
    let mut batch = Vec::with_capacity(items.len());
    for item in items {
        push_ok(&mut batch, item);
    }
    Some(batch)
}

fn push_ok(batch: &mut Vec<Message>, next: std::result::Result<Message, pull::MessagesError>) {
    match next {
        Ok(message) => batch.push(message),
        // A failed pull request is retried by the client; the messages themselves come again.
        Err(error) => tracing::warn!(error = %error, "consumer error"),
    }
}

/// Splits a batch from `stream` into the newest message per subject and the superseded rest.
pub fn coalesce(stream: &str, batch: Vec<Message>) -> Coalesced {
    let mut out = Coalesced::default();
    let mut read = Vec::with_capacity(batch.len());
    for message in batch {
        match Delivered::from_message(stream, &message) {
            Ok(delivered) => read.push((delivered, message)),
            Err(error) => out.unreadable.push(error),
        }
    }
    let newest = newest_per_subject(read.iter().map(|(d, _)| (d.subject.as_str(), d.sequence)));
    for (index, (delivered, message)) in read.into_iter().enumerate() {
        if newest[index] {
            out.latest.push((delivered, message));
        } else {
            out.superseded.push(message);
        }
    }
    out
}

/// What a stage processes of a batch from `stream`: the newest message per subject that no
/// newer state of its subject has superseded. The superseded ones go to `window`, to be acked
/// in order without work; messages without stream metadata are logged and left to be
/// redelivered. A redelivery of the state last recorded is processed again: it comes back
/// because its outputs were not stored (a nack), and acking it without work would lose them.
pub fn fresh(
    stream: &str,
    batch: Vec<Message>,
    last_seen: &Freshness,
    window: &mut AckWindow,
) -> Vec<(Delivered, Message)> {
    let coalesced = coalesce(stream, batch);
    for error in &coalesced.unreadable {
        tracing::warn!(stream, error = %error, "skipping a message without stream metadata");
    }
    for message in coalesced.superseded {
        window.push(Vec::new(), Some(message));
    }
    let mut out = Vec::with_capacity(coalesced.latest.len());
    for (delivered, message) in coalesced.latest {
        if last_seen.is_superseded(&delivered) {
            window.push(Vec::new(), Some(message));
        } else {
            out.push((delivered, message));
        }
    }
    out
}

/// For each (subject, sequence), whether no later entry has the same subject with a higher
/// sequence.
fn newest_per_subject<'a>(entries: impl Iterator<Item = (&'a str, u64)>) -> Vec<bool> {
    let entries: Vec<(&str, u64)> = entries.collect();
    let mut best: rustc_hash::FxHashMap<&str, u64> = Default::default();
    for (subject, sequence) in &entries {
        let slot = best.entry(subject).or_insert(*sequence);
        *slot = (*slot).max(*sequence);
    }
    let mut taken: rustc_hash::FxHashSet<&str> = Default::default();
    entries
        .iter()
        .map(|(subject, sequence)| best[subject] == *sequence && taken.insert(*subject))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_per_subject_in_stream_order() {
        let entries = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5), ("a", 6)];
        let keep = newest_per_subject(entries.iter().copied());
        assert_eq!(keep, [false, false, false, true, true, true]);
    }

    #[test]
    fn a_redelivered_older_message_loses_to_the_newer_one_whatever_the_order() {
        // a redelivery can arrive after a newer message of its subject
        let keep = newest_per_subject([("a", 7), ("a", 3), ("b", 4), ("b", 4)].into_iter());
        assert_eq!(keep, [true, false, true, false]);
    }
}
