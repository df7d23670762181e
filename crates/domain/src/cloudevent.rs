//! CloudEvents as sluice carries them: parsed from a NATS message in structured JSON mode or in
//! binary mode (`ce-*` headers), validated, normalised to structured JSON, and matched against an
//! EventSource's `messagingMatchCriteria`. It does not read NATS or decide what happens next.

use serde_json::{Map, Value};

use crate::eventsource::MessagingMatchCriteria;

/// The CloudEvents spec versions accepted (the ones the CloudEvents Go SDK reads).
pub const SPEC_VERSIONS: [&str; 2] = ["1.0", "0.3"];

/// Prefix of the NATS headers that carry attributes in binary mode (NATS protocol binding).
pub const BINARY_HEADER_PREFIX: &str = "ce-";

/// A valid CloudEvent in structured JSON mode: the attributes plus `data` (or `data_base64`) as
/// one JSON object, in the order they were received.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudEvent {
    json: Map<String, Value>,
}

/// Why a message is not a CloudEvent sluice accepts. Always permanent: the message is rejected,
/// counted and reported, never retried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CloudEventError {
    #[error("payload is not a JSON object: {reason}")]
    NotJson { reason: String },
    #[error("required attribute {attribute} is missing or empty")]
    Missing { attribute: &'static str },
    #[error("attribute {attribute} must be a string")]
    NotAString { attribute: String },
    #[error("unsupported specversion {version:?} (expected 1.0 or 0.3)")]
    UnsupportedSpecVersion { version: String },
    #[error(
        "datacontenttype {content_type:?} is not JSON (only application/json data is accepted)"
    )]
    NotJsonContent { content_type: String },
    #[error("binary-mode body is not JSON although its content type is: {reason}")]
    DataNotJson { reason: String },
}

impl CloudEvent {
    /// Validates a structured-mode JSON object: `specversion`, `id`, `source` and `type` are
    /// non-empty strings, the optional context attributes that are present are strings, and the
    /// data is JSON (`datacontenttype` absent or containing `application/json`).
    pub fn from_json(value: Value) -> Result<CloudEvent, CloudEventError> {
        let Value::Object(json) = value else {
            return Err(CloudEventError::NotJson {
                reason: "not an object".into(),
            });
        };
        for attribute in ["specversion", "id", "source", "type"] {
            match json.get(attribute) {
                Some(Value::String(s)) if !s.is_empty() => {}
                Some(Value::String(_)) | None | Some(Value::Null) => {
                    return Err(CloudEventError::Missing { attribute })
                }
                Some(_) => {
                    return Err(CloudEventError::NotAString {
                        attribute: attribute.into(),
                    })
                }
            }
        }
        // Extensions may be numbers or booleans; the optional context attributes are strings.
        for attribute in [
            "subject",
            "datacontenttype",
            "time",
            "dataschema",
            "schemaurl",
        ] {
            if json
                .get(attribute)
                .is_some_and(|v| !v.is_string() && !v.is_null())
            {
                return Err(CloudEventError::NotAString {
                    attribute: attribute.into(),
                });
            }
        }
        let event = CloudEvent { json };
        if !SPEC_VERSIONS.contains(&event.spec_version()) {
            return Err(CloudEventError::UnsupportedSpecVersion {
                version: event.spec_version().into(),
            });
        }
        if let Some(content_type) = event.attribute("datacontenttype") {
            if !is_json_content_type(content_type) {
                return Err(CloudEventError::NotJsonContent {
                    content_type: content_type.into(),
                });
            }
        }
        Ok(event)
    }

    pub fn spec_version(&self) -> &str {
        self.attribute("specversion").unwrap_or_default()
    }

    pub fn id(&self) -> &str {
        self.attribute("id").unwrap_or_default()
    }

    pub fn source(&self) -> &str {
        self.attribute("source").unwrap_or_default()
    }

    /// The `type` attribute.
    pub fn event_type(&self) -> &str {
        self.attribute("type").unwrap_or_default()
    }

    /// The `subject` attribute; empty when absent (as the Go SDK's `Subject()`).
    pub fn subject(&self) -> &str {
        self.attribute("subject").unwrap_or_default()
    }

    /// A string attribute (or extension) by name.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.json.get(name).and_then(Value::as_str)
    }

    /// The event in structured JSON mode.
    pub fn as_json(&self) -> &Map<String, Value> {
        &self.json
    }

    pub fn into_json(self) -> Value {
        Value::Object(self.json)
    }

    /// The event as structured-mode JSON bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising a map of JSON values cannot fail.
        serde_json::to_vec(&self.json).unwrap_or_default()
    }
}

/// Parses a structured-mode payload (the whole CloudEvent as one JSON object).
pub fn parse_structured(payload: &[u8]) -> Result<CloudEvent, CloudEventError> {
    let value: Value =
        serde_json::from_slice(payload).map_err(|error| CloudEventError::NotJson {
            reason: error.to_string(),
        })?;
    CloudEvent::from_json(value)
}

/// Whether a message is in binary mode: it carries a `ce-specversion` header.
pub fn is_binary_mode<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    headers
        .into_iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("ce-specversion"))
}

/// Parses a binary-mode message: attributes from the `ce-*` headers, `datacontenttype` from
/// `ce-datacontenttype` or `content-type`, and the body as `data` (JSON). The result is the same
/// event in structured mode. The first value of a repeated header wins.
pub fn parse_binary<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    body: &[u8],
) -> Result<CloudEvent, CloudEventError> {
    let mut attributes: Vec<(String, String)> = Vec::new();
    let mut content_type = None;
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let attribute = match lower.strip_prefix(BINARY_HEADER_PREFIX) {
            Some(attribute) if !attribute.is_empty() => attribute.to_string(),
            _ => {
                if lower == "content-type" && content_type.is_none() {
                    content_type = Some(value.to_string());
                }
                continue;
            }
        };
        if !attributes.iter().any(|(a, _)| *a == attribute) {
            attributes.push((attribute, value.to_string()));
        }
    }
    if let Some(content_type) = content_type {
        if !attributes.iter().any(|(a, _)| a == "datacontenttype") {
            attributes.push(("datacontenttype".into(), content_type));
        }
    }
    // Required attributes first, the rest in a stable order, then the data.
    const FIRST: [&str; 7] = [
        "specversion",
        "id",
        "source",
        "type",
        "subject",
        "datacontenttype",
        "time",
    ];
    let rank = |a: &str| FIRST.iter().position(|f| *f == a).unwrap_or(FIRST.len());
    attributes.sort_by(|(a, _), (b, _)| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    let mut json: Map<String, Value> = attributes
        .into_iter()
        .map(|(a, v)| (a, Value::String(v)))
        .collect();
    if let Some(content_type) = json.get("datacontenttype").and_then(Value::as_str) {
        if !is_json_content_type(content_type) {
            return Err(CloudEventError::NotJsonContent {
                content_type: content_type.into(),
            });
        }
    }
    if !body.is_empty() {
        let data: Value =
            serde_json::from_slice(body).map_err(|error| CloudEventError::DataNotJson {
                reason: error.to_string(),
            })?;
        json.insert("data".into(), data);
    }
    CloudEvent::from_json(Value::Object(json))
}

/// Parses a NATS message in whichever mode it is: binary when it has a `ce-specversion` header,
/// structured otherwise.
pub fn parse_message<'a, I>(headers: I, body: &[u8]) -> Result<CloudEvent, CloudEventError>
where
    I: IntoIterator<Item = (&'a str, &'a str)> + Clone,
{
    if is_binary_mode(headers.clone()) {
        parse_binary(headers, body)
    } else {
        parse_structured(body)
    }
}

/// Whether one criterion selects the event: its subject pattern matches the NATS subject, and
/// its source, type and subject patterns match the event's attributes (Sveltos
/// `isCloudEventAMatch`). Empty patterns match anything.
pub fn matches(criteria: &MessagingMatchCriteria, nats_subject: &str, event: &CloudEvent) -> bool {
    criteria.subject.is_match(nats_subject)
        && criteria.cloud_event_source.is_match(event.source())
        && criteria.cloud_event_type.is_match(event.event_type())
        && criteria.cloud_event_subject.is_match(event.subject())
}

/// Whether any criterion of an EventSource selects the event (an empty list selects nothing).
pub fn matches_any(
    criteria: &[MessagingMatchCriteria],
    nats_subject: &str,
    event: &CloudEvent,
) -> bool {
    criteria.iter().any(|c| matches(c, nats_subject, event))
}

/// `application/json`, with parameters or in any case, as Sveltos's `contains` check.
fn is_json_content_type(content_type: &str) -> bool {
    content_type
        .to_ascii_lowercase()
        .contains("application/json")
}

#[cfg(test)]
#[path = "cloudevent/tests.rs"]
mod tests;
