//! The applier service: makes the management cluster hold exactly what the renderer wants for
//! each (EventTrigger, cluster): server-side applies the desired ClusterProfiles and
//! instantiated ConfigMaps/Secrets, and deletes what that pair owns (found by its labels) and
//! no longer wants. Foreign objects are never touched: only the owner labels select.

pub mod plan;
pub mod status;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use serde_json::Value;
use sluice_bus::{message_id, topology, AckWindow, Bus, Outgoing};
use sluice_domain::naming;
use sluice_kube::apply::{self, Kind};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};

const FIELD_MANAGER: &str = "sluice-applier";
const STATUS_FIELD_MANAGER: &str = "sluice-applier-status";
/// Writes of one desired state in flight at once (per phase).
const WRITE_CONCURRENCY: usize = 16;

/// Kinds the applier owns, in deletion order (ClusterProfiles before what they reference).
const OWNED: [(&str, &str); 3] = [
    ("config.projectsveltos.io/v1beta1", "ClusterProfile"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
];

/// (kind, namespace, name) of an owned object.
type ObjectId = (String, String, String);

/// Which unit of a (trigger, cluster) a desired state describes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Unit {
    /// What the match set renders to.
    Main,
    /// What one CloudEvent (by `source` and `subject`) created.
    CloudEvent { source: String, subject: String },
}

impl Unit {
    fn of(state: &pb::DesiredState) -> Unit {
        if state.cloud_event_source.is_empty() && state.cloud_event_subject.is_empty() {
            Unit::Main
        } else {
            Unit::CloudEvent {
                source: state.cloud_event_source.clone(),
                subject: state.cloud_event_subject.clone(),
            }
        }
    }
}

struct Applier {
    client: kube::Client,
    kinds: HashMap<(String, String), Kind>,
    /// Per desired-state subject: what this process last applied, with content hashes. An
    /// unchanged object is not applied again, and stale objects are found without a LIST. A
    /// subject seen for the first time (or after an error) is listed from the server.
    applied: HashMap<String, BTreeMap<ObjectId, String>>,
}

fn object_id(object: &Value) -> ObjectId {
    let r = sluice_wire::object_ref(object);
    (r.kind, r.namespace, r.name)
}

fn content_hash(object: &Value) -> String {
    let bytes = serde_json::to_vec(object).unwrap_or_default();
    sluice_bus::message_id(&[&String::from_utf8_lossy(&bytes)])
}

impl Applier {
    async fn kind(&mut self, api_version: &str, kind: &str) -> sluice_kube::Result<Kind> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.kinds.get(&key) {
            return Ok(found.clone());
        }
        let resolved = apply::resolve(&self.client, api_version, kind).await?;
        self.kinds.insert(key, resolved.clone());
        Ok(resolved)
    }

    /// Executes one desired state. Errors are transient (the input is retried).
    async fn execute(
        &mut self,
        subject: &str,
        state: &pb::DesiredState,
    ) -> sluice_kube::Result<pb::ApplyResult> {
        let outcome = self.execute_inner(subject, state).await;
        if outcome.is_err() {
            // The server may hold anything now: list again next time.
            self.applied.remove(subject);
        }
        outcome
    }

    async fn execute_inner(
        &mut self,
        subject: &str,
        state: &pb::DesiredState,
    ) -> sluice_kube::Result<pb::ApplyResult> {
        let cluster = match sluice_wire::cluster_id(state.cluster.as_ref(), "desired state") {
            Ok(cluster) => cluster,
            Err(_) => return Err(sluice_kube::Error::Malformed("cluster")),
        };
        let mut result = pb::ApplyResult {
            event_trigger: state.event_trigger.clone(),
            cluster: state.cluster.clone(),
            failure_message: state.failure_message.clone(),
            source_sequence: state.source_sequence,
            removed: state.removed,
            event_trigger_kind: state.event_trigger_kind.clone(),
            event_source: state.event_source.clone(),
            cloud_event: !state.cloud_event_source.is_empty()
                || !state.cloud_event_subject.is_empty(),
            ..Default::default()
        };
        if !state.failure_message.is_empty() {
            // Keep what exists: a broken template must not withdraw working add-ons.
            return Ok(result);
        }
        let desired: Vec<Value> = if state.removed {
            Vec::new()
        } else {
            state
                .objects
                .iter()
                .filter_map(|o| serde_json::from_slice(&o.object_json).ok())
                .collect()
        };
        // A CloudEvent unit owns only what carries its CloudEvent labels; the trigger's main
        // unit owns the rest, and on removal everything with the trigger's labels.
        let unit = Unit::of(state);
        let mut owner = naming::owner_labels(&state.event_trigger, &cluster);
        if let Unit::CloudEvent { source, subject } = &unit {
            owner.extend(naming::cloud_event_labels(source, subject));
        }
        let cached = if state.removed {
            None
        } else {
            self.applied.remove(subject)
        };
        let mut known = match cached {
            Some(known) => known,
            // A CloudEvent's Create needs no LIST: its objects have deterministic names and
            // are server-side applied; anything an earlier rendering of the same unit left under
            // another name is found by labels at its Delete or with the trigger.
            None if !state.removed && unit != Unit::Main => BTreeMap::new(),
            None => {
                let include_cloud_events = state.removed || unit != Unit::Main;
                self.list_owned(&owner, include_cloud_events).await?
            }
        };
        let existing: Vec<Value> = known
            .keys()
            .map(|(kind, namespace, name)| {
                let api_version = OWNED
                    .iter()
                    .find(|(_, k)| k == kind)
                    .map_or("v1", |(a, _)| *a);
                serde_json::json!({"apiVersion": api_version, "kind": kind,
                                   "metadata": {"namespace": namespace, "name": name}})
            })
            .collect();
        let steps = plan::plan(&desired, &existing);
        // Referenced objects before the profiles that point at them, profiles deleted before
        // what they referenced: each phase runs its writes concurrently.
        let (references, profiles): (Vec<&Value>, Vec<&Value>) = steps
            .apply
            .iter()
            .filter(|o| known.get(&object_id(o)) != Some(&content_hash(o)))
            .partition(|o| o.get("kind").and_then(Value::as_str) != Some("ClusterProfile"));
        for phase in [references, profiles] {
            let mut writes = Vec::with_capacity(phase.len());
            for object in phase {
                let r = sluice_wire::object_ref(object);
                let kind = self.kind(&r.api_version, &r.kind).await?;
                writes.push((object, r, kind));
            }
            let client = &self.client;
            let outcomes: Vec<_> = futures::stream::iter(writes)
                .map(|(object, r, kind)| async move {
                    apply::apply(client, &kind, object, FIELD_MANAGER)
                        .await
                        .map(|_| (object, r))
                })
                .buffer_unordered(WRITE_CONCURRENCY)
                .collect()
                .await;
            let mut failure = None;
            for outcome in outcomes {
                match outcome {
                    Ok((object, r)) => {
                        known.insert(object_id(object), content_hash(object));
                        result.applied.push(r);
                    }
                    Err(error) => failure = Some(error),
                }
            }
            if let Some(error) = failure {
                return Err(error);
            }
        }
        let (profiles, references): (Vec<&pb::ObjectRef>, Vec<&pb::ObjectRef>) = steps
            .delete
            .iter()
            .partition(|r| r.kind == "ClusterProfile");
        for phase in [profiles, references] {
            let mut deletes = Vec::with_capacity(phase.len());
            for r in phase {
                deletes.push((r, self.kind(&r.api_version, &r.kind).await?));
            }
            let client = &self.client;
            let outcomes: Vec<_> = futures::stream::iter(deletes)
                .map(|(r, kind)| async move {
                    apply::delete(client, &kind, &r.namespace, &r.name)
                        .await
                        .map(|()| r)
                })
                .buffer_unordered(WRITE_CONCURRENCY)
                .collect()
                .await;
            for outcome in outcomes {
                let r = outcome?;
                known.remove(&(r.kind.clone(), r.namespace.clone(), r.name.clone()));
                result.deleted.push(r.clone());
            }
        }
        if state.removed && unit == Unit::Main {
            // Everything CloudEvents created for this trigger and cluster is gone with it.
            let prefix = format!("{subject}.ce.");
            self.applied.retain(|s, _| !s.starts_with(&prefix));
        } else {
            self.applied.insert(subject.to_string(), known);
        }
        Ok(result)
    }

    /// Writes a trigger's status and holds or releases its finalizer. Failures are logged:
    /// the next change of the trigger writes again.
    async fn write_status(&mut self, statuses: &status::Statuses, trigger: &str) {
        let kind_name = statuses.kind(trigger).to_string();
        let outcome = async {
            let kind = self
                .kind(status::api_version(&kind_name), &kind_name)
                .await?;
            let owns = statuses.owns_anything(trigger);
            if owns
                && !apply::set_finalizer(&self.client, &kind, "", trigger, status::FINALIZER, true)
                    .await?
            {
                return Ok(()); // the trigger is gone
            }
            let written = apply::apply_status(
                &self.client,
                &kind,
                "",
                trigger,
                &statuses.status_object(trigger),
                STATUS_FIELD_MANAGER,
            )
            .await;
            if let Err(error) = written {
                if !error.is_not_found() {
                    return Err(error);
                }
            }
            if !owns {
                apply::set_finalizer(&self.client, &kind, "", trigger, status::FINALIZER, false)
                    .await?;
            }
            Ok::<(), sluice_kube::Error>(())
        }
        .await;
        if let Err(error) = outcome {
            tracing::warn!(event_trigger = %trigger, error = %error, "failed to write EventTrigger status");
        }
    }

    /// Removes the finalizer from a trigger that is being deleted and for which sluice owns
    /// nothing (any more).
    async fn release_if_done(
        &mut self,
        statuses: &status::Statuses,
        delivered: &sluice_bus::Delivered,
    ) {
        let Ok(config) = sluice_wire::decode::<pb::ConfigObject>("ConfigObject", delivered) else {
            return;
        };
        let Ok(object) = serde_json::from_slice::<Value>(&config.object_json) else {
            return;
        };
        let held = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|f| f == status::FINALIZER));
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        if config.deleted || !held || !deleting || statuses.owns_anything(&config.name) {
            return;
        }
        let released = async {
            let kind = self
                .kind(status::api_version(&config.kind), &config.kind)
                .await?;
            apply::set_finalizer(
                &self.client,
                &kind,
                "",
                &config.name,
                status::FINALIZER,
                false,
            )
            .await
        }
        .await;
        if let Err(error) = released {
            tracing::warn!(event_trigger = %config.name, error = %error, "failed to release the finalizer");
        }
    }

    /// What the server holds for an owner (content unknown: applied again once). Objects a
    /// CloudEvent created belong to their own unit unless `include_cloud_events`.
    async fn list_owned(
        &mut self,
        owner: &BTreeMap<String, String>,
        include_cloud_events: bool,
    ) -> sluice_kube::Result<BTreeMap<ObjectId, String>> {
        let mut known = BTreeMap::new();
        for (api_version, kind_name) in OWNED {
            let kind = self.kind(api_version, kind_name).await?;
            for object in apply::list_labelled(&self.client, &kind, owner).await? {
                if !include_cloud_events
                    && object
                        .pointer("/metadata/labels")
                        .and_then(|l| l.get(naming::LABEL_CE_SOURCE))
                        .is_some()
                {
                    continue;
                }
                let mut id = object_id(&object);
                if id.0.is_empty() {
                    id.0 = kind_name.to_string();
                }
                known.insert(id, String::new());
            }
        }
        Ok(known)
    }
}

/// Runs the applier until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let bus = Bus::connect(&common.nats_url)
        .await
        .context("failed to connect to the bus")?;
    let client = sluice_kube::client::management(
        common.kubeconfig.as_deref(),
        common.kube_context.as_deref(),
    )
    .await
    .context("failed to build the management cluster client")?;
    let applied = health.counter("sluice_applier_states_applied_total");
    let errors = health.counter("sluice_applier_errors_total");
    let mut applier = Applier {
        client,
        kinds: HashMap::new(),
        applied: HashMap::new(),
    };
    // The statuses as the last results left them, so a restart writes from the whole picture.
    let mut statuses = status::Statuses::default();
    for delivered in bus
        .replay_state(topology::APPLIED, topology::APPLIED.subjects)
        .await?
    {
        if let Ok(result) = sluice_wire::decode::<pb::ApplyResult>("ApplyResult", &delivered) {
            statuses.record(&result);
        }
    }
    // Triggers being deleted: one sluice never owned anything for (or whose objects are gone
    // already) is released at once, even if another installation put the finalizer there.
    let mut deleting = {
        let mut initial = Vec::new();
        let mut feeds = Vec::new();
        for kind in ["EventTrigger", "EventBasedAddOn"] {
            let (replayed, live) = bus
                .follow_state(topology::CONFIG, &topology::config_kind_filter(kind))
                .await?;
            initial.extend(replayed);
            feeds.push(live);
        }
        for delivered in &initial {
            applier.release_if_done(&statuses, delivered).await;
        }
        futures::stream::select_all(feeds)
    };
    let mut desired = bus.durable(topology::APPLIER_DESIRED, None).await?;
    let mut window = AckWindow::new(topology::PUBLISH_WINDOW);
    let mut last_seen = sluice_bus::Freshness::default();
    health.set_ready(true);
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            trigger = deleting.next() => {
                let Some(Ok(delivered)) = trigger else { continue };
                applier.release_if_done(&statuses, &delivered).await;
            }
            batch = sluice_bus::coalesce::next_batch(&mut desired), if !window.is_full() => {
                let Some(batch) = batch else { anyhow::bail!("desired-state consumer ended") };
                // Desired states are level-based: only the newest per subject is applied.
                let batch = sluice_bus::coalesce::coalesce(topology::DESIRED.name, batch);
                for error in &batch.unreadable {
                    tracing::warn!(error = %error, "skipping a desired state without stream metadata");
                }
                for message in batch.superseded {
                    window.push(Vec::new(), Some(message));
                }
                for (delivered, message) in batch.latest {
                    if last_seen.is_stale(&delivered) {
                        window.push(Vec::new(), Some(message));
                        continue;
                    }
                    let state = match sluice_wire::decode::<pb::DesiredState>("DesiredState", &delivered) {
                        Ok(decoded) => decoded,
                        Err(error) => {
                            let reason = error.to_string();
                            tracing::warn!(subject = %delivered.subject, error = %reason, "dead-lettering unreadable desired state");
                            let parked = bus.dead_letter("applier", &delivered.subject, delivered.payload.clone(), &reason, &[]).await?;
                            window.push(vec![parked], Some(message));
                            continue;
                        }
                    };
                    let result = match applier.execute(&delivered.subject, &state).await {
                        Ok(result) => result,
                        Err(error) => {
                            errors.inc();
                            tracing::warn!(event_trigger = %state.event_trigger, error = %error, "failed to apply, will retry");
                            // Kinds may have changed (a CRD re-created): resolve again next time.
                            applier.kinds.clear();
                            let nak = async_nats::jetstream::AckKind::Nak(Some(Duration::from_millis(500)));
                            let _ = message.ack_with(nak).await;
                            continue;
                        }
                    };
                    applied.inc();
                    last_seen.record(&delivered);
                    if state.removed && Unit::of(&state) == Unit::Main {
                        let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state")?;
                        let filter = topology::desired_cloudevent_filter(
                            &state.event_trigger,
                            &sluice_wire::cluster_tokens(&cluster),
                        );
                        if let Err(error) = bus.purge(topology::DESIRED, &filter).await {
                            tracing::warn!(error = %error, %filter, "failed to purge CloudEvent units");
                        }
                    }
                    tracing::info!(
                        event_trigger = %state.event_trigger,
                        applied = result.applied.len(),
                        deleted = result.deleted.len(),
                        failure = %result.failure_message,
                        "desired state applied"
                    );
                    let Some(subject) = topology::applied_subject_for(&delivered.subject) else {
                        anyhow::bail!("desired state on a foreign subject {}", delivered.subject);
                    };
                    let ack = bus
                        .publish(Outgoing {
                            msg_id: message_id(&["applied", &subject, &delivered.sequence.to_string()]),
                            subject,
                            payload: sluice_wire::encode(&result),
                            traceparent: Some(sluice_runtime::child_traceparent(delivered.traceparent.as_deref())),
                        })
                        .await?;
                    window.push(vec![ack], Some(message));
                    if statuses.record(&result) {
                        applier.write_status(&statuses, &result.event_trigger).await;
                    }
                }
            }
            settled = window.next(), if !window.is_empty() => {
                if let Some(sluice_bus::window::Settled::Retried(error)) = settled {
                    tracing::warn!(error = %error, "result not stored, input will be redelivered");
                }
            }
        }
    }
    window.drain().await?;
    Ok(())
}
