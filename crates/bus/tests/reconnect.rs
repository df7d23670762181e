//! Outputs in flight when nats-server crashes: their publish acks never come, so they are
//! published again as soon as the connection drops (same message ids) and are all stored once
//! the server is back on its store, without waiting for the 10 s ack timeout and without
//! failing their inputs.

use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_bus::runner::publish::{publish_stored, Cancelled, Stored};
use sluice_bus::window::Settled;
use sluice_bus::{topology, AckWindow, Bus, Outgoing};
use sluice_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

const OUTPUTS: usize = 2_000;
/// Well under the 10 s ack timeout that a lost ack would otherwise take.
const BACK_WITHIN: Duration = Duration::from_secs(5);

fn outputs(prefix: &str) -> Vec<Outgoing> {
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    (0..OUTPUTS)
        .map(|i| Outgoing {
            ttl: None,
            subject: topology::desired_subject(&format!("{prefix}-{i}"), &cluster),
            msg_id: format!("{prefix}-{i}"),
            payload: Bytes::from(vec![b'x'; 512]),
            traceparent: None,
        })
        .collect()
}

/// Messages on the desired-state stream (each test's server holds only its own outputs).
async fn stored(nats: &NatsServer) -> anyhow::Result<usize> {
    let bus = Bus::connect(&nats.url()).await?;
    let mut stream = bus.jetstream().get_stream(topology::DESIRED.name).await?;
    let info = stream.info().await?;
    Ok(usize::try_from(info.state.messages)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_publishes_again_what_a_crash_lost_and_settles_its_inputs_as_stored(
) -> anyhow::Result<()> {
    let mut nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let mut window = AckWindow::with_budget(1, OUTPUTS * 2);
    window.publish(&bus, outputs("w"), Vec::new()).await?;
    nats.restart().await?;
    let restarted = Instant::now();
    let settled = tokio::time::timeout(BACK_WITHIN, window.next()).await?;
    assert!(
        matches!(settled, Some(Settled::Acked)),
        "the entry failed: {settled:?}"
    );
    assert!(restarted.elapsed() < BACK_WITHIN);
    assert_eq!(stored(&nats).await?, OUTPUTS);
    Ok(())
}

/// `publish_stored` of `outputs` on a task of its own (the server is killed meanwhile).
fn publishing_stored(
    bus: &Bus,
    outputs: Vec<Outgoing>,
) -> tokio::task::JoinHandle<Result<Stored, Cancelled>> {
    let bus = bus.clone();
    tokio::spawn(async move { publish_stored(&bus, outputs, &CancellationToken::new()).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_stored_returns_once_every_output_survived_a_crash() -> anyhow::Result<()> {
    let mut nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let publishing = publishing_stored(&bus, outputs("p"));
    nats.restart().await?;
    let restarted = Instant::now();
    let report = tokio::time::timeout(BACK_WITHIN, publishing).await???;
    assert!(restarted.elapsed() < BACK_WITHIN);
    assert!(report.refused.is_empty());
    assert_eq!(stored(&nats).await?, OUTPUTS);
    Ok(())
}

/// Versions of one subject's state, published one after another.
const VERSIONS: usize = 100;
/// Subjects of a state stream, each written `VERSIONS` times.
const KEYS: usize = 20;

/// `VERSIONS` successive states of `KEYS` units, in publication order: every unit's first
/// version, then every unit's second, and so on.
fn versions() -> Vec<Outgoing> {
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    (0..VERSIONS)
        .flat_map(|v| {
            let cluster = cluster.clone();
            (0..KEYS).map(move |k| Outgoing {
                ttl: None,
                subject: topology::desired_subject(&format!("unit-{k}"), &cluster),
                msg_id: format!("unit-{k}-v{v}"),
                payload: Bytes::from(format!("v{v}")),
                traceparent: None,
            })
        })
        .collect()
}

/// Fails, naming them, when units' last stored state is not their last version.
async fn every_unit_at_its_last_version(nats: &NatsServer, round: usize) -> anyhow::Result<()> {
    let bus = Bus::connect(&nats.url()).await?;
    let last = format!("v{}", VERSIONS - 1);
    let mut wrong = Vec::new();
    for delivered in bus
        .replay_state(topology::DESIRED, topology::DESIRED.subjects)
        .await?
    {
        if delivered.payload != last.as_bytes() {
            wrong.push(format!(
                "{} holds {}",
                delivered.subject,
                String::from_utf8_lossy(&delivered.payload)
            ));
        }
    }
    bus.close().await;
    anyhow::ensure!(
        wrong.is_empty(),
        "round {round}: {} units went back: {wrong:?}",
        wrong.len()
    );
    Ok(())
}

/// A server that restarts on its store remembers the message ids of the messages it still
/// holds, not of those a newer message on their subject replaced: an older state whose ack the
/// crash lost, published again after the newer one was stored, would be stored again over it.
/// So an output is not published again once a newer output on its subject of a last-value
/// stream was published: every unit ends at its last version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_state_is_not_published_again_over_a_newer_one_after_a_crash() -> anyhow::Result<()>
{
    for round in 0..3 {
        let mut nats = NatsServer::start().await?;
        let bus = Bus::connect(&nats.url()).await?;
        // One entry per output, published while the server is killed.
        let publishing = tokio::spawn({
            let bus = bus.clone();
            async move {
                let mut window = AckWindow::with_budget(VERSIONS * KEYS, VERSIONS * KEYS);
                for output in versions() {
                    window.publish(&bus, [output], Vec::new()).await?;
                }
                let mut settled = Vec::new();
                while let Some(entry) = window.next().await {
                    settled.push(entry);
                }
                anyhow::Ok(settled)
            }
        });
        nats.restart().await?;
        for settled in tokio::time::timeout(BACK_WITHIN, publishing).await??? {
            assert!(
                matches!(settled, Settled::Acked),
                "round {round}: {settled:?}"
            );
        }
        every_unit_at_its_last_version(&nats, round).await?;
    }
    Ok(())
}

/// As above, for a producer without inputs (`publish_stored`, the watcher's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_stored_never_stores_an_older_state_over_a_newer_one_after_a_crash(
) -> anyhow::Result<()> {
    for round in 0..3 {
        let mut nats = NatsServer::start().await?;
        let bus = Bus::connect(&nats.url()).await?;
        let publishing = publishing_stored(&bus, versions());
        nats.restart().await?;
        let report = tokio::time::timeout(BACK_WITHIN, publishing).await???;
        assert!(report.refused.is_empty());
        every_unit_at_its_last_version(&nats, round).await?;
    }
    Ok(())
}
