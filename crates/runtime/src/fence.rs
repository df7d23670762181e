//! A lease holder's fence (ADR 0046): every write a process makes (a publish on the bus, a
//! mutating request to Kubernetes) first asks its [`Fence`], which admits it only while the
//! process may still count itself the holder of its service's lease.
//!
//! The lease's renewal task moves the fence's deadline at each stored renewal (its renew
//! deadline, counted from before it sent the renewal) and closes it when the lease is lost. A
//! process paused past that deadline (SIGSTOP, a frozen VM, a long stall of its runtime) wakes
//! with its tasks in any order: whichever writes first finds the deadline passed and is
//! refused, before the renewal task has run to notice the loss. A process without a lease
//! (no `--leader-elect`) has an open fence, which admits everything without reading the clock.
//!
//! The decision is the pure [`admits`]; [`Fence`] holds the deadline where every writer of a
//! process reads it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A write refused because the lease this process held is lost, or may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "write refused: this process's lease is lost or past its renew deadline, \
     and another process may hold it now"
)]
pub struct Fenced;

/// The deadline of an open fence: never reached.
const OPEN: u64 = u64::MAX;

/// The deadline of a closed fence: always passed.
const CLOSED: u64 = 0;

/// Whether a write at `now` is admitted by a fence whose deadline is `until` (both in
/// nanoseconds on the process's monotonic clock, [`Fence`]'s count).
pub fn admits(now: u64, until: u64) -> bool {
    until == OPEN || now < until
}

/// A process's fence: cheap to clone, every clone the same fence.
#[derive(Clone, Default)]
pub struct Fence {
    inner: Arc<Inner>,
}

struct Inner {
    /// The deadline in nanoseconds after [`origin`]; [`OPEN`] or [`CLOSED`].
    until: AtomicU64,
    /// What the process does when a write is refused (a service exits at once).
    on_refusal: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Default for Inner {
    fn default() -> Inner {
        // The origin is read before any deadline can be set, so none falls before it.
        origin();
        Inner {
            until: AtomicU64::new(OPEN),
            on_refusal: OnceLock::new(),
        }
    }
}

/// The instant the fence's nanoseconds count from: the process's first fence.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// `at` as nanoseconds after [`origin`], at least 1 (so that no deadline reads as closed).
fn nanos(at: Instant) -> u64 {
    let since = at.saturating_duration_since(origin()).as_nanos();
    u64::try_from(since).unwrap_or(OPEN - 1).clamp(1, OPEN - 1)
}

impl Fence {
    /// A fence that admits every write until a lease sets its deadline.
    pub fn open() -> Fence {
        Fence::default()
    }

    /// Admits writes until `deadline` (a stored renewal's renew deadline).
    pub fn hold_until(&self, deadline: Instant) {
        self.inner.until.store(nanos(deadline), Ordering::Release);
    }

    /// Refuses every write from now on: the lease is lost, or released.
    pub fn close(&self) {
        self.inner.until.store(CLOSED, Ordering::Release);
    }

    /// Sets what happens when a write is refused, once per process (later calls are ignored):
    /// a service exits at once, as when its renewal task finds the lease lost.
    pub fn on_refusal(&self, action: impl Fn() + Send + Sync + 'static) {
        let _ = self.inner.on_refusal.set(Box::new(action));
    }

    /// Whether a write may go now. A refusal runs the action set by [`Fence::on_refusal`]
    /// first.
    pub fn check(&self) -> Result<(), Fenced> {
        let until = self.inner.until.load(Ordering::Acquire);
        if until == OPEN || admits(nanos(Instant::now()), until) {
            return Ok(());
        }
        if let Some(action) = self.inner.on_refusal.get() {
            action();
        }
        Err(Fenced)
    }
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let until = self.inner.until.load(Ordering::Relaxed);
        let state = match until {
            OPEN => "open".to_string(),
            CLOSED => "closed".to_string(),
            n => format!("until {n} ns"),
        };
        f.debug_struct("Fence").field("state", &state).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[test]
    fn a_deadline_admits_writes_before_it_and_none_from_it_on() {
        assert!(admits(9, 10));
        assert!(!admits(10, 10));
        assert!(!admits(11, 10));
        assert!(admits(u64::MAX - 1, OPEN));
        assert!(!admits(1, CLOSED));
    }

    #[test]
    fn a_fence_refuses_once_its_deadline_passed_or_it_is_closed() {
        let fence = Fence::open();
        assert_eq!(fence.check(), Ok(()));
        fence.hold_until(Instant::now() + Duration::from_secs(60));
        assert_eq!(fence.check(), Ok(()));
        // Every clone is the same fence.
        let clone = fence.clone();
        clone.hold_until(Instant::now() - Duration::from_millis(1));
        assert_eq!(fence.check(), Err(Fenced));
        fence.hold_until(Instant::now() + Duration::from_secs(60));
        assert_eq!(clone.check(), Ok(()));
        fence.close();
        assert_eq!(clone.check(), Err(Fenced));
    }

    #[test]
    fn a_refusal_runs_the_processs_action_and_an_admitted_write_does_not() {
        let refusals = Arc::new(AtomicUsize::new(0));
        let fence = Fence::open();
        let counted = refusals.clone();
        fence.on_refusal(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(fence.check(), Ok(()));
        assert_eq!(refusals.load(Ordering::SeqCst), 0);
        fence.close();
        assert_eq!(fence.check(), Err(Fenced));
        assert_eq!(fence.check(), Err(Fenced));
        assert_eq!(refusals.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_deadline_at_the_origin_is_not_read_as_closed() {
        let fence = Fence::open();
        fence.hold_until(origin());
        // Passed, but a deadline, not the closed mark: it reads as one in `Debug`.
        assert_eq!(fence.check(), Err(Fenced));
        assert!(format!("{fence:?}").contains("until 1 ns"));
    }
}
