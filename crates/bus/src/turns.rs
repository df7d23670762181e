//! Which output published on a subject of a last-value stream is the newest (ADR 0048).
//!
//! An output whose ack did not come is published again with the same message id, and JetStream
//! drops the copy of one it stored. But a server that restarts on its store remembers the ids
//! of the messages it still holds, not of those a newer message on their subject replaced: an
//! older state published again after a newer one was stored would be stored over it, and the
//! subject would go back in time for good. So each output takes a [`Turn`] on its subject when
//! it is first published; once a newer output on the same subject was published, the older one
//! is superseded and never published again: the stream's last value is the newer one's, whose
//! own fate (stored, or its input retried) decides the subject. Logs keep every message, so
//! their outputs are never superseded.
//!
//! Only outputs in flight are counted: a subject is forgotten when its last turn is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use crate::topology;

/// Per subject with outputs in flight: the newest output's number, and how many are in flight.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    next: AtomicU64,
    subjects: Mutex<FxHashMap<String, (u64, usize)>>,
}

impl Turns {
    /// The next turn on `subject`, the newest from now on; a log's subject takes none.
    pub(crate) fn take(self: &Arc<Turns>, subject: &str) -> Turn {
        if !topology::is_last_value_subject(subject) {
            return Turn {
                turns: None,
                subject: String::new(),
                number: 0,
            };
        }
        let number = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut subjects = self.lock();
        let entry = subjects.entry(subject.to_string()).or_default();
        *entry = (number, entry.1 + 1);
        Turn {
            turns: Some(self.clone()),
            subject: subject.to_string(),
            number,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<String, (u64, usize)>> {
        self.subjects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subjects with an output in flight.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// One output's place on its subject, held until the output is settled (stored, given up, or
/// superseded).
#[derive(Debug)]
pub struct Turn {
    turns: Option<Arc<Turns>>,
    subject: String,
    number: u64,
}

impl Turn {
    /// Whether an output published after this one on the same subject of a last-value stream
    /// replaces it: this one must not be published again.
    pub fn superseded(&self) -> bool {
        let Some(turns) = &self.turns else {
            return false;
        };
        turns
            .lock()
            .get(&self.subject)
            .is_some_and(|(newest, _)| *newest != self.number)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(turns) = &self.turns else {
            return;
        };
        let mut subjects = turns.lock();
        if let Some(entry) = subjects.get_mut(&self.subject) {
            entry.1 -= 1;
            if entry.1 == 0 {
                subjects.remove(&self.subject);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired(unit: &str) -> String {
        topology::desired_subject(unit, &topology::cluster_tokens("sveltos", "default", "a"))
    }

    #[test]
    fn a_newer_output_on_the_subject_supersedes_an_older_one_until_both_are_settled() {
        let turns = Arc::new(Turns::default());
        let old = turns.take(&desired("u"));
        let other = turns.take(&desired("v"));
        assert!(!old.superseded(), "the newest on its subject");
        let new = turns.take(&desired("u"));
        assert!(old.superseded(), "a newer output on its subject");
        assert!(!new.superseded() && !other.superseded());
        // Settled before the older one: the older one stays superseded.
        drop(new);
        assert!(old.superseded());
        drop(old);
        drop(other);
        assert_eq!(turns.len(), 0, "nothing in flight is remembered");
        let again = turns.take(&desired("u"));
        assert!(
            !again.superseded(),
            "a subject with nothing in flight starts afresh"
        );
    }

    #[test]
    fn a_logs_outputs_are_never_superseded() {
        let turns = Arc::new(Turns::default());
        let subject = topology::cloudevent_subject("sveltos.default.a");
        let first = turns.take(&subject);
        let second = turns.take(&subject);
        assert!(!first.superseded() && !second.superseded());
        assert_eq!(turns.len(), 0, "a log's subjects are not counted");
    }
}
