//! The demo the README starts with: seed 000's first example on the local stack. A Service
//! labelled `sveltos: fv` in a managed cluster becomes an EventReport, an instantiated
//! ConfigMap holding the NetworkPolicy and a ClusterProfile in the management cluster; deleting
//! the Service removes them. The v1alpha1 EventSource is converted by the watcher's conversion
//! webhook; the demo prints it in both versions.

use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_domain::naming;
use sluice_testkit::wait_for;

use crate::stack::{Stack, MANAGEMENT};

pub use crate::examples::seed_000_networkpolicy::{EVENT_BASED_ADDON, EVENT_SOURCE, SERVICE};

pub const CLUSTER_PROFILE: (&str, &str) = ("config.projectsveltos.io/v1beta1", "ClusterProfile");

/// Seed 000's first example on a stack with `cluster-a`: the cluster registered (env=fv), the
/// EventSource and EventBasedAddOn in the management cluster, the matching Service my-service in
/// cluster-a.
pub async fn apply_seed(stack: &Stack) -> anyhow::Result<()> {
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    stack.apply_yaml(MANAGEMENT, EVENT_SOURCE).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_BASED_ADDON).await?;
    stack.apply_yaml("cluster-a", SERVICE).await?;
    Ok(())
}

/// The ClusterProfiles an EventTrigger generated for one resource in one cluster.
pub async fn profiles_for(
    stack: &Stack,
    trigger: &str,
    cluster: &str,
    resource: &str,
) -> anyhow::Result<Vec<Value>> {
    stack
        .list(
            MANAGEMENT,
            CLUSTER_PROFILE.0,
            CLUSTER_PROFILE.1,
            &[
                (naming::LABEL_EVENT_TRIGGER, trigger),
                (naming::LABEL_CLUSTER_NAME, cluster),
                (naming::LABEL_RESOURCE_NAME, resource),
            ],
        )
        .await
}

/// Every object (ClusterProfiles, ConfigMaps, Secrets) an EventTrigger owns for a cluster.
pub async fn owned_by(stack: &Stack, trigger: &str, cluster: &str) -> anyhow::Result<Vec<Value>> {
    let labels = [
        (naming::LABEL_EVENT_TRIGGER, trigger),
        (naming::LABEL_CLUSTER_NAME, cluster),
    ];
    let mut out = stack
        .list(MANAGEMENT, CLUSTER_PROFILE.0, CLUSTER_PROFILE.1, &labels)
        .await?;
    out.extend(stack.list(MANAGEMENT, "v1", "ConfigMap", &labels).await?);
    out.extend(stack.list(MANAGEMENT, "v1", "Secret", &labels).await?);
    Ok(out)
}

/// Waits until exactly one ClusterProfile exists for the resource; returns it.
pub async fn wait_profile(
    stack: &Stack,
    trigger: &str,
    cluster: &str,
    resource: &str,
    deadline: Duration,
) -> anyhow::Result<Value> {
    wait_for(
        &format!("ClusterProfile for {resource}"),
        deadline,
        || async {
            match profiles_for(stack, trigger, cluster, resource).await {
                Ok(found) if found.len() == 1 => found.into_iter().next(),
                _ => None,
            }
        },
    )
    .await
}

/// Waits until the EventReport `name` exists and `accept` holds for it. The reporter writes
/// reports beside the pipeline (at most once a second per report), so a report may trail the
/// ClusterProfiles of the same event.
pub async fn wait_report(
    stack: &Stack,
    name: &str,
    deadline: Duration,
    accept: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    wait_for(&format!("EventReport {name}"), deadline, || async {
        stack
            .event_report(name)
            .await
            .ok()
            .flatten()
            .filter(|report| accept(report))
    })
    .await
}

/// Waits until the trigger owns nothing for the cluster.
pub async fn wait_cleaned(
    stack: &Stack,
    trigger: &str,
    cluster: &str,
    deadline: Duration,
) -> anyhow::Result<()> {
    wait_for(
        &format!("cleanup of {trigger} in {cluster}"),
        deadline,
        || async {
            match owned_by(stack, trigger, cluster).await {
                Ok(found) if found.is_empty() => Some(()),
                _ => None,
            }
        },
    )
    .await
}

/// The value of an unlabelled counter on a service's `/metrics` (0 before its first count).
pub async fn counter(stack: &Stack, service: &str, name: &str) -> anyhow::Result<u64> {
    let value = metrics(stack, service).await?.get(name).copied();
    Ok(value.map_or(0, |v| v as u64))
}

/// A service's metrics from its `/metrics`, by series: the name and labels as rendered
/// (`sluice_event_age_seconds_count{consumer="applier",stream="SLUICE_DESIRED"}`).
pub async fn metrics(
    stack: &Stack,
    service: &str,
) -> anyhow::Result<std::collections::HashMap<String, f64>> {
    let url = stack
        .health_url(service, "/metrics")
        .ok_or_else(|| anyhow::anyhow!("{service} serves no metrics"))?;
    let (_, body) = crate::setup::http("GET", &url, Duration::from_secs(10)).await?;
    Ok(sluice_testkit::series(&String::from_utf8_lossy(&body)))
}

/// Waits until the last message on `subject` of `stream` is a tombstone that expires, and
/// returns its time to live (its `Nats-TTL` header).
pub async fn wait_expiring(
    stream: &async_nats::jetstream::stream::Stream,
    subject: &str,
    deadline: Duration,
) -> anyhow::Result<String> {
    wait_for(
        &format!("an expiring message on {subject}"),
        deadline,
        || async {
            let last = stream.get_last_raw_message_by_subject(subject).await.ok()?;
            let ttl = last.headers.get("Nats-TTL")?;
            Some(ttl.as_str().to_string())
        },
    )
    .await
}

/// Waits until the last message on `subject` of `stream` is a tombstone that expires (a
/// removal, a set's end), then purges it, as its time to live would once it ran out unseen;
/// returns its time to live.
pub async fn expire_unseen(
    stack: &Stack,
    stream: sluice_bus::topology::StreamSpec,
    subject: &str,
    deadline: Duration,
) -> anyhow::Result<String> {
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let stream = js.get_stream(stream.name).await?;
    let ttl = wait_expiring(&stream, subject, deadline).await?;
    stream.purge().filter(subject).await?;
    Ok(ttl)
}

fn yaml(value: &Value) -> String {
    let mut clean = value.clone();
    if let Some(meta) = clean.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    serde_yaml::to_string(&clean).unwrap_or_default()
}

/// Applies seed 000's Service to `cluster` and waits for its ClusterProfile: the pipeline goes
/// on (whole-stack tests call it after hostile or failing input). The error carries the logs.
pub async fn seed_service_goes_through(
    stack: &Stack,
    cluster: &str,
    deadline: Duration,
) -> anyhow::Result<()> {
    stack.apply_yaml(cluster, SERVICE).await?;
    wait_profile(
        stack,
        "service-network-policy",
        cluster,
        "my-service",
        deadline,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    Ok(())
}

/// Where each durable consumer stands (pending, unacked, waiting pull requests, its cluster
/// leader on a JetStream cluster): for a failing test's message, to show which stage stalled.
pub async fn consumer_states(stack: &Stack) -> String {
    use sluice_bus::topology;
    let Ok(bus) = sluice_bus::Bus::connect(stack.bus_options()).await else {
        return "bus unreachable".to_string();
    };
    let mut out = String::new();
    for spec in [
        topology::EVALUATOR_CHANGES,
        topology::REPORTER_MATCH,
        topology::RENDERER_MATCH,
        topology::APPLIER_DESIRED,
    ] {
        let info = async {
            let stream = bus.jetstream().get_stream(spec.stream.name).await.ok()?;
            let mut consumer: async_nats::jetstream::consumer::PullConsumer =
                stream.get_consumer(spec.durable).await.ok()?;
            let info = consumer.info().await.ok()?;
            let leader = info
                .cluster
                .as_ref()
                .and_then(|cluster| cluster.leader.clone())
                .unwrap_or_default();
            Some(format!(
                "{}/{}: pending {} unacked {} waiting {} delivered {} leader {leader:?}\n",
                spec.stream.name,
                spec.durable,
                info.num_pending,
                info.num_ack_pending,
                info.num_waiting,
                info.delivered.stream_sequence
            ))
        }
        .await;
        out.push_str(&info.unwrap_or_else(|| format!("{}: no info\n", spec.durable)));
    }
    out
}

/// Installs seed 000 for `cluster` (registered with `env=fv`, so the trigger selects it): the
/// EventSource and the EventBasedAddOn with its ConfigMap.
pub async fn install_seed(stack: &Stack, cluster: &str) -> anyhow::Result<()> {
    stack.register_cluster(cluster, &[("env", "fv")]).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_SOURCE).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_BASED_ADDON).await?;
    Ok(())
}

/// Runs seed 000's first example and prints every step. Returns (create→profile, delete→gone).
pub async fn run(
    stack: &Stack,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<(Duration, Duration)> {
    writeln!(
        out,
        "# registering clusters: cluster-a (env=fv), cluster-b (env=prod)"
    )?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    stack
        .register_cluster("cluster-b", &[("env", "prod")])
        .await?;
    writeln!(out, "# applying seed 000: EventSource sveltos-service, EventBasedAddOn service-network-policy, ConfigMap network-policy")?;
    stack.apply_yaml(MANAGEMENT, EVENT_SOURCE).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_BASED_ADDON).await?;
    // The v1alpha1 EventSource went through the watcher's conversion webhook (ADR 0019).
    for version in ["v1beta1", "v1alpha1"] {
        let api_version = format!("lib.projectsveltos.io/{version}");
        let source = stack
            .get(
                MANAGEMENT,
                &api_version,
                "EventSource",
                "",
                "sveltos-service",
            )
            .await?;
        writeln!(
            out,
            "--- EventSource sveltos-service read as {version} (stored as v1beta1; `kubectl get eventsources.{version}.lib.projectsveltos.io sveltos-service -o yaml`)\n{}",
            source.as_ref().map(yaml).unwrap_or_default()
        )?;
    }
    // Give the watcher a moment to start watching Services in cluster-a: poll for the
    // EventReport of the (still empty) match set, which proves the path is live.
    wait_for(
        "EventReport for cluster-a",
        Duration::from_secs(30),
        || async {
            stack
                .event_report("sveltos--sveltos-service--cluster-a")
                .await
                .ok()
                .flatten()
        },
    )
    .await?;
    writeln!(
        out,
        "# creating Service default/my-service (label sveltos: fv) in cluster-a"
    )?;
    let started = Instant::now();
    stack.apply_yaml("cluster-a", SERVICE).await?;
    let profile = wait_profile(
        stack,
        "service-network-policy",
        "cluster-a",
        "my-service",
        Duration::from_secs(30),
    )
    .await?;
    let create_latency = started.elapsed();
    writeln!(
        out,
        "# ClusterProfile created {create_latency:?} after the Service\n"
    )?;
    let report = wait_report(
        stack,
        "sveltos--sveltos-service--cluster-a",
        Duration::from_secs(30),
        |r| r["spec"]["matchingResources"][0]["name"] == "my-service",
    )
    .await?;
    writeln!(
        out,
        "--- EventReport (management cluster)\n{}",
        yaml(&report)
    )?;
    for cm in stack
        .list(
            MANAGEMENT,
            "v1",
            "ConfigMap",
            &[(naming::LABEL_EVENT_TRIGGER, "service-network-policy")],
        )
        .await?
    {
        writeln!(
            out,
            "--- instantiated ConfigMap (management cluster)\n{}",
            yaml(&cm)
        )?;
    }
    writeln!(
        out,
        "--- ClusterProfile (management cluster)\n{}",
        yaml(&profile)
    )?;
    writeln!(out, "# deleting Service default/my-service in cluster-a")?;
    let started = Instant::now();
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    wait_cleaned(
        stack,
        "service-network-policy",
        "cluster-a",
        Duration::from_secs(30),
    )
    .await?;
    let delete_latency = started.elapsed();
    writeln!(
        out,
        "# ClusterProfile and instantiated ConfigMap removed {delete_latency:?} after the delete"
    )?;
    Ok((create_latency, delete_latency))
}

/// Creates `events` Services one after another in cluster-a (after [`run`]) and measures, for
/// each, the time from the create call to its ClusterProfile existing. With `accumulate` the
/// Services stay (the n-th event meets n-1 other matches) and are deleted at the end; without,
/// each is deleted and cleaned up before the next, so every event is a single event.
/// Polls every millisecond, so each figure is at most about 1 ms late.
pub async fn measure_latency(
    stack: &Stack,
    events: usize,
    accumulate: bool,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(events);
    for i in 0..events {
        let name = format!("bench-{i}");
        let service = SERVICE.replace("name: my-service", &format!("name: {name}"));
        let started = Instant::now();
        stack.apply_yaml("cluster-a", &service).await?;
        loop {
            if profiles_for(stack, "service-network-policy", "cluster-a", &name)
                .await?
                .len()
                == 1
            {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                anyhow::bail!("no ClusterProfile for {name} after 30s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(started.elapsed());
        if !accumulate {
            stack
                .delete("cluster-a", "v1", "Service", "default", &name)
                .await?;
            wait_cleaned(
                stack,
                "service-network-policy",
                "cluster-a",
                Duration::from_secs(30),
            )
            .await?;
        }
    }
    for i in (0..events).filter(|_| accumulate) {
        stack
            .delete(
                "cluster-a",
                "v1",
                "Service",
                "default",
                &format!("bench-{i}"),
            )
            .await?;
    }
    wait_cleaned(
        stack,
        "service-network-policy",
        "cluster-a",
        Duration::from_secs(60),
    )
    .await?;
    Ok(latencies)
}

/// p50, p99 and max of a sample.
pub fn percentiles(samples: &[Duration]) -> (Duration, Duration, Duration) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at =
        |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1];
    (at(0.50), at(0.99), sorted[sorted.len() - 1])
}
