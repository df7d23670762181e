//! Open-loop load on seed 000's NetworkPolicy trigger (`oneForEvent: true`): `preload` matching
//! Services are created and converged first, then `count` more are created at a fixed `rate`
//! (each at its scheduled time, whether or not earlier ones are done), then deleted at the same
//! rate. Measures, per Service, scheduled create -> its ClusterProfile exists and scheduled
//! delete -> its ClusterProfile is gone, from a label-selected watch (no LISTs by the
//! observer); and the CPU every process of the stack spent per event, from `/proc`, with the API
//! test server's own threads (`sluice_testserver::THREAD_NAME`) told apart from the rest of this
//! process (the load generator, the observer and the conversion webhook), over both phases and
//! until the creates were done. With `hops`, each event's time is split by the hops of the
//! pipeline (`Hop`), from the messages on the bus. Last, the preloaded Services are deleted and
//! the run fails unless nothing of the trigger is left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt, TryStreamExt};
use serde_json::json;
use sluice_bus::topology;
use sluice_domain::naming;
use sluice_kube::{apply, watch};

use crate::demo::{self, CLUSTER_PROFILE, EVENT_BASED_ADDON, EVENT_SOURCE};
use crate::stack::{Stack, MANAGEMENT, SERVICES};

const TRIGGER: &str = "service-network-policy";
const CLUSTER: &str = "cluster-a";
/// How long one phase may take past its last scheduled event.
const GRACE: Duration = Duration::from_secs(120);
/// How long after the last ClusterProfile is gone the objects deleted after it may take.
const LAST_DELETIONS: Duration = Duration::from_secs(30);

/// What one load run does.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Matching Services created and converged first.
    pub preload: usize,
    /// Services created (then deleted) per second.
    pub rate: f64,
    /// Services created and deleted at `rate`.
    pub count: usize,
    /// Time each hop of the pipeline from the bus.
    pub hops: bool,
    /// Delete every preloaded ClusterProfile by hand at once and time until all are back.
    pub repair: bool,
    /// A service (`sluice-applier`, say) stopped and started again once the preload
    /// converged, timed until it is ready with every preloaded unit standing.
    pub restart: Option<String>,
    /// A service run as two processes with `--leader-elect` (ADR 0046) whose lease holder is
    /// killed (SIGKILL) halfway through the creates: the standby takes over.
    pub failover: Option<String>,
}

/// What one load run measured.
#[derive(Clone, Debug, Default)]
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
    /// Of `cpu`, what each process used until the last created Service's profile was seen.
    pub create_cpu: Vec<(String, f64)>,
    /// Peak resident memory per process (kB).
    pub peak_rss_kb: Vec<(String, u64)>,
    /// Context switches per process over the create and delete phases together, of the threads
    /// alive at the phases' end (`context_switches`).
    pub switches: Vec<(String, f64)>,
    /// With `hops`: per hop, its durations for the created Services, then for the deleted ones
    /// (`hop_durations`).
    pub hops: Option<[HopDurations; 2]>,
    /// With `repair`: from deleting every preloaded ClusterProfile at once until all were back.
    pub repair_elapsed: Option<Duration>,
    /// With `restart`: from starting the service again until its `/readyz` answered ready.
    pub restart_elapsed: Option<Duration>,
    /// With `failover`: from killing the lease holder until the standby held the lease.
    pub failover_elapsed: Option<Duration>,
    /// What each stage's runner measured of itself over the create phase (ADR 0044), in the
    /// order of [`STAGES`].
    pub inside: Vec<Inside>,
}

/// The stages whose runners' histograms a load run reads: service, consumer and stream.
pub const STAGES: [(&str, &str, &str); 4] = [
    ("sluice-evaluator", "evaluator", "SLUICE_CHANGES"),
    ("sluice-renderer", "renderer", "SLUICE_MATCH"),
    ("sluice-reporter", "reporter", "SLUICE_MATCH"),
    ("sluice-applier", "applier", "SLUICE_DESIRED"),
];

/// What one stage's runner measured over a phase (`sluice_bus::runner::timings`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inside {
    pub consumer: &'static str,
    pub stream: &'static str,
    /// Inputs per batch.
    pub inputs: Observed,
    /// Seconds from an input's storing to its batch's beginning.
    pub wait: Observed,
    /// Seconds a batch took.
    pub batch: Observed,
    /// Seconds from an event's trace's beginning to its handling; at the applier, once it has
    /// written the event's objects.
    pub age: Observed,
}

impl Inside {
    /// The stage's histograms between two readings of its service's metrics.
    pub fn between(
        (consumer, stream): (&'static str, &'static str),
        before: &HashMap<String, f64>,
        after: &HashMap<String, f64>,
    ) -> Inside {
        let of = |name: &str| {
            let prefix =
                format!("{name}_bucket{{consumer=\"{consumer}\",stream=\"{stream}\",le=\"");
            Observed::between(&prefix, before, after)
        };
        Inside {
            consumer,
            stream,
            inputs: of("sluice_stage_batch_inputs"),
            wait: of("sluice_stage_input_wait_seconds"),
            batch: of("sluice_stage_batch_seconds"),
            age: of("sluice_event_age_seconds"),
        }
    }
}

/// Of one histogram's observations over a phase: per bucket bound (ascending, the last `+Inf`),
/// how many were at most that, cumulatively.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    pub buckets: Vec<(f64, f64)>,
}

impl Observed {
    /// The observations between two readings of the bucket series that start with `prefix`
    /// (the name, its labels and `le="`).
    pub fn between(
        prefix: &str,
        before: &HashMap<String, f64>,
        after: &HashMap<String, f64>,
    ) -> Observed {
        let mut buckets: Vec<(f64, f64)> = after
            .iter()
            .filter_map(|(series, value)| {
                let bound = series.strip_prefix(prefix)?.strip_suffix("\"}")?;
                let bound = match bound {
                    "+Inf" => f64::INFINITY,
                    bound => bound.parse().ok()?,
                };
                Some((bound, value - before.get(series).copied().unwrap_or(0.0)))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Observed { buckets }
    }

    /// How many observations there were.
    pub fn count(&self) -> f64 {
        self.buckets.last().map_or(0.0, |(_, n)| *n)
    }

    /// The share of observations at most `seconds` old, when `seconds` is a bucket bound.
    pub fn share_within(&self, seconds: f64) -> Option<f64> {
        let (_, within) = self.buckets.iter().find(|(b, _)| *b == seconds)?;
        (self.count() > 0.0).then(|| within / self.count())
    }

    /// The smallest bucket bound that a `q` share of the observations are at most.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let wanted = q * self.count();
        (self.count() > 0.0)
            .then(|| self.buckets.iter().find(|(_, n)| *n >= wanted))
            .flatten()
            .map(|(b, _)| *b)
    }
}

impl LoadReport {
    /// CPU of every process together per event (create and delete both count as events).
    pub fn cpu_per_event(&self) -> Duration {
        let total: f64 = self.cpu.iter().map(|(_, s)| s).sum();
        self.per_event(total)
    }

    /// CPU per event of the load generator and the observer (this process's CPU but for the
    /// API test server's threads).
    pub fn load_generator_cpu_per_event(&self) -> Duration {
        let process = self
            .cpu
            .iter()
            .find(|(name, _)| name == crate::stack::THIS_PROCESS)
            .map_or(0.0, |(_, s)| *s);
        self.per_event((process - self.api_server_cpu).max(0.0))
    }

    fn per_event(&self, seconds: f64) -> Duration {
        Duration::from_secs_f64(seconds / (2 * self.count).max(1) as f64)
    }

    /// Context switches per event of the process named `name`, or of every process together.
    pub fn switches_per_event(&self, name: Option<&str>) -> f64 {
        let switches: f64 = self
            .switches
            .iter()
            .filter(|(n, _)| name.is_none_or(|name| n == name))
            .map(|(_, s)| s.max(0.0))
            .sum();
        switches / (2 * self.count).max(1) as f64
    }
}

/// What every load Service's name starts with.
const SERVICE_PREFIX: &str = "load-";

fn service_name(i: usize) -> String {
    format!("{SERVICE_PREFIX}{i:06}")
}

/// The pipeline's hops a load event passes, in order, as `--hops` times them: the API server's
/// answer to the load generator's request, and each message on the bus for the event's Service,
/// seen by a core NATS subscription of the load generator (the bus stores a message before it
/// delivers it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hop {
    /// The API server answered the create or delete.
    Answered,
    /// The watcher's `ResourceChange`.
    Change,
    /// The evaluator's match member.
    Member,
    /// The renderer's resource unit.
    Desired,
    /// The applier's `ApplyResult`.
    Applied,
}

impl Hop {
    pub const ALL: [Hop; 5] = [
        Hop::Answered,
        Hop::Change,
        Hop::Member,
        Hop::Desired,
        Hop::Applied,
    ];

    /// The hop this one is timed from; `None`: from the scheduled time. The watcher's change
    /// does not follow the API's answer, which may come after the watch event.
    fn follows(self) -> Option<Hop> {
        match self {
            Hop::Answered | Hop::Change => None,
            Hop::Member => Some(Hop::Change),
            Hop::Desired => Some(Hop::Member),
            Hop::Applied => Some(Hop::Desired),
        }
    }

    /// The subjects the hop's messages are published on (none for the API's answer).
    fn subjects(self) -> Option<&'static str> {
        Some(match self {
            Hop::Answered => return None,
            Hop::Change => topology::CHANGES.subjects,
            Hop::Member => topology::MATCH.subjects,
            Hop::Desired => topology::DESIRED.subjects,
            Hop::Applied => topology::APPLIED.subjects,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Hop::Answered => "answered",
            Hop::Change => "change",
            Hop::Member => "member",
            Hop::Desired => "desired",
            Hop::Applied => "applied",
        }
    }
}

/// Per hop (and last `profile`), its name and durations (`hop_durations`).
pub type HopDurations = Vec<(&'static str, Vec<Duration>)>;

/// When each hop was seen for each Service, in the order seen.
pub type Arrivals = HashMap<(Hop, String), Vec<Instant>>;

/// The load Service a hop's message is about: the subject's last token, for the subjects that
/// end in a resource's name (a change, a member, a resource unit and its result; a head or a
/// main unit ends in another name).
pub fn hop_resource(subject: &str) -> Option<&str> {
    let name = subject.rsplit('.').next()?;
    name.starts_with(SERVICE_PREFIX).then_some(name)
}

/// Per hop, how long after the hop it follows ([`Hop::follows`]; the scheduled time for the
/// first) each Service's message came, taking the first message after that one. Last,
/// `profile`: from the renderer's unit to the ClusterProfile's watch event (the applier writes
/// the profile before it stores its result, so this does not follow `applied`). A Service
/// missing a hop is left out of that hop's and the later ones' durations.
pub fn hop_durations(
    arrivals: &Arrivals,
    scheduled: &HashMap<String, Instant>,
    observed: &HashMap<String, Instant>,
) -> HopDurations {
    let first_after = |hop: Hop, name: &str, after: Instant| {
        arrivals
            .get(&(hop, name.to_string()))?
            .iter()
            .copied()
            .filter(|t| *t >= after)
            .min()
    };
    let mut out: HopDurations = Hop::ALL
        .iter()
        .map(|h| (h.name(), Vec::new()))
        .chain([("profile", Vec::new())])
        .collect();
    for (name, at) in scheduled {
        let mut times: HashMap<Hop, Instant> = HashMap::new();
        for (i, hop) in Hop::ALL.iter().enumerate() {
            let from = match hop.follows() {
                None => *at,
                Some(before) => match times.get(&before) {
                    Some(t) => *t,
                    None => continue,
                },
            };
            if let Some(t) = first_after(*hop, name, from) {
                out[i].1.push(t - from);
                times.insert(*hop, t);
            }
        }
        if let (Some(desired), Some(seen)) = (times.get(&Hop::Desired), observed.get(name)) {
            out[Hop::ALL.len()]
                .1
                .push(seen.saturating_duration_since(*desired));
        }
    }
    out
}

/// When each resource's ClusterProfile appeared and disappeared, from one watch.
#[derive(Default)]
struct Seen {
    appeared: HashMap<String, Instant>,
    gone: HashMap<String, Instant>,
}

/// Runs the measurement on a stack of its own and prints progress to `out`.
pub async fn measure(
    options: &LoadOptions,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<LoadReport> {
    let LoadOptions {
        preload,
        rate,
        count,
        hops,
        repair,
        ref restart,
        ref failover,
    } = *options;
    anyhow::ensure!(rate > 0.0, "the rate must be positive");
    if let Some(service) = restart {
        anyhow::ensure!(
            SERVICES.contains(&service.as_str()),
            "--restart {service}: not one of {SERVICES:?}"
        );
    }
    let failover = match failover {
        Some(service) => Some(failover_pair(service)?),
        None => None,
    };
    let mut stack = Stack::start(&[CLUSTER], None).await?;
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
    let repair_elapsed = match repair {
        true => Some(delete_by_hand(&stack, &seen, preload, out).await?),
        false => None,
    };
    let restart_elapsed = match restart {
        Some(service) => Some(restarted(&mut stack, service, out).await?),
        None => None,
    };
    if let Some((service, standby)) = failover {
        stack.start_replica(service, standby, &[])?;
        wait_leading(&stack, service, standby, false).await?;
        writeln!(out, "# {standby} stands by beside {service}")?;
    }

    let names: Vec<String> = (preload..preload + count).map(service_name).collect();
    let arrivals: Arc<Mutex<Arrivals>> = Arc::new(Mutex::new(HashMap::new()));
    let listener = match hops {
        true => Some(listen(&stack, arrivals.clone()).await?),
        false => None,
    };
    let answered = listener.as_ref().map(|_| &*arrivals);
    let cpu_before = cpu_seconds(&stack);
    let switches_before = context_switches(&stack);
    let api_server_before = threads_cpu_seconds(sluice_testserver::THREAD_NAME);
    let inside_before = stage_metrics(&stack, failover).await?;
    writeln!(out, "# creating {count} Services at {rate}/s")?;
    let failing_over = failover.map(|(service, standby)| {
        let halfway = Duration::from_secs_f64(count as f64 / rate / 2.0);
        (service, standby, halfway)
    });
    let (scheduled, failover_elapsed) = match failing_over {
        None => (
            open_loop(&services, &names, rate, Phase::Create, answered).await?,
            None,
        ),
        Some((service, standby, halfway)) => {
            let stack = &stack;
            let kill = async move {
                tokio::time::sleep(halfway).await;
                // A crash: the holder cannot release its lease; the standby takes it over
                // once the holder's record expires.
                let killed = Instant::now();
                stack.signal(service, crate::stack::Signal::Kill)?;
                wait_leading(stack, service, standby, true).await?;
                anyhow::Ok(killed.elapsed())
            };
            let (scheduled, took) = tokio::try_join!(
                open_loop(&services, &names, rate, Phase::Create, answered),
                kill
            )?;
            writeln!(
                out,
                "# killed {service} halfway through the creates; {standby} held the lease after {took:?}"
            )?;
            (scheduled, Some(took))
        }
    };
    wait_until(&seen, GRACE, |s| {
        names.iter().all(|n| s.appeared.contains_key(n))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let create = latencies(&seen, &names, &scheduled, |s| &s.appeared);
    let created = scheduled;
    let cpu_created = cpu_seconds(&stack);
    let inside = STAGES
        .iter()
        .zip(
            inside_before
                .iter()
                .zip(stage_metrics(&stack, failover).await?),
        )
        .map(|((_, consumer, stream), (before, after))| {
            Inside::between((consumer, stream), before, &after)
        })
        .collect();
    writeln!(out, "# deleting them at {rate}/s")?;
    let scheduled = open_loop(&services, &names, rate, Phase::Delete, answered).await?;
    wait_until(&seen, GRACE, |s| {
        names.iter().all(|n| s.gone.contains_key(n))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let delete = latencies(&seen, &names, &scheduled, |s| &s.gone);
    let hops = listener.map(|listener| {
        listener.abort();
        let arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner());
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        [
            hop_durations(&arrivals, &created, &seen.appeared),
            hop_durations(&arrivals, &scheduled, &seen.gone),
        ]
    });
    let cpu_after = cpu_seconds(&stack);
    let switches_after = context_switches(&stack);
    let api_server_cpu = threads_cpu_seconds(sluice_testserver::THREAD_NAME) - api_server_before;
    clean_up(&stack, &services, &seen, preload, out).await?;
    observer.abort();
    let cpu = since(&cpu_after, &cpu_before);
    let create_cpu = since(&cpu_created, &cpu_before);
    let switches = since(&switches_after, &switches_before);
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
        create_cpu,
        peak_rss_kb,
        switches,
        hops,
        repair_elapsed,
        restart_elapsed,
        failover_elapsed,
        inside,
    })
}

/// The service `--failover` names and the name of its standby process.
fn failover_pair(service: &str) -> anyhow::Result<(&'static str, &'static str)> {
    let standby = crate::stack::replica_name(service)
        .ok_or_else(|| anyhow::anyhow!("--failover {service}: not one of {SERVICES:?}"))?;
    let service = SERVICES
        .into_iter()
        .find(|s| *s == service)
        .expect("a service with a replica name is one of SERVICES");
    anyhow::ensure!(
        std::env::var("SLUICE_LEADER_ELECT").is_ok_and(|v| v == "true"),
        "--failover runs two processes of {service}: set SLUICE_LEADER_ELECT=true (and the \
         SLUICE_LEADER_ELECT_* timing) so that the stack's services take their leases"
    );
    Ok((service, standby))
}

/// Waits until `standby` holds `service`'s lease (`holding`) or stands by while the first
/// process holds it; `sluice_leader` on each process's `/metrics`.
async fn wait_leading(
    stack: &Stack,
    service: &str,
    standby: &str,
    holding: bool,
) -> anyhow::Result<()> {
    let key = format!(
        "sluice_leader{{service=\"{}\"}}",
        service.trim_start_matches("sluice-")
    );
    let leads = |process: &str| {
        let key = key.clone();
        let process = process.to_string();
        async move {
            demo::metrics(stack, &process)
                .await
                .ok()
                .and_then(|m| m.get(&key).copied())
        }
    };
    let what = match holding {
        true => format!("{standby} to take over {service}'s lease"),
        false => format!("{standby} to stand by beside {service}"),
    };
    sluice_testkit::wait_for(&what, GRACE, || async {
        let standby_leads = leads(standby).await;
        match holding {
            true => (standby_leads == Some(1.0)).then_some(()),
            false => {
                (standby_leads == Some(0.0) && leads(service).await == Some(1.0)).then_some(())
            }
        }
    })
    .await
}

/// The metrics of the services of [`STAGES`], in that order; with `--failover`, that
/// service's from its standby (which measures only what it did after taking over).
async fn stage_metrics(
    stack: &Stack,
    failover: Option<(&str, &str)>,
) -> anyhow::Result<Vec<HashMap<String, f64>>> {
    let mut all = Vec::new();
    for (service, _, _) in STAGES {
        let process = match failover {
            Some((failed, standby)) if failed == service => standby,
            _ => service,
        };
        all.push(demo::metrics(stack, process).await?);
    }
    Ok(all)
}

/// Stops `service` (it drains), starts it again and returns how long it took from the start
/// until its `/readyz` answered ready: with the preload standing, its start-up replays every
/// preloaded unit.
async fn restarted(
    stack: &mut Stack,
    service: &str,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Duration> {
    let name = SERVICES
        .into_iter()
        .find(|s| *s == service)
        .ok_or_else(|| anyhow::anyhow!("no service {service}"))?;
    stack.stop_service(name)?;
    let started = Instant::now();
    stack.start_service(name)?;
    let url = stack
        .health_url(name, "/readyz")
        .ok_or_else(|| anyhow::anyhow!("{name} has no health address"))?;
    let url = &url;
    sluice_testkit::wait_for(&format!("{name} to be ready"), GRACE, || async move {
        crate::setup::probe(url).await.ok()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let elapsed = started.elapsed();
    writeln!(out, "# {name} restarted, ready after {elapsed:?}")?;
    Ok(elapsed)
}

/// Deletes every ClusterProfile of the trigger at once, as `kubectl delete clusterprofiles -l`
/// would, and returns how long it took until all were back, written again by the applier from
/// their units' desired states: as many as before, none of them one of those deleted (by uid),
/// from metadata-only lists (a watch that falls behind so many deletions misses some).
async fn delete_by_hand(
    stack: &Stack,
    seen: &Arc<Mutex<Seen>>,
    preload: usize,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Duration> {
    writeln!(out, "# deleting the {preload} ClusterProfiles by hand")?;
    let client = stack.client(MANAGEMENT)?.clone();
    let kind = apply::resolve(&client, CLUSTER_PROFILE.0, CLUSTER_PROFILE.1).await?;
    let profiles: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client, &kind.resource);
    let selector = format!("{}={TRIGGER}", naming::LABEL_EVENT_TRIGGER);
    let list = kube::api::ListParams::default().labels(&selector);
    let uids = |listed: kube::api::ObjectList<kube::api::PartialObjectMeta<_>>| {
        listed
            .items
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect::<std::collections::HashSet<String>>()
    };
    let deleted = uids(profiles.list_metadata(&list).await?);
    anyhow::ensure!(
        deleted.len() == preload,
        "{} ClusterProfiles before the deletion, not {preload}",
        deleted.len()
    );
    let started = Instant::now();
    let _ = profiles
        .delete_collection(&kube::api::DeleteParams::default(), &list)
        .await?;
    let limit = GRACE + Duration::from_secs(preload as u64 / 50);
    let every = Duration::from_millis(250).max(Duration::from_micros(25 * preload as u64));
    let elapsed = loop {
        tokio::time::sleep(every).await;
        let now = uids(profiles.list_metadata(&list).await?);
        if now.len() == preload && now.is_disjoint(&deleted) {
            break started.elapsed();
        }
        if started.elapsed() > limit {
            anyhow::bail!(
                "{} of {preload} ClusterProfiles back after {limit:?}\n{}",
                now.difference(&deleted).count(),
                stack.logs()
            );
        }
    };
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    for name in (0..preload).map(service_name) {
        seen.gone.remove(&name);
    }
    writeln!(
        out,
        "# {preload} ClusterProfiles deleted by hand are back after {elapsed:?}"
    )?;
    Ok(elapsed)
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
    // A unit's ConfigMap goes after its ClusterProfile, so the last ones may still be on their
    // way when the last profile's deletion is seen.
    if demo::wait_cleaned(stack, TRIGGER, CLUSTER, LAST_DELETIONS)
        .await
        .is_err()
    {
        let left: Vec<String> = demo::owned_by(stack, TRIGGER, CLUSTER)
            .await?
            .iter()
            .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
            .collect();
        anyhow::bail!(
            "{} objects of the trigger left {LAST_DELETIONS:?} after every Service's profile was gone: {}",
            left.len(),
            left.join(", ")
        );
    }
    writeln!(
        out,
        "# {preload} preloaded Services deleted, nothing of the trigger left, after {:?}",
        started.elapsed()
    )?;
    writeln!(out, "# left on the bus: {}", bus_left(stack).await?)?;
    Ok(())
}

/// How many messages each of the pipeline's state streams keeps, as `NAME count`.
async fn bus_left(stack: &Stack) -> anyhow::Result<String> {
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let mut counts = Vec::new();
    for spec in [
        topology::CHANGES,
        topology::MATCH,
        topology::DESIRED,
        topology::APPLIED,
    ] {
        let mut stream = js.get_stream(spec.name).await?;
        let messages = stream.info().await?.state.messages;
        counts.push(format!("{} {messages}", spec.name));
    }
    Ok(counts.join(", "))
}

#[derive(Clone, Copy)]
enum Phase {
    Create,
    Delete,
}

/// Starts one request per name at `start + i / rate`, each in its own task, records in
/// `answered` (when hops are timed) when each was answered (`Hop::Answered`) and returns each
/// name's scheduled time once every request has been answered.
async fn open_loop(
    services: &Services,
    names: &[String],
    rate: f64,
    phase: Phase,
    answered: Option<&Mutex<Arrivals>>,
) -> anyhow::Result<HashMap<String, Instant>> {
    let start = Instant::now() + Duration::from_millis(50);
    let mut scheduled = HashMap::with_capacity(names.len());
    let requests = names.iter().enumerate().map(|(i, name)| {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        scheduled.insert(name.clone(), at);
        async move {
            tokio::time::sleep_until(at.into()).await;
            match phase {
                Phase::Create => services.create(name).await?,
                Phase::Delete => services.delete(name).await?,
            }
            if let Some(answered) = answered {
                answered
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry((Hop::Answered, name.clone()))
                    .or_default()
                    .push(Instant::now());
            }
            anyhow::Ok(())
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
        apply::apply_unread(&self.client, &self.kind, &service, "sluice-cli").await?;
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

/// Records when each hop's message about a load Service arrives, from core NATS subscriptions
/// of the stack's administrator.
async fn listen(
    stack: &Stack,
    arrivals: Arc<Mutex<Arrivals>>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let client = stack.bus_options().connect_client().await?;
    let mut subscriptions = Vec::new();
    for (hop, subjects) in Hop::ALL.iter().filter_map(|h| Some((*h, h.subjects()?))) {
        let messages = client.subscribe(subjects).await?;
        subscriptions.push(messages.map(move |m| (hop, m.subject)));
    }
    client.flush().await?;
    Ok(tokio::spawn(async move {
        let _client = client;
        let mut messages = stream::select_all(subscriptions);
        while let Some((hop, subject)) = messages.next().await {
            let now = Instant::now();
            if let Some(name) = hop_resource(&subject) {
                arrivals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry((hop, name.to_string()))
                    .or_default()
                    .push(now);
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

/// Per process, the reading of `after` (CPU seconds, context switches) less that of `before`.
pub(crate) fn since(after: &[(String, f64)], before: &[(String, f64)]) -> Vec<(String, f64)> {
    after
        .iter()
        .map(|(name, a)| {
            let b = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0.0, |(_, b)| *b);
            (name.clone(), a - b)
        })
        .collect()
}

/// CPU seconds (user + system) each process of the stack has used so far. The `sluice`
/// process itself holds the API test server and the load generator.
pub(crate) fn cpu_seconds(stack: &Stack) -> Vec<(String, f64)> {
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

/// Per process of the stack, the voluntary and involuntary context switches so far of every
/// thread it has now (a thread that ended took its count with it: the stack's processes keep
/// their runtime threads).
fn context_switches(stack: &Stack) -> Vec<(String, f64)> {
    stack
        .processes()
        .into_iter()
        .map(|(name, pid)| {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
                .filter_map(|status| status_switches(&status))
                .sum::<u64>();
            (name, tasks as f64)
        })
        .collect()
}

/// The context switches a `/proc/.../status` file counts: voluntary and involuntary together.
fn status_switches(status: &str) -> Option<u64> {
    Some(
        status_number(status, "voluntary_ctxt_switches:")?
            + status_number(status, "nonvoluntary_ctxt_switches:")?,
    )
}

fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_number(&status, field)
}

/// The number a `/proc/.../status` line starting with `field` holds (its unit, if any, after it).
fn status_number(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_context_switches_are_its_voluntary_and_involuntary_ones() {
        let status = "Name:\tsluice-applier\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1200\nnonvoluntary_ctxt_switches:\t34\n";
        assert_eq!(status_switches(status), Some(1234));
        assert_eq!(
            status_switches("Name:\tx\nvoluntary_ctxt_switches:\t5\n"),
            None
        );
    }

    #[test]
    fn switches_per_event_count_creates_and_deletes_as_events() {
        let report = LoadReport {
            count: 100,
            switches: vec![
                ("sluice-applier".into(), 1_000.0),
                ("nats-server".into(), 600.0),
            ],
            ..LoadReport::default()
        };
        assert_eq!(report.switches_per_event(Some("sluice-applier")), 5.0);
        assert_eq!(report.switches_per_event(Some("nats-server")), 3.0);
        assert_eq!(report.switches_per_event(None), 8.0);
        assert_eq!(report.switches_per_event(Some("sluice-watcher")), 0.0);
    }

    #[test]
    fn a_stages_histograms_over_a_phase_are_the_difference_of_two_readings() {
        const AGES: &str =
            "sluice_event_age_seconds_bucket{consumer=\"applier\",stream=\"SLUICE_DESIRED\",le=\"";
        let reading = |pairs: &[(&str, f64)]| -> HashMap<String, f64> {
            pairs
                .iter()
                .map(|(le, n)| (format!("{AGES}{le}\"}}"), *n))
                .chain([("sluice_other_total".to_string(), 9.0)])
                .collect()
        };
        let before = reading(&[
            ("0.01", 5.0),
            ("0.025", 8.0),
            ("0.05", 10.0),
            ("+Inf", 10.0),
        ]);
        let after = reading(&[
            ("0.01", 55.0),
            ("0.025", 107.0),
            ("0.05", 109.0),
            ("+Inf", 110.0),
        ]);
        let inside = Inside::between(("applier", "SLUICE_DESIRED"), &before, &after);
        assert_eq!(inside.wait, Observed::default());
        let ages = inside.age;
        assert_eq!(
            ages.buckets,
            [
                (0.01, 50.0),
                (0.025, 99.0),
                (0.05, 99.0),
                (f64::INFINITY, 100.0)
            ]
        );
        assert_eq!(ages.count(), 100.0);
        assert_eq!(ages.share_within(0.025), Some(0.99));
        assert_eq!(ages.share_within(0.02), None);
        assert_eq!(ages.quantile_bound(0.5), Some(0.01));
        assert_eq!(ages.quantile_bound(0.99), Some(0.025));
        assert_eq!(ages.quantile_bound(1.0), Some(f64::INFINITY));
        assert_eq!(Observed::default().quantile_bound(0.5), None);
    }

    #[test]
    fn a_hops_resource_is_the_load_service_its_subject_ends_in() {
        let cluster = "sveltos.default.cluster-a";
        assert_eq!(
            hop_resource(&format!(
                "sluice.v1.change.{cluster}._.Service.default.load-000042"
            )),
            Some("load-000042")
        );
        assert_eq!(
            hop_resource(&format!(
                "sluice.v1.desired.service-network-policy.{cluster}.r.default.load-000042"
            )),
            Some("load-000042")
        );
        // A head and a main unit end in the EventSource's and the cluster's names.
        assert_eq!(
            hop_resource(&format!("sluice.v1.match.{cluster}.sveltos-service")),
            None
        );
        assert_eq!(
            hop_resource(&format!(
                "sluice.v1.desired.service-network-policy.{cluster}"
            )),
            None
        );
    }

    #[test]
    fn each_hop_takes_the_first_message_after_the_one_before() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let name = "load-000001".to_string();
        let arrivals = HashMap::from([
            ((Hop::Answered, name.clone()), vec![ms(4)]),
            // An earlier event's change (before the scheduled time) is not this one's; the watch
            // may see the change before the request is answered.
            ((Hop::Change, name.clone()), vec![t0, ms(3)]),
            ((Hop::Member, name.clone()), vec![ms(5), ms(9)]),
            ((Hop::Desired, name.clone()), vec![ms(12)]),
            ((Hop::Applied, name.clone()), vec![ms(20)]),
        ]);
        let scheduled = HashMap::from([(name.clone(), ms(1))]);
        let observed = HashMap::from([(name.clone(), ms(16))]);
        let durations = hop_durations(&arrivals, &scheduled, &observed);
        let ms = |n: u64| vec![Duration::from_millis(n)];
        assert_eq!(
            durations,
            vec![
                ("answered", ms(3)),
                ("change", ms(2)),
                ("member", ms(2)),
                ("desired", ms(7)),
                ("applied", ms(8)),
                ("profile", ms(4)),
            ]
        );
    }

    #[test]
    fn a_service_missing_a_hop_counts_in_none_after_it() {
        let t0 = Instant::now();
        let name = "load-000001".to_string();
        let arrivals = HashMap::from([
            (
                (Hop::Change, name.clone()),
                vec![t0 + Duration::from_millis(2)],
            ),
            (
                (Hop::Desired, name.clone()),
                vec![t0 + Duration::from_millis(4)],
            ),
        ]);
        let scheduled = HashMap::from([(name.clone(), t0)]);
        let observed = HashMap::from([(name, t0 + Duration::from_millis(6))]);
        let durations = hop_durations(&arrivals, &scheduled, &observed);
        let counts: Vec<usize> = durations.iter().map(|(_, d)| d.len()).collect();
        // No answer recorded: the change, timed from the scheduled time, still counts.
        assert_eq!(counts, vec![0, 1, 0, 0, 0, 0]);
        assert_eq!(durations[1], ("change", vec![Duration::from_millis(2)]));
    }
}
