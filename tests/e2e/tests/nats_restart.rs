//! A crash of nats-server in the middle of a stream of events loses nothing: seed 000 on the
//! whole stack while Services are created one after another; nats-server is killed with SIGKILL
//! and started again on the same port and file store. Every Service still gets its
//! ClusterProfile, and the pipeline resumes within seconds of the server's return (no wait for
//! a consumer's 30 s ack wait or a publish ack's timeout).

use std::time::{Duration, Instant};

use sluice_cli::demo::{self, wait_profile};
use sluice_cli::stack::Stack;
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
/// Services created in all; nats-server is killed after `KILL_AT` and back after `BACK_AT`.
const SERVICES: usize = 200;
const KILL_AT: usize = 60;
const BACK_AT: usize = 120;
/// One create every this often: the events keep coming while the server is down.
const PACE: Duration = Duration::from_millis(10);
/// How soon after the server's return a Service created then must have its profile.
const RESUME: Duration = Duration::from_secs(5);

fn service(name: &str) -> String {
    demo::SERVICE.replace("name: my-service", &format!("name: {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_crash_during_a_stream_of_events_loses_none_and_resumes_quickly(
) -> anyhow::Result<()> {
    let mut stack = Stack::start(&["cluster-a"], None).await?;
    demo::install_seed(&stack, "cluster-a").await?;
    // The path is live once a first Service has its profile.
    stack.apply_yaml("cluster-a", &service("warm-up")).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "warm-up", RESUME * 6).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }

    let mut pace = tokio::time::interval(PACE);
    let mut back = None;
    for i in 0..SERVICES {
        pace.tick().await;
        if i == KILL_AT {
            stack.nats.stop();
        }
        if i == BACK_AT {
            stack.nats.start_again().await?;
            back = Some(Instant::now());
        }
        stack
            .apply_yaml("cluster-a", &service(&format!("svc-{i}")))
            .await?;
    }
    let back = back.ok_or_else(|| anyhow::anyhow!("nats-server was not started again"))?;

    // A Service created now, with the server back, goes through as fast as ever.
    let created = Instant::now();
    stack.apply_yaml("cluster-a", &service("after")).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "after", RESUME).await {
        anyhow::bail!(
            "the pipeline did not resume within {RESUME:?} ({:?} after the server's return): {e}\n{}\n{}",
            back.elapsed(),
            demo::consumer_states(&stack).await,
            stack.logs()
        );
    }
    let resumed = created.elapsed();

    // Every Service, including those in flight at the kill, has exactly one profile.
    let missing = wait_for("a ClusterProfile for every Service", RESUME * 4, || async {
        let mut missing = Vec::new();
        for i in 0..SERVICES {
            let name = format!("svc-{i}");
            match demo::profiles_for(&stack, TRIGGER, "cluster-a", &name).await {
                Ok(found) if found.len() == 1 => {}
                _ => missing.push(name),
            }
        }
        missing.is_empty().then_some(())
    })
    .await;
    if let Err(e) = missing {
        let mut lost = Vec::new();
        for i in 0..SERVICES {
            let name = format!("svc-{i}");
            if demo::profiles_for(&stack, TRIGGER, "cluster-a", &name)
                .await?
                .len()
                != 1
            {
                lost.push(name);
            }
        }
        anyhow::bail!(
            "{e}: missing {lost:?}\n{}\n{}",
            demo::consumer_states(&stack).await,
            stack.logs()
        );
    }
    let owned = demo::owned_by(&stack, TRIGGER, "cluster-a").await?;
    // A profile and its instantiated ConfigMap per Service (the warm-up and `after` too).
    assert_eq!(owned.len(), 2 * (SERVICES + 2), "duplicates or leftovers");
    eprintln!(
        "nats-server killed after {KILL_AT} creates, back after {BACK_AT}; a Service created \
         {:?} after its return had its profile in {resumed:?}; all {SERVICES} profiles present",
        created.duration_since(back)
    );
    Ok(())
}
