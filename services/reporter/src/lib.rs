//! The reporter service: keeps the management-cluster EventReports (named and labelled as
//! Sveltos names them, spec §3.2) in step with the evaluator's match sets. It reads the match
//! units in parallel with the renderer, keeps each set from its members, and writes a report
//! when its head arrives, at most once a second per report while changes keep coming: the
//! report is a view for users, nothing waits for it. A failed evaluation shows in
//! `status.failureMessage` and leaves the last good `matchingResources` in place.

pub mod failures;
pub mod orphans;
pub mod stage;

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use base64::Engine as _;
use futures::StreamExt as _;
use serde_json::{json, Value};
use sluice_bus::runner::Runner;
use sluice_bus::topology;
use sluice_domain::cluster::ClusterId;
use sluice_domain::naming;
use sluice_domain::reference::{object_reference, object_reference_len};
use sluice_kube::apply::{self, Kind};
use sluice_proto::v1 as pb;
use sluice_runtime::TraceContext;
use sluice_runtime::{CancellationToken, CommonArgs, Health};
use sluice_wire::match_units::{self, Applied, MatchSets};

const FIELD_MANAGER: &str = "sluice-reporter";

/// The EventReport object for a match set (spec §3.1): `resources` is each collected object's
/// JSON followed by `\n---\n`, base64-encoded as Kubernetes encodes `[]byte`.
pub fn event_report(cluster: &ClusterId, set: &pb::MatchSet) -> Value {
    report_of(cluster, &set.event_source, &set.matching, &set.resources)
}

fn report_of(
    cluster: &ClusterId,
    event_source: &str,
    matching: &[pb::ObjectRef],
    resources: &[Vec<u8>],
) -> Value {
    let matching: Vec<Value> = matching
        .iter()
        .map(|m| object_reference(&m.api_version, &m.kind, &m.namespace, &m.name))
        .collect();
    let mut spec = json!({
        "clusterNamespace": cluster.namespace,
        "clusterName": cluster.name,
        "clusterType": cluster.cluster_type.as_str(),
        "eventSourceName": event_source,
        "matchingResources": matching,
    });
    if !resources.is_empty() {
        let mut joined = Vec::new();
        for r in resources {
            joined.extend_from_slice(r);
            joined.extend_from_slice(RESOURCE_SEPARATOR);
        }
        spec["resources"] = json!(base64::engine::general_purpose::STANDARD.encode(joined));
    }
    json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1",
        "kind": "EventReport",
        "metadata": {
            "name": naming::event_report_name(cluster, event_source),
            "namespace": cluster.namespace,
            "labels": naming::event_report_labels(cluster, event_source),
        },
        "spec": spec,
    })
}

/// What follows each collected resource in `spec.resources` before it is base64-encoded.
const RESOURCE_SEPARATOR: &[u8] = b"\n---\n";

/// The report of `cluster` and `event_source` without matching references or resources.
fn empty_report(cluster: &ClusterId, event_source: &str) -> Value {
    report_of(cluster, event_source, &[], &[])
}

/// The bytes [`event_report`] of `set` takes as JSON, computed from its lists without building
/// it.
fn event_report_len(empty: &Value, set: &pb::MatchSet) -> usize {
    let resources = (!set.resources.is_empty()).then(|| set.resources.iter().map(Vec::len));
    report_len(empty, set.matching.iter(), resources)
}

/// The bytes the report of a set held as `view` takes as JSON, measured from its members as
/// they are: neither copied nor sorted (the report lists them as [`MatchSets::assemble`]
/// orders them, which changes no length).
fn view_report_len(empty: &Value, view: &match_units::SetView) -> usize {
    let none = pb::ObjectRef::default();
    let references = view.members().map(|m| m.object.as_ref().unwrap_or(&none));
    let collected = view.members().any(|m| !m.resource.is_empty());
    let resources = collected.then(|| view.members().map(|m| m.resource.len()));
    report_len(empty, references, resources)
}

/// A report's JSON length from its parts: its empty form, plus the references (each measured
/// as [`object_reference`] writes it, with the commas between), plus, when resources are
/// collected, the `resources` field's base64 text of resources of these lengths.
fn report_len<'a>(
    empty: &Value,
    references: impl Iterator<Item = &'a pb::ObjectRef>,
    resources: Option<impl Iterator<Item = usize>>,
) -> usize {
    let (count, references) = references.fold((0usize, 0usize), |(count, len), m| {
        let reference = object_reference_len(&m.api_version, &m.kind, &m.namespace, &m.name);
        (count + 1, len + reference)
    });
    let commas = count.saturating_sub(1);
    // The empty report's `[]` already counts the list's brackets.
    let mut len = sluice_domain::size::json_len(empty) + references + commas;
    if let Some(resources) = resources {
        let joined: usize = resources.map(|r| r + RESOURCE_SEPARATOR.len()).sum();
        let base64 = joined.div_ceil(3) * 4;
        // ,"resources":"<base64>" (base64 needs no JSON escapes)
        len += 1 + "\"resources\"".len() + 1 + 2 + base64;
    }
    len
}

/// The most JSON an EventReport may take: etcd's default request limit (1.5 MiB, what
/// kube-apiserver can store in one object) less 64 KiB for the metadata and managed fields the
/// server adds.
pub const EVENT_REPORT_LIMIT: usize = 1_572_864 - 65_536;

/// The EventReport to write for a match set, bounded by `limit` bytes of JSON: when the matching
/// references and collected resources do not fit, the report keeps neither and the second value
/// says why (its size and the limit), for the report's `status.failureMessage`. The match set
/// itself flows on unchanged: ClusterProfiles never depend on the report being storable.
pub fn bounded_event_report(
    cluster: &ClusterId,
    set: &pb::MatchSet,
    limit: usize,
) -> (Value, Option<String>) {
    let empty = empty_report(cluster, &set.event_source);
    let size = event_report_len(&empty, set);
    if size <= limit {
        return (event_report(cluster, set), None);
    }
    let reason = too_large(cluster, &set.event_source, set.matching.len(), size, limit);
    (empty, Some(reason))
}

/// Why the report of the set held as `view` cannot keep its lists, if it cannot: as
/// [`bounded_event_report`] says it, measured without assembling the set, so that a set too
/// large to show costs its reader no copy of its members.
pub fn view_too_large(
    cluster: &ClusterId,
    event_source: &str,
    view: &match_units::SetView,
    limit: usize,
) -> Option<String> {
    let size = view_report_len(&empty_report(cluster, event_source), view);
    (size > limit).then(|| too_large(cluster, event_source, view.len(), size, limit))
}

fn too_large(
    cluster: &ClusterId,
    event_source: &str,
    count: usize,
    size: usize,
    limit: usize,
) -> String {
    format!(
        "eventreport {}/{}: {count} matching resources take {size} bytes, over the {limit} bytes \
         one object may hold in the API server; matchingResources and resources are left out",
        cluster.namespace,
        naming::event_report_name(cluster, event_source),
    )
}

/// What keeping one report in step takes: the decision, made from data alone
/// ([`decide`]); [`execute`] carries it out.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// The set is gone: delete its report.
    Delete { namespace: String, name: String },
    /// Apply the report, then its status with `failure`.
    Apply {
        report: Value,
        failure: Option<String>,
    },
    /// The evaluation failed: the last good report stays; `empty` is created when there is no
    /// report yet, so that the failure has a place to show; then the status with `failure`.
    Failed {
        empty: Value,
        failure: Option<String>,
    },
}

/// The write that keeps `key`'s report in step with `set`; `failure` is what its status says
/// went wrong besides (members that could not be carried, rendering), if anything.
pub fn decide(cluster: &ClusterId, set: &pb::MatchSet, failure: Option<String>) -> Write {
    if set.removed {
        return Write::Delete {
            namespace: cluster.namespace.clone(),
            name: naming::event_report_name(cluster, &set.event_source),
        };
    }
    if !set.failure_message.is_empty() {
        return Write::Failed {
            empty: empty_report(cluster, &set.event_source),
            failure,
        };
    }
    let (report, too_large) = bounded_event_report(cluster, set, EVENT_REPORT_LIMIT);
    let failure = match (too_large, failure) {
        (Some(size), Some(other)) => Some(format!("{size}; {other}")),
        (size, other) => size.or(other),
    };
    Write::Apply { report, failure }
}

/// Carries out `write` for the report of `cluster` and `event_source`; each request is a
/// client span under `span`, the span of the input that last changed the set, when spans are
/// exported (ADR 0045).
async fn execute(
    client: &kube::Client,
    kind: &Kind,
    cluster: &ClusterId,
    event_source: &str,
    write: &Write,
    span: Option<&TraceContext>,
) -> sluice_kube::Result<()> {
    let name = naming::event_report_name(cluster, event_source);
    let request = |method| report_request(method, &cluster.namespace, &name, "");
    let failure = match write {
        Write::Delete { namespace, name } => {
            let start = SystemTime::now();
            let outcome = apply::delete(client, kind, namespace, name).await;
            return traced(
                report_request("DELETE", namespace, name, ""),
                span,
                start,
                outcome,
            );
        }
        Write::Apply { report, failure } => {
            let start = SystemTime::now();
            let outcome = apply::apply_unread(client, kind, report, FIELD_MANAGER).await;
            traced(request("PATCH"), span, start, outcome)?;
            failure
        }
        Write::Failed { empty, failure } => {
            let start = SystemTime::now();
            let outcome = apply::get(client, kind, &cluster.namespace, &name).await;
            if traced(request("GET"), span, start, outcome)?.is_none() {
                let start = SystemTime::now();
                let outcome = apply::apply_unread(client, kind, empty, FIELD_MANAGER).await;
                traced(request("PATCH"), span, start, outcome)?;
            }
            failure
        }
    };
    let start = SystemTime::now();
    let outcome = write_status(client, kind, cluster, event_source, failure.as_deref()).await;
    traced(
        report_request("PATCH", &cluster.namespace, &name, "status"),
        span,
        start,
        outcome,
    )
}

/// A request about the EventReport `namespace`/`name`, for its span.
fn report_request<'a>(
    method: &'static str,
    namespace: &'a str,
    name: &'a str,
    subresource: &'a str,
) -> sluice_runtime::spans::Request<'a> {
    sluice_runtime::spans::Request {
        subresource,
        ..sluice_runtime::spans::Request::new(
            method,
            "lib.projectsveltos.io/v1beta1",
            "EventReport",
            namespace,
            name,
        )
    }
}

/// Records `request`, made from `start`, under `span`, and returns its `outcome`.
fn traced<T>(
    request: sluice_runtime::spans::Request<'_>,
    span: Option<&TraceContext>,
    start: SystemTime,
    outcome: sluice_kube::Result<T>,
) -> sluice_kube::Result<T> {
    request.record_outcome(span, start, &outcome);
    outcome
}

/// Writes an EventReport's status; a report that does not exist (yet) is left alone.
async fn write_status(
    client: &kube::Client,
    kind: &Kind,
    cluster: &ClusterId,
    event_source: &str,
    failure: Option<&str>,
) -> sluice_kube::Result<()> {
    let name = naming::event_report_name(cluster, event_source);
    // A field this manager stops applying is removed by the server: no `null` is sent for
    // "no failure" (the CRD's failureMessage is a non-nullable string).
    let mut status = json!({"phase": "Processed"});
    if let Some(failure) = failure {
        status["failureMessage"] = json!(failure);
    }
    let status = json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1",
        "kind": "EventReport",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "status": status,
    });
    match apply::apply_status(
        client,
        kind,
        &cluster.namespace,
        &name,
        &status,
        FIELD_MANAGER,
    )
    .await
    {
        Err(error) if error.is_not_found() => Ok(()),
        outcome => outcome,
    }
}

/// How many failing members a report's message spells out; the rest are counted.
const SHOWN_MEMBER_FAILURES: usize = 5;

/// What the members that could not be carried say (an object over the bus's payload limit).
pub fn member_failures(set: &pb::MatchSet, view: &match_units::SetView) -> Option<String> {
    let failing: Vec<&str> = view
        .ordered_where(|m| !m.failure_message.is_empty())
        .into_iter()
        .map(|m| m.failure_message.as_str())
        .collect();
    if failing.is_empty() || !set.failure_message.is_empty() {
        return None;
    }
    let mut message = failing[..failing.len().min(SHOWN_MEMBER_FAILURES)].join("; ");
    if failing.len() > SHOWN_MEMBER_FAILURES {
        message.push_str(&format!(
            "; and {} more failing members",
            failing.len() - SHOWN_MEMBER_FAILURES
        ));
    }
    Some(message)
}

/// Runs the reporter until `token` is cancelled.
pub async fn run(
    common: CommonArgs,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    // The key opens the managed clusters' Secrets an EventSource collects (the report shows
    // them, as Sveltos's does).
    let Some((bus, bus_key)) =
        sluice_wire::service::connect(&common, topology::REPORTER, &health, &token).await?
    else {
        // Stopped while standing by: another process holds the lease.
        return Ok(());
    };
    let client = sluice_kube::client::for_service(&common, &health, &token, bus.fence())
        .await
        .context("failed to build the management cluster client")?;
    let kind = loop {
        match apply::resolve(&client, "lib.projectsveltos.io/v1beta1", "EventReport").await {
            Ok(kind) => break kind,
            Err(error) => {
                tracing::warn!(error = %error, "EventReport kind not served yet, retrying");
                tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
            }
        }
    };
    let mut stage = stage::ReporterStage {
        bus: bus.clone(),
        key: bus_key,
        client,
        kind,
        sets: MatchSets::default(),
        schedule: sluice_runtime::schedule::Schedule::default(),
        failures: failures::Failures::default(),
        written: health.counter("sluice_reporter_reports_written_total"),
        errors: health.counter("sluice_reporter_write_errors_total"),
        watched: sluice_kube::watch::Written::default(),
        spans: std::collections::HashMap::new(),
        repairs: std::collections::HashMap::new(),
    };
    // Rendering failures come back from the applier; the statuses start from what it recorded.
    let (applied, applied_feed) = bus
        .follow_state(topology::APPLIED, topology::APPLIED.subjects)
        .await?;
    for delivered in &applied {
        if let Ok(result) = sluice_wire::decode::<pb::ApplyResult>("ApplyResult", delivered) {
            stage.failures.record_result(&result);
        }
    }
    // The sets as the MATCH stream holds them; every report is written once from them, since
    // a report whose head was acked may not have been written before a restart.
    let mut last_seen = sluice_bus::Freshness::default();
    for delivered in bus
        .replay_state(topology::MATCH, topology::MATCH.subjects)
        .await?
    {
        // An unreadable unit is not recorded: its delivery is dead-lettered by the runner.
        if let Ok(unit) = match_units::decode(&delivered, stage.key.as_ref()) {
            last_seen.record(&delivered);
            if let Some((key, Applied::Head(_))) = stage.sets.apply(unit, delivered.sequence) {
                stage.schedule.mark(&key, tokio::time::Instant::now());
            }
        }
    }
    delete_orphaned_reports(&stage).await;
    let forgotten = health.counter("sluice_reporter_subjects_forgotten_total");
    let runner = Runner::bind(&bus, topology::REPORTER_MATCH)
        .await?
        .with_freshness(last_seen)
        .with_hooks(sluice_bus::runner::Hooks {
            forgotten: std::sync::Arc::new(move |n| forgotten.add(n)),
            health: Some(health.clone()),
            ..Default::default()
        });
    // A report someone else deletes or edits is written again: one watch of the EventReports.
    let gone = sluice_kube::watch::drained(sluice_kube::watch::watch_owned(
        stage.client.clone(),
        stage.kind.clone(),
        None,
        sluice_domain::naming::REPORT_LABEL_EVENT_SOURCE,
        (remember_every_report, FIELD_MANAGER),
        stage.watched.clone(),
        None,
    ))
    .map(|batch| match batch {
        Ok(changes) => stage::Side::Owned(changes),
        Err(error) => stage::Side::WatchFailed(error.to_string()),
    });
    let side = futures::stream::select(applied_feed.map(stage::Side::Applied), gone);
    health.set_ready(true);
    let outcome = runner.run(&mut stage, side, token).await;
    bus.close().await;
    outcome?;
    Ok(())
}

/// Deletes the reports this reporter wrote whose set the replayed MATCH stream does not hold
/// ([`orphans::orphaned`]: their head expired while the reporter was away). The reports are
/// listed as metadata, a page at a time; one that cannot be listed or deleted is logged and
/// left as it is, and the reporter goes on.
async fn delete_orphaned_reports(stage: &stage::ReporterStage) {
    let mut orphaned = Vec::new();
    let listed = apply::visit_selected_metadata_in(
        &stage.client,
        &stage.kind,
        None,
        naming::REPORT_LABEL_EVENT_SOURCE,
        |listed| match listed {
            apply::Listed::Object(report) => {
                orphaned.extend(orphans::orphaned(&report, &stage.sets, FIELD_MANAGER))
            }
            apply::Listed::Restarted => orphaned.clear(),
        },
    )
    .await;
    if let Err(error) = listed {
        tracing::warn!(error = %sluice_runtime::error_chain(&error), "failed to list the EventReports: those whose set went while the reporter was away stay");
        return;
    }
    for (namespace, name) in orphaned {
        match apply::delete(&stage.client, &stage.kind, &namespace, &name).await {
            Ok(()) => {
                tracing::info!(%namespace, %name, "an EventReport whose set went while the reporter was away is deleted")
            }
            Err(error) => {
                tracing::warn!(%namespace, %name, error = %sluice_runtime::error_chain(&error), "failed to delete an EventReport whose set went while the reporter was away")
            }
        }
    }
}

/// What the watch of EventReports keeps of each: nothing but that it exists (a deleted one's
/// name says its set, `naming::event_report_keys`).
fn remember_every_report(_: &Value) -> Option<String> {
    Some(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::ClusterType;

    fn cluster() -> ClusterId {
        ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: "cluster-a".into(),
        }
    }

    fn services(count: usize) -> pb::MatchSet {
        let service = |i: usize| pb::ObjectRef {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "default".into(),
            name: format!("service-{i}"),
        };
        pb::MatchSet {
            event_source: "sveltos-service".into(),
            matching: (0..count).map(service).collect(),
            resources: (0..count)
                .map(|i| format!(r#"{{"metadata":{{"name":"service-{i}"}}}}"#).into_bytes())
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_reports_length_is_computed_as_its_json_is_written() {
        let mut sets = vec![pb::MatchSet::default(), services(1), services(7)];
        let mut odd = services(3);
        odd.matching[1].namespace.clear();
        odd.matching[2].name = "quote\"back\\slash\u{1}ü".into();
        odd.resources = vec![
            b"a".to_vec(),
            b"bc".to_vec(),
            "{\"x\": \"é\"}".as_bytes().to_vec(),
        ];
        sets.push(odd);
        let mut without_resources = services(2);
        without_resources.resources.clear();
        sets.push(without_resources);
        for set in sets {
            let empty = empty_report(&cluster(), &set.event_source);
            let built = event_report(&cluster(), &set);
            assert_eq!(
                event_report_len(&empty, &set),
                serde_json::to_vec(&built).expect("serializes").len(),
                "{built}"
            );
        }
    }

    /// The members of `set` as a reader holds them, with a head that agrees.
    fn view_of(set: &pb::MatchSet) -> MatchSets {
        let mut sets = MatchSets::default();
        for (index, object) in set.matching.iter().enumerate() {
            let member = pb::MatchMember {
                cluster: Some(sluice_wire::cluster_ref(&cluster())),
                event_source: set.event_source.clone(),
                object: Some(object.clone()),
                resource: set.resources.get(index).cloned().unwrap_or_default(),
                present: true,
                ..Default::default()
            };
            sets.apply(match_units::Unit::Member(member), index as u64 + 1);
        }
        sets
    }

    #[test]
    fn a_held_sets_report_length_is_that_of_the_report_it_assembles() {
        let mut odd = services(3);
        odd.matching[1].namespace.clear();
        odd.matching[2].name = "quote\"back\\slash\u{1}ü".into();
        // One member collected nothing: the others' resources still make the field.
        odd.resources = vec![
            b"a".to_vec(),
            Vec::new(),
            "{\"x\": \"é\"}".as_bytes().to_vec(),
        ];
        let mut without_resources = services(2);
        without_resources.resources.clear();
        let empty_set = pb::MatchSet {
            event_source: "sveltos-service".into(),
            ..Default::default()
        };
        for set in [empty_set, services(1), services(7), odd, without_resources] {
            let sets = view_of(&set);
            let key = (cluster(), set.event_source.clone());
            let assembled = sets.assemble(&key).unwrap_or(set);
            let built = serde_json::to_vec(&event_report(&cluster(), &assembled)).expect("json");
            let empty = empty_report(&cluster(), &assembled.event_source);
            let view = sets.get(&key).cloned().unwrap_or_default();
            assert_eq!(view_report_len(&empty, &view), built.len(), "{assembled:?}");
        }
    }

    #[test]
    fn a_held_set_too_large_to_list_says_so_as_the_assembled_one_does() {
        let key = (cluster(), "sveltos-service".to_string());
        let large = view_of(&services(20_000));
        let view = large.get(&key).expect("the set");
        let assembled = large.assemble(&key).expect("the set");
        let (_, expected) = bounded_event_report(&cluster(), &assembled, EVENT_REPORT_LIMIT);
        assert!(expected.is_some());
        assert_eq!(
            view_too_large(&cluster(), "sveltos-service", view, EVENT_REPORT_LIMIT),
            expected
        );
        let small = view_of(&services(3));
        let view = small.get(&key).expect("the set");
        assert_eq!(
            view_too_large(&cluster(), "sveltos-service", view, EVENT_REPORT_LIMIT),
            None
        );
        // Unlisted, the set keeps what the report's write needs besides its lists.
        let unlisted = large.assemble_unlisted(&key).expect("the set");
        assert!(unlisted.matching.is_empty() && unlisted.resources.is_empty());
        assert_eq!(
            pb::MatchSet {
                matching: Vec::new(),
                resources: Vec::new(),
                ..assembled
            },
            unlisted
        );
    }

    #[test]
    fn a_report_that_fits_is_written_whole() {
        let set = services(3);
        let (report, failure) = bounded_event_report(&cluster(), &set, EVENT_REPORT_LIMIT);
        assert_eq!(failure, None);
        assert_eq!(report, event_report(&cluster(), &set));
        assert_eq!(report["spec"]["matchingResources"][2]["name"], "service-2");
    }

    #[test]
    fn a_report_over_the_limit_keeps_no_lists_and_says_its_size_and_the_limit() {
        let set = services(20_000);
        let whole = serde_json::to_vec(&event_report(&cluster(), &set))
            .expect("a report serializes")
            .len();
        assert!(whole > EVENT_REPORT_LIMIT, "{whole} bytes");
        let (report, failure) = bounded_event_report(&cluster(), &set, EVENT_REPORT_LIMIT);
        assert_eq!(report["spec"]["matchingResources"], json!([]));
        assert!(report["spec"].get("resources").is_none(), "{report}");
        assert_eq!(report["spec"]["eventSourceName"], "sveltos-service");
        assert_eq!(
            failure,
            Some(format!(
                "eventreport default/{}: 20000 matching resources take {whole} bytes, over the \
                 {EVENT_REPORT_LIMIT} bytes one object may hold in the API server; \
                 matchingResources and resources are left out",
                naming::event_report_name(&cluster(), "sveltos-service")
            ))
        );
    }

    /// A member the evaluator could not carry (its object is over the bus's payload limit)
    /// shows in the report's failure, unless the whole set failed.
    #[test]
    fn members_that_could_not_be_carried_are_the_reports_failure() {
        let mut sets = MatchSets::default();
        let member = |name: &str, failure: &str| {
            match_units::Unit::Member(pb::MatchMember {
                cluster: Some(sluice_wire::cluster_ref(&cluster())),
                event_source: "es".into(),
                object: Some(pb::ObjectRef {
                    api_version: "v1".into(),
                    kind: "Service".into(),
                    namespace: "default".into(),
                    name: name.into(),
                }),
                present: true,
                failure_message: failure.into(),
                ..Default::default()
            })
        };
        sets.apply(member("a", ""), 1);
        for (sequence, name) in ["b", "c", "d", "e", "f", "g"].into_iter().enumerate() {
            sets.apply(
                member(name, &format!("Service default/{name} takes 40000 bytes")),
                sequence as u64 + 2,
            );
        }
        let key = (cluster(), "es".to_string());
        let view = sets.get(&key).expect("the set");
        let set = sets.assemble(&key).expect("the set");
        assert_eq!(
            member_failures(&set, view).as_deref(),
            Some(
                "Service default/b takes 40000 bytes; Service default/c takes 40000 bytes; \
                 Service default/d takes 40000 bytes; Service default/e takes 40000 bytes; \
                 Service default/f takes 40000 bytes; and 1 more failing members"
            )
        );
        let failed = pb::MatchSet {
            failure_message: "eventsource es: lua: boom".into(),
            ..set
        };
        assert_eq!(member_failures(&failed, view), None);
    }

    #[test]
    fn a_set_that_is_gone_deletes_its_report() {
        let set = pb::MatchSet {
            removed: true,
            ..services(2)
        };
        assert_eq!(
            decide(&cluster(), &set, Some("ignored".into())),
            Write::Delete {
                namespace: "default".into(),
                name: naming::event_report_name(&cluster(), "sveltos-service"),
            }
        );
    }

    #[test]
    fn a_failed_evaluation_keeps_the_last_report_and_shows_the_failure() {
        let set = pb::MatchSet {
            failure_message: "eventsource sveltos-service: lua: boom".into(),
            ..services(2)
        };
        let Write::Failed { empty, failure } = decide(&cluster(), &set, Some("rendering".into()))
        else {
            panic!("a failed set is not applied over the last good report");
        };
        assert_eq!(empty["spec"]["matchingResources"], json!([]));
        assert!(empty["spec"].get("resources").is_none(), "{empty}");
        assert_eq!(failure.as_deref(), Some("rendering"));
    }

    #[test]
    fn a_report_is_applied_with_its_size_failure_before_the_others() {
        let set = services(3);
        assert_eq!(
            decide(&cluster(), &set, None),
            Write::Apply {
                report: event_report(&cluster(), &set),
                failure: None
            }
        );
        let Write::Apply { report, failure } =
            decide(&cluster(), &services(20_000), Some("members".into()))
        else {
            panic!("a set that did not fail is applied");
        };
        assert_eq!(report["spec"]["matchingResources"], json!([]));
        let failure = failure.expect("a failure");
        assert!(
            failure.contains("over the") && failure.ends_with("; members"),
            "{failure}"
        );
    }

    #[test]
    fn a_cluster_scoped_match_is_referenced_without_a_namespace() {
        let cluster = cluster();
        let set = pb::MatchSet {
            event_source: "namespaces".into(),
            matching: vec![
                pb::ObjectRef {
                    api_version: "v1".into(),
                    kind: "Namespace".into(),
                    namespace: String::new(),
                    name: "team-a".into(),
                },
                pb::ObjectRef {
                    api_version: "v1".into(),
                    kind: "Service".into(),
                    namespace: "team-a".into(),
                    name: "web".into(),
                },
            ],
            ..Default::default()
        };
        let report = event_report(&cluster, &set);
        assert_eq!(
            report["spec"]["matchingResources"],
            json!([
                {"apiVersion": "v1", "kind": "Namespace", "name": "team-a"},
                {"apiVersion": "v1", "kind": "Service", "namespace": "team-a", "name": "web"},
            ])
        );
    }
}
