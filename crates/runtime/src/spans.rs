//! Span export over OTLP (ADR 0045): when the standard OpenTelemetry variables ask for it, each
//! service sends a span for every step of an event it takes part in, to an OTLP/HTTP receiver
//! (an OpenTelemetry Collector, Jaeger, Tempo...).
//!
//! The spans are recorded after the fact, with the ids the event's `traceparent` already
//! carries on the bus: a stage's span is the one whose id its outputs carry as their parent,
//! so the spans of one event form one tree across the services. They go to the SDK's batch
//! processor and its OTLP exporter as finished span data; no tracer is involved, since a
//! tracer chooses ids of its own.
//!
//! Which variables are read ([`SpanConfig::from_env`]):
//! - `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`: no export;
//! - `OTEL_TRACES_EXPORTER=otlp`, or an endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` appended): export; without any of them
//!   sluice exports nothing (no receiver assumed on localhost);
//! - `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`: `http/protobuf` only;
//! - `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`: how many traces sluice begins are
//!   sampled; a trace begun elsewhere (a CloudEvent's) keeps its own decision;
//! - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`,
//!   `..._TIMEOUT` and `OTEL_BSP_*` are the SDK's own; the service name defaults to
//!   `sluice-<service>`.
//!
//! A bad value is a configuration error (exit 64) naming the variable.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanExporter, SpanLinks, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use crate::trace::TraceContext;

pub use opentelemetry::trace::SpanKind as Kind;
pub use opentelemetry::KeyValue as Attribute;

/// How long the batch processor may take to send what it holds when the service stops.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);

/// Whether spans are exported, and what share of the traces sluice begins are sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanConfig {
    pub export: bool,
    /// The share of new traces sampled, 0 to 1.
    pub ratio: f64,
}

/// A value of an OpenTelemetry variable sluice cannot follow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {reason}")]
pub struct BadSpanConfig {
    pub var: &'static str,
    pub value: String,
    pub reason: &'static str,
}

/// The variables [`SpanConfig::from_env`] reads: what a deployment may set for span export
/// beside the flags (the SDK reads more of its own, such as `OTEL_EXPORTER_OTLP_HEADERS`).
pub const ENV_VARS: [&str; 8] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_TRACES_EXPORTER",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SDK_DISABLED",
];

impl SpanConfig {
    /// Reads the span export's variables through `var` (the environment, in a service).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<SpanConfig, BadSpanConfig> {
        let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let bad = |var: &'static str, value: &str, reason: &'static str| BadSpanConfig {
            var,
            value: value.to_owned(),
            reason,
        };
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = set(name) {
                if protocol.trim() != "http/protobuf" {
                    return Err(bad(
                        name,
                        &protocol,
                        "sluice exports spans over OTLP/HTTP with protobuf only: http/protobuf",
                    ));
                }
                break;
            }
        }
        let ratio = match set("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
            None | Some("always_on" | "parentbased_always_on") => 1.0,
            Some("always_off" | "parentbased_always_off") => 0.0,
            Some("traceidratio" | "parentbased_traceidratio") => {
                match set("OTEL_TRACES_SAMPLER_ARG") {
                    None => 1.0,
                    Some(arg) => match arg.trim().parse::<f64>() {
                        Ok(ratio) if (0.0..=1.0).contains(&ratio) => ratio,
                        _ => {
                            return Err(bad(
                                "OTEL_TRACES_SAMPLER_ARG",
                                &arg,
                                "expected a number from 0 to 1",
                            ))
                        }
                    },
                }
            }
            Some(other) => {
                return Err(bad(
                    "OTEL_TRACES_SAMPLER",
                    other,
                    "expected always_on, always_off, traceidratio or their parentbased_ forms",
                ))
            }
        };
        let disabled =
            set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let endpoint = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .is_some();
        let export = match set("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            None => endpoint,
            Some("otlp") => true,
            Some("none") => false,
            Some(other) => {
                return Err(bad(
                    "OTEL_TRACES_EXPORTER",
                    other,
                    "sluice exports spans over OTLP only: otlp or none",
                ))
            }
        };
        Ok(SpanConfig {
            export: export && !disabled,
            ratio,
        })
    }
}

/// Whether a new trace of id `trace_id` is sampled at `ratio`: by its last 4 bytes as a
/// fraction of 2^32, which are random in a UUIDv7 id (the bits before them may be a counter).
pub fn sampled(trace_id: &[u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let low = trace_id[12..]
        .iter()
        .fold(0u64, |at, byte| (at << 8) | u64::from(*byte));
    (low as f64) < ratio * (1u64 << 32) as f64
}

/// One finished step of an event, as a service records it.
#[derive(Clone, Debug)]
pub struct Span {
    /// This span's trace and span id, and whether it is sampled.
    pub context: TraceContext,
    /// The span id of its parent in another service, if it has one.
    pub parent: Option<[u8; 8]>,
    pub name: Cow<'static, str>,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    /// Why the step failed, if it did.
    pub error: Option<String>,
}

/// The process's span export: set once by [`init_spans`], absent when nothing is exported.
struct Export {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

static EXPORT: OnceLock<Export> = OnceLock::new();

/// What becomes of the spans, on `/metrics` ([`count_spans`]): those handed to the batch
/// processor, those its exporter sent, and those in batches the receiver did not take. The
/// processor drops spans when its queue is full without saying so anywhere else: recorded less
/// exported and failed, beyond the queue (2,048), were dropped.
struct SpanCounters {
    recorded: crate::Counter,
    exported: crate::Counter,
    failed: crate::Counter,
}

static COUNTERS: OnceLock<SpanCounters> = OnceLock::new();

/// Counts the process's spans on `health`'s `/metrics`: `sluice_spans_recorded_total`,
/// `sluice_spans_exported_total` and `sluice_spans_export_failed_total`. Once per process; only
/// when spans are exported.
pub fn count_spans(health: &crate::Health) {
    if !spans_enabled() {
        return;
    }
    let _ = COUNTERS.set(SpanCounters {
        recorded: health.counter("sluice_spans_recorded_total"),
        exported: health.counter("sluice_spans_exported_total"),
        failed: health.counter("sluice_spans_export_failed_total"),
    });
}

/// The OTLP exporter, counting what it sends and what fails.
#[derive(Debug)]
struct Counted<E>(E);

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let sent = self.0.export(batch).await;
        if let Some(counters) = COUNTERS.get() {
            match &sent {
                Ok(()) => counters.exported.add(spans),
                Err(_) => counters.failed.add(spans),
            }
        }
        sent
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// Whether this process exports spans: callers skip building a [`Span`] when it does not.
pub fn spans_enabled() -> bool {
    EXPORT.get().is_some()
}

/// Hands a finished span to the exporter; nothing when spans are not exported or the span is
/// not sampled. Never blocks: a full queue drops the span (the SDK counts it).
pub fn record(span: Span) {
    let Some(export) = EXPORT.get() else {
        return;
    };
    if !span.context.is_sampled() {
        return;
    }
    if let Some(counters) = COUNTERS.get() {
        counters.recorded.inc();
    }
    export.processor.on_end(span_data(span, &export.scope));
}

/// One request to a Kubernetes API server that a step of an event makes: recorded as a client
/// span under the step's span (ADR 0045), named `PATCH ClusterProfile`, say.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `PATCH`, `DELETE`, `GET`...
    pub method: &'static str,
    pub api_version: &'a str,
    pub kind: &'a str,
    /// Empty for a cluster-scoped object.
    pub namespace: &'a str,
    pub name: &'a str,
    /// `status`, or empty for the object itself.
    pub subresource: &'a str,
}

/// A list of a kind that no event asked for (the watcher's first list of a cluster's kind, and
/// every list again after its watch was lost): the root span of a trace of its own, `LIST
/// Service` (kind client), with the cluster, the kind and how many objects it found.
pub fn record_list(
    cluster: &str,
    api_version: &str,
    kind: &str,
    objects: usize,
    start: SystemTime,
) {
    if !spans_enabled() {
        return;
    }
    record(Span {
        context: TraceContext::new_root(),
        parent: None,
        name: format!("LIST {kind}").into(),
        kind: Kind::Client,
        start,
        end: SystemTime::now(),
        attributes: vec![
            Attribute::new("http.request.method", "LIST"),
            Attribute::new("sluice.cluster", cluster.to_owned()),
            Attribute::new("k8s.resource.api_version", api_version.to_owned()),
            Attribute::new("k8s.resource.kind", kind.to_owned()),
            Attribute::new("k8s.list.objects", objects as i64),
        ],
        error: None,
    });
}

impl<'a> Request<'a> {
    /// A request about the object `namespace`/`name` itself (`namespace` empty for a
    /// cluster-scoped one).
    pub fn new(
        method: &'static str,
        api_version: &'a str,
        kind: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> Request<'a> {
        Request {
            method,
            api_version,
            kind,
            namespace,
            name,
            subresource: "",
        }
    }

    /// [`Request::record`] with what came of the request: a failure's error chain is the
    /// span's error.
    pub fn record_outcome<T, E: std::error::Error>(
        &self,
        step: Option<&TraceContext>,
        start: SystemTime,
        outcome: &Result<T, E>,
    ) {
        let error = outcome.as_ref().err().map(|e| crate::error_chain(e));
        self.record(step, start, error);
    }

    /// Records the request, made from `start` until now, under `step`'s span; `error` when it
    /// failed. Nothing without a step span (spans not exported).
    pub fn record(&self, step: Option<&TraceContext>, start: SystemTime, error: Option<String>) {
        let Some(step) = step else {
            return;
        };
        let mut attributes = vec![
            Attribute::new("http.request.method", self.method),
            Attribute::new("k8s.resource.api_version", self.api_version.to_owned()),
            Attribute::new("k8s.resource.kind", self.kind.to_owned()),
            Attribute::new("k8s.object.name", self.name.to_owned()),
        ];
        if !self.namespace.is_empty() {
            attributes.push(Attribute::new(
                "k8s.namespace.name",
                self.namespace.to_owned(),
            ));
        }
        let mut name = format!("{} {}", self.method, self.kind);
        if !self.subresource.is_empty() {
            attributes.push(Attribute::new(
                "k8s.resource.subresource",
                self.subresource.to_owned(),
            ));
            name = format!("{name}/{}", self.subresource);
        }
        record(Span {
            context: step.child(),
            parent: Some(step.span_id),
            name: name.into(),
            kind: Kind::Client,
            start,
            end: SystemTime::now(),
            attributes,
            error,
        });
    }
}

fn span_data(span: Span, scope: &InstrumentationScope) -> SpanData {
    let Span {
        context,
        parent,
        name,
        kind,
        start,
        end,
        attributes,
        error,
    } = span;
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(context.trace_id),
            SpanId::from_bytes(context.span_id),
            TraceFlags::new(context.flags),
            false,
            TraceState::NONE,
        ),
        parent_span_id: parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: parent.is_some(),
        span_kind: kind,
        name,
        start_time: start,
        end_time: end.max(start),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: match error {
            Some(description) => Status::error(description),
            None => Status::Unset,
        },
        instrumentation_scope: scope.clone(),
    }
}

/// Starts span export for `service` as the environment says ([`SpanConfig::from_env`]); the
/// sampling ratio applies to the traces this process begins from now on. A bad variable is an
/// error to exit 64 on; an exporter that cannot be built (a bad endpoint URL) too.
pub fn init_spans(service: &'static str) -> Result<SpanConfig, String> {
    let config =
        SpanConfig::from_env(|name| std::env::var(name).ok()).map_err(|bad| bad.to_string())?;
    crate::trace::set_sampling_ratio(config.ratio);
    if config.export {
        start_export(service, None)?;
    }
    Ok(config)
}

/// Starts span export for `service` to `endpoint` (an OTLP/HTTP base URL; spans go to
/// `<endpoint>/v1/traces`), whatever the environment says: for tests.
pub fn init_spans_to(service: &'static str, endpoint: &str) -> Result<(), String> {
    start_export(
        service,
        Some(format!("{}/v1/traces", endpoint.trim_end_matches('/'))),
    )
}

fn start_export(service: &'static str, endpoint: Option<String>) -> Result<(), String> {
    // The exporter's HTTP client speaks TLS with the process's provider, ring, as kube does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = opentelemetry_otlp::SpanExporter::builder().with_http();
    let builder = match endpoint {
        Some(endpoint) => {
            use opentelemetry_otlp::WithExportConfig as _;
            builder.with_endpoint(endpoint)
        }
        None => builder,
    };
    let exporter = builder
        .build()
        .map_err(|error| format!("OTLP span exporter: {error}"))?;
    let mut processor = BatchSpanProcessor::builder(Counted(exporter)).build();
    let mut resource = Resource::builder();
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    if !named {
        resource = resource.with_service_name(format!("sluice-{service}"));
    }
    processor.set_resource(&resource.build());
    let scope = InstrumentationScope::builder("sluice")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let _ = EXPORT.set(Export { processor, scope });
    Ok(())
}

/// Sends the spans queued so far, waiting for the receiver (the batch processor otherwise sends
/// every few seconds): for tests. Blocks.
pub fn flush_spans() {
    if let Some(export) = EXPORT.get() {
        if let Err(error) = export.processor.force_flush() {
            tracing::warn!(error = %error, "spans not sent");
        }
    }
}

/// Sends the spans still queued, waiting at most a few seconds: at the service's end.
pub fn shutdown_spans() {
    if let Some(export) = EXPORT.get() {
        if let Err(error) = export.processor.shutdown_with_timeout(SHUTDOWN_FLUSH) {
            tracing::warn!(error = %error, "spans not sent at shutdown");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<SpanConfig, BadSpanConfig> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        SpanConfig::from_env(|name| vars.get(name).cloned())
    }

    #[test]
    fn the_variables_read_are_the_listed_ones() {
        let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let everything = |name: &str| {
            asked.borrow_mut().insert(name.to_owned());
            // A value that makes every branch read on: the sampler asks for its argument.
            match name {
                "OTEL_TRACES_SAMPLER" => Some("traceidratio".to_owned()),
                "OTEL_TRACES_SAMPLER_ARG" => Some("0.5".to_owned()),
                "OTEL_TRACES_EXPORTER" => Some("otlp".to_owned()),
                _ => None,
            }
        };
        SpanConfig::from_env(everything).unwrap();
        let listed: std::collections::BTreeSet<String> =
            ENV_VARS.iter().map(|name| (*name).to_owned()).collect();
        assert_eq!(*asked.borrow(), listed);
    }

    #[test]
    fn spans_are_exported_when_an_endpoint_or_the_exporter_says_so() {
        assert!(!config(&[]).unwrap().export);
        assert!(
            config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")])
                .unwrap()
                .export
        );
        assert!(
            config(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces"
            )])
            .unwrap()
            .export
        );
        assert!(config(&[("OTEL_TRACES_EXPORTER", "otlp")]).unwrap().export);
        assert!(
            !config(&[
                ("OTEL_TRACES_EXPORTER", "none"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
            ])
            .unwrap()
            .export
        );
        assert!(
            !config(&[
                ("OTEL_SDK_DISABLED", "TRUE"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
            ])
            .unwrap()
            .export
        );
        assert!(
            config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap()
                == SpanConfig {
                    export: false,
                    ratio: 1.0
                }
        );
    }

    #[test]
    fn a_value_sluice_cannot_follow_names_the_variable() {
        let error = config(&[("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err();
        assert_eq!(error.var, "OTEL_TRACES_EXPORTER");
        assert!(
            error
                .to_string()
                .starts_with("OTEL_TRACES_EXPORTER=\"zipkin\": "),
            "{error}"
        );
        let error = config(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err();
        assert_eq!(error.var, "OTEL_EXPORTER_OTLP_PROTOCOL");
        // the traces' own protocol comes first
        assert!(config(&[
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        ])
        .is_ok());
        let error = config(&[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
        ])
        .unwrap_err();
        assert_eq!(error.var, "OTEL_TRACES_SAMPLER_ARG");
        assert_eq!(
            config(&[("OTEL_TRACES_SAMPLER", "jaeger_remote")])
                .unwrap_err()
                .var,
            "OTEL_TRACES_SAMPLER"
        );
    }

    #[test]
    fn the_sampler_sets_the_share_of_new_traces() {
        let ratio = |vars: &[(&str, &str)]| config(vars).unwrap().ratio;
        assert_eq!(ratio(&[]), 1.0);
        assert_eq!(
            ratio(&[("OTEL_TRACES_SAMPLER", "parentbased_always_off")]),
            0.0
        );
        assert_eq!(
            ratio(&[
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25")
            ]),
            0.25
        );
        assert_eq!(ratio(&[("OTEL_TRACES_SAMPLER", "traceidratio")]), 1.0);
    }

    #[test]
    fn a_ratio_samples_about_its_share_of_uuidv7_trace_ids() {
        let ids: Vec<[u8; 16]> = (0..20_000)
            .map(|_| *uuid::Uuid::now_v7().as_bytes())
            .collect();
        let share = |ratio: f64| ids.iter().filter(|id| sampled(id, ratio)).count();
        assert_eq!(share(1.0), ids.len());
        assert_eq!(share(0.0), 0);
        let quarter = share(0.25) as f64 / ids.len() as f64;
        assert!((0.22..0.28).contains(&quarter), "{quarter}");
    }

    #[test]
    fn a_span_keeps_the_ids_its_trace_context_carries() {
        let context = TraceContext::new_root();
        let parent = [7; 8];
        let start = SystemTime::now();
        let data = span_data(
            Span {
                context,
                parent: Some(parent),
                name: "process SLUICE_MATCH".into(),
                kind: SpanKind::Consumer,
                start,
                end: start - Duration::from_millis(1),
                attributes: vec![KeyValue::new("messaging.system", "nats")],
                error: Some("boom".into()),
            },
            &InstrumentationScope::builder("sluice").build(),
        );
        assert_eq!(data.span_context.trace_id().to_bytes(), context.trace_id);
        assert_eq!(data.span_context.span_id().to_bytes(), context.span_id);
        assert!(data.span_context.is_sampled());
        assert_eq!(data.parent_span_id.to_bytes(), parent);
        assert!(data.parent_span_is_remote);
        // an end before the start (a clock step) is not exported as a negative duration
        assert_eq!(data.end_time, start);
        assert_eq!(data.status, Status::error("boom"));
    }
}
