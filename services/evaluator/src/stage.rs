//! The evaluator's pure stage: holds the configuration, the compiled EventSources, the objects
//! of every watched cluster and the per-(cluster, EventSource) match state; turns one input
//! (a config update or an object change) into the match sets that changed. No IO, no clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};
use sluice_domain::cluster::ClusterId;
use sluice_domain::config::ConfigState;
use sluice_eval::CompiledEventSource;
use sluice_proto::v1 as pb;
use sluice_wire::ConfigUpdate;

/// (cluster, EventSource name).
pub type MatchKey = (ClusterId, String);
/// (group, kind) of objects.
type GroupKind = (String, String);
/// (namespace, name).
type ObjectKey = (String, String);

/// State kept per (cluster, EventSource).
#[derive(Debug, Default)]
struct KeyState {
    /// Matching objects by (selector position, namespace, name): the API server's LIST order
    /// within a selector, selectors in spec order.
    matching: BTreeMap<(usize, String, String), Value>,
    /// Objects whose evaluation failed, with the reason.
    errors: BTreeMap<(String, String, String), String>,
}

/// The evaluator's state machine.
#[derive(Default)]
pub struct Evaluator {
    config: ConfigState,
    compiled: BTreeMap<String, Result<Arc<CompiledEventSource>, String>>,
    objects: BTreeMap<ClusterId, BTreeMap<GroupKind, BTreeMap<ObjectKey, Value>>>,
    keys: BTreeMap<MatchKey, KeyState>,
    /// Content hash of the last match set published per key.
    published: BTreeMap<MatchKey, String>,
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
        evaluator
    }

    /// Remembers what is already published (the MATCH stream), so a restart republishes only
    /// what differs.
    pub fn remember_published(&mut self, set: &pb::MatchSet) {
        if let Ok(cluster) = sluice_wire::cluster_id(set.cluster.as_ref(), "match stream") {
            let key = (cluster, set.event_source.clone());
            if set.removed {
                self.published.remove(&key);
            } else {
                self.published.insert(key, content_hash(set));
            }
        }
    }

    /// Loads one object without evaluating (startup replay).
    pub fn load_object(&mut self, change: &pb::ResourceChange) {
        let Ok(cluster) = sluice_wire::cluster_id(change.cluster.as_ref(), "change stream") else {
            return;
        };
        let group_kind = (group_of(&change.api_version), change.kind.clone());
        let key = (change.namespace.clone(), change.name.clone());
        let bucket = self
            .objects
            .entry(cluster)
            .or_default()
            .entry(group_kind)
            .or_default();
        if change.deleted {
            bucket.remove(&key);
        } else if let Ok(object) = serde_json::from_slice(&change.object_json) {
            bucket.insert(key, object);
        }
    }

    /// Evaluates every deployed (cluster, EventSource) from scratch; returns what changed.
    pub fn recompute_all(&mut self, sequence: u64) -> Vec<pb::MatchSet> {
        let deployed = self.deployed();
        let mut out = self.withdraw_undeployed(&deployed, sequence);
        for key in deployed {
            self.rebuild_key(&key);
            out.extend(self.emit(&key, sequence));
        }
        out
    }

    /// Applies a configuration update; returns the match sets it changed.
    pub fn on_config(&mut self, update: &ConfigUpdate) -> Vec<pb::MatchSet> {
        let before = self.deployed();
        if !update.apply_to(&mut self.config) {
            return Vec::new();
        }
        let es_changed = update.kind == "EventSource";
        if es_changed {
            self.compile(&update.name);
        }
        let after = self.deployed();
        let mut out = self.withdraw_undeployed(&after, update.sequence);
        for key in after {
            let is_new = !before.contains(&key);
            let affected = is_new || (es_changed && key.1 == update.name);
            if affected {
                self.rebuild_key(&key);
                out.extend(self.emit(&key, update.sequence));
            }
        }
        out
    }

    /// Applies one object change in a managed cluster; returns the match sets it changed.
    pub fn on_change(&mut self, change: &pb::ResourceChange, sequence: u64) -> Vec<pb::MatchSet> {
        self.load_object(change);
        let Ok(cluster) = sluice_wire::cluster_id(change.cluster.as_ref(), "change") else {
            return Vec::new();
        };
        let group = group_of(&change.api_version);
        let object: Option<Value> = if change.deleted {
            None
        } else {
            serde_json::from_slice(&change.object_json).ok()
        };
        let keys: Vec<MatchKey> = self
            .deployed()
            .into_iter()
            .filter(|(c, _)| *c == cluster)
            .collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(Ok(es)) = self.compiled.get(&key.1).cloned() else {
                continue;
            };
            let Some(position) = selector_position(&es, &group, &change.kind) else {
                continue;
            };
            let state = self.keys.entry(key.clone()).or_default();
            let map_key = (position, change.namespace.clone(), change.name.clone());
            let err_key = (
                change.kind.clone(),
                change.namespace.clone(),
                change.name.clone(),
            );
            state.matching.remove(&map_key);
            state.errors.remove(&err_key);
            if let Some(object) = &object {
                match es.evaluate(object) {
                    Ok(verdict) if verdict.matching => {
                        state.matching.insert(map_key, object.clone());
                    }
                    Ok(_) => {}
                    Err(error) => {
                        state.errors.insert(err_key, error.to_string());
                    }
                }
            }
            out.extend(self.emit(&key, sequence));
        }
        out
    }

    fn compile(&mut self, name: &str) {
        let compiled = match self.config.event_sources.get(name) {
            None => None,
            Some(Err(error)) => Some(Err(format!("eventsource {name}: {error}"))),
            Some(Ok(es)) => Some(
                CompiledEventSource::compile(es)
                    .map(Arc::new)
                    .map_err(|e| error_chain(&e)),
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

    /// (cluster, EventSource) pairs some EventTrigger deploys whose EventSource exists.
    fn deployed(&self) -> BTreeSet<MatchKey> {
        self.config
            .deployments(|trigger, _| Some(trigger.event_source_name.clone()))
            .into_keys()
            .filter(|(_, es)| self.config.event_sources.contains_key(es))
            .collect()
    }

    fn withdraw_undeployed(
        &mut self,
        deployed: &BTreeSet<MatchKey>,
        sequence: u64,
    ) -> Vec<pb::MatchSet> {
        let gone: Vec<MatchKey> = self
            .published
            .keys()
            .chain(self.keys.keys())
            .filter(|k| !deployed.contains(*k))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        gone.into_iter()
            .map(|key| {
                self.keys.remove(&key);
                self.published.remove(&key);
                pb::MatchSet {
                    cluster: Some(sluice_wire::cluster_ref(&key.0)),
                    event_source: key.1.clone(),
                    removed: true,
                    source_sequence: sequence,
                    ..Default::default()
                }
            })
            .collect()
    }

    /// Re-evaluates every cached object for one key.
    fn rebuild_key(&mut self, key: &MatchKey) {
        let mut state = KeyState::default();
        if let Some(Ok(es)) = self.compiled.get(&key.1) {
            if let Some(kinds) = self.objects.get(&key.0) {
                for ((group, kind), objects) in kinds {
                    let Some(position) = selector_position(es, group, kind) else {
                        continue;
                    };
                    for ((namespace, name), object) in objects {
                        match es.evaluate(object) {
                            Ok(v) if v.matching => {
                                state.matching.insert(
                                    (position, namespace.clone(), name.clone()),
                                    object.clone(),
                                );
                            }
                            Ok(_) => {}
                            Err(error) => {
                                state.errors.insert(
                                    (kind.clone(), namespace.clone(), name.clone()),
                                    error.to_string(),
                                );
                            }
                        }
                    }
                }
            }
        }
        self.keys.insert(key.clone(), state);
    }

    /// Builds the key's match set and returns it if it differs from the last one published.
    fn emit(&mut self, key: &MatchKey, sequence: u64) -> Option<pb::MatchSet> {
        let set = self.match_set(key, sequence);
        let hash = content_hash(&set);
        if self.published.get(key) == Some(&hash) {
            return None;
        }
        self.published.insert(key.clone(), hash);
        Some(set)
    }

    fn match_set(&self, key: &MatchKey, sequence: u64) -> pb::MatchSet {
        let mut set = pb::MatchSet {
            cluster: Some(sluice_wire::cluster_ref(&key.0)),
            event_source: key.1.clone(),
            source_sequence: sequence,
            ..Default::default()
        };
        let es = match self.compiled.get(&key.1) {
            Some(Ok(es)) => es,
            Some(Err(error)) => {
                set.failure_message = error.clone();
                return set;
            }
            None => return set,
        };
        let state = self.keys.get(key);
        if let Some((object, reason)) = state.and_then(|s| s.errors.iter().next()) {
            set.failure_message = format!("{} {}/{}: {reason}", object.0, object.1, object.2);
            return set;
        }
        let selected: Vec<Value> = state
            .map(|s| s.matching.values().cloned().collect())
            .unwrap_or_default();
        let selected = if es.has_aggregation() {
            match es.aggregate(&selected) {
                Ok(aggregated) => aggregated.resources,
                Err(error) => {
                    set.failure_message = error.to_string();
                    return set;
                }
            }
        } else {
            selected
        };
        for object in &selected {
            set.matching.push(sluice_wire::object_ref(object));
            if es.collect_resources() {
                set.resources
                    .push(serde_json::to_vec(object).unwrap_or_default());
            }
        }
        set
    }
}

/// Which selector of the EventSource lists objects of this group and kind.
fn selector_position(es: &CompiledEventSource, group: &str, kind: &str) -> Option<usize> {
    es.gvks()
        .iter()
        .position(|g| g.group == group && g.kind == kind)
}

fn group_of(api_version: &str) -> String {
    api_version
        .split_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default()
}

/// Hash of what a match set says (not of when it was computed).
fn content_hash(set: &pb::MatchSet) -> String {
    let mut hasher = Sha256::new();
    for m in &set.matching {
        hasher.update(format!(
            "{}\0{}\0{}\0{}\0",
            m.api_version, m.kind, m.namespace, m.name
        ));
    }
    for r in &set.resources {
        hasher.update(r);
        hasher.update([0]);
    }
    hasher.update(set.failure_message.as_bytes());
    hasher.update([u8::from(set.removed)]);
    format!("{:x}", hasher.finalize())
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
