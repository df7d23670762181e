//! Graceful shutdown: the first SIGTERM or SIGINT cancels the root token (drain), a second one
//! exits the process at once.

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};

/// Exit code when a second signal interrupts the drain (128 + SIGINT, as shells report ^C).
pub const EXIT_SECOND_SIGNAL: i32 = 130;

/// Returns the process's root cancellation token and starts the task that cancels it on the
/// first SIGTERM/SIGINT and calls `exit(130)` on the second. Call it once, inside the runtime,
/// before any port is bound.
pub fn shutdown_token() -> Result<CancellationToken> {
    let mut terminate = signal(SignalKind::terminate()).map_err(|source| Error::SignalHandler {
        signal: "SIGTERM",
        source,
    })?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|source| Error::SignalHandler {
        signal: "SIGINT",
        source,
    })?;
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let first = next_signal(&mut terminate, &mut interrupt).await;
        tracing::info!(
            signal = first,
            "shutdown requested, draining; signal again to exit now"
        );
        cancel.cancel();
        let second = next_signal(&mut terminate, &mut interrupt).await;
        tracing::warn!(signal = second, "second signal, exiting without drain");
        std::process::exit(EXIT_SECOND_SIGNAL);
    });
    Ok(token)
}

/// Closes `tracker` and waits up to `grace` for its tasks to finish; `true` if they all did.
pub async fn drain(tracker: &TaskTracker, grace: Duration) -> bool {
    tracker.close();
    let finished = tokio::time::timeout(grace, tracker.wait()).await.is_ok();
    if !finished {
        tracing::warn!(
            tasks = tracker.len(),
            grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            "drain grace period over, abandoning tasks"
        );
    }
    finished
}

async fn next_signal(
    terminate: &mut tokio::signal::unix::Signal,
    interrupt: &mut tokio::signal::unix::Signal,
) -> &'static str {
    tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_tracked_tasks_within_the_grace_period() {
        let tracker = TaskTracker::new();
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        tracker.spawn(async move {
            let _ = finished.await;
        });
        let drained = tokio::spawn({
            let tracker = tracker.clone();
            async move { drain(&tracker, Duration::from_secs(10)).await }
        });
        finish.send(()).unwrap();
        assert!(drained.await.unwrap());
        assert!(tracker.is_closed());
    }

    #[tokio::test]
    async fn drain_gives_up_on_tasks_that_outlive_the_grace_period() {
        let tracker = TaskTracker::new();
        tracker.spawn(std::future::pending::<()>());
        assert!(!drain(&tracker, Duration::from_millis(50)).await);
        assert_eq!(tracker.len(), 1);
    }
}
