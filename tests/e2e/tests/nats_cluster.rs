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
//!
//! Losing two nodes at once loses the quorum of every stream for a while: nothing is stored and
//! no lease renewed, every holder exits 75 once its renew deadline passes, and, started again
//! as Kubernetes would, the services deliver every Service created before, during and after
//! with exactly one profile.

use std::time::{Duration, Instant};

use sluice_bus::topology;
use sluice_cli::demo::{self, wait_profile};
use sluice_cli::stack::{Stack, SERVICES};
use sluice_testkit::{wait_for, NatsServer};
use sluice_wire::service::EXIT_LEASE_LOST;

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

/// The stack on a three-node cluster, its services run as production runs them, seed 000
/// installed and a first Service's profile there.
async fn started() -> anyhow::Result<Stack> {
    let mut stack = Stack::start_on_nats_cluster(&["cluster-a"], NODES).await?;
    for service in SERVICES {
        stack.restart_service_with(service, &LEASE_TIMING)?;
    }
    // The restarted watcher serves the EventSource conversion webhook once it has started.
    let installed = wait_for("the seed installed", RESUME, || async {
        demo::install_seed(&stack, "cluster-a").await.ok()
    })
    .await;
    if let Err(e) = installed {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    stack.apply_yaml("cluster-a", &service("warm-up")).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "warm-up", RESUME * 3).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    Ok(stack)
}

/// The Services of `names` that do not have exactly one profile.
async fn without_one_profile(stack: &Stack, names: &[String]) -> anyhow::Result<Vec<String>> {
    let mut missing = Vec::new();
    for name in names {
        if demo::profiles_for(stack, TRIGGER, "cluster-a", name)
            .await?
            .len()
            != 1
        {
            missing.push(name.clone());
        }
    }
    Ok(missing)
}

/// Where each of `lost`'s events stopped: the last message of its subject in each stream of
/// the pipeline.
async fn where_stopped(stack: &Stack, lost: &[String]) -> anyhow::Result<Vec<String>> {
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let tokens = topology::cluster_tokens("sveltos", "default", "cluster-a");
    let mut reached = Vec::new();
    for name in lost {
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
    Ok(reached)
}

/// Every Service of `names` (and the warm-up) gets exactly one profile and its ConfigMap
/// within [`RESUME`] × 3; otherwise the error says where each missing one stopped. With
/// `restart_lost_holders`, a service that stopped because it lost its lease (exit 75) is
/// started again, as Kubernetes starts a Deployment's pod again; any other exit fails. Returns
/// the services started again.
async fn every_profile_once(
    stack: &mut Stack,
    names: &[String],
    restart_lost_holders: bool,
) -> anyhow::Result<Vec<&'static str>> {
    let deadline = Instant::now() + RESUME * 3;
    let mut restarted = Vec::new();
    loop {
        if restart_lost_holders {
            restart_lost(stack, &mut restarted)?;
        }
        let missing = without_one_profile(stack, names).await?;
        if missing.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "no single ClusterProfile within {:?} for {missing:?}\n{:#?}\n{}\n{}",
                RESUME * 3,
                where_stopped(stack, &missing).await?,
                demo::consumer_states(stack).await,
                stack.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let owned = demo::owned_by(stack, TRIGGER, "cluster-a").await?;
    // A profile and its instantiated ConfigMap per Service (the warm-up's too).
    assert_eq!(
        owned.len(),
        2 * (names.len() + 1),
        "duplicates or leftovers"
    );
    if restart_lost_holders {
        // A holder whose renewals failed until just now may exit as the last profile lands.
        restart_lost(stack, &mut restarted)?;
    }
    let exited = stack.exited_services();
    assert!(
        exited.is_empty(),
        "services exited: {exited:?}\n{}",
        stack.logs()
    );
    Ok(restarted)
}

/// Starts again each service that stopped because it lost its lease (exit 75), as Kubernetes
/// starts a Deployment's pod again, and adds it to `restarted`; any other exit is an error.
fn restart_lost(stack: &mut Stack, restarted: &mut Vec<&'static str>) -> anyhow::Result<()> {
    for service in stack.exited_services() {
        match stack.exit_code(service) {
            Some(EXIT_LEASE_LOST) => {
                stack.restart_service_with(service, &LEASE_TIMING)?;
                restarted.push(service);
            }
            code => anyhow::bail!("{service} exited {code:?}\n{}", stack.logs()),
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_node_of_a_nats_cluster_loses_nothing_and_stops_nothing() -> anyhow::Result<()> {
    let mut stack = started().await?;

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
    every_profile_once(&mut stack, &names, false).await?;
    // How often a stage found a delivery lost with a node (a skipped consumer sequence) and
    // bound its consumer again: not asserted, a node's loss need not lose one.
    let mut rebinds = Vec::new();
    for service in [
        "sluice-evaluator",
        "sluice-renderer",
        "sluice-reporter",
        "sluice-applier",
    ] {
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

/// How long two nodes stay down together: with the elections after their return, longer than
/// the renew deadline of [`LEASE_TIMING`], whose renewals fail while the lease stream has no
/// quorum.
const QUORUM_LOST: Duration = Duration::from_secs(14);

/// With two of the three nodes lost at once, no stream has a quorum: nothing can be stored, so
/// nothing moves, and no lease can be renewed. The services wait rather than fail; a holder
/// whose renewals fail for its renew deadline (the outage and the elections after it) exits
/// 75, and is started again as Kubernetes would. Once the nodes are back, every Service
/// created before, during and after has exactly one profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_two_nodes_at_once_holds_the_pipeline_until_they_return_and_loses_nothing(
) -> anyhow::Result<()> {
    let mut stack = started().await?;
    let before: Vec<String> = (0..BATCH).map(|i| format!("q-before-{i}")).collect();
    create_paced(&stack, &before).await?;
    node(&mut stack, 1).stop();
    node(&mut stack, 2).stop();
    let lost = Instant::now();
    let during: Vec<String> = (0..BATCH).map(|i| format!("q-during-{i}")).collect();
    create_paced(&stack, &during).await?;
    tokio::time::sleep(QUORUM_LOST.saturating_sub(lost.elapsed())).await;
    node(&mut stack, 1).start_again().await?;
    node(&mut stack, 2).start_again().await?;
    let returned = Instant::now();
    let after: Vec<String> = (0..BATCH).map(|i| format!("q-after-{i}")).collect();
    create_paced(&stack, &after).await?;
    let names: Vec<String> = before.into_iter().chain(during).chain(after).collect();
    let restarted = every_profile_once(&mut stack, &names, true).await?;
    eprintln!(
        "two nodes down for {:?}: all {} profiles present {:?} after they returned; \
         started again after losing their lease: {restarted:?}",
        returned.duration_since(lost),
        names.len(),
        returned.elapsed()
    );
    Ok(())
}
