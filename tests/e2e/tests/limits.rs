//! No ceiling, and what cannot fit fails visibly and alone, on a bus whose messages carry at
//! most 32 KiB (ADR 0018): twenty Services of a `oneForEvent` trigger become twenty resource
//! units (their desired state as one message would take about 54 KiB); three hundred Services,
//! whose match set with its collected resources would take several times what one message may
//! carry, flow completely as match members while every service keeps running; deleting
//! everything leaves nothing. A thousand converge exactly across restarts of the evaluator and
//! the renderer, and ten thousand on the stack's ordinary bus.

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use serde_json::Value;
use sluice_cli::demo::{self, owned_by, profiles_for, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
const DEADLINE: Duration = Duration::from_secs(60);
const MAX_PAYLOAD: usize = 32 * 1024;

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

fn service(index: usize) -> String {
    demo::SERVICE.replace("name: my-service", &format!("name: service-{index:03}"))
}

/// Creates (or deletes) the Services of `range` in cluster-a, a few requests at a time.
async fn create_services(stack: &Stack, range: std::ops::Range<usize>) -> anyhow::Result<()> {
    futures::stream::iter(range)
        .map(|index| async move { stack.apply_yaml("cluster-a", &service(index)).await })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn delete_services(stack: &Stack, range: std::ops::Range<usize>) -> anyhow::Result<()> {
    futures::stream::iter(range)
        .map(|index| async move {
            let name = format!("service-{index:03}");
            stack
                .delete("cluster-a", "v1", "Service", "default", &name)
                .await
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// A stack whose bus carries at most [`MAX_PAYLOAD`] bytes per message, with seed 000's
/// EventSource and trigger, and `clusters` registered with the label the trigger selects; with
/// the server's configuration file, kept as long as the stack.
async fn small_bus_stack(clusters: &[&str]) -> anyhow::Result<Stack> {
    seed_stack(clusters, &format!("max_payload: {MAX_PAYLOAD}\n")).await
}

/// A stack with seed 000's EventSource and trigger and `clusters` registered with the label the
/// trigger selects; `nats_config` goes to the server's configuration file.
async fn seed_stack(clusters: &[&str], nats_config: &str) -> anyhow::Result<Stack> {
    let stack = Stack::start_with_nats_config(clusters, None, nats_config).await?;
    for cluster in clusters {
        stack.register_cluster(cluster, &[("env", "fv")]).await?;
    }
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;
    Ok(stack)
}

/// Every service is still running.
fn assert_all_running(stack: &mut Stack) {
    assert_eq!(
        stack.exited_services(),
        Vec::<&str>::new(),
        "{}",
        stack.logs()
    );
}

/// The trigger's `clusterInfo` entry for a cluster.
async fn cluster_info(stack: &Stack, cluster: &str) -> Option<Value> {
    let trigger = stack
        .get(
            MANAGEMENT,
            "lib.projectsveltos.io/v1alpha1",
            "EventBasedAddOn",
            "",
            TRIGGER,
        )
        .await
        .ok()
        .flatten()?;
    trigger["status"]["clusterInfo"]
        .as_array()?
        .iter()
        .find(|info| info["cluster"]["name"] == cluster)
        .cloned()
}

/// Waits until cluster-a has exactly `count` of the trigger's ClusterProfiles and its status
/// says Provisioned.
async fn provisioned_with(stack: &Stack, count: usize) -> anyhow::Result<()> {
    provisioned_within(stack, count, DEADLINE).await
}

async fn provisioned_within(stack: &Stack, count: usize, deadline: Duration) -> anyhow::Result<()> {
    wait_for(
        &format!("{count} profiles in cluster-a, provisioned"),
        deadline,
        || async {
            let owned = owned_by(stack, TRIGGER, "cluster-a").await.ok()?;
            let profiles = owned
                .iter()
                .filter(|o| o["kind"] == "ClusterProfile")
                .count();
            let provisioned = cluster_info(stack, "cluster-a")
                .await
                .is_some_and(|info| info["status"] == "Provisioned");
            (profiles == count && provisioned).then_some(())
        },
    )
    .await
    .map_err(|e| fail(stack, e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_sets_far_larger_than_a_message_flow_completely_and_clean_up() -> anyhow::Result<()> {
    let mut stack = small_bus_stack(&["cluster-a", "cluster-b"]).await?;

    // Twenty Services: each is its own unit, so none outgrows a message.
    create_services(&stack, 0..20).await?;
    provisioned_with(&stack, 20).await?;

    // The other cluster's events still flow.
    stack.apply_yaml("cluster-b", demo::SERVICE).await?;
    wait_profile(&stack, TRIGGER, "cluster-b", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;

    // Three hundred Services: the match set is far larger than a message and flows whole.
    const MANY: usize = 300;
    create_services(&stack, 20..MANY).await?;
    provisioned_with(&stack, MANY).await?;
    let report_name = "sveltos--sveltos-service--cluster-a";
    let report = demo::wait_report(&stack, report_name, DEADLINE, |r| {
        r["spec"]["matchingResources"]
            .as_array()
            .is_some_and(|m| m.len() == MANY)
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    let resources = report["spec"]["resources"].as_str().unwrap_or_default();
    assert!(
        resources.len() > 4 * MAX_PAYLOAD,
        "the collected resources ({} bytes of base64) exceed a message several times",
        resources.len()
    );

    assert_all_running(&mut stack);

    // Everything goes: nothing is left over.
    delete_services(&stack, 2..MANY).await?;
    provisioned_with(&stack, 2).await?;
    for index in 0..2 {
        let name = format!("service-{index:03}");
        assert_eq!(
            profiles_for(&stack, TRIGGER, "cluster-a", &name)
                .await?
                .len(),
            1,
            "{name}"
        );
    }
    delete_services(&stack, 0..2).await?;
    demo::wait_cleaned(&stack, TRIGGER, "cluster-a", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    assert_all_running(&mut stack);
    Ok(())
}

/// Deletes Services `0..count` and waits until nothing of the trigger is left in cluster-a.
async fn delete_all(
    stack: &Stack,
    count: usize,
    deadline: Duration,
    started: std::time::Instant,
) -> anyhow::Result<()> {
    delete_services(stack, 0..count).await?;
    demo::wait_cleaned(stack, TRIGGER, "cluster-a", deadline)
        .await
        .map_err(|e| fail(stack, e))?;
    eprintln!("{count} Services cleaned up after {:?}", started.elapsed());
    Ok(())
}

/// Waits until cluster-a's EventReport of the seed's EventSource lists `count` Services (when
/// `may_list`), or lists nothing, collects nothing and says they are too many, naming the count.
async fn report_of(
    stack: &Stack,
    count: usize,
    may_list: bool,
    deadline: Duration,
) -> anyhow::Result<()> {
    let too_many = format!("{count} matching resources take");
    demo::wait_report(
        stack,
        "sveltos--sveltos-service--cluster-a",
        deadline,
        |r| {
            let listed = r["spec"]["matchingResources"].as_array().map(Vec::len);
            let too_large = r["status"]["failureMessage"]
                .as_str()
                .is_some_and(|m| m.contains(&too_many));
            (may_list && listed == Some(count))
                || (too_large && listed == Some(0) && r["spec"].get("resources").is_none())
        },
    )
    .await
    .map_err(|e| fail(stack, e))?;
    Ok(())
}

/// Services matching the seed's `oneForEvent` trigger in one cluster for the scale test.
const THOUSANDS: usize = 1_000;

/// Thousands of matches on the 32 KiB bus, with the evaluator and the renderer killed half-way
/// and started again while Services keep coming: every Service ends with exactly one
/// ClusterProfile, the EventReport lists them all, and deleting them all leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_matches_converge_exactly_across_restarts() -> anyhow::Result<()> {
    let mut stack = small_bus_stack(&["cluster-a"]).await?;
    let deadline = Duration::from_secs(300);
    let started = std::time::Instant::now();

    let half = THOUSANDS / 2;
    create_services(&stack, 0..half).await?;
    stack.kill_service("sluice-evaluator");
    stack.kill_service("sluice-renderer");
    create_services(&stack, half..THOUSANDS - 100).await?;
    stack.start_service("sluice-evaluator")?;
    stack.start_service("sluice-renderer")?;
    create_services(&stack, THOUSANDS - 100..THOUSANDS).await?;
    provisioned_within(&stack, THOUSANDS, deadline).await?;
    let owned = owned_by(&stack, TRIGGER, "cluster-a").await?;
    let mut resources: Vec<&str> = owned
        .iter()
        .filter(|o| o["kind"] == "ClusterProfile")
        .filter_map(|o| {
            o["metadata"]["labels"][sluice_domain::naming::LABEL_RESOURCE_NAME].as_str()
        })
        .collect();
    resources.sort_unstable();
    resources.dedup();
    assert_eq!(resources.len(), THOUSANDS, "one profile per Service");
    // The report lists every Service, or, when the collected resources are over what the API
    // server stores in one object, lists nothing and says so, naming the count.
    report_of(&stack, THOUSANDS, true, deadline).await?;
    eprintln!(
        "{THOUSANDS} Services provisioned after {:?}",
        started.elapsed()
    );

    delete_all(&stack, THOUSANDS, deadline, started).await?;
    assert_all_running(&mut stack);
    Ok(())
}

/// Services matching the seed's `oneForEvent` trigger in one cluster for the large test.
const TEN_THOUSAND: usize = 10_000;

/// Ten thousand matches on the stack's ordinary bus: every Service ends with exactly one
/// ClusterProfile, the EventReport says it cannot hold them, and deleting them all leaves
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_matches_converge_and_clean_up() -> anyhow::Result<()> {
    let mut stack = seed_stack(&["cluster-a"], "").await?;
    let deadline = Duration::from_secs(1800);
    let started = std::time::Instant::now();
    create_services(&stack, 0..TEN_THOUSAND).await?;
    eprintln!(
        "{TEN_THOUSAND} Services created after {:?}",
        started.elapsed()
    );
    provisioned_within(&stack, TEN_THOUSAND, deadline).await?;
    eprintln!(
        "{TEN_THOUSAND} Services provisioned after {:?}",
        started.elapsed()
    );
    // The seed collects the Services: ten thousand of them are more than one object may hold,
    // so the report lists none and says why, naming the count, while the profiles flowed.
    report_of(&stack, TEN_THOUSAND, false, deadline).await?;
    assert_all_running(&mut stack);
    delete_all(&stack, TEN_THOUSAND, deadline, started).await?;
    assert_all_running(&mut stack);
    Ok(())
}

/// The applier's LISTs of the trigger's owned kinds (ClusterProfiles, ConfigMaps, Secrets by
/// the pair's owner labels, cluster type included: the test's own look-ups select by trigger
/// and cluster name only) in the management cluster's audit log from `mark` on.
fn owned_lists(stack: &Stack, mark: usize) -> Vec<String> {
    stack.server.audit(MANAGEMENT)[mark..]
        .iter()
        .filter(|e| e.method == "GET" && !e.query.contains("watch=true"))
        .filter(|e| e.query.contains("eventtriggername") && e.query.contains("clustertype"))
        .filter(|e| {
            ["/clusterprofiles", "/configmaps", "/secrets"]
                .iter()
                .any(|kind| e.path.ends_with(kind))
        })
        .map(|e| format!("{}?{}", e.path, e.query))
        .collect()
}

/// Creating and removing units needs no LIST per unit (issue 20): two hundred Services, each
/// its own resource unit, list the pair's owned kinds at most once when created (none when the
/// applier's seed knew the pair empty; the main unit, which holds nothing of a per-resource
/// trigger, keeps the pair indexed) and at most once more when all are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_units_lists_nothing_per_unit() -> anyhow::Result<()> {
    const UNITS: usize = 200;
    let mut stack = seed_stack(&["cluster-a"], "").await?;
    create_services(&stack, 0..UNITS).await?;
    provisioned_with(&stack, UNITS).await?;
    let created = owned_lists(&stack, 0);
    assert!(
        created.len() <= 3,
        "creating {UNITS} units listed {} times: {created:?}",
        created.len()
    );
    let mark = stack.server.audit(MANAGEMENT).len();
    delete_services(&stack, 0..UNITS).await?;
    demo::wait_cleaned(&stack, TRIGGER, "cluster-a", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    let deleted = owned_lists(&stack, mark);
    assert!(
        deleted.len() <= 3,
        "deleting {UNITS} units listed {} times: {deleted:?}",
        deleted.len()
    );
    assert_all_running(&mut stack);
    Ok(())
}

/// A restarted applier takes every pair's index from its watches' first lists of what sluice
/// wrote (issue 20: one listing of everything at start, not a second one by the first unit of
/// each pair): new units after the restart, and the removal of every unit, list no pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_applier_lists_no_pair_its_watches_listed() -> anyhow::Result<()> {
    const UNITS: usize = 100;
    let mut stack = seed_stack(&["cluster-a"], "").await?;
    create_services(&stack, 0..UNITS).await?;
    provisioned_with(&stack, UNITS).await?;
    let mark = stack.server.audit(MANAGEMENT).len();
    stack.stop_service("sluice-applier")?;
    stack.start_service("sluice-applier")?;
    create_services(&stack, UNITS..UNITS + 10).await?;
    provisioned_with(&stack, UNITS + 10).await?;
    assert!(stack
        .service_log("sluice-applier")
        .contains("every pair's index taken from the first lists of what sluice wrote"));
    delete_services(&stack, 0..UNITS + 10).await?;
    demo::wait_cleaned(&stack, TRIGGER, "cluster-a", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    let listed = owned_lists(&stack, mark);
    assert!(
        listed.is_empty(),
        "the restarted applier listed its pair {} times: {listed:?}",
        listed.len()
    );
    assert_all_running(&mut stack);
    Ok(())
}

/// A unit whose execution failed lists only its own objects when it runs again, not every unit
/// of its pair (issue 20: what one resource costs does not grow with the other matches).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_unit_lists_its_own_objects_not_its_pairs() -> anyhow::Result<()> {
    const UNITS: usize = 50;
    const ERRORS: &str = "sluice_applier_errors_total";
    let mut stack = seed_stack(&["cluster-a"], "").await?;
    create_services(&stack, 0..UNITS).await?;
    provisioned_with(&stack, UNITS).await?;
    let errors = demo::counter(&stack, "sluice-applier", ERRORS).await?;
    let mark = stack.server.audit(MANAGEMENT).len();
    let faults = stack.server.faults(MANAGEMENT);
    faults.set_error_rate(1.0, 500);
    create_services(&stack, UNITS..UNITS + 1).await?;
    let failed = wait_for("the new unit's apply failed", DEADLINE, || async {
        let now = demo::counter(&stack, "sluice-applier", ERRORS).await.ok()?;
        (now > errors).then_some(())
    })
    .await;
    faults.heal();
    failed.map_err(|e| fail(&stack, e))?;
    provisioned_with(&stack, UNITS + 1).await?;
    let lists = owned_lists(&stack, mark);
    assert!(!lists.is_empty(), "the failed unit was listed again");
    assert!(
        lists
            .iter()
            .all(|list| list.contains("resourcename%3Dservice-050")
                || list.contains("resourcename=service-050")),
        "only the failed unit's objects were listed: {lists:?}"
    );
    assert_all_running(&mut stack);
    Ok(())
}
