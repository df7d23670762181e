//! One simulated cluster: its resource registry, its objects (JSON values keyed by group, resource,
//! namespace and name), its resourceVersion counter, its bounded watch history, a change feed per
//! resource and the credentials it accepts. It starts as a new cluster does: four namespaces with
//! their default ServiceAccount and root CA, the `kubernetes` Service, one ready Node and the
//! bootstrap RBAC policy (`controllers`). Writes run the garbage collector (`gc`) and the
//! workload controllers (`rollout`) before they return. Pure state behind one mutex; HTTP
//! concerns live in `api`.

mod aggregation;
mod controllers;
mod crd_cleanup;
mod defaults;
mod endpoints;
mod gc;
mod node_ports;
mod rollout;
mod service_ips;
mod validate;
mod workloads;
mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::broadcast;

use crate::faults::Faults;
use crate::resources::{GroupResource, Registry};

pub use controllers::ControlPlane;
pub use gc::{delete_answer, delete_options, DeleteOptions};
pub use validate::check_type;
pub(crate) use write::{is_crd, no_resource_version_on_create};
pub use write::{Owner, Subresource};

/// The kind of change a watch event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One committed change, kept in the history and broadcast to open watches.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub gr: GroupResource,
    pub kind: ChangeKind,
    pub object: Arc<Value>,
    /// The object before a `Modified` change, so filtered watches can tell objects leaving their filter.
    pub previous: Option<Arc<Value>>,
    /// The object as JSON by the version it was presented in and the schema that defaulted
    /// it, so watches that present it alike share one encoding (`Change::encoded`).
    encoded: Mutex<Vec<Encoded>>,
}

/// One presentation of a change's object: its version, the schema that defaulted it (kept, so
/// that a changed CRD's schema never matches an older encoding), and the JSON.
type Encoded = (String, Option<Arc<Value>>, axum::body::Bytes);

impl Change {
    /// The object encoded as presented in `version` with `schema`: `encode`'s answer, computed
    /// once for every watch that presents this change alike (a failure is not kept).
    pub fn encoded<E>(
        &self,
        version: &str,
        schema: Option<&Arc<Value>>,
        encode: impl FnOnce(&Value) -> Result<axum::body::Bytes, E>,
    ) -> Result<axum::body::Bytes, E> {
        let same_schema = |kept: &Option<Arc<Value>>| match (kept, schema) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        let mut encoded = self.encoded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, bytes)) = encoded
            .iter()
            .find(|(v, s, _)| v == version && same_schema(s))
        {
            return Ok(bytes.clone());
        }
        let bytes = encode(&self.object)?;
        encoded.push((version.to_string(), schema.cloned(), bytes.clone()));
        Ok(bytes)
    }
}

/// Retained changes to replay plus a receiver for later ones.
pub type WatchStart = (Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>);

/// Namespace and name; the namespace is empty for cluster-scoped objects.
pub type ObjectKey = (String, String);

/// A cluster: mutable state (with its change feeds) and its fault settings.
pub struct Cluster {
    pub name: String,
    state: Mutex<State>,
    pub faults: Faults,
    pub audit: crate::audit::Audit,
    /// The credentials this cluster accepts.
    pub tokens: crate::auth::Tokens,
    /// Where the Services named by conversion webhooks are reached (`Config::webhook_services`).
    pub webhook_services: crate::conversion::ServiceUrls,
}

/// Everything stored for one cluster.
pub struct State {
    rv: u64,
    pub registry: Registry,
    /// Stored objects; the history shares them (`Arc`) instead of copying.
    objects: HashMap<GroupResource, BTreeMap<ObjectKey, Arc<Value>>>,
    history: VecDeque<Arc<Change>>,
    /// Highest resourceVersion whose change has been dropped from the history.
    compacted: u64,
    history_cap: usize,
    /// One change feed per resource, so a change wakes only the watches of its kind.
    feeds: HashMap<GroupResource, broadcast::Sender<Arc<Change>>>,
    /// The resourceVersion of the latest change sent to the feeds (stored after the send), so
    /// watches tell how far the cluster has moved without hearing other kinds' changes.
    latest: Arc<AtomicU64>,
    /// Set while a dry run executes: changes are neither recorded nor broadcast.
    muted: bool,
    /// The RBAC objects as the authorizer reads them, built on first use after any of them
    /// changed (`State::policy`).
    policy: std::sync::OnceLock<Arc<crate::auth::Policy>>,
    /// The cluster IPs the stored Services hold (`service_ips`).
    pub(crate) service_ips: service_ips::ServiceIps,
    /// The node ports the stored Services hold (`node_ports`).
    pub(crate) node_ports: node_ports::NodePorts,
    /// Which objects name which owner (`gc`).
    dependents: gc::Dependents,
    /// What the workload controllers look at again (`rollout`), whether they are running, and
    /// the last Pod IP handed out.
    unsettled: std::collections::BTreeSet<rollout::Work>,
    settling: bool,
    pod_ips: u32,
    /// What the controllers need of the control plane (`controllers`).
    plane: ControlPlane,
}

impl Cluster {
    pub fn new(name: &str, history_cap: usize, plane: ControlPlane) -> Cluster {
        let mut state = State {
            rv: 0,
            registry: Registry::default(),
            objects: HashMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            history_cap: history_cap.max(1),
            feeds: HashMap::new(),
            latest: Arc::default(),
            muted: false,
            policy: std::sync::OnceLock::new(),
            service_ips: Default::default(),
            node_ports: Default::default(),
            dependents: Default::default(),
            unsettled: Default::default(),
            settling: false,
            pod_ips: 0,
            plane,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let info = state.registry.lookup("", "v1", "namespaces").cloned();
            if let Some(info) = info {
                // The built-in namespaces are valid by construction.
                let _ = state.create(&info, "", obj, &Owner::Update("kube-apiserver".into()));
            }
        }
        let api_service = controllers::api_service(&state.plane);
        state.create_as_controller("default", api_service);
        state.register_node(name);
        for obj in crate::auth::bootstrap_policy() {
            let kind = obj["kind"].as_str().unwrap_or("");
            let info = state
                .registry
                .all()
                .iter()
                .find(|r| r.group == "rbac.authorization.k8s.io" && r.kind == kind)
                .cloned();
            if let Some(info) = info {
                // The bootstrap policy is valid by construction.
                let _ = state.create(&info, "", obj, &Owner::Update("kube-apiserver".into()));
            }
        }
        Cluster {
            name: name.to_string(),
            state: Mutex::new(state),
            faults: Faults::default(),
            audit: crate::audit::Audit::default(),
            tokens: crate::auth::Tokens::default(),
            webhook_services: Default::default(),
        }
    }

    /// The same cluster, reaching conversion webhook Services at `services`.
    pub fn with_webhook_services(mut self, services: crate::conversion::ServiceUrls) -> Cluster {
        self.webhook_services = services;
        self
    }

    /// Locks the state; a poisoned lock is recovered because every mutation leaves the state consistent.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// The latest resourceVersion of this cluster.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, gr: &GroupResource, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(gr)?
            .get(&(namespace.to_string(), name.to_string()))
            .map(|a| a.as_ref())
    }

    fn get_arc(&self, gr: &GroupResource, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(gr)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of one resource in key order, optionally in one namespace, starting after `after`.
    pub fn list<'a>(
        &'a self,
        gr: &GroupResource,
        namespace: Option<&'a str>,
        after: Option<&'a ObjectKey>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Value)> + 'a {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let map = self.objects.get(gr);
        map.into_iter().flat_map(move |m| {
            // Keys sort by namespace first: one namespace's objects are one range.
            let start = match (after, namespace) {
                (Some(k), _) => Excluded(k.clone()),
                (None, Some(ns)) => Included((ns.to_string(), String::new())),
                (None, None) => Unbounded,
            };
            m.range::<ObjectKey, _>((start, Unbounded))
                .skip_while(move |(k, _)| namespace.is_some_and(|ns| k.0.as_str() < ns))
                .take_while(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns))
                .map(|(k, v)| (k, v.as_ref()))
        })
    }

    /// Visits, in key order, the objects of one resource as they were at `rv` (optionally in one
    /// namespace, starting after `after`), until `visit` returns false: the current objects, with
    /// those the retained history shows changed since `rv` taken as they were before. This is
    /// the snapshot a paginated list continues from. `Err(compacted)` when changes after `rv`
    /// have been dropped from the history.
    pub fn visit_at(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
        rv: u64,
        mut visit: impl FnMut(&Value) -> bool,
    ) -> Result<(), u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        // The first change after `rv` of each object tells what it was at `rv`: the history is
        // read from its newest end back to `rv` (nothing for a list of the current state), and
        // an earlier change replaces what a later one said.
        let mut before: BTreeMap<ObjectKey, Option<Arc<Value>>> = BTreeMap::new();
        let since = self.history.iter().rev().take_while(|c| c.rv > rv);
        for change in since.filter(|c| &c.gr == gr) {
            let key = (
                crate::object::meta_str(&change.object, "namespace").to_string(),
                crate::object::meta_str(&change.object, "name").to_string(),
            );
            if namespace.is_some_and(|ns| key.0 != ns) || after.is_some_and(|a| &key <= a) {
                continue;
            }
            let was = match change.kind {
                ChangeKind::Added => None,
                ChangeKind::Modified => change.previous.clone(),
                ChangeKind::Deleted => Some(change.object.clone()),
            };
            before.insert(key, was);
        }
        let mut current = self.list(gr, namespace, after).peekable();
        let mut changed = before.iter().peekable();
        loop {
            let order = match (current.peek(), changed.peek()) {
                (None, None) => return Ok(()),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((now, _)), Some((then, _))) => (*now).cmp(*then),
            };
            // An object changed since `rv` is taken as it was then, not as it is.
            if order == std::cmp::Ordering::Equal {
                current.next();
            }
            let take_changed = order != std::cmp::Ordering::Less;
            let object = if take_changed {
                changed.next().and_then(|(_, was)| was.as_deref())
            } else {
                current.next().map(|(_, object)| object)
            };
            if let Some(object) = object {
                if !visit(object) {
                    return Ok(());
                }
            }
        }
    }

    /// Forgets the history of changes up to now, as etcd's compaction at the current revision
    /// does: a watch from an older version, or a list continued from one, is answered `410 Gone`.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Number of stored objects across all resources.
    pub fn object_count(&self) -> usize {
        self.objects.values().map(BTreeMap::len).sum()
    }

    /// Changes of one resource after `rv`, and a receiver for later ones, taken atomically.
    /// `Err(compacted)` when changes after `rv` have been dropped from the history.
    pub fn watch_from(&mut self, gr: &GroupResource, rv: u64) -> Result<WatchStart, u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        let replay = self
            .history
            .iter()
            .filter(|c| c.rv > rv && &c.gr == gr)
            .cloned()
            .collect();
        Ok((replay, self.subscribe(gr)))
    }

    /// A receiver for changes of one resource committed from now on.
    pub fn subscribe(&mut self, gr: &GroupResource) -> broadcast::Receiver<Arc<Change>> {
        self.feeds
            .entry(gr.clone())
            // A watcher more than this many changes of its resource behind has its stream ended
            // and re-watches from history.
            .or_insert_with(|| broadcast::channel(1024).0)
            .subscribe()
    }

    /// The resourceVersion of the latest change sent to any watch: read without the lock, it
    /// never runs ahead of what a feed's receivers can already see.
    pub fn latest(&self) -> Arc<AtomicU64> {
        self.latest.clone()
    }

    /// Whether the write under way is a dry run's ([`State::dry_run`]).
    pub fn is_dry_run(&self) -> bool {
        self.muted
    }

    /// Runs a write as `?dryRun=All` does: every step (admission, validation, conflicts) as for
    /// a real write, then nothing of it is kept. Objects, registry and resourceVersion are
    /// restored and no watch sees a change.
    pub fn dry_run<T>(&mut self, write: impl FnOnce(&mut State) -> T) -> T {
        let rv = self.rv;
        let objects = self.objects.clone();
        let registry = self.registry.clone();
        let service_ips = self.service_ips.clone();
        let node_ports = self.node_ports.clone();
        let dependents = self.dependents.clone();
        self.muted = true;
        let out = write(self);
        self.muted = false;
        self.rv = rv;
        self.objects = objects;
        self.registry = registry;
        self.service_ips = service_ips;
        self.node_ports = node_ports;
        self.dependents = dependents;
        self.policy = std::sync::OnceLock::new();
        out
    }

    /// Every Role, ClusterRole, RoleBinding and ClusterRoleBinding stored, as the authorizer
    /// reads them; read again only after one of them changed.
    pub fn policy(&self) -> Arc<crate::auth::Policy> {
        self.policy
            .get_or_init(|| Arc::new(crate::auth::read_policy(self)))
            .clone()
    }

    /// Forgets the authorizer's view when an RBAC object changes.
    fn touched(&mut self, gr: &GroupResource) {
        if gr.0 == crate::auth::RBAC_GROUP {
            self.policy = std::sync::OnceLock::new();
        }
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn emit(
        &mut self,
        gr: &GroupResource,
        kind: ChangeKind,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        if self.muted {
            return;
        }
        self.unsettled.extend(rollout::work_for(gr, &object));
        self.unsettled
            .extend(endpoints::work_for(gr, kind, &object));
        self.unsettled.extend(aggregation::work_for(gr));
        let change = Arc::new(Change {
            rv: self.rv,
            gr: gr.clone(),
            kind,
            object,
            previous,
            encoded: Mutex::default(),
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_cap {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        if let Some(feed) = self.feeds.get(gr) {
            // No receiver is not an error: nobody is watching.
            let _ = feed.send(change);
        }
        self.latest.store(self.rv, Ordering::SeqCst);
    }

    fn put(&mut self, gr: &GroupResource, key: ObjectKey, object: Value) -> Arc<Value> {
        self.touched(gr);
        let object = Arc::new(object);
        let replaced = self
            .objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), object.clone());
        self.dependents
            .replace(gr, &key, replaced.as_deref(), Some(&object));
        if service_ips::is_service(gr) {
            if let Some(old) = replaced {
                self.service_ips.release(&old);
                self.node_ports.release(&old);
            }
            self.service_ips.hold(&object);
            self.node_ports.hold(&object);
        }
        object
    }

    /// Takes an object out of the store; the history of changes may still share it.
    fn take(&mut self, gr: &GroupResource, key: &ObjectKey) -> Option<Arc<Value>> {
        self.touched(gr);
        let taken = self.objects.get_mut(gr)?.remove(key)?;
        self.dependents.replace(gr, key, Some(&taken), None);
        if service_ips::is_service(gr) {
            self.service_ips.release(&taken);
            self.node_ports.release(&taken);
        }
        Some(taken)
    }
}
