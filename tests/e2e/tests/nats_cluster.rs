//! On a bus that is a JetStream cluster of three nodes, as production runs NATS (every stream
//! with three replicas, the services given every node's URL), losing a node loses nothing and
//! stops nothing: seed 000 on the whole stack while Services are created one after another;
//! each node in turn is killed (SIGKILL) and, after more Services, started again. The services
//! run as production runs them (`k8s/overlays/prod` over `k8s/base`): with leader election,
//! whose leases live on the bus too, and the longer lease timing of a NATS cluster
//! ([`LEASE_TIMING`]). A Service created just after a kill has its ClusterProfile within
//! seconds while the node is still down, no service exits (a holder that could not renew its
//! lease would), and in the end every Service has exactly one profile: a delivery lost with
//! the node on its way to a covering stage came again (the stage bound its consumer again).

use std::time::{Duration, Instant};

use sluice_bus::topology;
use sluice_cli::demo::{self, wait_profile};
use sluice_cli::stack::{Stack, SERVICES};
use sluice_testkit::{wait_for, NatsServer};

const TRIGGER: &str = "service-network-policy";
const NODES: usize = 3;
/// Services created while all nodes run, and again while one is down, per node.
const BATCH: usize = 30;
/// One create every this often: the events keep coming while a node is down.
const PACE: Duration = Duration::from_millis(10);
/// How soon a Service created just after a node's loss must have its profile: the streams'
/// and consumers' leaders on the lost node are elected anew first (JetStream's elections take
/// 4 to 9 s after the leader is missed).
const RESUME: Duration = Duration::from_secs(30);

/// `k8s/overlays/prod`'s leader election: a lease renewal waits out JetStream's election of the
/// lease stream's leader, which the default 10 s deadline does not always outlast.
const LEASE_TIMING: [(&str, &str); 4] = [
    ("SLUICE_LEADER_ELECT", "true"),
    ("SLUICE_LEADER_ELECT_LEASE_DURATION", "30s"),
    ("SLUICE_LEADER_ELECT_RENEW_DEADLINE", "20s"),
    ("SLUICE_LEADER_ELECT_RETRY_PERIOD", "2s"),
];

fn service(name: &str) -> String {
    demo::SERVICE.replace("name: my-service", &format!("name: {name}"))
}

fn node(stack: &mut Stack, index: usize) -> &mut NatsServer {
    match index {
        0 => &mut stack.nats,
        _ => &mut stack.nats_peers[index - 1],
    }
}

async fn create_paced(stack: &Stack, names: &[String]) -> anyhow::Result<()> {
    let mut pace = tokio::time::interval(PACE);
    for name in names {
        pace.tick().await;
        stack.apply_yaml("cluster-a", &service(name)).await?;
    }
    Ok(())
}

/// Waits until every stream and durable consumer of the pipeline has a leader and all its
/// replicas current.
async fn wait_current(js: &async_nats::jetstream::Context) -> anyhow::Result<()> {
    let streams = [
        topology::CONFIG,
        topology::CHANGES,
        topology::MATCH,
        topology::DESIRED,
        topology::APPLIED,
    ];
    let durables = [
        topology::EVALUATOR_CHANGES,
        topology::REPORTER_MATCH,
        topology::RENDERER_MATCH,
        topology::APPLIER_DESIRED,
    ];
    wait_for("every replica current", RESUME * 3, || async {
        let current = |cluster: Option<async_nats::jetstream::stream::ClusterInfo>| {
            cluster.is_some_and(|cluster| {
                cluster.leader.is_some()
                    && cluster.replicas.len() == NODES - 1
                    && cluster.replicas.iter().all(|replica| replica.current)
            })
        };
        for spec in streams {
            let mut stream = js.get_stream(spec.name).await.ok()?;
            if !current(stream.info().await.ok()?.cluster.clone()) {
                return None;
            }
        }
        for spec in durables {
            let stream = js.get_stream(spec.stream.name).await.ok()?;
            let mut consumer: async_nats::jetstream::consumer::PullConsumer =
                stream.get_consumer(spec.durable).await.ok()?;
            if !current(consumer.info().await.ok()?.cluster.clone()) {
                return None;
            }
        }
        Some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_node_of_a_nats_cluster_loses_nothing_and_stops_nothing() -> anyhow::Result<()> {
    let mut stack = Stack::start_on_nats_cluster(&["cluster-a"], NODES).await?;
    for service in SERVICES {
        stack.restart_service_with(service, &LEASE_TIMING)?;
    }
    demo::install_seed(&stack, "cluster-a").await?;
    stack.apply_yaml("cluster-a", &service("warm-up")).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "warm-up", RESUME * 3).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }

    // Every stream the services set up has a replica on every node.
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    for spec in [
        topology::CONFIG,
        topology::CHANGES,
        topology::MATCH,
        topology::DESIRED,
        topology::APPLIED,
    ] {
        let info = js.get_stream(spec.name).await?.info().await?.clone();
        assert_eq!(info.config.num_replicas, NODES, "{}", spec.name);
        let cluster = info.cluster.expect("a clustered stream");
        assert_eq!(
            cluster.replicas.len(),
            NODES - 1,
            "{}: {cluster:?}",
            spec.name
        );
    }

    let mut names = Vec::new();
    let mut resumed = Vec::new();
    for down in 0..NODES {
        let before: Vec<String> = (0..BATCH).map(|i| format!("n{down}-up-{i}")).collect();
        create_paced(&stack, &before).await?;
        node(&mut stack, down).stop();
        // Created with the node down: its profile comes while the node is still away.
        let killed = Instant::now();
        let probe = format!("n{down}-probe");
        stack.apply_yaml("cluster-a", &service(&probe)).await?;
        if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", &probe, RESUME).await {
            anyhow::bail!(
                "node {down} lost: a Service created then had no profile in {RESUME:?}: {e}\n{}\n{}",
                demo::consumer_states(&stack).await,
                stack.logs()
            );
        }
        resumed.push(killed.elapsed());
        let during: Vec<String> = (0..BATCH).map(|i| format!("n{down}-down-{i}")).collect();
        create_paced(&stack, &during).await?;
        node(&mut stack, down).start_again().await?;
        // As a rolling restart would, the next node goes only once this one has caught up.
        if let Err(e) = wait_current(&js).await {
            anyhow::bail!("{e}\n{}", stack.logs());
        }
        names.extend(before);
        names.push(probe);
        names.extend(during);
    }

    // Every Service, including those in flight at each loss, has exactly one profile.
    let missing = wait_for("a ClusterProfile for every Service", RESUME * 3, || async {
        let mut missing = Vec::new();
        for name in &names {
            match demo::profiles_for(&stack, TRIGGER, "cluster-a", name).await {
                Ok(found) if found.len() == 1 => {}
                _ => missing.push(name.clone()),
            }
        }
        missing.is_empty().then_some(())
    })
    .await;
    if let Err(e) = missing {
        let mut lost = Vec::new();
        for name in &names {
            if demo::profiles_for(&stack, TRIGGER, "cluster-a", name)
                .await?
                .len()
                != 1
            {
                lost.push(name.clone());
            }
        }
        // Where each lost Service's event stopped: the last message of its subject in each
        // stream of the pipeline.
        let tokens = topology::cluster_tokens("sveltos", "default", "cluster-a");
        let mut reached = Vec::new();
        for name in &lost {
            let desired = topology::desired_resource_subject(TRIGGER, &tokens, "default", name);
            let subjects = [
                (
                    topology::CHANGES,
                    topology::change_subject(&tokens, "", "Service", "default", name),
                ),
                (
                    topology::MATCH,
                    topology::match_member_subject(
                        &tokens,
                        "sveltos-service",
                        "",
                        "Service",
                        "default",
                        name,
                    ),
                ),
                (topology::DESIRED, desired.clone()),
                (
                    topology::APPLIED,
                    topology::applied_subject_for(&desired).unwrap_or_default(),
                ),
            ];
            for (spec, subject) in subjects {
                let found = match js.get_stream(spec.name).await {
                    Ok(stream) => stream
                        .get_last_raw_message_by_subject(&subject)
                        .await
                        .map(|m| m.sequence)
                        .ok(),
                    Err(_) => None,
                };
                reached.push(format!("{name}: {} {subject} -> {found:?}", spec.name));
            }
        }
        anyhow::bail!(
            "{e}: missing {lost:?}\n{reached:#?}\n{}\n{}",
            demo::consumer_states(&stack).await,
            stack.logs()
        );
    }
    let owned = demo::owned_by(&stack, TRIGGER, "cluster-a").await?;
    // A profile and its instantiated ConfigMap per Service (the warm-up's too).
    assert_eq!(
        owned.len(),
        2 * (names.len() + 1),
        "duplicates or leftovers"
    );
    let exited = stack.exited_services();
    assert!(
        exited.is_empty(),
        "services exited when a node was lost: {exited:?}\n{}",
        stack.logs()
    );
    // How often a covering stage found a delivery lost with a node (a skipped consumer
    // sequence) and bound its consumer again: not asserted, a node's loss need not lose one.
    let mut rebinds = Vec::new();
    for service in ["sluice-evaluator", "sluice-renderer", "sluice-reporter"] {
        let metrics = demo::metrics(&stack, service).await?;
        let total: f64 = metrics
            .iter()
            .filter(|(name, _)| name.starts_with("sluice_stage_rebinds_total"))
            .map(|(_, value)| value)
            .sum();
        rebinds.push(format!("{service} {total}"));
    }
    eprintln!(
        "a Service created just after each node's loss had its profile in {resumed:?}; all {} \
         profiles present; consumers bound again: {}",
        names.len(),
        rebinds.join(", ")
    );
    Ok(())
}
