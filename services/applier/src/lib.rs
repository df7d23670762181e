//! The applier service: makes the management cluster hold exactly what the renderer wants for
//! each (EventTrigger, cluster): server-side applies the desired ClusterProfiles and
//! instantiated ConfigMaps/Secrets, and deletes what that pair owns (found by its labels) and
//! no longer wants. Foreign objects are never touched: only the owner labels select.

mod adopt;
mod executor;
mod index;
pub mod plan;
pub mod problems;
pub mod stage;
pub mod status;

use anyhow::Context as _;
use sluice_bus::runner::{Hooks, Runner};
use sluice_bus::topology;
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};

use executor::Applier;

/// Runs the applier until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    // Opens the Secrets of desired states (ADR 0023).
    let (bus, key) = sluice_wire::service::connect(&common, topology::APPLIER, &health).await?;
    let client = sluice_kube::client::for_service(&common, &health, &token)
        .await
        .context("failed to build the management cluster client")?;
    let mut stage = stage::ApplierStage {
        bus: bus.clone(),
        applier: Applier::new(client, &common.sveltos_namespace),
        statuses: status::Statuses::default(),
        status_writes: stage::StatusWrites::default(),
        reported: std::collections::BTreeMap::new(),
        key,
    };
    // The statuses as the last results left them, so a restart writes from the whole picture.
    for delivered in bus
        .replay_state(topology::APPLIED, topology::APPLIED.subjects)
        .await?
    {
        if let Ok(result) = sluice_wire::decode::<pb::ApplyResult>("ApplyResult", &delivered) {
            if stage.statuses.record(&result) {
                // Written once at start: a write paced before a restart may not have been made.
                let now = tokio::time::Instant::now();
                stage
                    .status_writes
                    .mark(&stage.statuses, &result.event_trigger, now);
            }
        }
    }
    // Triggers being deleted: one sluice never owned anything for (or whose objects are gone
    // already) is released at once, even if another installation put the finalizer there.
    let mut feeds = Vec::new();
    for kind in ["EventTrigger", "EventBasedAddOn"] {
        let (replayed, live) = bus
            .follow_state(topology::CONFIG, &topology::config_kind_filter(kind))
            .await?;
        for delivered in replayed {
            use sluice_bus::runner::Stage as _;
            stage.on_side(Ok(delivered)).await;
        }
        feeds.push(live);
    }
    let runner = Runner::bind(&bus, topology::APPLIER_DESIRED)
        .await?
        .with_hooks(hooks(&health));
    health.set_ready(true);
    let outcome = runner
        .run(&mut stage, futures::stream::select_all(feeds), token)
        .await;
    stage.write_pending_statuses().await;
    bus.close().await;
    Ok(outcome?)
}

/// The applier's counters, as the runner reports them.
fn hooks(health: &Health) -> Hooks {
    let applied = health.counter("sluice_applier_states_applied_total");
    let retried = health.counter("sluice_applier_errors_total");
    let rejected = health.counter("sluice_applier_states_rejected_total");
    Hooks {
        handled: std::sync::Arc::new(move |n| applied.add(n)),
        retried: std::sync::Arc::new(move |n| retried.add(n)),
        rejected: std::sync::Arc::new(move |n| rejected.add(n)),
        trace: Some(sluice_runtime::child_traceparent),
    }
}
