//! How sluice reaches managed clusters (spec §13), on seed 000's NetworkPolicy example: a Cluster
//! API `Cluster` through its `<name>-kubeconfig` Secret (key `value`), and a kubeconfig Secret
//! rotated while sluice runs, which takes effect without a restart; and a cluster's watches of
//! several kinds over one connection.

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

/// The TCP connections process `pid` holds established to `port` on this machine, from
/// `/proc/<pid>/fd` (its sockets) and `/proc/<pid>/net/tcp{,6}` (their peers and states).
fn connections_to(pid: u32, port: u16) -> anyhow::Result<usize> {
    let mut sockets = std::collections::HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(target) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            sockets.insert(inode.to_string());
        }
    }
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // 01: ESTABLISHED.
            if remote_port == Some(port) && *state == "01" && sockets.contains(*inode) {
                count += 1;
            }
        }
    }
    Ok(count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_watches_share_one_connection() -> anyhow::Result<()> {
    // Three kinds watched in cluster-a: one client, so one HTTP/2 connection, not one a kind.
    let stack = Stack::start(&["cluster-a"], None).await?;
    let watcher = stack
        .processes()
        .into_iter()
        .find(|(name, _)| name == "sluice-watcher")
        .map(|(_, pid)| pid)
        .ok_or_else(|| anyhow::anyhow!("no watcher process"))?;
    let port = stack.server.addr().port();
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    // Only the management cluster is watched yet: once the watcher is ready, its connections
    // are those of its management client.
    let ready = stack
        .health_url("sluice-watcher", "/readyz")
        .ok_or_else(|| anyhow::anyhow!("no watcher health address"))?;
    wait_for("the watcher ready", DEADLINE, || async {
        sluice_cli::setup::probe(&ready).await.ok()
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    let before = connections_to(watcher, port)?;
    assert!(before >= 1, "the watcher's management client is connected");
    stack
        .apply_yaml(
            MANAGEMENT,
            r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: three-kinds
spec:
  collectResources: true
  resourceSelectors:
  - {group: "", version: v1, kind: Service, labelFilters: [{key: sveltos, operation: Equal, value: fv}]}
  - {group: "", version: v1, kind: ConfigMap, labelFilters: [{key: sveltos, operation: Equal, value: fv}]}
  - {group: apps, version: v1, kind: Deployment, labelFilters: [{key: sveltos, operation: Equal, value: fv}]}
"#,
        )
        .await?;
    stack
        .apply_yaml(
            MANAGEMENT,
            r#"
apiVersion: lib.projectsveltos.io/v1alpha1
kind: EventBasedAddOn
metadata:
  name: service-network-policy
spec:
  clusterSelector: env=fv
  eventSourceName: three-kinds
  oneForEvent: true
  policyRefs:
  - {name: seen, namespace: default, kind: ConfigMap}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: seen
  namespace: default
data:
  seen.yaml: |
    kind: ConfigMap
    apiVersion: v1
    metadata:
      name: seen-{{ .Resource.metadata.name }}
      namespace: default
"#,
        )
        .await?;
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    stack
        .apply(
            "cluster-a",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "my-config", "namespace": "default", "labels": {"sveltos": "fv"}}}),
        )
        .await?;
    stack
        .apply(
            "cluster-a",
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "my-deployment", "namespace": "default", "labels": {"sveltos": "fv"}},
                    "spec": {"selector": {"matchLabels": {"app": "x"}},
                             "template": {"metadata": {"labels": {"app": "x"}},
                                          "spec": {"containers": [{"name": "x", "image": "x"}]}}}}),
        )
        .await?;
    for resource in ["my-service", "my-config", "my-deployment"] {
        wait_profile(&stack, TRIGGER, "cluster-a", resource, DEADLINE)
            .await
            .map_err(|e| fail(&stack, e))?;
    }
    let after = connections_to(watcher, port)?;
    assert_eq!(
        after,
        before + 1,
        "the watcher's connections to the API server: {before} before cluster-a was watched, {after} with its three kinds"
    );
    Ok(())
}

/// Leases short enough for a test, in the defaults' proportions (ADR 0046).
const LEASE: [(&str, &str); 4] = [
    ("SLUICE_LEADER_ELECT", "true"),
    ("SLUICE_LEADER_ELECT_LEASE_DURATION", "2s"),
    ("SLUICE_LEADER_ELECT_RENEW_DEADLINE", "1400ms"),
    ("SLUICE_LEADER_ELECT_RETRY_PERIOD", "200ms"),
];

/// Whether the watcher process `process` holds its shard's lease (`sluice_leader` 1, its
/// `shard` label the shard's key; none for the default shard).
async fn leads(stack: &Stack, process: &str, shard: &str) -> bool {
    let series = match shard {
        "" => "sluice_leader{service=\"watcher\"}".to_string(),
        shard => format!("sluice_leader{{service=\"watcher\",shard=\"{shard}\"}}"),
    };
    demo::metrics(stack, process)
        .await
        .ok()
        .and_then(|metrics| metrics.get(&series).copied())
        == Some(1.0)
}

/// Puts the SveltosCluster `cluster` in `shard` (its sharding annotation).
async fn annotate(stack: &Stack, cluster: &str, shard: &str) -> anyhow::Result<String> {
    let annotation = format!("{}={shard}", sluice_domain::cluster::SHARD_ANNOTATION);
    let args = [
        "annotate",
        "sveltoscluster",
        cluster,
        "-n",
        "default",
        "--overwrite",
    ];
    let mut args = args.to_vec();
    args.push(&annotation);
    stack.kubectl(MANAGEMENT, &args).await
}

/// Sveltos's sharding (ADR 0050): a cluster annotated `sharding.projectsveltos.io/key: eu` is
/// watched by the watcher started with that shard key, each shard's watcher under a lease of
/// its own; one annotated into another shard is taken over by that shard's watcher with what
/// was deployed for it untouched, and the default shard's watcher does not purge it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_are_watched_by_the_watcher_of_their_shard() -> anyhow::Result<()> {
    let mut stack = Stack::start(&["cluster-a", "cluster-b"], None).await?;
    for cluster in ["cluster-a", "cluster-b"] {
        stack.register_cluster(cluster, &[("env", "fv")]).await?;
    }
    annotate(&stack, "cluster-b", "eu").await?;
    // Both shards' watchers lead at once: each holds the lease of its own shard.
    stack.restart_service_with("sluice-watcher", &LEASE)?;
    let mut eu = LEASE.to_vec();
    eu.push(("SLUICE_SHARD_KEY", "eu"));
    stack.start_replica("sluice-watcher", "sluice-watcher-eu", &eu)?;
    wait_for("both shards' watchers to lead", DEADLINE, || async {
        (leads(&stack, "sluice-watcher", "").await
            && leads(&stack, "sluice-watcher-eu", "eu").await)
            .then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;
    for cluster in ["cluster-a", "cluster-b"] {
        stack.apply_yaml(cluster, demo::SERVICE).await?;
    }
    let mut uids = Vec::new();
    for cluster in ["cluster-a", "cluster-b"] {
        let profile = wait_profile(&stack, TRIGGER, cluster, "my-service", DEADLINE)
            .await
            .map_err(|e| fail(&stack, e))?;
        uids.push(profile["metadata"]["uid"].clone());
    }

    // With the default shard's watcher stopped, cluster-b's changes still flow (the eu watcher
    // watches it) and cluster-a's do not (nobody else does).
    stack.stop_service("sluice-watcher")?;
    let other = demo::SERVICE.replace("my-service", "other-service");
    for cluster in ["cluster-a", "cluster-b"] {
        stack.apply_yaml(cluster, &other).await?;
    }
    wait_profile(&stack, TRIGGER, "cluster-b", "other-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        demo::profiles_for(&stack, TRIGGER, "cluster-a", "other-service")
            .await?
            .is_empty(),
        "cluster-a's Service became a profile with its shard's watcher stopped"
    );

    // cluster-a annotated into shard eu: the eu watcher takes it over (after its grace period)
    // and what was deployed for it stays as it was.
    annotate(&stack, "cluster-a", "eu").await?;
    wait_profile(&stack, TRIGGER, "cluster-a", "other-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    // The default shard's watcher back: cluster-a is in another shard, so nothing of it is
    // purged, and a change there still flows through the eu watcher.
    stack.restart_service_with("sluice-watcher", &LEASE)?;
    wait_for(
        "the default shard's watcher to lead again",
        DEADLINE,
        || async { leads(&stack, "sluice-watcher", "").await.then_some(()) },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    stack
        .apply_yaml(
            "cluster-a",
            &demo::SERVICE.replace("my-service", "third-service"),
        )
        .await?;
    wait_profile(&stack, TRIGGER, "cluster-a", "third-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    for (cluster, uid) in ["cluster-a", "cluster-b"].iter().zip(&uids) {
        let profiles = demo::profiles_for(&stack, TRIGGER, cluster, "my-service").await?;
        assert_eq!(profiles.len(), 1, "{cluster}: {profiles:?}");
        assert_eq!(
            &profiles[0]["metadata"]["uid"], uid,
            "{cluster}'s profile was written anew"
        );
    }
    let log = stack.service_log("sluice-watcher");
    assert!(
        !log.contains("purged state of deleted cluster"),
        "the default shard's watcher purged a cluster of another shard:\n{log}"
    );
    Ok(())
}
