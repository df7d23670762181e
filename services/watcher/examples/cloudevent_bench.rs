//! Measures the watcher's CloudEvent hop on this machine: from a publish on the managed
//! cluster's NATS (core subject, seed 004's Secret) to the `CloudEventReceived` on the sluice
//! bus. Latency at a fixed rate (p50/p99/max over `--events`), then sustained throughput.
//!
//! ```text
//! cargo build --release -p sluice-watcher --bins --examples
//! target/release/examples/cloudevent_bench [events] [rate per second] [burst]
//! ```
//! Everything runs on one machine: two nats-servers, the API test server, the watcher process.
//!
//! Measured 2026-11-22 on the 2-core dev box under a load average of ~8 (other builds running),
//! `cloudevent_bench 1000 1000 20000`, three runs: latency p50 352 / 360 / 365 µs, p99 1.0 /
//! 1.9 / 11.3 ms, max 4.0 / 6.4 / 18.8 ms; burst throughput 28.4k / 28.9k / 29.5k events/s.
//! The end of the hop is a core subscriber on the bus subject, which sees a message when the
//! bus server ingests it (the JetStream store and ack follow).

#[allow(dead_code)]
#[path = "../tests/cloudevents/fixture.rs"]
mod fixture;

use std::time::{Duration, Instant};

use fixture::*;
use futures::StreamExt;
use prost::Message as _;
use serde_json::{json, Value};
use sluice_bus::topology;
use sluice_proto::v1 as pb;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let rate: u64 = args.next().map_or(Ok(1000), |a| a.parse())?;
    let burst: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;

    let mut fx = Fixture::start().await?;
    fx.nats_secret(&json!({"nats": {"configuration": {
        "url": fx.managed_nats.url(), "subjects": ["user-operation"], "authorization": Fixture::auth()}}}))
        .await?;
    fx.start_watcher()?;
    let nats = fx.managed_client().await?;
    fx.wait_subscribed(&nats, "user-operation").await?;
    let mut bus = fx
        .bus
        .client()
        .subscribe(topology::CLOUDEVENTS.subjects)
        .await?;

    // Latency at a fixed rate.
    let mut sent = vec![None; events];
    let mut latencies = Vec::with_capacity(events);
    let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let mut ticker = tokio::time::interval(period);
    let mut next = 0;
    while latencies.len() < events {
        tokio::select! {
            _ = ticker.tick(), if next < events => {
                nats.publish("user-operation", event(next).into()).await?;
                sent[next] = Some(Instant::now());
                next += 1;
            }
            message = bus.next() => {
                let Some(message) = message else { anyhow::bail!("bus subscription ended") };
                if let Some(i) = index(&message.payload) {
                    if let Some(at) = sent.get(i).copied().flatten() {
                        latencies.push(at.elapsed());
                    }
                }
            }
        }
    }
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "latency, {events} events at {rate}/s: p50 {:?}  p99 {:?}  max {:?}",
        pct(0.50),
        pct(0.99),
        latencies[latencies.len() - 1]
    );

    // Sustained throughput: a burst as fast as the publisher goes.
    let started = Instant::now();
    let offset = events;
    let publisher = {
        let nats = nats.clone();
        tokio::spawn(async move {
            for i in offset..offset + burst {
                nats.publish("user-operation", event(i).into()).await?;
            }
            nats.flush().await?;
            anyhow::Ok(())
        })
    };
    let mut seen = 0;
    while seen < burst {
        let message = tokio::time::timeout(Duration::from_secs(30), bus.next()).await?;
        let Some(message) = message else {
            anyhow::bail!("bus subscription ended")
        };
        if index(&message.payload).is_some_and(|i| i >= offset) {
            seen += 1;
        }
    }
    publisher.await??;
    let elapsed = started.elapsed();
    println!(
        "throughput, burst of {burst}: {elapsed:?}, {:.0} events/s",
        burst as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

/// Seed 004's login event, numbered in its data.
fn event(i: usize) -> String {
    json!({"specversion": "1.0", "type": "auth.example.com.login", "source": "auth.example.com",
           "id": "10001", "subject": "mgianluc", "datacontenttype": "application/json",
           "data": {"message": "User mgianluc login", "i": i}})
    .to_string()
}

fn index(payload: &[u8]) -> Option<usize> {
    let received = pb::CloudEventReceived::decode(payload).ok()?;
    let event: Value = serde_json::from_slice(&received.event_json).ok()?;
    event["data"]["i"].as_u64().map(|i| i as usize)
}
