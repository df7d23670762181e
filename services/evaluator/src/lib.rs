//! The evaluator service: decides, for every (managed cluster, EventSource) some EventTrigger
//! deploys, which objects the EventSource selects, and publishes what changed as match units:
//! one member per object that joined, changed or left, then the set's head (ADR 0018). Only
//! changed objects are evaluated; an EventSource change re-evaluates the cached objects (no
//! re-LIST). Lua and CEL run off the async executor.
//!
//! Its change stage runs on the stage runner (`sluice_bus::runner`): the runner decodes and
//! parses the changes a task ahead of the stage, the stage absorbs them, and the runner holds
//! them until it flushes the sets they changed (ADR 0014): once per round behind a burst or a
//! backlog, at the latest after `MAX_HOLD`. The configuration is its side feed.

pub mod cloudevents;
pub mod stage;

use std::sync::Arc;

use anyhow::Context as _;
use sluice_bus::runner::{
    Action, Decoder, Failure, Hold, Hooks, Input, Outcome, Output, Runner, SideMessage,
};
use sluice_bus::{message_id, topology, Delivered};
use sluice_runtime::{CancellationToken, CommonArgs, Counter, Health};
use sluice_wire::match_units::{self, Unit};
use sluice_wire::service::PartitionArgs;
use sluice_wire::BusKey;

pub use stage::{Evaluator, MatchOutput};

/// Runs the whole evaluator until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    run_partition(common, PartitionArgs::default(), health, token).await
}

/// Runs the evaluator, or one partition of it (ADR 0051), until `token` is cancelled.
pub async fn run_partition(
    common: CommonArgs,
    args: PartitionArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let partition = args.partition;
    // The key opens the managed clusters' Secrets an EventSource selects and seals the ones it
    // collects; the evaluator reads no configuration Secret: it follows that without the key.
    let Some((bus, key)) = sluice_wire::service::connect_partition(
        &common,
        topology::EVALUATOR,
        partition,
        &health,
        &token,
    )
    .await?
    else {
        // Stopped while standing by: another process holds the lease.
        return Ok(());
    };
    let published = health.counter("sluice_evaluator_match_units_published_total");
    let rejected = health.counter("sluice_evaluator_messages_rejected_total");
    if key.is_none() {
        tracing::warn!("no bus key (--bus-key-file): managed clusters' Secrets are evaluated without their contents");
    }
    let (config, config_feed) = sluice_wire::follow_config(&bus, None).await?;
    let mut evaluator = Evaluator::new(config).with_payload_limit(bus.payload_limit());
    // A partition rebuilds the state of its own clusters only.
    let ours = |delivered: &Delivered| partition.owns(&delivered.subject);
    for delivered in bus
        .replay_state(topology::MATCH, topology::MATCH.subjects)
        .await?
        .into_iter()
        .filter(ours)
    {
        if let Ok(unit) = match_units::decode(&delivered, key.as_ref()) {
            evaluator.remember_published(&unit);
        }
    }
    let mut last_seen = sluice_bus::Freshness::default();
    let mut boot_sequence = 0;
    for delivered in bus
        .replay_state(topology::CHANGES, topology::CHANGES.subjects)
        .await?
        .into_iter()
        .filter(ours)
    {
        boot_sequence = boot_sequence.max(delivered.sequence);
        last_seen.record(&delivered);
        if let Ok(change) = sluice_wire::decode_change(&delivered, key.as_ref()) {
            evaluator.load_object(&change);
        }
    }
    let boot = tokio::task::block_in_place(|| evaluator.recompute_all(boot_sequence));
    tracing::info!(
        objects = last_seen.len(),
        match_units = boot.len(),
        "evaluator state rebuilt"
    );
    let mut stage = ChangeStage {
        evaluator,
        key,
        published,
        rejected: rejected.clone(),
    };
    // What differs from the MATCH stream goes out before the first change is taken.
    let boot = stage.outputs(boot, "boot");
    let runner = Runner::bind(&bus, partition.consumer(topology::EVALUATOR_CHANGES))
        .await?
        .with_partition(partition)
        .with_freshness(last_seen)
        .with_hooks(Hooks {
            rejected: Arc::new(move |n| rejected.add(n)),
            trace: Some(sluice_runtime::child_traceparent),
            forgotten: {
                let forgotten = health.counter("sluice_evaluator_subjects_forgotten_total");
                Arc::new(move |n| forgotten.add(n))
            },
            health: Some(health.clone()),
            ..Hooks::default()
        })
        .publishing_first(boot);

    // Whichever way this function ends (an error included), the tasks below stop with it.
    let _stop_tasks = token.clone().drop_guard();
    // CloudEvents share nothing with the object state above: their own task, consumer and
    // view of the configuration. Its failure stops the process like the change stage's would.
    let (bound, cloudevents_bound) = tokio::sync::oneshot::channel();
    let cloudevents = tokio::spawn({
        let (bus, health, token) = (bus.clone(), health.clone(), token.clone());
        async move {
            let result = cloudevents::run(bus, partition, health, token.clone(), bound).await;
            token.cancel();
            result
        }
    });
    // Ready once every input is bound: the CloudEvent task's too.
    if cloudevents_bound.await.is_err() {
        return cloudevents
            .await
            .context("cloudevent task panicked")?
            .context("failed to bind the cloudevent consumer");
    }
    health.set_ready(true);
    let updates = futures::stream::unfold(config_feed, |mut feed| async move {
        feed.next().await.map(|update| (update, feed))
    });
    let changes = runner.run(&mut stage, updates, token.clone()).await;
    token.cancel();
    let cloudevents = cloudevents.await.context("cloudevent task panicked")?;
    // Its state is the CHANGES stream's: a new process rebuilds it from there.
    changes.context("the change stage stopped; a restart will rebuild from the CHANGES stream")?;
    cloudevents?;
    // The consumers went with their runners: closing now leaves no pull request behind.
    bus.close().await;
    Ok(())
}

/// Changes absorbed by the stage whose sets are not published yet, at most this many. Held
/// inputs are unacked: this stays well below the consumer's `max_ack_pending` (20,000), or the
/// server would stop delivering what the stage waits for.
const MAX_HELD_CHANGES: usize = 16_384;

/// How long a change may be held before its sets are published, however far behind the
/// evaluator is (ADR 0014).
const MAX_HOLD: std::time::Duration = std::time::Duration::from_millis(200);

/// Why a change is rejected; never worth a retry.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("failed to decode the resource change")]
    Decode(#[source] sluice_wire::Error),
}

impl Failure for ChangeError {
    fn action(&self) -> Action {
        Action::Reject
    }
}

/// The evaluator as the runner drives it: absorbs parsed changes, and publishes the sets they
/// changed when the runner flushes it, and those a configuration change changes.
struct ChangeStage {
    evaluator: Evaluator,
    key: Option<BusKey>,
    published: Counter,
    rejected: Counter,
}

impl sluice_bus::runner::Stage for ChangeStage {
    type Input = stage::Parsed;
    type Side = sluice_wire::Result<sluice_wire::ConfigUpdate>;
    type Error = ChangeError;

    const HOLD: Option<Hold> = Some(Hold {
        max_inputs: MAX_HELD_CHANGES,
        max_age: MAX_HOLD,
    });

    fn decode(&self, delivered: &Delivered) -> Result<stage::Parsed, ChangeError> {
        parsed(delivered, self.key.as_ref())
    }

    fn decoder(&self) -> Option<Decoder<stage::Parsed, ChangeError>> {
        let key = self.key.clone();
        Some(Arc::new(move |delivered: &Delivered| {
            parsed(delivered, key.as_ref())
        }))
    }

    async fn handle(&mut self, inputs: &[Input<stage::Parsed>]) -> Vec<Outcome<ChangeError>> {
        tokio::task::block_in_place(|| {
            self.evaluator
                .absorb(inputs.iter().map(|input| &input.value))
        });
        inputs.iter().map(|_| Ok(Vec::new())).collect()
    }

    async fn flush(&mut self) -> Vec<Output> {
        let units = tokio::task::block_in_place(|| self.evaluator.flush());
        self.outputs(units, "change")
    }

    fn side_messages(
        &self,
        update: &sluice_wire::Result<sluice_wire::ConfigUpdate>,
    ) -> Vec<SideMessage> {
        update.iter().map(|update| update.side_message()).collect()
    }

    async fn on_side(
        &mut self,
        update: sluice_wire::Result<sluice_wire::ConfigUpdate>,
        _span: Option<sluice_runtime::TraceContext>,
    ) -> Vec<Output> {
        match update {
            Ok(update) => {
                let units = tokio::task::block_in_place(|| self.evaluator.on_config(&update));
                self.outputs(units, "config")
            }
            Err(error) => {
                self.rejected.inc();
                tracing::warn!(error = %error, "skipping config message");
                Vec::new()
            }
        }
    }
}

impl ChangeStage {
    /// The messages and purges of the stage's outputs, in their order.
    fn outputs(&self, units: Vec<MatchOutput>, cause: &str) -> Vec<Output> {
        let mut outputs = Vec::with_capacity(units.len());
        for unit in units {
            match output(unit, cause, self.key.as_ref()) {
                Ok(output) => outputs.push(output),
                // The stage builds units of clusters it knows: a bug, not an input to retry.
                Err(error) => {
                    tracing::error!(error = %error, "match unit without a valid cluster, not published")
                }
            }
        }
        let messages = outputs.iter().filter(|o| o.purge.is_none()).count();
        self.published.add(messages as u64);
        outputs
    }
}

/// A change decoded (its sealed object opened with `key`) and its object parsed.
fn parsed(delivered: &Delivered, key: Option<&BusKey>) -> Result<stage::Parsed, ChangeError> {
    let change = sluice_wire::decode_change(delivered, key).map_err(ChangeError::Decode)?;
    Ok(stage::Parsed::new(change, delivered.sequence))
}

/// The output of one member or head: a message id that names its content, a time to live for
/// a tombstone (`MatchOutput::tombstone_ttl`), the trace of the change it came from; or the
/// purge of a removed set's members.
fn output(unit: MatchOutput, cause: &str, key: Option<&BusKey>) -> sluice_wire::Result<Output> {
    let sequence = unit.source_sequence();
    let content = unit.content_id();
    let ttl = unit.tombstone_ttl();
    let (subject, unit) = match unit {
        MatchOutput::Member(member) => {
            let cluster = sluice_wire::cluster_id(member.cluster.as_ref(), "match member")?;
            let (group, kind, namespace, name) = match_units::member_id_of(&member);
            let subject = topology::match_member_subject(
                &sluice_wire::cluster_tokens(&cluster),
                &member.event_source,
                &group,
                &kind,
                &namespace,
                &name,
            );
            (subject, Unit::Member(member))
        }
        MatchOutput::Head(head) => {
            let cluster = sluice_wire::cluster_id(head.cluster.as_ref(), "match head")?;
            let subject =
                topology::match_subject(&sluice_wire::cluster_tokens(&cluster), &head.event_source);
            (subject, Unit::Head(head))
        }
        MatchOutput::Purge {
            cluster,
            event_source,
        } => {
            let filter = topology::match_members_filter(
                &sluice_wire::cluster_tokens(&cluster),
                &event_source,
            );
            return Ok(Output::purge(topology::MATCH, filter));
        }
    };
    Ok(Output {
        id: Some(message_id(&[
            "match",
            &subject,
            cause,
            &sequence.to_string(),
            &content,
        ])),
        payload: match_units::encode(unit, key),
        subject,
        ttl,
        purge: None,
        source: Some(sequence),
        trace: None,
    })
}
