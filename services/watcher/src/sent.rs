//! The root span of what a watch sent (ADR 0045): from the watch's delivery of a change to its
//! storing on the bus, with the ids its message carries. The watches of the managed clusters
//! (`SLUICE_CHANGES`) and of the management cluster (`SLUICE_CONFIG`) alike.

use std::time::SystemTime;

use sluice_bus::topology::StreamSpec;
use sluice_runtime::spans::{Attribute, Kind, Span};

/// One change a watch sent and the bus stored.
pub struct Sent {
    stream: &'static str,
    subject: String,
    seen: SystemTime,
    stored: SystemTime,
}

impl Sent {
    pub fn new(stream: StreamSpec, subject: String, seen: SystemTime, stored: SystemTime) -> Sent {
        Sent {
            stream: stream.name,
            subject,
            seen,
            stored,
        }
    }

    /// Exports the span under the trace context its message carries (`traceparent`), with
    /// `attributes` beside the messaging ones; nothing without a context or with export off.
    pub fn record(self, traceparent: Option<&str>, attributes: Vec<Attribute>) {
        if !sluice_runtime::spans::spans_enabled() {
            return;
        }
        let Some(context) = traceparent.and_then(sluice_runtime::parse_traceparent) else {
            return;
        };
        let mut all = vec![
            Attribute::new("messaging.system", "nats"),
            Attribute::new("messaging.operation.type", "send"),
            Attribute::new("messaging.destination.name", self.subject),
            Attribute::new("sluice.stream", self.stream),
        ];
        all.extend(attributes);
        sluice_runtime::spans::record(Span {
            context,
            parent: None,
            name: format!("send {}", self.stream).into(),
            kind: Kind::Producer,
            start: self.seen,
            end: self.stored,
            attributes: all,
            error: None,
        });
    }
}

/// What the span of a configuration object says of it.
pub fn config_object(kind: &str, namespace: &str, name: &str) -> Vec<Attribute> {
    vec![
        Attribute::new("sluice.kind", kind.to_string()),
        Attribute::new("sluice.namespace", namespace.to_string()),
        Attribute::new("sluice.name", name.to_string()),
    ]
}
