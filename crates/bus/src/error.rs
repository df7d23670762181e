//! Errors of the bus adapter.

/// What went wrong talking to NATS. Every variant is transient from a stage's point of view:
/// the input is not acked and will be delivered again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to connect to nats at {url}")]
    Connect {
        url: String,
        #[source]
        source: async_nats::ConnectError,
    },
    #[error("failed to read the nats credentials in {path}")]
    Credentials {
        path: std::path::PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("nats refused identity {identity} to publish to {subject}: {reason}")]
    Refused {
        identity: &'static str,
        subject: String,
        reason: String,
    },
    #[error("failed to set up stream {stream}")]
    Stream {
        stream: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to set up consumer {consumer} on {stream}")]
    Consumer {
        stream: String,
        consumer: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to publish to {subject}")]
    Publish {
        subject: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to read from {stream}")]
    Read {
        stream: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to acknowledge a message")]
    Ack {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A publish refused by the process's fence ([`sluice_runtime::Fence`]): its lease is
    /// lost, and another process may be doing its work.
    #[error("failed to publish to {subject}")]
    Fenced {
        subject: String,
        #[source]
        source: sluice_runtime::Fenced,
    },
    #[error("{what} ended")]
    Ended { what: String },
    #[error("consumer {consumer} acks cover earlier deliveries, so an input to retry stops the stage: {reason}")]
    Uncovered { consumer: String, reason: String },
    #[error("consumer {consumer} stopped: its stage's state can no longer be trusted: {reason}")]
    Stopped { consumer: String, reason: String },
}

impl Error {
    /// Whether a publish was refused for its size: the server never takes it, however often
    /// it is sent.
    pub fn is_too_large(&self) -> bool {
        use async_nats::jetstream::context::{PublishError, PublishErrorKind};
        matches!(self, Error::Publish { source, .. }
            if source.downcast_ref::<PublishError>()
                .is_some_and(|e| e.kind() == PublishErrorKind::MaxPayloadExceeded))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
