//! The NATS JetStream adapter of sluice: the message topology ([`topology`]) and who may use
//! it ([`permissions`]), the connection with its identity, TLS and streams ([`Bus`],
//! [`BusOptions`]), state replay and durable consumption ([`feed`]), the in-order ack window
//! that keeps publish acks in flight ([`window`]), the coalescing of level-based inputs a stage
//! has fallen behind on ([`coalesce`]), and the one stage runner that drives every consuming
//! stage with them ([`runner`]).
//! It knows nothing of Kubernetes or of what the messages mean.

pub mod coalesce;
pub mod feed;
pub mod gather;
pub mod lease;
pub mod partition;
pub mod permissions;
pub mod runner;
pub mod topology;
pub mod transit;
pub mod turns;
pub mod window;

mod bus;
mod error;
mod options;

pub use bus::{content_id, hex16, message_id, Bus, Outgoing};
pub use error::{Error, Result};
pub use feed::{Delivered, Freshness, LiveFeed};
pub use options::{server_addrs, BusOptions};
pub use partition::Partition;
pub use window::AckWindow;

/// The ack of one publish; keep many in flight and await them later.
pub use async_nats::jetstream::context::PublishAckFuture;
/// A message delivered by a durable consumer, with its ack handle.
pub use async_nats::jetstream::Message;
/// The messages of a durable consumer ([`Bus::durable`]).
pub type PullStream = async_nats::jetstream::consumer::pull::Stream;
