//! What the watcher publishes for one NATS message of a managed cluster: the CloudEvent in
//! structured JSON as a `CloudEventReceived`, and the message id that makes redelivery safe
//! (ADR 0008). Pure: parsing and naming only, no IO.

use async_nats::HeaderMap;
use sluice_bus::{message_id, topology, Outgoing};
use sluice_domain::cloudevent::{self, CloudEventError};
use sluice_domain::cluster::ClusterId;
use sluice_proto::v1 as pb;

/// How a message reached the watcher, which decides its identity on the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// Core NATS: delivered at most once, never redelivered; `unique` is fresh per message.
    /// `subscribed` is when its subscription began (Unix nanoseconds) and `received` the
    /// message's number in it (from 1): the order the watcher received them in.
    Core {
        unique: &'a str,
        subscribed: u64,
        received: u64,
    },
    /// JetStream: the same stored message may come again until acked; identified by where it
    /// is stored. `created` is when the stream was made (Unix nanoseconds), so that a stream
    /// made again, whose sequences start over, is another origin.
    Stream {
        stream: &'a str,
        created: u64,
        sequence: u64,
    },
}

impl Delivery<'_> {
    /// Where the event's order is defined, and its place there (ADR 0049), which no retry on
    /// the way changes: a JetStream stream's sequence; for core NATS, the order the watcher
    /// received them in on one subscription.
    pub fn origin(&self) -> (String, u64) {
        match *self {
            Delivery::Core {
                subscribed,
                received,
                ..
            } => (format!("core:{subscribed}"), received),
            Delivery::Stream {
                stream,
                created,
                sequence,
            } => (format!("jetstream:{stream}:{created}"), sequence),
        }
    }
}

/// The headers of a NATS message as (name, first value) pairs.
pub fn header_pairs(headers: Option<&HeaderMap>) -> Vec<(String, String)> {
    headers
        .map(|headers| {
            headers
                .iter()
                .filter_map(|(name, values)| {
                    let value = values.first()?;
                    Some((name.to_string(), value.as_str().to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The message id of a CloudEvent on the bus: the stored message's identity for JetStream (a
/// redelivery is a duplicate the bus drops), a fresh id for core NATS (each delivery is new).
/// Never the CloudEvent's `source` + `id`: seed 004 sends login and logout with the same ones.
pub fn cloudevent_message_id(cluster_tokens: &str, delivery: Delivery<'_>) -> String {
    match delivery {
        Delivery::Core { unique, .. } => {
            message_id(&["cloudevent", cluster_tokens, "core", unique])
        }
        Delivery::Stream {
            stream, sequence, ..
        } => message_id(&[
            "cloudevent",
            cluster_tokens,
            "jetstream",
            stream,
            &sequence.to_string(),
        ]),
    }
}

/// Parses one message (structured or binary mode) into what the bus carries.
pub fn outgoing(
    cluster: &ClusterId,
    nats_subject: &str,
    headers: &[(String, String)],
    payload: &[u8],
    delivery: Delivery<'_>,
) -> Result<Outgoing, CloudEventError> {
    let pairs = headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let event = cloudevent::parse_message(pairs, payload)?;
    let tokens = sluice_wire::cluster_tokens(cluster);
    let (origin, origin_position) = delivery.origin();
    let message = pb::CloudEventReceived {
        cluster: Some(sluice_wire::cluster_ref(cluster)),
        subject: nats_subject.to_string(),
        event_json: event.to_bytes(),
        origin,
        origin_position,
    };
    // A CloudEvent carrying W3C trace context (the distributed tracing extension) continues
    // that trace through the pipeline.
    let traceparent = sluice_runtime::child_traceparent(event.attribute("traceparent"));
    Ok(Outgoing {
        ttl: None,
        subject: topology::cloudevent_subject(&tokens),
        msg_id: cloudevent_message_id(&tokens, delivery),
        payload: sluice_wire::encode(&message),
        traceparent: Some(traceparent),
    })
}

/// A stored message in the form the bus carries, as the runner reads it: the event as
/// structured JSON (a binary-mode event's attributes, its headers, folded in) and the event's
/// own trace context (its `traceparent` attribute), which the runner continues in the output.
pub fn structured(
    headers: &[(String, String)],
    payload: &[u8],
) -> Result<(Vec<u8>, Option<String>), CloudEventError> {
    let pairs = headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let event = cloudevent::parse_message(pairs, payload)?;
    let traceparent = event.attribute("traceparent").map(str::to_string);
    Ok((event.to_bytes(), traceparent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use serde_json::{json, Value};
    use sluice_domain::cluster::ClusterType;

    fn cluster() -> ClusterId {
        ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: "production".into(),
        }
    }

    const LOGIN: &str = r#"{"specversion":"1.0","type":"auth.example.com.login","source":"auth.example.com","id":"10001","subject":"mgianluc","datacontenttype":"application/json","data":{"message":"User mgianluc login"}}"#;

    fn core_delivery(unique: &str) -> Delivery<'_> {
        Delivery::Core {
            unique,
            subscribed: 1,
            received: 1,
        }
    }

    #[test]
    fn structured_event_becomes_cloudevent_received_unchanged() {
        let out = outgoing(
            &cluster(),
            "user-operation",
            &[],
            LOGIN.as_bytes(),
            core_delivery("u1"),
        )
        .expect("valid event");
        assert_eq!(
            out.subject,
            topology::cloudevent_subject("sveltos.default.production")
        );
        let message = pb::CloudEventReceived::decode(out.payload).expect("decodes");
        assert_eq!(message.subject, "user-operation");
        assert_eq!(message.cluster, Some(sluice_wire::cluster_ref(&cluster())));
        let event: Value = serde_json::from_slice(&message.event_json).expect("json");
        assert_eq!(event, serde_json::from_str::<Value>(LOGIN).expect("json"));
    }

    /// A binary-mode logout's headers, and `extra`.
    fn binary_headers(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        [
            ("ce-specversion", "1.0"),
            ("ce-id", "7"),
            ("ce-source", "auth.example.com"),
            ("ce-type", "auth.example.com.logout"),
            ("ce-subject", "mgianluc"),
            ("content-type", "application/json"),
        ]
        .iter()
        .chain(extra)
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn binary_mode_headers_become_structured_json() {
        let headers = binary_headers(&[]);
        let out = outgoing(
            &cluster(),
            "user-operation",
            &headers,
            br#"{"a":1}"#,
            core_delivery("u"),
        )
        .expect("valid binary event");
        let message = pb::CloudEventReceived::decode(out.payload).expect("decodes");
        let event: Value = serde_json::from_slice(&message.event_json).expect("json");
        assert_eq!(event["type"], "auth.example.com.logout");
        assert_eq!(event["data"], json!({"a": 1}));
    }

    #[test]
    fn malformed_events_are_rejected_with_the_reason() {
        let error = outgoing(
            &cluster(),
            "s",
            &[],
            br#"{"specversion":"1.0","id":"1"}"#,
            core_delivery("u"),
        )
        .expect_err("no source");
        assert_eq!(
            error.to_string(),
            "required attribute source is missing or empty"
        );
    }

    #[test]
    fn ids_identify_the_stored_message_not_the_event() {
        let t = "sveltos.default.production";
        let at = |stream, sequence| {
            let delivery = Delivery::Stream {
                stream,
                created: 1,
                sequence,
            };
            cloudevent_message_id(t, delivery)
        };
        assert_eq!(
            at("EVENTS", 5),
            at("EVENTS", 5),
            "a redelivery is a duplicate"
        );
        assert_ne!(
            at("EVENTS", 5),
            at("EVENTS", 6),
            "login and logout with the same source+id are not"
        );
        assert_ne!(at("EVENTS", 5), at("OTHER", 5));
        assert_ne!(
            at("EVENTS", 5),
            cloudevent_message_id(
                "sveltos.default.other",
                Delivery::Stream {
                    stream: "EVENTS",
                    created: 1,
                    sequence: 5
                }
            )
        );
        let core = |unique| cloudevent_message_id(t, core_delivery(unique));
        assert_ne!(core("a"), core("b"));
    }

    #[test]
    fn a_message_carries_its_place_in_its_stream_or_subscription() {
        let at = |created, sequence| Delivery::Stream {
            stream: "EVENTS",
            created,
            sequence,
        };
        let received = |delivery| {
            let out = outgoing(&cluster(), "s", &[], LOGIN.as_bytes(), delivery).expect("valid");
            pb::CloudEventReceived::decode(out.payload).expect("decodes")
        };
        let first = received(at(1_700_000_000_000_000_000, 7));
        assert_eq!(first.origin, "jetstream:EVENTS:1700000000000000000");
        assert_eq!(first.origin_position, 7);
        assert_ne!(
            received(at(1_800_000_000_000_000_000, 7)).origin,
            first.origin,
            "a stream made again starts another order"
        );
        let core = received(Delivery::Core {
            unique: "u",
            subscribed: 1_700_000_000_000_000_000,
            received: 3,
        });
        assert_eq!(
            (core.origin.as_str(), core.origin_position),
            ("core:1700000000000000000", 3),
            "a core message's place is where its subscription received it"
        );
    }

    #[test]
    fn trace_context_of_the_event_is_continued() {
        let event = LOGIN.replace(
            r#""id":"10001""#,
            r#""id":"1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01""#,
        );
        let out =
            outgoing(&cluster(), "s", &[], event.as_bytes(), core_delivery("u")).expect("valid");
        let traceparent = out.traceparent.expect("traceparent");
        assert!(
            traceparent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{traceparent}"
        );
    }

    #[test]
    fn a_binary_mode_message_reads_as_the_structured_event_with_its_trace_context() {
        let headers = binary_headers(&[(
            "ce-traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )]);
        let (json, traceparent) = structured(&headers, br#"{"a":1}"#).expect("valid");
        assert_eq!(
            traceparent.as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        let event: Value = serde_json::from_slice(&json).expect("json");
        assert_eq!(event["type"], "auth.example.com.logout");
        assert_eq!(event["data"], json!({"a": 1}));
        let (again, _) = structured(&[], &json).expect("the structured form is a valid event");
        assert_eq!(again, json, "read again, it is the same");
        let (_, none) = structured(&[], LOGIN.as_bytes()).expect("valid");
        assert_eq!(none, None);
        assert!(structured(&[], b"not json").is_err());
    }

    #[test]
    fn headers_keep_their_first_value() {
        let mut headers = HeaderMap::new();
        headers.insert("ce-id", "1");
        headers.append("ce-id", "2");
        assert_eq!(
            header_pairs(Some(&headers)),
            [("ce-id".to_string(), "1".to_string())]
        );
        assert!(header_pairs(None).is_empty());
    }
}
