//! Errors of the process kit: startup failures only; none of them concern a message.

use std::net::SocketAddr;
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid nats url {url}: expected nats://, tls://, ws:// or wss://")]
    InvalidNatsUrl { url: String },
    #[error("kubeconfig {path} does not exist")]
    MissingKubeconfig { path: PathBuf },
    #[error("invalid stream replicas {replicas}: expected 1 to 5")]
    InvalidStreamReplicas { replicas: usize },
    #[error("invalid worker threads {threads}: expected 1 to 256")]
    InvalidWorkerThreads { threads: usize },
    #[error("incomplete nats client certificate: set both the certificate and the key file")]
    IncompleteClientCertificate,
    #[error("invalid --leader-elect-* timing: {reason}")]
    InvalidLeaseTiming { reason: String },
    #[error("invalid sveltos namespace {namespace:?}: expected a DNS label")]
    InvalidNamespace { namespace: String },
    #[error("invalid RUST_LOG filter {directives:?}")]
    InvalidLogFilter {
        directives: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("failed to install the tracing subscriber")]
    TelemetryInit {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to listen for signal {signal}")]
    SignalHandler {
        signal: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to bind the health endpoint on {addr}")]
    BindHealth {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}
