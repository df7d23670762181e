//! Objects the applier wrote and someone else deleted or edited (a `kubectl delete`, `edit`, a
//! script), to be written again from their unit's latest desired state (ADR 0039): which units
//! are due, the objects each lost, and a growing delay for a unit whose repair failed. Pure
//! bookkeeping; the stage does the IO.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::plan::ObjectId;

/// How long the first deletion of a unit waits for others: a burst of deletions (`kubectl delete
/// clusterprofiles -l ...`) is repaired in a few rounds instead of one per object.
pub(crate) const GATHER: Duration = Duration::from_millis(100);

/// The most units repaired in one round, so that one round holds up the stage's consumer for a
/// bounded time (the rest are due at once after it).
pub(crate) const MOST_AT_ONCE: usize = 256;

/// A unit to repair: its desired-state subject, what it lost, and how many repairs of it failed.
#[derive(Debug, PartialEq)]
pub(crate) struct Due {
    pub(crate) subject: String,
    pub(crate) gone: Vec<ObjectId>,
    pub(crate) failures: u32,
}

#[derive(Debug)]
struct Pending {
    gone: BTreeSet<ObjectId>,
    failures: u32,
    at: Instant,
}

/// The units waiting for a repair, by subject, and when each is due.
#[derive(Debug, Default)]
pub(crate) struct Repairs {
    units: BTreeMap<String, Pending>,
    queue: BTreeSet<(Instant, String)>,
}

impl Repairs {
    /// `id`, an object of the unit on `subject`, was deleted or edited by someone else.
    pub(crate) fn note(&mut self, subject: &str, id: ObjectId, now: Instant) {
        if let Some(pending) = self.units.get_mut(subject) {
            pending.gone.insert(id);
            return;
        }
        self.schedule(subject.to_string(), BTreeSet::from([id]), 0, now + GATHER);
    }

    /// When the next unit is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// The units due at `now`, at most `most`, oldest first; they are no longer pending.
    pub(crate) fn take_due(&mut self, now: Instant, most: usize) -> Vec<Due> {
        let mut due = Vec::new();
        while due.len() < most {
            let Some((at, _)) = self.queue.first() else {
                break;
            };
            if *at > now {
                break;
            }
            let Some((_, subject)) = self.queue.pop_first() else {
                break;
            };
            if let Some(pending) = self.units.remove(&subject) {
                due.push(Due {
                    subject,
                    gone: pending.gone.into_iter().collect(),
                    failures: pending.failures,
                });
            }
        }
        due
    }

    /// A repair failed: it is due again after the runner's retry delay for its failures, with
    /// whatever else the unit lost meanwhile.
    pub(crate) fn retry(&mut self, due: Due, now: Instant) {
        let failures = due.failures.saturating_add(1);
        let delay = sluice_bus::runner::retry_delay(i64::from(failures));
        let mut gone: BTreeSet<ObjectId> = due.gone.into_iter().collect();
        if let Some(pending) = self.units.remove(&due.subject) {
            self.queue.remove(&(pending.at, due.subject.clone()));
            gone.extend(pending.gone);
        }
        self.schedule(due.subject, gone, failures, now + delay);
    }

    /// How many units wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.units.len()
    }

    fn schedule(&mut self, subject: String, gone: BTreeSet<ObjectId>, failures: u32, at: Instant) {
        self.queue.insert((at, subject.clone()));
        self.units.insert(subject, Pending { gone, failures, at });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> ObjectId {
        (
            "ClusterProfile".to_string(),
            String::new(),
            name.to_string(),
        )
    }

    #[test]
    fn deletions_of_one_unit_are_gathered_into_one_repair() {
        let now = Instant::now();
        let mut repairs = Repairs::default();
        assert_eq!(repairs.next_due(), None);
        repairs.note("s.a", id("p1"), now);
        repairs.note("s.b", id("p2"), now + Duration::from_millis(30));
        repairs.note("s.a", id("c1"), now + Duration::from_millis(60));
        assert_eq!(repairs.next_due(), Some(now + GATHER));
        assert!(repairs.take_due(now + GATHER / 2, 10).is_empty());
        assert_eq!(
            repairs.take_due(now + GATHER, 10),
            [Due {
                subject: "s.a".into(),
                gone: vec![id("c1"), id("p1")],
                failures: 0
            }]
        );
        assert_eq!(repairs.len(), 1);
        let later = now + Duration::from_secs(1);
        assert_eq!(repairs.take_due(later, 10).len(), 1);
        assert_eq!(repairs.len(), 0);
        assert_eq!(repairs.next_due(), None);
    }

    #[test]
    fn a_round_takes_at_most_so_many_units_and_the_rest_stay_due() {
        let now = Instant::now();
        let mut repairs = Repairs::default();
        for unit in 0..5 {
            repairs.note(&format!("s.{unit}"), id("p"), now);
        }
        let at = now + GATHER;
        assert_eq!(repairs.take_due(at, 3).len(), 3);
        assert_eq!(repairs.next_due(), Some(at));
        assert_eq!(repairs.take_due(at, 3).len(), 2);
    }

    #[test]
    fn a_failed_repair_is_due_again_later_each_time_with_what_was_lost_meanwhile() {
        let now = Instant::now();
        let mut repairs = Repairs::default();
        repairs.note("s.a", id("p1"), now);
        let first = repairs.take_due(now + GATHER, 10).remove(0);
        repairs.retry(first, now);
        assert_eq!(repairs.next_due(), Some(now + Duration::from_millis(500)));
        repairs.note("s.a", id("c1"), now);
        assert_eq!(repairs.next_due(), Some(now + Duration::from_millis(500)));
        let second = repairs.take_due(now + Duration::from_secs(1), 10).remove(0);
        assert_eq!(second.gone, [id("c1"), id("p1")]);
        assert_eq!(second.failures, 1);
        repairs.retry(second, now);
        assert_eq!(repairs.next_due(), Some(now + Duration::from_millis(1000)));
    }
}
