//! Liveness, readiness and Prometheus counters, served over HTTP on `/healthz`, `/readyz` and
//! `/metrics`. Counters only: the pipeline's numbers are event counts; latency lives in traces.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// Shared process health: a readiness flag, the conditions readiness also depends on (NATS
/// connected, the Kubernetes API reachable), and a registry of counters. Cheap to clone; all
/// clones share state.
#[derive(Clone, Debug, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

/// A monotonically increasing counter registered in a [`Health`].
#[derive(Clone, Debug)]
pub struct Counter(Arc<AtomicU64>);

type Labels = Vec<(&'static str, &'static str)>;

/// A condition readiness depends on, asked on every `/readyz`: it must be cheap (read a flag
/// or a connection state, never do IO).
type Probe = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Default)]
struct Inner {
    ready: AtomicBool,
    probes: Mutex<Vec<(&'static str, Probe)>>,
    counters: Mutex<BTreeMap<&'static str, BTreeMap<Labels, Arc<AtomicU64>>>>,
}

impl Health {
    /// A health that is alive, not ready, with no counters.
    pub fn new() -> Health {
        Health::default()
    }

    pub fn set_ready(&self, ready: bool) {
        self.inner.ready.store(ready, Ordering::SeqCst);
    }

    /// Ready: set ready by the service, and every [`Health::require`]d condition holds now.
    pub fn is_ready(&self) -> bool {
        self.unready().is_empty()
    }

    /// Makes readiness depend on `probe` as well, under `name` (`nats`, `kubernetes`): while it
    /// answers false, `/readyz` is unready and says which condition fails, so that a Service
    /// stops routing to the pod and an operator sees why. `probe` runs on every `/readyz`.
    pub fn require(&self, name: &'static str, probe: impl Fn() -> bool + Send + Sync + 'static) {
        self.lock(&self.inner.probes).push((name, Arc::new(probe)));
    }

    /// What keeps the service from being ready: `started` until it sets itself ready, then the
    /// name of each required condition that does not hold.
    pub fn unready(&self) -> Vec<&'static str> {
        let mut failing = Vec::new();
        if !self.inner.ready.load(Ordering::SeqCst) {
            failing.push("started");
        }
        for (name, probe) in self.lock(&self.inner.probes).iter() {
            if !probe() {
                failing.push(*name);
            }
        }
        failing
    }

    /// The counter `name` without labels, created at 0 on first use. Names follow
    /// `sluice_<area>_<noun>_<unit>_total`, e.g. `sluice_evaluator_messages_rejected_total`.
    pub fn counter(&self, name: &'static str) -> Counter {
        self.counter_with(name, &[])
    }

    /// The counter `name` with `labels`; label values are static so they come from bounded sets.
    pub fn counter_with(
        &self,
        name: &'static str,
        labels: &[(&'static str, &'static str)],
    ) -> Counter {
        debug_assert!(
            name.starts_with("sluice_") && name.ends_with("_total"),
            "counter {name} does not follow sluice_<area>_<noun>_<unit>_total"
        );
        let mut labels = labels.to_vec();
        labels.sort_unstable();
        let mut counters = self.lock_counters();
        let value = counters.entry(name).or_default().entry(labels).or_default();
        Counter(Arc::clone(value))
    }

    /// All counters in the Prometheus text exposition format (version 0.0.4).
    pub fn render_metrics(&self) -> String {
        let counters = self.lock_counters();
        let mut out = String::new();
        for (name, series) in counters.iter() {
            // writing to a String cannot fail
            let _ = writeln!(out, "# TYPE {name} counter");
            for (labels, value) in series {
                let value = value.load(Ordering::Relaxed);
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {value}");
                } else {
                    let rendered: Vec<String> = labels
                        .iter()
                        .map(|(key, val)| format!("{key}=\"{}\"", escape_label(val)))
                        .collect();
                    let _ = writeln!(out, "{name}{{{}}} {value}", rendered.join(","));
                }
            }
        }
        out
    }

    fn lock_counters(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, BTreeMap<Labels, Arc<AtomicU64>>>> {
        self.lock(&self.inner.counters)
    }

    fn lock<'a, T>(&self, mutex: &'a Mutex<T>) -> std::sync::MutexGuard<'a, T> {
        // a panic while holding a lock leaves its collection consistent (entries are only added)
        mutex.lock().unwrap_or_else(|poison| poison.into_inner())
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let probes: Vec<&str> = match self.probes.try_lock() {
            Ok(probes) => probes.iter().map(|(name, _)| *name).collect(),
            Err(_) => Vec::new(),
        };
        f.debug_struct("Health")
            .field("ready", &self.ready)
            .field("requires", &probes)
            .finish_non_exhaustive()
    }
}

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Binds `addr` and serves the health endpoints until `token` is cancelled. Binding happens
/// before this returns, so a taken port is a startup error rather than a log line.
pub async fn serve_health(
    addr: SocketAddr,
    health: Health,
    token: CancellationToken,
) -> Result<JoinHandle<()>> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::BindHealth { addr, source })?;
    Ok(serve_health_on(listener, health, token))
}

/// Serves the health endpoints on an already bound listener until `token` is cancelled.
pub fn serve_health_on(
    listener: TcpListener,
    health: Health,
    token: CancellationToken,
) -> JoinHandle<()> {
    let addr = listener.local_addr().ok();
    let router = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    tokio::spawn(async move {
        tracing::info!(addr = ?addr, "serving /healthz, /readyz and /metrics");
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(token.cancelled_owned())
            .await;
        if let Err(error) = served {
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "health endpoint failed"
            );
        }
    })
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    let unready = health.unready();
    if unready.is_empty() {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", unready.join(", ")),
        )
    }
}

async fn metrics(State(health): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        health.render_metrics(),
    )
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_in_prometheus_text_format() {
        let health = Health::new();
        let events = health.counter("sluice_watcher_events_observed_total");
        events.inc();
        events.add(2);
        let ok = health.counter_with(
            "sluice_applier_plans_applied_total",
            &[("result", "ok"), ("cluster_type", "capi")],
        );
        ok.inc();
        health.counter_with(
            "sluice_applier_plans_applied_total",
            &[("result", "failed"), ("cluster_type", "capi")],
        );
        // the same name and labels (in any order) is the same counter
        health
            .counter_with(
                "sluice_applier_plans_applied_total",
                &[("cluster_type", "capi"), ("result", "ok")],
            )
            .inc();
        assert_eq!(ok.get(), 2);
        assert_eq!(
            health.render_metrics(),
            "# TYPE sluice_applier_plans_applied_total counter\n\
             sluice_applier_plans_applied_total{cluster_type=\"capi\",result=\"failed\"} 0\n\
             sluice_applier_plans_applied_total{cluster_type=\"capi\",result=\"ok\"} 2\n\
             # TYPE sluice_watcher_events_observed_total counter\n\
             sluice_watcher_events_observed_total 3\n"
        );
    }

    #[test]
    fn readiness_needs_the_start_and_every_required_condition() {
        let health = Health::new();
        let nats = Arc::new(AtomicBool::new(true));
        let probe = Arc::clone(&nats);
        health.require("nats", move || probe.load(Ordering::SeqCst));
        health.require("kubernetes", || true);
        assert_eq!(health.unready(), ["started"]);
        health.set_ready(true);
        assert!(health.is_ready());
        nats.store(false, Ordering::SeqCst);
        assert_eq!(health.unready(), ["nats"]);
        assert!(!health.is_ready());
        nats.store(true, Ordering::SeqCst);
        assert!(health.is_ready());
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
