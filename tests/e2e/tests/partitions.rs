//! The evaluator and the renderer run as partitions (ADR 0051), on seed 000's NetworkPolicy
//! example over two clusters in different partitions: each partition handles its own
//! clusters' events and nothing of the others', each under a lease of its own; a partition
//! stopped holds up only its own clusters, and partitions that take over from the whole stage
//! keep what it deployed.

use std::time::Duration;

use sluice_bus::{topology, Partition};
use sluice_cli::demo::{self, wait_cleaned, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};

const TRIGGER: &str = "service-network-policy";
const DEADLINE: Duration = Duration::from_secs(30);
/// How long a change of a cluster whose partition is stopped is watched not to flow, once the
/// same change of the other cluster has.
const QUIET: Duration = Duration::from_secs(2);
const CLUSTERS: [&str; 2] = ["cluster-a", "cluster-b"];

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

fn partition(text: &str) -> Partition {
    text.parse().expect("a partition")
}

/// Leader election on, with short periods: each partition's process must take its own lease.
const LEASE: [(&str, &str); 4] = [
    ("SLUICE_LEADER_ELECT", "true"),
    ("SLUICE_LEADER_ELECT_LEASE_DURATION", "2s"),
    ("SLUICE_LEADER_ELECT_RENEW_DEADLINE", "1400ms"),
    ("SLUICE_LEADER_ELECT_RETRY_PERIOD", "200ms"),
];

/// The process of partition `index` of 2 of `service`: the stack's own for 0, `<service>-p1`.
fn process(service: &'static str, index: u16) -> &'static str {
    match (service, index) {
        (service, 0) => service,
        ("sluice-evaluator", _) => "sluice-evaluator-p1",
        _ => "sluice-renderer-p1",
    }
}

/// (Re)starts partition `index` of 2 of `service` (`sluice-evaluator` or `sluice-renderer`),
/// with leader election.
fn start_partition(stack: &mut Stack, service: &'static str, index: u16) -> anyhow::Result<()> {
    let value = format!("{index}/2");
    let mut env = LEASE.to_vec();
    env.push(("SLUICE_PARTITION", &value));
    match process(service, index) {
        own if own == service => stack.restart_service_with(service, &env),
        replica => stack.start_replica(service, replica, &env),
    }
}

/// Seed 000's Service, named `name`.
fn service(name: &str) -> String {
    demo::SERVICE.replace("name: my-service", &format!("name: {name}"))
}

/// Creates the Service `name` in both clusters; waits for `flows`' profile, then checks that
/// `held`'s does not come while its partition is stopped.
async fn only_one_flows(stack: &Stack, name: &str, flows: &str, held: &str) -> anyhow::Result<()> {
    for cluster in CLUSTERS {
        stack.apply_yaml(cluster, &service(name)).await?;
    }
    wait_profile(stack, TRIGGER, flows, name, DEADLINE)
        .await
        .map_err(|e| fail(stack, e))?;
    tokio::time::sleep(QUIET).await;
    let held_profiles = demo::profiles_for(stack, TRIGGER, held, name).await?;
    assert!(
        held_profiles.is_empty(),
        "{held}'s {name} became a profile with its partition stopped: {held_profiles:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_partition_handles_its_own_clusters_and_no_others() -> anyhow::Result<()> {
    // The two clusters fall in different partitions of two.
    let cluster_key = |name: &str| format!("sveltos.default.{name}");
    let (p0, p1) = (partition("0/2"), partition("1/2"));
    assert!(p1.owns(&topology::match_subject(&cluster_key("cluster-a"), "es")));
    assert!(p0.owns(&topology::match_subject(&cluster_key("cluster-b"), "es")));

    let mut stack = Stack::start(&CLUSTERS, None).await?;
    for cluster in CLUSTERS {
        stack.register_cluster(cluster, &[("env", "fv")]).await?;
    }
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;
    // The whole stages deploy first.
    let mut uids = Vec::new();
    for cluster in CLUSTERS {
        stack.apply_yaml(cluster, &service("my-service")).await?;
        let profile = wait_profile(&stack, TRIGGER, cluster, "my-service", DEADLINE)
            .await
            .map_err(|e| fail(&stack, e))?;
        uids.push(profile["metadata"]["uid"].clone());
    }

    // Two partitions of each take over, each partition's process leading on a lease of its
    // own.
    for service in ["sluice-evaluator", "sluice-renderer"] {
        for index in 0..2 {
            start_partition(&mut stack, service, index)?;
        }
    }
    sluice_testkit::wait_for("every partition to lead", DEADLINE, || async {
        for service in ["sluice-evaluator", "sluice-renderer"] {
            for index in 0..2 {
                let name = service.trim_start_matches("sluice-");
                let series = format!("sluice_leader{{service=\"{name}\",shard=\"p{index}\"}}");
                let metrics = demo::metrics(&stack, process(service, index)).await.ok()?;
                (metrics.get(&series).copied() == Some(1.0)).then_some(())?;
            }
        }
        Some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    for cluster in CLUSTERS {
        stack.apply_yaml(cluster, &service("other-service")).await?;
    }
    for cluster in CLUSTERS {
        wait_profile(&stack, TRIGGER, cluster, "other-service", DEADLINE)
            .await
            .map_err(|e| fail(&stack, e))?;
    }

    // cluster-a's renderer partition stopped: only cluster-b's changes become profiles, and
    // cluster-a's come once it is back.
    stack.stop_service("sluice-renderer-p1")?;
    only_one_flows(&stack, "third-service", "cluster-b", "cluster-a").await?;
    start_partition(&mut stack, "sluice-renderer", 1)?;
    wait_profile(&stack, TRIGGER, "cluster-a", "third-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;

    // cluster-b's evaluator partition stopped: likewise the other way round.
    stack.stop_service("sluice-evaluator")?;
    only_one_flows(&stack, "fourth-service", "cluster-a", "cluster-b").await?;
    start_partition(&mut stack, "sluice-evaluator", 0)?;
    wait_profile(&stack, TRIGGER, "cluster-b", "fourth-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;

    // No partition's start withdrew or rewrote what another, or the whole stage, deployed.
    for (cluster, uid) in CLUSTERS.iter().zip(&uids) {
        let profiles = demo::profiles_for(&stack, TRIGGER, cluster, "my-service").await?;
        assert_eq!(profiles.len(), 1, "{cluster}: {profiles:?}");
        assert_eq!(
            &profiles[0]["metadata"]["uid"], uid,
            "{cluster}'s profile was written anew"
        );
    }
    for cluster in CLUSTERS {
        for name in ["other-service", "third-service", "fourth-service"] {
            let profiles = demo::profiles_for(&stack, TRIGGER, cluster, name).await?;
            assert_eq!(profiles.len(), 1, "{cluster}'s {name}: {profiles:?}");
        }
    }

    // Each partition took the other's inputs off its consumer without handling them.
    for (process, consumer, stream) in [
        ("sluice-evaluator", "evaluator-p0", "SLUICE_CHANGES"),
        ("sluice-evaluator-p1", "evaluator-p1", "SLUICE_CHANGES"),
        ("sluice-renderer", "renderer-p0", "SLUICE_MATCH"),
        ("sluice-renderer-p1", "renderer-p1", "SLUICE_MATCH"),
    ] {
        let series = format!(
            "sluice_stage_other_partitions_inputs_total{{consumer=\"{consumer}\",stream=\"{stream}\"}}"
        );
        let skipped = demo::metrics(&stack, process)
            .await?
            .get(&series)
            .copied()
            .unwrap_or_default();
        assert!(skipped > 0.0, "{process}: {series} is {skipped}");
    }

    // Every Service deleted: both partitions clean up their clusters.
    for cluster in CLUSTERS {
        for name in [
            "my-service",
            "other-service",
            "third-service",
            "fourth-service",
        ] {
            stack
                .delete(cluster, "v1", "Service", "default", name)
                .await?;
        }
    }
    for cluster in CLUSTERS {
        wait_cleaned(&stack, TRIGGER, cluster, DEADLINE)
            .await
            .map_err(|e| fail(&stack, e))?;
    }

    // The template changed: every partition renders every trigger again, and renders
    // nothing of the clusters it does not own (what it knew of them when it started is gone).
    stack
        .apply_yaml(
            MANAGEMENT,
            &demo::EVENT_BASED_ADDON.replace("name: front-", "name: edge-"),
        )
        .await?;
    for cluster in CLUSTERS {
        stack.apply_yaml(cluster, &service("fifth-service")).await?;
    }
    for cluster in CLUSTERS {
        sluice_testkit::wait_for("the new template's policy", DEADLINE, || async {
            let owned = demo::owned_by(&stack, TRIGGER, cluster).await.ok()?;
            owned
                .iter()
                .any(|o| o.to_string().contains("edge-fifth-service"))
                .then_some(())
        })
        .await
        .map_err(|e| fail(&stack, e))?;
    }
    tokio::time::sleep(QUIET).await;
    for cluster in CLUSTERS {
        let profiles = demo::owned_by(&stack, TRIGGER, cluster)
            .await?
            .into_iter()
            .filter(|o| o["kind"] == "ClusterProfile")
            .count();
        assert_eq!(profiles, 1, "{cluster}: only fifth-service's profile");
    }
    Ok(())
}
