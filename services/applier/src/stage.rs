//! The applier as a stage of the runner (`sluice_bus::runner`): a desired state in, its
//! `ApplyResult` out. Decoding checks what the executor relies on (a valid cluster, a desired
//! subject), so a malformed state is rejected to the dead letters instead of retried; a
//! Kubernetes error is retried when `sluice_kube::Error::is_transient` says so and rejected
//! otherwise. What follows from a result (the units to purge, the status to write) is decided by
//! the pure [`followups`] and executed here.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;
use std::time::SystemTime;

use sluice_bus::runner::{
    ending, Action, Claim, Failure, Input, Outcome, Output, SideMessage, Stage, Work,
};
use sluice_bus::topology::{self, StreamSpec};
use sluice_bus::{Bus, Delivered};
use sluice_domain::cluster::ClusterId;
use sluice_kube::watch::Written;
use sluice_proto::v1 as pb;
use sluice_runtime::schedule::Schedule;
use sluice_runtime::TraceContext;
use sluice_wire::BusKey;

use futures::{FutureExt as _, StreamExt as _};

use crate::executor::{Applier, Run};
use crate::repair::{Due, Repairs};
use crate::status::Statuses;
use sluice_wire::unit::{Unit, UnitKey};

/// Why a desired state was not applied; its type says retry or reject.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("failed to decode the desired state")]
    Decode(#[source] sluice_wire::Error),
    #[error("desired state names no valid cluster")]
    Cluster(#[source] sluice_wire::Error),
    #[error("desired state on {0}, which is not a desired-state subject")]
    ForeignSubject(String),
    #[error("failed to apply the desired state of {event_trigger}")]
    Kube {
        event_trigger: String,
        #[source]
        source: sluice_kube::Error,
    },
}

impl Failure for ApplyError {
    fn action(&self) -> Action {
        match self {
            ApplyError::Kube { source, .. } if source.is_transient() => Action::Retry,
            _ => Action::Reject,
        }
    }
}

/// A desired state checked for what the executor relies on.
#[derive(Debug)]
pub struct Desired {
    pub state: pb::DesiredState,
    pub cluster: ClusterId,
    /// Where its `ApplyResult` goes.
    pub applied_subject: String,
}

/// Decodes and checks one desired state; its sealed Secrets are opened with `key` (ADR 0023).
pub fn decode(delivered: &Delivered, key: Option<&BusKey>) -> Result<Desired, ApplyError> {
    let state = sluice_wire::decode_desired(delivered, key).map_err(ApplyError::Decode)?;
    let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), &delivered.subject)
        .map_err(ApplyError::Cluster)?;
    let applied_subject = topology::applied_subject_for(&delivered.subject)
        .ok_or_else(|| ApplyError::ForeignSubject(delivered.subject.clone()))?;
    Ok(Desired {
        state,
        cluster,
        applied_subject,
    })
}

/// What to do once a desired state is applied, decided from the state alone.
#[derive(Debug, Default, PartialEq)]
pub struct Followups {
    /// Streams and filters to purge: the removal of a pair's main unit takes the pair's other
    /// units' states and results off the streams.
    pub purge: Vec<(StreamSpec, String)>,
}

pub fn followups(state: &pb::DesiredState, cluster: &ClusterId) -> Followups {
    let key = UnitKey {
        event_trigger: state.event_trigger.clone(),
        cluster: cluster.clone(),
        unit: Unit::of(state),
    };
    if !(state.removed && key.unit == Unit::Main) {
        return Followups::default();
    }
    Followups {
        purge: key.other_units_filters(),
    }
}

/// The applier's stage: the executor, the statuses it keeps and the problems it reported.
pub(crate) struct ApplierStage {
    pub(crate) bus: Bus,
    pub(crate) applier: Arc<Applier>,
    pub(crate) statuses: Statuses,
    /// When each trigger's status is written next (at most once per second while its units
    /// keep changing: every write is a watch event the whole configuration feed carries).
    pub(crate) status_writes: StatusWrites,
    /// The problem last reported per unusable trigger, so each one is one Event.
    pub(crate) reported: BTreeMap<String, String>,
    /// The waits for a deletion told in Events (`Applier::report_waiting`).
    pub(crate) waiting_told: BTreeSet<String>,
    /// Units whose objects someone else deleted, to write again (ADR 0039).
    pub(crate) repairs: Repairs,
    /// Objects someone else deleted that were written again
    /// (`sluice_applier_objects_written_again_total`).
    pub(crate) written_again: sluice_runtime::Counter,
    /// Per owned kind, what is told to its watch of what was written
    /// (`sluice_kube::watch::Written`), so that a deletion the watch missed is found too.
    pub(crate) written: BTreeMap<String, Written>,
    /// Opens the Secrets of desired states (ADR 0023).
    pub(crate) key: Option<BusKey>,
    /// Triggers forgotten once gone (`sluice_applier_triggers_forgotten_total`).
    pub(crate) forgotten: sluice_runtime::Counter,
    /// The triggers with units in flight.
    pub(crate) in_flight: InFlight,
}

/// What the applier follows besides its consumer.
pub(crate) enum Side {
    /// The configuration feed of EventTriggers and EventBasedAddOns.
    Config(sluice_bus::Result<Delivered>),
    /// Objects of an owned kind that its watch saw go or someone else edit, each with the
    /// desired-state subject it named (`plan::desired_subject_of`), or the watch's list complete.
    Owned(&'static str, sluice_kube::watch::OwnedChanges),
    /// The watch of an owned kind failed; it goes on with backoff.
    WatchFailed(&'static str, String),
}

/// The units of a batch of desired states.
fn runs(inputs: &[Input<Desired>]) -> Vec<Run<'_>> {
    inputs
        .iter()
        .map(|input| Run {
            subject: &input.delivered.subject,
            state: &input.value.state,
            lost: &[],
            span: input.span,
        })
        .collect()
}

impl ApplierStage {
    /// The outcomes of a batch's executed units ([`ApplierStage::settle`]); each trigger's
    /// status is written once per batch.
    async fn settle_batch(
        &mut self,
        inputs: &[Input<Desired>],
        results: Vec<sluice_kube::Result<pb::ApplyResult>>,
    ) -> Vec<Outcome<ApplyError>> {
        let mut touched = BTreeSet::new();
        let mut outcomes = Vec::with_capacity(inputs.len());
        for (input, result) in inputs.iter().zip(results) {
            let settled = self.settle(&input.value, result, &mut touched).await;
            outcomes.push(settled.map(|output| vec![output]));
        }
        let now = tokio::time::Instant::now();
        for trigger in touched {
            self.status_writes.mark(&self.statuses, &trigger, now);
        }
        for (deferred, span) in self.in_flight.settled(inputs) {
            self.applier
                .release_if_done(&self.statuses, &deferred, span)
                .await;
        }
        self.write_due_statuses(now).await;
        outcomes
    }

    /// What follows from one executed unit: the wait for a deletion told, the purge of its
    /// pair's other units, its trigger's status marked (in `touched`); the `ApplyResult` to
    /// publish, or the error the unit fails with.
    async fn settle(
        &mut self,
        desired: &Desired,
        result: sluice_kube::Result<pb::ApplyResult>,
        touched: &mut BTreeSet<String>,
    ) -> Result<Output, ApplyError> {
        let result = match result {
            Ok(result) => result,
            Err(source) => {
                if matches!(source, sluice_kube::Error::Terminating { .. }) {
                    let trigger = &desired.state.event_trigger;
                    let kind = match desired.state.event_trigger_kind.as_str() {
                        "" => self.statuses.kind(trigger).to_string(),
                        kind => kind.to_string(),
                    };
                    self.applier
                        .report_waiting(&kind, trigger, &source, &mut self.waiting_told)
                        .await;
                }
                // A CRD may have been re-created: kinds are resolved again next time.
                self.applier.forget_kinds();
                return Err(ApplyError::Kube {
                    event_trigger: desired.state.event_trigger.clone(),
                    source,
                });
            }
        };
        for (stream, filter) in followups(&desired.state, &desired.cluster).purge {
            if let Err(error) = self.bus.purge(stream, &filter).await {
                tracing::warn!(error = %error, %filter, "failed to purge the units of a withdrawn trigger and cluster");
            }
        }
        // One line per unit is one per event: at debug, unless the unit failed (the
        // counters and the trigger's status tell the rest).
        if result.failure_message.is_empty() {
            tracing::debug!(
                event_trigger = %desired.state.event_trigger,
                applied = result.applied.len(),
                deleted = result.deleted.len(),
                "desired state applied"
            );
        } else {
            tracing::info!(
                event_trigger = %desired.state.event_trigger,
                applied = result.applied.len(),
                deleted = result.deleted.len(),
                failure = %result.failure_message,
                "desired state applied"
            );
        }
        if self.statuses.record(&result) {
            touched.insert(result.event_trigger.clone());
        }
        if let Some(desired_subject) = topology::desired_subject_for(&desired.applied_subject) {
            for applied in &result.applied {
                self.note_written(applied, &desired_subject);
            }
        }
        Ok(Output {
            subject: desired.applied_subject.clone(),
            // A removal's result is a tombstone: a replay that finds none reads the unit as
            // holding nothing, which is what it says.
            ttl: result.removed.then_some(topology::TOMBSTONE_TTL),
            payload: sluice_wire::encode(&result),
            ..Output::default()
        })
    }

    /// Tells the watch of `object`'s kind that it was written by the unit on `desired_subject`.
    pub(crate) fn note_written(&self, object: &pb::ObjectRef, desired_subject: &str) {
        if let Some(written) = self.written.get(&object.kind) {
            written.note(
                (object.namespace.clone(), object.name.clone()),
                desired_subject.to_string(),
            );
        }
    }

    /// Objects someone else deleted or edited: each one deleted the applier did not delete
    /// itself, and each one edited, is noted for its unit's repair.
    fn on_owned(&mut self, kind: &str, changes: sluice_kube::watch::OwnedChanges) {
        let now = tokio::time::Instant::now();
        if let Some(watched) = changes.listed {
            tracing::info!(%kind, watched, "the objects sluice wrote of this kind are listed: one someone else deletes or edits is written again");
        }
        let edited = changes.edited.into_iter().map(|object| (object, "edited"));
        let gone = changes.gone.into_iter().map(|object| (object, "deleted"));
        for (object, how) in edited.chain(gone) {
            let id = (kind.to_string(), object.namespace, object.name);
            if how == "deleted" && self.applier.own_deletion(&id) {
                continue;
            }
            tracing::info!(
                kind = %id.0,
                namespace = %id.1,
                name = %id.2,
                desired = %object.kept,
                "an object sluice wrote was {how} by someone else: it is written again from its desired state"
            );
            self.repairs.note(&object.kept, id, now);
        }
    }

    /// Repairs the units that are due: each unit's latest desired state is read from the
    /// stream and executed with its deleted or edited objects no longer counted as held, so
    /// that what it still wants is written again. A unit its stream no longer holds, or whose
    /// state wants nothing (removed, or failed: what exists is kept), is left as it is. A
    /// repair that fails is due again later.
    async fn repair_due(&mut self, now: tokio::time::Instant) -> Vec<Output> {
        // A unit is written by one at a time: one that a batch in flight writes is repaired
        // after it (which may have written it whole again). Nothing is repaired while units
        // wait for the seed at start: the watches that complete it are not read meanwhile.
        let seeding = self.applier.seed_keeps_waiting();
        let (busy, due): (Vec<Due>, Vec<Due>) = self
            .repairs
            .take_due(now, crate::repair::MOST_AT_ONCE)
            .into_iter()
            .partition(|due| seeding || self.in_flight.writes(&due.subject));
        for due in busy {
            self.repairs.retry(due, now);
        }
        if due.is_empty() {
            return Vec::new();
        }
        let bus = &self.bus;
        let read: Vec<_> = futures::stream::iter(due)
            .map(|due| async move {
                let last = bus.last_state(topology::DESIRED, &due.subject).await;
                (due, last)
            })
            .buffered(16)
            .collect()
            .await;
        let mut units: Vec<(Due, Desired)> = Vec::new();
        for (due, last) in read {
            let delivered = match last {
                Ok(Some(delivered)) => delivered,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(subject = %due.subject, error = %error, "failed to read a desired state to repair");
                    self.repairs.retry(due, now);
                    continue;
                }
            };
            let desired = match decode(&delivered, self.key.as_ref()) {
                Ok(desired) => desired,
                Err(error) => {
                    tracing::warn!(subject = %due.subject, error = %sluice_runtime::error_chain(&error), "a desired state to repair does not decode: left as it is");
                    continue;
                }
            };
            if desired.state.removed || !desired.state.failure_message.is_empty() {
                continue;
            }
            units.push((due, desired));
        }
        // Each repair begins a trace of its own, when spans are exported.
        let spans: Vec<Option<TraceContext>> = units.iter().map(|_| own_trace()).collect();
        let began = SystemTime::now();
        let states: Vec<Run<'_>> = units
            .iter()
            .zip(&spans)
            .map(|((due, desired), span)| Run {
                subject: &due.subject,
                state: &desired.state,
                lost: &due.gone,
                span: *span,
            })
            .collect();
        let results = self.applier.execute_all(&states).await;
        let mut touched = BTreeSet::new();
        let mut outputs = Vec::with_capacity(units.len());
        for (((due, desired), result), span) in units.into_iter().zip(results).zip(spans) {
            let written = result.as_ref().map_or(0, |r| {
                r.applied
                    .iter()
                    .filter(|a| due.gone.contains(&crate::plan::ref_id(a)))
                    .count()
            });
            let settled = self.settle(&desired, result, &mut touched).await;
            record_own_step(span, "repair", &due.subject, began, settled.as_ref().err());
            match settled {
                Ok(output) => {
                    self.written_again.add(written as u64);
                    outputs.push(Output {
                        trace: span,
                        ..output
                    });
                }
                Err(error) if error.action() == Action::Retry => {
                    tracing::warn!(subject = %due.subject, error = %sluice_runtime::error_chain(&error), "failed to repair a unit: tried again later");
                    self.repairs.retry(due, now);
                }
                Err(error) => {
                    tracing::warn!(subject = %due.subject, error = %sluice_runtime::error_chain(&error), "cannot repair a unit: left as it is until its desired state changes");
                }
            }
        }
        for trigger in touched {
            self.status_writes.mark(&self.statuses, &trigger, now);
        }
        outputs
    }

    /// Removes what the units of `removals` hold (`orphans`: their removals expired unseen);
    /// returns their results, to be published before the first desired state is taken. A
    /// removal that fails is logged: its unit's objects stay until it is removed again.
    pub(crate) async fn remove_orphans(&mut self, removals: Vec<(String, Desired)>) -> Vec<Output> {
        if removals.is_empty() {
            return Vec::new();
        }
        tracing::info!(
            units = removals.len(),
            "units whose removal expired unseen: what they hold is removed"
        );
        // Each removal begins a trace of its own, when spans are exported.
        let spans: Vec<Option<TraceContext>> = removals.iter().map(|_| own_trace()).collect();
        let began = SystemTime::now();
        let states: Vec<Run<'_>> = removals
            .iter()
            .zip(&spans)
            .map(|((subject, desired), span)| Run {
                subject,
                state: &desired.state,
                lost: &[],
                span: *span,
            })
            .collect();
        let results = self.applier.execute_all(&states).await;
        let mut touched = BTreeSet::new();
        let mut outputs = Vec::with_capacity(removals.len());
        for (((subject, desired), result), span) in removals.iter().zip(results).zip(spans) {
            let settled = self.settle(desired, result, &mut touched).await;
            record_own_step(span, "remove", subject, began, settled.as_ref().err());
            match settled {
                Ok(output) => outputs.push(Output {
                    trace: span,
                    ..output
                }),
                Err(error) => {
                    tracing::warn!(subject = %desired.applied_subject, error = %sluice_runtime::error_chain(&error), "failed to remove a unit whose removal expired unseen");
                }
            }
        }
        let now = tokio::time::Instant::now();
        for trigger in touched {
            self.status_writes.mark(&self.statuses, &trigger, now);
        }
        outputs
    }

    /// Writes the statuses that are due.
    async fn write_due_statuses(&mut self, now: tokio::time::Instant) {
        for trigger in self.status_writes.schedule.take_due(now) {
            self.write_status(&trigger).await;
        }
    }

    /// Writes every status still to write (the runner has drained: nothing else comes).
    pub(crate) async fn write_pending_statuses(&mut self) {
        let now = tokio::time::Instant::now();
        for trigger in self.status_writes.schedule.take_all(now) {
            self.write_status(&trigger).await;
        }
    }

    /// Writes one trigger's status; a trigger the write finds gone is forgotten.
    async fn write_status(&mut self, trigger: &str) {
        if self.applier.write_status(&self.statuses, trigger).await {
            self.forget_trigger(trigger);
        }
    }

    /// Forgets a trigger that is gone once nothing is recorded for it (no cluster, no unit):
    /// triggers come and go under new names. One for which sluice still owns something is
    /// forgotten after its removal, when its status write finds it gone.
    fn forget_trigger(&mut self, trigger: &str) {
        if !self.statuses.knows(trigger) {
            return;
        }
        self.statuses.forget(trigger);
        if !self.statuses.knows(trigger) {
            self.status_writes.forget(trigger);
            self.forgotten.inc();
        }
    }
}

/// The triggers and the units (by desired-state subject) in flight (batches overlap, ADR
/// 0043), and the configuration of those being deleted whose release waits for them (with the
/// span of the message, under which the release is recorded).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    units: BTreeMap<String, usize>,
    subjects: BTreeMap<String, usize>,
    deferred: BTreeMap<String, (Delivered, Option<TraceContext>)>,
}

impl InFlight {
    fn add(&mut self, inputs: &[Input<Desired>]) {
        for input in inputs {
            *self
                .units
                .entry(input.value.state.event_trigger.clone())
                .or_default() += 1;
            *self
                .subjects
                .entry(input.delivered.subject.clone())
                .or_default() += 1;
        }
    }

    fn has(&self, trigger: &str) -> bool {
        self.units.contains_key(trigger)
    }

    /// Whether a batch in flight writes the unit of `subject`.
    fn writes(&self, subject: &str) -> bool {
        self.subjects.contains_key(subject)
    }

    fn defer(&mut self, trigger: String, config: Delivered, span: Option<TraceContext>) {
        self.deferred.insert(trigger, (config, span));
    }

    /// Counts `inputs` settled; returns the deferred configuration of each trigger that has
    /// no unit in flight any more.
    fn settled(&mut self, inputs: &[Input<Desired>]) -> Vec<(Delivered, Option<TraceContext>)> {
        let mut done = Vec::new();
        for input in inputs {
            let subject = &input.delivered.subject;
            if let Some(count) = self.subjects.get_mut(subject) {
                *count -= 1;
                if *count == 0 {
                    self.subjects.remove(subject);
                }
            }
            let trigger = &input.value.state.event_trigger;
            if let Some(count) = self.units.get_mut(trigger) {
                *count -= 1;
                if *count == 0 {
                    self.units.remove(trigger);
                    done.extend(self.deferred.remove(trigger));
                }
            }
        }
        done
    }
}

/// The name of the trigger a configuration message is of, and whether it says it is deleted.
fn trigger_of(delivered: &Delivered) -> Option<(String, bool)> {
    let config = sluice_wire::decode::<pb::ConfigObject>("ConfigObject", delivered).ok()?;
    Some((config.name, config.deleted))
}

/// The paced status writes: a trigger's status is written as soon as it changes, then at most
/// once per [`sluice_runtime::schedule::INTERVAL`] while it keeps changing, except that a
/// change of whether sluice owns anything for the trigger (its finalizer) is written at once.
#[derive(Debug, Default)]
pub(crate) struct StatusWrites {
    schedule: Schedule<String>,
    /// Whether the trigger owned anything as its status was last marked.
    owned: BTreeMap<String, bool>,
}

impl StatusWrites {
    /// Asks for `trigger`'s status to be written.
    pub(crate) fn mark(&mut self, statuses: &Statuses, trigger: &str, now: tokio::time::Instant) {
        let owns = statuses.owns_anything(trigger);
        let key = trigger.to_string();
        if self.owned.insert(key.clone(), owns) != Some(owns) {
            self.schedule.mark_now(&key, now);
        } else {
            self.schedule.mark(&key, now);
        }
    }

    pub(crate) fn next_due(&self) -> Option<tokio::time::Instant> {
        self.schedule.next_due()
    }

    /// Forgets a trigger that is gone: its next status, if it comes back, is written at once.
    pub(crate) fn forget(&mut self, trigger: &str) {
        self.owned.remove(trigger);
        self.schedule.forget(&trigger.to_string());
    }
}

impl Stage for ApplierStage {
    type Input = Desired;
    type Side = Side;
    type Error = ApplyError;

    fn decode(&self, delivered: &Delivered) -> Result<Desired, ApplyError> {
        decode(delivered, self.key.as_ref())
    }

    /// Batches overlap: the next starts while an earlier one's units still wait for the API
    /// server (ADR 0043).
    const IN_FLIGHT: usize = 2;

    /// A unit shares its (trigger, cluster) pair with the pair's other units, except the
    /// removal of the pair's main unit, which takes everything of the pair and holds it whole.
    fn claim(&self, input: &Desired) -> Option<Claim> {
        let pair = format!("{}\u{0}{}", input.state.event_trigger, input.cluster);
        Some(
            if input.state.removed && Unit::of(&input.state) == Unit::Main {
                Claim::Whole(pair)
            } else {
                Claim::Shared(pair)
            },
        )
    }

    fn begin(&mut self, inputs: Arc<[Input<Desired>]>) -> Option<Work<Self>> {
        self.in_flight.add(&inputs);
        let applier = self.applier.clone();
        Some(Box::pin(async move {
            let results = applier.execute_all(&runs(&inputs)).await;
            ending(move |stage: &mut ApplierStage| {
                async move { stage.settle_batch(&inputs, results).await }.boxed()
            })
        }))
    }

    async fn handle(&mut self, inputs: &[Input<Desired>]) -> Vec<Outcome<ApplyError>> {
        self.in_flight.add(inputs);
        let results = self.applier.execute_all(&runs(inputs)).await;
        self.settle_batch(inputs, results).await
    }

    fn next_tick(&self) -> Option<tokio::time::Instant> {
        match (self.status_writes.next_due(), self.repairs.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn on_tick(&mut self) -> Vec<Output> {
        let now = tokio::time::Instant::now();
        let outputs = self.repair_due(now).await;
        self.write_due_statuses(now).await;
        outputs
    }

    /// A trigger's configuration message: its span, the parent of the release of its finalizer
    /// and of the Event that says why it cannot be used.
    fn side_messages(&self, side: &Side) -> Vec<SideMessage> {
        match side {
            Side::Config(Ok(delivered)) => vec![delivered.side_message(topology::CONFIG.name)],
            _ => Vec::new(),
        }
    }

    async fn on_side(&mut self, side: Side, span: Option<TraceContext>) -> Vec<Output> {
        match side {
            Side::Config(Ok(delivered)) => {
                let trigger = trigger_of(&delivered);
                match &trigger {
                    // What a unit in flight wrote is not recorded yet: whether the trigger is
                    // done is asked again once its units have settled.
                    Some((name, _)) if self.in_flight.has(name) => {
                        self.in_flight.defer(name.clone(), delivered.clone(), span);
                    }
                    _ => {
                        self.applier
                            .release_if_done(&self.statuses, &delivered, span)
                            .await
                    }
                }
                self.applier
                    .report_invalid(&delivered, &mut self.reported, span)
                    .await;
                if let Some((name, true)) = trigger {
                    self.forget_trigger(&name);
                }
            }
            Side::Config(Err(error)) => {
                tracing::warn!(error = %error, "skipping a configuration message")
            }
            Side::Owned(kind, changes) => self.on_owned(kind, changes),
            Side::WatchFailed(kind, error) => {
                tracing::warn!(%kind, %error, "the watch of the objects sluice wrote failed: it goes on")
            }
        }
        Vec::new()
    }
}

/// A trace of the applier's own, for a step no input asked for (a repair, the removal of a unit
/// whose removal expired unseen): `None` when spans are not exported.
fn own_trace() -> Option<TraceContext> {
    sluice_runtime::spans::spans_enabled().then(TraceContext::new_root)
}

/// Records a step of the applier's own (`what`: `repair`, `remove`) on the unit `subject` as
/// the root span of its trace (`span`), from `began` until now; its API requests are under it.
fn record_own_step(
    span: Option<TraceContext>,
    what: &'static str,
    subject: &str,
    began: SystemTime,
    error: Option<&ApplyError>,
) {
    use sluice_runtime::spans::{Attribute, Kind, Span};
    let Some(context) = span else {
        return;
    };
    sluice_runtime::spans::record(Span {
        context,
        parent: None,
        name: format!("{what} {}", topology::DESIRED.name).into(),
        kind: Kind::Internal,
        start: began,
        end: SystemTime::now(),
        attributes: vec![
            Attribute::new("sluice.stream", topology::DESIRED.name),
            Attribute::new("sluice.unit", subject.to_owned()),
        ],
        error: error.map(|error| sluice_runtime::error_chain(error)),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use sluice_domain::cluster::ClusterType;

    fn delivered(subject: &str, state: &pb::DesiredState) -> Delivered {
        Delivered {
            subject: subject.to_string(),
            sequence: 1,
            payload: state.encode_to_vec().into(),
            traceparent: None,
        }
    }

    fn cluster() -> ClusterId {
        ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: "cluster-a".into(),
        }
    }

    fn state(removed: bool) -> pb::DesiredState {
        pb::DesiredState {
            event_trigger: "t".into(),
            cluster: Some(sluice_wire::cluster_ref(&cluster())),
            removed,
            ..Default::default()
        }
    }

    fn subject() -> String {
        topology::desired_subject("t", &sluice_wire::cluster_tokens(&cluster()))
    }

    #[test]
    fn a_malformed_desired_state_is_rejected_not_retried() {
        let garbage = Delivered {
            payload: bytes::Bytes::from_static(&[0xff, 0xff, 0xff]),
            ..delivered(&subject(), &state(false))
        };
        let error = decode(&garbage, None).expect_err("not protobuf");
        assert!(matches!(error, ApplyError::Decode(_)));
        assert_eq!(error.action(), Action::Reject);

        let no_cluster = pb::DesiredState {
            cluster: None,
            ..state(false)
        };
        let error = decode(&delivered(&subject(), &no_cluster), None).expect_err("no cluster");
        assert!(matches!(error, ApplyError::Cluster(_)));
        assert_eq!(error.action(), Action::Reject);

        let error =
            decode(&delivered("sluice.v1.match.x", &state(false)), None).expect_err("foreign");
        assert_eq!(error.action(), Action::Reject);

        let ok = decode(&delivered(&subject(), &state(false)), None).expect("valid");
        assert_eq!(
            ok.applied_subject,
            topology::applied_subject("t", &sluice_wire::cluster_tokens(&cluster()))
        );
    }

    /// A trigger being deleted is released only once none of its units is in flight: what one
    /// wrote is recorded when it settles.
    #[test]
    fn a_release_waits_for_the_triggers_units_in_flight_and_a_repair_for_the_units() {
        let input = |trigger: &str| Input {
            span: None,
            delivered: delivered(&subject(), &state(false)),
            value: Desired {
                state: pb::DesiredState {
                    event_trigger: trigger.into(),
                    ..state(false)
                },
                cluster: cluster(),
                applied_subject: String::new(),
            },
        };
        let config = |name: &str| Delivered {
            subject: format!("sluice.v1.config.EventTrigger._.{name}"),
            ..delivered(&subject(), &state(false))
        };
        let mut in_flight = InFlight::default();
        let first = [input("t"), input("u")];
        let second = [input("t")];
        in_flight.add(&first);
        in_flight.add(&second);
        assert!(in_flight.has("t") && in_flight.has("u") && !in_flight.has("v"));
        assert!(in_flight.writes(&subject()) && !in_flight.writes("other"));
        in_flight.defer("t".into(), config("old"), None);
        in_flight.defer("t".into(), config("new"), None);
        assert!(
            in_flight.settled(&first).is_empty(),
            "one unit of t still in flight"
        );
        assert!(!in_flight.has("u"));
        assert!(
            in_flight.writes(&subject()),
            "the second batch still writes it"
        );
        let released = in_flight.settled(&second);
        assert_eq!(released.len(), 1);
        assert!(
            released[0].0.subject.ends_with("new"),
            "the newest configuration"
        );
        assert!(!in_flight.has("t"));
        assert!(!in_flight.writes(&subject()), "no batch writes it any more");
        assert!(in_flight.settled(&second).is_empty());
    }

    #[test]
    fn kubernetes_errors_retry_only_when_transient() {
        let kube = |code: u16| ApplyError::Kube {
            event_trigger: "t".into(),
            source: sluice_kube::Error::Request {
                verb: "apply",
                kind: "ClusterProfile".into(),
                name: "x".into(),
                source: Box::new(kube::Error::Api(
                    kube::core::Status {
                        code,
                        ..kube::core::Status::failure("refused", "Refused")
                    }
                    .boxed(),
                )),
            },
        };
        assert_eq!(kube(503).action(), Action::Retry);
        assert_eq!(kube(409).action(), Action::Retry);
        assert_eq!(kube(422).action(), Action::Reject);
        assert_eq!(kube(400).action(), Action::Reject);
        // Fixed by the operator (RBAC, a namespace or CRD created), not by another input.
        assert_eq!(kube(403).action(), Action::Retry);
        assert_eq!(kube(404).action(), Action::Retry);
    }

    /// A trigger's status is written when it first changes, then at most once per interval
    /// while its units keep changing; whether sluice owns anything (the finalizer) goes out at
    /// once.
    #[test]
    fn status_writes_are_paced_except_for_the_finalizer() {
        use sluice_runtime::schedule::INTERVAL;
        let result = |unit: &str, removed: bool| pb::ApplyResult {
            event_trigger: "t".into(),
            cluster: Some(sluice_wire::cluster_ref(&cluster())),
            resource_name: unit.into(),
            deployed_hash: unit.as_bytes().to_vec(),
            removed,
            ..Default::default()
        };
        let start = tokio::time::Instant::now();
        let mut statuses = Statuses::default();
        let mut writes = StatusWrites::default();
        assert!(statuses.record(&result("", false)));
        writes.mark(&statuses, "t", start);
        assert_eq!(
            writes.schedule.take_due(start),
            ["t"],
            "the first change at once"
        );
        for (ms, unit) in [(10, "a"), (20, "b"), (30, "c")] {
            let now = start + std::time::Duration::from_millis(ms);
            assert!(statuses.record(&result(unit, false)));
            writes.mark(&statuses, "t", now);
            assert!(writes.schedule.take_due(now).is_empty(), "{unit} waits");
        }
        assert_eq!(
            writes.next_due(),
            Some(start + INTERVAL),
            "one write for the burst"
        );
        statuses.forget("t");
        assert!(statuses.knows("t"), "a trigger that owns something stays");
        let now = start + std::time::Duration::from_millis(40);
        assert!(
            statuses.record(&result("", true)),
            "the main unit withdrawn"
        );
        writes.mark(&statuses, "t", now);
        assert_eq!(
            writes.schedule.take_due(now),
            ["t"],
            "owning nothing any more releases the finalizer at once"
        );
        // The trigger is gone: nothing of it is kept, and one of the same name that comes
        // later is written at once.
        statuses.forget("t");
        assert!(!statuses.knows("t"));
        writes.forget("t");
        let later = now + std::time::Duration::from_millis(10);
        writes.mark(&statuses, "t", later);
        assert_eq!(writes.schedule.take_due(later), ["t"]);
    }

    #[test]
    fn only_the_removal_of_a_main_unit_purges_the_pairs_other_units() {
        assert_eq!(followups(&state(false), &cluster()), Followups::default());
        let tokens = sluice_wire::cluster_tokens(&cluster());
        assert_eq!(
            followups(&state(true), &cluster()).purge,
            vec![
                (
                    topology::DESIRED,
                    topology::desired_units_filter("t", &tokens)
                ),
                (
                    topology::APPLIED,
                    topology::applied_units_filter("t", &tokens)
                ),
            ]
        );
        let unit = pb::DesiredState {
            resource_name: "web".into(),
            ..state(true)
        };
        assert_eq!(followups(&unit, &cluster()), Followups::default());
    }
}
