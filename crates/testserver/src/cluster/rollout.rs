//! The controllers that run workloads, done right after each write that touches a Deployment,
//! ReplicaSet, Pod or ServiceAccount (on that object and the one controlling it, `Work`), so
//! that a cluster's workloads settle as a real one's do, only at once:
//! - the deployment controller keeps one ReplicaSet per pod template (`<name>-<hash>`, labelled
//!   `pod-template-hash`), scales the current one to `spec.replicas` and the older ones to zero
//!   (a rollout that completes at once), keeps `revisionHistoryLimit` old ones, numbers
//!   revisions, and reports replicas and the `Available` and `Progressing` conditions;
//! - the ReplicaSet controller creates and deletes Pods from its template until it has
//!   `spec.replicas`, and reports them; it releases the Pods it controls that its selector no
//!   longer matches and adopts the orphans it matches (`claim`); a Pod that admission refuses (a missing ServiceAccount,
//!   say) becomes its `ReplicaFailure` condition, and is tried again when the namespace's
//!   workloads or ServiceAccounts change;
//! - the scheduler binds a pending Pod to the cluster's Node when its node selector fits
//!   (`placement`), and the Node's kubelet starts it: `Running`, every container started and
//!   ready, with a Pod IP;
//! - the root CA publisher puts a namespace's `kube-root-ca.crt` back as it wrote it when
//!   someone edits it;
//! - the endpoints and EndpointSlice controllers list a Service's Pods (`endpoints`).
//!
//! Decisions are pure functions of the objects; `State::settle` applies them.

use serde_json::{json, Map, Value};

use sluice_domain::selector::{LabelSelector, Selector};

use crate::object::{is_deleting, meta_str, now};
use crate::resources::{GroupResource, ResourceInfo};

use super::{Owner, Subresource};

/// The label that ties a ReplicaSet and its Pods to one pod template of a Deployment.
pub const TEMPLATE_HASH: &str = "pod-template-hash";
/// The annotation that numbers a Deployment's ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The manager of what the controllers write.
pub const MANAGER: &str = "kube-controller-manager";
/// The ConfigMap the root CA publisher keeps in every namespace.
const ROOT_CA: &str = "kube-root-ca.crt";

const FNV_OFFSET: u32 = 0x811c_9dc5;

/// FNV-1a (32 bits) of `bytes`, continuing from `hash`.
fn fnv1a(hash: u32, bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(hash, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// The hash of a pod template that names its ReplicaSet: FNV-1a over the template with its
/// maps in key order and without null fields, written as apimachinery's `SafeEncodeString` writes its decimal digits.
pub fn template_hash(template: &Value) -> String {
    let mut hash = FNV_OFFSET;
    let mut feed = |bytes: &[u8]| hash = fnv1a(hash, bytes);
    fn walk(value: &Value, feed: &mut dyn FnMut(&[u8])) {
        match value {
            Value::Object(map) => {
                // A null field is an absent one, as in the typed template apimachinery hashes.
                let mut keys: Vec<&String> = map
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, _)| k)
                    .collect();
                keys.sort();
                feed(b"{");
                for key in keys {
                    feed(key.as_bytes());
                    feed(b":");
                    walk(&map[key], feed);
                    feed(b",");
                }
                feed(b"}");
            }
            Value::Array(items) => {
                feed(b"[");
                for item in items {
                    walk(item, feed);
                    feed(b",");
                }
                feed(b"]");
            }
            other => feed(other.to_string().as_bytes()),
        }
    }
    walk(template, &mut feed);
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|b| char::from(SAFE[usize::from(b) % SAFE.len()]))
        .collect()
}

/// The uid of the controller an object names in its owner references, if any.
pub fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller") == Some(&json!(true)))?
        .get("uid")?
        .as_str()
}

fn replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn status_count(obj: &Value, field: &str) -> i64 {
    obj.pointer(&format!("/status/{field}"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

pub fn revision(obj: &Value) -> i64 {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn controller_ref(owner: &Value) -> Value {
    json!([{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": meta_str(owner, "name"), "uid": meta_str(owner, "uid"),
            "controller": true, "blockOwnerDeletion": true}])
}

/// Sets `key: value` in the map at `path` in `obj`, making the maps on the way if missing.
fn set_in(obj: &mut Value, path: &[&str], key: &str, value: Value) {
    let mut at = obj;
    for part in path {
        if !at.get(*part).is_some_and(Value::is_object) {
            at[*part] = json!({});
        }
        at = &mut at[*part];
    }
    at[key] = value;
}

/// An int-or-percent of a rolling update resolved against `replicas`, rounding up or down.
fn resolve(value: Option<&Value>, replicas: i64, round_up: bool, default: &str) -> i64 {
    let value = value.cloned().unwrap_or_else(|| json!(default));
    match &value {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let percent: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let scaled = percent * replicas;
            if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            }
        }
        _ => 0,
    }
}

/// How many of a Deployment's replicas may be unavailable while it still counts as available.
fn max_unavailable(deployment: &Value) -> i64 {
    let wanted = replicas(deployment);
    let rolling = deployment
        .pointer("/spec/strategy/type")
        .and_then(Value::as_str)
        != Some("Recreate");
    if !rolling || wanted == 0 {
        return 0;
    }
    let update = deployment.pointer("/spec/strategy/rollingUpdate");
    let surge = resolve(update.and_then(|u| u.get("maxSurge")), wanted, true, "25%");
    let unavailable = resolve(
        update.and_then(|u| u.get("maxUnavailable")),
        wanted,
        false,
        "25%",
    );
    // apiserver's validation keeps both from being zero; the controller then allows one.
    let unavailable = if surge == 0 && unavailable == 0 {
        1
    } else {
        unavailable
    };
    unavailable.min(wanted)
}

/// The ReplicaSet a Deployment runs its current template with.
pub fn new_replica_set(deployment: &Value, hash: &str, revision: i64) -> Value {
    let name = format!("{}-{hash}", meta_str(deployment, "name"));
    let mut template = deployment
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    set_in(
        &mut template,
        &["metadata", "labels"],
        TEMPLATE_HASH,
        json!(hash),
    );
    let labels = template["metadata"]["labels"].clone();
    let mut selector = deployment
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    set_in(&mut selector, &["matchLabels"], TEMPLATE_HASH, json!(hash));
    let wanted = replicas(deployment);
    let surge = resolve(
        deployment.pointer("/spec/strategy/rollingUpdate/maxSurge"),
        wanted,
        true,
        "25%",
    );
    let mut spec = json!({"replicas": wanted, "selector": selector, "template": template});
    if let Some(ready) = deployment.pointer("/spec/minReadySeconds") {
        spec["minReadySeconds"] = ready.clone();
    }
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
           "metadata": {"name": name, "labels": labels,
                        "annotations": {"deployment.kubernetes.io/desired-replicas": wanted.to_string(),
                                        "deployment.kubernetes.io/max-replicas": (wanted + surge).to_string(),
                                        REVISION: revision.to_string()},
                        "ownerReferences": controller_ref(deployment)},
           "spec": spec})
}

/// A Pod of a ReplicaSet, from its template.
pub fn pod_of(replica_set: &Value) -> Value {
    let template = replica_set
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut metadata = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(m) = metadata.as_object_mut() {
        m.remove("name");
        m.remove("namespace");
        m.insert(
            "generateName".into(),
            json!(format!("{}-", meta_str(replica_set, "name"))),
        );
        m.insert("ownerReferences".into(), controller_ref(replica_set));
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
           "spec": template.get("spec").cloned().unwrap_or_else(|| json!({}))})
}

/// Whether a Pod's `Ready` condition is true.
pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Keeps the transition times of conditions whose status, reason and message did not change.
fn keep_times(conditions: &mut [Value], before: Option<&Value>) {
    let before = before.and_then(Value::as_array);
    for condition in conditions.iter_mut() {
        let Some(old) = before.and_then(|b| b.iter().find(|o| o["type"] == condition["type"]))
        else {
            continue;
        };
        let same = ["status", "reason", "message"]
            .iter()
            .all(|k| old.get(*k) == condition.get(*k));
        if same {
            for time in ["lastTransitionTime", "lastUpdateTime"] {
                if let Some(t) = old.get(time) {
                    condition[time] = t.clone();
                }
            }
        } else if old.get("status") == condition.get("status") {
            if let Some(t) = old.get("lastTransitionTime") {
                condition["lastTransitionTime"] = t.clone();
            }
        }
    }
}

/// A ReplicaSet's status from its active Pods (and the refusal of the last Pod it tried to
/// create, if any).
pub fn replica_set_status(replica_set: &Value, pods: &[&Value], refused: Option<&str>) -> Value {
    let labels = replica_set
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object);
    let fully_labeled = pods
        .iter()
        .filter(|p| {
            labels.is_none_or(|l| {
                l.iter()
                    .all(|(k, v)| p.pointer("/metadata/labels").and_then(|m| m.get(k)) == Some(v))
            })
        })
        .count();
    let ready = pods.iter().filter(|p| is_ready(p)).count();
    let mut status = Map::new();
    status.insert("replicas".into(), json!(pods.len()));
    status.insert("fullyLabeledReplicas".into(), json!(fully_labeled));
    if ready > 0 {
        status.insert("readyReplicas".into(), json!(ready));
        status.insert("availableReplicas".into(), json!(ready));
    }
    status.insert(
        "observedGeneration".into(),
        replica_set
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1)),
    );
    if let Some(message) = refused {
        let time = now();
        let mut conditions = vec![json!({"type": "ReplicaFailure", "status": "True",
            "reason": "FailedCreate", "message": message, "lastTransitionTime": time})];
        keep_times(&mut conditions, replica_set.pointer("/status/conditions"));
        status.insert("conditions".into(), Value::Array(conditions));
    }
    Value::Object(status)
}

/// A Deployment's status from the ReplicaSets it controls and the one running its template.
pub fn deployment_status(deployment: &Value, owned: &[&Value], current: Option<&Value>) -> Value {
    let sum = |field: &str| owned.iter().map(|rs| status_count(rs, field)).sum::<i64>();
    let wanted = replicas(deployment);
    let (total, ready, available) = (
        sum("replicas"),
        sum("readyReplicas"),
        sum("availableReplicas"),
    );
    let updated = current.map_or(0, |rs| status_count(rs, "replicas"));
    let time = now();
    let condition = |kind: &str, status: &str, reason: &str, message: String| {
        json!({"type": kind, "status": status, "lastUpdateTime": time,
               "lastTransitionTime": time, "reason": reason, "message": message})
    };
    let available_condition = if available >= wanted - max_unavailable(deployment) {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
        )
    };
    let paused = deployment.pointer("/spec/paused") == Some(&json!(true));
    let progressing = match current {
        _ if paused => condition(
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
        ),
        Some(rs) if updated == wanted && total == wanted && available == wanted => condition(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!(
                "ReplicaSet {:?} has successfully progressed.",
                meta_str(rs, "name")
            ),
        ),
        Some(rs) => condition(
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet {:?} is progressing.", meta_str(rs, "name")),
        ),
        None => condition(
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            "Created new replica set".into(),
        ),
    };
    let mut conditions = vec![available_condition, progressing];
    keep_times(&mut conditions, deployment.pointer("/status/conditions"));
    let mut status = Map::new();
    status.insert(
        "observedGeneration".into(),
        deployment
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1)),
    );
    for (field, value) in [
        ("replicas", total),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", (wanted - available).max(0)),
    ] {
        if value != 0 {
            status.insert(field.into(), json!(value));
        }
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// The status a Pod's kubelet reports once it has started every container on `node_ip` with
/// `pod_ip`.
pub fn running(pod: &Value, node_ip: &str, pod_ip: &str) -> Value {
    let time = now();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": time});
    // 64 hex digits that stand for a container's or image's digest: eight FNV hashes of the
    // seed and the Pod's uid.
    let digest = |seed: &str| -> String {
        let base = fnv1a(
            fnv1a(FNV_OFFSET, seed.as_bytes()),
            meta_str(pod, "uid").as_bytes(),
        );
        (0u8..8)
            .map(|i| format!("{:08x}", fnv1a(base, &[i])))
            .collect()
    };
    let statuses = |list: &str, init: bool| -> Vec<Value> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let name = c["name"].as_str().unwrap_or("");
                let image = c["image"].as_str().unwrap_or("");
                let state = if init {
                    json!({"terminated": {"exitCode": 0, "reason": "Completed",
                                          "startedAt": time, "finishedAt": time,
                                          "containerID": format!("containerd://{}", digest(name))}})
                } else {
                    json!({"running": {"startedAt": time}})
                };
                let mut status = json!({"name": name, "image": image,
                    "imageID": format!("{image}@sha256:{}", digest(image)),
                    "containerID": format!("containerd://{}", digest(name)),
                    "ready": true, "restartCount": 0, "started": !init,
                    "state": state, "lastState": {}});
                if init {
                    status["started"] = json!(false);
                }
                status
            })
            .collect()
    };
    let mut status = json!({
        "phase": "Running",
        "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"),
                       condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "hostIP": node_ip, "hostIPs": [{"ip": node_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": time,
        "containerStatuses": statuses("containers", false),
    });
    let init = statuses("initContainers", true);
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    if let Some(qos) = pod.pointer("/status/qosClass") {
        status["qosClass"] = qos.clone();
    }
    status
}

/// Where the scheduler puts a pending Pod.
#[derive(Debug, PartialEq)]
pub enum Placement {
    /// On the cluster's Node.
    Node,
    /// Nowhere: the Node does not fit it, for the reason given.
    Unschedulable(&'static str),
    /// Not the default scheduler's to place.
    OtherScheduler,
}

/// Where the default scheduler places a Pod on a one-Node cluster: it places only Pods of its
/// own, and only where their node selector matches the Node's labels.
pub fn placement(pod: &Value, node: &Value) -> Placement {
    let scheduler = pod
        .pointer("/spec/schedulerName")
        .and_then(Value::as_str)
        .unwrap_or("default-scheduler");
    if scheduler != "default-scheduler" {
        return Placement::OtherScheduler;
    }
    let labels = node.pointer("/metadata/labels");
    let selected = pod
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .is_none_or(|wanted| {
            wanted
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        });
    if selected {
        Placement::Node
    } else {
        Placement::Unschedulable("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    }
}

const DEPLOYMENTS: (&str, &str) = ("apps", "deployments");
const REPLICA_SETS: (&str, &str) = ("apps", "replicasets");
const PODS: (&str, &str) = ("", "pods");

/// What a ReplicaSet does about a Pod of its namespace (`ClaimPods`), and a Deployment about a
/// ReplicaSet (`ClaimReplicaSets`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// It controls the Pod and selects it: the Pod counts as one of its replicas.
    Keep,
    /// It controls the Pod but no longer selects it (relabelled): it lets go of it, and makes
    /// another in its place.
    Release,
    /// An orphan it selects: it takes it as one of its replicas.
    Adopt,
    /// Another controller's, or not selected, or either of them is being deleted.
    Ignore,
}

/// What `replica_set`, whose `spec.selector` is `selector`, does about `pod`, as
/// kube-controller-manager's controller-ref manager decides: a ReplicaSet being deleted neither
/// releases nor adopts, and a Pod being deleted is not adopted.
pub fn claim(replica_set: &Value, selector: &Selector, pod: &Value) -> Claim {
    let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
    let selected =
        selector.matches_with(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str));
    let ours = meta_str(replica_set, "uid");
    match controller_uid(pod) {
        Some(owner) if owner != ours => Claim::Ignore,
        Some(_) if selected => Claim::Keep,
        Some(_) if is_deleting(replica_set) => Claim::Ignore,
        Some(_) => Claim::Release,
        None if selected && !is_deleting(replica_set) && !is_deleting(pod) => Claim::Adopt,
        None => Claim::Ignore,
    }
}

/// A ReplicaSet's `spec.selector` as a selector; `None` when it has none or it does not parse
/// (validation refuses both).
fn selector_of(replica_set: &Value) -> Option<Selector> {
    let selector: LabelSelector =
        serde_json::from_value(replica_set.pointer("/spec/selector")?.clone()).ok()?;
    let selector = Selector::from_label_selector(&selector).ok()?;
    // An empty selector selects nothing here, as validation never lets one through.
    (!selector.is_empty()).then_some(selector)
}

fn gr(pair: (&str, &str)) -> GroupResource {
    (pair.0.to_string(), pair.1.to_string())
}

fn is(resource: &GroupResource, pair: (&str, &str)) -> bool {
    resource.0 == pair.0 && resource.1 == pair.1
}

/// An object the workload controllers look at again, in the order they act on them: Pods, then
/// ReplicaSets, then Deployments (namespace, name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Work {
    Pod(String, String),
    ReplicaSet(String, String),
    /// Every ReplicaSet of a namespace: a ServiceAccount changed, which may let one create the
    /// Pods admission refused it.
    ReplicaSets(String),
    Deployment(String, String),
    /// Every Deployment of a namespace: an orphan ReplicaSet changed, which one may adopt.
    Deployments(String),
    /// A namespace's `kube-root-ca.crt`, which the root CA publisher keeps as it wrote it.
    RootCa(String),
    /// A Service's Endpoints and EndpointSlices (`endpoints`).
    Endpoints(String, String),
    /// The Endpoints and slices of every Service that selects or lists a Pod (`endpoints`).
    PodEndpoints(String, String),
    /// Every aggregated ClusterRole's rules (`aggregation`).
    Aggregation,
}

/// What a change of `object` gives the controllers to look at: the object, and the one that
/// controls it.
pub fn work_for(resource: &GroupResource, object: &Value) -> Vec<Work> {
    if is(resource, ("", "configmaps")) && meta_str(object, "name") == ROOT_CA {
        return vec![Work::RootCa(meta_str(object, "namespace").to_string())];
    }
    let watched = [DEPLOYMENTS, REPLICA_SETS, PODS, ("", "serviceaccounts")];
    if !watched.iter().any(|pair| is(resource, *pair)) {
        return Vec::new();
    }
    let namespace = meta_str(object, "namespace").to_string();
    let name = meta_str(object, "name").to_string();
    let controller = |kind: &str| {
        object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter().find(|r| {
                    r.get("controller") == Some(&json!(true)) && r.get("kind") == Some(&json!(kind))
                })
            })
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if is(resource, PODS) {
        let mut work = vec![Work::Pod(namespace.clone(), name)];
        if controller_uid(object).is_none() {
            // An orphan: a ReplicaSet of its namespace that selects it adopts it.
            work.push(Work::ReplicaSets(namespace));
        } else {
            work.extend(controller("ReplicaSet").map(|rs| Work::ReplicaSet(namespace, rs)));
        }
        work
    } else if is(resource, REPLICA_SETS) {
        let mut work = vec![Work::ReplicaSet(namespace.clone(), name)];
        if controller_uid(object).is_none() {
            // An orphan: a Deployment of its namespace that selects it adopts it.
            work.push(Work::Deployments(namespace));
        } else {
            work.extend(controller("Deployment").map(|d| Work::Deployment(namespace, d)));
        }
        work
    } else if is(resource, DEPLOYMENTS) {
        vec![Work::Deployment(namespace, name)]
    } else if is(resource, ("", "serviceaccounts")) {
        vec![Work::ReplicaSets(namespace)]
    } else {
        Vec::new()
    }
}

impl super::State {
    /// Runs the workload controllers on what changed since they last ran, until they have
    /// nothing left to do.
    pub(super) fn settle(&mut self) {
        if self.settling || self.muted {
            return;
        }
        self.settling = true;
        // Each round acts on what the last one wrote; a rollout settles in a few.
        for _ in 0..32 {
            let dirty = std::mem::take(&mut self.unsettled);
            if dirty.is_empty() {
                break;
            }
            for work in dirty {
                match work {
                    Work::Pod(namespace, name) => self.run_pod(&namespace, &name),
                    Work::ReplicaSet(namespace, name) => {
                        self.reconcile_replica_set(&namespace, &name)
                    }
                    Work::ReplicaSets(namespace) => {
                        for name in self.names_in(REPLICA_SETS, &namespace) {
                            self.reconcile_replica_set(&namespace, &name);
                        }
                    }
                    Work::Deployment(namespace, name) => {
                        self.reconcile_deployment(&namespace, &name)
                    }
                    Work::Deployments(namespace) => {
                        for name in self.names_in(DEPLOYMENTS, &namespace) {
                            self.reconcile_deployment(&namespace, &name);
                        }
                    }
                    Work::RootCa(namespace) => self.reconcile_root_ca(&namespace),
                    Work::Endpoints(namespace, name) => self.reconcile_endpoints(&namespace, &name),
                    Work::PodEndpoints(namespace, name) => {
                        self.reconcile_pod_endpoints(&namespace, &name)
                    }
                    Work::Aggregation => self.reconcile_aggregation(),
                }
            }
        }
        self.settling = false;
    }

    /// The names of the objects of kind `pair` in `namespace`.
    fn names_in(&self, pair: (&str, &str), namespace: &str) -> Vec<String> {
        self.list(&gr(pair), Some(namespace), None)
            .map(|(key, _)| key.1.clone())
            .collect()
    }

    fn info(&self, pair: (&str, &str)) -> Option<ResourceInfo> {
        self.registry.lookup(pair.0, "v1", pair.1).cloned()
    }

    /// An object that is not being deleted.
    fn live(&self, pair: (&str, &str), namespace: &str, name: &str) -> Option<Value> {
        self.get(&gr(pair), namespace, name)
            .filter(|o| !is_deleting(o))
            .cloned()
    }

    /// The objects of a kind that `owner` controls and that are not being deleted.
    fn controlled(&self, owner: &Value, pair: (&str, &str)) -> Vec<Value> {
        let uid = meta_str(owner, "uid");
        let kind = gr(pair);
        self.dependents
            .of(uid)
            .into_iter()
            .filter(|(resource, _)| resource == &kind)
            .filter_map(|(resource, (namespace, name))| self.get(&resource, &namespace, &name))
            .filter(|o| controller_uid(o) == Some(uid) && !is_deleting(o))
            .cloned()
            .collect()
    }

    /// The scheduler binds a pending Pod to the Node, and the kubelet starts it.
    fn run_pod(&mut self, namespace: &str, name: &str) {
        let Some(pod) = self.live(PODS, namespace, name) else {
            return;
        };
        if pod.pointer("/status/phase").and_then(Value::as_str) != Some("Pending") {
            return;
        }
        let Some(node) = self
            .list(&gr(("", "nodes")), None, None)
            .next()
            .map(|(_, n)| n.clone())
        else {
            return;
        };
        let node_name = meta_str(&node, "name").to_string();
        let node_ip = node
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP"))
            .and_then(|a| a["address"].as_str())
            .unwrap_or("127.0.0.1")
            .to_string();
        let pods = gr(PODS);
        let key = (namespace.to_string(), name.to_string());
        let bound = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut pod = pod.clone();
        if bound.is_empty() {
            match placement(&pod, &node) {
                Placement::OtherScheduler => return,
                Placement::Unschedulable(message) => {
                    if pod.pointer("/status/conditions/0/reason") != Some(&json!("Unschedulable")) {
                        pod["status"]["conditions"] = json!([{"type": "PodScheduled",
                            "status": "False", "reason": "Unschedulable", "message": message,
                            "lastProbeTime": null, "lastTransitionTime": now()}]);
                        self.store_as_controller(&pods, &key, pod);
                    }
                    return;
                }
                Placement::Node => {}
            }
            pod["spec"]["nodeName"] = json!(node_name);
            pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True",
                "lastProbeTime": null, "lastTransitionTime": now()}]);
            self.store_as_controller(&pods, &key, pod.clone());
        } else if bound != node_name {
            // Bound to a node this cluster does not have: no kubelet starts it.
            return;
        }
        let ip = self.next_pod_ip();
        pod["status"] = running(&pod, &node_ip, &ip);
        self.store_as_controller(&pods, &key, pod);
    }

    fn next_pod_ip(&mut self) -> String {
        self.pod_ips = self.pod_ips.wrapping_add(1);
        let n = self.pod_ips % 65_000 + 2;
        format!("10.244.{}.{}", n / 256, n % 256)
    }

    /// The root CA publisher puts back what someone changed of a namespace's
    /// `kube-root-ca.crt`: its data is the cluster's CA alone, with its description.
    fn reconcile_root_ca(&mut self, namespace: &str) {
        let key = (namespace.to_string(), ROOT_CA.to_string());
        let Some(current) = self.live(("", "configmaps"), namespace, ROOT_CA) else {
            return;
        };
        let Some((_, wanted)) = super::controllers::namespace_objects(namespace, &self.plane)
            .into_iter()
            .find(|(plural, obj)| *plural == "configmaps" && meta_str(obj, "name") == ROOT_CA)
        else {
            return;
        };
        let described = |obj: &Value| {
            obj.pointer("/metadata/annotations/kubernetes.io~1description")
                .cloned()
        };
        if current.get("data") == wanted.get("data")
            && current.get("binaryData").is_none()
            && described(&current).is_some()
        {
            return;
        }
        let mut next = current.clone();
        next["data"] = wanted["data"].clone();
        if let Some(map) = next.as_object_mut() {
            map.remove("binaryData");
        }
        if described(&next).is_none() {
            if !next["metadata"]["annotations"].is_object() {
                next["metadata"]["annotations"] = json!({});
            }
            next["metadata"]["annotations"]["kubernetes.io/description"] =
                described(&wanted).unwrap_or(Value::Null);
        }
        self.store_as_controller(&gr(("", "configmaps")), &key, next);
    }

    /// A ReplicaSet creates or deletes Pods until it has `spec.replicas`, and reports them.
    fn reconcile_replica_set(&mut self, namespace: &str, name: &str) {
        let (Some(rs_info), Some(pod_info)) = (self.info(REPLICA_SETS), self.info(PODS)) else {
            return;
        };
        let Some(rs) = self.live(REPLICA_SETS, namespace, name) else {
            return;
        };
        let controller = Owner::Update(MANAGER.into());
        self.claim_pods(&rs, &pod_info, &controller);
        let mut pods = self.controlled(&rs, PODS);
        let wanted = usize::try_from(replicas(&rs)).unwrap_or(0);
        let mut refused = None;
        for _ in pods.len()..wanted {
            if let Err(e) = self.create(&pod_info, namespace, pod_of(&rs), &controller) {
                refused = Some(e.message);
                break;
            }
        }
        if pods.len() > wanted {
            // Pods not ready go first, then the newest.
            pods.sort_by_key(|p| {
                (
                    is_ready(p),
                    std::cmp::Reverse(meta_str(p, "creationTimestamp").to_string()),
                    std::cmp::Reverse(meta_str(p, "name").to_string()),
                )
            });
            for pod in &pods[..pods.len() - wanted] {
                self.delete_object(&gr(PODS), namespace, meta_str(pod, "name"), None, None);
            }
        }
        let Some(rs) = self.live(REPLICA_SETS, namespace, name) else {
            return;
        };
        let pods = self.controlled(&rs, PODS);
        let status = replica_set_status(&rs, &pods.iter().collect::<Vec<_>>(), refused.as_deref());
        if rs.get("status") != Some(&status) {
            let _ = self.update(
                &rs_info,
                namespace,
                name,
                json!({"status": status}),
                Subresource::Status,
                &controller,
            );
        }
    }

    /// The ReplicaSet lets go of the Pods it controls and no longer selects, and adopts the
    /// orphans of its namespace it selects ([`claim`]).
    fn claim_pods(&mut self, rs: &Value, pod_info: &ResourceInfo, controller: &Owner) {
        self.claim_dependents(rs, PODS, pod_info, controller);
    }

    /// `owner` (a ReplicaSet, or a Deployment) releases the objects of kind `pair` it controls
    /// and no longer selects, and adopts the orphans of its namespace it selects ([`claim`]).
    fn claim_dependents(
        &mut self,
        owner: &Value,
        pair: (&str, &str),
        info: &ResourceInfo,
        controller: &Owner,
    ) {
        let Some(selector) = selector_of(owner) else {
            return;
        };
        let namespace = meta_str(owner, "namespace");
        let uid = meta_str(owner, "uid").to_string();
        let claims: Vec<(Claim, Value)> = self
            .list(&gr(pair), Some(namespace), None)
            .filter_map(|(_, child)| match claim(owner, &selector, child) {
                Claim::Keep | Claim::Ignore => None,
                claimed => Some((claimed, child.clone())),
            })
            .collect();
        for (claimed, mut child) in claims {
            let name = meta_str(&child, "name").to_string();
            let refs = child["metadata"]
                .as_object_mut()
                .map(|m| m.entry("ownerReferences").or_insert_with(|| json!([])));
            let Some(refs) = refs.and_then(Value::as_array_mut) else {
                continue;
            };
            match claimed {
                Claim::Release => refs.retain(|r| r.get("uid") != Some(&json!(uid))),
                _ => refs.extend(
                    controller_ref(owner)
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                ),
            }
            if refs.is_empty() {
                if let Some(meta) = child["metadata"].as_object_mut() {
                    meta.remove("ownerReferences");
                }
            }
            let _ = self.update(info, namespace, &name, child, Subresource::Main, controller);
        }
    }

    /// A Deployment runs its template on one ReplicaSet and scales the others to zero.
    fn reconcile_deployment(&mut self, namespace: &str, name: &str) {
        let (Some(d_info), Some(rs_info)) = (self.info(DEPLOYMENTS), self.info(REPLICA_SETS))
        else {
            return;
        };
        let Some(deployment) = self.live(DEPLOYMENTS, namespace, name) else {
            return;
        };
        let controller = Owner::Update(MANAGER.into());
        self.claim_dependents(&deployment, REPLICA_SETS, &rs_info, &controller);
        let hash = template_hash(deployment.pointer("/spec/template").unwrap_or(&Value::Null));
        let is_current = |rs: &Value| {
            rs.pointer("/metadata/labels")
                .and_then(|l| l.get(TEMPLATE_HASH))
                .and_then(Value::as_str)
                == Some(hash.as_str())
        };
        let paused = deployment.pointer("/spec/paused") == Some(&json!(true));
        let sets = self.controlled(&deployment, REPLICA_SETS);
        let newest = sets.iter().map(revision).max().unwrap_or(0);
        if !paused {
            let wanted = replicas(&deployment);
            match sets.iter().find(|rs| is_current(rs)) {
                None => {
                    let rs = new_replica_set(&deployment, &hash, newest + 1);
                    let _ = self.create(&rs_info, namespace, rs, &controller);
                }
                Some(rs) => {
                    let mut changed = rs.clone();
                    if replicas(rs) != wanted {
                        changed["spec"]["replicas"] = json!(wanted);
                        set_in(
                            &mut changed,
                            &["metadata", "annotations"],
                            "deployment.kubernetes.io/desired-replicas",
                            json!(wanted.to_string()),
                        );
                    }
                    if revision(rs) < newest {
                        set_in(
                            &mut changed,
                            &["metadata", "annotations"],
                            REVISION,
                            json!((newest + 1).to_string()),
                        );
                    }
                    if &changed != rs {
                        let rs_name = meta_str(rs, "name").to_string();
                        let _ = self.update(
                            &rs_info,
                            namespace,
                            &rs_name,
                            changed,
                            Subresource::Main,
                            &controller,
                        );
                    }
                }
            }
            for old in sets
                .iter()
                .filter(|rs| !is_current(rs) && replicas(rs) != 0)
            {
                let mut scaled = old.clone();
                scaled["spec"]["replicas"] = json!(0);
                let old_name = meta_str(old, "name").to_string();
                let _ = self.update(
                    &rs_info,
                    namespace,
                    &old_name,
                    scaled,
                    Subresource::Main,
                    &controller,
                );
            }
            let limit = deployment
                .pointer("/spec/revisionHistoryLimit")
                .and_then(Value::as_u64)
                .unwrap_or(10) as usize;
            let mut idle: Vec<Value> = self
                .controlled(&deployment, REPLICA_SETS)
                .into_iter()
                .filter(|rs| {
                    !is_current(rs) && replicas(rs) == 0 && status_count(rs, "replicas") == 0
                })
                .collect();
            idle.sort_by_key(revision);
            let extra = idle.len().saturating_sub(limit);
            for rs in &idle[..extra] {
                self.delete_object(
                    &gr(REPLICA_SETS),
                    namespace,
                    meta_str(rs, "name"),
                    None,
                    None,
                );
            }
        }
        let sets = self.controlled(&deployment, REPLICA_SETS);
        let current = sets.iter().find(|rs| is_current(rs));
        if let Some(current) = current {
            let wanted = revision(current).to_string();
            let has = deployment
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(REVISION))
                .and_then(Value::as_str);
            if has != Some(wanted.as_str()) {
                let mut annotated = deployment.clone();
                set_in(
                    &mut annotated,
                    &["metadata", "annotations"],
                    REVISION,
                    json!(wanted),
                );
                let _ = self.update(
                    &d_info,
                    namespace,
                    name,
                    annotated,
                    Subresource::Main,
                    &controller,
                );
            }
        }
        let Some(deployment) = self.live(DEPLOYMENTS, namespace, name) else {
            return;
        };
        let status = deployment_status(&deployment, &sets.iter().collect::<Vec<_>>(), current);
        if deployment.get("status") != Some(&status) {
            let _ = self.update(
                &d_info,
                namespace,
                name,
                json!({"status": status}),
                Subresource::Status,
                &controller,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "uid": "d-1", "generation": 2},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "strategy": {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
    }

    #[test]
    fn a_template_hash_is_stable_safe_and_changes_with_the_template() {
        let a = json!({"metadata": {"labels": {"app": "web", "tier": "x"}}, "spec": {}});
        let b = json!({"spec": {}, "metadata": {"creationTimestamp": null,
                                                 "labels": {"tier": "x", "app": "web"}}});
        assert_eq!(template_hash(&a), template_hash(&b));
        assert!(template_hash(&a)
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        let c = json!({"metadata": {"labels": {"app": "web", "tier": "y"}}, "spec": {}});
        assert_ne!(template_hash(&a), template_hash(&c));
    }

    #[test]
    fn a_new_replica_set_selects_its_template_by_hash_and_is_controlled_by_its_deployment() {
        let rs = new_replica_set(&deployment(4), "abc12", 3);
        assert_eq!(rs["metadata"]["name"], "web-abc12");
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"],
            json!({"app": "web", "pod-template-hash": "abc12"})
        );
        assert_eq!(
            rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
            "abc12"
        );
        assert_eq!(rs["metadata"]["annotations"][REVISION], "3");
        assert_eq!(
            rs["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"],
            "5"
        );
        assert_eq!(controller_uid(&rs), Some("d-1"));
        let pod = pod_of(&json!({"metadata": {"name": "web-abc12", "uid": "r-1"},
                                 "apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "spec": rs["spec"].clone()}));
        assert_eq!(pod["metadata"]["generateName"], "web-abc12-");
        assert_eq!(controller_uid(&pod), Some("r-1"));
        assert_eq!(pod["spec"]["containers"][0]["image"], "nginx");
    }

    #[test]
    fn a_deployment_is_available_within_its_max_unavailable() {
        let d = deployment(4);
        let rs = |ready: i64| json!({"status": {"replicas": 4, "readyReplicas": ready, "availableReplicas": ready}});
        let (three, two) = (rs(3), rs(2));
        let status = deployment_status(&d, &[&three], Some(&three));
        assert_eq!(status["conditions"][0]["status"], "True", "{status}");
        assert_eq!(status["conditions"][1]["reason"], "ReplicaSetUpdated");
        assert_eq!(status["unavailableReplicas"], 1);
        let status = deployment_status(&d, &[&two], Some(&two));
        assert_eq!(status["conditions"][0]["status"], "False", "{status}");
        let all = rs(4);
        let status = deployment_status(&d, &[&all], Some(&all));
        assert_eq!(status["conditions"][1]["reason"], "NewReplicaSetAvailable");
        assert_eq!(status["availableReplicas"], 4);
        assert_eq!(status["observedGeneration"], 2);
        assert!(status.get("unavailableReplicas").is_none());
    }

    #[test]
    fn the_scheduler_places_its_own_pods_where_their_node_selector_fits() {
        let node = json!({"metadata": {"labels": {"kubernetes.io/os": "linux"}}});
        let pod = |spec: Value| json!({"spec": spec});
        assert_eq!(placement(&pod(json!({})), &node), Placement::Node);
        assert_eq!(
            placement(
                &pod(json!({"nodeSelector": {"kubernetes.io/os": "linux"}})),
                &node
            ),
            Placement::Node
        );
        assert!(matches!(
            placement(&pod(json!({"nodeSelector": {"disk": "ssd"}})), &node),
            Placement::Unschedulable(_)
        ));
        assert_eq!(
            placement(&pod(json!({"schedulerName": "custom"})), &node),
            Placement::OtherScheduler
        );
    }

    #[test]
    fn a_change_gives_the_controllers_its_object_and_its_controller_to_look_at() {
        let pod = json!({"metadata": {"name": "web-1-x", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "r", "controller": true}]}});
        let pods: GroupResource = ("".into(), "pods".into());
        assert_eq!(
            work_for(&pods, &pod),
            vec![
                Work::Pod("ns".into(), "web-1-x".into()),
                Work::ReplicaSet("ns".into(), "web-1".into())
            ]
        );
        let rs = json!({"metadata": {"name": "web-1", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d", "controller": true}]}});
        let sets: GroupResource = ("apps".into(), "replicasets".into());
        assert_eq!(
            work_for(&sets, &rs)[1],
            Work::Deployment("ns".into(), "web".into())
        );
        let accounts: GroupResource = ("".into(), "serviceaccounts".into());
        let sa = json!({"metadata": {"name": "robot", "namespace": "ns"}});
        assert_eq!(
            work_for(&accounts, &sa),
            vec![Work::ReplicaSets("ns".into())]
        );
        let services: GroupResource = ("".into(), "services".into());
        assert!(work_for(&services, &sa).is_empty());
        // An orphan Pod may be adopted by any ReplicaSet of its namespace.
        let orphan = json!({"metadata": {"name": "stray", "namespace": "ns"}});
        assert_eq!(
            work_for(&pods, &orphan),
            vec![
                Work::Pod("ns".into(), "stray".into()),
                Work::ReplicaSets("ns".into())
            ]
        );
    }

    #[test]
    fn a_replica_set_keeps_releases_and_adopts_pods_by_its_selector_and_controller_reference() {
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "r"},
            "spec": {"selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}}});
        let selector = selector_of(&rs).expect("a selector");
        let pod = |labels: Value, controller: Option<&str>| {
            let mut pod = json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}});
            if let Some(uid) = controller {
                pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                    "kind": "ReplicaSet", "name": "x", "uid": uid, "controller": true}]);
            }
            pod
        };
        let web = json!({"app": "web"});
        assert_eq!(
            claim(&rs, &selector, &pod(web.clone(), Some("r"))),
            Claim::Keep
        );
        assert_eq!(
            claim(
                &rs,
                &selector,
                &pod(json!({"app": "web", "tier": "db"}), Some("r"))
            ),
            Claim::Release
        );
        assert_eq!(claim(&rs, &selector, &pod(web.clone(), None)), Claim::Adopt);
        assert_eq!(
            claim(&rs, &selector, &pod(web.clone(), Some("other"))),
            Claim::Ignore
        );
        assert_eq!(
            claim(&rs, &selector, &pod(json!({"app": "db"}), None)),
            Claim::Ignore
        );
        let mut leaving = pod(web.clone(), None);
        leaving["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z");
        assert_eq!(claim(&rs, &selector, &leaving), Claim::Ignore);
        // A ReplicaSet being deleted lets go of nothing and takes nothing.
        let mut deleted = rs.clone();
        deleted["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z");
        assert_eq!(
            claim(
                &deleted,
                &selector,
                &pod(json!({"app": "other"}), Some("r"))
            ),
            Claim::Ignore
        );
        assert_eq!(claim(&deleted, &selector, &pod(web, None)), Claim::Ignore);
    }

    #[test]
    fn a_running_pod_is_ready_with_its_containers_started() {
        let pod = json!({"metadata": {"name": "p", "uid": "u"}, "status": {"qosClass": "BestEffort"},
                         "spec": {"initContainers": [{"name": "init", "image": "busybox"}],
                                  "containers": [{"name": "c", "image": "nginx"}]}});
        let status = running(&pod, "10.0.0.1", "10.244.0.7");
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["podIP"], "10.244.0.7");
        assert_eq!(status["containerStatuses"][0]["ready"], true);
        assert_eq!(status["containerStatuses"][0]["started"], true);
        assert_eq!(
            status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(status["qosClass"], "BestEffort");
        let id = status["containerStatuses"][0]["containerID"]
            .as_str()
            .unwrap_or("");
        assert_eq!(id.len(), "containerd://".len() + 64, "{id}");
        assert!(is_ready(&json!({"status": status})));
    }
}
