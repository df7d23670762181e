//! The reporter's stage on the stage runner (`sluice_bus::runner`): it consumes the match units
//! (nothing is published for one: the runner acks it once read), follows the apply results as
//! its side feed (their failures go to the reports' statuses at once), and writes the reports
//! the [`Schedule`] says are due on the runner's tick. What each write is, [`decide`] says from
//! data; [`execute`] carries it out.

use std::time::Duration;

use sluice_bus::runner::{Action, Failure, Input, Outcome, Output, Owned, Stage};
use sluice_bus::{topology, Bus, Delivered};
use sluice_kube::apply::Kind;
use sluice_proto::v1 as pb;
use sluice_runtime::Counter;
use sluice_runtime::TraceContext;
use sluice_wire::match_units::{self, Applied, HeadOutcome, MatchSets, SetKey, Unit};
use tokio::time::Instant;

use crate::failures::Failures;
use crate::{decide, execute, member_failures, view_too_large, write_status, EVENT_REPORT_LIMIT};
use sluice_runtime::schedule::Schedule;

/// How long a report whose write failed transiently waits before it is written again.
const RETRY_DELAY: Duration = Duration::from_millis(500);

/// The sets, when their reports are due, the failures their statuses show, and what writing
/// needs.
pub struct ReporterStage {
    pub bus: Bus,
    /// Opens the managed clusters' Secrets a set collects (the report shows them, as Sveltos's
    /// does).
    pub key: Option<sluice_wire::BusKey>,
    pub client: kube::Client,
    pub kind: Kind,
    pub sets: MatchSets,
    pub schedule: Schedule<SetKey>,
    pub failures: Failures,
    pub written: Counter,
    pub errors: Counter,
    /// What is told to the watch of the reports of each one written, so that a deletion the
    /// watch missed is found too (`sluice_kube::watch::Written`).
    pub watched: sluice_kube::watch::Written,
    /// When spans are exported: per set whose report is due, the span of the input that last
    /// changed it, under which the report's requests are recorded (ADR 0045).
    pub spans: std::collections::HashMap<SetKey, TraceContext>,
    /// When spans are exported: per set whose report is to be written again because someone
    /// else deleted or edited it (and no input changed it since), when that began; its span in
    /// `spans` is then the root of a trace of its own (ADR 0045).
    pub repairs: std::collections::HashMap<SetKey, std::time::SystemTime>,
}

/// Why a match unit was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("failed to decode the match unit")]
    Unit(#[source] sluice_wire::Error),
    /// The set (`cluster/eventsource`) and why.
    #[error("failed to re-read match set {0} from the stream")]
    Reread(String, #[source] sluice_wire::Error),
    #[error("not read: an earlier input of its batch stopped the stage")]
    Abandoned,
}

impl Failure for ReportError {
    fn action(&self) -> Action {
        match self {
            ReportError::Unit(_) => Action::Reject,
            // The set is half re-read: the process restarts and rebuilds it from the stream.
            ReportError::Reread(..) | ReportError::Abandoned => Action::Stop,
        }
    }
}

/// What the reporter follows besides its consumer.
pub enum Side {
    /// The apply results (rendering failures for the reports' statuses).
    Applied(sluice_bus::Result<Delivered>),
    /// EventReports its watch saw go or someone else edit (or the watch's list complete).
    Owned(sluice_kube::watch::OwnedChanges),
    /// The watch of EventReports failed; it goes on with backoff.
    WatchFailed(String),
}

impl Stage for ReporterStage {
    type Input = Owned<Unit>;
    type Side = Side;
    type Error = ReportError;
    /// It publishes nothing: a batch is one entry of the window, acked by one covering ack.
    const JOINT: bool = true;

    fn decode(&self, delivered: &Delivered) -> Result<Owned<Unit>, ReportError> {
        match_units::decode(delivered, self.key.as_ref())
            .map(Owned::new)
            .map_err(ReportError::Unit)
    }

    async fn handle(&mut self, inputs: &[Input<Owned<Unit>>]) -> Vec<Outcome<ReportError>> {
        let mut outcomes = Vec::with_capacity(inputs.len());
        for (index, input) in inputs.iter().enumerate() {
            let Some(unit) = input.value.take() else {
                outcomes.push(Ok(Vec::new()));
                continue;
            };
            if let Some((key, Applied::Head(outcome))) =
                self.sets.apply(unit, input.delivered.sequence)
            {
                if outcome == HeadOutcome::Differs {
                    if let Err(source) = self.sets.reread(&self.bus, &key, self.key.as_ref()).await
                    {
                        outcomes.push(Err(ReportError::Reread(
                            format!("{}/{}", key.0, key.1),
                            source,
                        )));
                        outcomes
                            .extend((index + 1..inputs.len()).map(|_| Err(ReportError::Abandoned)));
                        return outcomes;
                    }
                }
                self.schedule.mark(&key, Instant::now());
                if let Some(span) = &input.span {
                    // The next write is this input's, no longer a repair.
                    self.repairs.remove(&key);
                    self.spans.insert(key, *span);
                }
            }
            // Nothing is published for a unit: it is acked once read.
            outcomes.push(Ok(Vec::new()));
        }
        outcomes
    }

    async fn on_side(
        &mut self,
        side: Side,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        let delivered = match side {
            Side::Applied(Ok(delivered)) => delivered,
            Side::Applied(Err(_)) => return Vec::new(),
            Side::Owned(changes) => {
                self.on_owned(changes);
                return Vec::new();
            }
            Side::WatchFailed(error) => {
                tracing::warn!(%error, "the watch of EventReports failed: it goes on");
                return Vec::new();
            }
        };
        let Ok(result) = sluice_wire::decode::<pb::ApplyResult>("ApplyResult", &delivered) else {
            tracing::warn!(subject = %delivered.subject, "skipping unreadable apply result");
            return Vec::new();
        };
        for key in self.failures.record_result(&result) {
            let failure = self.failures.message(&key);
            // Best effort: the next head or result writes the status again.
            if let Err(error) =
                write_status(&self.client, &self.kind, &key.0, &key.1, failure.as_deref()).await
            {
                self.errors.inc();
                tracing::warn!(cluster = %key.0, event_source = %key.1, error = %error, "failed to write EventReport status");
            }
        }
        Vec::new()
    }

    fn next_tick(&self) -> Option<Instant> {
        self.schedule.next_due()
    }

    async fn on_tick(&mut self) -> Vec<Output> {
        let now = Instant::now();
        for key in self.schedule.take_due(now) {
            self.write(&key, now).await;
        }
        Vec::new()
    }
}

impl ReporterStage {
    /// EventReports deleted or edited: one of a set the reporter holds (its head read, so its
    /// report was written) was deleted by someone else, as the reporter deletes a report only
    /// once its set is removed, or someone else changed fields the reporter wrote. It is
    /// written again from the set, as any change of it would be.
    fn on_owned(&mut self, changes: sluice_kube::watch::OwnedChanges) {
        if let Some(watched) = changes.listed {
            tracing::info!(
                watched,
                "the EventReports are listed: one someone else deletes or edits is written again"
            );
        }
        let now = Instant::now();
        let lost = changes
            .gone
            .iter()
            .map(|report| (report, "deleted"))
            .chain(changes.edited.iter().map(|report| (report, "edited")));
        for (report, how) in lost {
            for key in sluice_domain::naming::event_report_keys(&report.namespace, &report.name) {
                if self
                    .sets
                    .get(&key)
                    .is_some_and(|view| view.head().is_some())
                {
                    tracing::info!(namespace = %report.namespace, name = %report.name, "an EventReport was {how} by someone else: it is written again");
                    if sluice_runtime::spans::spans_enabled() && !self.spans.contains_key(&key) {
                        self.spans.insert(key.clone(), TraceContext::new_root());
                        self.repairs
                            .insert(key.clone(), std::time::SystemTime::now());
                    }
                    self.schedule.mark(&key, now);
                }
            }
        }
    }

    /// Writes `key`'s report as its set now is.
    async fn write(&mut self, key: &SetKey, now: Instant) {
        // A report too large to list its members is written without them: the set is not
        // assembled (a copy of every member, sorted) only to be dropped.
        let too_large = self
            .sets
            .get(key)
            .filter(|view| {
                view.head()
                    .is_none_or(|head| head.failure_message.is_empty())
            })
            .and_then(|view| view_too_large(&key.0, &key.1, view, EVENT_REPORT_LIMIT));
        let set = if too_large.is_some() {
            self.sets.assemble_unlisted(key)
        } else {
            self.sets.assemble(key)
        };
        let removed = set.is_none();
        let set = set.unwrap_or_else(|| pb::MatchSet {
            cluster: Some(sluice_wire::cluster_ref(&key.0)),
            event_source: key.1.clone(),
            removed: true,
            ..Default::default()
        });
        self.failures
            .record_evaluation(key, &set.failure_message, removed);
        let members = self
            .sets
            .get(key)
            .and_then(|view| member_failures(&set, view));
        let failures: Vec<String> = [too_large, members, self.failures.message(key)]
            .into_iter()
            .flatten()
            .collect();
        let failure = (!failures.is_empty()).then(|| failures.join("; "));
        let write = decide(&key.0, &set, failure);
        let span = self.spans.remove(key);
        let repair = self.repairs.remove(key);
        let written = execute(
            &self.client,
            &self.kind,
            &key.0,
            &key.1,
            &write,
            span.as_ref(),
        )
        .await;
        match written {
            Ok(()) => {
                self.written.inc();
                record_repair(span.as_ref(), repair, key, None);
                if removed {
                    self.schedule.forget(key);
                } else {
                    let name = sluice_domain::naming::event_report_name(&key.0, &key.1);
                    self.watched
                        .note((key.0.namespace.clone(), name), String::new());
                }
            }
            Err(error) if error.is_transient() => {
                self.errors.inc();
                tracing::warn!(cluster = %key.0, event_source = %key.1, error = %error, "failed to write EventReport, will retry");
                self.schedule.retry(key, now, RETRY_DELAY);
                if let Some(span) = span {
                    self.spans.entry(key.clone()).or_insert(span);
                    if let Some(began) = repair {
                        self.repairs.entry(key.clone()).or_insert(began);
                    }
                }
            }
            Err(error) => {
                // The API server will never take this report: say so on the dead-letter
                // subject; the ClusterProfiles never wait for it.
                self.errors.inc();
                let reason = sluice_runtime::error_chain(&error);
                tracing::warn!(cluster = %key.0, event_source = %key.1, error = %reason, "EventReport refused by the API server");
                record_repair(span.as_ref(), repair, key, Some(reason.clone()));
                if removed {
                    // Nothing more is written for a set that went (until it comes back).
                    self.schedule.forget(key);
                }
                self.dead_letter(key, &reason).await;
            }
        }
    }

    /// Stores the refusal of `key`'s report on the dead-letter subject, with its set's head.
    async fn dead_letter(&self, key: &SetKey, reason: &str) {
        let subject = topology::match_subject(&sluice_wire::cluster_tokens(&key.0), &key.1);
        let head = self
            .sets
            .get(key)
            .and_then(|view| view.head())
            .cloned()
            .unwrap_or_default();
        let payload = match_units::encode(Unit::Head(head), None);
        let stored = match self
            .bus
            .dead_letter(
                topology::REPORTER_MATCH.durable,
                &subject,
                payload,
                reason,
                &[],
            )
            .await
        {
            Ok(ack) => ack.await.map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = stored {
            tracing::warn!(cluster = %key.0, event_source = %key.1, error = %error, "dead letter of a refused EventReport not stored");
        }
    }
}

/// Records the root span of a repair of `key`'s report (`repair EventReport`, kind internal),
/// from `began` until now, when the write just made was one (`began` set), under `span`, the
/// trace it began.
fn record_repair(
    span: Option<&TraceContext>,
    began: Option<std::time::SystemTime>,
    key: &SetKey,
    error: Option<String>,
) {
    use sluice_runtime::spans::{Attribute, Kind, Span};
    let (Some(context), Some(began)) = (span, began) else {
        return;
    };
    sluice_runtime::spans::record(Span {
        context: *context,
        parent: None,
        name: "repair EventReport".into(),
        kind: Kind::Internal,
        start: began,
        end: std::time::SystemTime::now(),
        attributes: vec![
            Attribute::new("sluice.cluster", key.0.to_string()),
            Attribute::new("sluice.event_source", key.1.clone()),
        ],
        error,
    });
}
