//! Watching the management cluster's configuration kinds and publishing each object's state
//! on its config subject. A kind that is not served yet (its CRD is missing) is retried.
//! ConfigMaps and Secrets are not published here: they go to the watcher's own state, and
//! `configdata` publishes the referenced ones.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use serde_json::Value;
use sluice_bus::runner::publish::publish_stored;
use sluice_bus::{message_id, topology, Bus, Outgoing};
use sluice_domain::configdata::DataKind;
use sluice_domain::naming;
use sluice_kube::watch::{watch_kind_listing_selected, Change, ObjectKey};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, Health};
use tokio::sync::mpsc;

use crate::sent::{self, Sent};

/// A configuration kind and the API versions it may be served at, preferred first.
#[derive(Clone, Copy, Debug)]
pub struct WatchedKind {
    pub kind: &'static str,
    pub api_versions: &'static [&'static str],
}

pub const WATCHED: [WatchedKind; 8] = [
    WatchedKind {
        kind: "EventSource",
        api_versions: &[
            "lib.projectsveltos.io/v1beta1",
            "lib.projectsveltos.io/v1alpha1",
        ],
    },
    WatchedKind {
        kind: "EventTrigger",
        api_versions: &[
            "lib.projectsveltos.io/v1beta1",
            "lib.projectsveltos.io/v1alpha1",
        ],
    },
    WatchedKind {
        kind: "EventBasedAddOn",
        api_versions: &["lib.projectsveltos.io/v1alpha1"],
    },
    WatchedKind {
        kind: "SveltosCluster",
        api_versions: &[
            "lib.projectsveltos.io/v1beta1",
            "lib.projectsveltos.io/v1alpha1",
        ],
    },
    WatchedKind {
        kind: "Cluster",
        api_versions: &["cluster.x-k8s.io/v1beta1", "cluster.x-k8s.io/v1beta2"],
    },
    WatchedKind {
        kind: "ClusterSet",
        api_versions: &["lib.projectsveltos.io/v1beta1"],
    },
    WatchedKind {
        kind: "ConfigMap",
        api_versions: &["v1"],
    },
    WatchedKind {
        kind: "Secret",
        api_versions: &["v1"],
    },
];

/// What a kind's watch hands to the watcher's main loop.
#[derive(Debug)]
pub enum Update {
    /// One configuration object's new state (`None`: deleted).
    Object {
        kind: String,
        namespace: String,
        name: String,
        object: Option<Value>,
    },
    /// A complete list of a ConfigMap or Secret kind has been handed over.
    Listed(DataKind),
}

const RETRY: Duration = Duration::from_secs(2);

/// Watches one kind until `token` is cancelled: resolves it, starts from what was published
/// before, publishes changes (a change read is stored before the watch stops). `snapshot` is
/// what the stream held of the kind when the process read it at start, which its state was
/// built from.
/// - A watcher that publishes the configuration starts its first watch from it; a watch
///   started again reads the stream afresh, since it has published since.
/// - A watcher that does not (another shard's than the default, ADR 0050) starts every watch
///   from it: the default shard's watcher may publish meanwhile, and a later read of the stream
///   would hide those changes from this one's state. It only hands the changes over, as it
///   does ConfigMaps and Secrets.
pub async fn watch(
    client: Client,
    bus: Bus,
    watched: WatchedKind,
    (snapshot, publishes): (HashMap<ObjectKey, String>, bool),
    tx: mpsc::Sender<Update>,
    health: Health,
    token: CancellationToken,
) {
    let mut first = Some(snapshot.clone());
    let errors = health.counter("sluice_watcher_management_errors_total");
    // Stops nothing: a change read is stored before the watch stops, or the process ends.
    let finish = CancellationToken::new();
    loop {
        let Some(kind) = resolve_any(&client, watched).await else {
            if crate::pause(RETRY, &token).await {
                return;
            }
            continue;
        };
        // ConfigMaps and Secrets start from nothing known: every one that exists is listed
        // into the watcher's state, and `configdata` decides what of them the bus holds.
        let data_kind = DataKind::of_config_kind(watched.kind);
        let known = match (data_kind, publishes, first.take()) {
            (Some(_), _, _) => HashMap::new(),
            (None, false, _) => snapshot.clone(),
            (None, true, Some(known)) => known,
            (None, true, None) => match seed(&bus, watched.kind).await {
                Ok(known) => known,
                Err(error) => {
                    errors.inc();
                    tracing::warn!(kind = watched.kind, error = %error, "failed to read published config, retrying");
                    if crate::pause(RETRY, &token).await {
                        return;
                    }
                    continue;
                }
            },
        };
        tracing::info!(kind = watched.kind, api = %kind.resource.api_version, "watching management kind");
        let mut outputs = Outputs::new(known.keys().cloned());
        // What sluice created itself (the ConfigMaps and Secrets the applier instantiates, one
        // per event for a `oneForEvent` trigger) the API server leaves out of the watch; one
        // that gains the owner label leaves it as a deletion, withdrawn below like any other.
        let selector = data_kind.map(|_| format!("!{}", naming::LABEL_EVENT_TRIGGER));
        let mut stream = Box::pin(watch_kind_listing_selected(
            client.clone(),
            kind,
            known,
            selector.as_deref(),
        ));
        loop {
            let batch = tokio::select! {
                batch = stream.next() => batch,
                () = token.cancelled() => return,
            };
            let Some(batch) = batch else { break };
            match batch {
                Ok(listing) => {
                    for change in listing.changes {
                        let Some(change) = outputs.filter(watched.kind, change) else {
                            continue;
                        };
                        let update = match data_kind {
                            None if publishes => publish(&bus, watched.kind, change, &finish).await,
                            _ => Ok(local(watched.kind, change)),
                        };
                        match update {
                            Ok(update) => {
                                if tx.send(update).await.is_err() {
                                    return;
                                }
                            }
                            Err(error) => {
                                errors.inc();
                                tracing::warn!(kind = watched.kind, error = %error, "failed to publish config");
                            }
                        }
                    }
                    if let (Some(data_kind), true) = (data_kind, listing.list.is_some()) {
                        if tx.send(Update::Listed(data_kind)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(error) => {
                    errors.inc();
                    tracing::warn!(kind = watched.kind, error = %error, "management watch error");
                }
            }
        }
    }
}

/// The ConfigMaps and Secrets sluice itself created (they carry the EventTrigger owner label).
/// They are outputs, never configuration: publishing them would make every stage that follows
/// the configuration recompute for each object the applier writes.
struct Outputs {
    owned: HashSet<ObjectKey>,
    /// Keys on the configuration stream (seeded from it), so that an object which gains the
    /// owner label is withdrawn from the configuration.
    published: HashSet<ObjectKey>,
}

impl Outputs {
    fn new(published: impl Iterator<Item = ObjectKey>) -> Outputs {
        Outputs {
            owned: HashSet::new(),
            published: published.collect(),
        }
    }

    /// The change to publish, if any.
    fn filter(&mut self, kind: &str, change: Change) -> Option<Change> {
        if kind != "ConfigMap" && kind != "Secret" {
            return Some(change);
        }
        match change {
            Change::Upsert(object) => {
                let (key, resource_version) = sluice_kube::watch::key_of(&object);
                let owned = object
                    .pointer("/metadata/labels")
                    .and_then(|labels| labels.get(naming::LABEL_EVENT_TRIGGER))
                    .is_some();
                if !owned {
                    self.owned.remove(&key);
                    self.published.insert(key);
                    return Some(Change::Upsert(object));
                }
                self.owned.insert(key.clone());
                let withdrawn = self.published.remove(&key);
                withdrawn.then_some(Change::Delete {
                    namespace: key.0,
                    name: key.1,
                    resource_version,
                })
            }
            Change::Delete {
                namespace,
                name,
                resource_version,
            } => {
                let key = (namespace, name);
                if self.owned.remove(&key) {
                    return None;
                }
                self.published.remove(&key);
                Some(Change::Delete {
                    namespace: key.0,
                    name: key.1,
                    resource_version,
                })
            }
        }
    }
}

async fn resolve_any(client: &Client, watched: WatchedKind) -> Option<sluice_kube::apply::Kind> {
    for api_version in watched.api_versions {
        if let Ok(kind) = sluice_kube::apply::resolve(client, api_version, watched.kind).await {
            return Some(kind);
        }
    }
    None
}

/// What an earlier run published for this kind, so deletions while nobody watched are found.
async fn seed(bus: &Bus, kind: &str) -> sluice_bus::Result<HashMap<ObjectKey, String>> {
    let filter = topology::config_kind_filter(kind);
    let replayed = bus.replay_state(topology::CONFIG, &filter).await?;
    Ok(known_of(&replayed).remove(kind).unwrap_or_default())
}

/// What `replayed` (messages of `SLUICE_CONFIG`) holds of each kind: every object not deleted,
/// with its resourceVersion.
pub fn known_of(replayed: &[sluice_bus::Delivered]) -> HashMap<String, HashMap<ObjectKey, String>> {
    let mut known: HashMap<String, HashMap<ObjectKey, String>> = HashMap::new();
    for delivered in replayed {
        if let Ok(message) = sluice_wire::decode::<pb::ConfigObject>("ConfigObject", delivered) {
            if !message.deleted {
                known
                    .entry(message.kind)
                    .or_default()
                    .insert((message.namespace, message.name), message.resource_version);
            }
        }
    }
    known
}

/// Publishes one object's state, retried until it is stored (the watch already counts it as
/// known); an error only for a state the bus can never take, or when cancelled.
async fn publish(
    bus: &Bus,
    kind: &str,
    change: Change,
    token: &CancellationToken,
) -> Result<Update, String> {
    let seen = std::time::SystemTime::now();
    let (namespace, name, resource_version, object) = change.into_parts();
    let deleted = object.is_none();
    let form = object
        .as_ref()
        .map(|o| sluice_domain::configdata::BusForm::Plain(o.clone()));
    let message = sluice_wire::config_message(
        kind,
        &namespace,
        &name,
        &resource_version,
        form.as_ref(),
        None,
    );
    let out = Outgoing {
        // A deletion is a tombstone (ADR 0041): every follower rebuilds the configuration at
        // start, where a subject without a message is an object that does not exist.
        ttl: deleted.then_some(topology::CONFIG_TOMBSTONE_TTL),
        subject: topology::config_subject(kind, &namespace, &name),
        msg_id: message_id(&[
            "config",
            kind,
            &namespace,
            &name,
            &resource_version,
            if deleted { "deleted" } else { "present" },
        ]),
        payload: sluice_wire::encode(&message),
        traceparent: Some(sluice_runtime::new_traceparent()),
    };
    let (subject, traceparent) = (out.subject.clone(), out.traceparent.clone());
    let report = publish_stored(bus, vec![out], token)
        .await
        .map_err(|cancelled| cancelled.to_string())?;
    if let Some((_, error)) = report.refused.into_iter().next() {
        return Err(sluice_runtime::error_chain(&error));
    }
    let span = Sent::new(
        topology::CONFIG,
        subject,
        seen,
        std::time::SystemTime::now(),
    );
    span.record(
        traceparent.as_deref(),
        sent::config_object(kind, &namespace, &name),
    );
    Ok(Update::Object {
        kind: kind.to_string(),
        namespace,
        name,
        object,
    })
}

/// A ConfigMap's or Secret's change for the watcher's own state only.
fn local(kind: &str, change: Change) -> Update {
    let (namespace, name, _, object) = change.into_parts();
    Update::Object {
        kind: kind.to_string(),
        namespace,
        name,
        object,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_map(name: &str, owned: bool, rv: &str) -> Change {
        let labels = if owned {
            json!({ naming::LABEL_EVENT_TRIGGER: "t" })
        } else {
            json!({})
        };
        Change::Upsert(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv, "labels": labels}}))
    }

    fn delete(name: &str) -> Change {
        Change::Delete {
            namespace: "ns".into(),
            name: name.into(),
            resource_version: "9".into(),
        }
    }

    fn published(change: Option<Change>) -> Option<(String, bool)> {
        change.map(|c| {
            let (_, name, _, object) = c.into_parts();
            (name, object.is_some())
        })
    }

    #[test]
    fn sluice_outputs_never_reach_the_configuration() {
        let mut outputs = Outputs::new(std::iter::empty());
        let mut run = |c| published(outputs.filter("ConfigMap", c));
        assert_eq!(
            run(config_map("user", false, "1")),
            Some(("user".into(), true))
        );
        assert_eq!(run(config_map("generated", true, "2")), None);
        assert_eq!(run(config_map("generated", true, "3")), None);
        assert_eq!(run(delete("generated")), None);
        assert_eq!(run(delete("user")), Some(("user".into(), false)));
    }

    #[test]
    fn an_object_that_becomes_an_output_is_withdrawn_once() {
        let seeded = [("ns".to_string(), "old".to_string())];
        let mut outputs = Outputs::new(seeded.into_iter());
        let mut run = |c| published(outputs.filter("Secret", c));
        assert_eq!(
            run(config_map("old", true, "5")),
            Some(("old".into(), false))
        );
        assert_eq!(run(config_map("old", true, "6")), None);
        // the label removed again: configuration once more
        assert_eq!(
            run(config_map("old", false, "7")),
            Some(("old".into(), true))
        );
    }

    #[test]
    fn other_kinds_pass_unchanged() {
        let mut outputs = Outputs::new(std::iter::empty());
        let change = outputs.filter("EventTrigger", config_map("t", true, "1"));
        assert_eq!(published(change), Some(("t".into(), true)));
    }
}
