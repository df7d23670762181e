//! W3C trace context (`traceparent`, version 00): ids for one event's trace across services.
//!
//! Only the header format lives here; spans are exported by [`crate::spans`]. Services read the
//! header from the incoming NATS message, log the trace id, and put a child traceparent on what
//! they publish.
//!
//! A trace sluice starts has a UUIDv7 as its trace id (RFC 9562: the first 48 bits are the
//! Unix time in milliseconds, the rest random), so every message of an event carries when its
//! trace began, and a stage tells an event's age from its input's context alone
//! ([`event_age`]), without a header of its own.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The oldest an event may be for [`event_age`] to tell its age: a trace id that would make it
/// older came from elsewhere (a random id looks like a UUIDv7 one time in 64).
pub const OLDEST_EVENT: Duration = Duration::from_secs(24 * 3600);
/// How far the clock of the host that began a trace may be ahead of this one's.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// The share of new traces sampled ([`crate::spans::init_spans`] sets it), as `f64` bits.
static SAMPLING_RATIO: AtomicU64 = AtomicU64::new(0x3ff0_0000_0000_0000); // 1.0

/// Sets the share of the traces this process begins from now on that are sampled.
pub(crate) fn set_sampling_ratio(ratio: f64) {
    SAMPLING_RATIO.store(ratio.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
}

/// The header that carries the trace context, in NATS headers as in HTTP.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// A parsed `traceparent`: trace id, the sender's span id, and trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl TraceContext {
    /// A new trace: its trace id a UUIDv7 of now, its span id random, sampled as the
    /// process's sampler says ([`crate::spans::sampled`]; all of them unless told otherwise).
    pub fn new_root() -> TraceContext {
        let trace_id = *uuid::Uuid::now_v7().as_bytes();
        let ratio = f64::from_bits(SAMPLING_RATIO.load(Ordering::Relaxed));
        TraceContext {
            trace_id,
            span_id: new_span_id(),
            flags: u8::from(crate::spans::sampled(&trace_id, ratio)),
        }
    }

    /// The same trace with a new span id: what a service puts on the messages it publishes.
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: new_span_id(),
            ..*self
        }
    }

    /// When the trace began, if its trace id is a UUIDv7 (its version and variant bits say so):
    /// the time the id carries, to the millisecond.
    pub fn started(&self) -> Option<SystemTime> {
        let id = &self.trace_id;
        if id[6] >> 4 != 7 || id[8] >> 6 != 0b10 {
            return None;
        }
        let millis = id[..6]
            .iter()
            .fold(0u64, |at, byte| (at << 8) | u64::from(*byte));
        UNIX_EPOCH.checked_add(Duration::from_millis(millis))
    }

    pub fn is_sampled(&self) -> bool {
        self.flags & 0x01 != 0
    }

    /// The trace id as 32 lowercase hex digits, for log fields.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span id as 16 lowercase hex digits, for log fields.
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }
}

impl fmt::Display for TraceContext {
    /// Formats as a version-00 `traceparent` header value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            self.flags
        )
    }
}

/// The reason a `traceparent` value was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid traceparent {value:?}")]
pub struct InvalidTraceparent {
    pub value: String,
}

impl FromStr for TraceContext {
    type Err = InvalidTraceparent;

    fn from_str(value: &str) -> Result<TraceContext, InvalidTraceparent> {
        parse_traceparent(value).ok_or_else(|| InvalidTraceparent {
            value: value.to_owned(),
        })
    }
}

/// A fresh `traceparent` value starting a new trace.
pub fn new_traceparent() -> String {
    TraceContext::new_root().to_string()
}

/// Parses a `traceparent` value per W3C Trace Context level 1: version `ff` and all-zero ids are
/// invalid; a version-00 value has exactly four fields; a later version may append fields.
pub fn parse_traceparent(value: &str) -> Option<TraceContext> {
    let value = value.trim();
    let mut fields = value.split('-');
    let version = decode_hex::<1>(fields.next()?)?[0];
    let trace_id = decode_hex::<16>(fields.next()?)?;
    let span_id = decode_hex::<8>(fields.next()?)?;
    let flags = decode_hex::<1>(fields.next()?)?[0];
    let has_more = fields.next().is_some();
    if version == 0xff || (version == 0 && has_more) {
        return None;
    }
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(TraceContext {
        trace_id,
        span_id,
        flags,
    })
}

/// The `traceparent` to publish downstream: a child of `incoming` when it parses, otherwise the
/// start of a new trace (an event without valid context still gets one trace from here on).
pub fn child_traceparent(incoming: Option<&str>) -> String {
    incoming
        .and_then(parse_traceparent)
        .map_or_else(TraceContext::new_root, |parent| parent.child())
        .to_string()
}

/// How long before `now` the trace of `traceparent` began: for a trace sluice's watcher began,
/// when it saw the change. `None` when the value does not parse, its trace id carries no time,
/// or the time is not plausible (over [`OLDEST_EVENT`] before `now`, or over [`CLOCK_SKEW`]
/// after it; less than that after it is taken as no time at all).
pub fn event_age(traceparent: &str, now: SystemTime) -> Option<Duration> {
    let started = parse_traceparent(traceparent)?.started()?;
    match now.duration_since(started) {
        Ok(age) => (age <= OLDEST_EVENT).then_some(age),
        Err(ahead) => (ahead.duration() <= CLOCK_SKEW).then_some(Duration::ZERO),
    }
}

fn new_span_id() -> [u8; 8] {
    loop {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        let mut span = [0; 8];
        // the first 6 bytes of a v4 uuid are fully random (version bits sit in byte 6)
        span[..6].copy_from_slice(&bytes[..6]);
        span[6..].copy_from_slice(&bytes[10..12]);
        if span != [0; 8] {
            return span;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes exactly `N` bytes from `2 * N` lowercase hex digits.
fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (i, pair) in text.as_bytes().chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_and_formats_the_spec_example() {
        let context = parse_traceparent(SAMPLE).unwrap();
        assert_eq!(context.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.span_id_hex(), "00f067aa0ba902b7");
        assert!(context.is_sampled());
        assert_eq!(context.to_string(), SAMPLE);
        assert_eq!(SAMPLE.parse::<TraceContext>().unwrap(), context);
    }

    #[test]
    fn a_new_trace_tells_when_it_began_and_a_foreign_one_does_not() {
        let before = SystemTime::now();
        let value = new_traceparent();
        let context = parse_traceparent(&value).unwrap();
        let started = context.started().unwrap();
        // The id holds milliseconds: it may read up to 1 ms before `before`.
        let early = before.duration_since(started).unwrap_or_default();
        assert!(early < Duration::from_millis(1), "{early:?}");
        assert!(started <= SystemTime::now());
        // A child keeps the trace id, so every later stage reads the same time.
        let child = child_traceparent(Some(&value));
        assert_eq!(parse_traceparent(&child).unwrap().started(), Some(started));
        let later = started + Duration::from_millis(250);
        assert_eq!(event_age(&child, later), Some(Duration::from_millis(250)));
        // The spec's example is no UUIDv7 (its version nibble is 3): no age.
        assert_eq!(parse_traceparent(SAMPLE).unwrap().started(), None);
        assert_eq!(event_age(SAMPLE, later), None);
        assert_eq!(event_age("garbage", later), None);
    }

    #[test]
    fn an_implausible_age_is_none_and_a_slightly_early_clock_reads_zero() {
        // A UUIDv7 id of 2026-01-01T00:00:00Z (1767225600000 ms).
        let id = format!("{:012x}70008000000000000001", 1_767_225_600_000u64);
        let value = format!("00-{id}-00f067aa0ba902b7-01");
        let began = UNIX_EPOCH + Duration::from_millis(1_767_225_600_000);
        assert_eq!(parse_traceparent(&value).unwrap().started(), Some(began));
        assert_eq!(
            event_age(&value, began + Duration::from_secs(3)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            event_age(&value, began + OLDEST_EVENT + Duration::from_secs(1)),
            None
        );
        assert_eq!(
            event_age(&value, began - Duration::from_secs(2)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            event_age(&value, began - CLOCK_SKEW - Duration::from_secs(1)),
            None
        );
    }

    #[test]
    fn new_traceparent_round_trips() {
        let value = new_traceparent();
        assert_eq!(value.len(), 55);
        let context = parse_traceparent(&value).unwrap();
        assert_eq!(context.to_string(), value);
        assert_ne!(new_traceparent(), value);
    }

    #[test]
    fn child_keeps_the_trace_and_changes_the_span() {
        let parent = parse_traceparent(SAMPLE).unwrap();
        let child = parse_traceparent(&child_traceparent(Some(SAMPLE))).unwrap();
        assert_eq!(child.trace_id, parent.trace_id);
        assert_eq!(child.flags, parent.flags);
        assert_ne!(child.span_id, parent.span_id);
    }

    #[test]
    fn child_of_missing_or_invalid_context_starts_a_new_trace() {
        let parent = parse_traceparent(SAMPLE).unwrap();
        for incoming in [None, Some("garbage")] {
            let fresh = parse_traceparent(&child_traceparent(incoming)).unwrap();
            assert_ne!(fresh.trace_id, parent.trace_id);
        }
    }

    #[test]
    fn rejects_invalid_values() {
        let invalid = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for value in invalid {
            assert_eq!(parse_traceparent(value), None, "{value}");
        }
    }

    #[test]
    fn accepts_future_versions_with_extra_fields() {
        let value = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-future";
        let context = parse_traceparent(value).unwrap();
        assert!(!context.is_sampled());
    }
}
