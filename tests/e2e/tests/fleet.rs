//! One EventTrigger over a fleet, the `sluice demo --fleet` measurement at a small size: every
//! cluster already holds its Services when the trigger arrives (the watcher lists them, the
//! evaluator publishes growing match sets, the later stages coalesce them, ADR 0010); exactly one
//! ClusterProfile and one ConfigMap per Service appear, and deleting the trigger removes all of
//! them and releases its finalizer. The clusters are in two shards, each watched by a watcher of
//! its own (ADR 0050): half of the profiles come through each; and the evaluator and the
//! renderer run as two partitions each (ADR 0051).

use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trigger_over_ten_clusters_reconciles_and_tears_down_completely() -> anyhow::Result<()>
{
    let mut progress = Vec::new();
    let measured = tokio::time::timeout(
        Duration::from_secs(240),
        sluice_cli::fleet::measure(
            10,
            30,
            sluice_cli::fleet::Spread {
                shards: 2,
                partitions: 2,
            },
            &mut progress,
        ),
    )
    .await;
    let progress = String::from_utf8_lossy(&progress).to_string();
    let report = measured
        .map_err(|_| anyhow::anyhow!("fleet 10x30 not done after 240 s:\n{progress}"))??;
    assert_eq!((report.clusters, report.resources), (10, 30));
    assert!(
        progress.contains("in 2 shard(s) and 2 partition(s)"),
        "{progress}"
    );
    // The second partitions' processes ran beside the stack's own.
    for process in ["sluice-evaluator-p1 ", "sluice-renderer-p1 "] {
        assert!(progress.contains(process), "{progress}");
    }
    assert!(
        progress.contains("# all 300 ClusterProfiles and ConfigMaps exist after"),
        "{progress}"
    );
    assert!(
        progress.contains("# trigger deleted: everything gone and the trigger released after"),
        "{progress}"
    );
    Ok(())
}
