//! The connection to NATS with the pipeline's streams set up.

use std::time::Duration;

use async_nats::header::HeaderMap;
use async_nats::jetstream::{self, context::PublishAckFuture, stream};
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::topology::{self, StreamSpec, ALL_STREAMS};

/// How long [`Bus::close`] waits for the server before it just drops the connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected bus. Cheap to clone.
#[derive(Clone)]
pub struct Bus {
    client: async_nats::Client,
    js: jetstream::Context,
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
}

impl Bus {
    /// Connects and makes sure every stream of the topology exists with its configuration.
    pub async fn connect(url: &str) -> Result<Bus> {
        let client = async_nats::ConnectOptions::new()
            .name("sluice")
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|source| Error::Connect {
                url: url.to_string(),
                source,
            })?;
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(10))
            // async-nats holds a permit per unresolved publish ack and, once they run out, makes
            // `publish` wait for one: a task that holds acks while it publishes more would wait
            // for itself. The bounds are ours instead (`AckWindow`'s ack budget, the watcher's
            // chunks), so this one is never what stops a publish.
            .max_ack_inflight(1 << 24)
            .build(client.clone());
        let bus = Bus { client, js };
        for spec in ALL_STREAMS {
            bus.ensure_stream(spec).await?;
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
    /// not acked are redelivered after the ack wait as always.
    pub async fn close(self) {
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

    /// The most payload one message may carry: the server's `max_payload` less room for the
    /// headers a stage sends (message id, trace context). A stage that would publish more
    /// publishes a failure for that key instead: nothing it produces may stop it.
    pub fn payload_limit(&self) -> usize {
        self.client
            .server_info()
            .max_payload
            .saturating_sub(topology::HEADER_ROOM)
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    async fn ensure_stream(&self, spec: StreamSpec) -> Result<stream::Stream> {
        let config = stream_config(spec);
        self.js
            .create_or_update_stream(config)
            .await
            .map_err(|source| Error::Stream {
                stream: spec.name.to_string(),
                source: Box::new(source),
            })?;
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

    /// Sends one message and returns the future of its ack, so that callers keep many in flight.
    pub async fn publish(&self, out: Outgoing) -> Result<PublishAckFuture> {
        self.send(out, None).await
    }

    /// As [`Bus::publish`], for a message its stream forgets after `ttl` (a tombstone; the
    /// stream must allow message TTLs, [`StreamSpec::message_ttl`]).
    pub async fn publish_expiring(&self, out: Outgoing, ttl: Duration) -> Result<PublishAckFuture> {
        self.send(out, Some(ttl)).await
    }

    async fn send(&self, out: Outgoing, ttl: Option<Duration>) -> Result<PublishAckFuture> {
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
        self.js
            .publish_with_headers(subject.clone(), headers, payload)
            .await
            .map_err(|source| Error::Publish {
                subject,
                source: Box::new(source),
            })
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

    /// Publishes and waits until the stream has stored the message.
    pub async fn publish_durably(&self, out: Outgoing) -> Result<()> {
        let subject = out.subject.clone();
        self.publish(out)
            .await?
            .await
            .map_err(|source| Error::Publish {
                subject,
                source: Box::new(source),
            })?;
        Ok(())
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

fn stream_config(spec: StreamSpec) -> stream::Config {
    stream::Config {
        name: spec.name.to_string(),
        subjects: vec![spec.subjects.to_string()],
        max_messages_per_subject: spec.max_per_subject.unwrap_or(-1),
        max_age: spec.max_age.unwrap_or_default(),
        storage: stream::StorageType::File,
        duplicate_window: topology::DEDUPE_WINDOW,
        allow_direct: true,
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
