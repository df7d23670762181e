//! W3C trace context (`traceparent`, version 00): ids for one event's trace across services.
//!
//! Only the header format lives here; there is no exporter. Services read the header from the
//! incoming NATS message, log the trace id, and put a child traceparent on what they publish.

use std::fmt;
use std::str::FromStr;

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
    /// A new trace (random trace and span ids), sampled.
    pub fn new_root() -> TraceContext {
        TraceContext {
            trace_id: *uuid::Uuid::new_v4().as_bytes(),
            span_id: new_span_id(),
            flags: 0x01,
        }
    }

    /// The same trace with a new span id: what a service puts on the messages it publishes.
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: new_span_id(),
            ..*self
        }
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
