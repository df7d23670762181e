//! Open-loop load on seed 000's NetworkPolicy trigger (`oneForEvent: true`): `preload` matching
//! Services are created and converged first, then `count` more are created at a fixed `rate`
//! (each at its scheduled time, whether or not earlier ones are done), then deleted at the same
//! rate. Measures, per Service, scheduled create -> its ClusterProfile exists and scheduled
//! delete -> its ClusterProfile is gone, from a label-selected watch (no LISTs by the
//! observer); and the CPU every process of the stack spent per event, from `/proc`, with the API
//! test server's own threads (`sluice_testserver::THREAD_NAME`) told apart from the rest of this
//! process (the load generator, the observer and the conversion webhook). Last, the
//! preloaded Services are deleted and the run fails unless nothing of the trigger is left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt, TryStreamExt};
use serde_json::json;
use sluice_domain::naming;
use sluice_kube::{apply, watch};

use crate::demo::{CLUSTER_PROFILE, EVENT_BASED_ADDON, EVENT_SOURCE};
use crate::stack::{Stack, MANAGEMENT};

const TRIGGER: &str = "service-network-policy";
const CLUSTER: &str = "cluster-a";
/// How long one phase may take past its last scheduled event.
const GRACE: Duration = Duration::from_secs(120);

/// What one load run measured.
#[derive(Clone, Debug)]
pub struct LoadReport {
    pub preload: usize,
    pub preload_elapsed: Duration,
    pub rate: f64,
    pub count: usize,
    /// Scheduled create -> ClusterProfile exists, per Service.
    pub create: Vec<Duration>,
    /// Scheduled delete -> ClusterProfile gone, per Service.
    pub delete: Vec<Duration>,
    /// CPU seconds per process over the create and delete phases together.
    pub cpu: Vec<(String, f64)>,
    /// Of this process's CPU seconds (in `cpu`), those of the API test server's own threads; the
    /// rest is the load generator's, the observer's and the stack's conversion webhook's.
    pub api_server_cpu: f64,
    /// Peak resident memory per process (kB).
    pub peak_rss_kb: Vec<(String, u64)>,
}

impl LoadReport {
    /// CPU of every process together per event (create and delete both count as events).
    pub fn cpu_per_event(&self) -> Duration {
        let total: f64 = self.cpu.iter().map(|(_, s)| s).sum();
        Duration::from_secs_f64(total / (2 * self.count).max(1) as f64)
    }
}

fn service_name(i: usize) -> String {
    format!("load-{i:06}")
}

/// When each resource's ClusterProfile appeared and disappeared, from one watch.
#[derive(Default)]
struct Seen {
    appeared: HashMap<String, Instant>,
    gone: HashMap<String, Instant>,
}

/// Runs the measurement on a stack of its own and prints progress to `out`.
pub async fn measure(
    preload: usize,
    rate: f64,
    count: usize,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<LoadReport> {
    anyhow::ensure!(rate > 0.0, "the rate must be positive");
    let stack = Stack::start(&[CLUSTER], None).await?;
    stack.register_cluster(CLUSTER, &[("env", "fv")]).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_SOURCE).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_BASED_ADDON).await?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let observer = observe(&stack, seen.clone()).await?;
    let services = Services::new(&stack).await?;

    writeln!(out, "# preloading {preload} matching Services")?;
    let started = Instant::now();
    stream::iter((0..preload).map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(32, |i| {
            let services = &services;
            async move { services.create(&service_name(i)).await }
        })
        .await?;
    wait_until(
        &seen,
        GRACE + Duration::from_secs(preload as u64 / 50),
        |s| (0..preload).all(|i| s.appeared.contains_key(&service_name(i))),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let preload_elapsed = started.elapsed();
    writeln!(
        out,
        "# {preload} ClusterProfiles exist after {preload_elapsed:?}"
    )?;

    let names: Vec<String> = (preload..preload + count).map(service_name).collect();
    let cpu_before = cpu_seconds(&stack);
    let api_server_before = threads_cpu_seconds(sluice_testserver::THREAD_NAME);
    writeln!(out, "# creating {count} Services at {rate}/s")?;
    let scheduled = open_loop(&services, &names, rate, Phase::Create).await?;
    wait_until(&seen, GRACE, |s| {
        names.iter().all(|n| s.appeared.contains_key(n))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let create = latencies(&seen, &names, &scheduled, |s| &s.appeared);
    writeln!(out, "# deleting them at {rate}/s")?;
    let scheduled = open_loop(&services, &names, rate, Phase::Delete).await?;
    wait_until(&seen, GRACE, |s| {
        names.iter().all(|n| s.gone.contains_key(n))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let delete = latencies(&seen, &names, &scheduled, |s| &s.gone);
    let cpu_after = cpu_seconds(&stack);
    let api_server_cpu = threads_cpu_seconds(sluice_testserver::THREAD_NAME) - api_server_before;
    clean_up(&stack, &services, &seen, preload, out).await?;
    observer.abort();
    let cpu = cpu_after
        .iter()
        .map(|(name, after)| {
            let before = cpu_before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0.0, |(_, b)| *b);
            (name.clone(), after - before)
        })
        .collect();
    let peak_rss_kb = stack
        .processes()
        .into_iter()
        .map(|(name, pid)| (name, proc_status_kb(pid, "VmHWM:").unwrap_or(0)))
        .collect();
    Ok(LoadReport {
        preload,
        preload_elapsed,
        rate,
        count,
        create,
        delete,
        cpu,
        api_server_cpu,
        peak_rss_kb,
    })
}

/// Deletes the preloaded Services and checks that nothing of the trigger is left.
async fn clean_up(
    stack: &Stack,
    services: &Services,
    seen: &Arc<Mutex<Seen>>,
    preload: usize,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    writeln!(out, "# deleting the {preload} preloaded Services")?;
    let started = Instant::now();
    let names: Vec<String> = (0..preload).map(service_name).collect();
    stream::iter(names.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(32, |name| services.delete(name))
        .await?;
    wait_until(
        seen,
        GRACE + Duration::from_secs(preload as u64 / 50),
        |s| names.iter().all(|n| s.gone.contains_key(n)),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let left = crate::demo::owned_by(stack, TRIGGER, CLUSTER).await?.len();
    anyhow::ensure!(
        left == 0,
        "{left} objects of the trigger left after every Service was deleted"
    );
    writeln!(
        out,
        "# {preload} preloaded Services deleted, nothing of the trigger left, after {:?}",
        started.elapsed()
    )?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Phase {
    Create,
    Delete,
}

/// Starts one request per name at `start + i / rate`, each in its own task, and returns each
/// name's scheduled time once every request has been answered.
async fn open_loop(
    services: &Services,
    names: &[String],
    rate: f64,
    phase: Phase,
) -> anyhow::Result<HashMap<String, Instant>> {
    let start = Instant::now() + Duration::from_millis(50);
    let mut scheduled = HashMap::with_capacity(names.len());
    let requests = names.iter().enumerate().map(|(i, name)| {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        scheduled.insert(name.clone(), at);
        async move {
            tokio::time::sleep_until(at.into()).await;
            match phase {
                Phase::Create => services.create(name).await,
                Phase::Delete => services.delete(name).await,
            }
        }
    });
    // Every request runs at its own time: none waits for an earlier one to be answered.
    stream::iter(requests)
        .buffer_unordered(usize::MAX)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(scheduled)
}

/// Creates and deletes the load's Services in the managed cluster. The Service kind is
/// resolved once, as a client caches discovery: each create or delete is one API request.
struct Services {
    client: kube::Client,
    kind: apply::Kind,
}

impl Services {
    async fn new(stack: &Stack) -> anyhow::Result<Services> {
        let client = stack.client(CLUSTER)?.clone();
        let kind = apply::resolve(&client, "v1", "Service").await?;
        Ok(Services { client, kind })
    }

    async fn create(&self, name: &str) -> anyhow::Result<()> {
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default", "labels": {"sveltos": "fv"}},
            "spec": {"selector": {"app": name},
                     "ports": [{"protocol": "TCP", "port": 80, "targetPort": 9376}]}});
        apply::apply(&self.client, &self.kind, &service, "sluice-cli").await?;
        Ok(())
    }

    async fn delete(&self, name: &str) -> anyhow::Result<()> {
        Ok(apply::delete(&self.client, &self.kind, "default", name).await?)
    }
}

/// Watches the trigger's ClusterProfiles and records, per resource, when its profile appeared
/// and when it went.
async fn observe(
    stack: &Stack,
    seen: Arc<Mutex<Seen>>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let client = stack.client(MANAGEMENT)?.clone();
    let labels = std::collections::BTreeMap::from([(
        naming::LABEL_EVENT_TRIGGER.to_string(),
        TRIGGER.to_string(),
    )]);
    let kind = apply::resolve(&client, CLUSTER_PROFILE.0, CLUSTER_PROFILE.1).await?;
    let changes = watch::watch_labelled(client, kind, &labels);
    Ok(tokio::spawn(async move {
        let mut resources: HashMap<(String, String), String> = HashMap::new();
        let mut changes = std::pin::pin!(changes);
        while let Some(batch) = changes.next().await {
            let Ok(batch) = batch else { continue };
            let now = Instant::now();
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            for change in batch {
                let (namespace, name, _, object) = change.into_parts();
                match object {
                    Some(object) => {
                        let resource = object
                            .pointer(&format!(
                                "/metadata/labels/{}",
                                naming::LABEL_RESOURCE_NAME.replace('/', "~1")
                            ))
                            .and_then(serde_json::Value::as_str)
                            .unwrap_or_default()
                            .to_string();
                        seen.appeared.entry(resource.clone()).or_insert(now);
                        resources.insert((namespace, name), resource);
                    }
                    None => {
                        if let Some(resource) = resources.remove(&(namespace, name)) {
                            seen.gone.entry(resource).or_insert(now);
                        }
                    }
                }
            }
        }
    }))
}

async fn wait_until(
    seen: &Arc<Mutex<Seen>>,
    limit: Duration,
    done: impl Fn(&Seen) -> bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if done(&seen.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(());
        }
        if started.elapsed() > limit {
            anyhow::bail!("not converged after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn latencies(
    seen: &Arc<Mutex<Seen>>,
    names: &[String],
    scheduled: &HashMap<String, Instant>,
    field: impl Fn(&Seen) -> &HashMap<String, Instant>,
) -> Vec<Duration> {
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    names
        .iter()
        .filter_map(|n| {
            let at = field(&seen).get(n)?;
            Some(at.saturating_duration_since(scheduled[n]))
        })
        .collect()
}

/// CPU seconds (user + system) each process of the stack has used so far. The `sluice`
/// process itself holds the API test server and the load generator.
fn cpu_seconds(stack: &Stack) -> Vec<(String, f64)> {
    stack
        .processes()
        .into_iter()
        .filter_map(|(name, pid)| Some((name, stat_cpu_seconds(&format!("/proc/{pid}/stat"))?)))
        .collect()
}

/// CPU seconds the threads of this process named `name` have used so far (the API test
/// server's runtime keeps its threads for its whole life, so none of its ticks leave /proc).
fn threads_cpu_seconds(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .filter_map(|task| {
            let dir = task.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            (comm.trim_end() == name).then_some(())?;
            stat_cpu_seconds(&dir.join("stat").to_string_lossy())
        })
        .sum()
}

/// User + system CPU seconds from a `/proc/.../stat` file.
fn stat_cpu_seconds(path: &str) -> Option<f64> {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / ticks_per_second)
}

fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
