//! Deliveries lost on their way to a durable consumer.
//!
//! JetStream numbers every delivery of a consumer, redeliveries included (the consumer
//! sequence), and numbers them from 1 again after a reset. So a number skipped is a delivery
//! the server made and this process never received: sent into a connection that dropped (the
//! node it was connected to lost), or to pull requests it gave up. The server counts it as
//! delivered and waits for its ack. With covering acks (`AckPolicy::All`) the ack of any later
//! input would settle it unread, and it would be lost until the stage restarts; with explicit
//! acks it would come again only after the consumer's ack wait (30 s). So a consumer's
//! deliveries end at the first skipped number ([`Arrivals`]), and the runner settles what
//! came before, resets the consumer to its ack floor and binds it again: the lost delivery
//! and everything after it come again at once (ADR 0047).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The consumer sequences of one consumer's deliveries, in the order they arrive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrivals {
    last: Option<u64>,
}

/// What one delivery's consumer sequence says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The next delivery; or the first one seen, or one numbered anew (a new consumer
    /// leader's), from which the numbers are followed.
    Next,
    /// The deliveries numbered `first..=last` never arrived.
    Missed { first: u64, last: u64 },
}

impl Arrivals {
    /// Before the first delivery of a consumer whose delivery state was just reset (its
    /// deliveries are numbered from 1 again): even the first one missed is seen.
    pub fn after_reset() -> Arrivals {
        Arrivals { last: Some(0) }
    }

    /// Takes the delivery numbered `sequence`. After a [`Arrival::Missed`] it keeps the last
    /// number that arrived in order.
    pub fn arrive(&mut self, sequence: u64) -> Arrival {
        match self.last {
            Some(last) if sequence > last.saturating_add(1) => Arrival::Missed {
                first: last + 1,
                last: sequence - 1,
            },
            _ => {
                self.last = Some(sequence);
                Arrival::Next
            }
        }
    }
}

/// Set when a consumer's deliveries ended because one of them never arrived; shared by the
/// consumer's stream and the runner that binds it again.
#[derive(Clone, Debug, Default)]
pub struct Missed(Arc<AtomicBool>);

impl Missed {
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skipped_number_is_a_missed_delivery() {
        let mut arrivals = Arrivals::default();
        assert_eq!(arrivals.arrive(7), Arrival::Next, "the first one seen");
        assert_eq!(arrivals.arrive(8), Arrival::Next);
        assert_eq!(arrivals.arrive(11), Arrival::Missed { first: 9, last: 10 });
        assert_eq!(
            arrivals.arrive(11),
            Arrival::Missed { first: 9, last: 10 },
            "it keeps the last number that arrived in order"
        );
        assert_eq!(arrivals.arrive(9), Arrival::Next);
    }

    #[test]
    fn after_a_reset_even_the_first_delivery_missed_is_seen() {
        let mut arrivals = Arrivals::after_reset();
        assert_eq!(arrivals.arrive(2), Arrival::Missed { first: 1, last: 1 });
        let mut arrivals = Arrivals::after_reset();
        assert_eq!(arrivals.arrive(1), Arrival::Next);
        assert_eq!(arrivals.arrive(2), Arrival::Next);
    }

    #[test]
    fn numbers_that_start_again_lower_are_followed_from_there() {
        let mut arrivals = Arrivals::default();
        assert_eq!(arrivals.arrive(40), Arrival::Next);
        assert_eq!(arrivals.arrive(38), Arrival::Next, "a new leader's numbers");
        assert_eq!(arrivals.arrive(39), Arrival::Next);
        assert_eq!(
            arrivals.arrive(41),
            Arrival::Missed {
                first: 40,
                last: 40
            }
        );
    }

    #[test]
    fn a_missed_mark_is_seen_by_every_clone() {
        let missed = Missed::default();
        let seen = missed.clone();
        assert!(!seen.is_set());
        missed.set();
        assert!(seen.is_set());
    }
}
