//! Polling a condition until it holds or a deadline passes: the only way tests wait.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use anyhow::bail;
use tokio::time::Instant;

/// What one poll of a condition can return: `Option<T>` (`None` = not yet) or `Result<T, E>`
/// (`Err` = not yet, and the last error is reported on timeout).
pub trait Probe {
    type Output;
    /// `Ok(value)` when the condition holds, `Err(reason)` when it does not hold yet.
    fn into_outcome(self) -> Result<Self::Output, Option<String>>;
}

impl<T> Probe for Option<T> {
    type Output = T;
    fn into_outcome(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Probe for Result<T, E> {
    type Output = T;
    fn into_outcome(self) -> Result<T, Option<String>> {
        // `{:#}` renders the whole chain of an anyhow error on one line
        self.map_err(|error| Some(format!("{error:#}")))
    }
}

/// Polls `poll` until it yields a value, backing off from 5 ms to 100 ms between polls; fails with
/// `what` (and the last error, if the probe returns `Result`) when `deadline` has passed.
pub async fn wait_for<F, Fut>(
    what: &str,
    deadline: Duration,
    mut poll: F,
) -> anyhow::Result<<Fut::Output as Probe>::Output>
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Probe,
{
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        let last = match poll().await.into_outcome() {
            Ok(value) => return Ok(value),
            Err(last) => last,
        };
        if started.elapsed() >= deadline {
            match last {
                Some(error) => bail!("timed out after {deadline:?} waiting for {what}: {error}"),
                None => bail!("timed out after {deadline:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn returns_the_value_once_the_condition_holds() {
        let polls = AtomicU32::new(0);
        let value = wait_for("third poll", Duration::from_secs(5), || {
            let n = polls.fetch_add(1, Ordering::SeqCst) + 1;
            async move { (n >= 3).then_some(n * 10) }
        })
        .await
        .unwrap();
        assert_eq!(value, 30);
    }

    #[tokio::test]
    async fn times_out_naming_what_and_the_last_error() {
        let error = wait_for("the impossible", Duration::from_millis(50), || async {
            Err::<(), _>("still broken")
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(error.contains("waiting for the impossible"), "{error}");
        assert!(error.contains("still broken"), "{error}");
    }
}
