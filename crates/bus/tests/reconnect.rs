//! Outputs in flight when nats-server crashes: their publish acks never come, so they are
//! published again as soon as the connection drops (same message ids) and are all stored once
//! the server is back on its store, without waiting for the 10 s ack timeout and without
//! failing their inputs.

use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_bus::runner::publish::publish_stored;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_stored_returns_once_every_output_survived_a_crash() -> anyhow::Result<()> {
    let mut nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    let token = CancellationToken::new();
    let publishing = tokio::spawn({
        let bus = bus.clone();
        let token = token.clone();
        async move { publish_stored(&bus, outputs("p"), &token).await }
    });
    nats.restart().await?;
    let restarted = Instant::now();
    let report = tokio::time::timeout(BACK_WITHIN, publishing).await???;
    assert!(restarted.elapsed() < BACK_WITHIN);
    assert!(report.refused.is_empty());
    assert_eq!(stored(&nats).await?, OUTPUTS);
    Ok(())
}
