//! Process kit shared by the services: configuration, telemetry, shutdown, health and metrics
//! endpoints, W3C trace context.
//!
//! It knows nothing of NATS, Kubernetes or the pipeline stages; a service's `main.rs` wires these
//! pieces together (`service_main!`) and then calls its `run`.
//!
//! A service's `main.rs` is one line ([`service_main!`]): its flags are [`CommonArgs`] plus
//! its own, bad ones exit 64 before any port is bound, and [`serve`] starts telemetry, the
//! shutdown token and the health endpoint around the service's `run`:
//!
//! ```text
//! sluice_runtime::service_main!("reporter", "Writes EventReports", sluice_reporter::run);
//! ```

mod config;
mod error;
pub mod fence;
mod health;
mod pages;
pub mod schedule;
pub mod service;
mod shutdown;
pub mod spans;
mod telemetry;
mod trace;

pub use config::{
    common_env_vars, exit_on_bad_config, parse_config, parse_duration, CommonArgs, LeaseTiming,
    LogFormat, NatsAuth, DEFAULT_LINGER_US, DEFAULT_WORKER_THREADS, EXIT_BAD_CONFIG,
    LOG_FILTER_ENV, MAX_STREAM_REPLICAS, MAX_WORKER_THREADS,
};
pub use error::{Error, Result};
pub use fence::{Fence, Fenced};
pub use health::{serve_health, serve_health_on, Buckets, Counter, Gauge, Health, Histogram};
pub use pages::{huge_pages_disabled, without_huge_pages};
pub use service::NoArgs;
pub use shutdown::{drain, shutdown_token, EXIT_SECOND_SIGNAL};
pub use telemetry::{error_chain, init_telemetry};
pub use trace::{
    child_traceparent, event_age, new_traceparent, parse_traceparent, InvalidTraceparent,
    TraceContext, TRACEPARENT_HEADER,
};

/// Re-exported so services name one version of the lifecycle types.
pub use tokio_util::sync::CancellationToken;
pub use tokio_util::task::TaskTracker;

/// For [`service_main!`]: the allocator every binary uses (ADR 0016) and what `main` returns.
#[doc(hidden)]
pub use mimalloc::MiMalloc;
#[doc(hidden)]
pub type MainResult = anyhow::Result<()>;

/// Runs a service the way every `main.rs` does: validates the common options (exit 64 on bad
/// config), starts telemetry, the shutdown token and the health endpoint, logs what the service
/// is, then runs `app` until the token is cancelled and waits for the health server.
pub async fn serve<F, Fut>(service: &'static str, common: CommonArgs, app: F) -> anyhow::Result<()>
where
    F: FnOnce(CommonArgs, Health, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    if let Err(error) = common.validate() {
        exit_on_bad_config(error);
    }
    if let Err(error) = init_telemetry(service, common.log_format) {
        exit_on_bad_config(error);
    }
    let spans = match spans::init_spans(service) {
        Ok(spans) => spans,
        Err(error) => exit_on_bad_config(error),
    };
    tracing::info!(service, version = env!("CARGO_PKG_VERSION"), config = %common.redacted(), spans_exported = spans.export, "starting");
    let token = shutdown_token()?;
    let health = Health::new();
    spans::count_spans(&health);
    let server = serve_health(common.health_addr, health.clone(), token.clone()).await?;
    let outcome = app(common, health.clone(), token.clone()).await;
    if let Err(error) = &outcome {
        // In the log as well as on stderr: the log is where a collector keeps it.
        tracing::error!(
            service,
            error = format!("{error:#}"),
            "the service stopped on an error"
        );
    }
    health.set_ready(false);
    token.cancel();
    server.await?;
    // Waits for the exporter's batch thread to send what it holds, off the runtime's workers.
    tokio::task::spawn_blocking(spans::shutdown_spans).await?;
    outcome
}
