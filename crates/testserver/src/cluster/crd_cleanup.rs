//! Deleting a CustomResourceDefinition, as apiextensions-apiserver does: the DELETE marks the
//! CRD (its `deletionTimestamp`, the `customresourcecleanup.apiextensions.k8s.io` finalizer
//! and a `Terminating` condition) and answers with it; the CRD finalizer then deletes every
//! object of its kind as any delete would, so an object's own finalizers hold it, and removes
//! its finalizer once none is left. Until then the CRD stays, its kind is served (a finalizer
//! can still be removed) and nothing new of it can be created.

use serde_json::{json, Value};

use crate::error::ApiError;
use crate::object::{finalizers, is_deleting, now, set_meta};
use crate::resources::{GroupResource, ResourceInfo};

use super::gc::mark_deleting;

/// The finalizer a CRD carries from its deletion until its objects are gone.
pub const CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

pub(super) fn crds_gr() -> GroupResource {
    (
        "apiextensions.k8s.io".to_string(),
        "customresourcedefinitions".to_string(),
    )
}

/// Sets the CRD's `Terminating` condition (its transition time when its status changes).
fn set_terminating(crd: &mut Value, status: &str, reason: &str, message: &str) {
    let mut conditions: Vec<Value> = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let previous = conditions
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some("Terminating"));
    let since = previous
        .map(|i| &conditions[i])
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now()));
    let condition = json!({"type": "Terminating", "status": status, "lastTransitionTime": since,
        "reason": reason, "message": message});
    match previous {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    crd["status"]["conditions"] = json!(conditions);
}

/// The refusal of a create of a kind whose CRD is terminating.
pub(super) fn terminating_create(info: &ResourceInfo) -> ApiError {
    let mut error = ApiError::new(
        405,
        "MethodNotAllowed",
        "create not allowed while custom resource definition is terminating",
    );
    error.details = Some(json!({"group": info.group, "kind": info.plural}));
    error
}

impl super::State {
    /// Whether the CRD that defines `info` is being deleted.
    pub(super) fn crd_terminating(&self, info: &ResourceInfo) -> bool {
        info.crd
            .as_deref()
            .and_then(|name| self.get(&crds_gr(), "", name))
            .is_some_and(is_deleting)
    }

    /// Marks CRD `name` for deletion and runs its finalizer; returns it as marked, as the
    /// DELETE answers.
    pub(super) fn delete_crd(&mut self, name: &str) -> Value {
        let gr = crds_gr();
        let Some(mut crd) = self.get(&gr, "", name).cloned() else {
            return Value::Null;
        };
        let mut left = finalizers(&crd);
        if !is_deleting(&crd) || !left.iter().any(|f| f == CLEANUP) {
            if !is_deleting(&crd) {
                mark_deleting(&mut crd, &now(), 0);
            }
            if !left.iter().any(|f| f == CLEANUP) {
                left.push(CLEANUP.to_string());
            }
            set_meta(&mut crd, "finalizers", json!(left));
            set_terminating(
                &mut crd,
                "True",
                "InstanceDeletionPending",
                "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            );
            self.store_as_controller(&gr, &(String::new(), name.to_string()), crd);
        }
        let marked = self.get(&gr, "", name).cloned().unwrap_or(Value::Null);
        self.finalize_crd(name);
        marked
    }

    /// The CRD finalizer's pass over CRD `name`, once it is being deleted: deletes what of its
    /// kind is not being deleted yet, and removes its finalizer once nothing of it is left.
    pub(super) fn finalize_crd(&mut self, name: &str) {
        let gr = crds_gr();
        let key = (String::new(), name.to_string());
        let Some(crd) = self.get(&gr, "", name) else {
            return;
        };
        if !is_deleting(crd) || !finalizers(crd).iter().any(|f| f == CLEANUP) {
            return;
        }
        let kind = self
            .registry
            .all()
            .iter()
            .find(|r| r.crd.as_deref() == Some(name))
            .map(ResourceInfo::gr);
        if let Some(kind) = &kind {
            let live: Vec<_> = self
                .list(kind, None, None)
                .filter(|(_, o)| !is_deleting(o))
                .map(|(k, _)| k.clone())
                .collect();
            for (namespace, object) in live {
                self.delete_object(kind, &namespace, &object, None, None);
            }
        }
        // The last object's removal may have finished the CRD meanwhile.
        let Some(mut crd) = self.get(&gr, "", name).cloned() else {
            return;
        };
        if !finalizers(&crd).iter().any(|f| f == CLEANUP) {
            return;
        }
        let empty = kind
            .as_ref()
            .is_none_or(|kind| self.list(kind, None, None).next().is_none());
        let before = crd.clone();
        if empty {
            set_terminating(
                &mut crd,
                "False",
                "InstanceDeletionCompleted",
                "removed all instances",
            );
        } else {
            set_terminating(
                &mut crd,
                "True",
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
            );
        }
        if crd != before {
            self.store_as_controller(&gr, &key, crd);
        }
        if empty {
            self.remove_finalizer(&gr, &key, CLEANUP);
        }
    }

    /// After an object of a CRD's kind is gone: the CRD, if it is being deleted, may go now.
    pub(super) fn crd_object_removed(&mut self, gr: &GroupResource) {
        if gr.0.is_empty() {
            return;
        }
        // A CRD is named `<plural>.<group>`.
        let name = format!("{}.{}", gr.1, gr.0);
        let waiting = self
            .get(&crds_gr(), "", &name)
            .is_some_and(|crd| is_deleting(crd) && finalizers(crd).iter().any(|f| f == CLEANUP));
        if waiting && self.list(gr, None, None).next().is_none() {
            self.finalize_crd(&name);
        }
    }
}
