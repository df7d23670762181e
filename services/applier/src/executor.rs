//! Executing desired states against the management cluster: server-side apply of what is
//! desired, deletion of what a unit owns and no longer wants, the EventTrigger status and its
//! finalizer. Units of different (trigger, cluster) pairs run concurrently.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::StreamExt;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use sluice_domain::naming;
use sluice_kube::apply::{self, Kind};
use sluice_proto::v1 as pb;
use sluice_runtime::spans::Request;
use sluice_runtime::TraceContext;

use crate::index::{Pairs, UnitLabels};
use crate::plan::{self, Known, ObjectId, OWNED};
use crate::seed::PairSeed;
use crate::{adopt, status};
use sluice_wire::unit::Unit;
pub(crate) const FIELD_MANAGER: &str = "sluice-applier";
const STATUS_FIELD_MANAGER: &str = "sluice-applier-status";
/// Writes of one desired state in flight at once (per phase).
const WRITE_CONCURRENCY: usize = 16;
/// Units of a batch applied at once while the applier keeps up (unless `--apply-concurrency` is
/// lower).
const KEEPING_UP_CONCURRENCY: usize = 8;
/// The waits for a deletion told in Events that are remembered (`Applier::report_waiting`).
const TOLD_AT_MOST: usize = 4096;
/// Own deletions remembered until the watch of owned objects sees them
/// (`Applier::own_deletion`); forgotten as a whole beyond this many (one whose deletion event
/// never came: it was gone already), at the cost of one needless look at a unit each.
const OWN_DELETIONS_AT_MOST: usize = 65_536;

/// How many of a batch's `units` run at once, with at most `most` (`--apply-concurrency`): few
/// while batches are small, so the API server is not sent bursts it must share its time among
/// (the units already sent finish first), and more as batches grow, which says the applier has
/// fallen behind: half the batch, so that it takes about two round trips of each unit's writes.
pub(crate) fn units_at_once(units: usize, most: usize) -> usize {
    let most = most.max(1);
    (units / 2).clamp(KEEPING_UP_CONCURRENCY.min(most), most)
}

/// One unit to execute: its desired state, from subject `subject`, and the objects of it that
/// someone else deleted or edited (`lost`), which it writes again; `span`, when spans are
/// exported, the unit's span, under which each API request is a span of its own.
pub(crate) struct Run<'a> {
    pub subject: &'a str,
    pub state: &'a pb::DesiredState,
    pub lost: &'a [ObjectId],
    pub span: Option<TraceContext>,
}

pub(crate) struct Applier {
    pub(crate) client: kube::Client,
    kinds: Mutex<HashMap<(String, String), Kind>>,
    /// Per (trigger, cluster), by its owner labels: what each of its units holds, with the
    /// content hashes this process applied (`index`). An unchanged object is not applied again,
    /// and neither applying nor removing a unit needs a LIST: the pair is listed once, the
    /// first time it is needed and again after an error; at start every pair at once from the
    /// watches' first lists when they complete in time (`seed`).
    pairs: Mutex<Pairs>,
    /// The pairs' indexes from the watches' first lists, which the first units wait for.
    seed: std::sync::OnceLock<Arc<crate::seed::Seed>>,
    /// One LIST of a pair at a time: the units that need it wait for it.
    listing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Per (trigger, cluster), by its owner labels: what the server held when the pair was
    /// first seen, whose names desired objects adopt (`adopt`, the hand-over from event-manager).
    adoptable: Mutex<HashMap<String, Arc<adopt::Adoptable>>>,
    /// Where it writes the ConfigMaps and Secrets it owns (Sveltos's namespace), so their lists
    /// stay there too: it may neither read nor list them anywhere else.
    namespace: String,
    /// The most desired states (units) of a batch applied at once (`--apply-concurrency`;
    /// `units_at_once`); two batches may be in flight (ADR 0043).
    concurrency: usize,
    /// What this applier deleted and its watch of owned objects has not seen go yet: those
    /// deletions are its own, not someone else's to repair (ADR 0039).
    deleted: Mutex<std::collections::HashSet<ObjectId>>,
}

/// SHA-256 of what a desired state asks for: its objects' JSON in order, or its failure.
fn deployed_hash(state: &pb::DesiredState) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(state.failure_message.as_bytes());
    for object in &state.objects {
        hasher.update((object.object_json.len() as u64).to_be_bytes());
        hasher.update(&object.object_json);
    }
    hasher.finalize().to_vec()
}

impl Applier {
    pub(crate) fn new(client: kube::Client, namespace: &str, concurrency: usize) -> Applier {
        Applier {
            client,
            namespace: namespace.to_string(),
            concurrency: concurrency.max(1),
            kinds: Mutex::new(HashMap::new()),
            pairs: Mutex::new(Pairs::default()),
            seed: std::sync::OnceLock::new(),
            listing: Mutex::new(HashMap::new()),
            adoptable: Mutex::new(HashMap::new()),
            deleted: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// From now on takes each pair's index and adoption snapshot from `seed` once it is
    /// complete, waiting for it before any pair is listed. Set before the watches whose first
    /// lists make it start, after any write at start: the lists show every write before them.
    /// Set once: a second seed is ignored.
    pub(crate) fn seed_from(&self, seed: Arc<crate::seed::Seed>) {
        if self.seed.set(seed).is_err() {
            tracing::warn!("the applier was seeded twice; the first seed stays");
        }
    }

    /// Whether a unit would wait for the seed now ([`crate::seed::Seed::keeps_waiting`]).
    pub(crate) fn seed_keeps_waiting(&self) -> bool {
        self.seed.get().is_some_and(|seed| seed.keeps_waiting())
    }

    /// Waits for the seed (if any) and installs it once.
    async fn seeded(&self) {
        let Some(seed) = self.seed.get() else {
            return;
        };
        seed.settle(|pairs| {
            let count = pairs.len();
            let mut indexes = Vec::with_capacity(count);
            {
                // One lock at a time: `known` takes the pairs' before the snapshots'.
                let mut adoptable = lock(&self.adoptable);
                for (pair, seeded) in pairs {
                    adoptable
                        .entry(pair.clone())
                        .or_insert_with(|| Arc::new(seeded.adoptable));
                    indexes.push((pair, seeded.listing.index()));
                }
            }
            lock(&self.pairs).seed(indexes);
            tracing::info!(
                pairs = count,
                "every pair's index taken from the first lists of what sluice wrote"
            );
        })
        .await;
    }

    /// Whether the deletion of `id` that the watch saw is one this applier made (each one
    /// answers so once).
    pub(crate) fn own_deletion(&self, id: &ObjectId) -> bool {
        lock(&self.deleted).remove(id)
    }

    /// Forgets resolved kinds (a CRD may have been re-created): resolved again on next use.
    pub(crate) fn forget_kinds(&self) {
        lock(&self.kinds).clear();
    }

    async fn kind(&self, api_version: &str, kind: &str) -> sluice_kube::Result<Kind> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = lock(&self.kinds).get(&key) {
            return Ok(found.clone());
        }
        let resolved = apply::resolve(&self.client, api_version, kind).await?;
        lock(&self.kinds).insert(key, resolved.clone());
        Ok(resolved)
    }

    /// Executes the desired states of different units concurrently, each unit (one subject)
    /// once. The removal of a pair's main unit removes the pair's CloudEvent units too, so a
    /// pair with such a removal in the batch runs all its units one after another, in the
    /// given order. Results come back in the order of `states`.
    pub(crate) async fn execute_all(
        &self,
        states: &[Run<'_>],
    ) -> Vec<sluice_kube::Result<pb::ApplyResult>> {
        type Pair<'a> = (&'a str, Option<&'a pb::ClusterRef>);
        fn pair(state: &pb::DesiredState) -> Pair<'_> {
            (state.event_trigger.as_str(), state.cluster.as_ref())
        }
        let removing: std::collections::HashSet<Pair<'_>> = states
            .iter()
            .filter(|run| run.state.removed && Unit::of(run.state) == Unit::Main)
            .map(|run| pair(run.state))
            .collect();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of: HashMap<(Pair<'_>, Option<&str>), usize> = HashMap::new();
        for (index, run) in states.iter().enumerate() {
            let serial = removing.contains(&pair(run.state));
            let key = (pair(run.state), (!serial).then_some(run.subject));
            let group = *group_of.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[group].push(index);
        }
        let concurrency = units_at_once(groups.len(), self.concurrency);
        let mut done: Vec<(usize, sluice_kube::Result<pb::ApplyResult>)> =
            futures::stream::iter(groups)
                .map(|group| async move {
                    let mut out = Vec::with_capacity(group.len());
                    for index in group {
                        let run = &states[index];
                        out.push((index, self.execute(run.state, run.lost, run.span).await));
                    }
                    out
                })
                .buffer_unordered(concurrency)
                .flat_map(futures::stream::iter)
                .collect()
                .await;
        done.sort_by_key(|(index, _)| *index);
        done.into_iter().map(|(_, result)| result).collect()
    }

    /// Executes one desired state, its `lost` objects not counted as held. Errors are transient
    /// (the input is retried).
    async fn execute(
        &self,
        state: &pb::DesiredState,
        lost: &[ObjectId],
        span: Option<TraceContext>,
    ) -> sluice_kube::Result<pb::ApplyResult> {
        let outcome = self.execute_inner(state, lost, span).await;
        if outcome.is_err() {
            // The server may hold anything of the unit now: list it again next time.
            if let Ok(cluster) = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state") {
                let pair = naming::owner_labels(&state.event_trigger, &cluster);
                lock(&self.pairs).unknown(&pair_key(&pair), &Unit::of(state).labels());
            }
        }
        outcome
    }

    async fn execute_inner(
        &self,
        state: &pb::DesiredState,
        lost: &[ObjectId],
        span: Option<TraceContext>,
    ) -> sluice_kube::Result<pb::ApplyResult> {
        let cluster = match sluice_wire::cluster_id(state.cluster.as_ref(), "desired state") {
            Ok(cluster) => cluster,
            Err(_) => return Err(sluice_kube::Error::Malformed("cluster")),
        };
        let mut result = pb::ApplyResult {
            event_trigger: state.event_trigger.clone(),
            cluster: state.cluster.clone(),
            failure_message: if state.failure_message.is_empty() {
                state.status_message.clone()
            } else {
                state.failure_message.clone()
            },
            source_sequence: state.source_sequence,
            removed: state.removed,
            event_trigger_kind: state.event_trigger_kind.clone(),
            event_source: state.event_source.clone(),
            cloud_event: !state.cloud_event_source.is_empty()
                || !state.cloud_event_subject.is_empty(),
            deployed_hash: deployed_hash(state),
            resource_namespace: state.resource_namespace.clone(),
            resource_name: state.resource_name.clone(),
            cloud_event_source: state.cloud_event_source.clone(),
            cloud_event_subject: state.cloud_event_subject.clone(),
            ..Default::default()
        };
        if !state.failure_message.is_empty() {
            // Keep what exists: a broken template must not withdraw working add-ons.
            return Ok(result);
        }
        let desired: Vec<Value> = match plan::desired_objects(state) {
            Ok(objects) => objects,
            Err(message) => {
                // As for a broken template: applying the rest would withdraw this one.
                result.failure_message = message;
                return Ok(result);
            }
        };
        // A CloudEvent or resource unit owns only what carries its labels; the trigger's main
        // unit owns the rest, and on removal everything with the trigger's labels.
        let unit = Unit::of(state);
        let unit_labels = unit.labels();
        let pair = naming::owner_labels(&state.event_trigger, &cluster);
        let key = pair_key(&pair);
        // The removal of the main unit takes everything of the pair.
        let whole = state.removed && unit == Unit::Main;
        let mut known = self.known(&key, &pair, &unit_labels, whole).await?;
        // What someone else deleted or edited is written again, whether the pair's index
        // already knew of it or a LIST just found it (edited, it is still there).
        for id in lost {
            known.remove(id);
        }
        let desired = self.adopt(&pair, desired).await?;
        let steps = plan::plan(&desired, &known);
        // Referenced objects before the profiles that point at them, profiles deleted before
        // what they referenced: each phase runs its writes concurrently.
        let (references, profiles): (Vec<_>, Vec<_>) = steps
            .apply
            .into_iter()
            .zip(steps.hashes)
            .partition(|(o, _)| o.get("kind").and_then(Value::as_str) != Some("ClusterProfile"));
        for phase in [references, profiles] {
            let mut writes = Vec::with_capacity(phase.len());
            for (object, hash) in phase {
                let r = sluice_wire::object_ref(&object);
                let kind = self.kind(&r.api_version, &r.kind).await?;
                writes.push((object, r, kind, hash));
            }
            let client = &self.client;
            let outcomes: Vec<_> = futures::stream::iter(writes)
                .map(move |(object, r, kind, hash)| apply_one(client, object, r, kind, hash, span))
                .buffer_unordered(WRITE_CONCURRENCY)
                .collect()
                .await;
            let mut failure = None;
            for outcome in outcomes {
                match outcome {
                    Ok((r, hash)) => {
                        known.insert(plan::ref_id(&r), hash);
                        result.applied.push(r);
                    }
                    Err(error) => failure = Some(error),
                }
            }
            if let Some(error) = failure {
                return Err(error);
            }
        }
        let (profiles, references): (Vec<&pb::ObjectRef>, Vec<&pb::ObjectRef>) = steps
            .delete
            .iter()
            .partition(|r| r.kind == "ClusterProfile");
        for phase in [profiles, references] {
            let mut deletes = Vec::with_capacity(phase.len());
            for r in phase {
                deletes.push((r.clone(), self.kind(&r.api_version, &r.kind).await?));
            }
            // Known as this applier's own before they are made: the watch may tell of a
            // deletion before its answer comes, and the stage reads the watch meanwhile.
            {
                let mut deleted = lock(&self.deleted);
                if deleted.len() + deletes.len() > OWN_DELETIONS_AT_MOST {
                    deleted.clear();
                }
                deleted.extend(deletes.iter().map(|(r, _)| plan::ref_id(r)));
            }
            let client = &self.client;
            let outcomes: Vec<_> = futures::stream::iter(deletes)
                .map(move |(r, kind)| delete_one(client, r, kind, span))
                .buffer_unordered(WRITE_CONCURRENCY)
                .collect()
                .await;
            let mut failure = None;
            for (r, outcome) in outcomes {
                let id = plan::ref_id(&r);
                match outcome {
                    Ok(()) => {
                        known.remove(&id);
                        result.deleted.push(r);
                    }
                    Err(error) => {
                        lock(&self.deleted).remove(&id);
                        failure = Some(error);
                    }
                }
            }
            if let Some(error) = failure {
                return Err(error);
            }
        }
        if whole {
            // Every other unit of this trigger and cluster is gone with it.
            lock(&self.pairs).forget(&key);
            self.forget_pair(&key);
        } else {
            result.held = plan::object_refs(known.keys());
            if lock(&self.pairs).record(&key, unit_labels, known, state.removed) {
                self.forget_pair(&key);
            }
        }
        Ok(result)
    }

    /// Forgets what is kept beside a pair's index (its LIST's gate, its adoption snapshot) once
    /// the index is forgotten for holding nothing.
    fn forget_pair(&self, key: &str) {
        lock(&self.listing).remove(key);
        lock(&self.adoptable).remove(key);
    }

    /// Writes a trigger's status and holds or releases its finalizer. Failures are logged:
    /// the next change of the trigger writes again. True when the trigger is gone and sluice
    /// owns nothing for it: there is nothing of it left to write.
    pub(crate) async fn write_status(&self, statuses: &status::Statuses, trigger: &str) -> bool {
        let kind_name = statuses.kind(trigger).to_string();
        let outcome = async {
            let kind = self
                .kind(status::api_version(&kind_name), &kind_name)
                .await?;
            let owns = statuses.owns_anything(trigger);
            if owns
                && !apply::set_finalizer(&self.client, &kind, "", trigger, status::FINALIZER, true)
                    .await?
            {
                return Ok(false); // the trigger is gone, and what sluice owns for it goes next
            }
            let written = apply::apply_status(
                &self.client,
                &kind,
                "",
                trigger,
                &statuses.status_object(trigger),
                STATUS_FIELD_MANAGER,
            )
            .await;
            let gone = match written {
                Ok(()) => false,
                Err(error) if error.is_not_found() => true,
                Err(error) => return Err(error),
            };
            if !owns && !gone {
                apply::set_finalizer(&self.client, &kind, "", trigger, status::FINALIZER, false)
                    .await?;
            }
            Ok::<bool, sluice_kube::Error>(gone && !owns)
        }
        .await;
        outcome.unwrap_or_else(|error| {
            tracing::warn!(event_trigger = %trigger, error = %error, "failed to write EventTrigger status");
            false
        })
    }

    /// Removes the finalizer from a trigger that is being deleted and for which sluice owns
    /// nothing (any more).
    ///
    /// `span`: the span of the configuration message it is of, under which the write is a
    /// client span (ADR 0045).
    pub(crate) async fn release_if_done(
        &self,
        statuses: &status::Statuses,
        delivered: &sluice_bus::Delivered,
        span: Option<TraceContext>,
    ) {
        let Ok(config) = sluice_wire::decode::<pb::ConfigObject>("ConfigObject", delivered) else {
            return;
        };
        let Ok(object) = serde_json::from_slice::<Value>(&config.object_json) else {
            return;
        };
        let held = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|f| f == status::FINALIZER));
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        if config.deleted || !held || !deleting || statuses.owns_anything(&config.name) {
            return;
        }
        let start = SystemTime::now();
        let api_version = status::api_version(&config.kind);
        let released = async {
            let kind = self.kind(api_version, &config.kind).await?;
            apply::set_finalizer(
                &self.client,
                &kind,
                "",
                &config.name,
                status::FINALIZER,
                false,
            )
            .await
        }
        .await;
        Request::new("PATCH", api_version, &config.kind, "", &config.name).record_outcome(
            span.as_ref(),
            start,
            &released,
        );
        if let Err(error) = released {
            tracing::warn!(event_trigger = %config.name, error = %error, "failed to release the finalizer");
        }
    }

    /// Tells, with a Warning Event on the trigger, why a trigger in the configuration feed cannot
    /// be used (`problems`); each problem once per trigger (`reported`). Failures are logged:
    /// the trigger's next change reports again.
    ///
    /// `span`: as [`Applier::release_if_done`]'s.
    pub(crate) async fn report_invalid(
        &self,
        delivered: &sluice_bus::Delivered,
        reported: &mut BTreeMap<String, String>,
        span: Option<TraceContext>,
    ) {
        let Ok(config) = sluice_wire::decode::<pb::ConfigObject>("ConfigObject", delivered) else {
            return;
        };
        let Some((kind, name, uid, message)) = crate::problems::invalid_trigger(&config) else {
            reported.remove(&config.name);
            return;
        };
        if reported.get(&name) == Some(&message) {
            return;
        }
        tracing::warn!(event_trigger = %name, problem = %message, "EventTrigger cannot be used");
        let written = self
            .write_event(&kind, &name, &uid, crate::problems::REASON, &message, span)
            .await;
        match written {
            Ok(()) => {
                reported.insert(name, message);
            }
            Err(error) => {
                tracing::warn!(event_trigger = %name, error = %sluice_runtime::error_chain(&error), "failed to write the Event of an unusable EventTrigger");
            }
        }
    }

    /// Tells, with a Warning Event on the trigger, that a unit of it waits until an object
    /// being deleted is gone before it writes it anew (`sluice_kube::Error::Terminating`): the
    /// addon-controller withdraws an old profile's add-ons first, which can take long, and
    /// meanwhile the event has no profile. Each wait once (`told`, forgotten as a whole once it
    /// holds `TOLD_AT_MOST`); failures are logged.
    pub(crate) async fn report_waiting(
        &self,
        trigger_kind: &str,
        trigger: &str,
        error: &sluice_kube::Error,
        told: &mut std::collections::BTreeSet<String>,
    ) {
        let message = format!("{} {trigger}: {error}", trigger_kind.to_lowercase());
        if told.contains(&message) {
            return;
        }
        let written = async {
            let kind = self
                .kind(status::api_version(trigger_kind), trigger_kind)
                .await?;
            let Some(object) = apply::get(&self.client, &kind, "", trigger).await? else {
                return Ok(()); // the trigger is gone
            };
            let uid = object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            self.write_event(
                trigger_kind,
                trigger,
                uid,
                crate::problems::WAITING_FOR_DELETION,
                &message,
                None,
            )
            .await
        }
        .await;
        match written {
            Ok(()) => {
                if told.len() >= TOLD_AT_MOST {
                    told.clear();
                }
                told.insert(message);
            }
            Err(error) => {
                tracing::warn!(event_trigger = %trigger, error = %sluice_runtime::error_chain(&error), "failed to write the Event of a unit waiting for a deletion");
            }
        }
    }

    /// Writes the Warning Event `reason` about a trigger (`problems::event`), dated now; a
    /// client span under `span`.
    async fn write_event(
        &self,
        trigger_kind: &str,
        trigger: &str,
        uid: &str,
        reason: &str,
        message: &str,
        span: Option<TraceContext>,
    ) -> sluice_kube::Result<()> {
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let event = crate::problems::event(trigger_kind, trigger, uid, reason, message, &now);
        let start = SystemTime::now();
        let written = async {
            let kind = self.kind("v1", "Event").await?;
            apply::apply(&self.client, &kind, &event, FIELD_MANAGER).await
        }
        .await;
        let name = event.pointer("/metadata/name").and_then(Value::as_str);
        let namespace = crate::problems::EVENT_NAMESPACE;
        Request::new("PATCH", "v1", "Event", namespace, name.unwrap_or_default()).record_outcome(
            span.as_ref(),
            start,
            &written,
        );
        written.map(|_| ())
    }

    /// The desired objects under the names of what event-manager generated for the same
    /// things (`adopt`), from one LIST of the pair's objects the first time the pair is seen.
    async fn adopt(
        &self,
        pair: &BTreeMap<String, String>,
        desired: Vec<Value>,
    ) -> sluice_kube::Result<Vec<Value>> {
        if desired.is_empty() {
            return Ok(desired);
        }
        let key = pair_key(pair);
        let found = lock(&self.adoptable).get(&key).cloned();
        let existing = match found {
            Some(existing) => existing,
            None => {
                let adoptable = Arc::new(self.list_owned(pair).await?.adoptable);
                lock(&self.adoptable).insert(key, adoptable.clone());
                adoptable
            }
        };
        Ok(existing.adopt(desired))
    }

    /// What carries `labels` (a pair's, or a unit's beside them), as an index and an adoption
    /// snapshot, from one listing of the metadata of the objects of each owned kind (in
    /// Sveltos's namespace for a namespaced kind), a page at a time: a pair of many units is
    /// never held whole.
    async fn list_owned(&self, labels: &BTreeMap<String, String>) -> sluice_kube::Result<PairSeed> {
        let mut listed = PairSeed::default();
        for (api_version, kind_name) in OWNED {
            let kind = self.kind(api_version, kind_name).await?;
            let mut of_kind = PairSeed::default();
            apply::visit_labelled_metadata_in(
                &self.client,
                &kind,
                Some(&self.namespace),
                labels,
                |seen| match seen {
                    apply::Listed::Object(object) => of_kind.add(kind_name, &object),
                    apply::Listed::Restarted => of_kind = PairSeed::default(),
                },
            )
            .await?;
            listed.extend(of_kind);
        }
        Ok(listed)
    }

    /// What a unit of the pair holds (the whole pair's objects when `whole`), from the pair's
    /// index; the first unit that needs it lists the pair (one LIST per owned kind) while the
    /// others wait. The same LIST is the adoption's snapshot when the pair has none. A unit
    /// whose execution failed lists only its own objects.
    async fn known(
        &self,
        key: &str,
        pair: &BTreeMap<String, String>,
        unit: &UnitLabels,
        whole: bool,
    ) -> sluice_kube::Result<Known> {
        if let Some(known) = lock(&self.pairs).known(key, unit, whole) {
            return Ok(known);
        }
        self.seeded().await;
        let empty = {
            let mut pairs = lock(&self.pairs);
            if let Some(known) = pairs.known(key, unit, whole) {
                return Ok(known);
            }
            // Known to hold nothing: indexed empty.
            pairs.is_empty_by_seed(key).then(|| {
                let generation = pairs.begin_listing(key);
                pairs.install(key, generation, Default::default(), unit, whole)
            })
        };
        if let Some(known) = empty {
            // With nothing to adopt.
            lock(&self.adoptable).entry(key.to_string()).or_default();
            return Ok(known);
        }
        if !whole && lock(&self.pairs).is_stale(key, unit) {
            // Only this unit failed: it alone is listed, not every unit of the pair (only the
            // unit's own objects are kept: a selector of fewer labels may select more).
            let mut labels = pair.clone();
            labels.extend(unit.iter().map(|(k, v)| (k.clone(), v.clone())));
            let listed = self.list_owned(&labels).await?.listing;
            return Ok(lock(&self.pairs).relearn(key, unit, listed));
        }
        let gate = lock(&self.listing)
            .entry(key.to_string())
            .or_default()
            .clone();
        let _listing = gate.lock().await;
        if let Some(known) = lock(&self.pairs).known(key, unit, whole) {
            return Ok(known);
        }
        let generation = lock(&self.pairs).begin_listing(key);
        let PairSeed { listing, adoptable } = self.list_owned(pair).await?;
        let index = listing.index();
        lock(&self.adoptable)
            .entry(key.to_string())
            .or_insert_with(|| Arc::new(adoptable));
        Ok(lock(&self.pairs).install(key, generation, index, unit, whole))
    }
}

/// Applies one object; returns its reference and its content `hash` once applied. It takes
/// owned values: a stream of futures over borrowed ones is not provably `Send` (a compiler
/// limit with higher-ranked lifetimes), and the runner's stages must be.
async fn apply_one(
    client: &kube::Client,
    object: Value,
    r: pb::ObjectRef,
    kind: Kind,
    hash: String,
    span: Option<TraceContext>,
) -> sluice_kube::Result<(pb::ObjectRef, String)> {
    let start = SystemTime::now();
    let outcome = apply::apply_unread(client, &kind, &object, FIELD_MANAGER).await;
    record_request(span, "PATCH", &r, start, outcome.as_ref().err());
    outcome.map(|()| (r, hash))
}

/// Deletes one object (owned, as [`apply_one`]); returns its reference with what became of it.
async fn delete_one(
    client: &kube::Client,
    r: pb::ObjectRef,
    kind: Kind,
    span: Option<TraceContext>,
) -> (pb::ObjectRef, sluice_kube::Result<()>) {
    let start = SystemTime::now();
    let outcome = apply::delete(client, &kind, &r.namespace, &r.name).await;
    record_request(span, "DELETE", &r, start, outcome.as_ref().err());
    (r, outcome)
}

/// Exports an API request of a unit as a client span under the unit's span (ADR 0045):
/// `PATCH ClusterProfile`, say, from `start` to now.
fn record_request(
    unit: Option<TraceContext>,
    method: &'static str,
    r: &pb::ObjectRef,
    start: SystemTime,
    error: Option<&sluice_kube::Error>,
) {
    Request::new(method, &r.api_version, &r.kind, &r.namespace, &r.name).record(
        unit.as_ref(),
        start,
        error.map(|e| sluice_runtime::error_chain(e)),
    );
}

/// A (trigger, cluster) pair's owner labels as one map key.
pub(crate) fn pair_key(pair: &BTreeMap<String, String>) -> String {
    pair.iter().map(|(k, v)| format!("{k}={v},")).collect()
}

/// The guarded maps hold no invariant a panicking holder could break half-way: use them anyway.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_batch_runs_eight_units_at_once_and_a_large_one_half_of_them_up_to_the_most() {
        assert_eq!(units_at_once(1, 32), 8);
        assert_eq!(units_at_once(16, 32), 8);
        assert_eq!(units_at_once(40, 32), 20);
        assert_eq!(units_at_once(256, 32), 32);
        assert_eq!(units_at_once(256, 1024), 128);
        // A lower --apply-concurrency is the most also while keeping up.
        assert_eq!(units_at_once(1, 4), 4);
        assert_eq!(units_at_once(256, 1), 1);
        assert_eq!(units_at_once(0, 0), 1);
    }
}
