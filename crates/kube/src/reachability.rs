//! Whether the Kubernetes API server answers, for a service's readiness: a cheap `GET /version`
//! every [`CHECK_INTERVAL`], in the background. It decides nothing else: a service keeps retrying
//! its own requests as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

/// How often the API server is asked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How long one check may take before the API counts as unreachable.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Starts checking `client`'s API server until `token` is cancelled and returns the probe of
/// the latest answer (false until the first check succeeds). The probe only reads a flag, so it
/// can be asked on every `/readyz`.
pub fn api_check(client: &Client, token: &CancellationToken) -> impl Fn() -> bool + Send + Sync {
    let (client, token) = (client.clone(), token.clone());
    let reachable = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&reachable);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(CHECK_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let answer = tokio::time::timeout(CHECK_TIMEOUT, client.apiserver_version()).await;
            let now = matches!(answer, Ok(Ok(_)));
            let before = flag.swap(now, Ordering::SeqCst);
            match (before, now, answer) {
                (true, false, Ok(Err(error))) => tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "the kubernetes api is unreachable"
                ),
                (true, false, _) => {
                    tracing::warn!(timeout = ?CHECK_TIMEOUT, "the kubernetes api does not answer")
                }
                (false, true, _) => tracing::info!("the kubernetes api answers"),
                _ => {}
            }
        }
    });
    move || reachable.load(Ordering::SeqCst)
}
