//! The renderer's CloudEvent stage against a real nats-server (ADR 0049): a CloudEvent match
//! of an older event, published again after a newer one of its unit, is not rendered over it,
//! also once the renderer has forgotten the unit (it reads the unit's state from the bus).

use std::time::Duration;

use prost::Message as _;
use serde_json::json;
use sluice_bus::{message_id, topology, Bus, Outgoing};
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_domain::configdata::BusForm;
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health};
use sluice_testkit::{wait_for, NatsServer};

const DEADLINE: Duration = Duration::from_secs(60);
const STREAM: &str = "jetstream:USERS:1";
const SEED_004: &str = include_str!("../../../examples/seed-004-cloudevents/eventtrigger.yaml");

fn production() -> ClusterId {
    ClusterId {
        cluster_type: ClusterType::Sveltos,
        namespace: "default".into(),
        name: "production".into(),
    }
}

async fn publish(bus: &Bus, subject: String, id: &str, payload: Vec<u8>) -> anyhow::Result<()> {
    bus.publish_durably(Outgoing {
        ttl: None,
        subject,
        msg_id: message_id(&["test", id]),
        payload: payload.into(),
        traceparent: None,
    })
    .await?;
    Ok(())
}

/// Seed 004's EventSource, EventTrigger and ConfigMap, and the `production` cluster, on the
/// config stream as the watcher publishes them.
async fn seed_config(bus: &Bus) -> anyhow::Result<()> {
    let cluster = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
        "metadata": {"name": "production", "namespace": "default", "labels": {"env": "production"}},
        "status": {"ready": true}});
    let mut objects = vec![cluster];
    for doc in serde_yaml::Deserializer::from_str(SEED_004) {
        objects.push(serde::Deserialize::deserialize(doc)?);
    }
    for object in objects {
        let field = |f: &str| object["metadata"][f].as_str().unwrap_or("").to_string();
        let kind = object["kind"].as_str().unwrap_or("").to_string();
        let (namespace, name) = (field("namespace"), field("name"));
        let form = BusForm::Plain(object.clone());
        let message = sluice_wire::config_message(&kind, &namespace, &name, "1", Some(&form), None);
        publish(
            bus,
            topology::config_subject(&kind, &namespace, &name),
            &format!("config/{kind}/{namespace}/{name}"),
            message.encode_to_vec(),
        )
        .await?;
    }
    Ok(())
}

/// The seed's login (or logout) of `user`, stored at `position` of the managed stream, as the
/// evaluator publishes its match; `attempt` tells one publish of the same match from another.
async fn matched(
    bus: &Bus,
    user: &str,
    logout: bool,
    position: u64,
    attempt: u32,
) -> anyhow::Result<()> {
    let kind = if logout { "logout" } else { "login" };
    let event = json!({"specversion": "1.0", "type": format!("auth.example.com.{kind}"),
        "source": "auth.example.com", "id": "10001", "subject": user,
        "data": {"message": format!("User {user} {kind}")}});
    let message = pb::CloudEventMatch {
        cluster: Some(sluice_wire::cluster_ref(&production())),
        event_source: "user-operation".into(),
        nats_subject: "user-operation".into(),
        event_json: serde_json::to_vec(&event)?,
        source_sequence: position,
        origin: STREAM.into(),
        origin_position: position,
    };
    let tokens = sluice_wire::cluster_tokens(&production());
    publish(
        bus,
        topology::cloudevent_match_subject(&tokens, "user-operation"),
        &format!("match/{position}/{attempt}"),
        message.encode_to_vec(),
    )
    .await
}

/// The desired state of `user`'s unit as stored, if any.
async fn unit(bus: &Bus, user: &str) -> anyhow::Result<Option<pb::DesiredState>> {
    let tokens = sluice_wire::cluster_tokens(&production());
    let subject =
        topology::desired_cloudevent_subject("manage-namespace", &tokens, "auth.example.com", user);
    Ok(match bus.last_state(topology::DESIRED, &subject).await? {
        Some(delivered) => Some(sluice_wire::decode_desired(&delivered, None)?),
        None => None,
    })
}

async fn until_unit(bus: &Bus, user: &str) -> anyhow::Result<pb::DesiredState> {
    wait_for(&format!("the unit of {user}"), DEADLINE, || async {
        unit(bus, user).await.ok().flatten()
    })
    .await
}

/// Whether the unit is removed, how many objects it holds, and its event's place.
fn summary(state: &pb::DesiredState) -> (bool, usize, String, u64) {
    (
        state.removed,
        state.objects.len(),
        state.cloud_event_origin.clone(),
        state.cloud_event_position,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_cloud_event_published_again_is_not_rendered_over_a_newer_one_even_once_forgotten(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let bus = Bus::connect(&nats.url()).await?;
    seed_config(&bus).await?;
    let health = Health::new();
    let common = CommonArgs::local(&nats.url());
    let token = CancellationToken::new();
    let task = tokio::spawn(sluice_renderer::run(common, health.clone(), token.clone()));

    // user-20 logs in (stored at 79) and out (92); the login's match is published again
    // after the logout's, as a publish retried over a crash of the bus is.
    matched(&bus, "user-20", false, 79, 1).await?;
    matched(&bus, "user-20", true, 92, 1).await?;
    matched(&bus, "user-20", false, 79, 2).await?;
    matched(&bus, "marker-1", false, 93, 1).await?;
    let a_login = until_unit(&bus, "marker-1").await?.objects.len();
    assert!(a_login > 0, "a login creates something");
    let removed = (true, 0, STREAM.to_string(), 92);
    assert_eq!(
        unit(&bus, "user-20").await?.as_ref().map(summary),
        Some(removed.clone()),
        "the older login was rendered over the logout"
    );

    // Enough other users that the renderer prunes what it knows at its consumer's ack floor,
    // user-20 among it.
    let forgotten = health.counter("sluice_renderer_subjects_forgotten_total");
    let mut position = 100;
    while forgotten.get() == 0 {
        anyhow::ensure!(
            position < 20_000,
            "the renderer never pruned its CloudEvent units"
        );
        for _ in 0..500 {
            position += 1;
            matched(&bus, &format!("user-{position}"), false, position, 1).await?;
        }
        until_unit(&bus, &format!("user-{position}")).await?;
    }

    // The login published once more: the renderer no longer knows user-20, reads its state
    // from the bus, and finds the logout later.
    matched(&bus, "user-20", false, 79, 3).await?;
    matched(&bus, "marker-2", false, position + 1, 1).await?;
    until_unit(&bus, "marker-2").await?;
    assert_eq!(
        unit(&bus, "user-20").await?.as_ref().map(summary),
        Some(removed),
        "the older login was rendered over the forgotten logout"
    );
    // A later login of the user is rendered.
    matched(&bus, "user-20", false, position + 2, 1).await?;
    let login = wait_for("user-20's later login", DEADLINE, || async {
        unit(&bus, "user-20")
            .await
            .ok()
            .flatten()
            .filter(|state| !state.removed)
    })
    .await?;
    assert_eq!(
        summary(&login),
        (false, a_login, STREAM.to_string(), position + 2)
    );

    token.cancel();
    task.await??;
    Ok(())
}
