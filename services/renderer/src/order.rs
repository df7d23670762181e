//! The order of each CloudEvent unit's events (ADR 0049). Each CloudEvent is placed in the order
//! of its origin (a managed JetStream stream's sequence, or `SLUICE_CLOUDEVENTS`'s for core
//! NATS), and that place travels with it through every stage. A match placed before the newest
//! one rendered for its unit, in the same origin, is older however late it arrives: a publish
//! retried after a newer one on the way (a crash of the bus, a redelivery) must not bring back
//! what a later event withdrew. Pure: no IO.

use rustc_hash::FxHashMap;

/// Units it keeps before it asks to be pruned the first time.
const PRUNE_FROM: usize = 4096;

/// The newest event rendered per CloudEvent unit, by the unit's desired-state subject.
#[derive(Debug, Default)]
pub struct CloudEventOrder {
    newest: FxHashMap<String, Newest>,
    /// How many units it keeps before [`CloudEventOrder::wants_pruning`] says so again.
    prune_at: usize,
    /// Whether a unit was ever forgotten: a unit not known since may have a state on the bus,
    /// which is read before deciding ([`CloudEventOrder::unknown`]).
    forgot: bool,
}

#[derive(Debug)]
struct Newest {
    origin: String,
    position: u64,
    /// The sequence of the CloudEvent match it came in (0: found on the bus): once the
    /// consumer's ack floor passes it, what it rendered is stored, and it may be forgotten.
    sequence: u64,
}

impl CloudEventOrder {
    /// Records an event at `position` in `origin` as the newest of unit `subject`, read at
    /// `sequence`, unless a later event of the same origin was recorded; whether it was (false:
    /// it is older and must not be rendered over the newer one). An event of another origin is
    /// not comparable and counts as newer: the order of two origins is the order of arrival.
    /// The same event again (a redelivery) is recorded again.
    pub fn advance(&mut self, subject: &str, origin: &str, position: u64, sequence: u64) -> bool {
        match self.newest.get_mut(subject) {
            Some(newest) if newest.origin == origin && newest.position > position => false,
            Some(newest) => {
                if newest.origin != origin {
                    newest.origin = origin.to_string();
                }
                newest.position = position;
                newest.sequence = sequence;
                true
            }
            None => {
                let newest = Newest {
                    origin: origin.to_string(),
                    position,
                    sequence,
                };
                self.newest.insert(subject.to_string(), newest);
                true
            }
        }
    }

    /// Records what the bus holds for a unit it does not know (at start, or read for an
    /// [`CloudEventOrder::unknown`] unit); what it rendered itself since is newer and stays.
    pub fn remember(&mut self, subject: &str, origin: &str, position: u64) {
        if !self.newest.contains_key(subject) {
            self.advance(subject, origin, position, 0);
        }
    }

    /// Whether unit `subject` may have a newer state on the bus than it knows: it is not known
    /// and units were forgotten. Until a prune every unit on the bus is known (the start read
    /// them all, and every one rendered since was recorded).
    pub fn unknown(&self, subject: &str) -> bool {
        self.forgot && !self.newest.contains_key(subject)
    }

    /// Whether any unit was forgotten: until then no unit is [`CloudEventOrder::unknown`].
    pub fn forgot_any(&self) -> bool {
        self.forgot
    }

    pub fn len(&self) -> usize {
        self.newest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.newest.is_empty()
    }

    /// Whether it has grown enough since it was last pruned to be pruned again: twice what it
    /// kept then, and at least [`PRUNE_FROM`].
    pub fn wants_pruning(&self) -> bool {
        self.newest.len() >= self.prune_at.max(PRUNE_FROM)
    }

    /// Forgets every unit whose newest event came at or below `floor`, the CloudEvent
    /// consumer's ack floor (what it rendered is stored on the bus, where
    /// [`CloudEventOrder::unknown`] sends the next decision); without a floor (it could not be
    /// read) asks again once it has doubled. How many units it forgot.
    pub fn prune(&mut self, floor: Option<u64>) -> usize {
        let before = self.newest.len();
        if let Some(floor) = floor {
            self.newest.retain(|_, newest| newest.sequence > floor);
        }
        let forgotten = before - self.newest.len();
        self.forgot |= forgotten > 0;
        self.prune_at = self.newest.len().saturating_mul(2);
        forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "jetstream:USERS:1";

    #[test]
    fn an_event_placed_before_the_newest_of_its_unit_is_older_however_late_it_comes() {
        let mut order = CloudEventOrder::default();
        assert!(order.advance("user-20", STREAM, 92, 10), "the logout");
        assert!(
            !order.advance("user-20", STREAM, 79, 11),
            "a login placed before it, published again after it"
        );
        assert!(order.advance("user-20", STREAM, 92, 12), "the logout again");
        assert!(order.advance("user-20", STREAM, 93, 13), "a later event");
        assert!(order.advance("user-21", STREAM, 1, 14), "another unit");
        assert!(
            order.advance("user-20", "sluice:cloudevents", 5, 15),
            "another origin is not comparable: arrival decides"
        );
        assert!(
            !order.advance("user-20", "sluice:cloudevents", 4, 16),
            "and in it, its own order"
        );
    }

    #[test]
    fn what_the_bus_holds_is_known_until_a_prune_and_read_after_it() {
        let mut order = CloudEventOrder::default();
        order.remember("on-the-bus", STREAM, 50);
        assert!(!order.advance("on-the-bus", STREAM, 49, 1));
        assert!(!order.unknown("never-rendered"), "nothing was forgotten");
        for unit in 0..PRUNE_FROM as u64 {
            order.advance(&format!("u{unit}"), STREAM, unit, 100 + unit);
        }
        assert!(order.wants_pruning());
        assert_eq!(order.prune(None), 0, "no floor: nothing forgotten");
        assert!(!order.wants_pruning(), "asks again once it has doubled");
        assert!(!order.unknown("never-rendered"));
        let forgotten = order.prune(Some(100 + 9));
        assert_eq!(
            forgotten, 11,
            "the ten at or below the floor and the one from the bus"
        );
        assert!(order.unknown("u0") && order.unknown("on-the-bus"));
        assert!(!order.unknown("u10"), "above the floor: kept");
        assert!(order.unknown("never-rendered"), "may be on the bus now");
        order.remember("u0", STREAM, 0);
        assert!(!order.unknown("u0"), "read from the bus");
    }
}
