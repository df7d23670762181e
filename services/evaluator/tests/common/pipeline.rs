//! What the evaluator's tests share: a cluster identity, publishing configuration objects as
//! the watcher does, and running the evaluator service in the test process.

use prost::Message as _;
use serde_json::Value;
use sluice_bus::{message_id, topology, Bus, Outgoing};
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_domain::configdata::BusForm;
use sluice_runtime::{CancellationToken, CommonArgs, Health};
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
    let form = BusForm::Plain(object.clone());
    let message = sluice_wire::config_message(kind, namespace, name, "1", Some(&form), None);
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
    let common = CommonArgs::local(url);
    let token = CancellationToken::new();
    let task = tokio::spawn(sluice_evaluator::run(common, Health::new(), token.clone()));
    (token, task)
}
