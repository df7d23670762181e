//! Keeps publish acks in flight and acks inputs in order once their outputs are stored.

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::Message;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};

use crate::error::{Error, Result};

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
    inflight: FuturesOrdered<BoxFuture<'static, Settled>>,
    limit: usize,
}

impl AckWindow {
    pub fn new(limit: usize) -> AckWindow {
        AckWindow {
            inflight: FuturesOrdered::new(),
            limit,
        }
    }

    pub fn is_full(&self) -> bool {
        self.inflight.len() >= self.limit
    }

    pub fn is_empty(&self) -> bool {
        self.inflight.is_empty()
    }

    pub fn len(&self) -> usize {
        self.inflight.len()
    }

    /// Registers an input (if it came from a durable consumer) with the acks of its outputs.
    pub fn push(&mut self, acks: Vec<PublishAckFuture>, input: Option<Message>) {
        self.push_batch(acks, input.into_iter().collect());
    }

    /// Registers several inputs whose outputs were computed together (a batch): every input
    /// is acked once all of `acks` are stored, or nacked if one fails. Counts as one entry of
    /// the window.
    pub fn push_batch(&mut self, acks: Vec<PublishAckFuture>, inputs: Vec<Message>) {
        let fut = async move {
            let mut failure = None;
            for ack in acks {
                if let Err(source) = ack.await {
                    failure = Some(Error::Publish {
                        subject: "(ack)".to_string(),
                        source: Box::new(source),
                    });
                }
            }
            match failure {
                None => {
                    let mut settled = Settled::Acked;
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
            }
        };
        self.inflight.push_back(fut.boxed());
    }

    /// Waits for the oldest input to settle. `None` when nothing is in flight.
    pub async fn next(&mut self) -> Option<Settled> {
        self.inflight.next().await
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
