//! Fleet reconcile measurement (issue 7): one EventTrigger (seed 000's NetworkPolicy example)
//! over `clusters` managed clusters holding `resources` matching Services each. Measures the
//! time from applying the trigger to every ClusterProfile and instantiated ConfigMap existing,
//! and from deleting the trigger to all of them gone and the trigger released.

use std::time::{Duration, Instant};

use futures::{stream, TryStreamExt};
use serde_json::json;
use sluice_domain::naming;

use crate::demo::{CLUSTER_PROFILE, EVENT_BASED_ADDON, EVENT_SOURCE};
use crate::stack::{Stack, MANAGEMENT};

const TRIGGER: &str = "service-network-policy";
/// How often the management cluster is listed while waiting (the figures' resolution).
const POLL: Duration = Duration::from_millis(250);

/// What one fleet run measured.
#[derive(Clone, Debug)]
pub struct FleetReport {
    pub clusters: usize,
    pub resources: usize,
    /// Trigger applied → every ClusterProfile and instantiated ConfigMap exists.
    pub reconcile: Duration,
    /// Trigger deleted → everything it created is gone and the trigger is released.
    pub teardown: Duration,
}

fn cluster_name(i: usize) -> String {
    format!("fleet-{i:03}")
}

async fn count_owned(stack: &Stack) -> anyhow::Result<(usize, usize)> {
    let labels = [(naming::LABEL_EVENT_TRIGGER, TRIGGER)];
    let profiles = stack
        .list(MANAGEMENT, CLUSTER_PROFILE.0, CLUSTER_PROFILE.1, &labels)
        .await?
        .len();
    let config_maps = stack
        .list(MANAGEMENT, "v1", "ConfigMap", &labels)
        .await?
        .len();
    Ok((profiles, config_maps))
}

/// Runs the measurement on a stack of its own and prints progress to `out`.
pub async fn measure(
    clusters: usize,
    resources: usize,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<FleetReport> {
    let names: Vec<String> = (0..clusters).map(cluster_name).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let stack = Stack::start(&refs, None).await?;
    writeln!(
        out,
        "# registering {clusters} clusters, {resources} Services each"
    )?;
    for name in &names {
        stack.register_cluster(name, &[("env", "fv")]).await?;
    }
    let services: Vec<(String, usize)> = names
        .iter()
        .flat_map(|c| (0..resources).map(move |i| (c.clone(), i)))
        .collect();
    stream::iter(services.into_iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(32, |(cluster, i)| {
            let stack = &stack;
            async move {
                let service = json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("svc-{i:03}"), "namespace": "default",
                                 "labels": {"sveltos": "fv"}},
                    "spec": {"selector": {"app": format!("app-{i}")},
                             "ports": [{"protocol": "TCP", "port": 80, "targetPort": 9376}]}});
                stack.apply(&cluster, &service).await.map(|_| ())
            }
        })
        .await?;
    let expected = clusters * resources;
    writeln!(out, "# applying the EventSource and the EventBasedAddOn; waiting for {expected} ClusterProfiles")?;
    stack.apply_yaml(MANAGEMENT, EVENT_SOURCE).await?;
    let started = Instant::now();
    stack.apply_yaml(MANAGEMENT, EVENT_BASED_ADDON).await?;
    loop {
        let (profiles, config_maps) = count_owned(&stack).await?;
        if profiles == expected && config_maps == expected {
            break;
        }
        if started.elapsed() > Duration::from_secs(1800) {
            anyhow::bail!("after 30 min only {profiles} ClusterProfiles and {config_maps} ConfigMaps of {expected}\n{}", stack.logs());
        }
        tokio::time::sleep(POLL).await;
    }
    let reconcile = started.elapsed();
    writeln!(
        out,
        "# all {expected} ClusterProfiles and ConfigMaps exist after {reconcile:?}"
    )?;
    let started = Instant::now();
    stack
        .delete(
            MANAGEMENT,
            "lib.projectsveltos.io/v1alpha1",
            "EventBasedAddOn",
            "",
            TRIGGER,
        )
        .await?;
    loop {
        let gone = count_owned(&stack).await? == (0, 0)
            && stack
                .get(
                    MANAGEMENT,
                    "lib.projectsveltos.io/v1alpha1",
                    "EventBasedAddOn",
                    "",
                    TRIGGER,
                )
                .await?
                .is_none();
        if gone {
            break;
        }
        if started.elapsed() > Duration::from_secs(1800) {
            anyhow::bail!("teardown not finished after 30 min\n{}", stack.logs());
        }
        tokio::time::sleep(POLL).await;
    }
    let teardown = started.elapsed();
    writeln!(
        out,
        "# trigger deleted: everything gone and the trigger released after {teardown:?}"
    )?;
    Ok(FleetReport {
        clusters,
        resources,
        reconcile,
        teardown,
    })
}
