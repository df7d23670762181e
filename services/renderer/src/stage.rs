//! The renderer's state machine: the configuration, the latest match set of every (cluster,
//! EventSource), and what it last published per desired-state unit. A match set in, the units
//! that changed out: the main unit of each (trigger, cluster) and, for `oneForEvent` triggers,
//! one unit per matching resource, rendered only when that resource changed (ADR 0018). No IO.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use sha2::{Digest, Sha256};
use sluice_domain::cluster::{Cluster, ClusterId};
use sluice_domain::config::ConfigState;
use sluice_domain::eventtrigger::EventTrigger;
use sluice_proto::v1 as pb;
use sluice_template::{Doc, TemplateCache};

use crate::plan;

/// A desired-state unit: (EventTrigger name, cluster, the resource's (namespace, name) for a
/// resource unit, `None` for the pair's main unit).
pub type UnitKey = (String, ClusterId, Option<Member>);

/// (namespace, name) of a matching resource.
pub type Member = (String, String);

/// How a new match set differs from the one it replaces, member by member.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberDiff {
    /// Members that joined or whose reference or collected resource changed.
    pub changed: Vec<Member>,
    /// Members that left.
    pub removed: Vec<Member>,
}

/// What a recorded match set concerns: its (cluster, EventSource) and its member changes.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportChange {
    pub cluster: ClusterId,
    pub event_source: String,
    pub members: MemberDiff,
}

/// The renderer's state: configuration, latest reports, and what it last published.
pub struct Stage {
    pub config: ConfigState,
    reports: BTreeMap<(ClusterId, String), pb::MatchSet>,
    /// Content hash and trigger kind of each unit last published.
    published: BTreeMap<UnitKey, (String, String)>,
    templates: TemplateCache,
    sveltos_namespace: String,
}

impl Stage {
    pub fn new(config: ConfigState, sveltos_namespace: &str) -> Stage {
        Stage {
            config,
            reports: BTreeMap::new(),
            published: BTreeMap::new(),
            templates: TemplateCache::new(4096),
            sveltos_namespace: sveltos_namespace.to_string(),
        }
    }

    /// Remembers a desired state already on the bus (startup replay).
    pub fn remember_published(&mut self, state: &pb::DesiredState) {
        if !state.cloud_event_source.is_empty() || !state.cloud_event_subject.is_empty() {
            // CloudEvent units are not re-rendered: they keep what their event created.
            return;
        }
        if let Ok(cluster) = sluice_wire::cluster_id(state.cluster.as_ref(), "desired stream") {
            let key = unit_key(state, cluster);
            if state.removed {
                self.published.remove(&key);
            } else {
                self.published
                    .insert(key, (content_hash(state), state.event_trigger_kind.clone()));
            }
        }
    }

    /// Records a match set; returns what it concerns and how its members changed. A failed
    /// evaluation keeps the members it had (its list is empty and must not be read as "nothing
    /// matches"), so nothing is withdrawn while it lasts and nothing is missed after it.
    pub fn set_report(&mut self, mut report: pb::MatchSet) -> Option<ReportChange> {
        let cluster = sluice_wire::cluster_id(report.cluster.as_ref(), "report").ok()?;
        let event_source = report.event_source.clone();
        let key = (cluster.clone(), event_source.clone());
        let previous = self.reports.remove(&key);
        let members = if report.removed {
            member_diff(previous.as_ref(), None)
        } else if !report.failure_message.is_empty() {
            if let Some(previous) = previous {
                report.matching = previous.matching;
                report.resources = previous.resources;
            }
            self.reports.insert(key, report);
            MemberDiff::default()
        } else {
            let diff = member_diff(previous.as_ref(), Some(&report));
            self.reports.insert(key, report);
            diff
        };
        Some(ReportChange {
            cluster,
            event_source,
            members,
        })
    }

    /// Renders the units in scope and returns the desired states that changed, plus removals
    /// for units that no longer exist. `None` renders every unit (start, configuration change);
    /// a report change renders the main units of the pairs it concerns and, of their resource
    /// units, only the members that changed.
    pub fn recompute(
        &mut self,
        scope: Option<&ReportChange>,
        sequence: u64,
    ) -> Vec<pb::DesiredState> {
        let mut current: BTreeSet<(String, ClusterId)> = BTreeSet::new();
        let mut out = Vec::new();
        let config = &self.config;
        for trigger in config.valid_event_triggers() {
            for cluster_id in config.source_clusters(trigger) {
                current.insert((trigger.name.clone(), cluster_id.clone()));
                let Some(cluster) = config.clusters.get(&cluster_id) else {
                    continue;
                };
                let event_source =
                    sluice_wire::names::event_source_name(trigger, cluster, &self.templates);
                if let Some(change) = scope {
                    if change.cluster != cluster_id
                        || event_source.as_ref() != Ok(&change.event_source)
                    {
                        continue;
                    }
                }
                let pair = Pair {
                    trigger,
                    cluster,
                    event_source: event_source.clone().unwrap_or_default(),
                    sequence,
                };
                let mut main = pair.state(None);
                let report = match &event_source {
                    Ok(es) if !config.event_sources.contains_key(es) => {
                        // Nothing matches, so nothing is wanted; the status says why instead of
                        // showing Provisioned.
                        main.status_message = format!(
                            "eventtrigger {}: spec.eventSourceName: eventsource {es:?} does not exist",
                            trigger.name
                        );
                        None
                    }
                    Ok(es) => self.reports.get(&(cluster_id.clone(), es.clone())),
                    Err(error) => {
                        main.failure_message = error.clone();
                        None
                    }
                };
                let ctx = plan::Context {
                    config,
                    templates: &self.templates,
                    sveltos_namespace: &self.sveltos_namespace,
                };
                let mut units = Vec::new();
                match report {
                    Some(report) if !report.failure_message.is_empty() => {
                        main.failure_message = report.failure_message.clone();
                    }
                    Some(report) => {
                        match plan::main_unit(&ctx, trigger, cluster, report) {
                            Ok(objects) => main.objects = managed_objects(objects),
                            Err(error) => main.failure_message = error.to_string(),
                        }
                        if trigger.one_for_event && main.failure_message.is_empty() {
                            let changed = scope.map(|c| &c.members);
                            match pair.resource_units(&ctx, report, changed) {
                                Ok(rendered) => units = rendered,
                                Err(error) => main.failure_message = error.to_string(),
                            }
                        }
                    }
                    None => {}
                }
                // Resource units leave when their member leaves, when the set is gone, or when
                // the trigger no longer renders per resource; a failure keeps what exists.
                let removed: Vec<Member> = if !main.failure_message.is_empty() {
                    Vec::new()
                } else if let (true, Some(_), Some(change)) = (trigger.one_for_event, report, scope)
                {
                    change.members.removed.clone()
                } else {
                    let wanted: HashSet<Member> = units.iter().filter_map(member_of).collect();
                    self.published_members(&trigger.name, &cluster_id)
                        .filter(|m| !wanted.contains(*m))
                        .cloned()
                        .collect()
                };
                for member in removed {
                    let mut state = pair.state(Some(&member));
                    state.removed = true;
                    units.push(state);
                }
                units.insert(0, main);
                for state in units {
                    let key = unit_key(&state, cluster_id.clone());
                    if state.removed {
                        if self.published.remove(&key).is_some() {
                            out.push(state);
                        }
                        continue;
                    }
                    let hash = content_hash(&state);
                    if self.published.get(&key).map(|(h, _)| h) != Some(&hash) {
                        self.published
                            .insert(key, (hash, trigger.kind.as_str().to_string()));
                        out.push(state);
                    }
                }
            }
        }
        // Pairs that no longer exist: their main unit is removed, which withdraws every unit of
        // the pair in the applier; their resource units are forgotten with it.
        let gone: Vec<UnitKey> = self
            .published
            .keys()
            .filter(|(t, c, _)| !current.contains(&(t.clone(), c.clone())))
            .cloned()
            .collect();
        for key in gone {
            let kind = self.published.remove(&key).map(|(_, kind)| kind);
            if key.2.is_some() {
                continue;
            }
            out.push(pb::DesiredState {
                event_trigger: key.0.clone(),
                cluster: Some(sluice_wire::cluster_ref(&key.1)),
                removed: true,
                event_trigger_kind: kind.unwrap_or_default(),
                source_sequence: sequence,
                ..Default::default()
            });
        }
        out
    }

    /// The resource units published for a (trigger, cluster).
    fn published_members<'a>(
        &'a self,
        trigger: &'a str,
        cluster: &'a ClusterId,
    ) -> impl Iterator<Item = &'a Member> + 'a {
        let start = (trigger.to_string(), cluster.clone(), None);
        self.published
            .range(start..)
            .take_while(move |((t, c, _), _)| t == trigger && c == cluster)
            .filter_map(|((_, _, member), _)| member.as_ref())
    }

    /// What one matched CloudEvent does for every trigger deploying its EventSource to its
    /// cluster: a desired state for that CloudEvent's unit (objects for `Create`, `removed` for
    /// `Delete`, or the rendering failure). An event that is not JSON is the failure of every
    /// such unit.
    pub fn cloud_event(
        &self,
        matched: &pb::CloudEventMatch,
        sequence: u64,
    ) -> Vec<pb::DesiredState> {
        let Ok(cluster_id) = sluice_wire::cluster_id(matched.cluster.as_ref(), "CloudEvent match")
        else {
            return Vec::new();
        };
        let Some(cluster) = self.config.clusters.get(&cluster_id) else {
            return Vec::new();
        };
        let event = serde_json::from_slice::<serde_json::Value>(&matched.event_json);
        let attribute = |name: &str| {
            event
                .as_ref()
                .ok()
                .and_then(|e| e.get(name))
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let ctx = plan::Context {
            config: &self.config,
            templates: &self.templates,
            sveltos_namespace: &self.sveltos_namespace,
        };
        let mut out = Vec::new();
        for trigger in self.config.valid_event_triggers() {
            if sluice_wire::names::event_source_name(trigger, cluster, &self.templates).as_ref()
                != Ok(&matched.event_source)
                || !self.config.source_clusters(trigger).contains(&cluster_id)
            {
                continue;
            }
            let mut state = pb::DesiredState {
                event_trigger: trigger.name.clone(),
                cluster: matched.cluster.clone(),
                event_source: matched.event_source.clone(),
                source_sequence: sequence,
                cloud_event_source: attribute("source"),
                cloud_event_subject: attribute("subject"),
                event_trigger_kind: trigger.kind.as_str().to_string(),
                ..Default::default()
            };
            let event = match &event {
                Ok(event) => event,
                Err(error) => {
                    state.failure_message = format!(
                        "eventtrigger {}: CloudEvent matched by eventsource {} on {} is not JSON: {error}",
                        trigger.name, matched.event_source, matched.nats_subject
                    );
                    out.push(state);
                    continue;
                }
            };
            match plan::cloud_event_state(&ctx, trigger, cluster, &matched.event_source, event) {
                Ok(outcome) if outcome.action == plan::CloudEventAction::Delete => {
                    state.removed = true;
                }
                Ok(outcome) => state.objects = managed_objects(outcome.objects),
                Err(error) => state.failure_message = error.to_string(),
            }
            out.push(state);
        }
        out
    }
}

/// One (trigger, cluster) being rendered.
struct Pair<'a> {
    trigger: &'a EventTrigger,
    cluster: &'a Cluster,
    event_source: String,
    sequence: u64,
}

impl Pair<'_> {
    /// An empty desired state of the pair's main unit or of one resource's unit.
    fn state(&self, member: Option<&Member>) -> pb::DesiredState {
        let (resource_namespace, resource_name) = member.cloned().unwrap_or_default();
        pb::DesiredState {
            event_trigger: self.trigger.name.clone(),
            cluster: Some(sluice_wire::cluster_ref(&self.cluster.id)),
            event_source: self.event_source.clone(),
            event_trigger_kind: self.trigger.kind.as_str().to_string(),
            source_sequence: self.sequence,
            resource_namespace,
            resource_name,
            ..Default::default()
        }
    }

    /// The resource units of the members in `changed` (every member when `None`), each with
    /// its objects or its own rendering failure. A resource that does not decode fails the
    /// pair (the error says which).
    fn resource_units(
        &self,
        ctx: &plan::Context<'_>,
        report: &pb::MatchSet,
        changed: Option<&MemberDiff>,
    ) -> Result<Vec<pb::DesiredState>, plan::RenderError> {
        let wanted: Option<HashSet<(&str, &str)>> = changed.map(|c| {
            c.changed
                .iter()
                .map(|(namespace, name)| (namespace.as_str(), name.as_str()))
                .collect()
        });
        let mut units = Vec::new();
        for (i, matching) in report.matching.iter().enumerate() {
            let key = (matching.namespace.as_str(), matching.name.as_str());
            if wanted.as_ref().is_some_and(|w| !w.contains(&key)) {
                continue;
            }
            let member = (matching.namespace.clone(), matching.name.clone());
            let resource = match report.resources.get(i) {
                None if report.resources.is_empty() => Doc::Null,
                None => {
                    return Err(plan::RenderError(format!(
                        "eventtrigger {}: match set of eventsource {}: {} resources for {} matching references",
                        self.trigger.name,
                        report.event_source,
                        report.resources.len(),
                        report.matching.len()
                    )))
                }
                Some(bytes) => serde_json::from_slice::<Doc>(bytes).map_err(|e| {
                    plan::RenderError(format!(
                        "eventtrigger {}: match set of eventsource {}: resources[{i}] is not valid JSON: {e}",
                        self.trigger.name, report.event_source
                    ))
                })?,
            };
            let mut state = self.state(Some(&member));
            match plan::resource_unit(
                ctx,
                self.trigger,
                self.cluster,
                &report.event_source,
                matching,
                resource,
            ) {
                Ok(objects) => state.objects = managed_objects(objects),
                Err(error) => state.failure_message = error.to_string(),
            }
            units.push(state);
        }
        Ok(units)
    }
}

/// Each member's position in a set, by (namespace, name) borrowed from the set.
fn member_index(set: Option<&pb::MatchSet>) -> HashMap<(&str, &str), usize> {
    set.map(|s| {
        s.matching
            .iter()
            .enumerate()
            .map(|(i, m)| ((m.namespace.as_str(), m.name.as_str()), i))
            .collect()
    })
    .unwrap_or_default()
}

/// The members that changed between two sets of the same key (`None` for no set): joined,
/// reference changed, or collected resource changed; and the members that left.
pub fn member_diff(before: Option<&pb::MatchSet>, after: Option<&pb::MatchSet>) -> MemberDiff {
    // Keys borrow the sets' strings: a diff allocates only for the members it names.
    let owned = |(namespace, name): (&str, &str)| (namespace.to_string(), name.to_string());
    let old = member_index(before);
    let new = member_index(after);
    let mut diff = MemberDiff::default();
    if let Some(after) = after {
        for (i, matching) in after.matching.iter().enumerate() {
            let key = (matching.namespace.as_str(), matching.name.as_str());
            let same = before.zip(old.get(&key)).is_some_and(|(before, &j)| {
                before.matching[j] == *matching && before.resources.get(j) == after.resources.get(i)
            });
            if !same {
                diff.changed.push(owned(key));
            }
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            diff.removed.push(owned(*key));
        }
    }
    diff.removed.sort();
    diff
}

fn unit_key(state: &pb::DesiredState, cluster: ClusterId) -> UnitKey {
    (state.event_trigger.clone(), cluster, member_of(state))
}

fn member_of(state: &pb::DesiredState) -> Option<Member> {
    (!state.resource_name.is_empty()).then(|| {
        (
            state.resource_namespace.clone(),
            state.resource_name.clone(),
        )
    })
}

fn managed_objects(objects: Vec<plan::Desired>) -> Vec<pb::ManagedObject> {
    objects
        .into_iter()
        .map(|d| managed_object(d.object))
        .collect()
}

pub(crate) fn managed_object(object: serde_json::Value) -> pb::ManagedObject {
    let r = sluice_wire::object_ref(&object);
    pb::ManagedObject {
        api_version: r.api_version,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
        object_json: serde_json::to_vec(&object).unwrap_or_default(),
        sealed_object_json: Vec::new(),
    }
}

pub(crate) fn content_hash(state: &pb::DesiredState) -> String {
    let mut hasher = Sha256::new();
    hasher.update(state.event_source.as_bytes());
    for o in &state.objects {
        hasher.update(&o.object_json);
        hasher.update([0]);
    }
    hasher.update(state.failure_message.as_bytes());
    hasher.update([0]);
    hasher.update(state.status_message.as_bytes());
    hasher.update([u8::from(state.removed)]);
    format!("{:x}", hasher.finalize())
}

#[cfg(test)]
mod tests;
