//! The connection to NATS with the pipeline's streams set up.

use std::time::Duration;

use async_nats::header::HeaderMap;
use async_nats::jetstream::{self, context::PublishAckFuture, stream};
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::options::{BusOptions, Refusals};
use crate::topology::{self, StreamSpec, ALL_STREAMS};

/// How long [`Bus::close`] waits for the server before it just drops the connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected bus. Cheap to clone.
#[derive(Clone)]
pub struct Bus {
    client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    /// How many times the connection was lost: a publish ack still pending when it changes
    /// will never come (the server may have died with the message), so it is retried at once
    /// instead of after the ack timeout.
    disconnects: tokio::sync::watch::Receiver<u64>,
    /// The identity this connection acts as, for errors and logs.
    identity: &'static str,
    refusals: Refusals,
    /// How long a stage's batch may wait for more inputs ([`crate::gather`]).
    linger: crate::gather::Linger,
    /// The service's lease while this process holds it ([`Bus::hold_lease`]), released by
    /// [`Bus::close`].
    lease: std::sync::Arc<std::sync::Mutex<Option<crate::lease::Leadership>>>,
    /// What every publish asks first: whether the process may still act as its lease's holder
    /// (open without a lease).
    fence: sluice_runtime::Fence,
    /// Replays reading at once ([`topology::REPLAYS_AT_ONCE`]).
    replays: std::sync::Arc<tokio::sync::Semaphore>,
    /// The newest output in flight per subject of a last-value stream ([`crate::turns`]).
    turns: std::sync::Arc<crate::turns::Turns>,
}

/// One message a stage wants published.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing {
    pub subject: String,
    /// Deterministic: derived from the input, so a redelivered input publishes a duplicate that
    /// JetStream drops.
    pub msg_id: String,
    pub payload: Bytes,
    pub traceparent: Option<String>,
    /// How long the stream keeps it (`Nats-TTL`, a tombstone), on streams that allow it;
    /// `None` for as long as the stream's own limits say. Kept when the output is published
    /// again after a lost connection.
    pub ttl: Option<Duration>,
}

impl Bus {
    /// Connects and makes sure the streams it uses exist with their configuration: those of its
    /// identity ([`topology::Identity::streams`]), or every stream of the topology for a client
    /// without one. A URL alone connects anonymously and in plain text.
    pub async fn connect(options: impl Into<BusOptions>) -> Result<Bus> {
        let options = options.into();
        let refusals = Refusals::default();
        let (lost, disconnects) = tokio::sync::watch::channel(0u64);
        let client = options.connect_client_with(refusals.clone(), lost).await?;
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(10))
            // async-nats holds a permit per unresolved publish ack and, once they run out, makes
            // `publish` wait for one: a task that holds acks while it publishes more would wait
            // for itself. The bounds are ours instead (`AckWindow`'s ack budget, the watcher's
            // chunks), so this one is never what stops a publish.
            .max_ack_inflight(1 << 24)
            .build(client.clone());
        let bus = Bus {
            client,
            js,
            disconnects,
            identity: options.identity_name(),
            refusals,
            linger: options.linger,
            lease: Default::default(),
            fence: sluice_runtime::Fence::open(),
            replays: std::sync::Arc::new(tokio::sync::Semaphore::new(topology::REPLAYS_AT_ONCE)),
            turns: Default::default(),
        };
        let streams = options
            .identity
            .map_or_else(|| ALL_STREAMS.to_vec(), |identity| identity.streams());
        for spec in streams {
            bus.ensure_stream(spec, options.stream_replicas).await?;
        }
        Ok(bus)
    }

    /// Closes the connection so that nothing is left behind on the server: the pull requests of
    /// dropped consumers stop taking messages before this returns. Dropping a `Bus` closes the
    /// connection too, but the server may notice only later and meanwhile hand a new message to
    /// a pull request nobody reads, which holds it until the consumer's ack wait runs out; a
    /// stage restarted in the same process (tests, `sluice demo`) would wait that long.
    ///
    /// Call it once the stage's consumers are dropped; messages already delivered to them and
    /// not acked are delivered again when the next process binds the consumer
    /// ([`Bus::durable`] resets its delivery state), or after the ack wait.
    ///
    /// A lease the connection holds ([`Bus::hold_lease`]) is released first, so that a standby
    /// takes over once this process has finished its work.
    pub async fn close(self) {
        let lease = self.lease.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(lease) = lease {
            lease.release().await;
        }
        // A flush is answered once the server has read everything sent before it, the
        // unsubscriptions of dropped consumers included; a drain then unsubscribes whatever
        // is still subscribed and closes the connection.
        let closing = async {
            if let Err(error) = self.client.flush().await {
                tracing::debug!(error = %error, "flush before closing failed");
            }
            if let Err(error) = self.client.drain().await {
                tracing::debug!(error = %error, "drain failed");
                return;
            }
            // Commands fail once the connection is closed: this flush returns then.
            while self.client.flush().await.is_ok() {}
        };
        if tokio::time::timeout(CLOSE_TIMEOUT, closing).await.is_err() {
            tracing::warn!(timeout = ?CLOSE_TIMEOUT, "NATS connection not closed in time, dropping it");
        }
    }

    /// A turn to replay a stream: at most [`topology::REPLAYS_AT_ONCE`] at once per connection.
    pub(crate) async fn replay_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // The semaphore is never closed: `None` cannot happen, and would only mean no bound.
        self.replays.acquire().await.ok()
    }

    /// Keeps `leadership` until [`Bus::close`] releases it.
    pub fn hold_lease(&self, leadership: crate::lease::Leadership) {
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = Some(leadership);
    }

    /// The process's fence: a lease this connection takes moves its deadline, and every publish
    /// and every Kubernetes write of the process asks it first ([`sluice_runtime::fence`]).
    pub fn fence(&self) -> &sluice_runtime::Fence {
        &self.fence
    }

    /// Refuses a publish to `subject` once the process's lease is lost.
    fn fenced(&self, subject: &str) -> Result<()> {
        self.fence.check().map_err(|source| Error::Fenced {
            subject: subject.to_string(),
            source,
        })
    }

    /// The name of the identity this connection acts as (its dead-letter stage).
    pub fn identity(&self) -> &'static str {
        self.identity
    }

    /// How long a stage's batch of inputs may wait for more ([`crate::gather`]).
    pub fn linger(&self) -> crate::gather::Linger {
        self.linger
    }

    /// The most payload one message may carry: the server's `max_payload` less room for the
    /// headers a stage sends (message id, trace context). A stage that would publish more
    /// publishes a failure for that key instead: nothing it produces may stop it.
    pub fn payload_limit(&self) -> usize {
        self.client
            .server_info()
            .max_payload
            .saturating_sub(topology::HEADER_ROOM)
    }

    /// Whether the server this connection reached is a node of a JetStream cluster (its INFO
    /// names one): there, a request nobody answers may be answered once a leader is elected.
    pub fn is_clustered(&self) -> bool {
        self.client.server_info().cluster.is_some()
    }

    /// Counts lost connections, seen as of now: it changes at the next drop of the connection,
    /// so that whoever awaits the acks of publishes made after this call knows when they are
    /// lost. Take it before publishing.
    pub fn disconnects(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut disconnects = self.disconnects.clone();
        disconnects.borrow_and_update();
        disconnects
    }

    /// Whether the connection to the server is up now (async-nats reconnects by itself); a
    /// service's readiness requires it.
    pub fn is_connected(&self) -> bool {
        self.connection_probe()()
    }

    /// [`Bus::is_connected`] as a probe for a service's readiness (`Health::require`).
    pub fn connection_probe(&self) -> impl Fn() -> bool + Send + Sync + 'static {
        let client = self.client.clone();
        move || client.connection_state() == async_nats::connection::State::Connected
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// Creates or updates `spec`'s stream. On a JetStream cluster a request can go unanswered
    /// or be refused for a while (no meta leader yet, several services creating the same
    /// stream at once, a node lost): such a setup is tried again, with a growing pause, until
    /// [`STREAM_SETUP_DEADLINE`]; any other refusal ends it at once.
    async fn ensure_stream(&self, spec: StreamSpec, replicas: usize) -> Result<stream::Stream> {
        let config = stream_config(spec, replicas);
        // A request left unanswered is sent again soon rather than waited for at length.
        let js = jetstream::ContextBuilder::new()
            .timeout(STREAM_SETUP_TIMEOUT)
            .build(self.client.clone());
        let began = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(250);
        loop {
            let error = match js.create_or_update_stream(config.clone()).await {
                Ok(_) => break,
                Err(error) => error,
            };
            if !setup_may_succeed_later(error.kind()) || began.elapsed() >= STREAM_SETUP_DEADLINE {
                return Err(Error::Stream {
                    stream: spec.name.to_string(),
                    source: Box::new(error),
                });
            }
            tracing::warn!(stream = spec.name, error = %error, retry_in = ?pause, "stream setup not answered or refused for now: trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        self.js
            .get_stream(spec.name)
            .await
            .map_err(|source| Error::Stream {
                stream: spec.name.to_string(),
                source: Box::new(source),
            })
    }

    pub(crate) async fn stream(&self, spec: StreamSpec) -> Result<stream::Stream> {
        self.js
            .get_stream(spec.name)
            .await
            .map_err(|source| Error::Stream {
                stream: spec.name.to_string(),
                source: Box::new(source),
            })
    }

    /// The turn of an output about to be published on `subject` for the first time: it
    /// supersedes every output in flight on the subject (of a last-value stream), which is then
    /// never published again ([`crate::turns`]). Held until the output is settled.
    pub fn turn(&self, subject: &str) -> crate::turns::Turn {
        self.turns.take(subject)
    }

    /// Sends one message and returns the future of its ack, so that callers keep many in flight.
    pub async fn publish(&self, out: Outgoing) -> Result<PublishAckFuture> {
        let ttl = out.ttl;
        self.send(out, ttl).await
    }

    /// As [`Bus::publish`], for a message its stream forgets after `ttl` (a tombstone; the
    /// stream must allow message TTLs, [`StreamSpec::message_ttl`]).
    pub async fn publish_expiring(&self, out: Outgoing, ttl: Duration) -> Result<PublishAckFuture> {
        self.send(out, Some(ttl)).await
    }

    async fn send(&self, out: Outgoing, ttl: Option<Duration>) -> Result<PublishAckFuture> {
        self.fenced(&out.subject)?;
        let mut headers = HeaderMap::new();
        if let Some(trace) = &out.traceparent {
            headers.insert(topology::TRACEPARENT, trace.as_str());
        }
        // `headers` replaces the whole map, so it goes first: the message id is one more header.
        let mut publish = jetstream::message::PublishMessage::build()
            .payload(out.payload)
            .headers(headers)
            .message_id(&out.msg_id);
        if let Some(ttl) = ttl {
            publish = publish.ttl(ttl);
        }
        self.js
            .send_publish(out.subject.clone(), publish)
            .await
            .map_err(|source| Error::Publish {
                subject: out.subject,
                source: Box::new(source),
            })
    }

    /// Parks a message a stage can never process on `sluice.v1.dead.<stage>`, with the reason
    /// and where it came from in headers (`Sluice-Error`, `Sluice-Subject`, and any `extra`).
    /// Returns the publish ack, so the input is acked only once the dead letter is stored.
    pub async fn dead_letter(
        &self,
        stage: &str,
        origin_subject: &str,
        payload: bytes::Bytes,
        reason: &str,
        extra: &[(&str, &str)],
    ) -> Result<PublishAckFuture> {
        let mut headers = HeaderMap::new();
        headers.insert(topology::ERROR_HEADER, reason);
        headers.insert(topology::ORIGIN_SUBJECT_HEADER, origin_subject);
        for (name, value) in extra {
            headers.insert(*name, *value);
        }
        let subject = topology::dead_subject(stage);
        self.fenced(&subject)?;
        self.js
            .publish_with_headers(subject.clone(), headers, payload)
            .await
            .map_err(|source| Error::Publish {
                subject,
                source: Box::new(source),
            })
    }

    /// The last dead letter of `stage`, as `(payload, reason, origin subject)` (for `sluice
    /// tap`-like tools and tests); `None` when it has none.
    pub async fn last_dead_letter(&self, stage: &str) -> Option<(Bytes, String, String)> {
        let stream = self.stream(topology::DEAD).await.ok()?;
        let letter = stream
            .get_last_raw_message_by_subject(&topology::dead_subject(stage))
            .await
            .ok()?;
        let header = |name: &str| {
            letter
                .headers
                .get(name)
                .map(|value| value.as_str().to_string())
                .unwrap_or_default()
        };
        let reason = header(topology::ERROR_HEADER);
        let origin = header(topology::ORIGIN_SUBJECT_HEADER);
        Some((letter.payload, reason, origin))
    }

    /// Dead-letters an unreadable input ([`Bus::dead_letter`], logged with the reason) and
    /// registers it in `window`, which acks it once the dead letter is stored.
    pub async fn park(
        &self,
        stage: &str,
        delivered: &crate::Delivered,
        input: async_nats::jetstream::Message,
        reason: &str,
        window: &mut crate::AckWindow,
    ) -> Result<()> {
        tracing::warn!(stage, subject = %delivered.subject, error = %reason, "dead-lettering unreadable input");
        let payload = delivered.payload.clone();
        let parked = self
            .dead_letter(stage, &delivered.subject, payload, reason, &[])
            .await?;
        window.push(vec![parked], Some(input));
        Ok(())
    }

    /// Publishes and waits until the stream has stored the message. A publish the server
    /// refused for this identity's permissions fails as [`Error::Refused`], naming both.
    pub async fn publish_durably(&self, out: Outgoing) -> Result<()> {
        let subject = out.subject.clone();
        let stored = self.publish(out).await?.await;
        if let Err(source) = stored {
            return Err(self.refused(&subject).unwrap_or(Error::Publish {
                subject,
                source: Box::new(source),
            }));
        }
        Ok(())
    }

    /// [`Bus::publish_expiring`], waiting until the stream has stored the message (as
    /// [`Bus::publish_durably`]).
    pub async fn publish_expiring_durably(&self, out: Outgoing, ttl: Duration) -> Result<()> {
        let subject = out.subject.clone();
        let stored = self.publish_expiring(out, ttl).await?.await;
        if let Err(source) = stored {
            return Err(self.refused(&subject).unwrap_or(Error::Publish {
                subject,
                source: Box::new(source),
            }));
        }
        Ok(())
    }

    /// The server's refusal of a publish to `subject` by this connection, if it sent one.
    pub(crate) fn refused(&self, subject: &str) -> Option<Error> {
        let refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        let quoted = format!("\"{subject}\"");
        let reason = refusals
            .iter()
            .rev()
            .find(|reason| reason.contains(&quoted))?;
        Some(Error::Refused {
            identity: self.identity,
            subject: subject.to_string(),
            reason: reason.clone(),
        })
    }

    /// Deletes every message on subjects matching `filter` (used to forget a removed cluster).
    pub async fn purge(&self, spec: StreamSpec, filter: &str) -> Result<u64> {
        let stream = self.stream(spec).await?;
        let response = stream
            .purge()
            .filter(filter)
            .await
            .map_err(|source| Error::Stream {
                stream: spec.name.to_string(),
                source: Box::new(source),
            })?;
        Ok(response.purged)
    }
}

/// How long a service tries to set up a stream before it gives up (and, deployed, restarts).
pub const STREAM_SETUP_DEADLINE: Duration = Duration::from_secs(60);

/// How long one request to set up a stream is waited for. A JetStream cluster leaves some
/// unanswered (two clients creating one stream at once: one of them hears nothing), and the
/// request is idempotent.
const STREAM_SETUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether a stream's setup that failed so may succeed when tried again: a request unanswered,
/// JetStream unavailable or its cluster without a leader for now, or a stream of the name being
/// created by another client at the same moment (tried again, it is updated).
fn setup_may_succeed_later(kind: jetstream::context::CreateStreamErrorKind) -> bool {
    use jetstream::context::CreateStreamErrorKind as Kind;
    use jetstream::ErrorCode;
    match kind {
        Kind::TimedOut | Kind::JetStreamUnavailable => true,
        Kind::JetStream(error) => [
            ErrorCode::CLUSTER_NOT_AVAILABLE,
            ErrorCode::CLUSTER_NOT_LEADER,
            ErrorCode::CLUSTER_NOT_ACTIVE,
            ErrorCode::CLUSTER_NOT_ASSIGNED,
            ErrorCode::STREAM_NAME_EXIST,
        ]
        .contains(&error.error_code()),
        _ => false,
    }
}

fn stream_config(spec: StreamSpec, replicas: usize) -> stream::Config {
    stream::Config {
        num_replicas: replicas,
        name: spec.name.to_string(),
        subjects: vec![spec.subjects.to_string()],
        max_messages_per_subject: spec.max_per_subject.unwrap_or(-1),
        max_age: spec.max_age.unwrap_or_default(),
        storage: stream::StorageType::File,
        duplicate_window: topology::DEDUPE_WINDOW,
        allow_direct: true,
        // Only messages that carry a `Nats-TTL` expire by it (`Bus::publish_expiring`).
        allow_message_ttl: spec.message_ttl,
        ..Default::default()
    }
}

/// A message id derived from the parts that identify an input and the output it caused.
pub fn message_id(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hex16(&hasher.finalize())
}

/// An id of some bytes' content (a payload, a serialised object), the same for the same bytes.
pub fn content_id(bytes: &[u8]) -> String {
    hex16(&Sha256::digest(bytes))
}

/// The first 16 bytes of a digest in lower-case hex: the content id of bytes whose SHA-256 a
/// stage already holds (`content_id(bytes) == hex16(&Sha256::digest(bytes))`).
pub fn hex16(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(32);
    for byte in digest.iter().take(16) {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ids_are_the_first_half_of_the_sha256_in_hex() {
        // FIPS 180-2's "abc" vector.
        assert_eq!(content_id(b"abc"), "ba7816bf8f01cfea414140de5dae2223");
        assert_eq!(message_id(&["abc"]), content_id(b"abc\0"));
    }
}
