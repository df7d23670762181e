//! The renderer service: for every EventTrigger and every cluster it selects, renders the
//! complete desired state from the cluster's reported match set and publishes it when it
//! changes. Rendering failures affect only that (EventTrigger, cluster) and travel on as
//! `failure_message`, so the applier keeps what exists and reports the error.

pub mod plan;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context as _;
use futures::StreamExt;
use prost::Message as _;
use sha2::{Digest, Sha256};
use sluice_bus::{message_id, topology, AckWindow, Bus, Delivered, Outgoing};
use sluice_domain::cluster::ClusterId;
use sluice_domain::config::ConfigState;
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};
use sluice_template::TemplateCache;

/// (EventTrigger name, cluster).
pub type DesiredKey = (String, ClusterId);

/// The renderer's state: configuration, latest reports, and what it last published.
pub struct Stage {
    pub config: ConfigState,
    reports: BTreeMap<(ClusterId, String), pb::MatchSet>,
    /// Content hash and trigger kind of each desired state last published.
    published: BTreeMap<DesiredKey, (String, String)>,
    templates: TemplateCache,
    sveltos_namespace: String,
}

impl Stage {
    pub fn new(config: ConfigState, sveltos_namespace: &str) -> Stage {
        Stage {
            config,
            reports: BTreeMap::new(),
            published: BTreeMap::new(),
            templates: TemplateCache::new(4096),
            sveltos_namespace: sveltos_namespace.to_string(),
        }
    }

    /// Remembers a desired state already on the bus (startup replay).
    pub fn remember_published(&mut self, state: &pb::DesiredState) {
        if !state.cloud_event_source.is_empty() || !state.cloud_event_subject.is_empty() {
            // CloudEvent units are not re-rendered: they keep what their event created.
            return;
        }
        if let Ok(cluster) = sluice_wire::cluster_id(state.cluster.as_ref(), "desired stream") {
            let key = (state.event_trigger.clone(), cluster);
            if state.removed {
                self.published.remove(&key);
            } else {
                self.published
                    .insert(key, (content_hash(state), state.event_trigger_kind.clone()));
            }
        }
    }

    /// Records a report; returns the cluster and EventSource it concerns.
    pub fn set_report(&mut self, report: pb::MatchSet) -> Option<(ClusterId, String)> {
        let cluster = sluice_wire::cluster_id(report.cluster.as_ref(), "report").ok()?;
        let key = (cluster, report.event_source.clone());
        if report.removed {
            self.reports.remove(&key);
        } else {
            self.reports.insert(key.clone(), report);
        }
        Some(key)
    }

    /// Renders every (trigger, cluster) in scope and returns the desired states that changed,
    /// plus removals for keys that no longer exist.
    pub fn recompute(
        &mut self,
        scope: Option<&(ClusterId, String)>,
        sequence: u64,
    ) -> Vec<pb::DesiredState> {
        let mut current: BTreeSet<DesiredKey> = BTreeSet::new();
        let mut out = Vec::new();
        for trigger in self.config.valid_event_triggers() {
            for cluster_id in self.config.source_clusters(trigger) {
                current.insert((trigger.name.clone(), cluster_id.clone()));
                let Some(cluster) = self.config.clusters.get(&cluster_id) else {
                    continue;
                };
                let event_source =
                    sluice_wire::names::event_source_name(trigger, cluster, &self.templates);
                if let Some((c, es)) = scope {
                    if *c != cluster_id || event_source.as_ref() != Ok(es) {
                        continue;
                    }
                }
                let mut state = pb::DesiredState {
                    event_trigger: trigger.name.clone(),
                    cluster: Some(sluice_wire::cluster_ref(&cluster_id)),
                    event_source: event_source.clone().unwrap_or_default(),
                    event_trigger_kind: trigger.kind.as_str().to_string(),
                    source_sequence: sequence,
                    ..Default::default()
                };
                let report = match &event_source {
                    Ok(es) => self.reports.get(&(cluster_id.clone(), es.clone())),
                    Err(error) => {
                        state.failure_message = error.clone();
                        None
                    }
                };
                match report {
                    None => {}
                    Some(report) if !report.failure_message.is_empty() => {
                        state.failure_message = report.failure_message.clone();
                    }
                    Some(report) => {
                        let ctx = plan::Context {
                            config: &self.config,
                            templates: &self.templates,
                            sveltos_namespace: &self.sveltos_namespace,
                        };
                        match plan::desired_state(&ctx, trigger, cluster, report) {
                            Ok(objects) => {
                                state.objects = objects
                                    .into_iter()
                                    .map(|d| managed_object(d.object))
                                    .collect();
                            }
                            Err(error) => state.failure_message = error.to_string(),
                        }
                    }
                }
                let key = (trigger.name.clone(), cluster_id.clone());
                let hash = content_hash(&state);
                if self.published.get(&key).map(|(h, _)| h) != Some(&hash) {
                    self.published
                        .insert(key, (hash, trigger.kind.as_str().to_string()));
                    out.push(state);
                }
            }
        }
        let gone: Vec<DesiredKey> = self
            .published
            .keys()
            .filter(|k| !current.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            let kind = self.published.remove(&key).map(|(_, kind)| kind);
            out.push(pb::DesiredState {
                event_trigger: key.0.clone(),
                cluster: Some(sluice_wire::cluster_ref(&key.1)),
                removed: true,
                event_trigger_kind: kind.unwrap_or_default(),
                source_sequence: sequence,
                ..Default::default()
            });
        }
        out
    }
}

impl Stage {
    /// What one matched CloudEvent does for every trigger deploying its EventSource to its
    /// cluster: a desired state for that CloudEvent's unit (objects for `Create`, `removed` for
    /// `Delete`, or the rendering failure).
    pub fn cloud_event(
        &self,
        matched: &pb::CloudEventMatch,
        sequence: u64,
    ) -> Vec<pb::DesiredState> {
        let Ok(cluster_id) = sluice_wire::cluster_id(matched.cluster.as_ref(), "CloudEvent match")
        else {
            return Vec::new();
        };
        let Some(cluster) = self.config.clusters.get(&cluster_id) else {
            return Vec::new();
        };
        let Ok(event) = serde_json::from_slice::<serde_json::Value>(&matched.event_json) else {
            tracing::warn!(cluster = %cluster_id, "dropping a CloudEvent match that is not JSON");
            return Vec::new();
        };
        let attribute = |name: &str| {
            event
                .get(name)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let ctx = plan::Context {
            config: &self.config,
            templates: &self.templates,
            sveltos_namespace: &self.sveltos_namespace,
        };
        let mut out = Vec::new();
        for trigger in self.config.valid_event_triggers() {
            if sluice_wire::names::event_source_name(trigger, cluster, &self.templates).as_ref()
                != Ok(&matched.event_source)
                || !self.config.source_clusters(trigger).contains(&cluster_id)
            {
                continue;
            }
            let mut state = pb::DesiredState {
                event_trigger: trigger.name.clone(),
                cluster: matched.cluster.clone(),
                event_source: matched.event_source.clone(),
                source_sequence: sequence,
                cloud_event_source: attribute("source"),
                cloud_event_subject: attribute("subject"),
                event_trigger_kind: trigger.kind.as_str().to_string(),
                ..Default::default()
            };
            match plan::cloud_event_state(&ctx, trigger, cluster, &matched.event_source, &event) {
                Ok(outcome) if outcome.action == plan::CloudEventAction::Delete => {
                    state.removed = true;
                }
                Ok(outcome) => {
                    state.objects = outcome
                        .objects
                        .into_iter()
                        .map(|d| managed_object(d.object))
                        .collect();
                }
                Err(error) => state.failure_message = error.to_string(),
            }
            out.push(state);
        }
        out
    }
}

fn managed_object(object: serde_json::Value) -> pb::ManagedObject {
    let r = sluice_wire::object_ref(&object);
    pb::ManagedObject {
        api_version: r.api_version,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
        object_json: serde_json::to_vec(&object).unwrap_or_default(),
    }
}

fn content_hash(state: &pb::DesiredState) -> String {
    let mut hasher = Sha256::new();
    hasher.update(state.event_source.as_bytes());
    for o in &state.objects {
        hasher.update(&o.object_json);
        hasher.update([0]);
    }
    hasher.update(state.failure_message.as_bytes());
    hasher.update([u8::from(state.removed)]);
    format!("{:x}", hasher.finalize())
}

/// Runs the renderer until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let bus = Bus::connect(&common.nats_url)
        .await
        .context("failed to connect to the bus")?;
    let published = health.counter("sluice_renderer_desired_states_published_total");
    let (config, mut config_feed) = sluice_wire::follow_config(&bus).await?;
    let mut stage = Stage::new(config, &common.sveltos_namespace);
    for delivered in bus
        .replay_state(topology::DESIRED, topology::DESIRED.subjects)
        .await?
    {
        if let Ok(state) = sluice_wire::decode::<pb::DesiredState>("DesiredState", &delivered) {
            stage.remember_published(&state);
        }
    }
    let mut boot_sequence = 0;
    let mut last_seen = sluice_bus::Freshness::default();
    for delivered in bus
        .replay_state(topology::REPORT, topology::REPORT.subjects)
        .await?
    {
        boot_sequence = boot_sequence.max(delivered.sequence);
        // An unreadable report is not recorded: its delivery is dead-lettered below.
        if let Ok(report) = sluice_wire::decode::<pb::MatchSet>("MatchSet", &delivered) {
            last_seen.record(&delivered);
            stage.set_report(report);
        }
    }
    let mut window = AckWindow::new(topology::PUBLISH_WINDOW);
    let boot = tokio::task::block_in_place(|| stage.recompute(None, boot_sequence));
    let outputs = desired_messages(boot, "boot", bus.payload_limit(), None)?;
    published.add(window.publish(&bus, outputs, Vec::new()).await? as u64);

    let mut reports = bus.durable(topology::RENDERER_REPORT, None).await?;
    let mut cloud_events = bus.durable(topology::RENDERER_CEMATCH, None).await?;
    health.set_ready(true);
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            updates = config_feed.next_batch() => {
                let Some(updates) = updates else { anyhow::bail!("configuration feed ended") };
                // A burst of configuration changes is applied whole and rendered once.
                let mut changed = None;
                for update in updates {
                    let update = match update {
                        Ok(update) => update,
                        Err(error) => {
                            tracing::warn!(error = %error, "skipping config message");
                            continue;
                        }
                    };
                    if update.apply_to(&mut stage.config) {
                        changed = Some(update.sequence);
                    }
                }
                let Some(sequence) = changed else { continue };
                let states = tokio::task::block_in_place(|| stage.recompute(None, sequence));
                let outputs = desired_messages(states, "config", bus.payload_limit(), None)?;
                published.add(window.publish(&bus, outputs, Vec::new()).await? as u64);
            }
            batch = sluice_bus::coalesce::next_batch(&mut reports), if !window.is_full() => {
                let Some(batch) = batch else { anyhow::bail!("report consumer ended") };
                // Reports are level-based: only the newest per subject is rendered.
                for (delivered, message) in sluice_bus::coalesce::fresh(topology::REPORT.name, batch, &last_seen, &mut window) {
                    last_seen.record(&delivered);
                    let report = match sluice_wire::decode::<pb::MatchSet>("MatchSet", &delivered) {
                        Ok(decoded) => decoded,
                        Err(error) => {
                            bus.park("renderer", &delivered, message, &error.to_string(), &mut window).await?;
                            continue;
                        }
                    };
                    let scope = stage.set_report(report);
                    let states = tokio::task::block_in_place(|| stage.recompute(scope.as_ref(), delivered.sequence));
                    let outputs = desired_messages(states, "report", bus.payload_limit(), Some(&delivered))?;
                    published.add(window.publish(&bus, outputs, vec![message]).await? as u64);
                }
            }
            message = cloud_events.next(), if !window.is_full() => {
                let Some(message) = message else { anyhow::bail!("CloudEvent match consumer ended") };
                let Ok(message) = message else { continue };
                let delivered = Delivered::from_message(topology::CEMATCH.name, &message)?;
                let matched = match sluice_wire::decode::<pb::CloudEventMatch>("CloudEventMatch", &delivered) {
                    Ok(decoded) => decoded,
                    Err(error) => {
                        bus.park("renderer", &delivered, message, &error.to_string(), &mut window).await?;
                        continue;
                    }
                };
                let states = tokio::task::block_in_place(|| stage.cloud_event(&matched, delivered.sequence));
                let outputs = desired_messages(states, "cloudevent", bus.payload_limit(), Some(&delivered))?;
                published.add(window.publish(&bus, outputs, vec![message]).await? as u64);
            }
            settled = window.next(), if !window.is_empty() => {
                if let Some(sluice_bus::window::Settled::Retried(error)) = settled {
                    tracing::warn!(error = %error, "output not stored, input will be redelivered");
                }
            }
        }
    }
    window.drain().await?;
    drop((reports, cloud_events));
    bus.close().await;
    Ok(())
}

/// The desired state that replaces `state` when it does not fit in one message of `limit`
/// bytes: no objects, and a failure naming the size and the limit, so the applier keeps what
/// exists and the trigger's status shows why. `state` itself when it fits.
pub fn bounded(state: pb::DesiredState, limit: usize) -> pb::DesiredState {
    let size = state.encoded_len();
    if size <= limit {
        return state;
    }
    let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state")
        .map_or_else(|_| "?".to_string(), |c| c.to_string());
    pb::DesiredState {
        objects: Vec::new(),
        failure_message: format!(
            "eventtrigger {}: the desired state for cluster {cluster} ({} objects) takes {size} \
             bytes, over the {limit} bytes one bus message may carry (nats max_payload)",
            state.event_trigger,
            state.objects.len(),
        ),
        ..state
    }
}

/// The messages that publish `states`, each with a message id that names its content; a state
/// too large for one message is published as its failure ([`bounded`]).
fn desired_messages(
    states: Vec<pb::DesiredState>,
    cause: &str,
    limit: usize,
    input: Option<&Delivered>,
) -> anyhow::Result<Vec<Outgoing>> {
    let mut outputs = Vec::with_capacity(states.len());
    for state in states {
        let state = bounded(state, limit);
        let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state")?;
        let tokens = sluice_wire::cluster_tokens(&cluster);
        let subject = if state.cloud_event_source.is_empty() && state.cloud_event_subject.is_empty()
        {
            topology::desired_subject(&state.event_trigger, &tokens)
        } else {
            topology::desired_cloudevent_subject(
                &state.event_trigger,
                &tokens,
                &state.cloud_event_source,
                &state.cloud_event_subject,
            )
        };
        if !state.failure_message.is_empty() {
            tracing::warn!(event_trigger = %state.event_trigger, cluster = %cluster, failure = %state.failure_message, "rendering failed");
        }
        let sequence = state.source_sequence.to_string();
        let hash = content_hash(&state);
        outputs.push(Outgoing {
            msg_id: message_id(&["desired", &subject, cause, &sequence, &hash]),
            subject,
            payload: sluice_wire::encode(&state),
            traceparent: Some(sluice_runtime::child_traceparent(
                input.and_then(|d| d.traceparent.as_deref()),
            )),
        });
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::ClusterType;

    #[test]
    fn a_desired_state_too_large_becomes_its_failure() {
        let state = pb::DesiredState {
            event_trigger: "t".into(),
            cluster: Some(sluice_wire::cluster_ref(&ClusterId {
                cluster_type: ClusterType::Sveltos,
                namespace: "default".into(),
                name: "c".into(),
            })),
            event_source: "es".into(),
            objects: vec![managed_object(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "projectsveltos"},
                "data": {"k": "v".repeat(200)},
            }))],
            ..Default::default()
        };
        assert_eq!(bounded(state.clone(), 10_000), state, "fits");
        let size = state.encoded_len();
        let failed = bounded(state.clone(), 100);
        assert!(failed.objects.is_empty());
        assert_eq!(
            failed.failure_message,
            format!(
                "eventtrigger t: the desired state for cluster sveltos:default/c (1 objects) \
                 takes {size} bytes, over the 100 bytes one bus message may carry (nats \
                 max_payload)"
            )
        );
        assert_eq!(
            (failed.event_trigger.as_str(), failed.event_source.as_str()),
            ("t", "es")
        );
    }
}
