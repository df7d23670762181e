//! The evaluator's pure stage: holds the configuration, the compiled EventSources, the objects
//! of every watched cluster and the per-(cluster, EventSource) match state; turns inputs (a
//! config update, one object change or a batch of them) into the match sets that changed. No IO,
//! no clock.
//!
//! Incremental by construction: which (cluster, EventSource) pairs are deployed, and which of
//! them watch a (cluster, group, kind), is computed when the configuration changes, not per
//! object change. An object change evaluates the object once per EventSource watching its kind
//! and marks a pair dirty only when its match set can differ (the object joined or left it, an
//! evaluation error appeared or went away, or a matching object changed while the set carries
//! object contents); only dirty pairs are rebuilt, and a rebuilt set is published only when its
//! content differs from the last one published.

#[cfg(test)]
mod tests;

mod encoded;
mod keys;
mod match_state;

pub use encoded::{ContentHash, EncodedSet};

use encoded::{content_hash_of, encode_ref};
use keys::Two;
use match_state::{object_ref, to_json, update_key, KeyState, Outcome};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde_json::Value;
use sluice_domain::cluster::ClusterId;
use sluice_domain::config::ConfigState;
use sluice_eval::{CompiledEventSource, Tape};
use sluice_proto::v1 as pb;
use sluice_wire::ConfigUpdate;

/// (cluster, EventSource name).
pub type MatchKey = (ClusterId, String);
/// (group, kind) of objects.
type GroupKind = (String, String);
/// (namespace, name).
type ObjectKey = (String, String);
/// Objects of one cluster by kind, parsed once and shared with the match states. Hashed, not
/// ordered: an object is looked up for every change, and nothing reads them in order (a
/// rebuilt match set orders itself).
type ClusterObjects = FxHashMap<GroupKind, FxHashMap<ObjectKey, Arc<Tape>>>;

/// A change with its stream sequence and its object parsed (`None`: deleted or unreadable).
pub struct Parsed {
    change: pb::ResourceChange,
    sequence: u64,
    object: Option<Arc<Tape>>,
    /// The change's cluster, its strings taken from the change (`None`: invalid, ignored).
    cluster: Option<ClusterId>,
}

impl Parsed {
    /// Parses the change's object; its JSON text moves into the parsed document.
    pub fn new(mut change: pb::ResourceChange, sequence: u64) -> Parsed {
        let object = parse(change.deleted, std::mem::take(&mut change.object_json));
        let cluster = sluice_wire::into_cluster_id(change.cluster.take(), "change").ok();
        Parsed {
            change,
            sequence,
            object,
            cluster,
        }
    }
}

/// A change parsed and evaluated, ready for the bookkeeping.
#[derive(Default)]
struct Prepared<'c> {
    /// `None` when the change names no valid cluster (it is then ignored).
    cluster: Option<&'c ClusterId>,
    object: Option<Arc<Tape>>,
    /// (pair index, selector position, whether contents matter, outcome) for every pair
    /// watching the object's kind.
    outcomes: Vec<(usize, usize, bool, Outcome)>,
}

/// A pair watching a (cluster, group, kind) with one of its selectors, and what evaluates the
/// kind's objects for it: a change reaches its EventSource without a search by name.
struct Watcher {
    /// Index into `Evaluator::pairs`.
    index: usize,
    /// Selector position.
    position: usize,
    es: Arc<CompiledEventSource>,
    /// As [`Compiled::content_matters`].
    content_matters: bool,
}

/// A change as the stage takes it in: with its stream sequence, its object parsed (`None`:
/// deleted or unreadable) and its cluster (`None`: invalid, ignored).
struct Input<'c> {
    change: &'c pb::ResourceChange,
    sequence: u64,
    object: Option<Arc<Tape>>,
    cluster: Option<&'c ClusterId>,
}

/// A deployed (cluster, EventSource) pair and its state.
struct Pair {
    key: MatchKey,
    state: KeyState,
    /// Content hash of the last match set published for it.
    published: Option<ContentHash>,
}

/// A compiled EventSource and what it watches.
struct Compiled {
    es: Arc<CompiledEventSource>,
    /// (group, kind) of each selector, deduplicated, in selector order.
    group_kinds: Vec<GroupKind>,
    /// Whether the published set carries more than object identities (contents or an
    /// aggregation over them), so that a matching object's new content changes it.
    content_matters: bool,
}

/// The evaluator's state machine.
#[derive(Default)]
pub struct Evaluator {
    config: ConfigState,
    compiled: BTreeMap<String, Result<Compiled, String>>,
    objects: FxHashMap<ClusterId, ClusterObjects>,
    /// Deployed (cluster, EventSource) pairs whose EventSource exists, from the configuration,
    /// in key order, with their match state.
    pairs: Vec<Pair>,
    /// Index into `pairs` by key.
    deployed: BTreeMap<MatchKey, usize>,
    /// Content hash of the last match set published, for keys not deployed (deployed pairs
    /// keep theirs in `pairs`): what a restart finds on the MATCH stream, or what is left of a
    /// pair that is no longer deployed until it is withdrawn.
    published: BTreeMap<MatchKey, ContentHash>,
    /// Per (cluster, group, kind): the pairs watching it. Rebuilt with the pairs, after every
    /// compilation.
    watchers: FxHashMap<ClusterId, FxHashMap<GroupKind, Vec<Watcher>>>,
    /// Pairs changed by absorbed changes, not yet emitted, with the last change's sequence.
    pending: BTreeMap<usize, u64>,
}

impl Evaluator {
    pub fn new(config: ConfigState) -> Evaluator {
        let mut evaluator = Evaluator {
            config,
            ..Default::default()
        };
        let names: Vec<String> = evaluator.config.event_sources.keys().cloned().collect();
        for name in names {
            evaluator.compile(&name);
        }
        evaluator.refresh_deployments();
        evaluator
    }

    /// Remembers what is already published (the MATCH stream), so a restart republishes only
    /// what differs.
    pub fn remember_published(&mut self, set: &pb::MatchSet) {
        if let Ok(cluster) = sluice_wire::cluster_id(set.cluster.as_ref(), "match stream") {
            let key = (cluster, set.event_source.clone());
            let hash = (!set.removed).then(|| content_hash_of(set));
            match (self.deployed.get(&key), hash) {
                (Some(&index), hash) => self.pairs[index].published = hash,
                (None, Some(hash)) => {
                    self.published.insert(key, hash);
                }
                (None, None) => {
                    self.published.remove(&key);
                }
            }
        }
    }

    /// Loads one object without evaluating (startup replay).
    pub fn load_object(&mut self, change: &pb::ResourceChange) {
        let Ok(cluster) = sluice_wire::cluster_id(change.cluster.as_ref(), "change stream") else {
            return;
        };
        self.store(
            &cluster,
            change,
            parse(change.deleted, change.object_json.clone()),
        );
    }

    /// Evaluates every deployed (cluster, EventSource) from scratch; returns what changed.
    pub fn recompute_all(&mut self, sequence: u64) -> Vec<EncodedSet> {
        // Every pair is rebuilt and emitted below: nothing stays pending.
        self.pending.clear();
        let mut out = self.withdraw_undeployed(sequence);
        for index in 0..self.pairs.len() {
            self.rebuild_pair(index);
            out.extend(self.emit(index, sequence));
        }
        out
    }

    /// Applies a configuration update; returns the match sets it changed.
    pub fn on_config(&mut self, update: &ConfigUpdate) -> Vec<EncodedSet> {
        // Pending sets are indexed by pair, and a configuration change renumbers the pairs.
        let mut out = self.flush();
        if !update.apply_to(&mut self.config) {
            return out;
        }
        let es_changed = update.kind == "EventSource";
        if es_changed {
            self.compile(&update.name);
        }
        let new_pairs = self.refresh_deployments();
        out.extend(self.withdraw_undeployed(update.sequence));
        for index in 0..self.pairs.len() {
            let key = &self.pairs[index].key;
            if new_pairs.contains(key) || (es_changed && key.1 == update.name) {
                self.rebuild_pair(index);
                out.extend(self.emit(index, update.sequence));
            }
        }
        out
    }

    /// Applies one object change in a managed cluster; returns the match sets it changed.
    pub fn on_change(&mut self, change: &pb::ResourceChange, sequence: u64) -> Vec<EncodedSet> {
        let mut dirty = std::mem::take(&mut self.pending);
        self.apply_change(change, sequence, &mut dirty);
        self.emit_dirty(dirty)
    }

    /// Applies a batch of object changes (with their stream sequences, in stream order) and
    /// returns the match sets they changed: one per changed (cluster, EventSource), however
    /// many changes of the batch touched it, carrying the sequence of the last of them.
    pub fn on_changes(&mut self, changes: &[(pb::ResourceChange, u64)]) -> Vec<EncodedSet> {
        let clusters: Vec<Option<ClusterId>> = changes
            .iter()
            .map(|(change, _)| cluster_of(change))
            .collect();
        self.absorb_batch(
            changes
                .iter()
                .zip(&clusters)
                .map(|((change, sequence), cluster)| Input {
                    change,
                    sequence: *sequence,
                    object: parse(change.deleted, change.object_json.clone()),
                    cluster: cluster.as_ref(),
                })
                .collect(),
        );
        self.flush()
    }

    /// As [`Evaluator::on_changes`], for changes whose objects were parsed already (the
    /// service parses a batch on another thread while the stage evaluates the previous one).
    pub fn on_parsed(&mut self, changes: &[Parsed]) -> Vec<EncodedSet> {
        self.absorb(changes);
        self.flush()
    }

    /// Applies parsed changes without publishing: the sets they change are published by the
    /// next [`Evaluator::flush`] (or any other call that returns sets), once each however many
    /// absorbed batches changed them. A service behind on its input absorbs what is waiting
    /// and flushes once.
    pub fn absorb(&mut self, changes: &[Parsed]) {
        self.absorb_batch(
            changes
                .iter()
                .map(|p| Input {
                    change: &p.change,
                    sequence: p.sequence,
                    object: p.object.clone(),
                    cluster: p.cluster.as_ref(),
                })
                .collect(),
        );
    }

    /// The sets absorbed changes changed since the last flush, each with the sequence of the
    /// last change that touched it.
    pub fn flush(&mut self) -> Vec<EncodedSet> {
        let pending = std::mem::take(&mut self.pending);
        self.emit_dirty(pending)
    }

    /// Evaluates a batch and records the pairs it changed as pending.
    fn absorb_batch(&mut self, changes: Vec<Input<'_>>) {
        // Evaluating (`prepare`) only reads the stage, so a batch could be evaluated on several
        // threads; measured on the shared 2-core machine under load that was slower (45k vs
        // 78k changes/s), so it is not done.
        let mut prepared = Vec::with_capacity(changes.len());
        for input in &changes {
            prepared.push(self.prepare(input.change, input.cluster, input.object.clone()));
        }
        let mut pending = std::mem::take(&mut self.pending);
        for (input, prepared) in changes.into_iter().zip(prepared) {
            self.apply_prepared(input.change, input.sequence, prepared, &mut pending);
        }
        self.pending = pending;
    }

    /// Number of deployed (cluster, EventSource) pairs.
    pub fn deployed_len(&self) -> usize {
        self.pairs.len()
    }

    /// Evaluates one change for every pair watching its kind; records the dirty pairs (by
    /// index) with the sequence of the change.
    fn apply_change(
        &mut self,
        change: &pb::ResourceChange,
        sequence: u64,
        dirty: &mut BTreeMap<usize, u64>,
    ) {
        let cluster = cluster_of(change);
        let object = parse(change.deleted, change.object_json.clone());
        let prepared = self.prepare(change, cluster.as_ref(), object);
        self.apply_prepared(change, sequence, prepared, dirty);
    }

    /// The pure part of a change: its cluster, its object, and the verdict of every pair
    /// watching its kind.
    fn prepare<'c>(
        &self,
        change: &pb::ResourceChange,
        cluster: Option<&'c ClusterId>,
        object: Option<Arc<Tape>>,
    ) -> Prepared<'c> {
        let Some(cluster) = cluster else {
            return Prepared::default();
        };
        let group_kind: &dyn Two = &(group_str(&change.api_version), change.kind.as_str());
        let mut outcomes = Vec::new();
        for watcher in self
            .watchers
            .get(cluster)
            .and_then(|kinds| kinds.get(group_kind))
            .into_iter()
            .flatten()
        {
            let outcome = match &object {
                None => Outcome::Absent,
                Some(object) => match watcher.es.evaluate(object) {
                    Ok(verdict) if verdict.matching => Outcome::Matching,
                    Ok(_) => Outcome::NotMatching,
                    Err(error) => Outcome::Failed(error.to_string()),
                },
            };
            outcomes.push((
                watcher.index,
                watcher.position,
                watcher.content_matters,
                outcome,
            ));
        }
        Prepared {
            cluster: Some(cluster),
            object,
            outcomes,
        }
    }

    /// The bookkeeping part of a change, in stream order.
    fn apply_prepared(
        &mut self,
        change: &pb::ResourceChange,
        sequence: u64,
        prepared: Prepared<'_>,
        dirty: &mut BTreeMap<usize, u64>,
    ) {
        let Some(cluster) = prepared.cluster else {
            return;
        };
        self.store(cluster, change, prepared.object.clone());
        for (index, position, content_matters, outcome) in prepared.outcomes {
            let state = &mut self.pairs[index].state;
            let object = prepared.object.as_ref();
            if update_key(state, content_matters, position, change, object, outcome) {
                dirty.insert(index, sequence);
            }
        }
    }

    fn emit_dirty(&mut self, dirty: BTreeMap<usize, u64>) -> Vec<EncodedSet> {
        dirty
            .into_iter()
            .filter_map(|(index, sequence)| self.emit(index, sequence))
            .collect()
    }

    /// Records an object's new state (`None`: deleted or unreadable) in the cluster's store.
    fn store(
        &mut self,
        cluster: &ClusterId,
        change: &pb::ResourceChange,
        object: Option<Arc<Tape>>,
    ) {
        let kinds = match self.objects.get_mut(cluster) {
            Some(kinds) => kinds,
            None => self.objects.entry(cluster.clone()).or_default(),
        };
        let group_kind: &dyn Two = &(group_str(&change.api_version), change.kind.as_str());
        let bucket = match kinds.get_mut(group_kind) {
            Some(bucket) => bucket,
            None => kinds
                .entry((group_of(&change.api_version), change.kind.clone()))
                .or_default(),
        };
        let key: &dyn Two = &(change.namespace.as_str(), change.name.as_str());
        match (object, bucket.get_mut(key)) {
            (Some(object), Some(stored)) => *stored = object,
            (Some(object), None) => {
                bucket.insert((change.namespace.clone(), change.name.clone()), object);
            }
            (None, _) => {
                bucket.remove(key);
            }
        }
    }

    fn compile(&mut self, name: &str) {
        let compiled = match self.config.event_sources.get(name) {
            None => None,
            Some(Err(error)) => Some(Err(format!("eventsource {name}: {error}"))),
            Some(Ok(es)) => Some(
                CompiledEventSource::compile(es)
                    .map(|es| {
                        let mut group_kinds = Vec::new();
                        for gvk in es.gvks() {
                            let group_kind = (gvk.group, gvk.kind);
                            if !group_kinds.contains(&group_kind) {
                                group_kinds.push(group_kind);
                            }
                        }
                        Compiled {
                            content_matters: es.collect_resources() || es.has_aggregation(),
                            es: Arc::new(es),
                            group_kinds,
                        }
                    })
                    .map_err(|e| sluice_runtime::error_chain(&e)),
            ),
        };
        match compiled {
            Some(c) => {
                self.compiled.insert(name.to_string(), c);
            }
            None => {
                self.compiled.remove(name);
            }
        }
    }

    /// Recomputes the deployed pairs (keeping the state of those that stay) and who watches
    /// what, after a configuration change. Returns the pairs that were not deployed before.
    fn refresh_deployments(&mut self) -> BTreeSet<MatchKey> {
        let keys: BTreeSet<MatchKey> = sluice_wire::names::deployments(&self.config)
            .into_keys()
            .filter(|(_, es)| self.config.event_sources.contains_key(es))
            .collect();
        let mut old: BTreeMap<MatchKey, (KeyState, Option<ContentHash>)> =
            std::mem::take(&mut self.pairs)
                .into_iter()
                .map(|pair| (pair.key, (pair.state, pair.published)))
                .collect();
        let mut new_pairs = BTreeSet::new();
        self.deployed.clear();
        self.watchers.clear();
        for key in keys {
            let (state, published) = old.remove(&key).unwrap_or_else(|| {
                new_pairs.insert(key.clone());
                (KeyState::default(), self.published.remove(&key))
            });
            let index = self.pairs.len();
            if let Some(Ok(compiled)) = self.compiled.get(&key.1) {
                for (position, group_kind) in compiled.group_kinds.iter().enumerate() {
                    self.watchers
                        .entry(key.0.clone())
                        .or_default()
                        .entry(group_kind.clone())
                        .or_default()
                        .push(Watcher {
                            index,
                            position,
                            es: compiled.es.clone(),
                            content_matters: compiled.content_matters,
                        });
                }
            }
            self.deployed.insert(key.clone(), index);
            self.pairs.push(Pair {
                key,
                state,
                published,
            });
        }
        // What was published for pairs that are gone stays known until it is withdrawn.
        for (key, (_, published)) in old {
            if let Some(hash) = published {
                self.published.insert(key, hash);
            }
        }
        new_pairs
    }

    /// Withdraws what was published for pairs no longer deployed.
    fn withdraw_undeployed(&mut self, sequence: u64) -> Vec<EncodedSet> {
        std::mem::take(&mut self.published)
            .into_keys()
            .filter(|key| !self.deployed.contains_key(key))
            .map(|key| {
                let head = pb::MatchSet {
                    cluster: Some(sluice_wire::cluster_ref(&key.0)),
                    event_source: key.1.clone(),
                    removed: true,
                    source_sequence: sequence,
                    ..Default::default()
                };
                EncodedSet::new(head, Vec::new())
            })
            .collect()
    }

    /// Re-evaluates every cached object for one pair.
    fn rebuild_pair(&mut self, index: usize) {
        let mut state = KeyState::default();
        let key = &self.pairs[index].key;
        if let (Some(Ok(compiled)), Some(kinds)) =
            (self.compiled.get(&key.1), self.objects.get(&key.0))
        {
            for (position, group_kind) in compiled.group_kinds.iter().enumerate() {
                let Some(objects) = kinds.get(group_kind) else {
                    continue;
                };
                for ((namespace, name), object) in objects {
                    match compiled.es.evaluate(object) {
                        Ok(v) if v.matching => {
                            state.insert((position, namespace.clone(), name.clone()), object);
                        }
                        Ok(_) => {}
                        Err(error) => {
                            state.errors.insert(
                                (group_kind.1.clone(), namespace.clone(), name.clone()),
                                error.to_string(),
                            );
                        }
                    }
                }
            }
        }
        self.pairs[index].state = state;
    }

    /// Builds the pair's match set and returns it if it differs from the last one published.
    fn emit(&mut self, index: usize, sequence: u64) -> Option<EncodedSet> {
        let set = self.match_set(&self.pairs[index], sequence);
        let published = &mut self.pairs[index].published;
        if published.as_ref() == Some(set.content()) {
            return None;
        }
        *published = Some(*set.content());
        Some(set)
    }

    fn match_set(&self, pair: &Pair, sequence: u64) -> EncodedSet {
        let key = &pair.key;
        let mut set = pb::MatchSet {
            cluster: Some(sluice_wire::cluster_ref(&key.0)),
            event_source: key.1.clone(),
            source_sequence: sequence,
            ..Default::default()
        };
        let compiled = match self.compiled.get(&key.1) {
            Some(Ok(compiled)) => compiled,
            Some(Err(error)) => {
                set.failure_message = error.clone();
                return EncodedSet::new(set, Vec::new());
            }
            None => return EncodedSet::new(set, Vec::new()),
        };
        let state = &pair.state;
        if let Some((object, reason)) = state.errors.iter().next() {
            set.failure_message = format!("{} {}/{}: {reason}", object.0, object.1, object.2);
            return EncodedSet::new(set, Vec::new());
        }
        let es = &compiled.es;
        let mut matching = Vec::new();
        if es.has_aggregation() {
            let selected: Vec<Value> = state.objects().map(|object| object.to_value()).collect();
            match es.aggregate(&selected) {
                Ok(aggregated) => {
                    for object in &aggregated.resources {
                        encode_ref(&object_ref(object), &mut matching);
                        if es.collect_resources() {
                            set.resources.push(to_json(object));
                        }
                    }
                }
                Err(error) => set.failure_message = error.to_string(),
            }
        } else {
            matching.reserve_exact(state.encoded().map(<[u8]>::len).sum());
            for encoded in state.encoded() {
                matching.extend_from_slice(encoded);
            }
            if es.collect_resources() {
                set.resources.reserve_exact(state.encoded().len());
                for object in state.objects() {
                    set.resources.push(to_json(&object.to_value()));
                }
            }
        }
        EncodedSet::new(set, matching)
    }
}

/// The object of a change (its JSON text), parsed once; `None` when deleted or unreadable (an
/// object that cannot be read cannot match).
fn parse(deleted: bool, json: Vec<u8>) -> Option<Arc<Tape>> {
    if deleted {
        return None;
    }
    Tape::parse(json).ok().map(Arc::new)
}

/// A change's cluster; `None` when the change names no valid cluster (it is then ignored).
fn cluster_of(change: &pb::ResourceChange) -> Option<ClusterId> {
    sluice_wire::cluster_id(change.cluster.as_ref(), "change").ok()
}

fn group_of(api_version: &str) -> String {
    group_str(api_version).to_string()
}

/// The group of an apiVersion (`apps/v1` → `apps`, `v1` → the core group, empty).
fn group_str(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}
