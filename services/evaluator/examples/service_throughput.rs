//! Throughput of the evaluator service end to end over NATS: ResourceChanges on the CHANGES
//! stream, the `sluice-evaluator` binary (a separate process), match units stored on the MATCH
//! stream. Same workload as `stage_throughput.rs` (100 EventSources deployed to every cluster).
//!
//! It starts a nats-server (`SLUICE_NATS_SERVER`), publishes the configuration, starts the
//! evaluator binary built next to this example, and runs two phases:
//!
//! - `live`: the producer publishes one creation per object (`--clusters` x `--kinds` x
//!   `--objects`) as fast as it can with up to `--inflight` publish acks outstanding, while the
//!   evaluator consumes. Time runs from the first publish until the evaluator's durable
//!   consumer has nothing pending and nothing unacked.
//! - `backlog`: the evaluator is stopped (SIGSTOP), the producer publishes one update of every
//!   object (new resourceVersion and status; one in `--flip` also flips labels and port), then
//!   the evaluator continues (SIGCONT). Time runs from SIGCONT until the consumer is drained:
//!   the catch-up rate. Every object is updated once, so the CHANGES stream (last message per
//!   subject) drops nothing and every published change is processed.
//!
//! "processed" is what the evaluator's consumer acked (its ack floor moved by exactly that
//! many deliveries, redeliveries are reported). CPU seconds are read from /proc for the
//! server, the evaluator and this producer process.
//!
//! ```text
//! cargo build --release -p sluice-evaluator --bin sluice-evaluator --example service_throughput
//! SLUICE_NATS_SERVER=/work/main/.venv/bin/nats-server \
//!   target/release/examples/service_throughput --kinds 100 --objects 100
//! ```

use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::pull;
use prost::Message as _;
use sluice_bus::{message_id, topology, Bus, Outgoing};
use sluice_proto::v1 as pb;
use sluice_testkit::NatsServer;

#[path = "common/workload.rs"]
mod workload;

#[path = "common/bus_bench.rs"]
mod bus_bench;

use bus_bench::{publish_changes, Cpu};

/// Publishes one change of every object of the workload, as `version`.
async fn publish(bus: &Bus, o: &Options, version: usize) -> anyhow::Result<usize> {
    publish_changes(
        bus,
        (o.clusters, o.kinds, o.objects),
        o.flip,
        o.inflight,
        version,
    )
    .await
}

struct Options {
    clusters: usize,
    kinds: usize,
    objects: usize,
    flip: usize,
    inflight: usize,
}

fn options() -> Options {
    let mut o = Options {
        clusters: 10,
        kinds: 100,
        objects: 100,
        flip: 10,
        inflight: 4096,
    };
    workload::parse_flags(&mut [
        ("--clusters", &mut o.clusters),
        ("--kinds", &mut o.kinds),
        ("--objects", &mut o.objects),
        ("--flip", &mut o.flip),
        ("--inflight", &mut o.inflight),
    ]);
    o
}

async fn publish_config(bus: &Bus, o: &Options) -> anyhow::Result<()> {
    for (kind, namespace, name, object) in workload::config_objects(o.clusters, o.kinds) {
        let message = pb::ConfigObject {
            kind: kind.into(),
            namespace: namespace.clone(),
            name: name.clone(),
            deleted: false,
            resource_version: "1".into(),
            object_json: serde_json::to_vec(&object)?,
            sealed_object_json: Vec::new(),
        };
        bus.publish_durably(Outgoing {
            ttl: None,
            subject: topology::config_subject(kind, &namespace, &name),
            msg_id: message_id(&["bench-config", kind, &namespace, &name]),
            payload: message.encode_to_vec().into(),
            traceparent: None,
        })
        .await?;
    }
    Ok(())
}

/// Polls the evaluator's consumer until nothing is pending or unacked and the ack floor has
/// reached the stream's last sequence; returns (acked deliveries, redeliveries).
async fn until_drained(bus: &Bus) -> anyhow::Result<(u64, u64)> {
    let stream = bus.jetstream().get_stream(topology::CHANGES.name).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let last = stream.get_info().await?.state.last_sequence;
        let mut consumer: async_nats::jetstream::consumer::Consumer<pull::Config> = stream
            .get_consumer(topology::EVALUATOR_CHANGES.durable)
            .await
            .map_err(|e| anyhow::anyhow!("evaluator consumer: {e}"))?;
        let info = consumer.info().await?;
        if info.num_pending == 0
            && info.num_ack_pending == 0
            && info.ack_floor.stream_sequence >= last
        {
            return Ok((
                info.ack_floor.consumer_sequence,
                info.num_redelivered as u64,
            ));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "evaluator did not drain: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn match_units_published(bus: &Bus) -> anyhow::Result<u64> {
    let stream = bus.jetstream().get_stream(topology::MATCH.name).await?;
    Ok(stream.get_info().await?.state.last_sequence)
}

fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill {signal} {pid} failed");
    Ok(())
}

/// Ends the evaluator (continued first, in case it is stopped) when the benchmark ends, also on
/// an error or a timeout, so that it never outlives this process.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = signal(self.0, "-CONT");
        let _ = signal(self.0, "-KILL");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = options();
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    publish_config(&bus, &o).await?;
    let binary = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("sluice-evaluator"))
        .ok_or_else(|| anyhow::anyhow!("no directory for the evaluator binary"))?;
    let mut evaluator = sluice_testkit::die_with_parent(&mut std::process::Command::new(&binary))
        .env("SLUICE_NATS_URL", nats.url())
        .env("SLUICE_HEALTH_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("failed to start {}: {e}", binary.display()))?;
    let pid = evaluator.id();
    let guard = KillOnDrop(pid);
    // the durable consumer exists once the evaluator has rebuilt its state
    let stream = bus.jetstream().get_stream(topology::CHANGES.name).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while stream
        .get_consumer::<pull::Config>(topology::EVALUATOR_CHANGES.durable)
        .await
        .is_err()
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "evaluator consumer never appeared"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let objects = o.clusters * o.kinds * o.objects;
    println!(
        "service throughput: {} EventSources x {} clusters, {} kinds ({} EventSources per change), \
         {objects} objects, 1 in {} updates flips, {} publish acks in flight; evaluator pid {pid}",
        workload::EVENT_SOURCES,
        o.clusters,
        o.kinds,
        workload::EVENT_SOURCES / o.kinds,
        o.flip,
        o.inflight
    );

    let cpu = Cpu::start(&[
        ("server", nats.pid()),
        ("evaluator", pid),
        ("producer", std::process::id()),
    ]);
    let units_before = match_units_published(&bus).await?;
    let start = Instant::now();
    let published = publish(&bus, &o, 1).await?;
    let produced = start.elapsed().as_secs_f64();
    let (acked, redelivered) = until_drained(&bus).await?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "live   : {published} changes published in {produced:.2} s ({:.0}/s); evaluator drained \
         after {secs:.2} s: {acked} processed = {:.0} changes/s, {redelivered} redelivered, {} match \
         units stored; cpu {}",
        published as f64 / produced,
        acked as f64 / secs,
        match_units_published(&bus).await? - units_before,
        cpu.report(secs)
    );

    signal(pid, "-STOP")?;
    let start = Instant::now();
    let published = publish(&bus, &o, 2).await?;
    let produced = start.elapsed().as_secs_f64();
    println!(
        "backlog: {published} changes published in {produced:.2} s ({:.0}/s) with the evaluator stopped",
        published as f64 / produced
    );
    let units_before = match_units_published(&bus).await?;
    let cpu = Cpu::start(&[
        ("server", nats.pid()),
        ("evaluator", pid),
        ("producer", std::process::id()),
    ]);
    let start = Instant::now();
    signal(pid, "-CONT")?;
    let (acked_after, redelivered) = until_drained(&bus).await?;
    let secs = start.elapsed().as_secs_f64();
    let processed = acked_after - acked;
    println!(
        "backlog: evaluator caught up after {secs:.2} s: {processed} processed = {:.0} changes/s, \
         {redelivered} redelivered, {} match units stored; cpu {}",
        processed as f64 / secs,
        match_units_published(&bus).await? - units_before,
        cpu.report(secs)
    );
    drop(guard);
    evaluator.wait()?;
    Ok(())
}
