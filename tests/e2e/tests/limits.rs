//! No ceiling where the units are bounded, and what cannot fit fails visibly and alone, on a
//! bus whose messages carry at most 32 KiB: twenty Services of a `oneForEvent` trigger become
//! twenty resource units (their desired state as one message would take about 54 KiB); eighty
//! Services make the match set itself outgrow a message, which becomes a failure in the
//! EventReport and the trigger's status while every service keeps running and the other
//! cluster's events still become ClusterProfiles; once the set fits again everything converges
//! with nothing left over (ADR 0018).

use std::time::Duration;

use serde_json::Value;
use sluice_cli::demo::{self, owned_by, profiles_for, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
const DEADLINE: Duration = Duration::from_secs(60);
const MAX_PAYLOAD: usize = 32 * 1024;

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

fn service(index: usize) -> String {
    demo::SERVICE.replace("name: my-service", &format!("name: service-{index:03}"))
}

async fn create_services(stack: &Stack, range: std::ops::Range<usize>) -> anyhow::Result<()> {
    for index in range {
        stack.apply_yaml("cluster-a", &service(index)).await?;
    }
    Ok(())
}

/// The trigger's `clusterInfo` entry for a cluster.
async fn cluster_info(stack: &Stack, cluster: &str) -> Option<Value> {
    let trigger = stack
        .get(
            MANAGEMENT,
            "lib.projectsveltos.io/v1alpha1",
            "EventBasedAddOn",
            "",
            TRIGGER,
        )
        .await
        .ok()
        .flatten()?;
    trigger["status"]["clusterInfo"]
        .as_array()?
        .iter()
        .find(|info| info["cluster"]["name"] == cluster)
        .cloned()
}

/// Waits until cluster-a has exactly `count` of the trigger's ClusterProfiles and its status
/// says Provisioned.
async fn provisioned_with(stack: &Stack, count: usize) -> anyhow::Result<()> {
    wait_for(
        &format!("{count} profiles in cluster-a, provisioned"),
        DEADLINE,
        || async {
            let owned = owned_by(stack, TRIGGER, "cluster-a").await.ok()?;
            let profiles = owned
                .iter()
                .filter(|o| o["kind"] == "ClusterProfile")
                .count();
            let provisioned = cluster_info(stack, "cluster-a")
                .await
                .is_some_and(|info| info["status"] == "Provisioned");
            (profiles == count && provisioned).then_some(())
        },
    )
    .await
    .map_err(|e| fail(stack, e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_too_large_for_the_bus_fail_alone_and_recover() -> anyhow::Result<()> {
    let config = format!("max_payload: {MAX_PAYLOAD}\n");
    let mut stack =
        Stack::start_with_nats_config(&["cluster-a", "cluster-b"], None, &config).await?;
    for cluster in ["cluster-a", "cluster-b"] {
        stack.register_cluster(cluster, &[("env", "fv")]).await?;
    }
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;

    // Twenty Services: each is its own unit, so none outgrows a message.
    create_services(&stack, 0..20).await?;
    provisioned_with(&stack, 20).await?;

    // The other cluster's events still flow.
    stack.apply_yaml("cluster-b", demo::SERVICE).await?;
    wait_profile(&stack, TRIGGER, "cluster-b", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;

    // Eighty Services: now the match set itself outgrows a message; the EventReport says so.
    create_services(&stack, 20..80).await?;
    let report_name = "sveltos--sveltos-service--cluster-a";
    let report = wait_for(
        "the EventReport to show the match set's size",
        DEADLINE,
        || async {
            stack
                .event_report(report_name)
                .await
                .ok()
                .flatten()
                .filter(|r| {
                    r["status"]["failureMessage"].as_str().is_some_and(|m| {
                        m.contains("match set of eventsource sveltos-service takes")
                    })
                })
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    assert!(
        report["status"]["failureMessage"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("over the {} bytes", MAX_PAYLOAD - 4096))),
        "{report}"
    );
    let failed = wait_for(
        "the trigger's status to show the match set's size",
        DEADLINE,
        || async {
            cluster_info(&stack, "cluster-a")
                .await
                .filter(|info| info["status"] == "Failed")
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    assert!(
        failed["failureMessage"]
            .as_str()
            .is_some_and(|m| m.contains("match set of eventsource sveltos-service takes")),
        "{failed}"
    );
    assert_eq!(
        stack.exited_services(),
        Vec::<&str>::new(),
        "{}",
        stack.logs()
    );

    // Back under the limit: exactly the two remaining Services have their profiles.
    for index in 2..80 {
        stack
            .delete(
                "cluster-a",
                "v1",
                "Service",
                "default",
                &format!("service-{index:03}"),
            )
            .await?;
    }
    provisioned_with(&stack, 2).await?;
    for index in 0..2 {
        let name = format!("service-{index:03}");
        assert_eq!(
            profiles_for(&stack, TRIGGER, "cluster-a", &name)
                .await?
                .len(),
            1,
            "{name}"
        );
    }
    assert_eq!(
        stack.exited_services(),
        Vec::<&str>::new(),
        "{}",
        stack.logs()
    );
    Ok(())
}
