//! Managed clusters as the management cluster registers them (SveltosCluster and CAPI Cluster),
//! and where their kubeconfig lives (spec §13). Does not connect to anything.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::selector::Selector;

/// How Sveltos types a cluster. Part of report names and labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClusterType {
    Sveltos,
    Capi,
}

impl ClusterType {
    /// The spelling in ClusterProfile labels and EventReport `spec.clusterType`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterType::Sveltos => "Sveltos",
            ClusterType::Capi => "Capi",
        }
    }

    /// The lower-case spelling used in EventReport names and labels.
    pub fn lower(self) -> &'static str {
        match self {
            ClusterType::Sveltos => "sveltos",
            ClusterType::Capi => "capi",
        }
    }

    pub fn parse(text: &str) -> Option<ClusterType> {
        match text.to_ascii_lowercase().as_str() {
            "sveltos" => Some(ClusterType::Sveltos),
            "capi" => Some(ClusterType::Capi),
            _ => None,
        }
    }

    /// apiVersion and kind of the registration object, as ClusterProfile `clusterRefs` name it.
    pub fn api_version_kind(self) -> (&'static str, &'static str) {
        match self {
            ClusterType::Sveltos => ("lib.projectsveltos.io/v1beta1", "SveltosCluster"),
            ClusterType::Capi => ("cluster.x-k8s.io/v1beta1", "Cluster"),
        }
    }
}

/// The identity of a managed cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterId {
    pub cluster_type: ClusterType,
    pub namespace: String,
    pub name: String,
}

impl ClusterId {
    /// The id of the SveltosCluster `namespace/name`.
    pub fn sveltos(namespace: &str, name: &str) -> ClusterId {
        ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for ClusterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}/{}",
            self.cluster_type.lower(),
            self.namespace,
            self.name
        )
    }
}

/// The annotation that puts a cluster in a shard (Sveltos's `sharding.projectsveltos.io/key`):
/// of the watchers, the one started with that shard key watches it; a cluster without it is
/// in the default shard, the empty key.
pub const SHARD_ANNOTATION: &str = "sharding.projectsveltos.io/key";

/// A registered cluster with what sluice needs to decide about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    pub id: ClusterId,
    pub labels: BTreeMap<String, String>,
    pub paused: bool,
    pub ready: bool,
    /// Secret (in the cluster's namespace) holding the kubeconfig.
    pub kubeconfig_secret: String,
    /// Data key in that Secret; `None` means "the only key".
    pub kubeconfig_key: Option<String>,
    /// The registration object as a map, for `.Cluster` in templates.
    pub object: Value,
}

impl Cluster {
    /// The shard the cluster is in ([`SHARD_ANNOTATION`]); `""`, the default shard, without one.
    pub fn shard_key(&self) -> &str {
        self.object
            .pointer("/metadata/annotations")
            .and_then(|annotations| annotations.get(SHARD_ANNOTATION))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// Reads a SveltosCluster or CAPI Cluster object. `None` for other kinds.
    pub fn from_object(object: &Value) -> Option<Cluster> {
        let kind = object.get("kind")?.as_str()?;
        let cluster_type = match kind {
            "SveltosCluster" => ClusterType::Sveltos,
            "Cluster" => ClusterType::Capi,
            _ => return None,
        };
        let metadata = object.get("metadata")?;
        let name = metadata.get("name")?.as_str()?.to_string();
        let namespace = metadata
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let labels = string_map(metadata.get("labels"));
        let spec = object.get("spec");
        let status = object.get("status");
        let paused = spec
            .and_then(|s| s.get("paused"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let (kubeconfig_secret, kubeconfig_key, ready) = match cluster_type {
            ClusterType::Sveltos => {
                let secret = spec
                    .and_then(|s| s.get("kubeconfigName"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{name}-sveltos-kubeconfig"));
                let key = spec
                    .and_then(|s| s.get("kubeconfigKeyName"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string);
                let ready = status
                    .and_then(|s| s.get("ready"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                (secret, key, ready)
            }
            ClusterType::Capi => {
                let ready = status
                    .and_then(|s| s.get("controlPlaneReady"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                    || capi_condition_true(status, "ControlPlaneInitialized");
                (
                    format!("{name}-kubeconfig"),
                    Some("value".to_string()),
                    ready,
                )
            }
        };
        Some(Cluster {
            id: ClusterId {
                cluster_type,
                namespace,
                name,
            },
            labels,
            paused,
            ready,
            kubeconfig_secret,
            kubeconfig_key,
            object: object.clone(),
        })
    }

    /// Whether sluice should watch and configure this cluster now.
    pub fn is_usable(&self) -> bool {
        self.ready && !self.paused
    }
}

fn capi_condition_true(status: Option<&Value>, condition: &str) -> bool {
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(condition)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Reads a `map[string]string` field, ignoring non-string values.
pub fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A source cluster selector with Sveltos's rule that an empty selector matches no cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSelector {
    selector: Option<Selector>,
}

impl ClusterSelector {
    pub fn new(selector: Selector) -> ClusterSelector {
        if selector.is_empty() {
            ClusterSelector { selector: None }
        } else {
            ClusterSelector {
                selector: Some(selector),
            }
        }
    }

    pub fn none() -> ClusterSelector {
        ClusterSelector { selector: None }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

/// Reads the kubeconfig text out of a Secret object, per spec §13.
pub fn kubeconfig_from_secret(secret: &Value, key: Option<&str>) -> Result<String, String> {
    let data = secret
        .get("data")
        .and_then(Value::as_object)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| "kubeconfig secret has no data".to_string())?;
    let encoded = match key {
        Some(key) => data
            .get(key)
            .ok_or_else(|| format!("kubeconfig secret has no key {key}"))?,
        None => data
            .values()
            .next()
            .ok_or_else(|| "kubeconfig secret has no data".to_string())?,
    };
    let encoded = encoded
        .as_str()
        .ok_or_else(|| "kubeconfig secret value is not a string".to_string())?;
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("kubeconfig secret value is not base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "kubeconfig is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sveltos_cluster_defaults_follow_sveltos() {
        let c = Cluster::from_object(&json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"env": "fv"}},
            "spec": {}, "status": {"ready": true}
        }))
        .expect("cluster");
        assert_eq!(c.kubeconfig_secret, "a-sveltos-kubeconfig");
        assert_eq!(c.kubeconfig_key, None);
        assert!(c.is_usable());
        assert_eq!(c.labels.get("env").map(String::as_str), Some("fv"));
    }

    #[test]
    fn capi_cluster_uses_value_key_and_conditions() {
        let c = Cluster::from_object(&json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {"paused": false},
            "status": {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}
        }))
        .expect("cluster");
        assert_eq!(c.kubeconfig_secret, "w-kubeconfig");
        assert_eq!(c.kubeconfig_key.as_deref(), Some("value"));
        assert!(c.ready);
    }

    #[test]
    fn a_clusters_shard_is_its_sharding_annotation_or_the_default() {
        let cluster = |annotations: Value| {
            Cluster::from_object(&json!({
                "kind": "SveltosCluster",
                "metadata": {"name": "a", "namespace": "ns", "annotations": annotations},
            }))
            .expect("cluster")
        };
        let sharded = cluster(json!({"sharding.projectsveltos.io/key": "eu", "other": "x"}));
        assert_eq!(sharded.shard_key(), "eu");
        assert_eq!(cluster(json!({"other": "x"})).shard_key(), "");
        assert_eq!(cluster(Value::Null).shard_key(), "");
    }

    #[test]
    fn paused_cluster_is_not_usable() {
        let c = Cluster::from_object(&json!({
            "kind": "SveltosCluster", "metadata": {"name": "a"},
            "spec": {"paused": true}, "status": {"ready": true}
        }))
        .expect("cluster");
        assert!(!c.is_usable());
    }

    #[test]
    fn empty_selector_matches_no_cluster() {
        let labels = BTreeMap::from([("env".to_string(), "fv".to_string())]);
        assert!(!ClusterSelector::new(Selector::everything()).matches(&labels));
        let sel = ClusterSelector::new(Selector::parse("env=fv").expect("selector"));
        assert!(sel.matches(&labels));
    }

    #[test]
    fn kubeconfig_is_read_from_the_named_or_only_key() {
        let secret = json!({"data": {"value": "aGVsbG8="}});
        assert_eq!(
            kubeconfig_from_secret(&secret, None).as_deref(),
            Ok("hello")
        );
        assert_eq!(
            kubeconfig_from_secret(&secret, Some("value")).as_deref(),
            Ok("hello")
        );
        assert!(kubeconfig_from_secret(&secret, Some("other")).is_err());
        assert!(kubeconfig_from_secret(&json!({"data": {}}), None).is_err());
    }
}
