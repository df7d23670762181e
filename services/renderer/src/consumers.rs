//! The renderer's two stages on the stage runner (`sluice_bus::runner`), sharing one rendering
//! [`Stage`]: [`MatchStage`] consumes the match units (groups of consecutive units of one set
//! rendered together, a head closing the group) and follows the configuration as its side feed
//! (a burst rendered once); [`CloudEventStage`] consumes the CloudEvent matches. Each has its
//! own durable consumer, ack window and dead letters; the runner acks an input once the desired
//! states it rendered are stored.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt as _;

use sluice_bus::runner::{self, Action, Failure, Input, Outcome, Output, Owned, SideMessage};
use sluice_bus::{topology, Bus, Delivered};
use sluice_proto::v1 as pb;
use sluice_runtime::Counter;
use sluice_wire::match_units::{self, Applied, HeadOutcome, Unit};
use tokio::sync::Mutex;

use crate::group::Group;
use crate::{desired_messages, Stage};

/// How many stored states of forgotten CloudEvent units it reads at once.
const UNIT_READS_AT_ONCE: usize = 64;

/// The rendering state both stages work on, and what publishing needs.
pub struct Rendering {
    pub stage: Stage,
    pub bus: Bus,
    pub key: Option<sluice_wire::BusKey>,
    pub published: Counter,
}

impl Rendering {
    /// Reads from `SLUICE_DESIRED` the state of each CloudEvent unit of `states` that it
    /// forgot ([`CloudEventOrder::unknown`](crate::order::CloudEventOrder::unknown)), so that a
    /// later event's state stored there still outranks an older event arriving now. The reads
    /// run concurrently; returns the units whose state could not be read, with why.
    async fn learn_unknown_units(
        &mut self,
        states: &[&pb::DesiredState],
    ) -> BTreeMap<String, String> {
        let order = self.stage.cloud_event_order();
        if !order.forgot_any() {
            return BTreeMap::new();
        }
        let unknown: BTreeSet<String> = states
            .iter()
            .filter_map(|state| sluice_wire::unit::UnitKey::of(state).ok())
            .map(|unit| unit.desired_subject())
            .filter(|subject| order.unknown(subject))
            .collect();
        let (bus, key) = (&self.bus, self.key.as_ref());
        let read: Vec<_> = futures::stream::iter(unknown)
            .map(|subject| async move {
                let stored = bus.last_state(topology::DESIRED, &subject).await;
                (subject, stored)
            })
            .buffer_unordered(UNIT_READS_AT_ONCE)
            .collect()
            .await;
        let mut unread = BTreeMap::new();
        for (subject, stored) in read {
            match stored {
                Ok(stored) => {
                    let (origin, position) = stored
                        .and_then(|delivered| sluice_wire::decode_desired(&delivered, key).ok())
                        .map(|stored| (stored.cloud_event_origin, stored.cloud_event_position))
                        .unwrap_or_default();
                    self.stage
                        .cloud_event_order()
                        .remember(&subject, &origin, position);
                }
                Err(error) => {
                    unread.insert(subject, sluice_runtime::error_chain(&error));
                }
            }
        }
        unread
    }

    /// The messages of `states` rendered for `cause`, counted as published.
    pub(crate) fn outputs(
        &self,
        states: Vec<pb::DesiredState>,
        cause: &str,
    ) -> Result<Vec<Output>, sluice_wire::Error> {
        let outputs = desired_messages(states, cause, self.bus.payload_limit(), self.key.as_ref())?;
        self.published.add(outputs.len() as u64);
        Ok(outputs)
    }
}

/// Why an input was not rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("failed to decode the match unit")]
    Unit(#[source] sluice_wire::Error),
    #[error("failed to decode the cloudevent match")]
    CloudEventMatch(#[source] sluice_wire::Error),
    #[error("a desired state rendered from this input cannot be published")]
    Outputs(#[source] sluice_wire::Error),
    /// The set (`cluster/eventsource`) and why.
    #[error("failed to re-read match set {0} from the stream")]
    Reread(String, #[source] sluice_wire::Error),
    #[error("not rendered: an earlier input of its batch stopped the stage")]
    Abandoned,
    /// A CloudEvent unit it forgot whose stored state could not be read (its subject, and why).
    #[error("failed to read the stored state of cloudevent unit {subject}: {reason}")]
    Unread { subject: String, reason: String },
}

impl Failure for RenderError {
    fn action(&self) -> Action {
        match self {
            RenderError::Unit(_) | RenderError::CloudEventMatch(_) | RenderError::Outputs(_) => {
                Action::Reject
            }
            // The set is half re-read: the process restarts and rebuilds it from the stream.
            RenderError::Reread(..) | RenderError::Abandoned => Action::Stop,
            // The bus is away for the moment: the match comes again.
            RenderError::Unread { .. } => Action::Retry,
        }
    }
}

/// The match-unit stage.
pub struct MatchStage {
    pub rendering: Arc<Mutex<Rendering>>,
    /// Opens the managed clusters' Secrets a member collects, as it is decoded.
    pub key: Option<sluice_wire::BusKey>,
}

impl runner::Stage for MatchStage {
    type Input = Owned<Unit>;
    type Side = Vec<sluice_wire::Result<sluice_wire::ConfigUpdate>>;
    type Error = RenderError;
    const JOINT: bool = true;

    fn decode(&self, delivered: &Delivered) -> Result<Owned<Unit>, RenderError> {
        match_units::decode(delivered, self.key.as_ref())
            .map(Owned::new)
            .map_err(RenderError::Unit)
    }

    async fn handle(&mut self, inputs: &[Input<Owned<Unit>>]) -> Vec<Outcome<RenderError>> {
        let mut rendering = self.rendering.lock().await;
        let mut outcomes: Vec<Outcome<RenderError>> = Vec::with_capacity(inputs.len());
        let mut group: Option<Group> = None;
        for (index, input) in inputs.iter().enumerate() {
            // Acked with the batch when it renders nothing of its own.
            outcomes.push(Ok(Vec::new()));
            let Some(unit) = input.value.take() else {
                continue;
            };
            let sequence = input.delivered.sequence;
            let member = Group::member_id(&unit);
            let Some((key, applied)) = rendering.stage.apply(unit, sequence) else {
                continue;
            };
            let (closed, open) = Group::join(&mut group, &key, index, sequence);
            if let Some(done) = closed {
                close(&mut rendering, done, &mut outcomes);
            }
            if applied == Applied::Head(HeadOutcome::Differs) {
                let Rendering {
                    stage,
                    bus,
                    key: bus_key,
                    ..
                } = &mut *rendering;
                match stage.sets.reread(bus, &key, bus_key.as_ref()).await {
                    Ok(changed) => open.change.add_members(&stage.sets, changed),
                    Err(source) => {
                        outcomes[index] =
                            Err(RenderError::Reread(format!("{}/{}", key.0, key.1), source));
                        outcomes
                            .extend((index + 1..inputs.len()).map(|_| Err(RenderError::Abandoned)));
                        return outcomes;
                    }
                }
            }
            open.record(&rendering.stage.sets, &applied, member, index, sequence);
        }
        if let Some(done) = group {
            close(&mut rendering, done, &mut outcomes);
        }
        outcomes
    }

    fn side_messages(
        &self,
        updates: &Vec<sluice_wire::Result<sluice_wire::ConfigUpdate>>,
    ) -> Vec<SideMessage> {
        updates
            .iter()
            .flatten()
            .map(|update| update.side_message())
            .collect()
    }

    async fn on_side(
        &mut self,
        updates: Vec<sluice_wire::Result<sluice_wire::ConfigUpdate>>,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        let mut rendering = self.rendering.lock().await;
        // A burst of configuration changes is applied whole and rendered once.
        let mut changed = None;
        for update in updates {
            match update {
                Ok(update) => {
                    if update.apply_to(&mut rendering.stage.config) {
                        changed = Some(update.sequence);
                    }
                }
                Err(error) => tracing::warn!(error = %error, "skipping config message"),
            }
        }
        let Some(sequence) = changed else {
            return Vec::new();
        };
        let states = tokio::task::block_in_place(|| rendering.stage.recompute(None, sequence));
        let mut outputs = rendering.outputs(states, "config").unwrap_or_else(|error| {
            tracing::error!(error = %error, "desired states of a configuration change cannot be published");
            Vec::new()
        });
        // What the burst changed continues the trace of its last change.
        for output in &mut outputs {
            output.source = Some(sequence);
        }
        outputs
    }
}

/// Renders a closed group and puts its outputs on its last input's outcome.
fn close(rendering: &mut Rendering, group: Group, outcomes: &mut [Outcome<RenderError>]) {
    let states = if group.renders() {
        tokio::task::block_in_place(|| {
            rendering
                .stage
                .recompute(Some(&group.change), group.sequence)
        })
    } else {
        Vec::new()
    };
    outcomes[group.last] = rendering
        .outputs(states, "match")
        .map_err(RenderError::Outputs);
}

/// The CloudEvent-match stage.
pub struct CloudEventStage {
    pub rendering: Arc<Mutex<Rendering>>,
    /// CloudEvent units whose newest match was forgotten at the consumer's ack floor.
    pub forgotten: Counter,
}

impl runner::Stage for CloudEventStage {
    type Input = pb::CloudEventMatch;
    type Side = std::convert::Infallible;
    type Error = RenderError;

    fn decode(&self, delivered: &Delivered) -> Result<pb::CloudEventMatch, RenderError> {
        sluice_wire::decode("CloudEventMatch", delivered).map_err(RenderError::CloudEventMatch)
    }

    async fn handle(&mut self, inputs: &[Input<pb::CloudEventMatch>]) -> Vec<Outcome<RenderError>> {
        let mut rendering = self.rendering.lock().await;
        let Rendering { stage, bus, .. } = &mut *rendering;
        let order = stage.cloud_event_order();
        if order.wants_pruning() {
            let floor = match bus.ack_floor(&topology::RENDERER_CEMATCH).await {
                Ok(floor) => Some(floor),
                Err(error) => {
                    tracing::debug!(error = %sluice_runtime::error_chain(&error), "ack floor not read, cloudevent units pruned later");
                    None
                }
            };
            self.forgotten.add(order.prune(floor) as u64);
        }
        let rendered: Vec<Vec<pb::DesiredState>> = inputs
            .iter()
            .map(|input| {
                tokio::task::block_in_place(|| {
                    rendering
                        .stage
                        .render_cloud_event(&input.value, input.delivered.sequence)
                })
            })
            .collect();
        let unread = rendering
            .learn_unknown_units(&rendered.iter().flatten().collect::<Vec<_>>())
            .await;
        let mut outcomes = Vec::with_capacity(inputs.len());
        for states in rendered {
            let failed = (!unread.is_empty()).then(|| {
                states.iter().find_map(|state| {
                    let subject = sluice_wire::unit::UnitKey::of(state)
                        .ok()?
                        .desired_subject();
                    let reason = unread.get(&subject)?.clone();
                    Some(RenderError::Unread { subject, reason })
                })
            });
            if let Some(error) = failed.flatten() {
                outcomes.push(Err(error));
                continue;
            }
            let states = rendering.stage.newer_cloud_events(states);
            outcomes.push(
                rendering
                    .outputs(states, "cloudevent")
                    .map_err(RenderError::Outputs),
            );
        }
        outcomes
    }

    async fn on_side(
        &mut self,
        side: std::convert::Infallible,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match side {}
    }
}
