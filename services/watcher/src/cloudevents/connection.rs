//! One managed cluster's NATS, as its `sveltos-nats` Secret describes it: connects with the
//! Secret's credentials, subscribes each core subject once, consumes each JetStream stream with
//! a durable consumer, and forwards every CloudEvent to the bus. Each JetStream stream is read
//! by a stage runner (`Runner::over` with `stage::Forwarder`): a message is acked on the managed
//! server only after its `CloudEventReceived` (or its dead letter) is stored, and nacked when
//! that fails. Core NATS has nothing to ack: a chunk of messages is published until stored.
//! Connection errors are retried with backoff; nothing here reaches another cluster. On
//! cancellation it stops reading and drains what it holds.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use futures::stream::{self, BoxStream, StreamExt};
use sluice_bus::runner::publish::publish_stored;
use sluice_bus::runner::{Hooks, Runner};
use sluice_bus::{topology, Bus};
use sluice_domain::cluster::ClusterId;
use sluice_domain::natsconfig::{Authorization, JetStreamConnection, NatsConnection, NatsSettings};
use sluice_runtime::{CancellationToken, Counter, Health};
use tempfile::TempDir;

use super::forward::{self, Delivery};
use super::stage::{Forwarder, CLUSTER_HEADER, MANAGED_STREAM};

/// How long the managed NATS waits for an ack before redelivering a JetStream message. Longer
/// than a bus publish takes under load; short enough that a crashed watcher's messages come
/// back soon.
pub const ACK_WAIT: Duration = Duration::from_secs(10);

/// How long binding waits for the managed server to reset the consumer before going on without
/// it (a user whose permissions lack `CONSUMER.RESET` gets no reply at all).
const RESET_WITHIN: Duration = Duration::from_secs(2);

/// A cluster's turn on its managed durable consumer: one connection of this process reads it at
/// a time, the next once the one before has drained, so that the reset at its bind gives it
/// everything the one before left unsettled, what was still on its way to it included.
pub type ConsumerTurn = std::sync::Arc<tokio::sync::Mutex<()>>;

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
    /// Where the forwarders' runners put their histograms.
    pub health: Health,
}

impl Counters {
    /// What the runner of a managed stream counts: forwarded, retried (an error), rejected.
    fn hooks(&self) -> Hooks {
        let (forwarded, errors, rejected) = (
            self.forwarded.clone(),
            self.errors.clone(),
            self.rejected.clone(),
        );
        Hooks {
            handled: std::sync::Arc::new(move |n| forwarded.add(n)),
            retried: std::sync::Arc::new(move |n| errors.add(n)),
            rejected: std::sync::Arc::new(move |n| rejected.add(n)),
            trace: Some(sluice_runtime::child_traceparent),
            health: Some(self.health.clone()),
            ..Hooks::default()
        }
    }
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

/// Serves both sections of the settings until `token` is cancelled (shutdown, a changed
/// Secret or kubeconfig), then drains; aborted only past the drain deadline.
pub async fn run(
    bus: Bus,
    counters: Counters,
    cluster: ClusterId,
    settings: NatsSettings,
    turn: ConsumerTurn,
    token: CancellationToken,
) {
    let core = async {
        if let Some(nats) = &settings.nats {
            serve_core(&bus, &counters, &cluster, nats, &token).await;
        }
    };
    let jetstream = async {
        if let Some(js) = &settings.jetstream {
            serve_jetstream(&bus, &counters, &cluster, js, &turn, &token).await;
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

async fn serve_core(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    nats: &NatsConnection,
    token: &CancellationToken,
) {
    if nats.subjects.is_empty() {
        tracing::info!(cluster = %cluster, url = %nats.url, "no nats subjects configured");
        return;
    }
    let mut backoff = Backoff::default();
    loop {
        let subscribed = async {
            let (client, files) = connect(&nats.url, &nats.authorization).await?;
            let mut subscriptions = Vec::with_capacity(nats.subjects.len());
            for subject in &nats.subjects {
                let subscription = client.subscribe(subject.clone()).await.map_err(|source| {
                    ListenError::Subscribe {
                        subject: subject.clone(),
                        source,
                    }
                })?;
                subscriptions.push(subscription.boxed());
            }
            tracing::info!(cluster = %cluster, url = %nats.url, subjects = ?nats.subjects, "subscribed to nats");
            Ok::<_, ListenError>((client, files, stream::select_all(subscriptions)))
        };
        let result = tokio::select! {
            result = subscribed => result,
            () = token.cancelled() => return,
        };
        match result {
            Ok((_client, _files, incoming)) => {
                backoff.reset();
                let subscribed = unix_nanos();
                forward_core(bus, counters, cluster, incoming.boxed(), subscribed, token).await;
                if token.is_cancelled() {
                    return;
                }
                tracing::warn!(cluster = %cluster, url = %nats.url, "nats subscriptions ended, reconnecting");
            }
            Err(error) => {
                counters.connect_errors.inc();
                tracing::warn!(cluster = %cluster, url = %nats.url, error = &error as &dyn std::error::Error, "cannot listen to nats");
            }
        }
        if crate::pause(backoff.next(), token).await {
            return;
        }
    }
}

async fn serve_jetstream(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    js: &JetStreamConnection,
    turn: &ConsumerTurn,
    token: &CancellationToken,
) {
    if js.streams.is_empty() {
        tracing::info!(cluster = %cluster, url = %js.url, "no jetstream streams configured");
        return;
    }
    // Held until this connection's runners have drained (or it is aborted).
    let _turn = tokio::select! {
        turn = turn.clone().lock_owned() => turn,
        () = token.cancelled() => return,
    };
    let durable = consumer_name(cluster);
    let mut backoff = Backoff::default();
    loop {
        let bound = async {
            let (client, files) = connect(&js.url, &js.authorization).await?;
            let context = jetstream::new(client.clone());
            let mut runners = Vec::with_capacity(js.streams.len());
            for source in &js.streams {
                let stream_error =
                    |e: Box<dyn std::error::Error + Send + Sync>| ListenError::Stream {
                        stream: source.stream.clone(),
                        source: e,
                    };
                let stream = context
                    .get_stream(&source.stream)
                    .await
                    .map_err(|e| stream_error(Box::new(e)))?;
                // With the stream's name, the origin of its events' order (ADR 0049).
                let created = sluice_bus::feed::created_nanos(stream.cached_info());
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
                reset(&client, cluster, &source.stream, &durable).await;
                let messages = consumer
                    .stream()
                    .max_messages_per_batch(256)
                    .heartbeat(Duration::from_secs(5))
                    .expires(Duration::from_secs(30))
                    .messages()
                    .await
                    .map_err(|e| stream_error(Box::new(e)))?;
                let read = messages.map(|message| message.map(as_the_bus_carries));
                let runner = Runner::over(bus, read.boxed(), Some(client.clone()), MANAGED_STREAM)
                    .with_hooks(counters.hooks());
                runners.push((source.stream.clone(), created, runner));
            }
            let streams: Vec<&str> = js.streams.iter().map(|s| s.stream.as_str()).collect();
            tracing::info!(cluster = %cluster, url = %js.url, ?streams, consumer = %durable, "consuming jetstream");
            Ok::<_, ListenError>((files, runners))
        };
        let result = tokio::select! {
            result = bound => result,
            () = token.cancelled() => return,
        };
        match result {
            Ok((_files, runners)) => {
                backoff.reset();
                let runs = runners
                    .into_iter()
                    .map(|(stream, created, runner)| async move {
                        let mut stage = Forwarder::new(cluster.clone(), stream, created);
                        runner
                            .run(&mut stage, stream::pending(), token.clone())
                            .await
                    });
                // Each runner drains on cancellation; one that ends otherwise (the connection
                // is gone) ends them all, to connect again.
                match futures::future::try_join_all(runs).await {
                    Ok(_) => {
                        // The next connection of the cluster binds its consumer after this.
                        tracing::info!(cluster = %cluster, url = %js.url, consumer = %durable, "jetstream consumers drained");
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(cluster = %cluster, url = %js.url, error = &error as &dyn std::error::Error, "jetstream consumers ended, reconnecting");
                    }
                }
            }
            Err(error) => {
                counters.connect_errors.inc();
                tracing::warn!(cluster = %cluster, url = %js.url, error = &error as &dyn std::error::Error, "cannot consume jetstream");
            }
        }
        if crate::pause(backoff.next(), token).await {
            return;
        }
    }
}

/// Hands out again at once what an earlier reader of the managed consumer (a listener drained
/// for a rotated kubeconfig, a watcher killed) received and never settled, before this one
/// pulls. A managed server that cannot reset it (older than 2.14, or the user not permitted)
/// delivers those after the ack wait instead. A reader still on the consumer elsewhere (a
/// cluster's listener moving between shards) gets nothing twice on the bus: a redelivery
/// carries its stored message's id (ADR 0008).
async fn reset(client: &async_nats::Client, cluster: &ClusterId, stream: &str, durable: &str) {
    let reset = tokio::time::timeout(
        RESET_WITHIN,
        sluice_bus::feed::reset_to_ack_floor(client, stream, durable),
    )
    .await;
    let why = match reset {
        Ok(Ok(true)) => return,
        Ok(Ok(false)) => "the server has no CONSUMER.RESET (older than 2.14)".to_string(),
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {RESET_WITHIN:?} (is CONSUMER.RESET permitted?)"),
    };
    tracing::warn!(cluster = %cluster, stream, consumer = durable, reason = %why, "managed consumer not reset: what an earlier reader left unacked comes after the ack wait");
}

/// Now, in Unix nanoseconds: when a core NATS subscription began, which names the order of what
/// it receives.
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// A message of a managed stream as the forwarder reads it: a CloudEvent in structured JSON,
/// its trace context in the `traceparent` header (`forward::structured`). One that is not a
/// CloudEvent is left as it came, for the forwarder to reject with the reason.
fn as_the_bus_carries(mut message: jetstream::Message) -> jetstream::Message {
    let headers = forward::header_pairs(message.message.headers.as_ref());
    if let Ok((json, traceparent)) = forward::structured(&headers, &message.message.payload) {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(traceparent) = traceparent {
            headers.insert("traceparent", traceparent.as_str());
        }
        message.message.payload = json.into();
        message.message.headers = Some(headers);
    }
    message
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
    // Several servers of the managed cluster's NATS may be named, comma-separated, as the Go
    // client Sveltos's agent uses takes them.
    let servers = sluice_bus::server_addrs(url).map_err(|source| ListenError::Connect {
        url: url.to_string(),
        source: source.into(),
    })?;
    let client = options
        .connect(servers.as_slice())
        .await
        .map_err(|source| ListenError::Connect {
            url: url.to_string(),
            source,
        })?;
    Ok((client, files))
}

/// Forwards core NATS messages until the subscriptions end or `token` is cancelled. Core NATS
/// delivers at most once and has nothing to ack or redeliver: each chunk of messages already
/// received is published until stored (`publish_stored`, with the same message ids on a
/// retry), what is not a CloudEvent dead-lettered, before the next chunk is read. On
/// cancellation the chunk in hand is finished (the watcher's drain deadline bounds it).
async fn forward_core(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    incoming: BoxStream<'static, async_nats::Message>,
    subscribed: u64,
    token: &CancellationToken,
) {
    let mut received = 0;
    let mut chunks = incoming.ready_chunks(topology::PUBLISH_WINDOW);
    // Stops nothing: a chunk read is stored, however long the bus takes, or the process ends.
    let finish = CancellationToken::new();
    loop {
        let chunk = tokio::select! {
            chunk = chunks.next() => chunk,
            () = token.cancelled() => return,
        };
        let Some(chunk) = chunk else { return };
        let mut outputs = Vec::with_capacity(chunk.len());
        for message in chunk {
            let unique = uuid::Uuid::new_v4().to_string();
            let headers = forward::header_pairs(message.headers.as_ref());
            received += 1;
            let delivery = Delivery::Core {
                unique: &unique,
                subscribed,
                received,
            };
            match forward::outgoing(
                cluster,
                &message.subject,
                &headers,
                &message.payload,
                delivery,
            ) {
                Ok(out) => outputs.push(out),
                Err(reason) => {
                    counters.rejected.inc();
                    dead_letter(bus, counters, cluster, &message, &reason).await;
                }
            }
        }
        let Ok(report) = publish_stored(bus, outputs, &finish).await else {
            return;
        };
        counters.forwarded.add(report.stored as u64);
        counters.errors.add(report.retries as u64);
        for (out, error) in report.refused {
            counters.errors.inc();
            tracing::warn!(cluster = %cluster, subject = %out.subject, error = %sluice_runtime::error_chain(&error), "cloudevent refused by the bus, not published");
        }
    }
}

/// Parks a core NATS message that is not a CloudEvent with the reason. Nothing redelivers it:
/// a dead letter that cannot be stored is only logged and counted.
async fn dead_letter(
    bus: &Bus,
    counters: &Counters,
    cluster: &ClusterId,
    message: &async_nats::Message,
    reason: &sluice_domain::cloudevent::CloudEventError,
) {
    let subject = message.subject.as_str();
    let reason = format!("not a cloudevent from cluster {cluster}: {reason}");
    tracing::warn!(cluster = %cluster, subject, reason = %reason, "rejecting malformed cloudevent");
    let cluster_header = cluster.to_string();
    let parked = async {
        let headers = [(CLUSTER_HEADER, cluster_header.as_str())];
        bus.dead_letter(
            "watcher",
            subject,
            message.payload.clone(),
            &reason,
            &headers,
        )
        .await?
        .await
        .map_err(|source| sluice_bus::Error::Publish {
            subject: topology::dead_subject("watcher"),
            source: Box::new(source),
        })
    };
    if let Err(error) = parked.await {
        counters.errors.inc();
        tracing::warn!(cluster = %cluster, subject, error = %sluice_runtime::error_chain(&error), "failed to dead-letter a malformed cloudevent");
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
