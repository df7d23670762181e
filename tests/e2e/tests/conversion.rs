//! Seed 000 through CRD conversion on the whole stack: the v1alpha1 EventSource and
//! EventBasedAddOn are applied with kubectl as the seed prints them, the API server stores the
//! EventSource in v1beta1 through the watcher's conversion webhook, the pipeline produces the
//! ClusterProfile, and `kubectl get` shows the flat shape in v1alpha1 and the resourceSelectors
//! shape in v1beta1.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_cli::demo::{self, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};

const DEADLINE: Duration = Duration::from_secs(30);

fn example(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/seed-000-networkpolicy")
        .join(file)
}

async fn kubectl(stack: &Stack, args: &[&str]) -> anyhow::Result<String> {
    stack
        .kubectl(MANAGEMENT, args)
        .await
        .map_err(|e| anyhow::anyhow!("{e:#}\n{}", stack.logs()))
}

async fn get_yaml(stack: &Stack, resource: &str, name: &str) -> anyhow::Result<Value> {
    let text = kubectl(stack, &["get", resource, name, "-o", "yaml"]).await?;
    Ok(serde_yaml::from_str(&text)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_goes_through_conversion_and_reads_in_both_versions() -> anyhow::Result<()> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    for file in ["eventsource.yaml", "eventbasedaddon.yaml"] {
        kubectl(
            &stack,
            &["apply", "-f", &example(file).display().to_string()],
        )
        .await?;
    }
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    wait_profile(
        &stack,
        "service-network-policy",
        "cluster-a",
        "my-service",
        DEADLINE,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;

    let alpha = get_yaml(
        &stack,
        "eventsources.v1alpha1.lib.projectsveltos.io",
        "sveltos-service",
    )
    .await?;
    assert_eq!(alpha["apiVersion"], "lib.projectsveltos.io/v1alpha1");
    assert_eq!(
        alpha["spec"],
        json!({"collectResources": true, "group": "", "version": "v1", "kind": "Service",
               "labelsFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]})
    );
    let beta = get_yaml(
        &stack,
        "eventsources.v1beta1.lib.projectsveltos.io",
        "sveltos-service",
    )
    .await?;
    assert_eq!(beta["apiVersion"], "lib.projectsveltos.io/v1beta1");
    assert_eq!(
        beta["spec"],
        json!({"collectResources": true, "resourceSelectors": [{"group": "", "version": "v1", "kind": "Service",
               "labelFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]}]})
    );
    // Applying the same file again changes nothing: kubectl reads the flat form back.
    let again = kubectl(
        &stack,
        &[
            "apply",
            "-f",
            &example("eventsource.yaml").display().to_string(),
        ],
    )
    .await?;
    assert!(again.contains("unchanged"), "{again}");
    Ok(())
}
