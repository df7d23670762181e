//! The evaluator service: decides, for every (managed cluster, EventSource) some EventTrigger
//! deploys, which objects the EventSource selects, and publishes what changed as match units:
//! one member per object that joined, changed or left, then the set's head (ADR 0018). Only
//! changed objects are evaluated; an EventSource change re-evaluates the cached objects (no
//! re-LIST). Lua and CEL run off the async executor.

pub mod cloudevents;
pub mod stage;

use anyhow::Context as _;
use sluice_bus::{message_id, topology, AckWindow, Bus, Outgoing};
use sluice_runtime::{CancellationToken, CommonArgs, Health};
use sluice_wire::match_units::{self, Unit};
use sluice_wire::BusKey;

pub use stage::{Evaluator, MatchOutput};

/// Runs the evaluator until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let bus = Bus::connect(sluice_bus::BusOptions::service(
        &common,
        topology::EVALUATOR,
    ))
    .await
    .context("failed to connect to the bus")?;
    health.require("nats", bus.connection_probe());
    let published = health.counter("sluice_evaluator_match_units_published_total");
    let rejected = health.counter("sluice_evaluator_messages_rejected_total");

    // The key opens the managed clusters' Secrets an EventSource selects and seals the ones it
    // collects; the evaluator reads no configuration Secret: it follows that without the key.
    let key = sluice_wire::BusKey::load(common.bus_key_file.as_deref())
        .context("failed to load the bus key")?;
    if key.is_none() {
        tracing::warn!("no bus key (--bus-key-file): managed clusters' Secrets are evaluated without their contents");
    }
    let (config, mut config_feed) = sluice_wire::follow_config(&bus, None).await?;
    let mut stage = Evaluator::new(config).with_payload_limit(bus.payload_limit());
    for delivered in bus
        .replay_state(topology::MATCH, topology::MATCH.subjects)
        .await?
    {
        if let Ok(unit) = match_units::decode(&delivered, key.as_ref()) {
            stage.remember_published(&unit);
        }
    }
    let mut last_seen = sluice_bus::Freshness::default();
    let mut boot_sequence = 0;
    for delivered in bus
        .replay_state(topology::CHANGES, topology::CHANGES.subjects)
        .await?
    {
        boot_sequence = boot_sequence.max(delivered.sequence);
        last_seen.record(&delivered);
        if let Ok(change) = sluice_wire::decode_change(&delivered, key.as_ref()) {
            stage.load_object(&change);
        }
    }
    let boot = tokio::task::block_in_place(|| stage.recompute_all(boot_sequence));
    tracing::info!(
        objects = last_seen.len(),
        match_units = boot.len(),
        "evaluator state rebuilt"
    );
    let mut window =
        AckWindow::new(topology::PUBLISH_WINDOW).acking(topology::EVALUATOR_CHANGES.acks);
    published.add(
        publish_units(
            &bus,
            &mut window,
            boot,
            Vec::new(),
            "boot",
            key.as_ref(),
            |_| None,
        )
        .await?,
    );

    let changes = bus.durable(topology::EVALUATOR_CHANGES, None).await?;
    // Whichever way this function ends (an error included), the tasks below stop with it.
    let _stop_tasks = token.clone().drop_guard();
    // The change reader takes, decodes and parses the next batch while the stage evaluates
    // this one; two batches wait at most.
    let (batches, mut parsed) = tokio::sync::mpsc::channel(2);
    let mut held = Held::default();
    let reader = tokio::spawn({
        let (bus, rejected, token, key) =
            (bus.clone(), rejected.clone(), token.clone(), key.clone());
        async move {
            let result = read_changes(
                bus,
                changes,
                last_seen,
                rejected,
                batches,
                key,
                token.clone(),
            )
            .await;
            token.cancel();
            result
        }
    });
    // CloudEvents share nothing with the object state above: their own task, consumer and
    // view of the configuration. Its failure stops the process like the main loop's would.
    let (bound, cloudevents_bound) = tokio::sync::oneshot::channel();
    let cloudevents = tokio::spawn({
        let (bus, health, token) = (bus.clone(), health.clone(), token.clone());
        async move {
            let result = cloudevents::run(bus, health, token.clone(), bound).await;
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
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            update = config_feed.next() => {
                let Some(update) = update else { anyhow::bail!("configuration feed ended") };
                let update = match update {
                    Ok(update) => update,
                    Err(error) => {
                        rejected.inc();
                        tracing::warn!(error = %error, "skipping config message");
                        continue;
                    }
                };
                // The sets of absorbed changes are published with the configuration's, so the
                // changes are acked once those are stored.
                let units = tokio::task::block_in_place(|| stage.on_config(&update));
                let inputs = held.take();
                published.add(publish_units(&bus, &mut window, units, inputs.messages, "config", key.as_ref(), |_| None).await?);
            }
            batch = parsed.recv(), if !window.is_full() => {
                // The reader ends only when cancelled, or when it failed (it cancels then too,
                // and its error is returned below).
                let Some(batch) = batch else { break };
                tokio::task::block_in_place(|| stage.absorb(&batch.changes));
                held.add(batch);
                // While more changes wait (parsed, or still on the stream), their changes join
                // these sets first: behind a burst (a listed cluster) or a backlog, a set is
                // published once per round, not once per batch (ADR 0014).
                if held.changes >= MAX_HELD_CHANGES || (parsed.is_empty() && !held.behind) {
                    published.add(held.publish(&mut stage, &bus, &mut window, key.as_ref()).await?);
                }
            }
            _ = tokio::time::sleep_until(held.deadline), if held.changes > 0 => {
                published.add(held.publish(&mut stage, &bus, &mut window, key.as_ref()).await?);
            }
            settled = window.next(), if !window.is_empty() => {
                if let Some(sluice_bus::window::Settled::Retried(error)) = settled {
                    not_stored(&window, error)?;
                }
            }
        }
    }
    tracing::info!("evaluator draining");
    // What is held goes out before the drain: a restart would recompute it from the CHANGES
    // stream, but only after the new process has rebuilt its state.
    if held.changes > 0 {
        published.add(
            held.publish(&mut stage, &bus, &mut window, key.as_ref())
                .await?,
        );
    }
    window.drain().await?;
    drop(parsed);
    reader.await.context("change reader panicked")??;
    cloudevents.await.context("cloudevent task panicked")??;
    // The consumers went with their tasks: closing now leaves no pull request behind.
    bus.close().await;
    Ok(())
}

/// The inputs behind some changes: the messages to ack once the sets they changed are stored,
/// and the trace context of each change by stream sequence.
#[derive(Default)]
struct Inputs {
    messages: Vec<sluice_bus::Message>,
    parents: std::collections::HashMap<u64, String>,
}

/// A batch of changes ready for the stage: the newest fresh change per subject with its object
/// parsed, and its inputs.
struct Batch {
    changes: Vec<stage::Parsed>,
    inputs: Inputs,
    /// Whether the stream had more changes for the consumer when the batch's last one was
    /// delivered (its `pending` count): the evaluator is behind on its input.
    behind: bool,
}

/// Changes absorbed by the stage whose sets are not published yet, at most this many. Held
/// inputs are unacked: this stays well below the consumer's `max_ack_pending` (20,000), or the
/// server would stop delivering what the stage waits for.
const MAX_HELD_CHANGES: usize = 16_384;

/// How long a change may be held before its sets are published, however far behind the
/// evaluator is (ADR 0014).
const MAX_HOLD: std::time::Duration = std::time::Duration::from_millis(200);

/// What the stage absorbed and has not published yet.
struct Held {
    changes: usize,
    inputs: Inputs,
    /// Whether the stream had more changes for the consumer after the last batch held.
    behind: bool,
    /// When the held changes are published at the latest (set by the first one held).
    deadline: tokio::time::Instant,
}

impl Default for Held {
    fn default() -> Held {
        Held {
            changes: 0,
            inputs: Inputs::default(),
            behind: false,
            deadline: tokio::time::Instant::now(),
        }
    }
}

impl Held {
    fn add(&mut self, batch: Batch) {
        if self.changes == 0 {
            self.deadline = tokio::time::Instant::now() + MAX_HOLD;
        }
        self.changes += batch.changes.len();
        self.behind = batch.behind;
        self.inputs.messages.extend(batch.inputs.messages);
        self.inputs.parents.extend(batch.inputs.parents);
    }

    /// The held inputs, leaving nothing held.
    fn take(&mut self) -> Inputs {
        std::mem::take(self).inputs
    }

    /// Publishes the sets the held changes changed through `window`, which acks the held
    /// inputs once they are stored; nothing is held afterwards. Returns the sets published.
    async fn publish(
        &mut self,
        stage: &mut Evaluator,
        bus: &Bus,
        window: &mut AckWindow,
        key: Option<&BusKey>,
    ) -> anyhow::Result<u64> {
        let units = tokio::task::block_in_place(|| stage.flush());
        let Inputs { messages, parents } = self.take();
        publish_units(bus, window, units, messages, "change", key, |sequence| {
            parents.get(&sequence).map(String::as_str)
        })
        .await
    }
}

/// Reads the change consumer in batches: keeps the newest fresh change per subject (the rest is
/// acked through its own window), parks what cannot be decoded, parses the objects, and hands
/// each batch to the stage. Ends when `token` is cancelled or the stage is gone.
async fn read_changes(
    bus: Bus,
    mut changes: sluice_bus::PullStream,
    mut last_seen: sluice_bus::Freshness,
    rejected: sluice_runtime::Counter,
    batches: tokio::sync::mpsc::Sender<Batch>,
    key: Option<BusKey>,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let mut window =
        AckWindow::new(topology::PUBLISH_WINDOW).acking(topology::EVALUATOR_CHANGES.acks);
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            batch = sluice_bus::coalesce::next_batch(&mut changes), if !window.is_full() => {
                let Some(batch) = batch else { anyhow::bail!("change consumer ended") };
                let behind = batch.last().and_then(|m| m.info().ok()).is_some_and(|info| info.pending > 0);
                // Objects are level-based: of a batch only the newest fresh change per subject
                // is evaluated; the main loop acks the batch's inputs once the sets they
                // changed are stored.
                let fresh = sluice_bus::coalesce::fresh(topology::CHANGES.name, batch, &last_seen, &mut window);
                let mut decoded = Vec::with_capacity(fresh.len());
                let mut messages = Vec::with_capacity(fresh.len());
                // Each set continues the trace of the last change that touched it.
                let mut parents = std::collections::HashMap::new();
                for (delivered, message) in fresh {
                    last_seen.record(&delivered);
                    match sluice_wire::decode_change(&delivered, key.as_ref()) {
                        Ok(change) => {
                            decoded.push((change, delivered.sequence));
                            messages.push(message);
                            if let Some(parent) = delivered.traceparent {
                                parents.insert(delivered.sequence, parent);
                            }
                        }
                        Err(error) => {
                            rejected.inc();
                            bus.park("evaluator", &delivered, message, &error.to_string(), &mut window).await?;
                        }
                    }
                }
                if decoded.is_empty() {
                    continue;
                }
                let changes = tokio::task::block_in_place(|| {
                    decoded
                        .into_iter()
                        .map(|(change, sequence)| stage::Parsed::new(change, sequence))
                        .collect()
                });
                let inputs = Inputs { messages, parents };
                if batches.send(Batch { changes, inputs, behind }).await.is_err() {
                    break;
                }
            }
            settled = window.next(), if !window.is_empty() => {
                if let Some(sluice_bus::window::Settled::Retried(error)) = settled {
                    not_stored(&window, error)?;
                }
            }
        }
    }
    window.drain().await?;
    Ok(())
}

/// An input whose outputs were not stored (or whose ack failed). With per-message acks it
/// comes back and is evaluated again. With covering acks (ADR 0013) a later ack may already
/// have covered it, so the evaluator stops: it rebuilds every set from the CHANGES stream when
/// it starts again, and nothing is lost.
fn not_stored(window: &AckWindow, error: sluice_bus::Error) -> anyhow::Result<()> {
    if window.covers() {
        return Err(anyhow::Error::new(error).context(
            "a change's match sets or ack did not reach NATS; stopping to rebuild from the CHANGES stream on restart",
        ));
    }
    tracing::warn!(error = %error, "output not stored or input not acked, it will be redelivered");
    Ok(())
}

/// Publishes the stage's outputs in their order through `window`, which acks `inputs` once
/// they are stored: members and heads as messages with a message id that names their content
/// and a trace context that continues `parent_of(source sequence)` (a tombstone with its time
/// to live, `MEMBER_TOMBSTONE_TTL`), and a purge once everything before it is stored. Returns
/// how many messages were published.
async fn publish_units<'a>(
    bus: &Bus,
    window: &mut AckWindow,
    outputs: Vec<MatchOutput>,
    inputs: Vec<sluice_bus::Message>,
    cause: &str,
    key: Option<&BusKey>,
    parent_of: impl Fn(u64) -> Option<&'a str>,
) -> anyhow::Result<u64> {
    // Through the window's publish: it bounds the acks in flight and publishes again what a
    // dropped connection may have lost (tombstones with their time to live).
    let mut batch = Vec::new();
    let mut published = 0;
    for output in outputs {
        if let MatchOutput::Purge {
            cluster,
            event_source,
        } = &output
        {
            published += window
                .publish(bus, std::mem::take(&mut batch), Vec::new())
                .await?;
            window.drain().await?;
            let filter =
                topology::match_members_filter(&sluice_wire::cluster_tokens(cluster), event_source);
            bus.purge(topology::MATCH, &filter).await?;
            continue;
        }
        let tombstone = output.is_tombstone();
        let mut out = outgoing(output, cause, key, &parent_of)?;
        if tombstone {
            out.ttl = Some(topology::MEMBER_TOMBSTONE_TTL);
        }
        batch.push(out);
    }
    published += window.publish(bus, batch, inputs).await?;
    Ok(published as u64)
}

/// The message of one member or head.
fn outgoing<'a>(
    output: MatchOutput,
    cause: &str,
    key: Option<&BusKey>,
    parent_of: &impl Fn(u64) -> Option<&'a str>,
) -> anyhow::Result<Outgoing> {
    let sequence = output.source_sequence();
    let content = output.content_id();
    let (subject, unit) = match output {
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
        MatchOutput::Purge { .. } => anyhow::bail!("a purge is not a message"),
    };
    Ok(Outgoing {
        ttl: None,
        msg_id: message_id(&["match", &subject, cause, &sequence.to_string(), &content]),
        subject,
        payload: match_units::encode(unit, key),
        traceparent: Some(sluice_runtime::child_traceparent(parent_of(sequence))),
    })
}
