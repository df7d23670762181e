//! Writes made inside a cluster rather than through its API endpoint, so the cluster's faults do
//! not apply to them: what the cluster's own users and controllers change while the cluster is
//! unreachable from outside (a network partition, as the management cluster sees it). Watches
//! and lists see these changes like any other once the cluster is reachable again.

use std::sync::Arc;

use serde_json::Value;

use crate::cluster::{check_type, Cluster, Owner, Subresource};
use crate::error::{Error, Result};
use crate::object::meta_str;
use crate::resources::ResourceInfo;

/// Field manager of the writes made inside.
const MANAGER: &str = "sluice-testserver-inside";

/// A handle for writing inside one cluster; cheap to clone.
#[derive(Clone)]
pub struct Inside {
    cluster: Arc<Cluster>,
}

impl Inside {
    pub(crate) fn new(cluster: Arc<Cluster>) -> Inside {
        Inside { cluster }
    }

    fn error(&self, what: String, message: String) -> Error {
        Error::Seed {
            cluster: self.cluster.name.clone(),
            what,
            message,
        }
    }

    fn info(&self, api_version: &str, kind: &str) -> Result<(ResourceInfo, String)> {
        let state = self.cluster.lock();
        super::served(&state.registry, api_version, kind)
            .map(|(info, version)| (info, version.to_string()))
            .ok_or_else(|| {
                self.error(
                    kind.to_string(),
                    format!("no resource serves {api_version} {kind}"),
                )
            })
    }

    /// Creates the object (and its namespace if missing), or replaces the existing one whatever
    /// its resourceVersion.
    pub fn put(&self, obj: Value) -> Result<Value> {
        let (namespace, name) = (meta_str(&obj, "namespace"), meta_str(&obj, "name"));
        let what = format!("{} {namespace}/{name}", meta_str(&obj, "kind"));
        let (info, version) = self.info(
            obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            obj.get("kind").and_then(Value::as_str).unwrap_or(""),
        )?;
        let exists = self
            .cluster
            .lock()
            .get(&info.gr(), namespace, name)
            .is_some();
        if !exists {
            return super::create_object(&self.cluster, obj);
        }
        check_type(&info, &version, &obj).map_err(|e| self.error(what.clone(), e.message))?;
        let (namespace, name) = (namespace.to_string(), name.to_string());
        let mut new = obj;
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        self.cluster
            .lock()
            .update(
                &info,
                &namespace,
                &name,
                new,
                Subresource::Main,
                &Owner::Update(MANAGER.into()),
            )
            .map_err(|e| self.error(what, e.message))
    }

    /// Deletes an object; `false` when there was none.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool> {
        let (info, _) = self.info(api_version, kind)?;
        let mut state = self.cluster.lock();
        if state.get(&info.gr(), namespace, name).is_none() {
            return Ok(false);
        }
        state
            .delete(&info, namespace, name, &Default::default())
            .map(|_| true)
            .map_err(|e| self.error(format!("{kind} {namespace}/{name}"), e.message))
    }
}
