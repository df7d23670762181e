//! Watches in managed clusters: which (cluster, kind) pairs are needed, given the
//! configuration, and the tasks that watch them. A cluster's watches share one client, so one
//! connection to its API server. A rotated kubeconfig restarts the cluster's watches on a new
//! client; a cluster that is gone has its published state purged. On shutdown a watch stops
//! reading and finishes storing the batch in hand; what the drain deadline cuts off is found
//! again at the next start, which diffs the listed cluster against what the stream holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};
use sluice_bus::gather::Gather;
use sluice_bus::runner::publish::publish_stored;
use sluice_bus::{message_id, topology, Bus, Outgoing};
use sluice_domain::cluster::{kubeconfig_from_secret, ClusterId};
use sluice_domain::config::ConfigState;
use sluice_kube::watch::{watch_kind_listing, Change, ObjectKey};
use sluice_proto::v1 as pb;
use sluice_runtime::spans::Attribute;
use sluice_runtime::{CancellationToken, Health, TaskTracker};
use sluice_wire::BusKey;
use tokio::task::JoinHandle;

use crate::sent::Sent;

/// group, version, kind.
pub type Gvk = (String, String, String);

/// What a cluster needs watched.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterWatch {
    pub kubeconfig: Result<String, String>,
    pub kinds: BTreeSet<Gvk>,
}

/// The (cluster, kinds) the configuration asks of the watcher of `shard` (ADR 0050): every
/// kind listed by an EventSource that some EventTrigger deploys to a cluster of that shard.
pub fn desired_watches(state: &ConfigState, shard: &str) -> BTreeMap<ClusterId, ClusterWatch> {
    let mut out: BTreeMap<ClusterId, ClusterWatch> = BTreeMap::new();
    let deployments = sluice_wire::names::deployments(state);
    for (cluster_id, es_name) in deployments.keys() {
        let Some(Ok(es)) = state.event_sources.get(es_name) else {
            continue;
        };
        let Some(cluster) = state.clusters.get(cluster_id) else {
            continue;
        };
        if cluster.shard_key() != shard {
            continue;
        }
        let entry = out
            .entry(cluster_id.clone())
            .or_insert_with(|| ClusterWatch {
                kubeconfig: state
                    .secrets
                    .get(&(
                        cluster_id.namespace.clone(),
                        cluster.kubeconfig_secret.clone(),
                    ))
                    .ok_or_else(|| {
                        format!(
                            "kubeconfig secret {}/{} not found",
                            cluster_id.namespace, cluster.kubeconfig_secret
                        )
                    })
                    .and_then(|secret| {
                        kubeconfig_from_secret(secret, cluster.kubeconfig_key.as_deref())
                    }),
                kinds: BTreeSet::new(),
            });
        for selector in &es.spec.resource_selectors {
            entry.kinds.insert((
                selector.group.clone(),
                selector.version.clone(),
                selector.kind.clone(),
            ));
        }
    }
    out
}

/// The client of one managed cluster under one kubeconfig, shared by the cluster's watches: one
/// connection to its API server (HTTP/2, ADR 0042), built when the first watch needs it.
pub(crate) struct ClusterClient {
    kubeconfig: String,
    hash: String,
    client: tokio::sync::OnceCell<kube::Client>,
}

impl ClusterClient {
    fn new(kubeconfig: String, hash: String) -> ClusterClient {
        ClusterClient {
            kubeconfig,
            hash,
            client: tokio::sync::OnceCell::new(),
        }
    }

    /// The client, built from the kubeconfig the first time; an invalid kubeconfig is an error
    /// each time it is asked.
    async fn get(&self) -> sluice_kube::Result<kube::Client> {
        self.client
            .get_or_try_init(|| sluice_kube::client::from_kubeconfig_text(&self.kubeconfig, None))
            .await
            .cloned()
    }
}

struct Running {
    kubeconfig_hash: String,
    task: JoinHandle<()>,
    /// Stops the task's publishing retries.
    token: CancellationToken,
}

/// The running watch tasks.
pub struct Watches {
    bus: Bus,
    health: Health,
    running: HashMap<(ClusterId, Gvk), Running>,
    /// Per cluster, the client its running watches share.
    clients: HashMap<ClusterId, std::sync::Arc<ClusterClient>>,
    /// The shard this watcher watches the clusters of (ADR 0050).
    shard: String,
    /// The registered clusters as last reconciled, each with its shard: one of this shard that
    /// leaves them has what was published of it purged.
    clusters: BTreeMap<ClusterId, String>,
    /// Clusters that came to this shard from another, and when their watches may start
    /// ([`MOVE_GRACE`]).
    arriving: BTreeMap<ClusterId, tokio::time::Instant>,
    /// Seals the Secrets the watches publish.
    key: Option<BusKey>,
    /// Where the watches run, so that shutdown waits for their drain.
    tasks: TaskTracker,
    /// Shutdown: every watch stops reading and finishes storing what it read.
    token: CancellationToken,
}

impl Watches {
    /// `registered`: the clusters an earlier run knew (what `SLUICE_CONFIG` holds at start), so
    /// that one deleted while no watcher ran has what was published of it purged too.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bus: Bus,
        health: Health,
        key: Option<BusKey>,
        tasks: TaskTracker,
        token: CancellationToken,
        shard: &str,
        registered: &ConfigState,
    ) -> Watches {
        Watches {
            bus,
            health,
            key,
            running: HashMap::new(),
            clients: HashMap::new(),
            shard: shard.to_string(),
            clusters: shards_of(registered),
            arriving: BTreeMap::new(),
            tasks,
            token,
        }
    }

    /// When a cluster that came to this shard may have its watches started; `None` when none
    /// waits.
    pub fn next_due(&self) -> Option<tokio::time::Instant> {
        self.arriving.values().min().copied()
    }

    /// Starts and stops tasks so that exactly the desired watches run.
    pub async fn reconcile(&mut self, state: &ConfigState) {
        let present = shards_of(state);
        let moves = cluster_moves(&self.clusters, &present, &self.shard);
        let now = tokio::time::Instant::now();
        for cluster in moves.arrived {
            tracing::info!(cluster = %cluster, shard = %self.shard, "cluster came to this shard: watching it after the grace period");
            self.arriving.insert(cluster, now + MOVE_GRACE);
        }
        self.arriving
            .retain(|cluster, due| *due > now && present.get(cluster) == Some(&self.shard));
        let mut desired = desired_watches(state, &self.shard);
        desired.retain(|cluster, _| !self.arriving.contains_key(cluster));
        let mut wanted: HashMap<(ClusterId, Gvk), (String, String)> = HashMap::new();
        for (cluster, watch) in &desired {
            match &watch.kubeconfig {
                Ok(text) => {
                    let hash = format!("{:x}", Sha256::digest(text.as_bytes()));
                    for gvk in &watch.kinds {
                        wanted.insert((cluster.clone(), gvk.clone()), (hash.clone(), text.clone()));
                    }
                }
                Err(reason) => {
                    tracing::warn!(cluster = %cluster, reason = %reason, "cannot watch cluster");
                }
            }
        }
        self.running.retain(|key, running| {
            let keep = wanted
                .get(key)
                .is_some_and(|(hash, _)| *hash == running.kubeconfig_hash);
            if !keep {
                tracing::info!(cluster = %key.0, kind = %key.1 .2, "stopping watch");
                running.token.cancel();
                running.task.abort();
            }
            keep
        });
        // A cluster's watches share its client while its kubeconfig stays the same.
        self.clients.retain(|cluster, client| {
            wanted
                .iter()
                .any(|((c, _), (hash, _))| c == cluster && *hash == client.hash)
        });
        for (key, (hash, kubeconfig)) in wanted {
            if self.running.contains_key(&key) {
                continue;
            }
            let client = self
                .clients
                .entry(key.0.clone())
                .or_insert_with(|| {
                    std::sync::Arc::new(ClusterClient::new(kubeconfig, hash.clone()))
                })
                .clone();
            tracing::info!(cluster = %key.0, kind = %key.1 .2, "starting watch");
            // Not a child of the shutdown token: shutdown lets a watch store what it read.
            let token = CancellationToken::new();
            let task = self.tasks.spawn(watch_managed(
                self.bus.clone(),
                self.health.clone(),
                key.0.clone(),
                key.1.clone(),
                client,
                self.key.clone(),
                token.clone(),
                self.token.clone(),
            ));
            self.running.insert(
                key,
                Running {
                    kubeconfig_hash: hash,
                    task,
                    token,
                },
            );
        }
        // A cluster of this shard deleted from the management cluster: forget what was
        // published for it. One that went to another shard is that shard's watcher's now.
        for gone in &moves.gone {
            let filter = topology::change_cluster_filter(&sluice_wire::cluster_tokens(gone));
            match self.bus.purge(topology::CHANGES, &filter).await {
                Ok(purged) => {
                    tracing::info!(cluster = %gone, purged, "purged state of deleted cluster")
                }
                Err(error) => {
                    tracing::warn!(cluster = %gone, error = %error, "failed to purge state of deleted cluster")
                }
            }
        }
        self.clusters = present;
    }
}

/// Each registered cluster's shard ([`Cluster::shard_key`](sluice_domain::cluster::Cluster)).
fn shards_of(state: &ConfigState) -> BTreeMap<ClusterId, String> {
    state
        .clusters
        .iter()
        .map(|(id, cluster)| (id.clone(), cluster.shard_key().to_string()))
        .collect()
}

/// What changed of the registered clusters for the watcher of one shard.
#[derive(Debug, Default, PartialEq)]
pub struct Moves {
    /// Clusters of this shard that are no longer registered: what was published of them goes.
    pub gone: Vec<ClusterId>,
    /// Registered clusters that were in another shard and are in this one now.
    pub arrived: Vec<ClusterId>,
}

/// Compares the registered clusters with their shards `before` and `now`, for the watcher of
/// `shard`. A cluster that leaves this shard for another is neither: its published state is
/// the other shard's watcher's to keep or change.
pub fn cluster_moves(
    before: &BTreeMap<ClusterId, String>,
    now: &BTreeMap<ClusterId, String>,
    shard: &str,
) -> Moves {
    let gone = before
        .iter()
        .filter(|(cluster, was)| *was == shard && !now.contains_key(*cluster))
        .map(|(cluster, _)| cluster.clone())
        .collect();
    let arrived = now
        .iter()
        .filter(|(cluster, is)| {
            *is == shard && before.get(*cluster).is_some_and(|was| was != shard)
        })
        .map(|(cluster, _)| cluster.clone())
        .collect();
    Moves { gone, arrived }
}

/// How long a cluster that came to this shard from another waits before its watches start:
/// the other shard's watcher stops its own on the same change of the management cluster, and
/// what it was storing lands first, so that no older state of an object is stored after the
/// newer one this watcher lists. Nothing is missed meanwhile: the watches begin with a list.
pub const MOVE_GRACE: Duration = Duration::from_secs(2);

const RETRY: Duration = Duration::from_secs(2);
/// How many of a watch's batches (one per watch event, a whole list for a listing) are
/// published together at most.
const WATCH_BATCH: usize = 256;

/// Watches one kind of one cluster until `shutdown`; `stop` (the watch is no longer wanted)
/// also gives up the batch it is storing.
#[allow(clippy::too_many_arguments)]
async fn watch_managed(
    bus: Bus,
    health: Health,
    cluster: ClusterId,
    gvk: Gvk,
    client: std::sync::Arc<ClusterClient>,
    key: Option<BusKey>,
    stop: CancellationToken,
    shutdown: CancellationToken,
) {
    let errors = health.counter("sluice_watcher_managed_errors_total");
    let published = health.counter("sluice_watcher_changes_published_total");
    // How old each change is once stored: the first link of an event's age (ADR 0044).
    let stored_age =
        sluice_bus::runner::timings::Timings::stored_age(&health, "watcher", topology::CHANGES);
    let tokens = sluice_wire::cluster_tokens(&cluster);
    let api_version = if gvk.0.is_empty() {
        gvk.1.clone()
    } else {
        format!("{}/{}", gvk.0, gvk.1)
    };
    loop {
        let client = match client.get().await {
            Ok(client) => client,
            Err(error) => {
                errors.inc();
                tracing::warn!(cluster = %cluster, error = %error, "invalid kubeconfig");
                if crate::pause(RETRY, &shutdown).await {
                    return;
                }
                continue;
            }
        };
        let kind = match sluice_kube::apply::resolve(&client, &api_version, &gvk.2).await {
            Ok(kind) => kind,
            Err(error) => {
                // Unknown kinds select nothing (as in Sveltos); retry in case the CRD appears.
                tracing::debug!(cluster = %cluster, kind = %gvk.2, error = %error, "kind not served");
                if crate::pause(RETRY, &shutdown).await {
                    return;
                }
                continue;
            }
        };
        let known = match seed(&bus, &tokens, &gvk).await {
            Ok(known) => known,
            Err(error) => {
                errors.inc();
                tracing::warn!(cluster = %cluster, error = %sluice_runtime::error_chain(&error), "failed to read published state");
                if crate::pause(RETRY, &shutdown).await {
                    return;
                }
                continue;
            }
        };
        // Watch events that come densely are published together (ADR 0036).
        let mut stream = Gather::new(
            Box::pin(watch_kind_listing(client, kind, known)),
            WATCH_BATCH,
            bus.linger(),
        );
        loop {
            let batch = tokio::select! {
                batch = stream.next() => batch,
                () = shutdown.cancelled() => return,
            };
            let Some(batch) = batch else { break };
            let seen = std::time::SystemTime::now();
            let mut changes = Vec::new();
            for item in batch {
                match item {
                    Ok(listing) => {
                        // A complete list is a span of its own (ADR 0045).
                        if let Some(list) = listing.list {
                            sluice_runtime::spans::record_list(
                                &cluster.to_string(),
                                &api_version,
                                &gvk.2,
                                list.objects,
                                list.began,
                            );
                        }
                        changes.extend(listing.changes)
                    }
                    Err(error) => {
                        errors.inc();
                        tracing::warn!(cluster = %cluster, kind = %gvk.2, error = %error, "watch error");
                    }
                }
            }
            if changes.is_empty() {
                continue;
            }
            // The watch has counted these changes as known: each is published until it is
            // stored (a listed cluster's many a bounded chunk at a time), or the watch stops.
            let outputs: Vec<Outgoing> = changes
                .into_iter()
                .map(|change| {
                    resource_change(&cluster, &tokens, &gvk, &api_version, change, key.as_ref())
                })
                .collect();
            let traces: Vec<Option<String>> =
                outputs.iter().map(|out| out.traceparent.clone()).collect();
            let subjects: Vec<String> = if sluice_runtime::spans::spans_enabled() {
                outputs.iter().map(|out| out.subject.clone()).collect()
            } else {
                Vec::new()
            };
            let Ok(report) = publish_stored(&bus, outputs, &stop).await else {
                return;
            };
            let now = std::time::SystemTime::now();
            for age in traces
                .iter()
                .filter_map(|trace| sluice_runtime::event_age(trace.as_deref()?, now))
            {
                stored_age.observe_duration(age);
            }
            for (trace, subject) in traces.iter().zip(subjects) {
                if !report.refused.iter().any(|(out, _)| out.subject == subject) {
                    let cluster = Attribute::new("sluice.cluster", cluster.to_string());
                    let sent = Sent::new(topology::CHANGES, subject, seen, now);
                    sent.record(trace.as_deref(), vec![cluster]);
                }
            }
            published.add(report.stored as u64);
            errors.add(report.retries as u64);
            for (out, error) in report.refused {
                errors.inc();
                refused(&bus, &cluster, &out.subject, &error).await;
            }
        }
    }
}

/// Tells where the user looks that a change was too large for the bus: a dead letter on
/// `sluice.v1.dead.watcher` naming its subject and the reason (without the payload, which is
/// what did not fit). The change itself is not published; the object's next change is.
async fn refused(bus: &Bus, cluster: &ClusterId, subject: &str, error: &sluice_bus::Error) {
    let reason = sluice_runtime::error_chain(error);
    tracing::warn!(cluster = %cluster, subject, error = %reason, "change refused by the bus, not published");
    let parked = async {
        bus.dead_letter("watcher", subject, bytes::Bytes::new(), &reason, &[])
            .await?
            .await
            .map_err(|source| sluice_bus::Error::Publish {
                subject: topology::dead_subject("watcher"),
                source: Box::new(source),
            })
    };
    if let Err(error) = parked.await {
        tracing::warn!(cluster = %cluster, subject, error = %error, "failed to dead-letter a refused change");
    }
}

fn resource_change(
    cluster: &ClusterId,
    tokens: &str,
    gvk: &Gvk,
    api_version: &str,
    change: Change,
    key: Option<&BusKey>,
) -> Outgoing {
    let (namespace, name, resource_version, object) = change.into_parts();
    let deleted = object.is_none();
    let message = pb::ResourceChange {
        cluster: Some(sluice_wire::cluster_ref(cluster)),
        api_version: api_version.to_string(),
        kind: gvk.2.clone(),
        namespace: namespace.clone(),
        name: name.clone(),
        deleted,
        resource_version: resource_version.clone(),
        object_json: object
            .as_ref()
            .map(|o| serde_json::to_vec(o).unwrap_or_default())
            .unwrap_or_default(),
        sealed_object_json: Vec::new(),
    };
    Outgoing {
        // A deletion is a tombstone: read as gone, it is dropped once its reader had its time.
        ttl: deleted.then_some(topology::TOMBSTONE_TTL),
        subject: topology::change_subject(tokens, &gvk.0, &gvk.2, &namespace, &name),
        msg_id: message_id(&[
            "change",
            tokens,
            &gvk.0,
            &gvk.2,
            &namespace,
            &name,
            &resource_version,
            if deleted { "deleted" } else { "present" },
        ]),
        payload: sluice_wire::encode(&sluice_wire::seal_change(message, key)),
        traceparent: Some(sluice_runtime::new_traceparent()),
    }
}

async fn seed(
    bus: &Bus,
    tokens: &str,
    gvk: &Gvk,
) -> sluice_bus::Result<HashMap<ObjectKey, String>> {
    let filter = topology::change_kind_filter(tokens, &gvk.0, &gvk.2);
    let mut known = HashMap::new();
    for delivered in bus.replay_state(topology::CHANGES, &filter).await? {
        if let Ok(message) = sluice_wire::decode::<pb::ResourceChange>("ResourceChange", &delivered)
        {
            if !message.deleted {
                known.insert((message.namespace, message.name), message.resource_version);
            }
        }
    }
    Ok(known)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn cluster(name: &str, shard: Option<&str>) -> Value {
        let mut object = json!({"kind": "SveltosCluster",
            "metadata": {"name": name, "namespace": "default", "labels": {"env": "prod"}},
            "status": {"ready": true}});
        if let Some(shard) = shard {
            object["metadata"]["annotations"] =
                json!({ sluice_domain::cluster::SHARD_ANNOTATION: shard });
        }
        object
    }

    /// An EventSource of Services deployed by a trigger to every `env: prod` cluster: `a` in
    /// the default shard, `b` and `c` in shard `eu`, each with its kubeconfig.
    fn state() -> ConfigState {
        let mut s = ConfigState::default();
        for (name, shard) in [("a", None), ("b", Some("eu")), ("c", Some("eu"))] {
            s.apply(
                "SveltosCluster",
                "default",
                name,
                Some(&cluster(name, shard)),
            );
            let secret = format!("{name}-sveltos-kubeconfig");
            s.apply(
                "Secret",
                "default",
                &secret,
                Some(&json!({"kind": "Secret",
                    "metadata": {"namespace": "default", "name": secret},
                    "data": {"kubeconfig": "a3ViZWNvbmZpZw=="}})),
            );
        }
        s.apply(
            "EventSource",
            "",
            "es",
            Some(&json!({"kind": "EventSource", "metadata": {"name": "es"},
                "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service"}]}})),
        );
        s.apply(
            "EventTrigger",
            "",
            "t",
            Some(&json!({"kind": "EventTrigger", "metadata": {"name": "t"},
                "spec": {"sourceClusterSelector": {"matchLabels": {"env": "prod"}},
                         "eventSourceName": "es"}})),
        );
        s
    }

    fn names(watches: &BTreeMap<ClusterId, ClusterWatch>) -> Vec<&str> {
        watches.keys().map(|id| id.name.as_str()).collect()
    }

    #[test]
    fn a_watcher_watches_the_clusters_of_its_shard_only() {
        let state = state();
        assert_eq!(names(&desired_watches(&state, "")), ["a"]);
        assert_eq!(names(&desired_watches(&state, "eu")), ["b", "c"]);
        assert!(desired_watches(&state, "us").is_empty());
        let service = (String::new(), "v1".to_string(), "Service".to_string());
        for watch in desired_watches(&state, "eu").values() {
            assert_eq!(watch.kubeconfig.as_deref(), Ok("kubeconfig"));
            assert_eq!(watch.kinds, BTreeSet::from([service.clone()]));
        }
    }

    #[test]
    fn a_cluster_that_moves_is_the_new_shards_and_only_a_deleted_one_is_purged() {
        let before = shards_of(&state());
        let mut moved = state();
        // `a` goes to shard eu, `b` to the default shard; `c` is deleted.
        moved.apply(
            "SveltosCluster",
            "default",
            "a",
            Some(&cluster("a", Some("eu"))),
        );
        moved.apply("SveltosCluster", "default", "b", Some(&cluster("b", None)));
        moved.apply("SveltosCluster", "default", "c", None);
        let now = shards_of(&moved);
        let id = |name: &str| ClusterId::sveltos("default", name);
        assert_eq!(
            cluster_moves(&before, &now, ""),
            Moves {
                gone: vec![],
                arrived: vec![id("b")],
            }
        );
        assert_eq!(
            cluster_moves(&before, &now, "eu"),
            Moves {
                gone: vec![id("c")],
                arrived: vec![id("a")],
            }
        );
        // Another shard's watcher sees neither.
        assert_eq!(cluster_moves(&before, &now, "us"), Moves::default());
        // A cluster registered for the first time is no move: it starts at once.
        let fresh = cluster_moves(&BTreeMap::new(), &now, "eu");
        assert_eq!(fresh, Moves::default());
        assert_eq!(names(&desired_watches(&moved, "eu")), ["a"]);
    }
}
