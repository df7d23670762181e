//! The renderer's state machine: the configuration, every (cluster, EventSource) match set as
//! its members arrive (`MatchSets`), and what it last published per desired-state unit. A match
//! unit in, the units that changed out (ADR 0018): a member of a `oneForEvent` trigger's set
//! renders that resource's unit only (a tombstone removes it); a head renders the main unit of
//! each (trigger, cluster) on the set, which for `oneForEvent: false` is the one rendering over
//! all resources, once per burst. No IO.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use sha2::{Digest, Sha256};
use sluice_domain::cluster::{Cluster, ClusterId};
use sluice_domain::config::ConfigState;
use sluice_domain::eventtrigger::EventTrigger;
use sluice_proto::v1 as pb;
use sluice_template::{Doc, TemplateCache};
use sluice_wire::match_units::{Applied, MatchSets, MemberId, SetKey, SetView, Unit};

use crate::order::CloudEventOrder;
use crate::plan;

/// The origin of a CloudEvent match that carries none: the order of `SLUICE_CEMATCH`.
pub const CEMATCH_ORIGIN: &str = "sluice:cematch";

/// A desired-state unit: (EventTrigger name, cluster, the resource's (namespace, name) for a
/// resource unit, `None` for the pair's main unit).
pub type UnitKey = (String, ClusterId, Option<Member>);

/// (namespace, name) of a matching resource.
pub type Member = (String, String);

/// Members of a set that changed: joined or changed (still in the set), or left.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberDiff {
    pub changed: Vec<MemberId>,
    pub removed: Vec<MemberId>,
}

/// What a batch of match units concerns: one set, the members that changed in it, and whether
/// a head closed it (the main units are rendered then).
#[derive(Clone, Debug, PartialEq)]
pub struct SetChange {
    pub cluster: ClusterId,
    pub event_source: String,
    pub members: MemberDiff,
    pub head: bool,
}

impl SetChange {
    pub fn new(key: &SetKey) -> SetChange {
        SetChange {
            cluster: key.0.clone(),
            event_source: key.1.clone(),
            members: MemberDiff::default(),
            head: false,
        }
    }

    /// Records members that changed, each as changed or left by whether `sets` holds it.
    pub fn add_members(&mut self, sets: &MatchSets, ids: impl IntoIterator<Item = MemberId>) {
        let key = (self.cluster.clone(), self.event_source.clone());
        let view = sets.get(&key);
        for id in ids {
            let present = view.is_some_and(|v| v.member(&id).is_some());
            self.members.changed.retain(|c| *c != id);
            self.members.removed.retain(|c| *c != id);
            if present {
                self.members.changed.push(id);
            } else {
                self.members.removed.push(id);
            }
        }
    }
}

/// The renderer's state: configuration, the match sets, and what it last published.
pub struct Stage {
    pub config: ConfigState,
    pub sets: MatchSets,
    /// Content hash and trigger kind of each unit last published.
    published: BTreeMap<UnitKey, (String, String)>,
    /// The newest CloudEvent rendered (or found published) per CloudEvent unit, by its place
    /// in its origin's order: a match of an older event, delivered or published again after a
    /// newer one, would overwrite the newer state and is not rendered (ADR 0049). Forgotten at
    /// the CloudEvent consumer's ack floor ([`Stage::cloud_event_order`]).
    cloud_event_order: CloudEventOrder,
    templates: TemplateCache,
    sveltos_namespace: String,
}

impl Stage {
    pub fn new(config: ConfigState, sveltos_namespace: &str) -> Stage {
        Stage {
            config,
            sets: MatchSets::default(),
            published: BTreeMap::new(),
            cloud_event_order: CloudEventOrder::default(),
            templates: TemplateCache::new(4096),
            sveltos_namespace: sveltos_namespace.to_string(),
        }
    }

    /// Remembers a desired state already on the bus (startup replay).
    pub fn remember_published(&mut self, state: &pb::DesiredState) {
        if !state.cloud_event_source.is_empty() || !state.cloud_event_subject.is_empty() {
            // CloudEvent units are not re-rendered: they keep what their event created, and
            // only a newer match replaces it.
            if let Ok(unit) = sluice_wire::unit::UnitKey::of(state) {
                self.cloud_event_order.remember(
                    &unit.desired_subject(),
                    &state.cloud_event_origin,
                    state.cloud_event_position,
                );
            }
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

    /// Records one match unit read at stream `sequence`; returns its set and what it did
    /// (see [`MatchSets::apply`]).
    pub fn apply(&mut self, unit: Unit, sequence: u64) -> Option<(SetKey, Applied)> {
        self.sets.apply(unit, sequence)
    }

    /// Renders the units in scope and returns the desired states that changed, plus removals
    /// for units that no longer exist. `None` renders every unit (start, configuration change);
    /// a set change renders, for each pair on that set, the resource units of the members that
    /// changed and, when a head closed the change, the pair's main unit.
    pub fn recompute(&mut self, scope: Option<&SetChange>, sequence: u64) -> Vec<pb::DesiredState> {
        let mut current: BTreeSet<(String, ClusterId)> = BTreeSet::new();
        let mut out = Vec::new();
        let config = &self.config;
        for trigger in config.valid_event_triggers() {
            // A set change concerns its own cluster only: asked of it alone, not of every
            // cluster of the fleet (a fleet's first sets would otherwise cost clusters²).
            let clusters: Vec<ClusterId> = match scope {
                Some(change) if config.is_source_cluster(trigger, &change.cluster) => {
                    vec![change.cluster.clone()]
                }
                Some(_) => Vec::new(),
                None => config.source_clusters(trigger).into_iter().collect(),
            };
            for cluster_id in clusters {
                current.insert((trigger.name.clone(), cluster_id.clone()));
                let Some(cluster) = config.clusters.get(&cluster_id) else {
                    continue;
                };
                let event_source =
                    sluice_wire::names::event_source_name(trigger, cluster, &self.templates);
                if let Some(change) = scope {
                    if event_source.as_ref() != Ok(&change.event_source) {
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
                let view = match &event_source {
                    Ok(es) if !config.event_sources.contains_key(es) => {
                        // Nothing matches, so nothing is wanted; the status says why instead of
                        // showing Provisioned.
                        main.status_message = format!(
                            "eventtrigger {}: spec.eventSourceName: eventsource {es:?} does not exist",
                            trigger.name
                        );
                        None
                    }
                    Ok(es) => self.sets.get(&(cluster_id.clone(), es.clone())),
                    Err(error) => {
                        main.failure_message = error.clone();
                        None
                    }
                };
                // A collection is rendered over all of its members once a head closes the
                // burst; a member alone leaves the main unit as it is.
                let main_in_scope = trigger.one_for_event || scope.is_none_or(|c| c.head);
                let ctx = plan::Context {
                    config,
                    templates: &self.templates,
                    sveltos_namespace: &self.sveltos_namespace,
                };
                let failure = view
                    .and_then(SetView::head)
                    .map(|head| head.failure_message.as_str())
                    .filter(|failure| !failure.is_empty());
                let mut units = Vec::new();
                match (view, failure) {
                    (Some(_), Some(failure)) => main.failure_message = failure.to_string(),
                    (Some(view), None) => {
                        if !trigger.one_for_event && main_in_scope {
                            let key = (cluster_id.clone(), pair.event_source.clone());
                            let set = self.sets.assemble(&key).unwrap_or_default();
                            match plan::main_unit(&ctx, trigger, cluster, &set) {
                                Ok(objects) => main.objects = managed_objects(objects),
                                Err(error) => main.failure_message = error.to_string(),
                            }
                        }
                        if trigger.one_for_event {
                            let changed = scope.map(|c| &c.members.changed);
                            units = pair.resource_units(&ctx, view, changed);
                        }
                    }
                    (None, _) => {}
                }
                // Resource units leave when their member leaves, when the set is gone, or when
                // the trigger no longer renders per resource; a failure keeps what exists.
                let removed: Vec<Member> = if !main.failure_message.is_empty() {
                    Vec::new()
                } else if let (true, Some(_), Some(change)) = (trigger.one_for_event, view, scope) {
                    change.members.removed.iter().map(unit_member).collect()
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
                if main_in_scope {
                    units.insert(0, main);
                }
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
        if scope.is_some() {
            // The configuration did not change: no pair went away.
            return out;
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

    /// Records `state` of a CloudEvent unit as the newest of its unit; false when a later event
    /// of the unit was rendered already.
    fn newer_cloud_event(&mut self, state: &pb::DesiredState) -> bool {
        let Ok(unit) = sluice_wire::unit::UnitKey::of(state) else {
            return true;
        };
        self.cloud_event_order.advance(
            &unit.desired_subject(),
            &state.cloud_event_origin,
            state.cloud_event_position,
            state.source_sequence,
        )
    }

    /// The newest CloudEvent per CloudEvent unit: pruned at the CloudEvent consumer's ack
    /// floor, and told what the bus holds for a unit it no longer knows.
    pub fn cloud_event_order(&mut self) -> &mut CloudEventOrder {
        &mut self.cloud_event_order
    }

    /// What one matched CloudEvent does for every trigger deploying its EventSource to its
    /// cluster ([`Stage::render_cloud_event`]), less what a later event of the unit already
    /// did ([`Stage::newer_cloud_events`]).
    pub fn cloud_event(
        &mut self,
        matched: &pb::CloudEventMatch,
        sequence: u64,
    ) -> Vec<pb::DesiredState> {
        let states = self.render_cloud_event(matched, sequence);
        self.newer_cloud_events(states)
    }

    /// The desired states of CloudEvent units that no later event of their unit overtook,
    /// each recorded as its unit's newest.
    pub fn newer_cloud_events(
        &mut self,
        mut states: Vec<pb::DesiredState>,
    ) -> Vec<pb::DesiredState> {
        states.retain(|state| self.newer_cloud_event(state));
        states
    }

    /// What one matched CloudEvent does for every trigger deploying its EventSource to its
    /// cluster: a desired state for that CloudEvent's unit (objects for `Create`, `removed` for
    /// `Delete`, or the rendering failure), placed where the event is in its origin's order.
    /// An event that is not JSON is the failure of every such unit.
    pub fn render_cloud_event(
        &mut self,
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
        // A match from an evaluator that does not place events is ordered as it came.
        let (origin, position) = if matched.origin.is_empty() {
            (CEMATCH_ORIGIN, sequence)
        } else {
            (matched.origin.as_str(), matched.origin_position)
        };
        let mut out = Vec::new();
        for trigger in self.config.valid_event_triggers() {
            if sluice_wire::names::event_source_name(trigger, cluster, &self.templates).as_ref()
                != Ok(&matched.event_source)
                || !self.config.is_source_cluster(trigger, &cluster_id)
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
                cloud_event_origin: origin.to_string(),
                cloud_event_position: position,
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

    /// The resource units of the members in `changed` that the set holds (every member when
    /// `None`), each with its objects or its own failure: the member's (an object too large for
    /// the bus), a resource that is not JSON, or the rendering's.
    fn resource_units(
        &self,
        ctx: &plan::Context<'_>,
        view: &SetView,
        changed: Option<&Vec<MemberId>>,
    ) -> Vec<pb::DesiredState> {
        let members: Vec<&pb::MatchMember> = match changed {
            Some(ids) => ids.iter().filter_map(|id| view.member(id)).collect(),
            None => view.ordered(),
        };
        let mut units = Vec::with_capacity(members.len());
        for member in members {
            let matching = member.object.clone().unwrap_or_default();
            let mut state = self.state(Some(&(matching.namespace.clone(), matching.name.clone())));
            if !member.failure_message.is_empty() {
                state.failure_message = format!(
                    "eventtrigger {}: {}",
                    self.trigger.name, member.failure_message
                );
                units.push(state);
                continue;
            }
            let resource = if member.resource.is_empty() {
                Ok(Doc::Null)
            } else {
                serde_json::from_slice::<Doc>(&member.resource).map_err(|e| {
                    format!(
                        "eventtrigger {}: match member {} {}/{} of eventsource {} is not valid JSON: {e}",
                        self.trigger.name, matching.kind, matching.namespace, matching.name, self.event_source
                    )
                })
            };
            match resource.and_then(|resource| {
                plan::resource_unit(
                    ctx,
                    self.trigger,
                    self.cluster,
                    &self.event_source,
                    &matching,
                    resource,
                )
                .map_err(|error| error.to_string())
            }) {
                Ok(objects) => state.objects = managed_objects(objects),
                Err(error) => state.failure_message = error,
            }
            units.push(state);
        }
        units
    }
}

/// The resource unit a member renders to: (namespace, name).
fn unit_member(id: &MemberId) -> Member {
    (id.2.clone(), id.3.clone())
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
