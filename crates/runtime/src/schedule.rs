//! When a view for users (an EventReport, an EventTrigger's status) is written: as soon as it
//! changes, but at most once per [`INTERVAL`] per key while changes keep coming, so a burst of
//! changes costs one write (a view is not a pipeline step). Pure: the time comes in as an
//! argument. Beside it, [`sleep_until`], the timer of a `select!` that may have nothing due.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Waits until `at`; never without one (a timer in a `select!` that may have nothing due).
pub async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The least time between two writes of one key.
pub const INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Schedule<K> {
    /// Keys to write, with when.
    due: BTreeMap<K, Instant>,
    /// When each key was last written.
    last: HashMap<K, Instant>,
}

impl<K> Default for Schedule<K> {
    fn default() -> Schedule<K> {
        Schedule {
            due: BTreeMap::new(),
            last: HashMap::new(),
        }
    }
}

impl<K: Ord + Hash + Clone> Schedule<K> {
    /// Asks for `key` to be written: now, or [`INTERVAL`] after its last write.
    pub fn mark(&mut self, key: &K, now: Instant) {
        if self.due.contains_key(key) {
            return;
        }
        let at = self
            .last
            .get(key)
            .map_or(now, |last| (*last + INTERVAL).max(now));
        self.due.insert(key.clone(), at);
    }

    /// Asks for `key` to be written at once, whenever it was last written (a change that must
    /// not wait, such as a finalizer to add).
    pub fn mark_now(&mut self, key: &K, now: Instant) {
        self.due.insert(key.clone(), now);
    }

    /// Asks for `key` to be written again after `delay` (a transient failure).
    pub fn retry(&mut self, key: &K, now: Instant, delay: Duration) {
        self.due.insert(key.clone(), now + delay);
    }

    /// When the next key is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// The keys due at `now`, recorded as written now.
    pub fn take_due(&mut self, now: Instant) -> Vec<K> {
        let due: Vec<K> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &due {
            self.due.remove(key);
            self.last.insert(key.clone(), now);
        }
        due
    }

    /// Every key still to write, recorded as written now (a drain writes them all).
    pub fn take_all(&mut self, now: Instant) -> Vec<K> {
        let due: Vec<K> = std::mem::take(&mut self.due).into_keys().collect();
        for key in &due {
            self.last.insert(key.clone(), now);
        }
        due
    }

    /// Forgets a key that is gone for good.
    pub fn forget(&mut self, key: &K) {
        self.last.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> String {
        name.to_string()
    }

    #[test]
    fn a_burst_of_heads_is_one_write_per_interval() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.mark(&key("a"), start);
        assert_eq!(schedule.next_due(), Some(start));
        assert_eq!(schedule.take_due(start), [key("a")]);
        // Heads keep coming: the next write waits for the interval, however many arrive.
        for ms in [10, 20, 500] {
            schedule.mark(&key("a"), start + Duration::from_millis(ms));
        }
        assert_eq!(schedule.next_due(), Some(start + INTERVAL));
        assert!(schedule
            .take_due(start + Duration::from_millis(900))
            .is_empty());
        assert_eq!(schedule.take_due(start + INTERVAL), [key("a")]);
        // Another report is not held back by this one.
        schedule.mark(&key("b"), start + INTERVAL);
        assert_eq!(schedule.take_due(start + INTERVAL), [key("b")]);
        // Long after the last write, a head is written at once.
        let later = start + 10 * INTERVAL;
        schedule.mark(&key("a"), later);
        assert_eq!(schedule.take_due(later), [key("a")]);
    }

    #[test]
    fn a_write_that_must_not_wait_is_due_at_once_and_a_drain_takes_everything() {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        schedule.mark(&key("a"), start);
        schedule.take_due(start);
        let soon = start + Duration::from_millis(10);
        schedule.mark(&key("a"), soon);
        assert_eq!(schedule.next_due(), Some(start + INTERVAL));
        schedule.mark_now(&key("a"), soon);
        assert_eq!(schedule.take_due(soon), [key("a")]);
        schedule.mark(&key("a"), soon);
        schedule.mark(&key("b"), soon);
        assert_eq!(
            schedule.take_due(soon),
            [key("b")],
            "a waits for its interval"
        );
        schedule.mark(&key("b"), soon);
        assert_eq!(schedule.take_all(soon), [key("a"), key("b")]);
        assert_eq!(schedule.next_due(), None);
    }
}
