//! The evaluator's object path against a real nats-server: ResourceChanges in, match units
//! (members and a head) per deployed (cluster, EventSource) out. A changed object republishes
//! only the sets whose content changed, and a start-up that fans out to more sets than the ack budget allows in
//! flight publishes them all and acks every input.

use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message as _;
use serde_json::json;
use sluice_bus::{topology, Bus, Outgoing};
use sluice_proto::v1 as pb;
use sluice_testkit::{wait_for, NatsServer};

#[path = "common/pipeline.rs"]
mod common;
use common::{cluster, config, start_evaluator};

const DEADLINE: Duration = Duration::from_secs(60);
const CLUSTERS: usize = 50;
/// EventSource `es-k` selects the Services labelled `team: t<k % TEAMS>`.
const SOURCES: usize = 100;
const TEAMS: usize = 4;

/// `clusters` (50 in the main test) × 100 EventSources: 5,000 deployed pairs, more than one
/// ack budget.
async fn fleet_config(bus: &Bus, clusters: usize) -> anyhow::Result<()> {
    for c in 0..clusters {
        let name = format!("c{c}");
        config(
            bus,
            "SveltosCluster",
            "default",
            &name,
            json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
            "metadata": {"name": name, "namespace": "default", "labels": {"env": "production"}},
            "status": {"ready": true}}),
        )
        .await?;
    }
    for k in 0..SOURCES {
        let source = format!("es-{k}");
        config(bus, "EventSource", "", &source, json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
            "metadata": {"name": source},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service",
                "labelFilters": [{"key": "team", "operation": "Equal", "value": format!("t{}", k % TEAMS)}]}]}})).await?;
        config(
            bus,
            "EventTrigger",
            "",
            &format!("et-{k}"),
            json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": format!("et-{k}")},
            "spec": {"sourceClusterSelector": {"matchLabels": {"env": "production"}},
                     "eventSourceName": source,
                     "policyRefs": [{"name": "p", "namespace": "default", "kind": "ConfigMap"}]}}),
        )
        .await?;
    }
    Ok(())
}

/// Publishes Service `svc-<n>` in cluster `c<c>` labelled `team: <team>` as the watcher would,
/// in the trace `trace` (32 hex digits) when given.
async fn service(
    bus: &Bus,
    (c, n): (usize, usize),
    team: &str,
    version: u32,
    trace: Option<&str>,
) -> anyhow::Result<()> {
    let mut change = service_change((c, n), team, version)?;
    change.traceparent = trace.map(|trace| format!("00-{trace}-00f067aa0ba902b7-01"));
    bus.publish_durably(change).await?;
    Ok(())
}

/// The ResourceChange of Service `svc-<n>` in cluster `c<c>` labelled `team: <team>`.
fn service_change((c, n): (usize, usize), team: &str, version: u32) -> anyhow::Result<Outgoing> {
    let id = cluster(&format!("c{c}"));
    let name = format!("svc-{n}");
    let object = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": version.to_string(),
                     "labels": {"team": team}},
        "spec": {"ports": [{"port": 443}]}});
    let change = pb::ResourceChange {
        sealed_object_json: Vec::new(),
        cluster: Some(sluice_wire::cluster_ref(&id)),
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: "default".into(),
        name: name.clone(),
        deleted: false,
        resource_version: version.to_string(),
        object_json: serde_json::to_vec(&object)?,
    };
    let subject = topology::change_subject(
        &sluice_wire::cluster_tokens(&id),
        "",
        "Service",
        "default",
        &name,
    );
    Ok(Outgoing {
        ttl: None,
        subject,
        msg_id: format!("c{c}/{name}/{version}"),
        payload: change.encode_to_vec().into(),
        traceparent: None,
    })
}

/// Every (cluster, EventSource) set as a reader assembles it from the MATCH stream: its
/// members' names, and the stream sequence and trace of its head.
struct Stored {
    names: Vec<String>,
    sequence: u64,
    /// The trace id of its head's `traceparent`.
    trace: String,
}

async fn match_sets(bus: &Bus) -> anyhow::Result<BTreeMap<(String, String), Stored>> {
    let mut view = sluice_wire::match_units::MatchSets::default();
    let mut heads = BTreeMap::new();
    for delivered in bus
        .replay_state(topology::MATCH, topology::MATCH.subjects)
        .await?
    {
        let unit = sluice_wire::match_units::decode(&delivered, None)?;
        let head = matches!(unit, sluice_wire::match_units::Unit::Head(_));
        if let Some((key, _)) = view.apply(unit, delivered.sequence) {
            if head {
                heads.insert(key, delivered);
            }
        }
    }
    let mut sets = BTreeMap::new();
    for (key, head) in heads {
        let Some(set) = view.assemble(&key) else {
            continue;
        };
        let traceparent = head.traceparent.unwrap_or_default();
        let stored = Stored {
            names: set.matching.into_iter().map(|o| o.name).collect(),
            sequence: head.sequence,
            trace: traceparent
                .split('-')
                .nth(1)
                .unwrap_or_default()
                .to_string(),
        };
        sets.insert((key.0.name, key.1), stored);
    }
    Ok(sets)
}

/// Waits until the evaluator's change consumer has acked every change up to `sequence`.
async fn until_acked(bus: &Bus, sequence: u64) -> anyhow::Result<()> {
    let stream = bus.jetstream().get_stream(topology::CHANGES.name).await?;
    wait_for("changes acked", DEADLINE, || {
        let stream = stream.clone();
        async move {
            let mut consumer = stream
                .get_consumer::<async_nats::jetstream::consumer::pull::Config>(
                    topology::EVALUATOR_CHANGES.durable,
                )
                .await
                .ok()?;
            let state = consumer.info().await.ok()?;
            (state.num_ack_pending == 0 && state.ack_floor.stream_sequence >= sequence)
                .then_some(())
        }
    })
    .await
}

async fn last_change_sequence(bus: &Bus) -> anyhow::Result<u64> {
    let mut stream = bus.jetstream().get_stream(topology::CHANGES.name).await?;
    Ok(stream.info().await?.state.last_sequence)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_republish_only_the_sets_they_change_and_a_fan_out_beyond_the_ack_budget_completes(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    fleet_config(&bus, CLUSTERS).await?;
    // Every cluster has one Service per team before the evaluator starts: its start-up builds
    // all 5,000 sets at once.
    for c in 0..CLUSTERS {
        for n in 0..TEAMS {
            service(&bus, (c, n), &format!("t{n}"), 1, None).await?;
        }
    }
    let (token, task) = start_evaluator(&nats.url());
    let pairs = CLUSTERS * SOURCES;
    assert!(pairs > topology::ACKS_IN_FLIGHT);
    let sets = wait_for("every match set", DEADLINE, || async {
        let sets = match_sets(&bus).await.ok()?;
        (sets.len() == pairs).then_some(sets)
    })
    .await?;
    for ((cluster, source), stored) in &sets {
        let k: usize = source.trim_start_matches("es-").parse()?;
        assert_eq!(
            stored.names,
            [format!("svc-{}", k % TEAMS)],
            "{cluster}/{source}"
        );
    }

    // svc-1 of c7 moves from team t1 to t2, and a new Service joins t3 in c9.
    const MOVED: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const JOINED: &str = "0af7651916cd43dd8448eb211c80319c";
    service(&bus, (7, 1), "t2", 2, Some(MOVED)).await?;
    service(&bus, (9, 4), "t3", 1, Some(JOINED)).await?;
    until_acked(&bus, last_change_sequence(&bus).await?).await?;
    let after = wait_for("the changed sets", DEADLINE, || async {
        let after = match_sets(&bus).await.ok()?;
        let key = ("c9".to_string(), "es-3".to_string());
        (after.get(&key)?.names.len() == 2).then_some(after)
    })
    .await?;
    let mut changed = Vec::new();
    for (key, stored) in &after {
        if sets[key].sequence != stored.sequence {
            changed.push((key.0.clone(), key.1.clone(), stored.names.clone()));
            // A set continues the trace of the change that changed it.
            let trace = if key.0 == "c7" { MOVED } else { JOINED };
            assert_eq!(stored.trace, trace, "{}/{}", key.0, key.1);
        }
    }
    let mut want = Vec::new();
    for k in 0..SOURCES {
        let source = format!("es-{k}");
        match k % TEAMS {
            1 => want.push(("c7".to_string(), source, vec![])),
            2 => want.push((
                "c7".to_string(),
                source,
                vec!["svc-1".to_string(), "svc-2".to_string()],
            )),
            3 => want.push((
                "c9".to_string(),
                source,
                vec!["svc-3".to_string(), "svc-4".to_string()],
            )),
            _ => {}
        }
    }
    changed.sort();
    want.sort();
    assert_eq!(
        changed, want,
        "only the sets whose content changed are republished"
    );
    token.cancel();
    task.await??;
    Ok(())
}

/// The evaluator's acks cover earlier deliveries (ADR 0013): a change whose match sets are not
/// stored may already be acked, so the evaluator stops instead of waiting for a redelivery,
/// and its next start rebuilds every set from the CHANGES stream, that change included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_cannot_be_stored_stops_the_evaluator_and_its_restart_publishes_it(
) -> anyhow::Result<()> {
    const FEW: usize = 3;
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    fleet_config(&bus, FEW).await?;
    for c in 0..FEW {
        for n in 0..TEAMS {
            service(&bus, (c, n), &format!("t{n}"), 1, None).await?;
        }
    }
    let (_token, task) = start_evaluator(&nats.url());
    let pairs = FEW * SOURCES;
    wait_for("every match set", DEADLINE, || async {
        (match_sets(&bus).await.ok()?.len() == pairs).then_some(())
    })
    .await?;

    // The MATCH stream goes away; svc-1 of c1 moves from team t1 to t2.
    bus.jetstream().delete_stream(topology::MATCH.name).await?;
    service(&bus, (1, 1), "t2", 2, None).await?;
    let ended = tokio::time::timeout(DEADLINE, task).await??;
    let error = ended.err().map(|e| format!("{e:#}"));
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("rebuild from the CHANGES stream")),
        "the evaluator must stop when a set is not stored: {error:?}"
    );

    // A new start (which creates the stream again) publishes every set, the move included.
    let (token, task) = start_evaluator(&nats.url());
    let sets = wait_for("every match set again", DEADLINE, || async {
        let sets = match_sets(&bus).await.ok()?;
        (sets.len() == pairs).then_some(sets)
    })
    .await?;
    for ((cluster, source), stored) in &sets {
        let k: usize = source.trim_start_matches("es-").parse()?;
        let mut want = vec![format!("svc-{}", k % TEAMS)];
        if cluster == "c1" {
            match k % TEAMS {
                1 => want.clear(),
                2 => want.insert(0, "svc-1".to_string()),
                _ => {}
            }
        }
        assert_eq!(stored.names, want, "{cluster}/{source}");
    }
    token.cancel();
    task.await??;
    Ok(())
}

/// A burst of changes to the same sets, published faster than the evaluator reads them: the
/// changes of a batch, and of the batches waiting behind it (ADR 0014), join the same sets
/// before they are published, so each set is published far fewer times than it changed, and
/// nothing held is lost: every set ends with its final content. (How much the hold behind a
/// backlog saves is measured by `examples/service_throughput.rs`: the sets it stores.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_ends_with_every_final_set_published_far_fewer_times_than_it_changed(
) -> anyhow::Result<()> {
    const BURST: usize = 2_000;
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    fleet_config(&bus, 1).await?;
    service(&bus, (0, 0), "t0", 1, None).await?;
    let (token, task) = start_evaluator(&nats.url());
    wait_for("every match set", DEADLINE, || async {
        (match_sets(&bus).await.ok()?.len() == SOURCES).then_some(())
    })
    .await?;
    let mut stream = bus.jetstream().get_stream(topology::MATCH.name).await?;
    let before = stream.info().await?.state.last_sequence;

    // Services svc-1.. join team t<n % 4> with every publish ack in flight: each change alters
    // the 25 sets of its team.
    let mut acks = Vec::with_capacity(BURST);
    for n in 1..=BURST {
        acks.push(
            bus.publish(service_change((0, n), &format!("t{}", n % TEAMS), 1)?)
                .await?,
        );
    }
    for ack in acks {
        ack.await?;
    }
    until_acked(&bus, last_change_sequence(&bus).await?).await?;
    // svc-0 (t0) and the burst's Services, by team, in the set's (name) order.
    let team_of = |source: &str| source.trim_start_matches("es-").parse::<usize>().ok();
    let want = |team: usize| {
        let mut names: Vec<String> = (0..=BURST)
            .filter(|n| n % TEAMS == team)
            .map(|n| format!("svc-{n}"))
            .collect();
        names.sort();
        names
    };
    let sets = wait_for("the final sets", DEADLINE, || async {
        let sets = match_sets(&bus).await.ok()?;
        sets.iter()
            .all(|((_, source), s)| {
                Some(s.names.len()) == team_of(source).map(|t| want(t % TEAMS).len())
            })
            .then_some(sets)
    })
    .await?;
    for ((_, source), stored) in &sets {
        let team = team_of(source).unwrap_or_default() % TEAMS;
        assert_eq!(stored.names, want(team), "{source}");
    }
    // Each change is one new member of each set of its team, published once; the heads that
    // close the sets are what holding saves.
    let published = stream.info().await?.state.last_sequence - before;
    let changed = (BURST * SOURCES / TEAMS) as u64;
    let heads = published - changed;
    assert!(
        heads * 4 <= changed,
        "{heads} heads published for {changed} set changes"
    );
    token.cancel();
    task.await??;
    Ok(())
}
