//! The applier service: makes the management cluster hold exactly what the renderer wants for
//! each (EventTrigger, cluster): server-side applies the desired ClusterProfiles and
//! instantiated ConfigMaps/Secrets, and deletes what that pair owns (found by its labels) and
//! no longer wants. Foreign objects are never touched: only the owner labels select.

mod executor;
pub mod plan;
pub mod problems;
pub mod status;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use sluice_bus::{message_id, topology, AckWindow, Bus, Outgoing};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};

use executor::{Applier, Unit};

/// Runs the applier until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let bus = Bus::connect(sluice_bus::BusOptions::service(&common, topology::APPLIER))
        .await
        .context("failed to connect to the bus")?;
    health.require("nats", bus.connection_probe());
    let client = sluice_kube::client::management(
        common.kubeconfig.as_deref(),
        common.kube_context.as_deref(),
    )
    .await
    .context("failed to build the management cluster client")?;
    health.require(
        "kubernetes",
        sluice_kube::reachability::api_check(&client, &token),
    );
    let applied = health.counter("sluice_applier_states_applied_total");
    let errors = health.counter("sluice_applier_errors_total");
    let applier = Applier::new(client);
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
    // The problem last reported per unusable trigger, so each one is one Event.
    let mut reported = std::collections::BTreeMap::new();
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
            applier.report_invalid(delivered, &mut reported).await;
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
                applier.report_invalid(&delivered, &mut reported).await;
            }
            batch = sluice_bus::coalesce::next_batch(&mut desired), if !window.is_full() => {
                let Some(batch) = batch else { anyhow::bail!("desired-state consumer ended") };
                // Desired states are level-based: only the newest per subject is applied.
                let mut ready = Vec::new();
                for (delivered, message) in sluice_bus::coalesce::fresh(topology::DESIRED.name, batch, &last_seen, &mut window) {
                    match sluice_wire::decode::<pb::DesiredState>("DesiredState", &delivered) {
                        Ok(state) => ready.push((delivered, message, state)),
                        Err(error) => {
                            bus.park("applier", &delivered, message, &error.to_string(), &mut window).await?;
                        }
                    }
                }
                let units: Vec<(&str, &pb::DesiredState)> =
                    ready.iter().map(|(d, _, s)| (d.subject.as_str(), s)).collect();
                let outcomes = applier.execute_all(&units).await;
                // Results are published and inputs acked in stream order; each trigger's
                // status is written once per batch.
                let mut touched = BTreeSet::new();
                for ((delivered, message, state), outcome) in ready.into_iter().zip(outcomes) {
                    let result = match outcome {
                        Ok(result) => result,
                        Err(error) => {
                            errors.inc();
                            tracing::warn!(event_trigger = %state.event_trigger, error = %error, "failed to apply, will retry");
                            applier.forget_kinds();
                            let nak = async_nats::jetstream::AckKind::Nak(Some(Duration::from_millis(500)));
                            let _ = message.ack_with(nak).await;
                            continue;
                        }
                    };
                    applied.inc();
                    last_seen.record(&delivered);
                    if state.removed && Unit::of(&state) == Unit::Main {
                        // The pair's other units went with its main unit: their states and
                        // results leave the streams too.
                        let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state")?;
                        let tokens = sluice_wire::cluster_tokens(&cluster);
                        for (stream, filter) in [
                            (topology::DESIRED, topology::desired_units_filter(&state.event_trigger, &tokens)),
                            (topology::APPLIED, topology::applied_units_filter(&state.event_trigger, &tokens)),
                        ] {
                            if let Err(error) = bus.purge(stream, &filter).await {
                                tracing::warn!(error = %error, %filter, "failed to purge the units of a withdrawn trigger and cluster");
                            }
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
                        touched.insert(result.event_trigger.clone());
                    }
                }
                for trigger in touched {
                    applier.write_status(&statuses, &trigger).await;
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
    drop(desired);
    bus.close().await;
    Ok(())
}
