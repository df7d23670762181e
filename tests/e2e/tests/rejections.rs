//! A desired state the applier can never apply (it names no valid cluster) is rejected to the
//! dead letters with the reason, once, instead of being retried for ever, and the pipeline goes
//! on: seed 000's Service still becomes its ClusterProfile.

use std::time::Duration;

use prost::Message as _;
use sluice_bus::topology;
use sluice_cli::demo;
use sluice_cli::stack::Stack;
use sluice_testkit::wait_for;

const DEADLINE: Duration = Duration::from_secs(30);

/// A stage's last dead letter, once there is one: (payload, reason, origin subject).
async fn dead_letter(stack: &Stack, stage: &str) -> anyhow::Result<(bytes::Bytes, String, String)> {
    let bus = sluice_bus::Bus::connect(stack.bus_options()).await?;
    wait_for(&format!("the {stage}'s dead letter"), DEADLINE, || {
        bus.last_dead_letter(stage)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_state_without_a_valid_cluster_is_dead_lettered_once() -> anyhow::Result<()> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    demo::install_seed(&stack, "cluster-a").await?;
    let bus = sluice_bus::Bus::connect(stack.bus_options()).await?;
    let js = bus.jetstream().clone();
    let cluster = topology::cluster_tokens("sveltos", "default", "cluster-a");
    let malformed = sluice_proto::v1::DesiredState {
        event_trigger: "service-network-policy".into(),
        cluster: None,
        ..Default::default()
    };
    let subject = topology::desired_subject("broken", &cluster);
    js.publish(subject.clone(), malformed.encode_to_vec().into())
        .await?
        .await?;

    let (_, reason, origin) = dead_letter(&stack, "applier").await?;
    assert!(reason.contains("names no valid cluster"), "{reason}");
    assert_eq!(origin, subject);

    // The pipeline goes on, and the rejected state was not retried: one dead letter, and the
    // applier's consumer holds nothing unacked.
    demo::seed_service_goes_through(&stack, "cluster-a", DEADLINE).await?;
    let stream = js.get_stream(topology::DESIRED.name).await?;
    let consumer: async_nats::jetstream::consumer::PullConsumer = stream
        .get_consumer(topology::APPLIER_DESIRED.durable)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // The Service's own state is acked once its result is stored, a moment after its profile.
    wait_for("every desired state acked", DEADLINE, || async {
        let info = consumer.get_info().await.ok()?;
        (info.num_ack_pending == 0 && info.num_pending == 0).then_some(())
    })
    .await?;
    let mut dead = js.get_stream(topology::DEAD.name).await?;
    assert_eq!(dead.info().await?.state.messages, 1, "rejected only once");
    Ok(())
}

/// A Service too large for a bus whose messages carry at most 32 KiB: the watcher cannot
/// publish its change, says so on `sluice.v1.dead.watcher` (the subject and the reason, not the
/// payload that did not fit), and its watch goes on: the next Service becomes a ClusterProfile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_too_large_for_the_bus_is_dead_lettered_and_the_watch_goes_on(
) -> anyhow::Result<()> {
    const MAX_PAYLOAD: usize = 32 * 1024;
    let stack = Stack::start_with_nats_config(
        &["cluster-a"],
        None,
        &format!("max_payload: {MAX_PAYLOAD}\n"),
    )
    .await?;
    demo::install_seed(&stack, "cluster-a").await?;
    let huge = demo::SERVICE
        .replace("name: my-service", "name: huge")
        .replace(
            "  labels:",
            &format!(
                "  annotations:\n    filler: {}\n  labels:",
                "x".repeat(MAX_PAYLOAD)
            ),
        );
    stack.apply_yaml("cluster-a", &huge).await?;
    demo::seed_service_goes_through(&stack, "cluster-a", DEADLINE).await?;
    let (payload, reason, origin) = dead_letter(&stack, "watcher").await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "cluster-a");
    assert_eq!(
        origin,
        topology::change_subject(&cluster, "", "Service", "default", "huge")
    );
    assert!(reason.contains("max payload"), "{reason}");
    assert!(payload.is_empty());
    Ok(())
}
