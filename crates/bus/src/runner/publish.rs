//! Publishing by a producer that has no input to nack (the watcher): every output is
//! published until it is stored. A failed publish or a lost ack is retried with the same
//! message id (JetStream drops the duplicate if the first did land) after a growing pause, and
//! at once when the connection dropped while the ack was pending. Only an output the server
//! can never take (over its payload limit) is given up, and returned.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, Outgoing};
use crate::error::Error;
use crate::topology;
use crate::turns::Turn;
use crate::window::{await_stored, Sent, Unstored};

/// What became of a call's outputs.
#[derive(Debug, Default)]
pub struct Stored {
    /// Outputs stored.
    pub stored: usize,
    /// Publish attempts that failed and were retried.
    pub retries: usize,
    /// Outputs the server can never take, with the reason: not retried.
    pub refused: Vec<(Outgoing, Error)>,
}

/// The token was cancelled before every output was stored; what was stored so far stays.
#[derive(Debug, thiserror::Error)]
#[error("cancelled before {unstored} outputs were stored")]
pub struct Cancelled {
    pub unstored: usize,
}

const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Publishes `outputs` and returns once every one is stored (or refused for good), keeping
/// up to [`topology::ACKS_IN_FLIGHT`] acks in flight.
pub async fn publish_stored(
    bus: &Bus,
    outputs: Vec<Outgoing>,
    token: &CancellationToken,
) -> Result<Stored, Cancelled> {
    let mut report = Stored::default();
    let mut todo: Vec<(Outgoing, Option<Turn>)> =
        outputs.into_iter().map(|output| (output, None)).collect();
    let mut pause = FIRST_PAUSE;
    while !todo.is_empty() {
        let mut failed = Vec::new();
        let mut rest = todo.into_iter();
        loop {
            let chunk: Vec<(Outgoing, Option<Turn>)> =
                rest.by_ref().take(topology::ACKS_IN_FLIGHT).collect();
            if chunk.is_empty() {
                break;
            }
            let attempt = tokio::select! {
                attempt = publish_chunk(bus, chunk, &mut report) => attempt,
                () = token.cancelled() => {
                    return Err(Cancelled { unstored: failed.len() + rest.len() + 1 });
                }
            };
            failed.extend(attempt);
        }
        if failed.is_empty() {
            break;
        }
        report.retries += failed.len();
        tracing::warn!(
            outputs = failed.len(),
            pause_ms = pause.as_millis() as u64,
            "outputs not stored, publishing them again"
        );
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = token.cancelled() => return Err(Cancelled { unstored: failed.len() }),
        }
        pause = (pause * 2).min(MAX_PAUSE);
        todo = failed;
    }
    Ok(report)
}

/// One attempt at a chunk: the outputs that are not (known to be) stored, each with its turn.
/// An output first published here takes its turn on its subject; one published again keeps its
/// own, and is not published again once a newer output on its subject superseded it (it
/// counts as stored: [`crate::turns`]).
async fn publish_chunk(
    bus: &Bus,
    chunk: Vec<(Outgoing, Option<Turn>)>,
    report: &mut Stored,
) -> Vec<(Outgoing, Option<Turn>)> {
    let lost = bus.disconnects();
    let mut pending = Vec::with_capacity(chunk.len());
    let mut failed = Vec::new();
    for (output, turn) in chunk {
        let turn = match turn {
            Some(turn) if turn.superseded() => {
                report.stored += 1;
                continue;
            }
            Some(turn) => turn,
            None => bus.turn(&output.subject),
        };
        match bus.publish(output.clone()).await {
            Ok(ack) => pending.push(Sent { output, ack, turn }),
            Err(error) if error.is_too_large() => report.refused.push((output, error)),
            Err(error) => {
                tracing::debug!(error = %error, "publish not sent");
                failed.push((output, Some(turn)));
            }
        }
    }
    let sent = pending.len();
    let lost_acks = await_stored(bus.clone(), lost, pending).await;
    report.stored += sent - lost_acks.len();
    for Unstored {
        output,
        turn,
        error,
    } in lost_acks
    {
        tracing::debug!(subject = %output.subject, error = %error, "output not stored");
        failed.push((output, Some(turn)));
    }
    failed
}
