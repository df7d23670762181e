//! Two replicas of every service with `--leader-elect` (ADR 0046): of each pair one holds the
//! service's lease and works, the other stands by doing nothing; when every holder is killed
//! at once the standbys take over and the next event still becomes a ClusterProfile; when the
//! holders are stopped (SIGTERM) they release their leases and the standbys take over at their
//! next look.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sluice_cli::demo::{self, wait_profile};
use sluice_cli::stack::{replica_name, Signal, Stack, SERVICES};
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
const DEADLINE: Duration = Duration::from_secs(30);
/// Short leases, in the defaults' proportions, so that a dead holder is followed quickly.
const LEASE: [(&str, &str); 4] = [
    ("SLUICE_LEADER_ELECT", "true"),
    ("SLUICE_LEADER_ELECT_LEASE_DURATION", "2s"),
    ("SLUICE_LEADER_ELECT_RENEW_DEADLINE", "1400ms"),
    ("SLUICE_LEADER_ELECT_RETRY_PERIOD", "200ms"),
];

/// Each service's second process.
fn replica(service: &str) -> &'static str {
    replica_name(service).expect("a service of the stack")
}

fn fail(stack: &mut Stack, error: anyhow::Error) -> anyhow::Error {
    let exited = stack.exited_services();
    anyhow::anyhow!("{error}\nexited: {exited:?}\n{}", stack.logs())
}

async fn metrics_of(stack: &Stack, process: &str) -> Option<HashMap<String, f64>> {
    demo::metrics(stack, process).await.ok()
}

/// `sluice_leader` of one process: `Some(true)` holding, `Some(false)` standing by.
async fn leads(stack: &Stack, service: &str, process: &str) -> Option<bool> {
    let identity = service.trim_start_matches("sluice-");
    let metrics = metrics_of(stack, process).await?;
    let value = metrics.get(&format!("sluice_leader{{service=\"{identity}\"}}"))?;
    Some(*value == 1.0)
}

/// Waits until `holder` leads and `standby` stands by.
async fn wait_roles(
    stack: &Stack,
    service: &str,
    holder: &str,
    standby: &str,
) -> anyhow::Result<()> {
    wait_for(
        &format!("{holder} to hold the lease of {service} and {standby} to stand by"),
        DEADLINE,
        || async {
            let roles = (
                leads(stack, service, holder).await,
                leads(stack, service, standby).await,
            );
            (roles == (Some(true), Some(false))).then_some(())
        },
    )
    .await
}

async fn add_service(stack: &Stack, name: &str) -> anyhow::Result<()> {
    let yaml = demo::SERVICE.replace("name: my-service", &format!("name: {name}"));
    stack.apply_yaml("cluster-a", &yaml).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_replicas_one_works_and_the_other_takes_over_when_it_dies_or_stops(
) -> anyhow::Result<()> {
    let mut stack = Stack::start(&["cluster-a"], None).await?;
    demo::apply_seed(&stack).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE).await {
        return Err(fail(&mut stack, e));
    }
    // Every service restarted with leader election, then a second process of each.
    for service in SERVICES {
        stack.restart_service_with(service, &LEASE)?;
        if let Err(e) = wait_roles_alone(&stack, service).await {
            return Err(fail(&mut stack, e));
        }
        stack.start_replica(service, replica(service), &LEASE)?;
    }
    for service in SERVICES {
        if let Err(e) = wait_roles(&stack, service, service, replica(service)).await {
            return Err(fail(&mut stack, e));
        }
        // A standby does no work: none of the runner's measurements, no consumer bound.
        let standby = metrics_of(&stack, replica(service))
            .await
            .unwrap_or_default();
        let working: Vec<&String> = standby
            .keys()
            .filter(|series| {
                series.starts_with("sluice_stage_") || series.starts_with("sluice_event_age")
            })
            .collect();
        assert!(
            working.is_empty(),
            "{} works while standing by: {working:?}",
            replica(service)
        );
    }
    add_service(&stack, "one").await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "one", DEADLINE).await {
        return Err(fail(&mut stack, e));
    }

    // Every holder dies at once; the standbys take over once the leases expire.
    let killed = Instant::now();
    for service in SERVICES {
        stack.kill_service(service);
    }
    add_service(&stack, "two").await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "two", DEADLINE).await {
        return Err(fail(&mut stack, e));
    }
    let after_kill = killed.elapsed();
    for service in SERVICES {
        assert_eq!(
            leads(&stack, service, replica(service)).await,
            Some(true),
            "{} took over",
            replica(service)
        );
    }

    // The killed ones come back and stand by; then the holders are stopped and hand over.
    for service in SERVICES {
        stack.start_replica(service, service, &LEASE)?;
    }
    for service in SERVICES {
        if let Err(e) = wait_roles(&stack, service, replica(service), service).await {
            return Err(fail(&mut stack, e));
        }
    }
    // A holder stopped releases its lease as it exits: its standby takes over at its next look
    // (200 ms), not when the lease would have expired (2 s after the last renewal).
    let mut handovers = Vec::new();
    for service in SERVICES {
        let stopped = Instant::now();
        stack.stop_service(replica(service))?;
        let took = wait_for(&format!("{service} to take over"), DEADLINE, || async {
            (leads(&stack, service, service).await == Some(true)).then(|| stopped.elapsed())
        })
        .await;
        let took = match took {
            Ok(took) => took,
            Err(e) => return Err(fail(&mut stack, e)),
        };
        assert!(
            took < Duration::from_millis(1_500),
            "{service}: the standby took over {took:?} after the holder was stopped, as if the lease had not been released"
        );
        handovers.push(took);
    }
    let stopped = Instant::now();
    add_service(&stack, "three").await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "three", DEADLINE).await {
        return Err(fail(&mut stack, e));
    }
    let after_stop = stopped.elapsed();
    for service in SERVICES {
        assert_eq!(leads(&stack, service, service).await, Some(true));
    }
    eprintln!(
        "killed holders -> profile of a new Service in {after_kill:?}; stopped holders -> taken over in {handovers:?}; a new Service -> profile in {after_stop:?}"
    );
    // Nothing was done twice or lost: one profile per Service.
    for name in ["my-service", "one", "two", "three"] {
        let profiles = demo::profiles_for(&stack, TRIGGER, "cluster-a", name).await?;
        assert_eq!(profiles.len(), 1, "{name}: {profiles:?}");
    }
    assert!(
        stack.exited_services().is_empty(),
        "{:?}",
        stack.exited_services()
    );

    // A holder that is paused past its lease (a stopped VM, a long stall) finds on waking that
    // it no longer holds it and exits 75 at once, while its standby has taken over.
    let standby = replica("sluice-applier");
    stack.start_replica("sluice-applier", standby, &LEASE)?;
    if let Err(e) = wait_roles(&stack, "sluice-applier", "sluice-applier", standby).await {
        return Err(fail(&mut stack, e));
    }
    stack.signal("sluice-applier", Signal::Stop)?;
    let taken = wait_for(
        "the standby to take over from the paused holder",
        DEADLINE,
        || async { (leads(&stack, "sluice-applier", standby).await == Some(true)).then_some(()) },
    )
    .await;
    stack.signal("sluice-applier", Signal::Cont)?;
    taken?;
    let code = wait_for("the paused holder to exit", DEADLINE, || {
        let code = stack.exit_code("sluice-applier");
        async move { code }
    })
    .await;
    let code = match code {
        Ok(code) => code,
        Err(e) => return Err(fail(&mut stack, e)),
    };
    assert_eq!(code, sluice_wire::service::EXIT_LEASE_LOST);
    add_service(&stack, "four").await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "four", DEADLINE).await {
        return Err(fail(&mut stack, e));
    }
    Ok(())
}

/// Waits until a lone process of `service` holds its lease.
async fn wait_roles_alone(stack: &Stack, service: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("{service} to hold its lease"),
        DEADLINE,
        || async { (leads(stack, service, service).await == Some(true)).then_some(()) },
    )
    .await
}
