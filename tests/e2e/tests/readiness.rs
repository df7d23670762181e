//! Readiness follows what a service depends on: `/readyz` of every service goes unready while
//! nats-server is down and ready again once it is back; the services that talk to Kubernetes
//! (watcher, reporter, applier) go unready while the management cluster's API is unreachable,
//! the evaluator and the renderer stay ready. And the pipeline works again afterwards. Every
//! service runs without transparent huge pages.

use std::time::Duration;

use sluice_cli::stack::{Stack, MANAGEMENT, SERVICES};
use sluice_testkit::wait_for;

const DEADLINE: Duration = Duration::from_secs(30);
const KUBERNETES_CLIENTS: [&str; 3] = ["sluice-watcher", "sluice-reporter", "sluice-applier"];

/// The error with the services that exited (a service gone has no `/readyz`) and every log.
fn fail(stack: &mut Stack, error: anyhow::Error) -> anyhow::Error {
    let exited = stack.exited_services();
    anyhow::anyhow!("{error}\nexited services: {exited:?}\n{}", stack.logs())
}

/// `Ok(())` when the service answers ready; the reason it gave otherwise.
async fn readyz(stack: &Stack, service: &str) -> anyhow::Result<()> {
    let url = stack
        .health_url(service, "/readyz")
        .ok_or_else(|| anyhow::anyhow!("{service} was not started"))?;
    sluice_cli::setup::probe(&url).await
}

/// Waits until each of `services` is ready (`true`) or unready for `reason` (`false`).
async fn wait_readiness(
    stack: &mut Stack,
    services: &[&str],
    ready: bool,
    reason: &str,
) -> anyhow::Result<()> {
    let waited = wait_each(stack, services, ready, reason).await;
    waited.map_err(|e| fail(stack, e))
}

async fn wait_each(
    stack: &Stack,
    services: &[&str],
    ready: bool,
    reason: &str,
) -> anyhow::Result<()> {
    for service in services {
        let what = format!("{service} to be {}", if ready { "ready" } else { reason });
        let waited = wait_for(&what, DEADLINE, || async move {
            match readyz(stack, service).await {
                Ok(()) => ready.then_some(()),
                Err(error) => (!ready && format!("{error}").contains(reason)).then_some(()),
            }
        })
        .await;
        if let Err(error) = waited {
            let now = readyz(stack, service).await;
            anyhow::bail!("{error}; its /readyz now: {now:?}");
        }
    }
    Ok(())
}

/// Every service runs without transparent huge pages (ADR 0040), as the kernel reports it.
fn without_huge_pages(stack: &Stack) {
    let services: Vec<(String, u32)> = stack
        .processes()
        .into_iter()
        .filter(|(name, _)| SERVICES.contains(&name.as_str()))
        .collect();
    assert_eq!(services.len(), SERVICES.len(), "{services:?}");
    for (name, pid) in services {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let thp = status
            .lines()
            .find_map(|line| line.strip_prefix("THP_enabled:"))
            .map(str::trim);
        assert_eq!(
            thp,
            Some("0"),
            "{name} (pid {pid}) runs with transparent huge pages"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_drops_while_nats_or_the_api_is_away_and_returns() -> anyhow::Result<()> {
    let mut stack = Stack::start(&["cluster-a", "cluster-b"], None).await?;
    wait_readiness(&mut stack, &SERVICES, true, "").await?;
    without_huge_pages(&stack);

    stack.nats.stop();
    wait_readiness(&mut stack, &SERVICES, false, "not ready: nats").await?;
    stack.nats.start_again().await?;
    wait_readiness(&mut stack, &SERVICES, true, "").await?;

    stack.server.faults(MANAGEMENT).set_unreachable(true);
    wait_readiness(
        &mut stack,
        &KUBERNETES_CLIENTS,
        false,
        "not ready: kubernetes",
    )
    .await?;
    for service in ["sluice-evaluator", "sluice-renderer"] {
        if let Err(error) = readyz(&stack, service).await {
            return Err(fail(&mut stack, error));
        }
    }
    stack.server.faults(MANAGEMENT).set_unreachable(false);
    wait_readiness(&mut stack, &SERVICES, true, "").await?;

    // The pipeline works across both outages: seed 000's demo, event to ClusterProfile and
    // cleanup.
    if let Err(error) = sluice_cli::demo::run(&stack, &mut std::io::sink()).await {
        return Err(fail(&mut stack, error));
    }
    Ok(())
}
