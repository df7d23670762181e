//! Batches of a stream's items, lingering while items come densely (ADR 0036).
//!
//! A batch is the first item, everything the stream already holds and, when the previous batch
//! began less than two lingers earlier (items are coming faster than one per linger), whatever
//! else comes within one linger of the first. So at a high rate each wake-up of a stage takes
//! several inputs and its outputs leave together, which nats-server then stores and delivers
//! together downstream; at a low rate nothing waits, since another input is not expected soon.
//!
//! [`Gather`] keeps a batch being gathered in itself, never in a future, so dropping a `next()`
//! in a `select!` loses nothing; [`Gather::into_parts`] gives back the stream and what it had
//! taken from it (for the drain to hand back).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};

/// How long a batch may wait for more after its first item; zero never waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Linger(pub Duration);

impl Linger {
    /// No waiting: a batch is what the stream holds when its first item comes.
    pub const OFF: Linger = Linger(Duration::ZERO);

    /// Whether a batch whose first item came `gap` after the previous batch's first (`None`:
    /// no previous batch) waits for more: only while batches begin less than two lingers apart.
    pub fn waits(self, gap: Option<Duration>) -> bool {
        !self.0.is_zero() && gap.is_some_and(|gap| gap < self.0.saturating_mul(2))
    }
}

/// A stream of batches of `stream`'s items, at most `max` items each.
pub struct Gather<S: Stream> {
    stream: S,
    max: usize,
    linger: Linger,
    pending: Vec<S::Item>,
    /// When the batch being gathered closes, if it lingers.
    closes: Option<Pin<Box<Sleep>>>,
    /// When the previous batch's first item came.
    previous_first: Option<Instant>,
    ended: bool,
}

impl<S: Stream + Unpin> Gather<S> {
    pub fn new(stream: S, max: usize, linger: Linger) -> Gather<S> {
        Gather {
            stream,
            max: max.max(1),
            linger,
            pending: Vec::new(),
            closes: None,
            previous_first: None,
            ended: false,
        }
    }

    /// The stream, and the items taken from it that no batch has carried out yet.
    pub fn into_parts(self) -> (S, Vec<S::Item>) {
        (self.stream, self.pending)
    }

    fn first_came(&mut self) {
        let now = Instant::now();
        let gap = self.previous_first.map(|previous| now - previous);
        self.previous_first = Some(now);
        self.closes = self
            .linger
            .waits(gap)
            .then(|| Box::pin(tokio::time::sleep_until(now + self.linger.0)));
    }

    fn take(&mut self) -> Vec<S::Item> {
        self.closes = None;
        std::mem::take(&mut self.pending)
    }
}

impl<S> Stream for Gather<S>
where
    S: Stream + Unpin,
    S::Item: Unpin,
{
    type Item = Vec<S::Item>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        while this.pending.len() < this.max && !this.ended {
            match this.stream.poll_next_unpin(cx) {
                Poll::Ready(Some(item)) => {
                    if this.pending.is_empty() {
                        this.first_came();
                    }
                    this.pending.push(item);
                }
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => break,
            }
        }
        if this.pending.is_empty() {
            return if this.ended {
                Poll::Ready(None)
            } else {
                Poll::Pending
            };
        }
        if this.pending.len() >= this.max || this.ended {
            return Poll::Ready(Some(this.take()));
        }
        let waiting = match this.closes.as_mut() {
            Some(closes) => closes.as_mut().poll(cx).is_pending(),
            None => false,
        };
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(Some(this.take()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn only_batches_that_begin_within_two_lingers_of_the_previous_wait() {
        let linger = Linger(Duration::from_millis(2));
        assert!(!linger.waits(None));
        assert!(linger.waits(Some(Duration::from_millis(1))));
        assert!(linger.waits(Some(Duration::from_micros(3_999))));
        assert!(!linger.waits(Some(Duration::from_millis(4))));
        assert!(!Linger::OFF.waits(Some(Duration::ZERO)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dense_stream_is_gathered_for_one_linger_after_each_first_item() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut batches = Gather::new(rx, 100, Linger(Duration::from_millis(2)));
        // The first batch has no previous one: it does not wait.
        tx.unbounded_send(1).expect("the receiver is open");
        assert_eq!(batches.next().await, Some(vec![1]));
        // One millisecond later: items are dense, so the batch waits 2 ms for more.
        tokio::time::advance(Duration::from_millis(1)).await;
        tx.unbounded_send(2).expect("the receiver is open");
        let mut next = batches.next();
        assert!((&mut next).now_or_never().is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        tx.unbounded_send(3).expect("the receiver is open");
        assert!((&mut next).now_or_never().is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(next.await, Some(vec![2, 3]));
        // Ten milliseconds later the stream is sparse again: no waiting.
        tokio::time::advance(Duration::from_millis(10)).await;
        tx.unbounded_send(4).expect("the receiver is open");
        assert_eq!(batches.next().now_or_never(), Some(Some(vec![4])));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_or_the_streams_end_does_not_wait() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut batches = Gather::new(rx, 2, Linger(Duration::from_millis(5)));
        tx.unbounded_send(1).expect("the receiver is open");
        assert_eq!(batches.next().await, Some(vec![1]));
        for item in 2..=4 {
            tx.unbounded_send(item).expect("the receiver is open");
        }
        assert_eq!(batches.next().now_or_never(), Some(Some(vec![2, 3])));
        drop(tx);
        assert_eq!(batches.next().now_or_never(), Some(Some(vec![4])));
        assert_eq!(batches.next().now_or_never(), Some(None));
    }

    #[tokio::test(start_paused = true)]
    async fn what_a_dropped_next_had_gathered_stays_for_the_next_call_or_the_drain() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut batches = Gather::new(rx, 100, Linger(Duration::from_millis(2)));
        tx.unbounded_send(1).expect("the receiver is open");
        assert_eq!(batches.next().await, Some(vec![1]));
        tx.unbounded_send(2).expect("the receiver is open");
        // A select! that took another branch drops the future mid-linger.
        assert!(batches.next().now_or_never().is_none());
        tx.unbounded_send(3).expect("the receiver is open");
        assert!(batches.next().now_or_never().is_none());
        let (_, pending) = batches.into_parts();
        assert_eq!(pending, vec![2, 3]);
    }
}
