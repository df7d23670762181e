//! Replays on a fleet's scale: nats-server 2.15 allows a stream 1,000 consumers, and each replay
//! is a consumer while it reads. A watcher starting on more clusters than that replays each
//! cluster's published state at once; every replay must succeed, and none may leave its
//! consumer behind.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use sluice_bus::{topology, Bus, Outgoing};
use sluice_testkit::NatsServer;

const CLUSTERS: usize = 1_500;

fn cluster(i: usize) -> String {
    topology::cluster_tokens("sveltos", "default", &format!("fleet-{i:04}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replays_at_once_than_a_stream_allows_consumers_all_succeed_and_leave_none(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    futures::stream::iter(0..CLUSTERS)
        .map(|i| {
            let bus = &bus;
            async move {
                bus.publish(Outgoing {
                    ttl: None,
                    subject: topology::change_subject(&cluster(i), "", "Service", "default", "web"),
                    msg_id: format!("change-{i}"),
                    payload: Bytes::from(format!("{i}")),
                    traceparent: None,
                })
                .await?
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))
            }
        })
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;

    let start = Instant::now();
    let replays: Vec<_> = futures::stream::iter(0..CLUSTERS)
        .map(|i| {
            let bus = &bus;
            async move {
                let filter = topology::change_kind_filter(&cluster(i), "", "Service");
                bus.replay_state(topology::CHANGES, &filter).await
            }
        })
        .buffer_unordered(CLUSTERS)
        .collect()
        .await;
    let elapsed = start.elapsed();
    let mut read = 0;
    for replay in replays {
        let replay = replay.map_err(|e| anyhow::anyhow!("{}", sluice_runtime::error_chain(&e)))?;
        assert_eq!(replay.len(), 1, "each cluster's one change");
        read += 1;
    }
    assert_eq!(read, CLUSTERS);
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
    let mut stream = bus.jetstream().get_stream(topology::CHANGES.name).await?;
    let consumers = stream.info().await?.state.consumer_count;
    assert_eq!(consumers, 0, "replay consumers left behind");
    eprintln!("{CLUSTERS} replays at once in {elapsed:?}");
    Ok(())
}
