//! The watcher service: mirrors the management-cluster configuration onto the bus
//! (`ConfigObject`; of the ConfigMaps and Secrets only those a trigger references, Secret
//! contents sealed, `configdata`), and watches, in every managed cluster some EventTrigger selects, exactly the
//! kinds its EventSources select, publishing each object's current state (`ResourceChange`),
//! and forwards the CloudEvents of those clusters' NATS (`CloudEventReceived`).
//! It evaluates nothing; it only reports what exists and what arrives. It also serves the CRD
//! conversion webhook (`webhook`, ADR 0019) when configured.

pub mod cloudevents;
mod configdata;
mod managed;
mod management;
mod sent;
pub mod webhook;

use std::time::Duration;

use anyhow::Context as _;
use sluice_bus::topology;
use sluice_domain::config::ConfigState;
use sluice_runtime::{CancellationToken, CommonArgs, Health, TaskTracker};
use tokio::sync::mpsc;

pub use cloudevents::desired_listeners;
pub use managed::desired_watches;

/// The watcher's flags besides the common ones.
#[derive(Clone, Debug, clap::Args)]
pub struct WatcherArgs {
    #[command(flatten)]
    pub webhook: webhook::WebhookArgs,
    /// Watch only the managed clusters of this shard: those whose
    /// `sharding.projectsveltos.io/key` annotation is this key (ADR 0050). The watcher of the
    /// default shard (no key) watches the clusters without the annotation and is the one that
    /// publishes the management cluster's configuration; run it always.
    #[arg(long, env = "SLUICE_SHARD_KEY", default_value = "")]
    pub shard_key: String,
}

/// Runs the watcher, and the conversion webhook when `args` names an address, until `token`
/// is cancelled. The webhook is up before the watcher connects to anything.
pub async fn run_with_webhook(
    common: CommonArgs,
    args: WatcherArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let WatcherArgs { webhook, shard_key } = args;
    let served = match (
        webhook.webhook_addr,
        &webhook.webhook_tls_cert,
        &webhook.webhook_tls_key,
    ) {
        (Some(addr), Some(cert), Some(key)) => Some(
            webhook::serve(addr, cert, key, health.clone(), token.clone())
                .await
                .context("failed to start the conversion webhook")?,
        ),
        _ => None,
    };
    let outcome = run_shard(common, &shard_key, health, token.clone()).await;
    if let Some((_, task)) = served {
        token.cancel();
        // The task logs its own failure; a join error only means it panicked.
        let _ = task.await;
    }
    outcome
}

/// Updates from the management watches applied together before the state is acted on.
const UPDATE_BATCH: usize = 1024;

/// How long the watcher may drain after the first signal: its watches and listeners store what
/// they read (a CloudEvent runner settles its window) and stop. What is cut off is not lost:
/// the next start lists every watched kind again and publishes what the stream lacks, and a
/// managed JetStream redelivers what was not acked.
pub const DRAIN_DEADLINE: Duration = sluice_bus::runner::DRAIN_DEADLINE;

/// Waits `duration`; `true` if `token` was cancelled meanwhile.
pub(crate) async fn pause(duration: Duration, token: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(duration) => false,
        () = token.cancelled() => true,
    }
}

/// Runs the watcher of the default shard until `token` is cancelled, then drains within
/// [`DRAIN_DEADLINE`]: every watch and listener stops reading and stores what it holds.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    run_shard(common, "", health, token).await
}

/// Runs the watcher of `shard` (ADR 0050): it watches and listens to the managed clusters of
/// that shard only, and only the default shard's (`""`) publishes the configuration.
pub async fn run_shard(
    common: CommonArgs,
    shard: &str,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let Some((bus, key)) =
        sluice_wire::service::connect_in(&common, topology::WATCHER, shard, &health, &token)
            .await?
    else {
        // Stopped while standing by: another process holds the lease.
        return Ok(());
    };
    // The default shard's watcher mirrors the configuration; another only reads it.
    let publishes = shard.is_empty();
    tracing::info!(
        shard,
        publishes_config = publishes,
        "watching the clusters of this shard"
    );
    if key.is_none() {
        tracing::warn!(
            "no bus key (--bus-key-file): referenced Secrets and managed clusters' Secrets go on the bus without their contents"
        );
    }
    let mgmt = sluice_kube::client::for_service(&common, &health, &token, bus.fence())
        .await
        .context("failed to build the management cluster client")?;

    // Start from what earlier runs published: the management watches only report differences
    // from it, so unchanged objects would otherwise never reach this state. ConfigMaps and
    // Secrets are listed afresh instead; what of them the stream holds is only remembered.
    let replayed = bus
        .replay_state(topology::CONFIG, topology::CONFIG.subjects)
        .await?;
    // Each kind's watch starts from this same snapshot (and a watcher that does not publish
    // compares every later watch with it too).
    let mut snapshot = management::known_of(&replayed);
    let (tx, mut rx) = mpsc::channel(1024);
    let tasks = TaskTracker::new();
    for kind in management::WATCHED {
        let known = snapshot.remove(kind.kind).unwrap_or_default();
        tasks.spawn(management::watch(
            mgmt.clone(),
            bus.clone(),
            kind,
            (known, publishes),
            tx.clone(),
            health.clone(),
            token.clone(),
        ));
    }
    drop(tx);

    let mut state = ConfigState::default();
    let mut data = configdata::ConfigData::new(bus.clone(), key.clone(), &health);
    for delivered in replayed {
        if data.seed(&delivered) {
            continue;
        }
        match sluice_wire::ConfigUpdate::from_delivered(&delivered, None) {
            Ok(update) => {
                update.apply_to(&mut state);
            }
            Err(error) => tracing::warn!(error = %error, "skipping unreadable config message"),
        }
    }
    let mut watches = managed::Watches::new(
        bus.clone(),
        health.clone(),
        key,
        tasks.clone(),
        token.clone(),
        shard,
        &state,
    );
    let mut listeners =
        cloudevents::Listeners::new(bus.clone(), health.clone(), tasks.clone(), token.clone());
    health.set_ready(true);
    loop {
        let due = watches.next_due();
        tokio::select! {
            _ = token.cancelled() => break,
            () = sluice_runtime::schedule::sleep_until(due), if due.is_some() => watches.reconcile(&state).await,
            update = rx.recv() => {
                let Some(update) = update else { break };
                // Everything already waiting is applied before the state is acted on once.
                let mut updates = vec![update];
                while updates.len() < UPDATE_BATCH {
                    match rx.try_recv() {
                        Ok(update) => updates.push(update),
                        Err(_) => break,
                    }
                }
                for update in updates {
                    match update {
                        management::Update::Object { kind, namespace, name, object } => {
                            state.apply(&kind, &namespace, &name, object.as_ref());
                        }
                        management::Update::Listed(kind) => data.listed(kind),
                    }
                }
                // Until every Secret is listed a cluster's kubeconfig may be missing: nothing
                // starts, stops or is withdrawn from a partial view.
                if data.is_listed() {
                    if publishes {
                        data.reconcile(&state).await;
                    }
                    watches.reconcile(&state).await;
                    listeners.reconcile(&state, shard);
                }
            }
        }
    }
    tracing::info!("watcher draining");
    // No update is applied any more: a management watch waiting to hand one over stops.
    drop(rx);
    token.cancel();
    if sluice_runtime::drain(&tasks, DRAIN_DEADLINE).await {
        tracing::info!("watcher drained");
    }
    drop((watches, listeners));
    bus.close().await;
    Ok(())
}
