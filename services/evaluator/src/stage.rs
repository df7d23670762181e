//! The evaluator's pure stage: holds the configuration, the compiled EventSources, the objects
//! of every watched cluster and the per-(cluster, EventSource) match state; turns inputs (a
//! config update, one object change or a batch of them) into the match units that changed:
//! members that joined, changed or left, then the head of their set (ADR 0018). No IO, no
//! clock.
//!
//! Incremental by construction: which (cluster, EventSource) pairs are deployed, and which of
//! them watch a (cluster, group, kind), is computed when the configuration changes, not per
//! object change. An object change evaluates the object once per EventSource watching its kind
//! and marks the object's member dirty only when it can differ (the object joined or left the
//! set, an evaluation error appeared or went away, or a matching object changed while the set
//! carries object contents); only dirty members are compared with what was published for them,
//! so an event costs one member whatever else matches. An aggregatedSelection is evaluated over
//! all of its pair's objects (inherent), and still publishes only the members that differ.

#[cfg(test)]
mod tests;

mod keys;
mod match_state;

mod units;

pub use units::MatchOutput;

use keys::Two;
use match_state::{object_ref, tape_ref, to_json, update_key, KeyState, Outcome};
use sluice_wire::match_units::{member_hash, member_id, MemberId, Unit};
use units::{bounded, head_message, tombstone, Published};

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

/// (selector position, namespace, name) of a matching object in its pair's state.
type Placed = (usize, String, String);

/// A deployed (cluster, EventSource) pair and its state.
struct Pair {
    key: MatchKey,
    state: KeyState,
    /// What was published for it.
    published: Published,
    /// Members changed since they were last compared with what was published.
    dirty: BTreeSet<Placed>,
    /// Whether every member is to be compared (after a rebuild), not only the dirty ones.
    full: bool,
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
    /// What was published for keys not deployed (deployed pairs keep theirs in `pairs`): what
    /// a restart finds on the MATCH stream, or what is left of a pair that is no longer
    /// deployed until it is withdrawn.
    published: BTreeMap<MatchKey, Published>,
    /// Per (cluster, group, kind): the pairs watching it. Rebuilt with the pairs, after every
    /// compilation.
    watchers: FxHashMap<ClusterId, FxHashMap<GroupKind, Vec<Watcher>>>,
    /// Pairs changed by absorbed changes, not yet emitted, with the last change's sequence.
    pending: BTreeMap<usize, u64>,
    /// The most one message may carry: a member over it is published as its failure.
    payload_limit: usize,
}

impl Evaluator {
    pub fn new(config: ConfigState) -> Evaluator {
        let mut evaluator = Evaluator {
            config,
            payload_limit: usize::MAX,
            ..Default::default()
        };
        let names: Vec<String> = evaluator.config.event_sources.keys().cloned().collect();
        for name in names {
            evaluator.compile(&name);
        }
        evaluator.refresh_deployments();
        evaluator
    }

    /// The most one message may carry (the bus's payload limit): a member whose encoding is
    /// larger is published without its resource, as that member's failure.
    pub fn with_payload_limit(mut self, limit: usize) -> Evaluator {
        self.payload_limit = limit;
        self
    }

    /// Remembers a unit already published (the MATCH stream), so a restart republishes only
    /// what differs.
    pub fn remember_published(&mut self, unit: &Unit) {
        let (cluster, event_source) = match unit {
            Unit::Member(m) => (m.cluster.as_ref(), &m.event_source),
            Unit::Head(h) => (h.cluster.as_ref(), &h.event_source),
        };
        if let Ok(cluster) = sluice_wire::cluster_id(cluster, "match stream") {
            let key = (cluster, event_source.clone());
            match self.deployed.get(&key) {
                Some(&index) => self.pairs[index].published.remember(unit),
                None => self.published.entry(key).or_default().remember(unit),
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
    pub fn recompute_all(&mut self, sequence: u64) -> Vec<MatchOutput> {
        // Every pair is rebuilt and emitted below: nothing stays pending.
        self.pending.clear();
        let mut out = self.withdraw_undeployed(sequence);
        for index in 0..self.pairs.len() {
            self.rebuild_pair(index);
            self.emit(index, sequence, &mut out);
        }
        out
    }

    /// Applies a configuration update; returns the match sets it changed.
    pub fn on_config(&mut self, update: &ConfigUpdate) -> Vec<MatchOutput> {
        // Pending sets are indexed by pair, and a configuration change renumbers the pairs.
        let mut out = self.flush();
        let registered: Vec<ClusterId> = self
            .objects
            .keys()
            .filter(|cluster| self.config.clusters.contains_key(*cluster))
            .cloned()
            .collect();
        if !update.apply_to(&mut self.config) {
            return out;
        }
        // A cluster no longer registered is forgotten with its objects, as the watcher
        // forgets what it published of it: registered again, it starts from what it holds then.
        for cluster in registered {
            if !self.config.clusters.contains_key(&cluster) {
                self.objects.remove(&cluster);
            }
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
                self.emit(index, update.sequence, &mut out);
            }
        }
        out
    }

    /// Applies one object change in a managed cluster; returns the match sets it changed.
    pub fn on_change(&mut self, change: &pb::ResourceChange, sequence: u64) -> Vec<MatchOutput> {
        let mut dirty = std::mem::take(&mut self.pending);
        self.apply_change(change, sequence, &mut dirty);
        self.emit_dirty(dirty)
    }

    /// Applies a batch of object changes (with their stream sequences, in stream order) and
    /// returns the match sets they changed: one per changed (cluster, EventSource), however
    /// many changes of the batch touched it, carrying the sequence of the last of them.
    pub fn on_changes(&mut self, changes: &[(pb::ResourceChange, u64)]) -> Vec<MatchOutput> {
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
    pub fn on_parsed(&mut self, changes: &[Parsed]) -> Vec<MatchOutput> {
        self.absorb(changes);
        self.flush()
    }

    /// Applies parsed changes without publishing: the sets they change are published by the
    /// next [`Evaluator::flush`] (or any other call that returns sets), once each however many
    /// absorbed batches changed them. A service behind on its input absorbs what is waiting
    /// and flushes once.
    pub fn absorb<'p>(&mut self, changes: impl IntoIterator<Item = &'p Parsed>) {
        self.absorb_batch(
            changes
                .into_iter()
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
    pub fn flush(&mut self) -> Vec<MatchOutput> {
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
                // A change that carries an object which does not parse is that object's
                // failure, not its deletion.
                None if !change.deleted => {
                    Outcome::Failed("the object is not a JSON document".into())
                }
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
            let pair = &mut self.pairs[index];
            let object = prepared.object.as_ref();
            if update_key(
                &mut pair.state,
                content_matters,
                position,
                change,
                object,
                outcome,
            ) {
                dirty.insert(index, sequence);
                if !pair.full {
                    pair.dirty
                        .insert((position, change.namespace.clone(), change.name.clone()));
                }
            }
        }
    }

    fn emit_dirty(&mut self, dirty: BTreeMap<usize, u64>) -> Vec<MatchOutput> {
        let mut out = Vec::new();
        for (index, sequence) in dirty {
            self.emit(index, sequence, &mut out);
        }
        out
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
        let mut old: BTreeMap<MatchKey, Pair> = std::mem::take(&mut self.pairs)
            .into_iter()
            .map(|pair| (pair.key.clone(), pair))
            .collect();
        let mut new_pairs = BTreeSet::new();
        self.deployed.clear();
        self.watchers.clear();
        for key in keys {
            let pair = old.remove(&key).unwrap_or_else(|| {
                new_pairs.insert(key.clone());
                Pair {
                    key: key.clone(),
                    state: KeyState::default(),
                    published: self.published.remove(&key).unwrap_or_default(),
                    dirty: BTreeSet::new(),
                    full: true,
                }
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
            self.deployed.insert(key, index);
            self.pairs.push(pair);
        }
        // What was published for pairs that are gone stays known until it is withdrawn.
        for (key, pair) in old {
            self.published.insert(key, pair.published);
        }
        new_pairs
    }

    /// Withdraws what was published for pairs no longer deployed: a head that says `removed`,
    /// then the purge of the set's members.
    fn withdraw_undeployed(&mut self, sequence: u64) -> Vec<MatchOutput> {
        let mut out = Vec::new();
        for (key, published) in std::mem::take(&mut self.published) {
            if self.deployed.contains_key(&key) || !published.is_live() {
                continue;
            }
            let head = units::HeadState {
                removed: true,
                ..Default::default()
            };
            out.push(MatchOutput::Head(head_message(
                &key.0, &key.1, head, sequence,
            )));
            out.push(MatchOutput::Purge {
                cluster: key.0,
                event_source: key.1,
            });
        }
        out
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
        let pair = &mut self.pairs[index];
        pair.state = state;
        pair.full = true;
        pair.dirty.clear();
    }

    /// Appends to `out` the members of the pair that differ from what was published for them,
    /// then its head if anything changed. While the set fails (an EventSource that does not
    /// compile, an object whose evaluation failed, an aggregation error), only the head goes
    /// out, with the failure: the members stay as they were and the changes wait.
    fn emit(&mut self, index: usize, sequence: u64, out: &mut Vec<MatchOutput>) {
        let start = out.len();
        let failure = self.set_failure(index).or_else(|| {
            let pair = &self.pairs[index];
            let compiled = match self.compiled.get(&pair.key.1) {
                Some(Ok(compiled)) => compiled,
                _ => return None,
            };
            let wanted = if compiled.es.has_aggregation() {
                match self.aggregated_members(pair, compiled) {
                    Ok(members) => Wanted::All(members),
                    Err(error) => return Some(error),
                }
            } else if pair.full {
                Wanted::All(self.selected_members(pair, compiled))
            } else {
                Wanted::Some(self.dirty_members(pair, compiled))
            };
            let pair = &mut self.pairs[index];
            let changes: Vec<(MemberId, Option<pb::MatchMember>)> = match wanted {
                Wanted::All(members) => {
                    let gone: Vec<(MemberId, Option<pb::MatchMember>)> = pair
                        .published
                        .ids()
                        .filter(|id| !members.contains_key(*id))
                        .map(|id| (id.clone(), None))
                        .collect();
                    gone.into_iter()
                        .chain(members.into_iter().map(|(id, m)| (id, Some(m))))
                        .collect()
                }
                Wanted::Some(members) => members,
            };
            for (id, member) in changes {
                let hash = member.as_ref().map(member_hash);
                if pair.published.hash(&id) == hash.as_ref() {
                    continue;
                }
                pair.published.record(id.clone(), hash);
                out.push(MatchOutput::Member(member.unwrap_or_else(|| {
                    tombstone(&pair.key.0, &pair.key.1, &id, sequence)
                })));
            }
            pair.full = false;
            pair.dirty.clear();
            None
        });
        let pair = &mut self.pairs[index];
        for output in &mut out[start..] {
            if let MatchOutput::Member(member) = output {
                member.source_sequence = sequence;
            }
        }
        let changed = out.len() > start;
        if let Some(head) = pair
            .published
            .next_head(failure.as_deref().unwrap_or(""), changed)
        {
            out.push(MatchOutput::Head(head_message(
                &pair.key.0,
                &pair.key.1,
                head,
                sequence,
            )));
        }
    }

    /// Why the pair's set cannot be evaluated, if it cannot.
    fn set_failure(&self, index: usize) -> Option<String> {
        let pair = &self.pairs[index];
        if let Some(Err(error)) = self.compiled.get(&pair.key.1) {
            return Some(error.clone());
        }
        pair.state
            .errors
            .iter()
            .next()
            .map(|(object, reason)| format!("{} {}/{}: {reason}", object.0, object.1, object.2))
    }

    /// A matching object as a member of the pair's set.
    fn member(
        &self,
        pair: &Pair,
        compiled: &Compiled,
        position: usize,
        object: &Tape,
    ) -> pb::MatchMember {
        let member = pb::MatchMember {
            cluster: Some(sluice_wire::cluster_ref(&pair.key.0)),
            event_source: pair.key.1.clone(),
            object: Some(tape_ref(object)),
            resource: if compiled.es.collect_resources() {
                to_json(&object.to_value())
            } else {
                Vec::new()
            },
            present: true,
            order: u32::try_from(position).unwrap_or(u32::MAX),
            ..Default::default()
        };
        bounded(member, self.payload_limit)
    }

    /// Every member the pair's selectors select.
    fn selected_members(
        &self,
        pair: &Pair,
        compiled: &Compiled,
    ) -> BTreeMap<MemberId, pb::MatchMember> {
        pair.state
            .entries()
            .map(|((position, namespace, name), object)| {
                let id = placed_id(compiled, &(*position, namespace.clone(), name.clone()));
                (id, self.member(pair, compiled, *position, object))
            })
            .collect()
    }

    /// The dirty members of the pair: each one's member, or `None` when it left.
    fn dirty_members(
        &self,
        pair: &Pair,
        compiled: &Compiled,
    ) -> Vec<(MemberId, Option<pb::MatchMember>)> {
        pair.dirty
            .iter()
            .map(|placed| {
                let member = pair
                    .state
                    .get(placed)
                    .map(|object| self.member(pair, compiled, placed.0, object));
                (placed_id(compiled, placed), member)
            })
            .collect()
    }

    /// The members an aggregatedSelection makes of every selected object, in its order (the
    /// first of two outputs naming the same object wins).
    fn aggregated_members(
        &self,
        pair: &Pair,
        compiled: &Compiled,
    ) -> Result<BTreeMap<MemberId, pb::MatchMember>, String> {
        let es = &compiled.es;
        let selected: Vec<Value> = pair
            .state
            .objects()
            .map(|object| object.to_value())
            .collect();
        let aggregated = es.aggregate(&selected).map_err(|error| error.to_string())?;
        let mut members = BTreeMap::new();
        for (position, object) in aggregated.resources.iter().enumerate() {
            let reference = object_ref(object);
            let member = pb::MatchMember {
                cluster: Some(sluice_wire::cluster_ref(&pair.key.0)),
                event_source: pair.key.1.clone(),
                resource: if es.collect_resources() {
                    to_json(object)
                } else {
                    Vec::new()
                },
                object: Some(reference.clone()),
                present: true,
                order: u32::try_from(position).unwrap_or(u32::MAX),
                ..Default::default()
            };
            members
                .entry(member_id(&reference))
                .or_insert_with(|| bounded(member, self.payload_limit));
        }
        Ok(members)
    }
}

/// The members a pair wants published: all of them (after a rebuild, or an aggregation), or
/// the dirty ones (`None`: it left).
enum Wanted {
    All(BTreeMap<MemberId, pb::MatchMember>),
    Some(Vec<(MemberId, Option<pb::MatchMember>)>),
}

/// The member identity of a pair's object: the group and kind its selector watches.
fn placed_id(compiled: &Compiled, (position, namespace, name): &Placed) -> MemberId {
    let (group, kind) = compiled
        .group_kinds
        .get(*position)
        .cloned()
        .unwrap_or_default();
    (group, kind, namespace.clone(), name.clone())
}

/// The object of a change (its JSON text), parsed once; `None` when deleted or unreadable (an
/// unreadable object is its EventSources' failure, see `prepare`).
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
