//! The applier service: makes the management cluster hold exactly what the renderer wants for
//! each (EventTrigger, cluster): server-side applies the desired ClusterProfiles and
//! instantiated ConfigMaps/Secrets, and deletes what that pair owns (found by its labels) and
//! no longer wants. Foreign objects are never touched: only the owner labels select.

mod adopt;
mod executor;
mod index;
mod orphans;
pub mod plan;
pub mod problems;
mod repair;
mod seed;
pub mod stage;
pub mod status;

use anyhow::Context as _;
use futures::StreamExt as _;
use sluice_bus::runner::{Hooks, Runner};
use sluice_bus::topology;
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};

use executor::Applier;
use sluice_kube::watch::Written;

/// The default of `--apply-concurrency`.
pub const DEFAULT_APPLY_CONCURRENCY: u16 = 32;

/// The most `--apply-concurrency` the applier accepts.
pub const MAX_APPLY_CONCURRENCY: u16 = 1024;

/// The applier's own flags.
#[derive(Clone, Debug, clap::Args)]
pub struct ApplierArgs {
    /// The most desired states (units) applied at once: eight while the applier keeps up, up to
    /// this many as it falls behind. A unit waits for one or two API round trips, so this bounds
    /// the units per second to this many per two round trips
    #[arg(
        long,
        env = "SLUICE_APPLY_CONCURRENCY",
        default_value_t = DEFAULT_APPLY_CONCURRENCY,
        value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_APPLY_CONCURRENCY))
    )]
    pub apply_concurrency: u16,
}

/// Runs the applier until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    own: ApplierArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    tracing::info!(
        apply_concurrency = own.apply_concurrency,
        "applier settings"
    );
    // Opens the Secrets of desired states (ADR 0023).
    let Some((bus, key)) =
        sluice_wire::service::connect(&common, topology::APPLIER, &health, &token).await?
    else {
        // Stopped while standing by: another process holds the lease.
        return Ok(());
    };
    let client = sluice_kube::client::for_service(&common, &health, &token, bus.fence())
        .await
        .context("failed to build the management cluster client")?;
    let seed = std::sync::Arc::new(seed::Seed::new(plan::OWNED.len()));
    let mut stage = stage::ApplierStage {
        bus: bus.clone(),
        applier: std::sync::Arc::new(Applier::new(
            client,
            &common.sveltos_namespace,
            usize::from(own.apply_concurrency),
        )),
        statuses: status::Statuses::default(),
        status_writes: stage::StatusWrites::default(),
        reported: std::collections::BTreeMap::new(),
        waiting_told: std::collections::BTreeSet::new(),
        repairs: repair::Repairs::default(),
        written_again: health.counter("sluice_applier_objects_written_again_total"),
        written: plan::OWNED
            .iter()
            .map(|(_, kind)| (kind.to_string(), Written::default()))
            .collect(),
        key,
        forgotten: health.counter("sluice_applier_triggers_forgotten_total"),
        in_flight: stage::InFlight::default(),
    };
    // The statuses as the last results left them, so a restart writes from the whole picture;
    // and what the units held, so that what was deleted meanwhile is found (ADR 0039).
    let mut holding = Vec::new();
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
            if let Some(desired) = topology::desired_subject_for(&delivered.subject) {
                for held in &result.held {
                    stage.note_written(held, &desired);
                }
                if let Some(candidate) = orphans::candidate(result) {
                    holding.push((desired, candidate));
                }
            }
        }
    }
    // Units whose removal expired before this applier took it (it was away longer than
    // `topology::TOMBSTONE_TTL`): what they hold is removed before anything else.
    let removals = if holding.is_empty() {
        Vec::new()
    } else {
        let present = bus
            .replay_subjects(topology::DESIRED, topology::DESIRED.subjects)
            .await?;
        orphans::removals(holding, &present)
    };
    let first = stage.remove_orphans(removals).await;
    // Triggers being deleted: one sluice never owned anything for (or whose objects are gone
    // already) is released at once, even if another installation put the finalizer there.
    let mut feeds = Vec::new();
    for kind in ["EventTrigger", "EventBasedAddOn"] {
        let (replayed, live) = bus
            .follow_state(topology::CONFIG, &topology::config_kind_filter(kind))
            .await?;
        for delivered in replayed {
            use sluice_bus::runner::Stage as _;
            stage
                .on_side(stage::Side::Config(Ok(delivered)), None)
                .await;
        }
        feeds.push(live.map(stage::Side::Config).boxed());
    }
    // What sluice wrote and someone else deletes is written again (ADR 0039).
    // Started now, not on the runner's first poll of its side feed: the first units wait for
    // their first lists (the seed), which start after the removals above, so they show them.
    stage.applier.seed_from(seed.clone());
    feeds.extend(
        owned_changes(
            stage.applier.client.clone(),
            &common.sveltos_namespace,
            &stage.written,
            &seed,
            &token,
        )
        .into_iter()
        .map(|feed| sluice_kube::watch::drained(feed).boxed()),
    );
    let runner = Runner::bind(&bus, topology::APPLIER_DESIRED)
        .await?
        .with_hooks(hooks(&health))
        .publishing_first(first);
    health.set_ready(true);
    let outcome = runner
        .run(&mut stage, futures::stream::select_all(feeds), token)
        .await;
    stage.write_pending_statuses().await;
    bus.close().await;
    Ok(outcome?)
}

/// The label every object sluice writes carries (its trigger's name): what the watch of owned
/// objects selects.
const OWNED_SELECTOR: &str = sluice_domain::naming::LABEL_EVENT_TRIGGER;

/// How long the watch of an owned kind waits before it asks again for a kind the server does
/// not serve yet (Sveltos's CRDs not installed).
const RESOLVE_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// One watch per owned kind (ClusterProfiles everywhere, ConfigMaps and Secrets in Sveltos's
/// namespace, where the applier writes them) of the objects sluice wrote, yielding those that
/// go or someone else edits, with the desired-state subject each named. Each watch is told what the applier writes
/// of its kind (`written`), from the start what the replayed results say the units hold, whose
/// lack in the first list says they went while the applier was away. Their first lists are the
/// pairs' `seed`, abandoned when a kind is not served.
fn owned_changes(
    client: kube::Client,
    namespace: &str,
    written: &std::collections::BTreeMap<String, Written>,
    seed: &std::sync::Arc<seed::Seed>,
    token: &CancellationToken,
) -> Vec<futures::stream::BoxStream<'static, stage::Side>> {
    plan::OWNED
        .iter()
        .map(|&(api_version, kind)| {
            let client = client.clone();
            let namespace = namespace.to_string();
            let written = written.get(kind).cloned().unwrap_or_default();
            let token = token.clone();
            let seed = seed.clone();
            // The watch starts once (a stream of one resolution): its first list is the seed's.
            let mut observer = Some(seed.observer(kind));
            let resolved = async move {
                loop {
                    match sluice_kube::apply::resolve(&client, api_version, kind).await {
                        Ok(resolved) => return Some((client, resolved)),
                        Err(error) => {
                            seed.abandon();
                            tracing::warn!(%kind, error = %sluice_runtime::error_chain(&error), "cannot watch the objects sluice wrote of this kind yet");
                            tokio::select! {
                                () = tokio::time::sleep(RESOLVE_RETRY) => {}
                                () = token.cancelled() => return None,
                            }
                        }
                    }
                }
            };
            futures::stream::once(resolved)
                .filter_map(futures::future::ready)
                .flat_map(move |(client, resolved)| {
                    let namespace = resolved.namespaced.then_some(namespace.as_str());
                    sluice_kube::watch::watch_owned(
                        client,
                        resolved,
                        namespace,
                        OWNED_SELECTOR,
                        (plan::desired_subject_of, executor::FIELD_MANAGER),
                        written.clone(),
                        observer.take(),
                    )
                })
                .map(move |batch| match batch {
                    Ok(changes) => stage::Side::Owned(kind, changes),
                    Err(error) => stage::Side::WatchFailed(kind, error.to_string()),
                })
                .boxed()
        })
        .collect()
}

/// The applier's counters, as the runner reports them.
fn hooks(health: &Health) -> Hooks {
    let applied = health.counter("sluice_applier_states_applied_total");
    let retried = health.counter("sluice_applier_errors_total");
    let rejected = health.counter("sluice_applier_states_rejected_total");
    let forgotten = health.counter("sluice_applier_subjects_forgotten_total");
    Hooks {
        handled: std::sync::Arc::new(move |n| applied.add(n)),
        retried: std::sync::Arc::new(move |n| retried.add(n)),
        rejected: std::sync::Arc::new(move |n| rejected.add(n)),
        trace: Some(sluice_runtime::child_traceparent),
        forgotten: std::sync::Arc::new(move |n| forgotten.add(n)),
        health: Some(health.clone()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::{Args as _, FromArgMatches as _};

    fn parse(args: &[&str]) -> Result<ApplierArgs, clap::Error> {
        let command = ApplierArgs::augment_args(clap::Command::new("sluice-applier"));
        let mut matches = command
            .try_get_matches_from(std::iter::once("sluice-applier").chain(args.iter().copied()))?;
        ApplierArgs::from_arg_matches_mut(&mut matches)
    }

    #[test]
    fn the_apply_concurrency_is_thirty_two_unless_the_flag_says_otherwise() {
        assert_eq!(parse(&[]).unwrap().apply_concurrency, 32);
        assert_eq!(
            parse(&["--apply-concurrency", "1"])
                .unwrap()
                .apply_concurrency,
            1
        );
        assert_eq!(
            parse(&["--apply-concurrency", "1024"])
                .unwrap()
                .apply_concurrency,
            1024
        );
    }

    #[test]
    fn an_apply_concurrency_out_of_range_is_refused_naming_the_flag() {
        for bad in ["0", "1025", "many"] {
            let error = parse(&["--apply-concurrency", bad])
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("--apply-concurrency") && error.contains(bad),
                "{bad}: {error}"
            );
        }
    }
}
