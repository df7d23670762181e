//! One managed cluster's NATS, as its `sveltos-nats` Secret describes it: connects with the
//! Secret's credentials, subscribes each core subject once, consumes each JetStream stream with
//! a durable consumer, and forwards every CloudEvent to the bus. A JetStream message is acked
//! only after its `CloudEventReceived` is stored, and nacked when that fails. Connection errors
//! are retried with backoff; nothing here reaches another cluster.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, AckKind};
use futures::stream::{self, BoxStream, StreamExt};
use sluice_bus::window::Settled;
use sluice_bus::{topology, AckWindow, Bus, PublishAckFuture};
use sluice_domain::cluster::ClusterId;
use sluice_domain::natsconfig::{Authorization, JetStreamConnection, NatsConnection, NatsSettings};
use sluice_runtime::Counter;
use tempfile::TempDir;

use super::forward::{self, Delivery};

/// How long the managed NATS waits for an ack before redelivering a JetStream message. Longer
/// than a bus publish takes under load; short enough that a crashed watcher's messages come
/// back soon.
pub const ACK_WAIT: Duration = Duration::from_secs(10);

/// Pause after the first failure; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The watcher's CloudEvent counters (shared by every cluster; labels would carry names).
#[derive(Clone, Debug)]
pub struct Counters {
    pub config_errors: Counter,
    pub connect_errors: Counter,
    pub forwarded: Counter,
    pub rejected: Counter,
    pub errors: Counter,
}

/// Why a connection to a managed cluster's NATS is not (yet) usable. Transient: retried.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("failed to write the tls credentials to a temporary file")]
    Credentials(#[source] std::io::Error),
    #[error("failed to connect to {url}")]
    Connect {
        url: String,
        #[source]
        source: async_nats::ConnectError,
    },
    #[error("failed to subscribe to {subject}")]
    Subscribe {
        subject: String,
        #[source]
        source: async_nats::SubscribeError,
    },
    #[error("failed to open jetstream stream {stream}")]
    Stream {
        stream: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Serves both sections of the settings until the task is aborted (a changed Secret).
pub async fn run(bus: Bus, counters: Counters, cluster: ClusterId, settings: NatsSettings) {
    let core = async {
        if let Some(nats) = &settings.nats {
            serve_core(&bus, &counters, &cluster, nats).await;
        }
    };
    let jetstream = async {
        if let Some(js) = &settings.jetstream {
            serve_jetstream(&bus, &counters, &cluster, js).await;
        }
    };
    tokio::join!(core, jetstream);
}

/// The durable consumer sluice owns in a managed cluster's streams.
pub fn consumer_name(cluster: &ClusterId) -> String {
    format!(
        "sluice-{}",
        topology::encode_token(&sluice_wire::cluster_tokens(cluster))
    )
}

/// One message from the managed cluster.
enum Incoming {
    Core(async_nats::Message),
    Stream(Box<jetstream::Message>),
    /// The JetStream pull failed for a moment (missed heartbeat, reconnect); it goes on.
    Failed(String),
}

async fn serve_core(bus: &Bus, counters: &Counters, cluster: &ClusterId, nats: &NatsConnection) {
    if nats.subjects.is_empty() {
        tracing::info!(cluster = %cluster, url = %nats.url, "no nats subjects configured");
        return;
    }
    let mut backoff = Backoff::default();
    loop {
        let result = async {
            let (client, files) = connect(&nats.url, &nats.authorization).await?;
            let mut subscriptions = Vec::with_capacity(nats.subjects.len());
            for subject in &nats.subjects {
                let subscription = client.subscribe(subject.clone()).await.map_err(|source| {
                    ListenError::Subscribe {
                        subject: subject.clone(),
                        source,
                    }
                })?;
                subscriptions.push(subscription.map(Incoming::Core).boxed());
            }
            tracing::info!(cluster = %cluster, url = %nats.url, subjects = ?nats.subjects, "subscribed to nats");
            Ok::<_, ListenError>((client, files, stream::select_all(subscriptions)))
        }
        .await;
        match result {
            Ok((_client, _files, incoming)) => {
                backoff.reset();
                forward_all(bus, counters, cluster, incoming.boxed()).await;
                tracing::warn!(cluster = %cluster, url = %nats.url, "nats subscriptions ended, reconnecting");
            }
            Err(error) => {
                counters.connect_errors.inc();
                tracing::warn!(cluster = %cluster, url = %nats.url, error = &error as &dyn std::error::Error, "cannot listen to nats");
            }
        }
        tokio::time::sleep(backoff.next()).await;
    }
}

async fn serve_jetstream(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    js: &JetStreamConnection,
) {
    if js.streams.is_empty() {
        tracing::info!(cluster = %cluster, url = %js.url, "no jetstream streams configured");
        return;
    }
    let durable = consumer_name(cluster);
    let mut backoff = Backoff::default();
    loop {
        let result = async {
            let (client, files) = connect(&js.url, &js.authorization).await?;
            let context = jetstream::new(client);
            let mut pulls = Vec::with_capacity(js.streams.len());
            for source in &js.streams {
                let stream_error = |e: Box<dyn std::error::Error + Send + Sync>| ListenError::Stream {
                    stream: source.stream.clone(),
                    source: e,
                };
                let stream = context
                    .get_stream(&source.stream)
                    .await
                    .map_err(|e| stream_error(Box::new(e)))?;
                // Created on first use to start at the first stored message; later runs resume
                // where the acks left it. Updating keeps the filter in step with the Secret.
                let consumer = stream
                    .create_consumer(pull::Config {
                        durable_name: Some(durable.clone()),
                        deliver_policy: jetstream::consumer::DeliverPolicy::All,
                        ack_policy: jetstream::consumer::AckPolicy::Explicit,
                        ack_wait: ACK_WAIT,
                        max_ack_pending: 10_000,
                        filter_subjects: source.subjects.clone(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| stream_error(Box::new(e)))?;
                let messages = consumer
                    .stream()
                    .max_messages_per_batch(256)
                    .heartbeat(Duration::from_secs(5))
                    .expires(Duration::from_secs(30))
                    .messages()
                    .await
                    .map_err(|e| stream_error(Box::new(e)))?;
                let name = source.stream.clone();
                pulls.push(
                    messages
                        .map(move |m| match m {
                            Ok(message) => Incoming::Stream(Box::new(message)),
                            Err(error) => Incoming::Failed(format!("stream {name}: {error}")),
                        })
                        .boxed(),
                );
            }
            let streams: Vec<&str> = js.streams.iter().map(|s| s.stream.as_str()).collect();
            tracing::info!(cluster = %cluster, url = %js.url, ?streams, consumer = %durable, "consuming jetstream");
            Ok::<_, ListenError>((context, files, stream::select_all(pulls)))
        }
        .await;
        match result {
            Ok((_context, _files, incoming)) => {
                backoff.reset();
                forward_all(bus, counters, cluster, incoming.boxed()).await;
                tracing::warn!(cluster = %cluster, url = %js.url, "jetstream consumers ended, reconnecting");
            }
            Err(error) => {
                counters.connect_errors.inc();
                tracing::warn!(cluster = %cluster, url = %js.url, error = &error as &dyn std::error::Error, "cannot consume jetstream");
            }
        }
        tokio::time::sleep(backoff.next()).await;
    }
}

/// Connects with the Secret's credentials. TLS material is written to a private temporary
/// directory (the client reads PEM files), kept as long as the connection lives.
async fn connect(
    url: &str,
    auth: &Authorization,
) -> Result<(async_nats::Client, Option<TempDir>), ListenError> {
    let mut options = async_nats::ConnectOptions::new()
        .name("sluice-watcher")
        .connection_timeout(Duration::from_secs(5));
    if let Some(user) = &auth.user {
        options = options.user_and_password(user.user.clone(), user.password.clone());
    }
    if let Some(token) = &auth.token {
        options = options.token(token.clone());
    }
    let mut files = None;
    if auth.client_cert.is_some() || auth.root_ca.is_some() {
        let dir = tempfile::Builder::new()
            .prefix("sluice-nats-tls-")
            .tempdir()
            .map_err(ListenError::Credentials)?;
        let write = |name: &str, bytes: &[u8]| -> Result<PathBuf, ListenError> {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).map_err(ListenError::Credentials)?;
            Ok(path)
        };
        if let Some(cert) = &auth.client_cert {
            options = options.add_client_certificate(
                write("cert.pem", &cert.cert_pem)?,
                write("key.pem", &cert.key_pem)?,
            );
        }
        if let Some(ca) = &auth.root_ca {
            options = options.add_root_certificates(write("ca.pem", ca)?);
        }
        files = Some(dir);
    }
    let client = options
        .connect(url)
        .await
        .map_err(|source| ListenError::Connect {
            url: url.to_string(),
            source,
        })?;
    Ok((client, files))
}

/// Forwards until the incoming stream ends, keeping bus acks in flight; drains on the way out.
async fn forward_all(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    mut incoming: BoxStream<'static, Incoming>,
) {
    let mut window = AckWindow::new(topology::PUBLISH_WINDOW);
    loop {
        tokio::select! {
            next = incoming.next(), if !window.is_full() => {
                let Some(next) = next else { break };
                forward_one(bus, counters, cluster, next, &mut window).await;
            }
            settled = window.next(), if !window.is_empty() => {
                if let Some(Settled::Retried(error)) = settled {
                    counters.errors.inc();
                    tracing::warn!(cluster = %cluster, error = &error as &dyn std::error::Error, "cloudevent not stored, jetstream will redeliver it");
                }
            }
        }
    }
    if let Err(error) = window.drain().await {
        counters.errors.inc();
        tracing::warn!(cluster = %cluster, error = &error as &dyn std::error::Error, "cloudevent not stored while draining");
    }
}

async fn forward_one(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    incoming: Incoming,
    window: &mut AckWindow,
) {
    match incoming {
        Incoming::Failed(reason) => {
            tracing::debug!(cluster = %cluster, reason = %reason, "jetstream pull interrupted");
        }
        Incoming::Core(message) => {
            let unique = uuid::Uuid::new_v4().to_string();
            let headers = forward::header_pairs(message.headers.as_ref());
            let delivery = Delivery::Core { unique: &unique };
            let out = forward::outgoing(
                cluster,
                &message.subject,
                &headers,
                &message.payload,
                delivery,
            );
            settle(bus, counters, cluster, out, &message, None, window).await;
        }
        Incoming::Stream(input) => {
            let (stream, sequence) = match input.info() {
                Ok(info) => (info.stream.to_string(), info.stream_sequence),
                Err(error) => {
                    // Without metadata it cannot be deduplicated: leave it to be redelivered.
                    counters.errors.inc();
                    tracing::warn!(cluster = %cluster, error = %error, "jetstream message without metadata");
                    return;
                }
            };
            let message = input.message.clone();
            let headers = forward::header_pairs(message.headers.as_ref());
            let delivery = Delivery::Stream {
                stream: &stream,
                sequence,
            };
            let out = forward::outgoing(
                cluster,
                &message.subject,
                &headers,
                &message.payload,
                delivery,
            );
            settle(bus, counters, cluster, out, &message, Some(*input), window).await;
        }
    }
}

/// Publishes (or dead-letters) one parsed message; a JetStream input is acked by the window
/// once that is stored, and nacked at once when the publish cannot even be sent.
async fn settle(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    out: Result<sluice_bus::Outgoing, sluice_domain::cloudevent::CloudEventError>,
    message: &async_nats::Message,
    input: Option<jetstream::Message>,
    window: &mut AckWindow,
) {
    let subject = message.subject.as_str();
    match out {
        // Through the window's `publish`, so that an event whose ack a dropped bus connection
        // lost is published again at once rather than after the ack timeout.
        Ok(out) => match window
            .publish(bus, [out], input.clone().into_iter().collect())
            .await
        {
            Ok(_) => counters.forwarded.inc(),
            Err(error) => {
                counters.errors.inc();
                tracing::warn!(cluster = %cluster, subject, error = &error as &dyn std::error::Error, "failed to publish cloudevent");
                if let Some(input) = input {
                    // Best effort: without the nak the message still comes back after ACK_WAIT.
                    let _ = input.ack_with(AckKind::Nak(Some(FIRST_BACKOFF))).await;
                }
            }
        },
        Err(reason) => {
            counters.rejected.inc();
            tracing::warn!(cluster = %cluster, subject, reason = %reason, "rejecting malformed cloudevent");
            match dead_letter(bus, cluster, subject, &message.payload, &reason.to_string()).await {
                // Acked once the dead letter is stored, nacked by the window if it is not.
                Some(parked) => window.push(vec![parked], input),
                None => {
                    counters.errors.inc();
                    if let Some(input) = input {
                        // Not stored, so not acked: it comes back and is rejected again.
                        let _ = input.ack_with(AckKind::Nak(Some(FIRST_BACKOFF))).await;
                    }
                }
            }
        }
    }
}

/// Parks a malformed CloudEvent with the reason; the publish ack of the dead letter, `None`
/// when it could not be sent.
async fn dead_letter(
    bus: &Bus,
    cluster: &ClusterId,
    subject: &str,
    payload: &bytes::Bytes,
    reason: &str,
) -> Option<PublishAckFuture> {
    let cluster_header = cluster.to_string();
    match bus
        .dead_letter(
            "watcher",
            subject,
            payload.clone(),
            reason,
            &[("Sluice-Cluster", cluster_header.as_str())],
        )
        .await
    {
        Ok(ack) => Some(ack),
        Err(error) => {
            tracing::warn!(cluster = %cluster, error = %error, "failed to dead-letter cloudevent, it will come back");
            None
        }
    }
}

/// Exponential backoff between reconnect attempts.
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            next: FIRST_BACKOFF,
        }
    }
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        now
    }

    fn reset(&mut self) {
        self.next = FIRST_BACKOFF;
    }
}
