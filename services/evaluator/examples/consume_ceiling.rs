//! The ceiling the bus sets on the evaluator service: how fast the evaluator's own durable
//! consumer on CHANGES (`Bus::durable` with the evaluator's covering acks, read in batches by
//! `coalesce::next_batch` and `coalesce::fresh`, one ack per batch) drains a backlog when
//! nothing is decoded, parsed or evaluated. Same changes as `service_throughput.rs`'s backlog.
//!
//! ```text
//! cargo build --release -p sluice-evaluator --example consume_ceiling
//! SLUICE_NATS_SERVER=/work/main/.venv/bin/nats-server \
//!   target/release/examples/consume_ceiling --kinds 100 --objects 300
//! ```

use std::time::Instant;

use sluice_bus::{topology, AckWindow, Bus, Freshness};
use sluice_testkit::NatsServer;

#[path = "common/workload.rs"]
mod workload;

#[path = "common/bus_bench.rs"]
mod bus_bench;

use bus_bench::{publish_changes, Cpu};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut clusters, mut kinds, mut objects) = (10, 100, 100);
    workload::parse_flags(&mut [
        ("--clusters", &mut clusters),
        ("--kinds", &mut kinds),
        ("--objects", &mut objects),
    ]);
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let published = publish_changes(&bus, (clusters, kinds, objects), 10, 4096, 1).await?;
    let mut changes = bus.durable(topology::EVALUATOR_CHANGES, None).await?;
    let mut window =
        AckWindow::new(topology::PUBLISH_WINDOW).acking(topology::EVALUATOR_CHANGES.acks);
    let mut last_seen = Freshness::default();
    let cpu = Cpu::start(&[("server", nats.pid()), ("consumer", std::process::id())]);
    let start = Instant::now();
    let mut read = 0;
    while read < published {
        let Some(batch) = sluice_bus::coalesce::next_batch(&mut changes).await else {
            anyhow::bail!("consumer ended after {read} messages");
        };
        let fresh =
            sluice_bus::coalesce::fresh(topology::CHANGES.name, batch, &last_seen, &mut window);
        read += fresh.len();
        let mut inputs = Vec::with_capacity(fresh.len());
        for (delivered, message) in fresh {
            last_seen.record(&delivered);
            inputs.push(message);
        }
        // No outputs: the batch's one ack goes out now (acks are sent as the window settles;
        // the evaluator settles it from its select loop).
        window.publish(&bus, Vec::new(), inputs).await?;
        window.drain().await?;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "consume ceiling: {read} changes read and acked in {secs:.2} s = {:.0} changes/s; cpu {}",
        read as f64 / secs,
        cpu.report(secs)
    );
    Ok(())
}
