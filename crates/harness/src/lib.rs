//! The pipeline in one process, for table-driven tests of its decisions: resource changes and
//! CloudEvents go through the evaluator's stage, the renderer's stage and the applier's plan,
//! and the plan's applies and deletes land in an in-memory management cluster. No processes,
//! no NATS, no HTTP: the services' pure functions, called as libraries, in the order their
//! runners call them.
//!
//! What the harness does itself is only what the bus and the runners do between the stages:
//! it numbers inputs with stream sequences, hands every stage's outputs to the next in order
//! (the renderer's match units grouped by `sluice_renderer::group`, as its match stage groups
//! a batch) and executes the applier's plan on the map. It does not model what the
//! executor keeps between desired states (each pair's index by unit, the adoption listing): it
//! lists the map every time, as the executor does for a pair it has not indexed.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_applier::plan::{self as applier_plan, Owner, OWNED};
use sluice_domain::cluster::ClusterId;
use sluice_domain::config::ConfigState;
use sluice_domain::naming;
use sluice_evaluator::cloudevents::CloudEventSelector;
use sluice_evaluator::{Evaluator, MatchOutput};
use sluice_proto::v1 as pb;
use sluice_renderer::group::Group;
use sluice_renderer::Stage;
use sluice_wire::match_units::{Applied, HeadOutcome, Unit};
use sluice_wire::ConfigUpdate;

/// The namespace sluice renders into (`CommonArgs::sveltos_namespace`'s default).
pub const SVELTOS_NAMESPACE: &str = "projectsveltos";

/// (kind, namespace, name) of a management-cluster object.
pub type ObjectKey = (String, String, String);

/// Why an input could not be carried through: rejected by a stage, or handed on wrongly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The renderer's view of a set disagrees with its head although every unit was handed
    /// over in order: the evaluator published members and a head that do not agree.
    #[error("the renderer's view of match set {0} differs from its head")]
    HeadDiffers(String),
    #[error("a desired state names no valid cluster")]
    Cluster(#[source] sluice_wire::Error),
    #[error("a CloudEvent was rejected by the evaluator")]
    CloudEvent(#[source] sluice_evaluator::cloudevents::SelectError),
}

/// The evaluator, renderer and applier stages over one in-memory management cluster.
pub struct Pipeline {
    evaluator: Evaluator,
    selector: CloudEventSelector,
    renderer: Stage,
    /// The management cluster: the objects the applier wrote.
    cluster: BTreeMap<ObjectKey, Value>,
    /// Every desired state the renderer published, in order.
    desired: Vec<pb::DesiredState>,
    /// Every CloudEvent match the renderer rendered, with its sequence, in order.
    cloud_event_matches: Vec<(pb::CloudEventMatch, u64)>,
    /// Every CloudEvent received, in order (`forward_cloud_event_again`).
    cloud_events_received: Vec<pb::CloudEventReceived>,
    sequence: u64,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline::new()
    }
}

impl Pipeline {
    /// A pipeline with an empty configuration.
    pub fn new() -> Pipeline {
        Pipeline {
            evaluator: Evaluator::new(ConfigState::default()),
            selector: CloudEventSelector::new(ConfigState::default()),
            renderer: Stage::new(ConfigState::default(), SVELTOS_NAMESPACE),
            cluster: BTreeMap::new(),
            desired: Vec::new(),
            cloud_event_matches: Vec::new(),
            cloud_events_received: Vec::new(),
            sequence: 0,
        }
    }

    fn next_sequence(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    /// A configuration object created or changed (EventSource, EventTrigger, SveltosCluster,
    /// ConfigMap, ...), as the config feed delivers it to every stage.
    pub fn configure(&mut self, object: &Value) -> Result<(), Error> {
        let field = |f: &str| object["metadata"][f].as_str().unwrap_or("").to_string();
        let update = ConfigUpdate {
            kind: object["kind"].as_str().unwrap_or("").to_string(),
            namespace: field("namespace"),
            name: field("name"),
            object: Some(object.clone()),
            sequence: self.next_sequence(),
            ..ConfigUpdate::default()
        };
        self.config(update)
    }

    /// A configuration object deleted.
    pub fn unconfigure(&mut self, kind: &str, namespace: &str, name: &str) -> Result<(), Error> {
        let update = ConfigUpdate {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            object: None,
            sequence: self.next_sequence(),
            ..ConfigUpdate::default()
        };
        self.config(update)
    }

    fn config(&mut self, update: ConfigUpdate) -> Result<(), Error> {
        self.selector.on_config(&update);
        // The evaluator and the renderer follow the configuration independently; the evaluator
        // first, as its outputs reach the renderer after the renderer saw the same change.
        let matches = self.evaluator.on_config(&update);
        if update.apply_to(&mut self.renderer.config) {
            let states = self.renderer.recompute(None, update.sequence);
            self.apply_all(states)?;
        }
        self.deliver(matches)
    }

    /// An object created or changed in managed cluster `cluster`.
    pub fn change(&mut self, cluster: &ClusterId, object: &Value) -> Result<(), Error> {
        self.resource_change(cluster, object, false)
    }

    /// An object deleted in managed cluster `cluster`.
    pub fn delete(&mut self, cluster: &ClusterId, object: &Value) -> Result<(), Error> {
        self.resource_change(cluster, object, true)
    }

    fn resource_change(
        &mut self,
        cluster: &ClusterId,
        object: &Value,
        deleted: bool,
    ) -> Result<(), Error> {
        let r = sluice_wire::object_ref(object);
        let change = pb::ResourceChange {
            cluster: Some(sluice_wire::cluster_ref(cluster)),
            api_version: r.api_version,
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            deleted,
            resource_version: String::new(),
            object_json: if deleted {
                Vec::new()
            } else {
                serde_json::to_vec(object).unwrap_or_default()
            },
            ..Default::default()
        };
        let sequence = self.next_sequence();
        let matches = self.evaluator.on_change(&change, sequence);
        self.deliver(matches)
    }

    /// A CloudEvent (structured JSON) received from managed cluster `cluster` on core NATS
    /// subject `subject`.
    pub fn cloud_event(
        &mut self,
        cluster: &ClusterId,
        subject: &str,
        event: &Value,
    ) -> Result<(), Error> {
        self.cloud_event_stored(cluster, subject, event, "", 0)
    }

    /// A CloudEvent (structured JSON) read from managed cluster `cluster`'s JetStream, stored
    /// on `subject` at `position` of `origin` (the watcher's `jetstream:<stream>:<created>`);
    /// no origin (`""`) for core NATS.
    pub fn cloud_event_stored(
        &mut self,
        cluster: &ClusterId,
        subject: &str,
        event: &Value,
        origin: &str,
        position: u64,
    ) -> Result<(), Error> {
        let received = pb::CloudEventReceived {
            cluster: Some(sluice_wire::cluster_ref(cluster)),
            subject: subject.to_string(),
            event_json: serde_json::to_vec(event).unwrap_or_default(),
            origin: origin.to_string(),
            origin_position: position,
        };
        self.cloud_events_received.push(received.clone());
        self.receive(received)
    }

    /// Forwards the `index`th CloudEvent received (0 for the first) again, after later ones,
    /// as the watcher does when its first publish was not stored (a crash of the bus): a new
    /// message of `SLUICE_CLOUDEVENTS`, matched and rendered again.
    pub fn forward_cloud_event_again(&mut self, index: usize) -> Result<(), Error> {
        match self.cloud_events_received.get(index).cloned() {
            Some(received) => self.receive(received),
            None => Ok(()),
        }
    }

    /// Publishes the `index`th CloudEvent match (0 for the first) again, after later ones, as
    /// the evaluator does when its first publish was not stored: a new message of
    /// `SLUICE_CEMATCH`, at a later sequence.
    pub fn publish_cloud_event_match_again(&mut self, index: usize) -> Result<(), Error> {
        let Some((matched, _)) = self.cloud_event_matches.get(index).cloned() else {
            return Ok(());
        };
        let sequence = self.next_sequence();
        let states = self.renderer.cloud_event(&matched, sequence);
        self.apply_all(states)
    }

    fn receive(&mut self, received: pb::CloudEventReceived) -> Result<(), Error> {
        let sequence = self.next_sequence();
        let matches = self
            .selector
            .select(&received, sequence)
            .map_err(Error::CloudEvent)?;
        for matched in matches {
            let sequence = self.next_sequence();
            let states = self.renderer.cloud_event(&matched, sequence);
            self.cloud_event_matches.push((matched, sequence));
            self.apply_all(states)?;
        }
        Ok(())
    }

    /// Delivers the `index`th CloudEvent match (0 for the first) to the renderer again, as a
    /// redelivery after a crash or a lost publish does, newer matches having been rendered.
    pub fn redeliver_cloud_event_match(&mut self, index: usize) -> Result<(), Error> {
        let Some((matched, sequence)) = self.cloud_event_matches.get(index).cloned() else {
            return Ok(());
        };
        let states = self.renderer.cloud_event(&matched, sequence);
        self.apply_all(states)
    }

    /// Hands the evaluator's outputs to the renderer as its match stage reads a batch: the
    /// units of one set up to and including its head form a group rendered once
    /// (`sluice_renderer::group`).
    fn deliver(&mut self, outputs: Vec<MatchOutput>) -> Result<(), Error> {
        let mut group: Option<Group> = None;
        for (index, output) in outputs.into_iter().enumerate() {
            let unit = match output {
                MatchOutput::Member(member) => Unit::Member(member),
                MatchOutput::Head(head) => Unit::Head(head),
                // A stream purge: the renderer learnt of the removal from the head before it.
                MatchOutput::Purge { .. } => continue,
            };
            let sequence = self.next_sequence();
            let member = Group::member_id(&unit);
            let Some((key, applied)) = self.renderer.apply(unit, sequence) else {
                continue;
            };
            let (closed, open) = Group::join(&mut group, &key, index, sequence);
            if let Some(done) = closed {
                self.render(&done)?;
            }
            if applied == Applied::Head(HeadOutcome::Differs) {
                // Every unit was handed over in order: nothing expired unseen.
                return Err(Error::HeadDiffers(format!("{}/{}", key.0, key.1)));
            }
            open.record(&self.renderer.sets, &applied, member, index, sequence);
        }
        if let Some(done) = group {
            self.render(&done)?;
        }
        Ok(())
    }

    fn render(&mut self, group: &Group) -> Result<(), Error> {
        if !group.renders() {
            return Ok(());
        }
        let states = self.renderer.recompute(Some(&group.change), group.sequence);
        self.apply_all(states)
    }

    fn apply_all(&mut self, states: Vec<pb::DesiredState>) -> Result<(), Error> {
        for state in states {
            self.apply(&state)?;
            self.desired.push(state);
        }
        Ok(())
    }

    /// Executes one desired state on the in-memory cluster with the applier's plan: a failure
    /// keeps what exists; otherwise what the unit owns and no longer wants is deleted and what
    /// it wants is written.
    fn apply(&mut self, state: &pb::DesiredState) -> Result<(), Error> {
        let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state")
            .map_err(Error::Cluster)?;
        if !state.failure_message.is_empty() {
            return Ok(());
        }
        let Ok(desired) = applier_plan::desired_objects(state) else {
            return Ok(());
        };
        let owner = Owner::of(state, &cluster);
        let known: applier_plan::Known = self
            .cluster
            .iter()
            .filter(|((kind, _, _), object)| {
                OWNED.iter().any(|(_, owned)| owned == kind) && owner.owns(object)
            })
            .map(|(key, _)| (key.clone(), String::new()))
            .collect();
        let plan = applier_plan::plan(&desired, &known);
        for object in plan.apply {
            self.cluster
                .insert(applier_plan::object_id(&object), object);
        }
        for r in plan.delete {
            self.cluster.remove(&(r.kind, r.namespace, r.name));
        }
        Ok(())
    }

    /// The management cluster's objects.
    pub fn objects(&self) -> &BTreeMap<ObjectKey, Value> {
        &self.cluster
    }

    /// The management cluster in one line per object, in key order, naming what a table row
    /// checks: each object's kind, namespace and name, the unit that owns it (`main`, the
    /// resource `ns/name`, or the CloudEvent `source/subject`); a ClusterProfile's target
    /// (`clusterRefs` or `clusterSelector`) and policyRefs; a ConfigMap's data values.
    pub fn summary(&self) -> Vec<String> {
        self.cluster.values().map(summarize).collect()
    }

    /// Every desired state the renderer published so far, in order.
    pub fn desired_states(&self) -> &[pb::DesiredState] {
        &self.desired
    }
}

fn summarize(object: &Value) -> String {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let label = |key: &str| text(&format!("/metadata/labels/{}", key.replace('/', "~1")));
    let unit = if !label(naming::LABEL_CE_SOURCE).is_empty() {
        format!(
            "{}/{}",
            label(naming::LABEL_CE_SOURCE),
            label(naming::LABEL_CE_SUBJECT)
        )
    } else if !label(naming::LABEL_RESOURCE_NAME).is_empty() {
        format!(
            "{}/{}",
            label(naming::LABEL_RESOURCE_NAMESPACE),
            label(naming::LABEL_RESOURCE_NAME)
        )
    } else {
        "main".to_string()
    };
    let kind = text("/kind");
    let place = match text("/metadata/namespace") {
        "" => text("/metadata/name").to_string(),
        namespace => format!("{namespace}/{}", text("/metadata/name")),
    };
    let head = format!(
        "{kind} {place} of {}@{} [{unit}]",
        label(naming::LABEL_EVENT_TRIGGER),
        label(naming::LABEL_CLUSTER_NAME)
    );
    let list = |pointer: &str, item: &dyn Fn(&Value) -> String| {
        object
            .pointer(pointer)
            .and_then(Value::as_array)
            .map(|items| items.iter().map(item).collect::<Vec<_>>().join(","))
            .unwrap_or_default()
    };
    let field = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    match kind {
        "ClusterProfile" => {
            let target = match object.pointer("/spec/clusterSelector") {
                Some(selector) => format!("selector {selector}"),
                None => format!(
                    "clusters {}",
                    list("/spec/clusterRefs", &|r| format!(
                        "{}/{}",
                        field(r, "namespace"),
                        field(r, "name")
                    ))
                ),
            };
            let refs = list("/spec/policyRefs", &|r| {
                format!("{}/{}", field(r, "namespace"), field(r, "name"))
            });
            format!("{head} -> {target} refs {refs}")
        }
        "ConfigMap" | "Secret" => {
            let data = object
                .get("data")
                .and_then(Value::as_object)
                .map(|data| {
                    data.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("").trim()))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            format!("{head}: {data}")
        }
        _ => head,
    }
}
