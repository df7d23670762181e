//! Applying YAML manifests (one or many documents) the way `kubectl apply --server-side` does.

use kube::Client;
use serde::Deserialize;
use serde_json::Value;

use crate::apply::{apply, resolve};
use crate::error::{Error, Result};

/// Parses every non-empty document of a YAML stream into JSON values.
pub fn parse_documents(text: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|e| Error::Kubeconfig {
            source: Box::new(e),
        })?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// Server-side applies every document; namespaced objects without a namespace go to `default`.
pub async fn apply_documents(
    client: &Client,
    objects: &[Value],
    field_manager: &str,
) -> Result<Vec<Value>> {
    let mut applied = Vec::with_capacity(objects.len());
    for object in objects {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or(Error::Malformed("apiVersion"))?;
        let kind_name = object
            .get("kind")
            .and_then(Value::as_str)
            .ok_or(Error::Malformed("kind"))?;
        let kind = resolve(client, api_version, kind_name).await?;
        let mut object = object.clone();
        if kind.namespaced && object.pointer("/metadata/namespace").is_none() {
            object["metadata"]["namespace"] = Value::String("default".to_string());
        }
        applied.push(apply(client, &kind, &object, field_manager).await?);
    }
    Ok(applied)
}
