//! Liveness, readiness and Prometheus metrics, served over HTTP on `/healthz`, `/readyz` and
//! `/metrics`: counters of what a service did, and histograms of how long it took (the stage
//! runner's, `sluice_bus::runner::timings`). The registry and its text encoding are
//! `prometheus-client`'s.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter as Count;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as Level;
use prometheus_client::metrics::histogram::Histogram as Distribution;
use prometheus_client::registry::{Metric, Registry};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// Shared process health: a readiness flag, the conditions readiness also depends on (NATS
/// connected, the Kubernetes API reachable), and a registry of metrics. Cheap to clone; all
/// clones share state.
#[derive(Clone, Debug, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

/// A monotonically increasing counter registered in a [`Health`].
#[derive(Clone, Debug)]
pub struct Counter(Count);

/// A value that goes up and down, registered in a [`Health`].
#[derive(Clone, Debug)]
pub struct Gauge(Level);

/// A histogram registered in a [`Health`]: each observation falls in the first of its
/// [`Buckets`] that holds it.
#[derive(Clone, Debug)]
pub struct Histogram(Distribution);

/// The bucket bounds of a histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buckets {
    /// Seconds from 0.5 ms to 30 s, for latencies (a batch's handling, an event's age); finer
    /// from 5 to 100 ms, where an event's way through the pipeline usually ends.
    Seconds,
    /// Counts from 1 to 4,096 by powers of two (the inputs of a batch).
    Sizes,
}

impl Buckets {
    /// The upper bounds; `+Inf` is implied.
    pub const fn bounds(self) -> &'static [f64] {
        match self {
            Buckets::Seconds => &[
                0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
            Buckets::Sizes => &[
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
            ],
        }
    }
}

type Labels = Vec<(&'static str, &'static str)>;

fn seconds() -> Distribution {
    Distribution::new(Buckets::Seconds.bounds().iter().copied())
}

fn sizes() -> Distribution {
    Distribution::new(Buckets::Sizes.bounds().iter().copied())
}

type Histograms = Family<Labels, Distribution, fn() -> Distribution>;

/// A condition readiness depends on, asked on every `/readyz`: it must be cheap (read a flag
/// or a connection state, never do IO).
type Probe = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Default)]
struct Inner {
    ready: AtomicBool,
    probes: Mutex<Vec<(&'static str, Probe)>>,
    metrics: Mutex<Metrics>,
}

/// The registry and its families by name, so that a name asked for again is the same family.
#[derive(Default)]
struct Metrics {
    registry: Registry,
    counters: HashMap<&'static str, Family<Labels, Count>>,
    gauges: HashMap<&'static str, Family<Labels, Level>>,
    histograms: HashMap<&'static str, Histograms>,
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
        let mut metrics = self.lock(&self.inner.metrics);
        let Metrics {
            registry, counters, ..
        } = &mut *metrics;
        // The encoder adds the suffix of a counter itself; the help is the name in words.
        let bare = name.trim_end_matches("_total");
        let help = bare.trim_start_matches("sluice_").replace('_', " ");
        let family = family(registry, counters, (name, bare), help, Family::default);
        Counter(family.get_or_create_owned(&sorted(labels)))
    }

    /// The gauge `name` with `labels`, and with `help` (a sentence without its full stop) as its
    /// first use says.
    pub fn gauge_with(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &'static str)],
    ) -> Gauge {
        debug_assert!(
            name.starts_with("sluice_") && !name.ends_with("_total"),
            "gauge {name} does not follow sluice_<area>_<noun>_<unit>"
        );
        let mut metrics = self.lock(&self.inner.metrics);
        let Metrics {
            registry, gauges, ..
        } = &mut *metrics;
        let family = family(registry, gauges, (name, name), help, Family::default);
        Gauge(family.get_or_create_owned(&sorted(labels)))
    }

    /// The histogram `name` with `labels`, and with `help` (a sentence without its full stop,
    /// which the encoder adds) and `buckets` as its first use says (a name keeps one set of
    /// buckets). Names follow `sluice_<area>_<noun>_<unit>`, e.g.
    /// `sluice_stage_batch_seconds`.
    pub fn histogram_with(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &'static str)],
        buckets: Buckets,
    ) -> Histogram {
        debug_assert!(
            name.starts_with("sluice_") && !name.ends_with("_total"),
            "histogram {name} does not follow sluice_<area>_<noun>_<unit>"
        );
        let mut metrics = self.lock(&self.inner.metrics);
        let Metrics {
            registry,
            histograms,
            ..
        } = &mut *metrics;
        let make: fn() -> Distribution = match buckets {
            Buckets::Seconds => seconds,
            Buckets::Sizes => sizes,
        };
        let family = family(registry, histograms, (name, name), help, || {
            Family::new_with_constructor(make)
        });
        Histogram(family.get_or_create_owned(&sorted(labels)))
    }

    /// Every metric in the Prometheus text exposition format (version 0.0.4).
    pub fn render_metrics(&self) -> String {
        let metrics = self.lock(&self.inner.metrics);
        let mut out = String::new();
        // Writing to a String cannot fail, and neither can encoding what the registry holds.
        let _ = prometheus_text::encode(&mut out, &metrics.registry);
        out
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
        self.0.inc_by(n);
    }

    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl Gauge {
    pub fn set(&self, value: i64) {
        self.0.set(value);
    }

    pub fn get(&self) -> i64 {
        self.0.get()
    }
}

impl Histogram {
    pub fn observe(&self, value: f64) {
        self.0.observe(value);
    }

    /// An observation of `elapsed` in seconds.
    pub fn observe_duration(&self, elapsed: std::time::Duration) {
        self.0.observe(elapsed.as_secs_f64());
    }
}

/// The family `name` of `families`, made by `make` and registered as `registered` with `help`
/// on first use; the same family (its series shared) on every later one.
fn family<F: Metric + Clone>(
    registry: &mut Registry,
    families: &mut HashMap<&'static str, F>,
    (name, registered): (&'static str, &str),
    help: impl Into<String>,
    make: impl FnOnce() -> F,
) -> F {
    families
        .entry(name)
        .or_insert_with(|| {
            let family = make();
            registry.register(registered, help, family.clone());
            family
        })
        .clone()
}

/// Labels in one order, so that the same labels given in any order are one series.
fn sorted(labels: &[(&'static str, &'static str)]) -> Labels {
    let mut labels = labels.to_vec();
    labels.sort_unstable();
    labels
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
        [(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
        health.render_metrics(),
    )
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
        let rendered = health.render_metrics();
        let lines: Vec<&str> = rendered.lines().collect();
        for expected in [
            "# HELP sluice_watcher_events_observed_total watcher events observed.",
            "# TYPE sluice_watcher_events_observed_total counter",
            "sluice_watcher_events_observed_total 3",
            "# TYPE sluice_applier_plans_applied_total counter",
            "sluice_applier_plans_applied_total{cluster_type=\"capi\",result=\"failed\"} 0",
            "sluice_applier_plans_applied_total{cluster_type=\"capi\",result=\"ok\"} 2",
        ] {
            assert!(lines.contains(&expected), "{expected} not in\n{rendered}");
        }
        // One TYPE line per name, and a line per series: no more.
        assert_eq!(
            lines.iter().filter(|l| !l.starts_with('#')).count(),
            3,
            "{rendered}"
        );
    }

    #[test]
    fn renders_histograms_with_cumulative_buckets_sum_and_count() {
        let health = Health::new();
        let batch = health.histogram_with(
            "sluice_stage_batch_seconds",
            "How long a batch took",
            &[("consumer", "applier")],
            Buckets::Seconds,
        );
        batch.observe(0.0007);
        batch.observe_duration(std::time::Duration::from_millis(20));
        batch.observe(100.0);
        // The same name and labels is the same histogram, whatever buckets a later use names.
        health
            .histogram_with(
                "sluice_stage_batch_seconds",
                "Another help",
                &[("consumer", "applier")],
                Buckets::Sizes,
            )
            .observe(0.0007);
        let rendered = health.render_metrics();
        let lines: Vec<&str> = rendered.lines().collect();
        for expected in [
            "# HELP sluice_stage_batch_seconds How long a batch took.",
            "# TYPE sluice_stage_batch_seconds histogram",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"0.0005\"} 0",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"0.001\"} 2",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"0.01\"} 2",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"0.015\"} 2",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"0.02\"} 3",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"0.025\"} 3",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"30\"} 3",
            "sluice_stage_batch_seconds_bucket{consumer=\"applier\",le=\"+Inf\"} 4",
            "sluice_stage_batch_seconds_count{consumer=\"applier\"} 4",
        ] {
            assert!(lines.contains(&expected), "{expected} not in\n{rendered}");
        }
        let sum: f64 = lines
            .iter()
            .find_map(|l| l.strip_prefix("sluice_stage_batch_seconds_sum{consumer=\"applier\"} "))
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!((sum - 100.0214).abs() < 1e-9, "{sum}");
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
    fn renders_gauges_at_their_last_value() {
        let health = Health::new();
        let pending =
            health.gauge_with("sluice_test_pending_inputs", "Inputs", &[("consumer", "a")]);
        pending.set(7);
        pending.set(3);
        assert_eq!(pending.get(), 3);
        let rendered = health.render_metrics();
        assert!(
            rendered.contains("# TYPE sluice_test_pending_inputs gauge\n"),
            "{rendered}"
        );
        assert!(
            rendered.contains("sluice_test_pending_inputs{consumer=\"a\"} 3\n"),
            "{rendered}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let health = Health::new();
        health
            .counter_with("sluice_test_things_total", &[("kind", "a\"b\\c\nd")])
            .inc();
        assert!(
            health
                .render_metrics()
                .contains("sluice_test_things_total{kind=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{}",
            health.render_metrics()
        );
    }
}
