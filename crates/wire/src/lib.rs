//! Where the wire meets the domain: the only place protobuf messages and domain types are
//! converted into each other, plus the configuration feed every stage follows.
//! It decides nothing; the stages do.

pub mod match_units;
pub mod names;

use bytes::Bytes;
use prost::Message;
use serde_json::Value;
use sluice_bus::{topology, Bus, Delivered, LiveFeed};
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_domain::config::ConfigState;
use sluice_proto::v1 as pb;

/// Why a message could not be read. Permanent: the message is dead-lettered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to decode {what} from {subject}")]
    Decode {
        what: &'static str,
        subject: String,
        #[source]
        source: prost::DecodeError,
    },
    #[error("message on {subject} has an invalid {field}")]
    Invalid {
        subject: String,
        field: &'static str,
    },
    #[error("failed to follow the configuration")]
    Bus(#[from] sluice_bus::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub fn encode<M: Message>(message: &M) -> Bytes {
    Bytes::from(message.encode_to_vec())
}

pub fn decode<M: Message + Default>(what: &'static str, delivered: &Delivered) -> Result<M> {
    M::decode(delivered.payload.as_ref()).map_err(|source| Error::Decode {
        what,
        subject: delivered.subject.clone(),
        source,
    })
}

pub fn cluster_ref(id: &ClusterId) -> pb::ClusterRef {
    pb::ClusterRef {
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        r#type: match id.cluster_type {
            ClusterType::Sveltos => pb::ClusterType::Sveltos as i32,
            ClusterType::Capi => pb::ClusterType::Capi as i32,
        },
    }
}

pub fn cluster_id(r: Option<&pb::ClusterRef>, subject: &str) -> Result<ClusterId> {
    let r = r.ok_or_else(|| invalid_cluster(subject))?;
    Ok(ClusterId {
        cluster_type: cluster_type(r, subject)?,
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    })
}

/// As [`cluster_id`], taking the reference's strings instead of copying them.
pub fn into_cluster_id(r: Option<pb::ClusterRef>, subject: &str) -> Result<ClusterId> {
    let r = r.ok_or_else(|| invalid_cluster(subject))?;
    Ok(ClusterId {
        cluster_type: cluster_type(&r, subject)?,
        namespace: r.namespace,
        name: r.name,
    })
}

fn cluster_type(r: &pb::ClusterRef, subject: &str) -> Result<ClusterType> {
    match pb::ClusterType::try_from(r.r#type) {
        Ok(pb::ClusterType::Sveltos) => Ok(ClusterType::Sveltos),
        Ok(pb::ClusterType::Capi) => Ok(ClusterType::Capi),
        _ => Err(invalid_cluster(subject)),
    }
}

fn invalid_cluster(subject: &str) -> Error {
    Error::Invalid {
        subject: subject.to_string(),
        field: "cluster",
    }
}

/// The `<type>.<namespace>.<name>` tokens of a cluster in subjects.
pub fn cluster_tokens(id: &ClusterId) -> String {
    topology::cluster_tokens(id.cluster_type.lower(), &id.namespace, &id.name)
}

pub fn object_ref(object: &Value) -> pb::ObjectRef {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    pb::ObjectRef {
        api_version: s("/apiVersion"),
        kind: s("/kind"),
        namespace: s("/metadata/namespace"),
        name: s("/metadata/name"),
    }
}

/// One configuration object's new state.
#[derive(Clone, Debug)]
pub struct ConfigUpdate {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub object: Option<Value>,
    pub sequence: u64,
}

impl ConfigUpdate {
    pub fn from_delivered(delivered: &Delivered) -> Result<ConfigUpdate> {
        let message: pb::ConfigObject = decode("ConfigObject", delivered)?;
        let object = if message.deleted {
            None
        } else {
            Some(
                serde_json::from_slice(&message.object_json).map_err(|_| Error::Invalid {
                    subject: delivered.subject.clone(),
                    field: "object_json",
                })?,
            )
        };
        Ok(ConfigUpdate {
            kind: message.kind,
            namespace: message.namespace,
            name: message.name,
            object,
            sequence: delivered.sequence,
        })
    }

    pub fn apply_to(&self, state: &mut ConfigState) -> bool {
        state.apply(
            &self.kind,
            &self.namespace,
            &self.name,
            self.object.as_ref(),
        )
    }
}

/// Follows the configuration stream: the current configuration, and a feed of later updates.
pub async fn follow_config(bus: &Bus) -> Result<(ConfigState, ConfigFeed)> {
    let (initial, live) = bus
        .follow_state(topology::CONFIG, topology::CONFIG.subjects)
        .await?;
    let mut state = ConfigState::default();
    for delivered in &initial {
        match ConfigUpdate::from_delivered(delivered) {
            Ok(update) => {
                update.apply_to(&mut state);
            }
            Err(error) => tracing::warn!(error = %error, "skipping unreadable config message"),
        }
    }
    Ok((state, ConfigFeed { live }))
}

/// Later configuration updates.
pub struct ConfigFeed {
    live: LiveFeed,
}

impl ConfigFeed {
    /// The next update; `None` when the connection is gone for good.
    pub async fn next(&mut self) -> Option<Result<ConfigUpdate>> {
        use futures::StreamExt;
        let delivered = self.live.next().await?;
        Some(
            delivered
                .map_err(Error::Bus)
                .and_then(|d| ConfigUpdate::from_delivered(&d)),
        )
    }

    /// The next update and every further one already received, up to 256: a stage applies
    /// them all and recomputes once. `None` when the connection is gone for good.
    /// Cancel-safe like [`ConfigFeed::next`].
    pub async fn next_batch(&mut self) -> Option<Vec<Result<ConfigUpdate>>> {
        use futures::FutureExt;
        let mut batch = vec![self.next().await?];
        while batch.len() < 256 {
            match self.next().now_or_never() {
                Some(Some(update)) => batch.push(update),
                _ => break,
            }
        }
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_refs_round_trip() {
        for cluster_type in [ClusterType::Sveltos, ClusterType::Capi] {
            let id = ClusterId {
                cluster_type,
                namespace: "ns".into(),
                name: "n".into(),
            };
            let r = cluster_ref(&id);
            assert_eq!(cluster_id(Some(&r), "s").expect("id"), id);
        }
        assert!(cluster_id(None, "s").is_err());
        assert!(cluster_id(Some(&pb::ClusterRef::default()), "s").is_err());
    }
}
