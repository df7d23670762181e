//! What the evaluator's tests share: a cluster identity, publishing configuration objects as
//! the watcher does, and running the evaluator service in the test process.

use prost::Message as _;
use serde_json::Value;
use sluice_bus::{message_id, topology, Bus, Outgoing};
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_proto::v1 as pb;
use sluice_runtime::{CancellationToken, CommonArgs, Health, LogFormat};
use tokio::task::JoinHandle;

pub fn cluster(name: &str) -> ClusterId {
    ClusterId {
        cluster_type: ClusterType::Sveltos,
        namespace: "default".into(),
        name: name.into(),
    }
}

pub async fn publish(bus: &Bus, subject: String, id: &str, payload: Vec<u8>) -> anyhow::Result<()> {
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

/// Publishes one configuration object as the watcher would.
pub async fn config(
    bus: &Bus,
    kind: &str,
    namespace: &str,
    name: &str,
    object: Value,
) -> anyhow::Result<()> {
    let message = pb::ConfigObject {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        deleted: false,
        resource_version: "1".into(),
        object_json: serde_json::to_vec(&object)?,
        sealed_object_json: Vec::new(),
    };
    // A new id per content: a changed object is a new message, not a duplicate.
    let id = format!("{kind}/{namespace}/{name}/{object}");
    publish(
        bus,
        topology::config_subject(kind, namespace, name),
        &id,
        message.encode_to_vec(),
    )
    .await
}

pub fn start_evaluator(url: &str) -> (CancellationToken, JoinHandle<anyhow::Result<()>>) {
    let common = CommonArgs {
        nats_url: url.to_string(),
        kubeconfig: None,
        kube_context: None,
        health_addr: "127.0.0.1:0".parse().expect("address"),
        log_format: LogFormat::Text,
        sveltos_namespace: "projectsveltos".into(),
        bus_key_file: None,
        nats_auth: Default::default(),
        stream_replicas: 1,
        linger_us: sluice_runtime::DEFAULT_LINGER_US,
        worker_threads: sluice_runtime::DEFAULT_WORKER_THREADS,
        leader_elect: false,
        leader_elect_lease_duration: sluice_runtime::LeaseTiming::DEFAULT.duration,
        leader_elect_renew_deadline: sluice_runtime::LeaseTiming::DEFAULT.renew_deadline,
        leader_elect_retry_period: sluice_runtime::LeaseTiming::DEFAULT.retry_period,
    };
    let token = CancellationToken::new();
    let task = tokio::spawn(sluice_evaluator::run(common, Health::new(), token.clone()));
    (token, task)
}
