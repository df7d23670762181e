//! Fleet reconcile measurement (issue 7): one EventTrigger (seed 000's NetworkPolicy example)
//! over `clusters` managed clusters holding `resources` matching Services each. Measures the
//! time from applying the trigger to every ClusterProfile and instantiated ConfigMap existing,
//! and from deleting the trigger to all of them gone and the trigger released. With several
//! shards, the clusters are spread round-robin over them (`sharding.projectsveltos.io/key`) and a
//! watcher runs for each (ADR 0050); with several partitions, the evaluator and the renderer
//! run as that many processes each, every one owning the clusters of its partition (ADR 0051).

use std::time::{Duration, Instant};

use std::collections::{BTreeMap, HashSet};

use futures::{stream, StreamExt, TryStreamExt};
use serde_json::json;
use sluice_domain::naming;
use sluice_kube::{apply, watch};

use crate::demo::{CLUSTER_PROFILE, EVENT_BASED_ADDON, EVENT_SOURCE};
use crate::stack::{Stack, MANAGEMENT};

const TRIGGER: &str = "service-network-policy";
const TRIGGER_KIND: (&str, &str) = ("lib.projectsveltos.io/v1alpha1", "EventBasedAddOn");
/// How often the released trigger is polled (one GET).
const POLL: Duration = Duration::from_millis(10);
/// How long either phase may take before the measurement fails.
const LIMIT: Duration = Duration::from_secs(1800);

/// How the fleet's stack spreads the work: over `shards` watchers, and `partitions` evaluators
/// and renderers.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub shards: usize,
    pub partitions: u16,
}

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

/// The shard key of cluster `i` of a fleet in `shards` shards: the default shard (`""`) and
/// `shard-1`, `shard-2`, ...
fn shard_of(i: usize, shards: usize) -> String {
    match i % shards {
        0 => String::new(),
        k => format!("shard-{k}"),
    }
}

/// Annotates the registered clusters into their shards (32 merge patches at a time) and starts
/// a watcher for every shard but the default one (the stack's own watcher).
async fn shard(stack: &mut Stack, names: &[String], shards: usize) -> anyhow::Result<()> {
    let client = stack.client(MANAGEMENT)?.clone();
    let kind = apply::resolve(&client, "lib.projectsveltos.io/v1beta1", "SveltosCluster").await?;
    let clusters: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client, "default", &kind.resource);
    let sharded = names
        .iter()
        .enumerate()
        .map(|(i, name)| (name, shard_of(i, shards)))
        .filter(|(_, key)| !key.is_empty());
    stream::iter(sharded.map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(32, |(name, key)| {
            let clusters = &clusters;
            async move {
                let patch = json!({"metadata": {"annotations": {
                    sluice_domain::cluster::SHARD_ANNOTATION: key}}});
                let params = kube::api::PatchParams::default();
                clusters
                    .patch(name, &params, &kube::api::Patch::Merge(&patch))
                    .await?;
                Ok(())
            }
        })
        .await?;
    for k in 1..shards {
        let key = shard_of(k, shards);
        let process: &'static str = format!("sluice-watcher-{key}").leak();
        stack.start_replica("sluice-watcher", process, &[("SLUICE_SHARD_KEY", &key)])?;
    }
    Ok(())
}

/// Each process's CPU seconds from `before` to `after`, by name: `name 1.23 s, ...`.
fn cpu_spent(before: &[(String, f64)], after: &[(String, f64)]) -> String {
    let mut spent = crate::load::since(after, before);
    spent.sort_by(|a, b| a.0.cmp(&b.0));
    spent
        .iter()
        .map(|(name, seconds)| format!("{name} {seconds:.2} s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the evaluator and the renderer as `count` partitions each: the stack's own processes
/// become partition 0, and one more process of each runs every other partition.
fn partition(stack: &mut Stack, count: u16) -> anyhow::Result<()> {
    for service in ["sluice-evaluator", "sluice-renderer"] {
        stack.restart_service_with(service, &[("SLUICE_PARTITION", &format!("0/{count}"))])?;
        for index in 1..count {
            let process: &'static str = format!("{service}-p{index}").leak();
            stack.start_replica(
                service,
                process,
                &[("SLUICE_PARTITION", &format!("{index}/{count}"))],
            )?;
        }
    }
    Ok(())
}

/// Counts the trigger's ClusterProfiles and ConfigMaps in the management cluster from two
/// label-selected watches, so that waiting costs the API server no LISTs: the figures measure
/// the pipeline, not the observer.
struct Owned {
    counts: tokio::sync::watch::Receiver<(usize, usize)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Owned {
    async fn watch(stack: &Stack) -> anyhow::Result<Owned> {
        let client = stack.client(MANAGEMENT)?.clone();
        let labels =
            BTreeMap::from([(naming::LABEL_EVENT_TRIGGER.to_string(), TRIGGER.to_string())]);
        let (tx, counts) = tokio::sync::watch::channel((0, 0));
        let tx = std::sync::Arc::new(tx);
        let mut tasks = Vec::new();
        for (slot, (api_version, kind)) in [CLUSTER_PROFILE, ("v1", "ConfigMap")]
            .into_iter()
            .enumerate()
        {
            let kind = apply::resolve(&client, api_version, kind).await?;
            let changes = watch::watch_labelled(client.clone(), kind, &labels);
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let mut present = HashSet::new();
                let mut changes = std::pin::pin!(changes);
                while let Some(batch) = changes.next().await {
                    let Ok(batch) = batch else { continue };
                    for change in batch {
                        let (namespace, name, _, object) = change.into_parts();
                        if object.is_some() {
                            present.insert((namespace, name));
                        } else {
                            present.remove(&(namespace, name));
                        }
                    }
                    tx.send_modify(|counts| {
                        if slot == 0 {
                            counts.0 = present.len()
                        } else {
                            counts.1 = present.len()
                        }
                    });
                }
            }));
        }
        Ok(Owned { counts, tasks })
    }

    /// Waits until the counts satisfy `done`, failing after `limit` with the last counts.
    async fn wait(
        &mut self,
        limit: Duration,
        done: impl Fn((usize, usize)) -> bool,
    ) -> anyhow::Result<()> {
        let waited = tokio::time::timeout(limit, self.counts.wait_for(|c| done(*c)))
            .await
            .map(|found| found.map(|_| ()));
        match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => anyhow::bail!("the watches ended"),
            Err(_) => {
                let (profiles, config_maps) = *self.counts.borrow();
                anyhow::bail!(
                    "after {limit:?}: {profiles} ClusterProfiles and {config_maps} ConfigMaps"
                )
            }
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Runs the measurement on a stack of its own and prints progress to `out`.
pub async fn measure(
    clusters: usize,
    resources: usize,
    spread: Spread,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<FleetReport> {
    let Spread { shards, partitions } = spread;
    let names: Vec<String> = (0..clusters).map(cluster_name).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut stack = Stack::start(&refs, None).await?;
    writeln!(
        out,
        "# registering {clusters} clusters, {resources} Services each, in {shards} shard(s) and {partitions} partition(s)"
    )?;
    for name in &names {
        stack.register_cluster(name, &[("env", "fv")]).await?;
    }
    if shards > 1 {
        shard(&mut stack, &names, shards).await?;
    }
    if partitions > 1 {
        partition(&mut stack, partitions)?;
    }
    let stack = stack;
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
    let mut owned = Owned::watch(&stack).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_SOURCE).await?;
    let cpu_before = crate::load::cpu_seconds(&stack);
    let started = Instant::now();
    stack.apply_yaml(MANAGEMENT, EVENT_BASED_ADDON).await?;
    let all = owned
        .wait(LIMIT, |(profiles, config_maps)| {
            profiles == expected && config_maps == expected
        })
        .await;
    all.map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let reconcile = started.elapsed();
    writeln!(
        out,
        "# all {expected} ClusterProfiles and ConfigMaps exist after {reconcile:?}"
    )?;
    writeln!(
        out,
        "# CPU over the reconcile: {}",
        cpu_spent(&cpu_before, &crate::load::cpu_seconds(&stack))
    )?;
    let started = Instant::now();
    let (api_version, kind) = TRIGGER_KIND;
    stack
        .delete(MANAGEMENT, api_version, kind, "", TRIGGER)
        .await?;
    let gone = owned.wait(LIMIT, |counts| counts == (0, 0)).await;
    gone.map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    // The finalizer goes last; poll only this one object.
    loop {
        let trigger = stack
            .get(MANAGEMENT, api_version, kind, "", TRIGGER)
            .await?;
        if trigger.is_none() {
            break;
        }
        if started.elapsed() > LIMIT {
            anyhow::bail!(
                "the trigger was not released after {LIMIT:?}\n{}",
                stack.logs()
            );
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
