//! How sluice reaches managed clusters (spec §13), on seed 000's NetworkPolicy example: a Cluster
//! API `Cluster` through its `<name>-kubeconfig` Secret (key `value`), and a kubeconfig Secret
//! rotated while sluice runs, which takes effect without a restart.

use std::time::Duration;

use base64::Engine as _;
use serde_json::json;
use sluice_cli::demo::{self, wait_cleaned, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_domain::naming;
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
const DEADLINE: Duration = Duration::from_secs(30);

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

fn encoded(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capi_cluster_is_reached_through_its_kubeconfig_secret() -> anyhow::Result<()> {
    let stack = Stack::start(&["capi-a"], None).await?;
    stack
        .apply(
            MANAGEMENT,
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "capi-a-kubeconfig", "namespace": "default"},
                    "data": {"value": encoded(&stack.server.kubeconfig_for("capi-a"))}}),
        )
        .await?;
    let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                         "metadata": {"name": "capi-a", "namespace": "default", "labels": {"env": "fv"}},
                         "spec": {}});
    stack.apply(MANAGEMENT, &cluster).await?;
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;
    stack.apply_yaml("capi-a", demo::SERVICE).await?;
    // A CAPI cluster is configured once its control plane is ready.
    let mut ready = cluster.clone();
    ready["status"] = json!({"controlPlaneReady": true});
    stack.apply_status(MANAGEMENT, &ready).await?;
    let profile = wait_profile(&stack, TRIGGER, "capi-a", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    assert_eq!(
        profile["spec"]["clusterRefs"],
        json!([{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                "namespace": "default", "name": "capi-a"}])
    );
    assert_eq!(
        profile["metadata"]["labels"][naming::LABEL_CLUSTER_TYPE],
        "Capi"
    );
    // The EventReport named as Sveltos names it for a CAPI cluster.
    let report = demo::wait_report(&stack, "capi--sveltos-service--capi-a", DEADLINE, |_| true)
        .await
        .map_err(|e| fail(&stack, e))?;
    assert_eq!(report["spec"]["clusterType"], "Capi");
    // Paused: sluice stops configuring it and withdraws what it created.
    let mut paused = cluster.clone();
    paused["spec"] = json!({"paused": true});
    stack.apply(MANAGEMENT, &paused).await?;
    wait_cleaned(&stack, TRIGGER, "capi-a", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_kubeconfig_takes_effect_without_a_restart() -> anyhow::Result<()> {
    // The SveltosCluster `cluster-a` first reaches the API endpoint `old`, then its Secret is
    // rotated to `new`: only `new` holds the matching Service.
    let stack = Stack::start(&["cluster-a", "old", "new"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    let secret = |endpoint: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "cluster-a-sveltos-kubeconfig", "namespace": "default"},
               "data": {"kubeconfig": encoded(&stack.server.kubeconfig_for(endpoint))}})
    };
    stack.apply(MANAGEMENT, &secret("old")).await?;
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;
    stack.apply_yaml("new", demo::SERVICE).await?;
    let other = demo::SERVICE.replace("name: my-service", "name: old-service");
    stack.apply_yaml("old", &other).await?;
    wait_profile(&stack, TRIGGER, "cluster-a", "old-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;

    stack.apply(MANAGEMENT, &secret("new")).await?;
    wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    // What the old endpoint showed is gone from the new view, so its profile is withdrawn.
    wait_for("old-service withdrawn", DEADLINE, || async {
        demo::profiles_for(&stack, TRIGGER, "cluster-a", "old-service")
            .await
            .ok()
            .filter(Vec::is_empty)
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_source_name_is_rendered_with_each_clusters_data() -> anyhow::Result<()> {
    // One trigger, two clusters, each getting the EventSource named after its label `team`.
    let stack = Stack::start(&["cluster-a", "cluster-b"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv"), ("team", "web")])
        .await?;
    stack
        .register_cluster("cluster-b", &[("env", "fv"), ("team", "db")])
        .await?;
    for (team, label) in [("web", "fv"), ("db", "db-only")] {
        let source = demo::EVENT_SOURCE
            .replace("name: sveltos-service", &format!("name: services-{team}"))
            .replace("value: fv", &format!("value: {label}"));
        stack.apply_yaml(MANAGEMENT, &source).await?;
    }
    let addon = demo::EVENT_BASED_ADDON.replace(
        "eventSourceName: sveltos-service",
        "eventSourceName: \"services-{{ .Cluster.metadata.labels.team }}\"",
    );
    assert_ne!(addon, demo::EVENT_BASED_ADDON);
    stack.apply_yaml(MANAGEMENT, &addon).await?;
    // The same Service in both clusters: only services-web (label sveltos: fv) selects it.
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    stack.apply_yaml("cluster-b", demo::SERVICE).await?;
    let profile = wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    assert_eq!(
        profile["metadata"]["labels"][naming::LABEL_EVENT_SOURCE],
        "services-web"
    );
    let report_b = wait_for(
        "cluster-b's EventReport for services-db",
        DEADLINE,
        || async {
            stack
                .event_report("sveltos--services-db--cluster-b")
                .await
                .ok()
                .flatten()
                .filter(|r| r["status"]["phase"] == "Processed")
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    assert!(report_b["spec"]["matchingResources"]
        .as_array()
        .is_none_or(Vec::is_empty));
    assert!(demo::owned_by(&stack, TRIGGER, "cluster-b")
        .await?
        .is_empty());
    Ok(())
}
