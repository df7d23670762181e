//! What every service connects before it starts: the bus, as the service's identity (its
//! readiness then requires the connection), the bus key that seals Secret contents, and, with
//! `--leader-elect`, the service's lease (ADR 0046).

use sluice_bus::{lease, topology::Identity, Bus, BusOptions};
use sluice_runtime::{CancellationToken, CommonArgs, Health};

use crate::seal::{BusKey, SealError};

/// The flags of a stage that may run as partitions (ADR 0051): the evaluator and the renderer.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct PartitionArgs {
    /// Run as one partition of the stage, `INDEX/COUNT` (e.g. `1/4`): handle only the managed
    /// clusters whose name hashes to INDEX, on a durable consumer and (with `--leader-elect`) a
    /// lease of the partition's own. Run one process (or one set of replicas) per index, all
    /// with the same COUNT. The default `0/1` is the whole stage.
    #[arg(long, env = "SLUICE_PARTITION", default_value = "0/1")]
    pub partition: sluice_bus::Partition,
}

/// The exit code of a service that lost its lease (`EX_TEMPFAIL` from sysexits.h): it stops at
/// once, without draining, since another process may already be taking over.
pub const EXIT_LEASE_LOST: i32 = 75;

/// Why a service could not start on the bus.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("failed to load the bus key")]
    Key(#[source] SealError),
    #[error("failed to connect to the bus")]
    Connect(#[source] sluice_bus::Error),
}

/// Loads the bus key (`--bus-key-file`; `None` without one), then connects as `identity`.
/// With `--leader-elect` it then waits until this process holds the service's lease: `None`
/// if `token` is cancelled first (the process stops while standing by). The lease is renewed
/// from then on and released by [`Bus::close`]; if it is lost the process exits
/// [`EXIT_LEASE_LOST`] at once. `sluice_leader` on `/metrics` is 1 while this process holds
/// it, 0 while it stands by.
pub async fn connect(
    common: &CommonArgs,
    identity: Identity,
    health: &Health,
    token: &CancellationToken,
) -> Result<Option<(Bus, Option<BusKey>)>, StartError> {
    connect_in(common, identity, "", health, token).await
}

/// [`connect`] for a process of one partition of its stage (ADR 0051): with `--leader-elect`
/// it takes the partition's lease (`<service>/p<index>`); the whole stage's is the service's.
pub async fn connect_partition(
    common: &CommonArgs,
    identity: Identity,
    partition: sluice_bus::Partition,
    health: &Health,
    token: &CancellationToken,
) -> Result<Option<(Bus, Option<BusKey>)>, StartError> {
    connect_in(common, identity, &partition.lease_shard(), health, token).await
}

/// [`connect`] for a process of `shard` (ADR 0050): with `--leader-elect` it takes the lease its
/// service's processes of that shard share (`topology::lease_name`); the default shard (`""`)
/// is the service's own lease.
pub async fn connect_in(
    common: &CommonArgs,
    identity: Identity,
    shard: &str,
    health: &Health,
    token: &CancellationToken,
) -> Result<Option<(Bus, Option<BusKey>)>, StartError> {
    let key = BusKey::load(common.bus_key_file.as_deref()).map_err(StartError::Key)?;
    let bus = Bus::connect(BusOptions::service(common, identity))
        .await
        .map_err(StartError::Connect)?;
    health.require("nats", bus.connection_probe());
    if common.leader_elect {
        // A shard's processes share a lease of their own, told apart by a `shard` label.
        let mut labels = vec![("service", identity.name)];
        if !shard.is_empty() {
            // Once per process, for as long as it runs: labels are static.
            labels.push(("shard", &*shard.to_string().leak()));
        }
        let leader = health.gauge_with(
            "sluice_leader",
            "Whether this process holds its service's lease and does its work (1) or stands by (0)",
            &labels,
        );
        leader.set(0);
        // A standby is ready: it serves what needs no lease (the watcher's conversion webhook),
        // and a rolling update waits for it before it stops the holder.
        health.set_ready(true);
        let holder = lease::holder_name();
        let timing = common.lease_timing();
        let lease = sluice_bus::topology::lease_name(identity.name, shard);
        let Some(leadership) = bus.acquire_lease(&lease, &holder, timing, token).await else {
            return Ok(None);
        };
        health.set_ready(false);
        leader.set(1);
        let lost = leadership.lost();
        let service = identity.name;
        // A write refused by the fence (the process woke past its renew deadline, before its
        // renewal task ran) stops the process as the loss itself does.
        let refused_by = holder.clone();
        bus.fence().on_refusal(move || {
            tracing::error!(
                service,
                holder = %refused_by,
                "stopping at once: a write found the lease past its renew deadline"
            );
            std::process::exit(EXIT_LEASE_LOST);
        });
        tokio::spawn(async move {
            lost.await;
            tracing::error!(
                service,
                holder = %holder,
                "stopping at once: the lease is lost and another process may take over"
            );
            std::process::exit(EXIT_LEASE_LOST);
        });
        bus.hold_lease(leadership);
    }
    Ok(Some((bus, key)))
}
