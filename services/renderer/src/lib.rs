//! The renderer service: for every EventTrigger and every cluster it selects, renders what the
//! cluster's match set asks for and publishes each desired-state unit that changed (`stage`:
//! the pair's main unit, and one unit per resource of a `oneForEvent` trigger). It reads the
//! evaluator's match units directly and keeps each set from its members.
//! Rendering failures affect only their unit and travel on as `failure_message`, so the
//! applier keeps what exists and reports the error.

pub mod plan;
pub mod stage;

pub use stage::{SetChange, Stage, UnitKey};

use anyhow::Context as _;
use futures::StreamExt;
use prost::Message as _;
use sluice_bus::{message_id, topology, AckWindow, Bus, Delivered, Outgoing};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};
use sluice_wire::match_units::{self, Applied, HeadOutcome, Unit};

use stage::content_hash;

/// Runs the renderer until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let bus_key = sluice_wire::BusKey::load(common.bus_key_file.as_deref())
        .context("failed to load the bus key")?;
    let bus = Bus::connect(sluice_bus::BusOptions::service(&common, topology::RENDERER))
        .await
        .context("failed to connect to the bus")?;
    health.require("nats", bus.connection_probe());
    let published = health.counter("sluice_renderer_desired_states_published_total");
    let (config, mut config_feed) = sluice_wire::follow_config(&bus, bus_key.as_ref()).await?;
    let mut stage = Stage::new(config, &common.sveltos_namespace);
    for delivered in bus
        .replay_state(topology::DESIRED, topology::DESIRED.subjects)
        .await?
    {
        // Remembered as rendered: what it published sealed is compared opened.
        if let Ok(state) = sluice_wire::decode_desired(&delivered, bus_key.as_ref()) {
            stage.remember_published(&state);
        }
    }
    let mut boot_sequence = 0;
    let mut last_seen = sluice_bus::Freshness::default();
    for delivered in bus
        .replay_state(topology::MATCH, topology::MATCH.subjects)
        .await?
    {
        boot_sequence = boot_sequence.max(delivered.sequence);
        // An unreadable unit is not recorded: its delivery is dead-lettered below.
        if let Ok(unit) = match_units::decode(&delivered, bus_key.as_ref()) {
            last_seen.record(&delivered);
            stage.apply(unit, delivered.sequence);
        }
    }
    let mut window = AckWindow::new(topology::PUBLISH_WINDOW);
    let boot = tokio::task::block_in_place(|| stage.recompute(None, boot_sequence));
    let outputs = desired_messages(boot, "boot", bus.payload_limit(), None, bus_key.as_ref())?;
    published.add(window.publish(&bus, outputs, Vec::new()).await? as u64);

    let mut matches = bus.durable(topology::RENDERER_MATCH, None).await?;
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
                let outputs = desired_messages(states, "config", bus.payload_limit(), None, bus_key.as_ref())?;
                published.add(window.publish(&bus, outputs, Vec::new()).await? as u64);
            }
            batch = sluice_bus::coalesce::next_batch(&mut matches), if !window.is_full() => {
                let Some(batch) = batch else { anyhow::bail!("match consumer ended") };
                // Consecutive units of one set are rendered together; a head closes the group.
                let mut groups: Vec<Group> = Vec::new();
                for (delivered, message) in sluice_bus::coalesce::fresh(topology::MATCH.name, batch, &last_seen, &mut window) {
                    last_seen.record(&delivered);
                    let unit = match match_units::decode(&delivered, bus_key.as_ref()) {
                        Ok(decoded) => decoded,
                        Err(error) => {
                            bus.park("renderer", &delivered, message, &error.to_string(), &mut window).await?;
                            continue;
                        }
                    };
                    let member = match &unit {
                        Unit::Member(m) => Some(match_units::member_id_of(m)),
                        Unit::Head(_) => None,
                    };
                    let Some((key, applied)) = stage.apply(unit, delivered.sequence) else {
                        window.push(Vec::new(), Some(message));
                        continue;
                    };
                    let open = groups.last().is_some_and(|g| {
                        !g.change.head && g.change.cluster == key.0 && g.change.event_source == key.1
                    });
                    if !open {
                        groups.push(Group { change: SetChange::new(&key), inputs: Vec::new(), sequence: 0, parent: None });
                    }
                    let group = groups.last_mut().expect("a group was pushed");
                    match applied {
                        Applied::Member { changed: true } => group.change.add_members(&stage.sets, member),
                        Applied::Member { changed: false } => {}
                        Applied::Head(HeadOutcome::Differs) => {
                            let changed = stage.sets.reread(&bus, &key, bus_key.as_ref()).await?;
                            group.change.add_members(&stage.sets, changed);
                            group.change.head = true;
                        }
                        Applied::Head(_) => group.change.head = true,
                    }
                    group.inputs.push(message);
                    group.sequence = delivered.sequence;
                    group.parent = delivered.traceparent;
                }
                for group in groups {
                    let change = &group.change;
                    let states = if change.head || !change.members.changed.is_empty() || !change.members.removed.is_empty() {
                        tokio::task::block_in_place(|| stage.recompute(Some(change), group.sequence))
                    } else {
                        Vec::new()
                    };
                    let outputs = desired_messages(states, "match", bus.payload_limit(), group.parent.as_deref(), bus_key.as_ref())?;
                    published.add(window.publish(&bus, outputs, group.inputs).await? as u64);
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
                let outputs = desired_messages(states, "cloudevent", bus.payload_limit(), delivered.traceparent.as_deref(), bus_key.as_ref())?;
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
    drop((matches, cloud_events));
    bus.close().await;
    Ok(())
}

/// Match units of one set read together, and the inputs to ack once their outputs are stored.
struct Group {
    change: SetChange,
    inputs: Vec<sluice_bus::Message>,
    /// Stream sequence of the last unit.
    sequence: u64,
    /// Trace context of the last unit.
    parent: Option<String>,
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

/// The messages that publish `states`, each with a message id that names its content; Secrets
/// sealed with `key` (without one, a unit with a Secret is published as its failure,
/// `sluice_wire::seal_desired`); a state too large for one message is published as its
/// failure ([`bounded`]).
fn desired_messages(
    states: Vec<pb::DesiredState>,
    cause: &str,
    limit: usize,
    parent: Option<&str>,
    key: Option<&sluice_wire::BusKey>,
) -> anyhow::Result<Vec<Outgoing>> {
    let mut outputs = Vec::with_capacity(states.len());
    for state in states {
        let rendered_hash = content_hash(&state);
        let state = sluice_wire::seal_desired(state, key);
        let state = bounded(state, limit);
        // The id names the content; of a sealed state, the rendered one (a sealed payload
        // differs each time it is sealed).
        let hash = if state
            .objects
            .iter()
            .any(|o| !o.sealed_object_json.is_empty())
        {
            rendered_hash
        } else {
            content_hash(&state)
        };
        let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state")?;
        let tokens = sluice_wire::cluster_tokens(&cluster);
        let subject =
            if !state.cloud_event_source.is_empty() || !state.cloud_event_subject.is_empty() {
                topology::desired_cloudevent_subject(
                    &state.event_trigger,
                    &tokens,
                    &state.cloud_event_source,
                    &state.cloud_event_subject,
                )
            } else if !state.resource_name.is_empty() {
                topology::desired_resource_subject(
                    &state.event_trigger,
                    &tokens,
                    &state.resource_namespace,
                    &state.resource_name,
                )
            } else {
                topology::desired_subject(&state.event_trigger, &tokens)
            };
        if !state.failure_message.is_empty() {
            tracing::warn!(event_trigger = %state.event_trigger, cluster = %cluster, failure = %state.failure_message, "rendering failed");
        }
        let sequence = state.source_sequence.to_string();
        outputs.push(Outgoing {
            ttl: None,
            msg_id: message_id(&["desired", &subject, cause, &sequence, &hash]),
            subject,
            payload: sluice_wire::encode(&state),
            traceparent: Some(sluice_runtime::child_traceparent(parent)),
        });
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::{ClusterId, ClusterType};
    use stage::managed_object;

    /// Trigger `t`'s unit for cluster `default/c` of EventSource `es` with one object.
    fn unit(object: serde_json::Value) -> pb::DesiredState {
        pb::DesiredState {
            event_trigger: "t".into(),
            cluster: Some(sluice_wire::cluster_ref(&ClusterId {
                cluster_type: ClusterType::Sveltos,
                namespace: "default".into(),
                name: "c".into(),
            })),
            event_source: "es".into(),
            objects: vec![managed_object(object)],
            ..Default::default()
        }
    }

    #[test]
    fn a_desired_state_too_large_becomes_its_failure() {
        let state = unit(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "projectsveltos"},
            "data": {"k": "v".repeat(200)},
        }));
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

    #[test]
    fn secrets_leave_sealed_named_by_their_rendered_content_or_as_a_failure_without_a_key() {
        let state = unit(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "x", "namespace": "projectsveltos"},
            "data": {"k": "c2VjcmV0LXZhbHVl"},
        }));
        let key = sluice_wire::BusKey::from_bytes(&[9; 32]).expect("key");
        let publish = |key| {
            desired_messages(vec![state.clone()], "report", 1 << 20, None, key)
                .expect("messages")
                .remove(0)
        };
        let (first, second) = (publish(Some(&key)), publish(Some(&key)));
        assert_ne!(first.payload, second.payload, "a fresh nonce each time");
        assert_eq!(
            first.msg_id, second.msg_id,
            "the id names the rendered content"
        );
        assert!(!first.payload.windows(8).any(|w| w == b"c2VjcmV0"));
        let delivered = Delivered {
            subject: first.subject.clone(),
            sequence: 1,
            payload: first.payload.clone(),
            traceparent: None,
        };
        assert_eq!(
            sluice_wire::decode_desired(&delivered, Some(&key)).expect("decodes"),
            state
        );
        let unkeyed = publish(None);
        let failed: pb::DesiredState =
            prost::Message::decode(unkeyed.payload.as_ref()).expect("decodes");
        assert!(failed.objects.is_empty());
        assert!(failed
            .failure_message
            .starts_with("eventtrigger t: Secret projectsveltos/x cannot go on the bus"));
    }
}
