//! Structured logging: one global tracing subscriber writing text or JSON lines to stderr.
//!
//! No exporter is installed; trace ids travel in `traceparent` headers and are logged as fields.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LOG_FILTER_ENV};
use crate::error::{Error, Result};

/// Installs the global subscriber: filter from `RUST_LOG` (default `info`), output to stderr in
/// `format`, then logs the service name and version. Fails with [`Error::InvalidLogFilter`] (a
/// configuration error: exit 64) when `RUST_LOG` does not parse, and with
/// [`Error::TelemetryInit`] if a subscriber is already installed.
pub fn init_telemetry(service: &'static str, format: LogFormat) -> Result<()> {
    let filter = match std::env::var(LOG_FILTER_ENV) {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
            .map_err(|source| Error::InvalidLogFilter {
                directives: directives.clone(),
                source,
            })?,
        _ => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // colours only on a terminal: log files and `kubectl logs` get plain text
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    installed.map_err(|source| Error::TelemetryInit { source })?;
    tracing::info!(
        service,
        version = env!("CARGO_PKG_VERSION"),
        "telemetry initialised"
    );
    Ok(())
}

/// An error with its whole chain of sources, `outer: inner: innermost`: how an error is
/// rendered where it is reported (a log line, a status field, a dead letter's reason).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
