//! Seed 004 on the local stack: a separate nats-server with user `admin` / `my-password` stands
//! for a managed cluster's NATS, reached through the cluster's `sveltos-nats` Secret (the seed's
//! own, pointed at that server). Shared by the end-to-end tests and the CloudEvent benchmark
//! (`sluice demo --cloudevents N`).

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use sluice_domain::naming;
use sluice_testkit::{wait_for, NatsServer};

use crate::demo::CLUSTER_PROFILE;
use crate::stack::{Stack, MANAGEMENT};

pub use crate::examples::seed_004::{CONFIG, LOGIN, LOGOUT, NATS_SECRET};
pub const TRIGGER: &str = "manage-namespace";
pub const CLUSTER: &str = "production";
pub const SUBJECT: &str = "user-operation";
pub const USER: &str = "admin";
pub const PASSWORD: &str = "my-password";
/// Where the seed's Secret points; the stack points it at its own server.
pub const SEED_URL: &str = "nats://nats.nats.svc.cluster.local:4222";

/// The seed's `sveltos-nats` Secret with its configuration edited by `edit`.
pub fn nats_secret(edit: impl Fn(&mut Value)) -> anyhow::Result<Value> {
    let mut secret: Value = serde_yaml::from_str(NATS_SECRET)?;
    let encoded = secret["data"]["sveltos-nats"].as_str().unwrap_or_default();
    let mut configuration: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(encoded)?)?;
    anyhow::ensure!(
        configuration["nats"]["configuration"]["url"] == SEED_URL,
        "the seed's Secret changed: {configuration}"
    );
    edit(&mut configuration);
    secret["data"]["sveltos-nats"] =
        json!(base64::engine::general_purpose::STANDARD.encode(configuration.to_string()));
    Ok(secret)
}

/// The managed cluster's NATS server, with the seed's credentials.
pub async fn managed_nats() -> anyhow::Result<NatsServer> {
    NatsServer::start_with_args(&["--user", USER, "--pass", PASSWORD]).await
}

pub async fn managed_client(server: &NatsServer) -> anyhow::Result<async_nats::Client> {
    Ok(
        async_nats::ConnectOptions::with_user_and_password(USER.into(), PASSWORD.into())
            .connect(server.url())
            .await?,
    )
}

/// A stack with cluster `production` (env: production), seed 004's configuration, and the
/// cluster's `sveltos-nats` Secret.
pub async fn seeded_stack(secret: &Value) -> anyhow::Result<Stack> {
    let stack = Stack::start(&[CLUSTER], None).await?;
    stack
        .register_cluster(CLUSTER, &[("env", "production")])
        .await?;
    stack.apply_yaml(MANAGEMENT, CONFIG).await?;
    stack
        .apply(
            CLUSTER,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "projectsveltos"}}),
        )
        .await?;
    stack.apply(CLUSTER, secret).await?;
    Ok(stack)
}

/// How many CloudEvents the watcher has put on the sluice bus.
pub async fn forwarded(stack: &Stack) -> anyhow::Result<u64> {
    let bus = stack.bus_options().connect_client().await?;
    let js = async_nats::jetstream::new(bus);
    let mut stream = js.get_stream("SLUICE_CLOUDEVENTS").await?;
    Ok(stream.info().await?.state.messages)
}

/// Core NATS is at most once: probe with an event no EventSource selects until the watcher
/// forwards one, so real events are not published before it listens.
pub async fn wait_listening(stack: &Stack, client: &async_nats::Client) -> anyhow::Result<()> {
    let probe = json!({"specversion": "1.0", "id": "probe", "source": "probe", "type": "probe"});
    wait_for(
        "watcher listening on the managed NATS",
        Duration::from_secs(30),
        || async {
            client
                .publish(SUBJECT, probe.to_string().into())
                .await
                .ok()?;
            client.flush().await.ok()?;
            (forwarded(stack).await.ok()? > 0).then_some(())
        },
    )
    .await
}

/// The seed's event for another user (CloudEvent subject).
pub fn event_for(text: &str, user: &str) -> String {
    text.replace("mgianluc", user)
}

/// ClusterProfiles a CloudEvent with subject `user` created (all users when `None`).
pub async fn user_profiles(stack: &Stack, user: Option<&str>) -> anyhow::Result<Vec<Value>> {
    let mut labels = vec![
        (naming::LABEL_EVENT_TRIGGER, TRIGGER),
        (naming::LABEL_CE_SOURCE, "auth.example.com"),
    ];
    if let Some(user) = user {
        labels.push((naming::LABEL_CE_SUBJECT, user));
    }
    stack
        .list(MANAGEMENT, CLUSTER_PROFILE.0, CLUSTER_PROFILE.1, &labels)
        .await
}

/// What the CloudEvent benchmark measured.
#[derive(Clone, Debug)]
pub struct CloudEventReport {
    /// Publish of one login → its ClusterProfile exists, one event at a time.
    pub latencies: Vec<Duration>,
    /// Logins published back to back, and the time until all their profiles existed.
    pub burst: usize,
    pub burst_elapsed: Duration,
}

/// Publishes `events` logins one at a time (distinct users), then `events` more back to back.
pub async fn measure(
    events: usize,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<CloudEventReport> {
    let managed = managed_nats().await?;
    let url = managed.url();
    let secret = nats_secret(|c| c["nats"]["configuration"]["url"] = json!(url))?;
    let stack = seeded_stack(&secret).await?;
    let client = managed_client(&managed).await?;
    wait_listening(&stack, &client).await?;
    writeln!(out, "# {events} logins, one at a time")?;
    let mut latencies = Vec::with_capacity(events);
    for i in 0..events {
        let user = format!("user-{i}");
        let started = Instant::now();
        client
            .publish(SUBJECT, event_for(LOGIN, &user).into())
            .await?;
        client.flush().await?;
        loop {
            if user_profiles(&stack, Some(&user)).await?.len() == 1 {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                anyhow::bail!("no ClusterProfile for {user} after 30s\n{}", stack.logs());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(started.elapsed());
    }
    writeln!(out, "# {events} logins back to back")?;
    let started = Instant::now();
    for i in 0..events {
        let user = format!("burst-{i}");
        client
            .publish(SUBJECT, event_for(LOGIN, &user).into())
            .await?;
    }
    client.flush().await?;
    let expected = 2 * events;
    loop {
        if user_profiles(&stack, None).await?.len() >= expected {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("burst not applied after 10 min\n{}", stack.logs());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(CloudEventReport {
        latencies,
        burst: events,
        burst_elapsed: started.elapsed(),
    })
}
