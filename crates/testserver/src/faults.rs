//! Fault injection for one cluster: added latency, a share of requests failing with a chosen
//! status, dropping open watch streams, stalling them (a watch that falls behind: it sends
//! nothing until released, and ends if it lost events meanwhile), a forced `410 Gone` on the next
//! watch, and unreachability. Compacting the history (every watch or continued list from an
//! older version answered `410 Gone`, as after etcd's compaction) is the cluster's
//! (`State::compact`), asked for here with [`FaultRequest::compact`].
//! Failures are deterministic, not random: with error rate `r`, every request adds `r` to an
//! accumulator and fails when it reaches 1, so a rate of 0.25 fails exactly every fourth request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Fault settings as JSON for the admin endpoint; every field is optional in a request.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRequest {
    pub latency_ms: Option<u64>,
    pub error_rate: Option<f64>,
    pub error_status: Option<u16>,
    pub unreachable: Option<bool>,
    pub drop_watches: bool,
    pub gone_next_watch: bool,
    pub stall_watches: Option<bool>,
    /// Forgets the history of changes up to now (handled by the admin endpoint, which holds
    /// the cluster's state).
    pub compact: bool,
    /// Clears every fault before applying the other fields.
    pub heal: bool,
}

/// The current fault settings of a cluster.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultSettings {
    pub latency_ms: u64,
    pub error_rate: f64,
    pub error_status: u16,
    pub unreachable: bool,
    pub gone_next_watch: bool,
    pub watches_stalled: bool,
}

impl Default for FaultSettings {
    fn default() -> Self {
        FaultSettings {
            latency_ms: 0,
            error_rate: 0.0,
            error_status: 503,
            unreachable: false,
            gone_next_watch: false,
            watches_stalled: false,
        }
    }
}

/// Handle to one cluster's faults; cheap to clone, shared with the server.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Mutex<(FaultSettings, f64)>,
    drops: watch::Sender<u64>,
    stalls: watch::Sender<bool>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            inner: Arc::new(Inner {
                settings: Mutex::new((FaultSettings::default(), 0.0)),
                drops: watch::channel(0).0,
                stalls: watch::channel(false).0,
            }),
        }
    }
}

impl Faults {
    fn with<R>(&self, f: impl FnOnce(&mut (FaultSettings, f64)) -> R) -> R {
        let mut guard = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    pub fn settings(&self) -> FaultSettings {
        self.with(|s| s.0.clone())
    }

    /// Delays every request to this cluster by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        self.with(|s| s.0.latency_ms = latency.as_millis().try_into().unwrap_or(u64::MAX));
    }

    /// Fails a share `rate` (0.0..=1.0) of requests with `status` (for example 429, 500 or 503).
    pub fn set_error_rate(&self, rate: f64, status: u16) {
        self.with(|s| {
            s.0.error_rate = rate.clamp(0.0, 1.0);
            s.0.error_status = status;
            s.1 = 0.0;
        });
    }

    /// Ends every open watch stream of this cluster now (clients see a clean end of stream).
    pub fn drop_watches(&self) {
        self.inner.drops.send_modify(|n| *n += 1);
    }

    /// Stalls every watch stream of this cluster, open or opened meanwhile, after what it sends
    /// when it starts: it sends no event and no bookmark until released, as a watch whose
    /// client fell behind. Released, a stream that lost events meanwhile (more than its feed
    /// holds) ends, and its client re-watches from the last version it saw.
    pub fn stall_watches(&self, stalled: bool) {
        self.with(|s| s.0.watches_stalled = stalled);
        self.inner.stalls.send_replace(stalled);
    }

    /// Makes the next watch request that names a resourceVersion fail with `410 Gone`.
    pub fn force_gone_next_watch(&self) {
        self.with(|s| s.0.gone_next_watch = true);
    }

    /// Answers every request to this cluster with 503 and ends its open watches.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.with(|s| s.0.unreachable = unreachable);
        if unreachable {
            self.drop_watches();
        }
    }

    /// Clears every fault.
    pub fn heal(&self) {
        self.with(|s| *s = (FaultSettings::default(), 0.0));
        self.inner.stalls.send_replace(false);
    }

    /// Applies an admin request.
    pub fn apply(&self, req: &FaultRequest) {
        if req.heal {
            self.heal();
        }
        if let Some(ms) = req.latency_ms {
            self.set_latency(Duration::from_millis(ms));
        }
        if let Some(rate) = req.error_rate {
            self.set_error_rate(rate, req.error_status.unwrap_or(503));
        } else if let Some(status) = req.error_status {
            self.with(|s| s.0.error_status = status);
        }
        if let Some(u) = req.unreachable {
            self.set_unreachable(u);
        }
        if req.gone_next_watch {
            self.force_gone_next_watch();
        }
        if let Some(stalled) = req.stall_watches {
            self.stall_watches(stalled);
        }
        if req.drop_watches {
            self.drop_watches();
        }
    }

    pub(crate) fn latency(&self) -> Option<Duration> {
        let ms = self.with(|s| s.0.latency_ms);
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    pub(crate) fn unreachable(&self) -> bool {
        self.with(|s| s.0.unreachable)
    }

    /// The status to fail this request with, if the error rate says so.
    pub(crate) fn injected_error(&self) -> Option<u16> {
        self.with(|s| {
            if s.0.error_rate <= 0.0 {
                return None;
            }
            s.1 += s.0.error_rate;
            if s.1 >= 1.0 - 1e-9 {
                s.1 -= 1.0;
                Some(s.0.error_status)
            } else {
                None
            }
        })
    }

    pub(crate) fn take_gone(&self) -> bool {
        self.with(|s| std::mem::take(&mut s.0.gone_next_watch))
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.inner.drops.subscribe()
    }

    pub(crate) fn stall_signal(&self) -> watch::Receiver<bool> {
        self.inner.stalls.subscribe()
    }
}
