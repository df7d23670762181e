//! What the runner measures of every stage's batches, as Prometheus metrics labelled with the
//! durable consumer and its stream (ADR 0044): how many inputs a batch has, how many more were
//! waiting for the consumer when its last one was delivered (a gauge: the stage's backlog), how
//! long each input waited in its stream before its batch began, how long the stage took over
//! the batch, and how old each event was when the stage had handled it (from its trace
//! context, [`sluice_runtime::event_age`]): at the applier, from the watcher's sight of a change
//! to the objects it makes being written; and how often its consumer was bound again because a
//! delivery never arrived.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::Message;
use sluice_runtime::{Buckets, Counter, Gauge, Health, Histogram};

use crate::topology::ConsumerSpec;

/// The runner's histograms of one consumer.
#[derive(Clone, Debug)]
pub struct Timings {
    inputs: Histogram,
    pending: Gauge,
    waited: Histogram,
    handling: Histogram,
    age: Histogram,
    rebound: Counter,
    others: Counter,
}

/// Inputs per batch.
pub const BATCH_INPUTS: &str = "sluice_stage_batch_inputs";
/// Inputs waiting for the consumer when the last batch's last input was delivered.
pub const PENDING: &str = "sluice_stage_pending_inputs";
/// Seconds from an input's storing in its stream to its batch's beginning.
pub const INPUT_WAIT: &str = "sluice_stage_input_wait_seconds";
/// Seconds a stage took over a batch.
pub const BATCH_SECONDS: &str = "sluice_stage_batch_seconds";
/// Times the consumer was bound again because a delivery never arrived ([`crate::transit`]).
pub const REBOUND: &str = "sluice_stage_rebinds_total";
/// Inputs of another partition's clusters acked without work ([`crate::partition`]).
pub const OTHER_PARTITIONS: &str = "sluice_stage_other_partitions_inputs_total";
/// Seconds from the beginning of an event's trace to its handling by the stage.
pub const EVENT_AGE: &str = "sluice_event_age_seconds";
const EVENT_AGE_HELP: &str = "Seconds from the beginning of an event's trace (the watcher's message of a change) to the stage's handling of it, or to the producer's storing of it";

impl Timings {
    pub fn new(health: &Health, spec: &ConsumerSpec) -> Timings {
        let labels = [("consumer", spec.durable), ("stream", spec.stream.name)];
        Timings {
            inputs: health.histogram_with(
                BATCH_INPUTS,
                "Inputs per batch the stage runner handed the stage",
                &labels,
                Buckets::Sizes,
            ),
            pending: health.gauge_with(
                PENDING,
                "Inputs waiting for the consumer when the last batch's last input was delivered",
                &labels,
            ),
            waited: health.histogram_with(
                INPUT_WAIT,
                "Seconds from an input's storing in its stream to its batch's beginning",
                &labels,
                Buckets::Seconds,
            ),
            handling: health.histogram_with(
                BATCH_SECONDS,
                "Seconds the stage took over a batch",
                &labels,
                Buckets::Seconds,
            ),
            age: health.histogram_with(EVENT_AGE, EVENT_AGE_HELP, &labels, Buckets::Seconds),
            rebound: health.counter_with(REBOUND, &labels),
            others: health.counter_with(OTHER_PARTITIONS, &labels),
        }
    }

    /// The event-age histogram of a producer that stores what it makes without a runner (the
    /// watcher), observed once stored: labelled with the producer's name as the consumer, and
    /// the stream it stores to.
    pub fn stored_age(
        health: &Health,
        producer: &'static str,
        stream: crate::topology::StreamSpec,
    ) -> Histogram {
        health.histogram_with(
            EVENT_AGE,
            EVENT_AGE_HELP,
            &[("consumer", producer), ("stream", stream.name)],
            Buckets::Seconds,
        )
    }

    /// A batch of `messages` begins now: its size, the backlog behind it, and how long each of
    /// its inputs waited.
    pub(crate) fn begin(&self, messages: &[Message]) -> tokio::time::Instant {
        self.inputs.observe(messages.len() as f64);
        let now = SystemTime::now();
        let mut behind = None;
        for message in messages {
            if let Ok(info) = message.info() {
                let stored = info.published.unix_timestamp_nanos();
                self.waited.observe_duration(waited(stored, now));
                behind = Some(info.pending);
            }
        }
        if let Some(pending) = behind {
            self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
        }
        tokio::time::Instant::now()
    }

    /// The stage is done with the batch that began `at`.
    pub(crate) fn end(&self, at: tokio::time::Instant) {
        self.handling.observe_duration(at.elapsed());
    }

    /// The consumer was bound again after a delivery never arrived.
    /// The count of inputs of other partitions, shared with a reader task.
    pub(crate) fn others(&self) -> Counter {
        self.others.clone()
    }

    pub(crate) fn rebound(&self) {
        self.rebound.add(1);
    }

    /// The stage has handled an input of trace context `traceparent`.
    pub(crate) fn handled(&self, traceparent: Option<&str>) {
        if let Some(age) = traceparent.and_then(|t| sluice_runtime::event_age(t, SystemTime::now()))
        {
            self.age.observe_duration(age);
        }
    }
}

/// How long before `now` a message stored at `stored` (Unix nanoseconds, as the server's clock
/// says) was; nothing when the server's clock is ahead of this host's.
fn waited(stored: i128, now: SystemTime) -> Duration {
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as i128);
    let nanos = (now - stored).clamp(0, i128::from(u64::MAX));
    Duration::from_nanos(nanos as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inputs_wait_is_from_its_storing_and_never_negative() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let stored = Duration::from_millis(999_250).as_nanos() as i128;
        assert_eq!(waited(stored, now), Duration::from_millis(750));
        let ahead = Duration::from_secs(1_001).as_nanos() as i128;
        assert_eq!(waited(ahead, now), Duration::ZERO);
    }
}
