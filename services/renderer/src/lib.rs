//! The renderer service: for every EventTrigger and every cluster it selects, renders what the
//! cluster's match set asks for and publishes each desired-state unit that changed (`stage`:
//! the pair's main unit, and one unit per resource of a `oneForEvent` trigger). It reads the
//! evaluator's match units directly and keeps each set from its members.
//! Rendering failures affect only their unit and travel on as `failure_message`, so the
//! applier keeps what exists and reports the error.

pub mod consumers;
pub mod group;
pub mod order;
pub mod plan;
pub mod stage;

pub use stage::{SetChange, Stage, UnitKey};

use std::sync::Arc;

use prost::Message as _;
use sluice_bus::runner::publish::publish_stored;
use sluice_bus::runner::{Hooks, Output, Runner};
use sluice_bus::{message_id, topology, Outgoing};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};
use sluice_wire::match_units;
use sluice_wire::service::PartitionArgs;
use tokio::sync::Mutex;

use consumers::{CloudEventStage, MatchStage, Rendering};

use stage::content_hash;

/// Runs the whole renderer until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    run_partition(common, PartitionArgs::default(), health, token).await
}

/// Runs the renderer, or one partition of it (ADR 0051), until `token` is cancelled. A
/// partition renders every trigger for its own clusters: it reads their match units only,
/// and publishes their desired states only.
pub async fn run_partition(
    common: CommonArgs,
    args: PartitionArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let partition = args.partition;
    let Some((bus, bus_key)) = sluice_wire::service::connect_partition(
        &common,
        topology::RENDERER,
        partition,
        &health,
        &token,
    )
    .await?
    else {
        // Stopped while standing by: another process holds the lease.
        return Ok(());
    };
    let (config, config_feed) = sluice_wire::follow_config(&bus, bus_key.as_ref()).await?;
    let mut stage = Stage::new(config, &common.sveltos_namespace);
    let ours = |delivered: &sluice_bus::Delivered| partition.owns(&delivered.subject);
    for delivered in bus
        .replay_state(topology::DESIRED, topology::DESIRED.subjects)
        .await?
        .into_iter()
        .filter(ours)
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
        .into_iter()
        .filter(ours)
    {
        boot_sequence = boot_sequence.max(delivered.sequence);
        // An unreadable unit is not recorded: its delivery is dead-lettered by the runner.
        if let Ok(unit) = match_units::decode(&delivered, bus_key.as_ref()) {
            last_seen.record(&delivered);
            stage.apply(unit, delivered.sequence);
        }
    }
    let rendering = Arc::new(Mutex::new(Rendering {
        stage,
        bus: bus.clone(),
        key: bus_key,
        published: health.counter("sluice_renderer_desired_states_published_total"),
    }));
    let boot = {
        let mut rendering = rendering.lock().await;
        let states = tokio::task::block_in_place(|| rendering.stage.recompute(None, boot_sequence));
        rendering.outputs(states, "boot")?
    };
    let traceparent = sluice_runtime::child_traceparent(None);
    // The configuration names every cluster: what it makes of another partition's is not ours.
    let boot = boot
        .into_iter()
        .filter(|output| partition.owns(&output.subject));
    let boot = boot.map(|output| Outgoing {
        ttl: output.ttl,
        msg_id: output.id.unwrap_or_default(),
        subject: output.subject,
        payload: output.payload,
        traceparent: Some(traceparent.clone()),
    });
    if publish_stored(&bus, boot.collect(), &token).await.is_err() {
        bus.close().await;
        return Ok(());
    }

    let hooks = Hooks {
        trace: Some(sluice_runtime::child_traceparent),
        health: Some(health.clone()),
        ..Hooks::default()
    };
    let forgotten = health.counter("sluice_renderer_subjects_forgotten_total");
    let matches = Runner::bind(&bus, partition.consumer(topology::RENDERER_MATCH))
        .await?
        .with_partition(partition)
        .with_freshness(last_seen)
        .with_hooks(Hooks {
            forgotten: {
                let forgotten = forgotten.clone();
                std::sync::Arc::new(move |n| forgotten.add(n))
            },
            ..hooks.clone()
        });
    let cloud_events = Runner::bind(&bus, partition.consumer(topology::RENDERER_CEMATCH))
        .await?
        .with_partition(partition)
        .with_hooks(hooks);
    health.set_ready(true);
    let updates = futures::stream::unfold(config_feed, |mut feed| async move {
        feed.next_batch().await.map(|updates| (updates, feed))
    });
    let mut match_stage = MatchStage {
        key: rendering.lock().await.key.clone(),
        rendering: rendering.clone(),
    };
    let mut cloud_event_stage = CloudEventStage {
        rendering,
        forgotten,
    };
    let outcome = tokio::try_join!(
        matches.run(&mut match_stage, updates, token.clone()),
        cloud_events.run(&mut cloud_event_stage, futures::stream::pending(), token),
    );
    bus.close().await;
    outcome?;
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

/// The messages that publish `states`, each with a message id that names its content; Secrets
/// sealed with `key` (without one, a unit with a Secret is published as its failure,
/// `sluice_wire::seal_desired`); a state too large for one message is published as its
/// failure ([`bounded`]).
fn desired_messages(
    states: Vec<pb::DesiredState>,
    cause: &str,
    limit: usize,
    key: Option<&sluice_wire::BusKey>,
) -> sluice_wire::Result<Vec<Output>> {
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
        let unit = sluice_wire::unit::UnitKey::of(&state)?;
        let (cluster, subject) = (&unit.cluster, unit.desired_subject());
        if !state.failure_message.is_empty() {
            tracing::warn!(event_trigger = %state.event_trigger, cluster = %cluster, failure = %state.failure_message, "rendering failed");
        }
        let sequence = state.source_sequence.to_string();
        outputs.push(Output {
            id: Some(message_id(&["desired", &subject, cause, &sequence, &hash])),
            subject,
            // Every removal is a tombstone (ADR 0041): once the applier had a day to take it,
            // the subject is dropped; an applier away longer removes what the unit's last
            // result held when it starts (`sluice_applier`'s orphans), and for a pair's main
            // unit everything of the pair.
            ttl: state.removed.then_some(topology::TOMBSTONE_TTL),
            payload: sluice_wire::encode(&state),
            ..Output::default()
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
    fn every_units_removal_expires_and_what_stands_stays() {
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "projectsveltos"},
        });
        let standing = unit(object.clone());
        let removed = |state: &pb::DesiredState| pb::DesiredState {
            removed: true,
            objects: Vec::new(),
            ..state.clone()
        };
        let resource = pb::DesiredState {
            resource_namespace: "default".into(),
            resource_name: "web".into(),
            ..standing.clone()
        };
        let cloud_event = pb::DesiredState {
            cloud_event_source: "github.com/org/repo".into(),
            cloud_event_subject: "alice".into(),
            ..standing.clone()
        };
        let states = vec![
            removed(&resource),
            resource,
            removed(&standing),
            removed(&cloud_event),
            cloud_event,
        ];
        let ttls: Vec<_> = desired_messages(states, "report", 1 << 20, None)
            .expect("messages")
            .into_iter()
            .map(|o| o.ttl)
            .collect();
        let day = Some(topology::TOMBSTONE_TTL);
        assert_eq!(ttls, [day, None, day, day, None]);
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
            desired_messages(vec![state.clone()], "report", 1 << 20, key)
                .expect("messages")
                .remove(0)
        };
        let (first, second) = (publish(Some(&key)), publish(Some(&key)));
        assert_ne!(first.payload, second.payload, "a fresh nonce each time");
        assert_eq!(first.id, second.id, "the id names the rendered content");
        assert!(!first.payload.windows(8).any(|w| w == b"c2VjcmV0"));
        let delivered = sluice_bus::Delivered {
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
