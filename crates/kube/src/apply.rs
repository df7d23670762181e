//! Writing to a cluster: server-side apply of whole objects, deletion, listing by labels.

use std::collections::BTreeMap;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::Client;
use serde_json::Value;

use crate::error::{Error, Result};

/// A resolved kind: what the API server calls it and whether it is namespaced.
#[derive(Clone, Debug)]
pub struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// Asks the API server (discovery) how it serves `apiVersion`/`kind`.
pub async fn resolve(client: &Client, api_version: &str, kind: &str) -> Result<Kind> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|source| Error::UnknownKind {
            gvk: format!("{api_version}/{kind}"),
            source: Box::new(source),
        })?;
    Ok(Kind {
        resource,
        namespaced: caps.scope == Scope::Namespaced,
    })
}

fn api(client: &Client, kind: &Kind, namespace: &str) -> Api<DynamicObject> {
    if kind.namespaced {
        Api::namespaced_with(client.clone(), namespace, &kind.resource)
    } else {
        Api::all_with(client.clone(), &kind.resource)
    }
}

/// An object's namespace (empty for a cluster-scoped one) and name.
fn namespace_and_name(object: &Value) -> Result<(&str, &str)> {
    let metadata = object.get("metadata").ok_or(Error::Malformed("metadata"))?;
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .ok_or(Error::Malformed("metadata.name"))?;
    let namespace = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok((namespace, name))
}

/// The error of a failed server-side apply of `namespace`/`name`.
fn apply_failed<'a>(
    kind: &'a Kind,
    namespace: &'a str,
    name: &'a str,
) -> impl Fn(kube::Error) -> Error + 'a {
    move |source| Error::Request {
        verb: "apply",
        kind: kind.resource.kind.clone(),
        name: qualified(namespace, name),
        source: Box::new(source),
    }
}

/// Server-side applies a whole object (force: sluice owns what it generates).
pub async fn apply(
    client: &Client,
    kind: &Kind,
    object: &Value,
    field_manager: &str,
) -> Result<Value> {
    let (namespace, name) = namespace_and_name(object)?;
    let params = PatchParams::apply(field_manager).force();
    let applied = api(client, kind, namespace)
        .patch(name, &params, &Patch::Apply(object))
        .await
        .map_err(apply_failed(kind, namespace, name))?;
    serde_json::to_value(applied).map_err(|_| Error::Malformed("serializable object"))
}

/// [`apply`] for a writer that needs to know only that the object is stored and stays: the
/// object the server returns is not parsed (the applier writes one per event; parsing it,
/// managed fields and all, and turning it back into JSON cost more than the rest of the
/// write's own work) but for its deletion: an object being deleted is [`Error::Terminating`].
pub async fn apply_unread(
    client: &Client,
    kind: &Kind,
    object: &Value,
    field_manager: &str,
) -> Result<()> {
    let (namespace, name) = namespace_and_name(object)?;
    let failed = apply_failed(kind, namespace, name);
    let scope = kind.namespaced.then_some(namespace);
    let url = <DynamicObject as kube::Resource>::url_path(&kind.resource, scope);
    let params = PatchParams::apply(field_manager).force();
    let request = kube::core::Request::new(url)
        .patch(name, &params, &Patch::Apply(object))
        .map_err(|source| failed(kube::Error::BuildRequest(source)))?;
    let stored = client.request_text(request).await.map_err(failed)?;
    match deletion_finalizers(&stored) {
        None => Ok(()),
        Some(finalizers) => Err(Error::Terminating {
            kind: kind.resource.kind.clone(),
            name: qualified(namespace, name),
            finalizers,
        }),
    }
}

/// The finalizers of an object the server answered with, if it is being deleted (it carries a
/// `deletionTimestamp`). Only an answer that names the field anywhere is parsed, and then only
/// its metadata is kept.
fn deletion_finalizers(answer: &str) -> Option<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Answer {
        metadata: Metadata,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Metadata {
        deletion_timestamp: Option<String>,
        #[serde(default)]
        finalizers: Vec<String>,
    }
    if !answer.contains("\"deletionTimestamp\"") {
        return None;
    }
    let metadata = serde_json::from_str::<Answer>(answer).ok()?.metadata;
    metadata.deletion_timestamp.map(|_| metadata.finalizers)
}

/// Server-side applies only the `status` of an object.
pub async fn apply_status(
    client: &Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
    patch: &Value,
    field_manager: &str,
) -> Result<()> {
    let params = PatchParams::apply(field_manager).force();
    api(client, kind, namespace)
        .patch_status(name, &params, &Patch::Apply(patch))
        .await
        .map_err(|source| Error::Request {
            verb: "apply status of",
            kind: kind.resource.kind.clone(),
            name: qualified(namespace, name),
            source: Box::new(source),
        })?;
    Ok(())
}

/// Deletes an object; an object already gone counts as deleted.
pub async fn delete(client: &Client, kind: &Kind, namespace: &str, name: &str) -> Result<()> {
    match api(client, kind, namespace)
        .delete(name, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Request {
            verb: "delete",
            kind: kind.resource.kind.clone(),
            name: qualified(namespace, name),
            source: Box::new(source),
        }),
    }
}

/// Reads one object; `None` when it does not exist.
pub async fn get(
    client: &Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>> {
    match api(client, kind, namespace).get_opt(name).await {
        Ok(found) => Ok(found.and_then(|o| serde_json::to_value(o).ok())),
        Err(source) => Err(Error::Request {
            verb: "get",
            kind: kind.resource.kind.clone(),
            name: qualified(namespace, name),
            source: Box::new(source),
        }),
    }
}

/// Lists objects of a kind in all namespaces (or cluster-wide) carrying all the given labels.
pub async fn list_labelled(
    client: &Client,
    kind: &Kind,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Value>> {
    list_labelled_in(client, kind, None, labels).await
}

/// Lists objects of a kind carrying all the given labels, in `namespace` when one is given and
/// the kind is namespaced (a narrower permission suffices), else in all namespaces.
pub async fn list_labelled_in(
    client: &Client,
    kind: &Kind,
    namespace: Option<&str>,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<Value>> {
    let (api, selector) = labelled(client, kind, namespace, labels);
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::Request {
            verb: "list",
            kind: kind.resource.kind.clone(),
            name: selector.clone(),
            source: Box::new(source),
        })?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect())
}

/// The API of `kind` (in `namespace` for a namespaced kind) and the label selector of `labels`.
fn labelled(
    client: &Client,
    kind: &Kind,
    namespace: Option<&str>,
    labels: &BTreeMap<String, String>,
) -> (Api<DynamicObject>, String) {
    (api_in(client, kind, namespace), selector_of(labels))
}

/// The label selector of objects carrying all of `labels`.
pub(crate) fn selector_of(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The API of `kind` in `namespace` (a namespaced kind), else everywhere.
fn api_in(client: &Client, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) if kind.namespaced => {
            Api::namespaced_with(client.clone(), namespace, &kind.resource)
        }
        _ => Api::all_with(client.clone(), &kind.resource),
    }
}

/// Objects a metadata page holds ([`visit_labelled_metadata_in`]): as kube-rs's watcher pages.
pub const METADATA_PAGE: u32 = 500;

/// What [`visit_labelled_metadata_in`] hands its visitor.
#[derive(Debug)]
pub enum Listed {
    /// One object's metadata.
    Object(Value),
    /// The listing starts again: forget what it handed so far.
    Restarted,
}

/// Hands `visit`, a page of [`METADATA_PAGE`] at a time, the metadata of every object of `kind`
/// carrying `labels` (in `namespace` for a namespaced kind): each as `PartialObjectMetadata`
/// (`apiVersion`, `kind`, `metadata`), what a caller needs of objects it does not hold whole.
/// The pages are one snapshot (each continues the first's). A continue token the server let
/// expire (410) starts the listing again ([`Listed::Restarted`]).
pub async fn visit_labelled_metadata_in(
    client: &Client,
    kind: &Kind,
    namespace: Option<&str>,
    labels: &BTreeMap<String, String>,
    visit: impl FnMut(Listed),
) -> Result<()> {
    visit_selected_metadata_in(client, kind, namespace, &selector_of(labels), visit).await
}

/// [`visit_labelled_metadata_in`] of the objects a label `selector` selects (`key` for those
/// that carry a label, whatever its value).
pub async fn visit_selected_metadata_in(
    client: &Client,
    kind: &Kind,
    namespace: Option<&str>,
    selector: &str,
    mut visit: impl FnMut(Listed),
) -> Result<()> {
    const RESTARTS: usize = 3;
    let api = api_in(client, kind, namespace);
    let selector = selector.to_string();
    let mut restarts = 0;
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().labels(&selector).limit(METADATA_PAGE);
        if let Some(token) = &token {
            params = params.continue_token(token);
        }
        let page = match api.list_metadata(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(status))
                if status.code == 410 && token.is_some() && restarts < RESTARTS =>
            {
                restarts += 1;
                token = None;
                visit(Listed::Restarted);
                continue;
            }
            Err(source) => {
                return Err(Error::Request {
                    verb: "list",
                    kind: kind.resource.kind.clone(),
                    name: selector.clone(),
                    source: Box::new(source),
                })
            }
        };
        for item in page.items {
            if let Ok(mut value) = serde_json::to_value(&item) {
                // An item names itself `PartialObjectMetadata` (or nothing): it is of the
                // listed kind.
                if let Some(object) = value.as_object_mut() {
                    object.insert("kind".into(), Value::from(kind.resource.kind.clone()));
                    object.insert(
                        "apiVersion".into(),
                        Value::from(kind.resource.api_version.clone()),
                    );
                }
                visit(Listed::Object(value));
            }
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(());
        }
    }
}

fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Adds (`present`) or removes a finalizer, with optimistic concurrency: the patch carries the
/// resourceVersion it was computed from, so a concurrent writer makes it fail with a conflict
/// and the caller retries. Returns whether the object exists; a missing object is not an error.
pub async fn set_finalizer(
    client: &Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
    finalizer: &str,
    present: bool,
) -> Result<bool> {
    let Some(current) = get(client, kind, namespace, name).await? else {
        return Ok(false);
    };
    let mut finalizers: Vec<String> = current
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if finalizers.iter().any(|f| f == finalizer) == present {
        return Ok(true);
    }
    if present {
        finalizers.push(finalizer.to_string());
    } else {
        finalizers.retain(|f| f != finalizer);
    }
    let resource_version = current
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers,
                                                "resourceVersion": resource_version}});
    match api(client, kind, namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(Error::Request {
            verb: if present {
                "add finalizer to"
            } else {
                "remove finalizer from"
            },
            kind: kind.resource.kind.clone(),
            name: qualified(namespace, name),
            source: Box::new(source),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::deletion_finalizers;

    #[test]
    fn only_an_answer_being_deleted_names_its_finalizers() {
        let live = r#"{"kind":"ClusterProfile","metadata":{"name":"p","finalizers":["a"]}}"#;
        assert_eq!(deletion_finalizers(live), None);
        let deleting = r#"{"kind":"ClusterProfile","metadata":{"name":"p",
            "deletionTimestamp":"2026-11-26T20:00:00Z","finalizers":["a","b"]}}"#;
        assert_eq!(
            deletion_finalizers(deleting),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        // A key of its data by that name is not the object's deletion.
        let mentions = r#"{"kind":"ConfigMap","metadata":{"name":"c"},
            "data":{"deletionTimestamp":"2026-11-26T20:00:00Z"}}"#;
        assert_eq!(deletion_finalizers(mentions), None);
    }
}
