//! An OTLP/HTTP trace receiver for tests: it takes `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest`, decoded with the OpenTelemetry project's own message types, and
//! keeps every span it was sent, with the `service.name` of its resource.
//!
//! No OpenTelemetry Collector or Jaeger can run on the test machines; this speaks the receiving
//! side of the same protocol, so a service's real exporter is what the tests exercise.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

/// One span as the receiver got it; ids in lowercase hex, an absent parent empty.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedSpan {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// The OTLP span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    /// Attribute values as text (strings as they are, numbers and booleans printed).
    pub attributes: BTreeMap<String, String>,
    /// The status message of a span whose status is an error.
    pub error: Option<String>,
}

/// A running receiver on 127.0.0.1; it stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> anyhow::Result<OtlpReceiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(traces))
            .with_state(spans.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(OtlpReceiver { addr, spans, task })
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans
            .lock()
            .map(|spans| spans.clone())
            .unwrap_or_default()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn traces(
    State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let protobuf = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes() == b"application/x-protobuf");
    if !protobuf {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|resource| &resource.attributes)
            .find(|kv| kv.key == "service.name")
            .map(text_of)
            .unwrap_or_default();
        for span in resource_spans
            .scope_spans
            .into_iter()
            .flat_map(|scope| scope.spans)
        {
            received.push(ReceivedSpan {
                service: service.clone(),
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                name: span.name,
                kind: span.kind,
                start_unix_nanos: span.start_time_unix_nano,
                end_unix_nanos: span.end_time_unix_nano,
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text_of(kv)))
                    .collect(),
                // status code 2 is an error
                error: span
                    .status
                    .filter(|status| status.code == 2)
                    .map(|status| status.message),
            });
        }
    }
    if let Ok(mut spans) = spans.lock() {
        spans.extend(received);
    }
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn text_of(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|value| value.value.as_ref()) {
        Some(Value::StringValue(text)) => text.clone(),
        Some(Value::IntValue(number)) => number.to_string(),
        Some(Value::DoubleValue(number)) => number.to_string(),
        Some(Value::BoolValue(flag)) => flag.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
