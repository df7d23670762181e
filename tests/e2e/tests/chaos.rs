//! The chaos test (issue 21): resource changes and CloudEvents flow through the whole stack while,
//! in turn, each of the five services is killed with SIGKILL and started again, nats-server is
//! killed and started again on its file store, and the API test server answers watches with
//! `410 Gone`, fails requests with 5xx, adds latency and makes a managed cluster unreachable.
//! Afterwards the management cluster must equal the truth computed here, independently of the
//! services' code, from the final objects in the managed clusters, the CloudEvents sent and the
//! triggers: 0 missing, 0 duplicate, 0 stale ClusterProfiles and instantiated ConfigMaps, and
//! every trigger's status right.
//!
//! The load: in two managed clusters (`production`, `cluster-b`, both selected), Services,
//! Deployments and ConfigMaps in namespace `chaos` are created, updated and deleted at random
//! (a seeded generator, the seed printed). Five triggers read them: `chaos-one`
//! (`oneForEvent: true` over Services, collectResources), `chaos-dest` (the same Services, with a
//! destination cluster selector), `chaos-all` (`oneForEvent: false` over Deployments, one profile
//! listing every Deployment with its replicas), `chaos-lua` (ConfigMaps a Lua script selects) and
//! `chaos-ce` (CloudEvents on `production`'s NATS, JetStream: login creates a user's Namespace,
//! logout deletes it).
//!
//! The faults come in turn, round after round while the load lasts, each for at least two
//! seconds and until more changes have flowed, with a pause of load without fault between two.
//! Every write the faults fail is retried until it succeeds, so the managed clusters end exactly
//! as the load wrote them. While a cluster is unreachable from outside its users still change
//! it: the load writes inside it (`sluice_testserver::Inside`), past the fault, and the watcher
//! must find those changes once the cluster is back.
//!
//! `ci_chaos_converges_exactly` runs in the normal suite (1,000 changes at 30 a second and 100
//! CloudEvents: about 45 s); `full_chaos_converges_exactly` (10,000 changes at 50 a second and
//! 1,000 CloudEvents) is `#[ignore]`d for its length. The sizes can be set with
//! `SLUICE_CHAOS_CHANGES` and `SLUICE_CHAOS_CLOUDEVENTS`, the generator's seed with
//! `SLUICE_CHAOS_SEED`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng as _, SeedableRng as _};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use sluice_cli::cloudevents::{managed_client, managed_nats, nats_secret};
use sluice_cli::demo::CLUSTER_PROFILE;
use sluice_cli::stack::{Stack, MANAGEMENT, SERVICES, SVELTOS_NAMESPACE};
use sluice_domain::naming;
use sluice_kube::apply;
use sluice_testkit::wait_for;
use sluice_testserver::Inside;
use tokio::sync::watch;

/// Namespace of the load in the managed clusters.
const NS: &str = "chaos";
/// The managed clusters; every resource trigger selects both (label `chaos: fleet`).
const CLUSTERS: [&str; 2] = ["production", "cluster-b"];
/// The cluster whose NATS carries the CloudEvents (label `env: production`).
const CE_CLUSTER: &str = "production";
const CE_SUBJECT: &str = "chaos-users";
const CE_SOURCE: &str = "chaos.example.com";
const CE_STREAM: &str = "CHAOS_USERS";
/// Parallel writers per managed cluster; each owns a disjoint share of the objects, so the
/// order of one object's changes is the order they were written.
const LANES_PER_CLUSTER: usize = 4;
/// How long one write is retried through the faults (503s, an unreachable cluster).
const WRITE_DEADLINE: Duration = Duration::from_secs(120);
/// At most this long per fault when the load it waits for stalls.
const FAULT_CAP: Duration = Duration::from_secs(30);

/// The configuration under test, in the management cluster.
const CONFIG: &str = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: chaos-svc
spec:
  collectResources: true
  resourceSelectors:
  - group: ""
    version: v1
    kind: Service
    namespace: chaos
    labelFilters:
    - key: app
      operation: Equal
      value: chaos-svc
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: chaos-deploy
spec:
  collectResources: true
  resourceSelectors:
  - group: apps
    version: v1
    kind: Deployment
    namespace: chaos
    labelFilters:
    - key: app
      operation: Equal
      value: chaos-deploy
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: chaos-lua
spec:
  collectResources: true
  resourceSelectors:
  - group: ""
    version: v1
    kind: ConfigMap
    namespace: chaos
    labelFilters:
    - key: app
      operation: Equal
      value: chaos-lua
    evaluate: |
      function evaluate()
        hs = {}
        hs.matching = false
        if obj.data ~= nil and obj.data.keep == "yes" then
          hs.matching = true
        end
        return hs
      end
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: chaos-ce
spec:
  messagingMatchCriteria:
  - subject: chaos-users
    cloudEventSource: chaos.example.com
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: chaos-one
spec:
  sourceClusterSelector:
    matchLabels:
      chaos: fleet
  eventSourceName: chaos-svc
  oneForEvent: true
  policyRefs:
  - name: chaos-one
    namespace: default
    kind: ConfigMap
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: chaos-dest
spec:
  sourceClusterSelector:
    matchLabels:
      chaos: fleet
  destinationClusterSelector:
    matchLabels:
      dep: eng
  eventSourceName: chaos-svc
  oneForEvent: true
  policyRefs:
  - name: chaos-dest
    namespace: default
    kind: ConfigMap
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: chaos-all
spec:
  sourceClusterSelector:
    matchLabels:
      chaos: fleet
  eventSourceName: chaos-deploy
  oneForEvent: false
  policyRefs:
  - name: chaos-all
    namespace: default
    kind: ConfigMap
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: chaos-lua
spec:
  sourceClusterSelector:
    matchLabels:
      chaos: fleet
  eventSourceName: chaos-lua
  oneForEvent: true
  policyRefs:
  - name: chaos-lua
    namespace: default
    kind: ConfigMap
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: chaos-ce
spec:
  sourceClusterSelector:
    matchLabels:
      env: production
  eventSourceName: chaos-ce
  oneForEvent: true
  cloudEventAction: '{{if eq .CloudEvent.type "chaos.logout"}}Delete{{else}}Create{{end}}'
  policyRefs:
  - name: chaos-ce
    namespace: default
    kind: ConfigMap
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chaos-one
  namespace: default
  annotations:
    projectsveltos.io/instantiate: ok
data:
  object.yaml: |
    kind: ConfigMap
    apiVersion: v1
    metadata:
      name: one-{{ .Resource.metadata.name }}
      namespace: chaos
    data:
      port: "{{ (index .Resource.spec.ports 0).port }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chaos-dest
  namespace: default
  annotations:
    projectsveltos.io/instantiate: ok
data:
  object.yaml: |
    kind: ConfigMap
    apiVersion: v1
    metadata:
      name: dest-{{ .Resource.metadata.name }}
      namespace: chaos
    data:
      port: "{{ (index .Resource.spec.ports 0).port }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chaos-all
  namespace: default
  annotations:
    projectsveltos.io/instantiate: ok
data:
  object.yaml: |
    kind: ConfigMap
    apiVersion: v1
    metadata:
      name: all-deployments
      namespace: chaos
    data:
      replicas: "{{ range .Resources }}{{ .metadata.name }}={{ .spec.replicas }};{{ end }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chaos-lua
  namespace: default
  annotations:
    projectsveltos.io/instantiate: ok
data:
  object.yaml: |
    kind: ConfigMap
    apiVersion: v1
    metadata:
      name: lua-{{ .Resource.metadata.name }}
      namespace: chaos
    data:
      value: "{{ .Resource.data.value }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chaos-ce
  namespace: default
  annotations:
    projectsveltos.io/instantiate: ok
data:
  object.yaml: |
    kind: Namespace
    apiVersion: v1
    metadata:
      name: {{ .CloudEvent.subject }}
"#;

/// The triggers under test and the clusters each selects.
const TRIGGERS: [(&str, &[&str]); 5] = [
    ("chaos-one", &CLUSTERS),
    ("chaos-dest", &CLUSTERS),
    ("chaos-all", &CLUSTERS),
    ("chaos-lua", &CLUSTERS),
    ("chaos-ce", &[CE_CLUSTER]),
];

// ---------------------------------------------------------------------------------------------
// The load: objects in the managed clusters and the changes made to them.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum ObjKind {
    Service,
    Deployment,
    ConfigMap,
}

impl ObjKind {
    const ALL: [ObjKind; 3] = [ObjKind::Service, ObjKind::Deployment, ObjKind::ConfigMap];

    fn api_version_kind(self) -> (&'static str, &'static str) {
        match self {
            ObjKind::Service => ("v1", "Service"),
            ObjKind::Deployment => ("apps/v1", "Deployment"),
            ObjKind::ConfigMap => ("v1", "ConfigMap"),
        }
    }

    fn app(self) -> &'static str {
        match self {
            ObjKind::Service => "chaos-svc",
            ObjKind::Deployment => "chaos-deploy",
            ObjKind::ConfigMap => "chaos-lua",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            ObjKind::Service => "svc",
            ObjKind::Deployment => "deploy",
            ObjKind::ConfigMap => "cm",
        }
    }
}

/// What the triggers read of one managed object: a Service's first port, a Deployment's
/// replicas, a ConfigMap's `keep` and `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Service { port: u16 },
    Deployment { replicas: u8 },
    ConfigMap { keep: bool, value: String },
}

impl State {
    fn random(kind: ObjKind, rng: &mut impl rand::Rng) -> State {
        match kind {
            ObjKind::Service => State::Service {
                port: rng.gen_range(1000..10000),
            },
            ObjKind::Deployment => State::Deployment {
                replicas: rng.gen_range(0..10),
            },
            ObjKind::ConfigMap => State::ConfigMap {
                keep: rng.gen_bool(0.6),
                value: format!("v{}", rng.gen_range(0..100_000)),
            },
        }
    }

    /// The object as written to the managed cluster.
    fn object(&self, name: &str) -> Value {
        let kind = self.kind();
        let (api_version, kind_name) = kind.api_version_kind();
        let metadata = json!({"name": name, "namespace": NS, "labels": {"app": kind.app()}});
        let mut object =
            json!({"apiVersion": api_version, "kind": kind_name, "metadata": metadata});
        match self {
            State::Service { port } => {
                object["spec"] = json!({"selector": {"run": name},
                    "ports": [{"port": port, "protocol": "TCP"}]});
            }
            State::Deployment { replicas } => {
                object["spec"] = json!({"replicas": replicas,
                    "selector": {"matchLabels": {"run": name}},
                    "template": {"metadata": {"labels": {"run": name}},
                                 "spec": {"containers": [{"name": "app", "image": "nginx"}]}}});
            }
            State::ConfigMap { keep, value } => {
                object["data"] = json!({"keep": if *keep { "yes" } else { "no" }, "value": value});
            }
        }
        object
    }

    /// Reads the state back from an object listed in a managed cluster.
    fn read(kind: ObjKind, object: &Value) -> Option<State> {
        Some(match kind {
            ObjKind::Service => State::Service {
                port: u16::try_from(object["spec"]["ports"][0]["port"].as_u64()?).ok()?,
            },
            ObjKind::Deployment => State::Deployment {
                replicas: u8::try_from(object["spec"]["replicas"].as_u64()?).ok()?,
            },
            ObjKind::ConfigMap => State::ConfigMap {
                keep: object["data"]["keep"] == "yes",
                value: object["data"]["value"].as_str()?.to_string(),
            },
        })
    }

    fn kind(&self) -> ObjKind {
        match self {
            State::Service { .. } => ObjKind::Service,
            State::Deployment { .. } => ObjKind::Deployment,
            State::ConfigMap { .. } => ObjKind::ConfigMap,
        }
    }
}

/// `(cluster, kind, name)` → state: what exists in the managed clusters.
type World = BTreeMap<(String, ObjKind, String), State>;

/// How many changes of each sort a run made.
#[derive(Clone, Debug, Default)]
struct Counts {
    creates: usize,
    updates: usize,
    deletes: usize,
    retried_writes: usize,
    /// Changes made inside a cluster while it was unreachable from outside.
    inside_writes: usize,
    logins: usize,
    logouts: usize,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.creates += other.creates;
        self.updates += other.updates;
        self.deletes += other.deletes;
        self.retried_writes += other.retried_writes;
        self.inside_writes += other.inside_writes;
        self.logins += other.logins;
        self.logouts += other.logouts;
    }
}

/// One writer: a cluster's client and the objects whose name hashes to this lane.
struct Lane {
    cluster: String,
    client: kube::Client,
    /// While the cluster is unreachable (`cut_off`), its users still change it: the lane writes
    /// inside it, past the fault.
    inside: Inside,
    cut_off: Arc<AtomicBool>,
    kinds: BTreeMap<ObjKind, apply::Kind>,
    names: Vec<(ObjKind, String)>,
    changes: usize,
    /// One change every this often.
    pace: Duration,
    seed: u64,
}

impl Lane {
    /// Makes `changes` random changes to this lane's objects; returns what exists at the end.
    async fn run(self, progress: Arc<watch::Sender<usize>>) -> anyhow::Result<(World, Counts)> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed);
        let mut world = World::new();
        let mut counts = Counts::default();
        let mut pace = tokio::time::interval(self.pace);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for _ in 0..self.changes {
            pace.tick().await;
            let (kind, name) = &self.names[rng.gen_range(0..self.names.len())];
            let key = (self.cluster.clone(), *kind, name.clone());
            let delete = world.contains_key(&key) && rng.gen_bool(0.3);
            let (attempts, inside) = if delete {
                counts.deletes += 1;
                world.remove(&key);
                self.write(*kind, name, None).await?
            } else {
                let state = State::random(*kind, &mut rng);
                if world.insert(key, state.clone()).is_some() {
                    counts.updates += 1;
                } else {
                    counts.creates += 1;
                }
                self.write(*kind, name, Some(&state)).await?
            };
            counts.retried_writes += attempts - 1;
            counts.inside_writes += usize::from(inside);
            progress.send_modify(|n| *n += 1);
        }
        Ok((world, counts))
    }

    /// Writes (or deletes) one object, retrying through injected faults; returns the attempts
    /// and whether it was written inside the cluster while cut off.
    async fn write(
        &self,
        kind: ObjKind,
        name: &str,
        state: Option<&State>,
    ) -> anyhow::Result<(usize, bool)> {
        let attempts = AtomicUsize::new(0);
        let inside = AtomicBool::new(false);
        let what = format!("{:?} {}/{NS}/{name} written", kind, self.cluster);
        wait_for(&what, WRITE_DEADLINE, || async {
            attempts.fetch_add(1, Ordering::Relaxed);
            if self.cut_off.load(Ordering::SeqCst) {
                inside.store(true, Ordering::Relaxed);
                let (api_version, kind_name) = kind.api_version_kind();
                return match state {
                    Some(state) => self.inside.put(state.object(name)).map(drop),
                    None => self
                        .inside
                        .delete(api_version, kind_name, NS, name)
                        .map(drop),
                }
                .map_err(anyhow::Error::from);
            }
            let written: anyhow::Result<()> = match (state, self.kinds.get(&kind)) {
                (Some(state), Some(resolved)) => {
                    self.replace(resolved, name, state.object(name)).await
                }
                (None, Some(resolved)) => apply::delete(&self.client, resolved, NS, name)
                    .await
                    .map_err(Into::into),
                (_, None) => Err(anyhow::anyhow!("{kind:?} not resolved")),
            };
            written
        })
        .await?;
        Ok((attempts.into_inner(), inside.into_inner()))
    }
}

impl Lane {
    /// Writes `object` whole, as `kubectl replace` would: what it does not say is not kept. The
    /// truth here is the last state written, and a server-side apply would merge a Service's
    /// ports (a list owned item by item) with those written inside meanwhile by another
    /// manager. A JSON merge patch of the whole state, or a create when there is none.
    async fn replace(&self, kind: &apply::Kind, name: &str, object: Value) -> anyhow::Result<()> {
        use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), NS, &kind.resource);
        let patch = PatchParams {
            field_manager: Some("chaos-load".into()),
            ..PatchParams::default()
        };
        match api.patch(name, &patch, &Patch::Merge(&object)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let post = PostParams {
                    field_manager: Some("chaos-load".into()),
                    ..PostParams::default()
                };
                api.create(&post, &serde_json::from_value(object)?).await?;
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// The CloudEvents: logins and logouts of users on `production`'s NATS (JetStream), spread over
/// the resource load. Returns the users logged in at the end (the last event of each wins) and
/// each user's events in order, to show when a user's profile is wrong.
async fn cloud_events(
    js: async_nats::jetstream::Context,
    events: usize,
    changes: usize,
    seed: u64,
    mut progress: watch::Receiver<usize>,
) -> anyhow::Result<(BTreeSet<String>, Counts, BTreeMap<String, Vec<String>>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let users = (events / 4).max(4);
    let mut logged_in = BTreeSet::new();
    let mut counts = Counts::default();
    let mut history: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..events {
        let due = i * changes / events.max(1);
        progress.wait_for(|n| *n >= due).await?;
        let user = format!("user-{}", rng.gen_range(0..users));
        let logout = logged_in.contains(&user) && rng.gen_bool(0.5);
        let kind = if logout { "logout" } else { "login" };
        if logout {
            logged_in.remove(&user);
            counts.logouts += 1;
        } else {
            logged_in.insert(user.clone());
            counts.logins += 1;
        }
        history
            .entry(user.clone())
            .or_default()
            .push(format!("#{i} {kind}"));
        let event = json!({"specversion": "1.0", "type": format!("chaos.{kind}"),
            "source": CE_SOURCE, "id": format!("{i}-{kind}-{user}"), "subject": user,
            "datacontenttype": "application/json", "data": {"n": i}});
        js.publish(CE_SUBJECT, event.to_string().into())
            .await?
            .await?;
    }
    Ok((logged_in, counts, history))
}

// ---------------------------------------------------------------------------------------------
// Faults.

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill(&'static str),
    NatsKill,
    Gone,
    ServerErrors,
    Latency,
    Unreachable(&'static str),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Kill(service) => write!(f, "SIGKILL {service}, restart"),
            Fault::NatsKill => write!(f, "SIGKILL nats-server, restart on its store"),
            Fault::Gone => write!(f, "watches dropped, resumed with 410 Gone"),
            Fault::ServerErrors => write!(f, "1 request in 3 fails with 500"),
            Fault::Latency => write!(f, "150 ms latency on every request"),
            Fault::Unreachable(cluster) => write!(f, "{cluster} unreachable"),
        }
    }
}

/// Every fault, in the order injected.
fn faults() -> Vec<Fault> {
    let mut out: Vec<Fault> = SERVICES.iter().rev().map(|s| Fault::Kill(s)).collect();
    out.extend([
        Fault::NatsKill,
        Fault::Gone,
        Fault::Unreachable("cluster-b"),
        Fault::ServerErrors,
        Fault::Latency,
    ]);
    out
}

/// Every cluster of the test server, management included.
fn all_clusters() -> Vec<&'static str> {
    let mut out = vec![MANAGEMENT];
    out.extend(CLUSTERS);
    out
}

/// Per managed cluster, whether it is unreachable from outside now (its users write inside).
type CutOff = BTreeMap<&'static str, Arc<AtomicBool>>;

/// Injects a fault (`on`) or ends it.
async fn set_fault(
    stack: &mut Stack,
    cut_off: &CutOff,
    fault: Fault,
    on: bool,
) -> anyhow::Result<()> {
    match fault {
        Fault::Kill(service) if on => stack.kill_service(service),
        Fault::Kill(service) => stack.start_service(service)?,
        Fault::NatsKill if on => stack.nats.stop(),
        Fault::NatsKill => stack.nats.start_again().await?,
        // At the start and again at the end: watches resume from an old version, then run on.
        Fault::Gone => {
            for cluster in CLUSTERS {
                let faults = stack.server.faults(cluster);
                faults.force_gone_next_watch();
                faults.drop_watches();
            }
        }
        Fault::ServerErrors => {
            let rate = if on { 1.0 / 3.0 } else { 0.0 };
            for cluster in all_clusters() {
                stack.server.faults(cluster).set_error_rate(rate, 500);
            }
        }
        Fault::Latency => {
            let latency = Duration::from_millis(if on { 150 } else { 0 });
            for cluster in all_clusters() {
                stack.server.faults(cluster).set_latency(latency);
            }
        }
        Fault::Unreachable(cluster) => {
            if let Some(flag) = cut_off.get(cluster) {
                flag.store(on, Ordering::SeqCst);
            }
            stack.server.faults(cluster).set_unreachable(on);
        }
    }
    Ok(())
}

/// Changes that must flow while a fault lasts, and between two faults.
const FAULT_CHANGES: usize = 20;
/// The shortest a fault lasts, and the shortest pause between two faults.
const FAULT_MIN: Duration = Duration::from_secs(2);
const PAUSE_MIN: Duration = Duration::from_secs(1);

/// Waits until `more` changes past the current count are written (or the load is done), at most
/// [`FAULT_CAP`] (the writes to an unreachable cluster stall), and at least until `not_before`.
/// Returns whether the changes came.
async fn let_flow(
    progress: &mut watch::Receiver<usize>,
    changes: usize,
    more: usize,
    not_before: Instant,
) -> anyhow::Result<bool> {
    let target = (*progress.borrow() + more).min(changes);
    let reached = tokio::time::timeout(FAULT_CAP, progress.wait_for(|n| *n >= target))
        .await
        .is_ok();
    // The fault's length is what is under test here, not a state to wait for.
    tokio::time::sleep_until(not_before.into()).await;
    Ok(reached)
}

/// What the fault driver did: per fault, how often and for how long in all.
#[derive(Default)]
struct FaultLog {
    by_fault: BTreeMap<String, (usize, Duration)>,
    stalled: usize,
    injected: usize,
    /// The last few faults, newest last, with when they began after the first.
    recent: std::collections::VecDeque<String>,
}

impl FaultLog {
    fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_fault
            .iter()
            .map(|(fault, (times, total))| format!("  {times} x {fault} ({total:.1?} in all)"))
            .collect();
        out.push("  the last ones:".to_string());
        out.extend(self.recent.iter().map(|line| format!("    {line}")));
        out
    }
}

/// The services that exited on their own, with their errors, the faults so far and the logs; checked
/// before every fault too, so that the next kill and restart does not hide an exit.
fn exited_error(stack: &mut Stack, log: &FaultLog) -> Option<anyhow::Error> {
    let exited = stack.exited_services();
    if exited.is_empty() {
        return None;
    }
    // The tail of a failed service's log is its backtrace: show its error first.
    let errors: Vec<String> = exited
        .iter()
        .flat_map(|service| {
            stack
                .service_log(service)
                .lines()
                .skip_while(|l| !l.starts_with("Error:"))
                .take_while(|l| !l.contains("Stack backtrace"))
                .take(20)
                .map(|l| format!("{service}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect();
    Some(anyhow::anyhow!(
        "services exited: {exited:?}\n{}\nfaults so far:\n{}\n{}",
        errors.join("\n"),
        log.lines().join("\n"),
        stack.logs()
    ))
}

/// Injects the faults in turn, round after round, while the load runs: each lasts at least
/// [`FAULT_MIN`] and until [`FAULT_CHANGES`] more changes are written; between two, the load
/// flows without fault as long again. Every fault is healed before the next. Returns what it did
/// and when the last fault ended.
async fn run_faults(
    stack: &mut Stack,
    cut_off: &CutOff,
    changes: usize,
    mut progress: watch::Receiver<usize>,
) -> anyhow::Result<(FaultLog, Instant)> {
    let mut log = FaultLog::default();
    let mut last_end = Instant::now();
    let first = Instant::now();
    let_flow(
        &mut progress,
        changes,
        FAULT_CHANGES,
        Instant::now() + PAUSE_MIN,
    )
    .await?;
    for fault in faults().into_iter().cycle() {
        if *progress.borrow() >= changes {
            break;
        }
        if let Some(error) = exited_error(stack, &log) {
            return Err(error);
        }
        let begun = Instant::now();
        set_fault(stack, cut_off, fault, true).await?;
        let reached = let_flow(&mut progress, changes, FAULT_CHANGES, begun + FAULT_MIN).await?;
        set_fault(stack, cut_off, fault, false).await?;
        last_end = Instant::now();
        log.injected += 1;
        if log.recent.len() == 4 {
            log.recent.pop_front();
        }
        log.recent.push_back(format!(
            "{fault} at {:.1?}, for {:.1?}",
            begun.duration_since(first),
            begun.elapsed()
        ));
        log.stalled += usize::from(!reached);
        let entry = log.by_fault.entry(fault.to_string()).or_default();
        entry.0 += 1;
        entry.1 += begun.elapsed();
        let_flow(&mut progress, changes, FAULT_CHANGES, last_end + PAUSE_MIN).await?;
    }
    Ok((log, last_end))
}

// ---------------------------------------------------------------------------------------------
// The reference model: what the management cluster must hold.

/// What identifies one ClusterProfile of a trigger in a cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unit {
    /// `oneForEvent: true`: one per matching resource.
    Resource(String),
    /// `oneForEvent: false`: one for the whole set.
    Main,
    /// One per CloudEvent subject.
    Subject(String),
}

/// `(trigger, cluster, unit)` → the object the instantiated ConfigMap's `object.yaml` must hold.
type Truth = BTreeMap<(String, String, Unit), Value>;

/// The truth, from the final objects of the managed clusters and the users logged in.
fn truth(world: &World, users: &BTreeSet<String>) -> Truth {
    let mut out = Truth::new();
    let config_map = |name: String, data: Value| {
        json!({"kind": "ConfigMap", "apiVersion": "v1",
               "metadata": {"name": name, "namespace": NS}, "data": data})
    };
    let mut deployments: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((cluster, _, name), state) in world {
        let mut add = |trigger: &str, value: Value| {
            out.insert(
                (
                    trigger.to_string(),
                    cluster.clone(),
                    Unit::Resource(name.clone()),
                ),
                value,
            );
        };
        match state {
            State::Service { port } => {
                let data = json!({"port": port.to_string()});
                add("chaos-one", config_map(format!("one-{name}"), data.clone()));
                add("chaos-dest", config_map(format!("dest-{name}"), data));
            }
            State::ConfigMap { keep: true, value } => {
                add(
                    "chaos-lua",
                    config_map(format!("lua-{name}"), json!({"value": value})),
                );
            }
            State::ConfigMap { keep: false, .. } => {}
            State::Deployment { replicas } => deployments
                .entry(cluster)
                .or_default()
                .push(format!("{name}={replicas}")),
        }
    }
    for (cluster, entries) in deployments {
        let value = config_map(
            "all-deployments".into(),
            json!({"replicas": sorted_entries(&entries.join(";"))}),
        );
        out.insert(("chaos-all".into(), cluster.to_string(), Unit::Main), value);
    }
    for user in users {
        out.insert(
            (
                "chaos-ce".into(),
                CE_CLUSTER.into(),
                Unit::Subject(user.clone()),
            ),
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": user}}),
        );
    }
    out
}

/// `a=1;b=2;` in a canonical order (the template lists Deployments in the order it gets them).
fn sorted_entries(text: &str) -> String {
    let mut entries: Vec<&str> = text.split(';').filter(|e| !e.is_empty()).collect();
    entries.sort_unstable();
    entries.join(";")
}

/// Where a ClusterProfile must send its add-ons: the destination selector for `chaos-dest`,
/// the source cluster for the others.
fn destination(trigger: &str, cluster: &str) -> (Value, Value) {
    if trigger == "chaos-dest" {
        (json!({"matchLabels": {"dep": "eng"}}), Value::Null)
    } else {
        (
            Value::Null,
            json!([{"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                    "namespace": "default", "name": cluster}]),
        )
    }
}

/// A generated name as ADR 0004 defines it, computed here from the object's own labels.
fn expected_name(labels: &serde_json::Map<String, Value>) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in labels {
        hasher.update(key.as_bytes());
        hasher.update(b"=");
        hasher.update(value.as_str().unwrap_or_default().as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let suffix: String = digest
        .iter()
        .take(20)
        .map(|b| char::from(alphabet[usize::from(*b) % 36]))
        .collect();
    format!("sveltos-{suffix}")
}

/// How the management cluster differs from the truth.
#[derive(Debug, Default)]
struct Diff {
    expected: usize,
    profiles: usize,
    config_maps: usize,
    missing: Vec<String>,
    duplicate: Vec<String>,
    stale: Vec<String>,
    status: Vec<String>,
    /// The resource and CloudEvent units stale or missing: what `bus_trail` shows on a failure.
    wrong: BTreeSet<(String, String, Unit)>,
}

impl Diff {
    fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.duplicate.is_empty()
            && self.stale.is_empty()
            && self.status.is_empty()
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected {} profiles; found {} profiles and {} ConfigMaps: {} missing, {} duplicate, \
             {} stale, {} wrong trigger statuses",
            self.expected,
            self.profiles,
            self.config_maps,
            self.missing.len(),
            self.duplicate.len(),
            self.stale.len(),
            self.status.len()
        )?;
        for (what, list) in [
            ("missing", &self.missing),
            ("duplicate", &self.duplicate),
            ("stale", &self.stale),
            ("status", &self.status),
        ] {
            for line in list.iter().take(10) {
                write!(f, "\n  {what}: {line}")?;
            }
            if list.len() > 10 {
                write!(f, "\n  {what}: … {} more", list.len() - 10)?;
            }
        }
        Ok(())
    }
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["labels"][key].as_str()
}

fn unit_of(profile: &Value) -> Unit {
    if let Some(name) = label(profile, naming::LABEL_RESOURCE_NAME) {
        Unit::Resource(name.to_string())
    } else if let Some(subject) = label(profile, naming::LABEL_CE_SUBJECT) {
        Unit::Subject(subject.to_string())
    } else {
        Unit::Main
    }
}

/// Compares the management cluster with the truth.
async fn compare(stack: &Stack, truth: &Truth) -> anyhow::Result<Diff> {
    let mut diff = Diff {
        expected: truth.len(),
        ..Diff::default()
    };
    let mut found: BTreeMap<(String, String, Unit), Vec<Value>> = BTreeMap::new();
    let mut config_maps: BTreeMap<String, Value> = BTreeMap::new();
    for (trigger, _) in TRIGGERS {
        let labels = [(naming::LABEL_EVENT_TRIGGER, trigger)];
        for profile in stack
            .list(MANAGEMENT, CLUSTER_PROFILE.0, CLUSTER_PROFILE.1, &labels)
            .await?
        {
            let cluster = label(&profile, naming::LABEL_CLUSTER_NAME).unwrap_or_default();
            let key = (trigger.to_string(), cluster.to_string(), unit_of(&profile));
            found.entry(key).or_default().push(profile);
        }
        for config_map in stack.list(MANAGEMENT, "v1", "ConfigMap", &labels).await? {
            let name = config_map["metadata"]["name"].as_str().unwrap_or_default();
            config_maps.insert(name.to_string(), config_map);
        }
    }
    diff.profiles = found.values().map(Vec::len).sum();
    diff.config_maps = config_maps.len();
    let mut referenced = BTreeSet::new();
    for (key, profiles) in &found {
        let (trigger, cluster, unit) = key;
        let what = format!("{trigger} in {cluster}: {unit:?}");
        if profiles.len() > 1 {
            diff.duplicate
                .push(format!("{what} has {} profiles", profiles.len()));
        }
        let Some(expected) = truth.get(key) else {
            diff.stale.push(format!("{what} should not exist"));
            diff.wrong.extend(unit_on_the_bus(key));
            // Its ConfigMaps are counted with it, not again as unreferenced.
            referenced.extend(profiles.iter().flat_map(|p| {
                p["spec"]["policyRefs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["name"].as_str().map(str::to_string))
            }));
            continue;
        };
        for profile in profiles {
            let name = profile["metadata"]["name"].as_str().unwrap_or_default();
            let labels = profile["metadata"]["labels"].as_object().cloned();
            if labels.is_some_and(|l| expected_name(&l) != name) {
                diff.stale.push(format!(
                    "{what}: name {name} is not the one its labels give"
                ));
            }
            let (selector, refs) = destination(trigger, cluster);
            if profile["spec"]["clusterSelector"] != selector
                || profile["spec"]["clusterRefs"] != refs
            {
                diff.stale.push(format!("{what}: wrong destination"));
            }
            let policy_refs = profile["spec"]["policyRefs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let [policy_ref] = policy_refs.as_slice() else {
                diff.stale
                    .push(format!("{what}: {} policyRefs, not 1", policy_refs.len()));
                continue;
            };
            let cm_name = policy_ref["name"].as_str().unwrap_or_default();
            referenced.insert(cm_name.to_string());
            let Some(config_map) = config_maps.get(cm_name) else {
                diff.missing
                    .push(format!("{what}: its ConfigMap {cm_name}"));
                continue;
            };
            if policy_ref["namespace"] != SVELTOS_NAMESPACE {
                diff.stale.push(format!("{what}: policyRef {policy_ref}"));
            }
            let text = config_map["data"]["object.yaml"]
                .as_str()
                .unwrap_or_default();
            let mut actual: Value = serde_yaml::from_str(text).unwrap_or(Value::Null);
            if let Some(replicas) = actual["data"]["replicas"].as_str() {
                actual["data"]["replicas"] = json!(sorted_entries(replicas));
            }
            if &actual != expected {
                diff.stale
                    .push(format!("{what}: holds {actual}, the truth is {expected}"));
            }
        }
    }
    for key in truth.keys() {
        if !found.contains_key(key) {
            diff.wrong.extend(unit_on_the_bus(key));
            let (trigger, cluster, unit) = key;
            diff.missing
                .push(format!("{trigger} in {cluster}: {unit:?}"));
        }
    }
    for name in config_maps.keys() {
        if !referenced.contains(name) {
            diff.stale
                .push(format!("ConfigMap {name} no profile references"));
        }
    }
    for (trigger, clusters) in TRIGGERS {
        diff.status
            .extend(status_errors(stack, trigger, clusters).await?);
    }
    Ok(diff)
}

/// `(trigger, cluster, unit)` of a resource unit (a `oneForEvent` trigger's) or a CloudEvent's.
fn unit_on_the_bus(key: &(String, String, Unit)) -> Option<(String, String, Unit)> {
    match key.2 {
        Unit::Resource(_) | Unit::Subject(_) => Some(key.clone()),
        Unit::Main => None,
    }
}

/// What the bus holds along the way of each unit in `units`: for a resource unit the object's
/// last change, its match member and its set's head; for either unit its desired state and its
/// apply result; each with its stream sequence. Shown when the run does not converge, to tell
/// which stage stopped.
async fn bus_trail(stack: &Stack, units: &BTreeSet<(String, String, Unit)>) -> String {
    let bus = match sluice_bus::Bus::connect(stack.bus_options()).await {
        Ok(bus) => bus,
        Err(error) => return format!("  (the bus cannot be read: {error})"),
    };
    use sluice_bus::topology;
    let mut out = Vec::new();
    for (trigger, cluster, unit) in units.iter().take(10) {
        // Registered as the SveltosCluster default/<name> (`Stack::register_cluster`).
        let c = topology::cluster_tokens("sveltos", "default", cluster);
        let mut filters = Vec::new();
        let (what, desired) = match unit {
            Unit::Resource(name) => {
                let (event_source, kind) = match trigger.as_str() {
                    "chaos-lua" => ("chaos-lua", "ConfigMap"),
                    _ => ("chaos-svc", "Service"),
                };
                filters.push((
                    topology::CHANGES,
                    topology::change_subject(&c, "", kind, NS, name),
                ));
                filters.push((
                    topology::MATCH,
                    topology::match_member_subject(&c, event_source, "", kind, NS, name),
                ));
                filters.push((topology::MATCH, topology::match_subject(&c, event_source)));
                (
                    format!("{kind} {name}"),
                    topology::desired_resource_subject(trigger, &c, NS, name),
                )
            }
            Unit::Subject(subject) => (
                format!("CloudEvent subject {subject}"),
                topology::desired_cloudevent_subject(trigger, &c, CE_SOURCE, subject),
            ),
            Unit::Main => continue,
        };
        let applied = topology::applied_subject_for(&desired).unwrap_or_default();
        filters.push((topology::DESIRED, desired));
        filters.push((topology::APPLIED, applied));
        out.push(format!("  {trigger} in {cluster}: {what}"));
        for (stream, filter) in filters {
            let found = match bus.replay_state(stream, &filter).await {
                Ok(found) => found,
                Err(error) => {
                    out.push(format!("    {filter}: {error}"));
                    continue;
                }
            };
            if found.is_empty() {
                out.push(format!("    {filter}: nothing"));
            }
            for delivered in found {
                out.push(format!(
                    "    {} #{}: {}",
                    delivered.subject,
                    delivered.sequence,
                    describe(stream, &delivered)
                ));
            }
        }
    }
    bus.close().await;
    out.join("\n")
}

/// What one message of the trail says.
fn describe(stream: sluice_bus::topology::StreamSpec, delivered: &sluice_bus::Delivered) -> String {
    use sluice_wire::match_units::Unit as MatchUnit;
    let name = stream.name;
    if name == sluice_bus::topology::CHANGES.name {
        return match sluice_wire::decode_change(delivered, None) {
            Ok(change) if change.deleted => "deleted".to_string(),
            Ok(change) => {
                let object: Value = serde_json::from_slice(&change.object_json).unwrap_or_default();
                format!(
                    "data {}, resourceVersion {}",
                    object["data"], object["metadata"]["resourceVersion"]
                )
            }
            Err(error) => format!("undecodable: {error}"),
        };
    }
    if name == sluice_bus::topology::MATCH.name {
        return match sluice_wire::match_units::decode(delivered, None) {
            Ok(MatchUnit::Member(m)) => format!(
                "member present {} from change #{}{}",
                m.present,
                m.source_sequence,
                if m.failure_message.is_empty() {
                    String::new()
                } else {
                    format!(", failure {}", m.failure_message)
                }
            ),
            Ok(MatchUnit::Head(h)) => format!(
                "head of {} members from change #{}, removed {}, failure {:?}",
                h.members, h.source_sequence, h.removed, h.failure_message
            ),
            Err(error) => format!("undecodable: {error}"),
        };
    }
    if name == sluice_bus::topology::DESIRED.name {
        return match sluice_wire::decode_desired(delivered, None) {
            Ok(d) => format!(
                "desired: removed {}, {} objects, from match #{}, failure {:?}",
                d.removed,
                d.objects.len(),
                d.source_sequence,
                d.failure_message
            ),
            Err(error) => format!("undecodable: {error}"),
        };
    }
    match sluice_wire::decode::<sluice_proto::v1::ApplyResult>("ApplyResult", delivered) {
        Ok(r) => format!(
            "applied: removed {}, {} applied, {} deleted, from desired #{}, error {:?}, failure {:?}",
            r.removed,
            r.applied.len(),
            r.deleted.len(),
            r.source_sequence,
            r.error,
            r.failure_message
        ),
        Err(error) => format!("undecodable: {error}"),
    }
}

/// What is wrong with a trigger's status: every selected cluster listed, Provisioned.
async fn status_errors(
    stack: &Stack,
    trigger: &str,
    clusters: &[&str],
) -> anyhow::Result<Vec<String>> {
    let object = stack
        .get(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventTrigger",
            "",
            trigger,
        )
        .await?
        .unwrap_or_default();
    let status = &object["status"];
    let mut errors = Vec::new();
    let names = |list: &Value, path: &str| -> BTreeSet<String> {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.pointer(path).and_then(Value::as_str).map(str::to_string))
            .collect()
    };
    let want: BTreeSet<String> = clusters.iter().map(|c| c.to_string()).collect();
    let matching = names(&status["matchingClusters"], "/name");
    if matching != want {
        errors.push(format!(
            "{trigger}: matchingClusters {matching:?}, not {want:?}"
        ));
    }
    let listed = names(&status["clusterInfo"], "/cluster/name");
    if listed != want {
        errors.push(format!(
            "{trigger}: clusterInfo for {listed:?}, not {want:?}"
        ));
    }
    for info in status["clusterInfo"].as_array().into_iter().flatten() {
        if info["status"] != "Provisioned" {
            errors.push(format!("{trigger}: {info}"));
        }
    }
    Ok(errors)
}

// ---------------------------------------------------------------------------------------------
// The run.

struct Size {
    changes: usize,
    cloud_events: usize,
    /// Resource changes per second, all writers together.
    rate: u32,
    /// How long the management cluster may take to equal the truth after the last fault.
    converge: Duration,
}

fn env_or(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(text) => Ok(text.parse()?),
        Err(_) => Ok(default),
    }
}

/// The managed clusters' objects of the load, as listed now.
async fn list_world(stack: &Stack) -> anyhow::Result<World> {
    let mut world = World::new();
    for cluster in CLUSTERS {
        for kind in ObjKind::ALL {
            let (api_version, kind_name) = kind.api_version_kind();
            for object in stack
                .list(cluster, api_version, kind_name, &[("app", kind.app())])
                .await?
            {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                let state = State::read(kind, &object)
                    .ok_or_else(|| anyhow::anyhow!("unreadable {kind:?} {object}"))?;
                world.insert((cluster.to_string(), kind, name.to_string()), state);
            }
        }
    }
    Ok(world)
}

async fn chaos(size: Size) -> anyhow::Result<()> {
    let seed = env_or("SLUICE_CHAOS_SEED", 21)? as u64;
    let started = Instant::now();

    // The managed cluster's NATS with a JetStream stream for the CloudEvents.
    let managed = managed_nats().await?;
    let nats = managed_client(&managed).await?;
    let js = async_nats::jetstream::new(nats.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: CE_STREAM.into(),
        subjects: vec![CE_SUBJECT.into()],
        ..Default::default()
    })
    .await?;
    let url = managed.url();
    let secret = nats_secret(|c| {
        let auth = c["nats"]["configuration"]["authorization"].clone();
        *c = json!({"jetstream": {"configuration": {
            "url": url, "streams": [{"name": CE_STREAM, "subjects": [CE_SUBJECT]}],
            "authorization": auth}}});
    })?;

    let mut stack = Stack::start(&CLUSTERS, None).await?;
    stack
        .register_cluster(CE_CLUSTER, &[("env", "production"), ("chaos", "fleet")])
        .await?;
    stack
        .register_cluster("cluster-b", &[("chaos", "fleet")])
        .await?;
    for cluster in CLUSTERS {
        for namespace in [NS, SVELTOS_NAMESPACE] {
            stack
                .apply(
                    cluster,
                    &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
                )
                .await?;
        }
    }
    stack.apply(CE_CLUSTER, &secret).await?;
    stack.apply_yaml(MANAGEMENT, CONFIG).await?;

    // The writers: per cluster, lanes owning disjoint objects.
    let pool = (size.changes / 24).max(6);
    let progress = Arc::new(watch::channel(0usize).0);
    let lanes_total = CLUSTERS.len() * LANES_PER_CLUSTER;
    let mut lanes = Vec::new();
    let cut_off: CutOff = CLUSTERS
        .iter()
        .map(|c| (*c, Arc::new(AtomicBool::new(false))))
        .collect();
    for (c, cluster) in CLUSTERS.iter().enumerate() {
        let client = stack.client(cluster)?.clone();
        let inside = stack
            .server
            .inside(cluster)
            .ok_or_else(|| anyhow::anyhow!("no cluster {cluster}"))?;
        let mut kinds = BTreeMap::new();
        for kind in ObjKind::ALL {
            let (api_version, kind_name) = kind.api_version_kind();
            kinds.insert(kind, apply::resolve(&client, api_version, kind_name).await?);
        }
        for l in 0..LANES_PER_CLUSTER {
            let names: Vec<(ObjKind, String)> = ObjKind::ALL
                .iter()
                .flat_map(|kind| {
                    (0..pool)
                        .filter(move |i| i % LANES_PER_CLUSTER == l)
                        .map(move |i| (*kind, format!("{}-{i:05}", kind.prefix())))
                })
                .collect();
            let index = c * LANES_PER_CLUSTER + l;
            let changes =
                size.changes / lanes_total + usize::from(index < size.changes % lanes_total);
            lanes.push(Lane {
                cluster: cluster.to_string(),
                client: client.clone(),
                inside: inside.clone(),
                cut_off: cut_off[cluster].clone(),
                kinds: kinds.clone(),
                names,
                changes,
                pace: lanes_total as u32 * Duration::from_secs(1) / size.rate,
                seed: seed.wrapping_mul(1000).wrapping_add(index as u64),
            });
        }
    }
    let load_started = Instant::now();
    let tasks: Vec<_> = lanes
        .into_iter()
        .map(|lane| tokio::spawn(lane.run(progress.clone())))
        .collect();
    let events = tokio::spawn(cloud_events(
        js,
        size.cloud_events,
        size.changes,
        seed,
        progress.subscribe(),
    ));
    let faulted = run_faults(&mut stack, &cut_off, size.changes, progress.subscribe()).await;
    let mut world = World::new();
    let mut counts = Counts::default();
    for task in tasks {
        let (lane_world, lane_counts) = task.await??;
        world.extend(lane_world);
        counts.add(&lane_counts);
    }
    let (users, ce_counts, history) = events.await??;
    counts.add(&ce_counts);
    let (fault_log, last_fault) = faulted?;
    let load_time = load_started.elapsed();
    if let Some(error) = exited_error(&mut stack, &fault_log) {
        return Err(error);
    }

    // The truth is computed from what the managed clusters hold (which must be what was written).
    let listed = list_world(&stack).await?;
    let differences: Vec<String> = listed
        .iter()
        .filter(|(key, state)| world.get(*key) != Some(*state))
        .map(|(key, state)| format!("{key:?} holds {state:?}, written {:?}", world.get(key)))
        .chain(
            world
                .iter()
                .filter(|(key, _)| !listed.contains_key(*key))
                .map(|(key, state)| format!("{key:?} missing, written {state:?}")),
        )
        .take(10)
        .collect();
    anyhow::ensure!(
        differences.is_empty(),
        "the managed clusters do not hold what the load wrote ({} objects listed, {} written): {}",
        listed.len(),
        world.len(),
        differences.join("; ")
    );
    let truth = truth(&listed, &users);
    let converged = wait_for(
        "the management cluster to equal the truth",
        size.converge,
        || async {
            let diff = compare(&stack, &truth).await?;
            if diff.is_empty() {
                Ok(diff)
            } else {
                Err(anyhow::anyhow!("{diff}"))
            }
        },
    )
    .await;
    let diff = match converged {
        Ok(diff) => diff,
        Err(e) => {
            // A service that exited after the load shows here first: it explains the rest.
            if let Some(error) = exited_error(&mut stack, &fault_log) {
                return Err(error.context(format!("{e:#}")));
            }
            let text = format!("{e:#}");
            let events: Vec<String> = history
                .iter()
                .filter(|(user, _)| text.contains(&format!("Subject({user:?})")))
                .map(|(user, events)| format!("  {user}: {}", events.join(", ")))
                .collect();
            let trail = match compare(&stack, &truth).await {
                Ok(diff) => bus_trail(&stack, &diff.wrong).await,
                Err(error) => format!("  (not compared again: {error:#})"),
            };
            anyhow::bail!(
                "seed {seed} (SLUICE_CHAOS_SEED), after {:?} of load and {:?} since the last \
                 fault: {text}\nCloudEvents sent \
                 for the subjects above, in order:\n{}\nWhat the bus holds for the units \
                 above:\n{trail}\nThe faults:\n{}\n{}",
                load_time,
                last_fault.elapsed(),
                events.join("\n"),
                fault_log.lines().join("\n"),
                stack.logs()
            )
        }
    };
    let converge = last_fault.elapsed();
    eprintln!(
        "chaos (seed {seed}): {} resource changes ({} creates, {} updates, {} deletes; {} writes \
         retried through faults, {} made inside an unreachable cluster) and {} CloudEvents ({} \
         logins, {} logouts) in {load_time:.1?}",
        size.changes,
        counts.creates,
        counts.updates,
        counts.deletes,
        counts.retried_writes,
        counts.inside_writes,
        size.cloud_events,
        counts.logins,
        counts.logouts
    );
    eprintln!(
        "{} faults injected in turn ({} stalled the load for up to {FAULT_CAP:?}):",
        fault_log.injected, fault_log.stalled
    );
    for line in fault_log.lines() {
        eprintln!("{line}");
    }
    eprintln!(
        "final: {} managed objects, {} users logged in; {diff}; converged {converge:.1?} after \
         the last fault ({:.1?} in all)",
        listed.len(),
        users.len(),
        started.elapsed()
    );
    Ok(())
}

/// The version in the suite: 1,000 resource changes and 100 CloudEvents, while every fault
/// comes in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_chaos_converges_exactly() -> anyhow::Result<()> {
    chaos(ci_size(env_or("SLUICE_CHAOS_CLOUDEVENTS", 100)?)?).await
}

/// The suite's size: 1,000 changes at 30 a second, with `cloud_events` among them.
fn ci_size(cloud_events: usize) -> anyhow::Result<Size> {
    Ok(Size {
        changes: env_or("SLUICE_CHAOS_CHANGES", 1_000)?,
        cloud_events,
        rate: 30,
        converge: Duration::from_secs(120),
    })
}

/// The full run: `cargo test -p sluice-e2e --test chaos -- --ignored full_chaos`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "takes many minutes: run it on purpose"]
async fn full_chaos_converges_exactly() -> anyhow::Result<()> {
    chaos(Size {
        changes: env_or("SLUICE_CHAOS_CHANGES", 10_000)?,
        cloud_events: env_or("SLUICE_CHAOS_CLOUDEVENTS", 1_000)?,
        rate: 50,
        converge: Duration::from_secs(300),
    })
    .await
}
