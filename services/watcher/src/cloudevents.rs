//! CloudEvents from managed clusters: which clusters need listening (some EventTrigger deploys
//! an EventSource with `messagingMatchCriteria` there), and per cluster a task that follows the
//! `projectsveltos/sveltos-nats` Secret in that cluster and (re)connects to its NATS when the
//! Secret changes. A missing or bad Secret is logged and counted; other clusters are untouched.
//! On shutdown every listener drains its connection (its runners settle what they hold) and
//! ends; the watcher waits for them within its drain deadline. A listener stopped because its
//! cluster's kubeconfig changed or it is no longer listened to, and a connection replaced
//! because the Secret changed, drain the same way, in the background, within the same deadline;
//! the connection that replaces it binds the cluster's managed consumer once it has drained
//! (`connection::ConsumerTurn`).

pub mod connection;
pub mod forward;
pub mod stage;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sluice_bus::Bus;
use sluice_domain::cluster::ClusterId;
use sluice_domain::config::ConfigState;
use sluice_domain::natsconfig::{
    parse_nats_secret, NatsSettings, NATS_SECRET_NAME, NATS_SECRET_NAMESPACE,
};
use sluice_runtime::{CancellationToken, Health, TaskTracker};
use tokio::task::JoinHandle;

use connection::{ConsumerTurn, Counters};

/// Clusters of `shard` to listen to, each with its kubeconfig (or why it is unusable): those
/// where some EventTrigger deploys an EventSource that has messaging criteria.
pub fn desired_listeners(
    state: &ConfigState,
    shard: &str,
) -> BTreeMap<ClusterId, Result<String, String>> {
    let listening: BTreeSet<ClusterId> = sluice_wire::names::deployments(state)
        .into_keys()
        .filter(|(_, name)| {
            state.event_sources.get(name).is_some_and(|es| {
                es.as_ref()
                    .is_ok_and(|es| !es.spec.messaging_match_criteria.is_empty())
            })
        })
        .map(|(cluster, _)| cluster)
        .collect();
    crate::managed::desired_watches(state, shard)
        .into_iter()
        .filter(|(cluster, _)| listening.contains(cluster))
        .map(|(cluster, watch)| (cluster, watch.kubeconfig))
        .collect()
}

struct Running {
    kubeconfig_hash: String,
    draining: Draining,
}

/// A task that drains and ends once its token is cancelled (a listener, a connection).
struct Draining {
    token: CancellationToken,
    task: JoinHandle<()>,
}

impl Draining {
    /// Cancels the task and, in `tasks` (so that shutdown waits for it too), gives it the
    /// drain deadline to settle what it holds before it is aborted: what its runners had
    /// received goes back to the managed server at once instead of after the ack wait.
    fn stop(self, tasks: &TaskTracker, cluster: &ClusterId, what: &'static str) {
        self.token.cancel();
        let (task, cluster) = (self.task, cluster.clone());
        tasks.spawn(async move {
            let abort = task.abort_handle();
            if tokio::time::timeout(crate::DRAIN_DEADLINE, task)
                .await
                .is_err()
            {
                tracing::warn!(cluster = %cluster, what, "drain deadline passed, aborting");
                abort.abort();
            }
        });
    }
}

/// The per-cluster listener tasks.
pub struct Listeners {
    bus: Bus,
    counters: Counters,
    running: HashMap<ClusterId, Running>,
    /// Each cluster's turn on its managed consumer, shared by its listener that drains and the
    /// one started for a rotated kubeconfig.
    turns: HashMap<ClusterId, ConsumerTurn>,
    /// Where the listeners run, so that shutdown waits for their drain.
    tasks: TaskTracker,
    /// Shutdown: every listener stops reading and drains.
    token: CancellationToken,
}

impl Listeners {
    pub fn new(
        bus: Bus,
        health: Health,
        tasks: TaskTracker,
        token: CancellationToken,
    ) -> Listeners {
        Listeners {
            bus,
            tasks,
            token,
            counters: Counters {
                config_errors: health.counter("sluice_watcher_nats_config_errors_total"),
                connect_errors: health.counter("sluice_watcher_nats_connect_errors_total"),
                forwarded: health.counter("sluice_watcher_cloudevents_forwarded_total"),
                rejected: health.counter("sluice_watcher_cloudevents_rejected_total"),
                errors: health.counter("sluice_watcher_cloudevent_errors_total"),
                health: health.clone(),
            },
            running: HashMap::new(),
            turns: HashMap::new(),
        }
    }

    /// Starts and stops listeners so that exactly the desired clusters are listened to; a
    /// rotated kubeconfig restarts the cluster's listener.
    pub fn reconcile(&mut self, state: &ConfigState, shard: &str) {
        let mut wanted: HashMap<ClusterId, (String, String)> = HashMap::new();
        for (cluster, kubeconfig) in desired_listeners(state, shard) {
            match kubeconfig {
                Ok(text) => {
                    let hash = format!("{:x}", Sha256::digest(text.as_bytes()));
                    wanted.insert(cluster, (hash, text));
                }
                Err(reason) => {
                    self.counters.config_errors.inc();
                    tracing::warn!(cluster = %cluster, reason = %reason, "cannot listen to cluster's nats");
                }
            }
        }
        let stopped: Vec<ClusterId> = self
            .running
            .iter()
            .filter(|(cluster, running)| {
                wanted
                    .get(*cluster)
                    .is_none_or(|(hash, _)| *hash != running.kubeconfig_hash)
            })
            .map(|(cluster, _)| cluster.clone())
            .collect();
        for cluster in stopped {
            if let Some(running) = self.running.remove(&cluster) {
                tracing::info!(cluster = %cluster, "stopping cloudevent listener");
                running
                    .draining
                    .stop(&self.tasks, &cluster, "cloudevent listener");
            }
        }
        // A turn no listener holds or waits for any more.
        let running = &self.running;
        self.turns.retain(|cluster, turn| {
            running.contains_key(cluster) || std::sync::Arc::strong_count(turn) > 1
        });
        for (cluster, (hash, kubeconfig)) in wanted {
            if self.running.contains_key(&cluster) {
                continue;
            }
            tracing::info!(cluster = %cluster, "starting cloudevent listener");
            // Cancelled by the shutdown, or alone when the listener is stopped.
            let token = self.token.child_token();
            let listener = ClusterListener {
                bus: self.bus.clone(),
                counters: self.counters.clone(),
                cluster: cluster.clone(),
                current: None,
                token: token.clone(),
                turn: self.turns.entry(cluster.clone()).or_default().clone(),
                tasks: self.tasks.clone(),
            };
            let task = self.tasks.spawn(listener.follow(kubeconfig));
            self.running.insert(
                cluster,
                Running {
                    kubeconfig_hash: hash,
                    draining: Draining { token, task },
                },
            );
        }
    }
}

/// One cluster: the settings in force and the connection serving them.
struct ClusterListener {
    bus: Bus,
    counters: Counters,
    cluster: ClusterId,
    current: Option<(NatsSettings, Draining)>,
    /// The cluster's turn on its managed consumer, taken by each connection in turn.
    turn: ConsumerTurn,
    /// Stops the listener and, through child tokens, its connection.
    token: CancellationToken,
    /// Where a replaced connection drains.
    tasks: TaskTracker,
}

/// A listener aborted past its drain deadline closes its NATS connection too.
impl Drop for ClusterListener {
    fn drop(&mut self) {
        if let Some((_, current)) = self.current.take() {
            current.task.abort();
        }
    }
}

impl ClusterListener {
    /// Follows the Secret until it is stopped (or shutdown), then waits for the connection to
    /// drain.
    async fn follow(mut self, kubeconfig: String) {
        let token = self.token.clone();
        tokio::select! {
            () = self.follow_secret(kubeconfig) => {}
            () = token.cancelled() => {}
        }
        // The connection stops at a child of the same token and drains what it holds; it stays
        // in `current` meanwhile, so that aborting this listener aborts it too.
        if let Some((_, current)) = self.current.as_mut() {
            // A join error only means it panicked, which it logged.
            let _ = (&mut current.task).await;
        }
        self.current = None;
    }

    /// Follows the Secret forever: reads it once, then watches it alone.
    async fn follow_secret(&mut self, kubeconfig: String) {
        let cluster = self.cluster.clone();
        let mut backoff = std::time::Duration::from_millis(500);
        let max = std::time::Duration::from_secs(30);
        loop {
            let client = match sluice_kube::client::from_kubeconfig_text(&kubeconfig, None).await {
                Ok(client) => client,
                Err(error) => {
                    self.counters.config_errors.inc();
                    tracing::warn!(cluster = %cluster, error = &error as &dyn std::error::Error, "invalid kubeconfig");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(max);
                    continue;
                }
            };
            let secrets = sluice_kube::apply::resolve(&client, "v1", "Secret").await;
            let initial = match &secrets {
                Ok(kind) => {
                    sluice_kube::apply::get(&client, kind, NATS_SECRET_NAMESPACE, NATS_SECRET_NAME)
                        .await
                }
                Err(_) => Ok(None),
            };
            let (kind, initial) = match (secrets, initial) {
                (Ok(kind), Ok(initial)) => (kind, initial),
                (Err(error), _) | (_, Err(error)) => {
                    self.counters.errors.inc();
                    tracing::warn!(cluster = %cluster, error = &error as &dyn std::error::Error, "cannot read the sveltos-nats secret");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(max);
                    continue;
                }
            };
            backoff = std::time::Duration::from_millis(500);
            self.on_secret(initial.as_ref());
            // Only this Secret is listed and watched: no access to other Secrets is needed.
            let mut changes = Box::pin(sluice_kube::watch::watch_object(
                client,
                kind,
                NATS_SECRET_NAMESPACE,
                NATS_SECRET_NAME,
            ));
            while let Some(batch) = changes.next().await {
                match batch {
                    Ok(batch) => {
                        for change in batch {
                            let (namespace, name, _, object) = change.into_parts();
                            if namespace == NATS_SECRET_NAMESPACE && name == NATS_SECRET_NAME {
                                self.on_secret(object.as_ref());
                            }
                        }
                    }
                    Err(error) => {
                        self.counters.errors.inc();
                        tracing::warn!(cluster = %cluster, error = &error as &dyn std::error::Error, "secret watch error");
                    }
                }
            }
        }
    }

    /// Reconnects when the settings change, disconnects when the Secret is gone or unusable.
    fn on_secret(&mut self, secret: Option<&Value>) {
        let cluster = self.cluster.clone();
        let settings = match secret.map(parse_nats_secret) {
            None => {
                self.counters.config_errors.inc();
                tracing::warn!(cluster = %cluster, secret = %format!("{NATS_SECRET_NAMESPACE}/{NATS_SECRET_NAME}"), "no sveltos-nats secret, not listening for cloudevents");
                self.disconnect();
                return;
            }
            Some(Err(error)) => {
                self.counters.config_errors.inc();
                tracing::warn!(cluster = %cluster, error = %error, "invalid sveltos-nats secret, not listening for cloudevents");
                self.disconnect();
                return;
            }
            Some(Ok(settings)) => settings,
        };
        if self
            .current
            .as_ref()
            .is_some_and(|(current, _)| *current == settings)
        {
            return;
        }
        self.disconnect();
        tracing::info!(cluster = %cluster, nats = ?settings.nats.as_ref().map(|n| &n.url), jetstream = ?settings.jetstream.as_ref().map(|j| &j.url), "connecting to the cluster's nats");
        let token = self.token.child_token();
        let task = tokio::spawn(connection::run(
            self.bus.clone(),
            self.counters.clone(),
            cluster.clone(),
            settings.clone(),
            self.turn.clone(),
            token.clone(),
        ));
        self.current = Some((settings, Draining { token, task }));
    }

    /// Stops the connection: it drains in the background.
    fn disconnect(&mut self) {
        if let Some((_, current)) = self.current.take() {
            current.stop(&self.tasks, &self.cluster, "cloudevent connection");
        }
    }
}
