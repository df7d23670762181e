//! When each EventReport is written: as soon as its set's head arrives, but at most once per
//! [`INTERVAL`] while changes keep coming (the report is a view for users, not a pipeline step,
//! so a burst of heads costs one write). Pure: the time comes in as an argument.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use sluice_wire::match_units::SetKey;
use tokio::time::Instant;

/// The least time between two writes of one report.
pub const INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct Schedule {
    /// Reports to write, with when.
    due: BTreeMap<SetKey, Instant>,
    /// When each report was last written.
    last: HashMap<SetKey, Instant>,
}

impl Schedule {
    /// Asks for `key`'s report to be written: now, or [`INTERVAL`] after its last write.
    pub fn mark(&mut self, key: &SetKey, now: Instant) {
        if self.due.contains_key(key) {
            return;
        }
        let at = self
            .last
            .get(key)
            .map_or(now, |last| (*last + INTERVAL).max(now));
        self.due.insert(key.clone(), at);
    }

    /// Asks for `key`'s report to be written again after `delay` (a transient failure).
    pub fn retry(&mut self, key: &SetKey, now: Instant, delay: Duration) {
        self.due.insert(key.clone(), now + delay);
    }

    /// When the next report is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// The reports due at `now`, recorded as written now.
    pub fn take_due(&mut self, now: Instant) -> Vec<SetKey> {
        let due: Vec<SetKey> = self
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

    /// Forgets a report that is gone for good.
    pub fn forget(&mut self, key: &SetKey) {
        self.last.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::{ClusterId, ClusterType};

    fn key(es: &str) -> SetKey {
        let cluster = ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: "a".into(),
        };
        (cluster, es.into())
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
}
