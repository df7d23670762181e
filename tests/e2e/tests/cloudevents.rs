//! Seed 004 end to end, with its own YAML and CloudEvents (`examples/seed-004-cloudevents`): a
//! separate nats-server with user `admin` / `my-password` stands for the managed cluster's NATS,
//! reached through the cluster's `sveltos-nats` Secret; the five services run as processes.
//! A login CloudEvent creates a ClusterProfile whose instantiated ConfigMap holds Namespace
//! `mgianluc`; the logout removes it. Then the same over JetStream with the watcher killed while
//! the logout is published, and with the applier away for longer than the logout's removal lives.

use std::time::Duration;

use serde_json::{json, Value};
use sluice_cli::cloudevents::{
    event_for, forwarded, managed_client, managed_nats, nats_secret, seeded_stack, user_profiles,
    wait_listening, CLUSTER, CONFIG, LOGIN, LOGOUT, SUBJECT, TRIGGER,
};
use sluice_cli::demo::{self, owned_by, wait_cleaned};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_testkit::wait_for;

const DEADLINE: Duration = Duration::from_secs(30);

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

/// The profile a CloudEvent with this subject created, once it exists.
async fn wait_user_profile(stack: &Stack, user: &str) -> anyhow::Result<Value> {
    wait_for(&format!("ClusterProfile for {user}"), DEADLINE, || async {
        let found = user_profiles(stack, Some(user)).await.ok()?;
        (found.len() == 1).then(|| found[0].clone())
    })
    .await
    .map_err(|e| fail(stack, e))
}

async fn assert_namespace_profile(
    stack: &Stack,
    profile: &Value,
    user: &str,
) -> anyhow::Result<()> {
    assert_eq!(profile["spec"]["syncMode"], "ContinuousWithDriftDetection");
    assert_eq!(
        profile["spec"]["clusterRefs"],
        json!([{"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                "namespace": "default", "name": CLUSTER}])
    );
    let reference = &profile["spec"]["policyRefs"][0];
    assert_eq!(reference["namespace"], "projectsveltos");
    let name = reference["name"].as_str().unwrap_or_default();
    let config_map = stack
        .get(MANAGEMENT, "v1", "ConfigMap", "projectsveltos", name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("instantiated ConfigMap {name} missing"))?;
    let namespace: Value = serde_yaml::from_str(
        config_map["data"]["namespace.yaml"]
            .as_str()
            .unwrap_or_default(),
    )?;
    assert_eq!(
        namespace,
        json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": user}})
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_login_creates_the_namespace_and_logout_removes_it() -> anyhow::Result<()> {
    let managed = managed_nats().await?;
    let url = managed.url();
    let secret = nats_secret(|c| {
        c["nats"]["configuration"]["url"] = json!(url);
    })?;
    let stack = seeded_stack(&secret).await?;
    let client = managed_client(&managed).await?;
    wait_listening(&stack, &client)
        .await
        .map_err(|e| fail(&stack, e))?;

    client.publish(SUBJECT, LOGIN.into()).await?;
    client
        .publish(SUBJECT, event_for(LOGIN, "alice").into())
        .await?;
    client.flush().await?;
    let profile = wait_user_profile(&stack, "mgianluc").await?;
    assert_namespace_profile(&stack, &profile, "mgianluc").await?;
    let alice = wait_user_profile(&stack, "alice").await?;
    assert_namespace_profile(&stack, &alice, "alice").await?;
    assert_eq!(owned_by(&stack, TRIGGER, CLUSTER).await?.len(), 4);

    // CloudEvent units survive re-rendering: change the trigger, restart the renderer and the
    // applier; both users' objects stay.
    let relabelled = CONFIG.replace(
        "syncMode: ContinuousWithDriftDetection",
        "syncMode: Continuous",
    );
    stack.apply_yaml(MANAGEMENT, &relabelled).await?;
    let mut stack = stack;
    stack.kill_service("sluice-renderer");
    stack.kill_service("sluice-applier");
    stack.start_service("sluice-renderer")?;
    stack.start_service("sluice-applier")?;
    client.publish(SUBJECT, LOGOUT.into()).await?;
    client.flush().await?;
    wait_for("mgianluc's profile removed", DEADLINE, || async {
        let owned = owned_by(&stack, TRIGGER, CLUSTER).await.ok()?;
        (owned.len() == 2).then_some(owned)
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    // alice's profile is untouched (rendered before the trigger changed).
    let alice_now = wait_user_profile(&stack, "alice").await?;
    assert_eq!(alice_now["metadata"]["name"], alice["metadata"]["name"]);

    // Deleting the trigger removes what every CloudEvent created, then the trigger.
    stack
        .delete(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventTrigger",
            "",
            TRIGGER,
        )
        .await?;
    wait_cleaned(&stack, TRIGGER, CLUSTER, DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_over_jetstream_survives_a_watcher_killed_before_the_logout() -> anyhow::Result<()>
{
    let managed = managed_nats().await?;
    let client = managed_client(&managed).await?;
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "USERS".into(),
        subjects: vec![SUBJECT.into()],
        ..Default::default()
    })
    .await?;
    let url = managed.url();
    let secret = nats_secret(|c| {
        let auth = c["nats"]["configuration"]["authorization"].clone();
        *c = json!({"jetstream": {"configuration": {
            "url": url, "streams": [{"name": "USERS", "subjects": [SUBJECT]}],
            "authorization": auth}}});
    })?;
    let mut stack = seeded_stack(&secret).await?;
    // JetStream keeps the event until the watcher's durable consumer has it: no probe needed.
    js.publish(SUBJECT, LOGIN.into()).await?.await?;
    let profile = wait_user_profile(&stack, "mgianluc").await?;
    assert_namespace_profile(&stack, &profile, "mgianluc").await?;

    stack.kill_service("sluice-watcher");
    js.publish(SUBJECT, LOGOUT.into()).await?.await?;
    stack.start_service("sluice-watcher")?;
    wait_cleaned(&stack, TRIGGER, CLUSTER, DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    // Exactly the two events reached the pipeline: nothing lost, nothing twice.
    assert_eq!(forwarded(&stack).await?, 2);
    Ok(())
}

/// A logout's removal expires like a resource unit's (ADR 0041): an applier away for longer
/// removes, when it starts, what the user's unit held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_away_longer_than_a_logouts_removal_lives_removes_what_the_login_created(
) -> anyhow::Result<()> {
    use sluice_bus::topology;
    let managed = managed_nats().await?;
    let url = managed.url();
    let secret = nats_secret(|c| {
        c["nats"]["configuration"]["url"] = json!(url);
    })?;
    let mut stack = seeded_stack(&secret).await?;
    let client = managed_client(&managed).await?;
    wait_listening(&stack, &client)
        .await
        .map_err(|e| fail(&stack, e))?;
    client.publish(SUBJECT, LOGIN.into()).await?;
    client.flush().await?;
    wait_user_profile(&stack, "mgianluc").await?;
    assert_eq!(owned_by(&stack, TRIGGER, CLUSTER).await?.len(), 2);

    stack.stop_service("sluice-applier")?;
    client.publish(SUBJECT, LOGOUT.into()).await?;
    client.flush().await?;
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let tokens = topology::cluster_tokens("sveltos", "default", CLUSTER);
    let desired =
        topology::desired_cloudevent_subject(TRIGGER, &tokens, "auth.example.com", "mgianluc");
    // The removal expires unseen.
    let ttl = demo::expire_unseen(&stack, topology::DESIRED, &desired, DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    assert_eq!(ttl, topology::TOMBSTONE_TTL.as_secs().to_string());
    assert_eq!(
        owned_by(&stack, TRIGGER, CLUSTER).await?.len(),
        2,
        "nothing removed while the applier is away"
    );

    stack.start_service("sluice-applier")?;
    wait_for("the user's objects removed", DEADLINE, || async {
        let owned = owned_by(&stack, TRIGGER, CLUSTER).await.ok()?;
        owned.is_empty().then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    let applied = topology::applied_subject_for(&desired).expect("a desired subject");
    let results = js.get_stream(topology::APPLIED.name).await?;
    demo::wait_expiring(&results, &applied, DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}
