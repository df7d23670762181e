//! The garbage collector, done at the delete itself: what `DeleteOptions` ask of it, which
//! objects depend on which (by `metadata.ownerReferences` uid), and what becomes of the
//! dependents when their owner goes:
//! - `Background` (the default): the owner goes at once, then every dependent none of whose
//!   other owners remains is deleted the same way; a dependent with an owner left only loses
//!   its reference to the one gone;
//! - `Foreground`: the owner is kept with the `foregroundDeletion` finalizer while its
//!   dependents are deleted in the foreground, and goes once none that blocks it
//!   (`blockOwnerDeletion: true`) is left;
//! - `Orphan`: the owner is kept with the `orphan` finalizer while its dependents lose their
//!   reference to it, then goes.
//!
//! An object created with owners of a known kind none of which exists is collected at once, as
//! the collector deletes dependents whose owners are gone.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::error::ApiError;
use crate::object::{finalizers, format_time, is_deleting, meta_str, now, remove_meta, set_meta};
use crate::resources::GroupResource;

use super::{ChangeKind, ObjectKey};

/// The finalizer that keeps an owner while its dependents are deleted.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer that keeps an owner while its dependents are orphaned.
pub const ORPHAN: &str = "orphan";

/// How a delete treats the dependents of what it deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// What a DELETE's body asks for: its preconditions, its propagation (`None` when it names
/// none, so the object's own finalizers decide) and its grace period (`None` when it names none,
/// so a Pod's own `terminationGracePeriodSeconds` decides).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeleteOptions {
    pub resource_version: Option<String>,
    pub uid: Option<String>,
    pub propagation: Option<Propagation>,
    pub grace_period: Option<i64>,
    pub dry_run: Vec<String>,
}

/// Reads a `DeleteOptions` body (empty means none) as apiserver validates it: a body that is not
/// a DeleteOptions object is a 400; an unknown propagation policy, or one set beside the
/// deprecated `orphanDependents`, is a 422.
pub fn delete_options(body: &[u8]) -> Result<DeleteOptions, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DeleteOptions::default());
    }
    let options: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("failed to decode DeleteOptions: {e}")))?;
    if !options.is_object() {
        return Err(ApiError::bad_request(format!(
            "failed to decode DeleteOptions: expected an object, got {options}"
        )));
    }
    let text = |pointer: &str| {
        options
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let orphan = options.get("orphanDependents").and_then(Value::as_bool);
    let mut errors = Vec::new();
    let propagation = match options.get("propagationPolicy") {
        None | Some(Value::Null) => orphan.map(|o| {
            if o {
                Propagation::Orphan
            } else {
                Propagation::Background
            }
        }),
        Some(policy) => {
            if orphan.is_some() {
                errors.push(crate::field_error::FieldError::forbidden(
                    "propagationPolicy",
                    "orphanDependents and deletionPropagation cannot be both set",
                ));
            }
            match policy.as_str() {
                Some("Background") => Some(Propagation::Background),
                Some("Foreground") => Some(Propagation::Foreground),
                Some("Orphan") => Some(Propagation::Orphan),
                _ => {
                    let supported = ["Foreground", "Background", "Orphan", "nil"];
                    errors.push(crate::field_error::FieldError::not_supported(
                        "propagationPolicy",
                        policy.clone(),
                        &supported.map(String::from),
                    ));
                    None
                }
            }
        }
    };
    let grace_period = match options.get("gracePeriodSeconds") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.is_i64() => n.as_i64(),
        Some(other) => {
            // encoding/json names a number that is no integer by its text.
            let what = match other {
                Value::Number(n) => format!("number {n}"),
                _ => crate::admission::go_json_type(other).to_string(),
            };
            return Err(ApiError::bad_request(format!(
                "failed to decode DeleteOptions: json: cannot unmarshal {what} into Go struct field DeleteOptions.gracePeriodSeconds of type int64"
            )));
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            &errors,
        ));
    }
    Ok(DeleteOptions {
        resource_version: text("/preconditions/resourceVersion"),
        uid: text("/preconditions/uid"),
        propagation,
        grace_period,
        dry_run: options
            .get("dryRun")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
    })
}

/// The propagation a delete uses: the one asked for, else what the object's finalizers say,
/// else `Background` (the default of every kind the test server serves).
pub fn propagation(asked: Option<Propagation>, finalizers: &[String]) -> Propagation {
    asked.unwrap_or_else(|| {
        if finalizers.iter().any(|f| f == ORPHAN) {
            Propagation::Orphan
        } else if finalizers.iter().any(|f| f == FOREGROUND) {
            Propagation::Foreground
        } else {
            Propagation::Background
        }
    })
}

/// What a DELETE answers with, given what the delete left of the object: the object while it
/// stays (held by finalizers, or a Pod in its grace period) and for the registries that return
/// what they deleted (kube-apiserver's `ReturnDeletedObject`: Pods, Services, ServiceAccounts;
/// Namespaces and CustomResourceDefinitions are always finalized first); otherwise a `Success`
/// Status naming it, its group and its resource (in `kind`, as kube-apiserver fills it).
pub fn delete_answer(group: &str, plural: &str, deleted: Value) -> Value {
    let returned = group.is_empty()
        && matches!(
            plural,
            "pods" | "services" | "serviceaccounts" | "namespaces"
        )
        || (group == "apiextensions.k8s.io" && plural == "customresourcedefinitions");
    if returned || !finalizers(&deleted).is_empty() {
        return deleted;
    }
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(meta_str(&deleted, "name")));
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(plural));
    details.insert("uid".into(), json!(meta_str(&deleted, "uid")));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
           "details": details})
}

/// One owner reference of an object.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub block: bool,
}

/// The owner references of an object.
pub fn owners(obj: &Value) -> Vec<OwnerRef> {
    let text = |r: &Value, key: &str| r.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| OwnerRef {
            api_version: text(r, "apiVersion"),
            kind: text(r, "kind"),
            name: text(r, "name"),
            uid: text(r, "uid"),
            block: r.get("blockOwnerDeletion") == Some(&json!(true)),
        })
        .collect()
}

/// Removes the references to `uid` from an object; whether there was one.
pub fn drop_owner(obj: &mut Value, uid: &str) -> bool {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let Some(list) = meta
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let before = list.len();
    list.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
    let dropped = list.len() != before;
    if list.is_empty() {
        meta.remove("ownerReferences");
    }
    dropped
}

/// Which stored objects name which owner uid: kept up to date as objects are stored and taken,
/// so that a delete finds its dependents without reading every object.
#[derive(Clone, Debug, Default)]
pub struct Dependents {
    by_owner: HashMap<String, BTreeSet<(GroupResource, ObjectKey)>>,
}

impl Dependents {
    /// Records what `obj`, stored under `key`, depends on, in place of what `old` did.
    pub fn replace(
        &mut self,
        gr: &GroupResource,
        key: &ObjectKey,
        old: Option<&Value>,
        obj: Option<&Value>,
    ) {
        let uids = |o: Option<&Value>| -> Vec<String> {
            o.map(owners)
                .unwrap_or_default()
                .into_iter()
                .map(|r| r.uid)
                .collect()
        };
        let (before, after) = (uids(old), uids(obj));
        if before == after {
            return;
        }
        for uid in before {
            if let Some(set) = self.by_owner.get_mut(&uid) {
                set.remove(&(gr.clone(), key.clone()));
                if set.is_empty() {
                    self.by_owner.remove(&uid);
                }
            }
        }
        for uid in after {
            self.by_owner
                .entry(uid)
                .or_default()
                .insert((gr.clone(), key.clone()));
        }
    }

    /// The objects that name `uid` as an owner.
    pub fn of(&self, uid: &str) -> Vec<(GroupResource, ObjectKey)> {
        self.by_owner
            .get(uid)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The grace period a Pod is deleted with, as kube-apiserver's Pod strategy and its delete path
/// decide it: the DeleteOptions' `gracePeriodSeconds` when given (a negative one counts as 1),
/// else the Pod's `terminationGracePeriodSeconds` (30 by default); none for a Pod bound to no
/// node or whose containers have ended (`Succeeded`, `Failed`).
pub fn pod_grace_period(pod: &Value, asked: Option<i64>) -> i64 {
    let unscheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let ended = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if unscheduled || ended {
        return 0;
    }
    match asked {
        Some(seconds) if seconds < 0 => 1,
        Some(seconds) => seconds,
        None => pod
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30),
    }
}

/// Marks `object` as being deleted from `at`, with `grace` seconds: its `deletionTimestamp` and
/// `deletionGracePeriodSeconds`, and, the first time, a `generation` one higher where it has one,
/// as kube-apiserver's delete path does (`rest.BeforeDelete`, `markAsDeleting`): its
/// controllers are told that it changed.
pub fn mark_deleting(object: &mut Value, at: &str, grace: i64) {
    if !is_deleting(object) {
        let generation = object
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if generation > 0 {
            set_meta(object, "generation", json!(generation + 1));
        }
    }
    set_meta(object, "deletionTimestamp", json!(at));
    set_meta(object, "deletionGracePeriodSeconds", json!(grace));
}

/// A Pod not yet being deleted.
fn is_live_pod(gr: &GroupResource, obj: &Value) -> bool {
    gr.0.is_empty() && gr.1 == "pods" && !is_deleting(obj)
}

impl super::State {
    /// Where the owner an owner reference names would be stored, when its kind is served.
    fn owner_location(
        &self,
        dependent_namespace: &str,
        owner: &OwnerRef,
    ) -> Option<(GroupResource, ObjectKey)> {
        let group = owner
            .api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("");
        let info = self
            .registry
            .all()
            .iter()
            .find(|r| r.group == group && r.kind == owner.kind)?;
        let namespace = if info.namespaced {
            dependent_namespace
        } else {
            ""
        };
        Some((info.gr(), (namespace.to_string(), owner.name.clone())))
    }

    /// Whether the owner a reference names exists (same name and uid); `None` when its kind is
    /// not served, which the collector cannot tell.
    fn owner_exists(&self, dependent_namespace: &str, owner: &OwnerRef) -> Option<bool> {
        let (gr, (namespace, name)) = self.owner_location(dependent_namespace, owner)?;
        Some(
            self.get(&gr, &namespace, &name)
                .is_some_and(|o| meta_str(o, "uid") == owner.uid),
        )
    }

    /// Deletes an object with the propagation asked for (or its finalizers' own): at once
    /// without finalizers, otherwise marked with a deletionTimestamp; the collector then deals
    /// with its dependents. A Pod bound to a node is first marked for the grace period asked for
    /// (`grace_period`, else its own; [`pod_grace_period`]). Returns the object as the delete
    /// left it.
    pub(super) fn delete_object(
        &mut self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        asked: Option<Propagation>,
        grace_period: Option<i64>,
    ) -> Value {
        let Some(mut obj) = self.get(gr, namespace, name).cloned() else {
            return Value::Null;
        };
        let key = (namespace.to_string(), name.to_string());
        let mut finalizers = finalizers(&obj);
        let policy = propagation(asked, &finalizers);
        let keeper = match policy {
            Propagation::Background => None,
            Propagation::Foreground => Some((FOREGROUND, ORPHAN)),
            Propagation::Orphan => Some((ORPHAN, FOREGROUND)),
        };
        if let Some((wanted, other)) = keeper {
            finalizers.retain(|f| f != other);
            if !finalizers.iter().any(|f| f == wanted) {
                finalizers.push(wanted.to_string());
            }
        }
        // What the DELETE answers when it is not the object as the delete leaves it.
        let mut answer = None;
        if is_live_pod(gr, &obj) {
            // A Pod is deleted gracefully: marked for its grace period, then deleted again with
            // none left, at once when its grace period is none, else by the kubelet, which here
            // stops its containers at once. Either way watchers see it marked before it goes.
            let grace = pod_grace_period(&obj, grace_period);
            let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(grace);
            mark_deleting(&mut obj, &format_time(at), grace);
            self.store_as_controller(gr, &key, obj.clone());
            answer = Some(obj.clone());
            set_meta(&mut obj, "deletionGracePeriodSeconds", json!(0));
        }
        if finalizers.is_empty() {
            let removed = self.remove(gr, &key, obj);
            return answer.unwrap_or(removed);
        }
        let mut marked = obj.clone();
        if !is_deleting(&marked) {
            mark_deleting(&mut marked, &now(), 0);
        }
        set_meta(&mut marked, "finalizers", json!(finalizers));
        if marked != obj {
            self.store_as_controller(gr, &key, marked.clone());
        }
        match policy {
            Propagation::Background => {}
            Propagation::Foreground => {
                let uid = meta_str(&marked, "uid").to_string();
                for (dgr, (dns, dname)) in self.dependents.of(&uid) {
                    self.collect(&dgr, &dns, &dname, &uid, true);
                }
                self.release_foreground(gr, &key);
            }
            Propagation::Orphan => {
                let uid = meta_str(&marked, "uid").to_string();
                for (dgr, dkey) in self.dependents.of(&uid) {
                    self.drop_reference(&dgr, &dkey, &uid);
                }
                self.remove_finalizer(gr, &key, ORPHAN);
            }
        }
        answer.unwrap_or(marked)
    }

    /// What the collector does to one dependent of an owner that is going (`uid`): it only
    /// loses its reference when another owner of it stays, and is deleted otherwise (in the
    /// foreground when the owner waits for it and it has dependents of its own).
    fn collect(
        &mut self,
        gr: &GroupResource,
        namespace: &str,
        name: &str,
        uid: &str,
        foreground: bool,
    ) {
        let Some(obj) = self.get(gr, namespace, name) else {
            return;
        };
        // Another owner that exists and is not going itself keeps the dependent.
        let staying = owners(obj).iter().filter(|r| r.uid != uid).any(|r| {
            match self.owner_location(namespace, r) {
                // An owner of a kind not served: the collector cannot tell it is gone.
                None => true,
                Some((ogr, (ons, oname))) => self
                    .get(&ogr, &ons, &oname)
                    .is_some_and(|o| meta_str(o, "uid") == r.uid && !is_deleting(o)),
            }
        });
        let key = (namespace.to_string(), name.to_string());
        if staying {
            self.drop_reference(gr, &key, uid);
            return;
        }
        let own_uid = meta_str(obj, "uid").to_string();
        let asked = (foreground && !self.dependents.of(&own_uid).is_empty())
            .then_some(Propagation::Foreground);
        self.delete_object(gr, namespace, name, asked, None);
    }

    /// Removes an object's references to `uid`, as the collector orphans a dependent.
    fn drop_reference(&mut self, gr: &GroupResource, key: &ObjectKey, uid: &str) {
        let Some(mut obj) = self.get(gr, &key.0, &key.1).cloned() else {
            return;
        };
        if drop_owner(&mut obj, uid) {
            self.store_as_controller(gr, key, obj);
        }
    }

    /// An owner deleted in the foreground goes once no dependent that blocks it is left.
    fn release_foreground(&mut self, gr: &GroupResource, key: &ObjectKey) {
        let Some(owner) = self.get(gr, &key.0, &key.1) else {
            return;
        };
        if !is_deleting(owner) || !finalizers(owner).iter().any(|f| f == FOREGROUND) {
            return;
        }
        let uid = meta_str(owner, "uid").to_string();
        let blocked = self.dependents.of(&uid).iter().any(|(dgr, (dns, dname))| {
            self.get(dgr, dns, dname)
                .is_some_and(|d| owners(d).iter().any(|r| r.uid == uid && r.block))
        });
        if !blocked {
            self.remove_finalizer(gr, key, FOREGROUND);
        }
    }

    /// Removes one finalizer; the object goes when it was the last of a deleted object.
    pub(super) fn remove_finalizer(
        &mut self,
        gr: &GroupResource,
        key: &ObjectKey,
        finalizer: &str,
    ) {
        let Some(mut obj) = self.get(gr, &key.0, &key.1).cloned() else {
            return;
        };
        let mut left = finalizers(&obj);
        left.retain(|f| f != finalizer);
        if left.is_empty() {
            remove_meta(&mut obj, "finalizers");
        } else {
            set_meta(&mut obj, "finalizers", json!(left));
        }
        if left.is_empty() && is_deleting(&obj) {
            self.remove(gr, key, obj);
        } else {
            self.store_as_controller(gr, key, obj);
        }
    }

    /// Removes an object for good: its last version is the deleted one, and the follow-ups of
    /// its removal run (`after_removal`). Returns what was deleted.
    fn remove(&mut self, gr: &GroupResource, key: &ObjectKey, mut obj: Value) -> Value {
        self.take(gr, key);
        let rv = self.next_rv();
        set_meta(&mut obj, "resourceVersion", json!(rv.to_string()));
        self.emit(gr, ChangeKind::Deleted, Arc::new(obj.clone()), None);
        self.after_removal(gr, &obj);
        obj
    }

    /// Stores what a controller of the control plane wrote (valid by construction) as a new
    /// version of the object.
    pub(super) fn store_as_controller(
        &mut self,
        gr: &GroupResource,
        key: &ObjectKey,
        mut obj: Value,
    ) {
        let rv = self.next_rv();
        set_meta(&mut obj, "resourceVersion", json!(rv.to_string()));
        let previous = self.get_arc(gr, &key.0, &key.1);
        let shared = self.put(gr, key.clone(), obj);
        self.emit(gr, ChangeKind::Modified, shared, previous);
    }

    /// The collector's part once an object is gone: its dependents are collected, and an owner
    /// waiting in the foreground for it may go.
    pub(super) fn collect_dependents_of(&mut self, removed: &Value) {
        let uid = meta_str(removed, "uid").to_string();
        if !uid.is_empty() {
            for (gr, (namespace, name)) in self.dependents.of(&uid) {
                self.collect(&gr, &namespace, &name, &uid, false);
            }
        }
        let namespace = meta_str(removed, "namespace").to_string();
        for owner in owners(removed) {
            if let Some((gr, key)) = self.owner_location(&namespace, &owner) {
                let waiting = self
                    .get(&gr, &key.0, &key.1)
                    .is_some_and(|o| meta_str(o, "uid") == owner.uid);
                if waiting {
                    self.release_foreground(&gr, &key);
                }
            }
        }
    }

    /// An object written with owners none of which exists (and all of served kinds) is
    /// collected, as the collector deletes dependents whose owners are gone.
    pub(super) fn collect_if_ownerless(&mut self, gr: &GroupResource, namespace: &str, name: &str) {
        let Some(obj) = self.get(gr, namespace, name) else {
            return;
        };
        let refs = owners(obj);
        if refs.is_empty() || is_deleting(obj) {
            return;
        }
        let gone = refs
            .iter()
            .all(|r| self.owner_exists(namespace, r) == Some(false));
        if gone {
            self.delete_object(gr, namespace, name, None, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_grace_period_is_the_one_asked_for_else_its_own_and_none_once_it_has_ended() {
        let pod = |grace: Option<i64>, phase: &str| {
            let mut pod = json!({"spec": {"nodeName": "n"}, "status": {"phase": phase}});
            if let Some(grace) = grace {
                pod["spec"]["terminationGracePeriodSeconds"] = json!(grace);
            }
            pod
        };
        assert_eq!(pod_grace_period(&pod(None, "Running"), None), 30);
        assert_eq!(pod_grace_period(&pod(Some(5), "Running"), None), 5);
        assert_eq!(pod_grace_period(&pod(Some(5), "Running"), Some(12)), 12);
        assert_eq!(pod_grace_period(&pod(Some(5), "Running"), Some(0)), 0);
        // A negative grace period counts as one second.
        assert_eq!(pod_grace_period(&pod(None, "Running"), Some(-3)), 1);
        assert_eq!(pod_grace_period(&pod(None, "Pending"), Some(7)), 7);
        // A Pod bound to no node goes at once.
        let unbound =
            json!({"spec": {"terminationGracePeriodSeconds": 5}, "status": {"phase": "Pending"}});
        assert_eq!(pod_grace_period(&unbound, None), 0);
        assert_eq!(pod_grace_period(&unbound, Some(9)), 0);
        for ended in ["Succeeded", "Failed"] {
            assert_eq!(pod_grace_period(&pod(Some(5), ended), None), 0);
            assert_eq!(pod_grace_period(&pod(None, ended), Some(9)), 0);
        }
    }

    #[test]
    fn the_first_mark_of_a_deletion_raises_the_generation_where_there_is_one() {
        let mut tracked = json!({"metadata": {"name": "web", "generation": 3}});
        mark_deleting(&mut tracked, "2026-11-29T01:00:00Z", 30);
        assert_eq!(tracked["metadata"]["generation"], 4);
        assert_eq!(tracked["metadata"]["deletionGracePeriodSeconds"], 30);
        // Marked again (a shorter grace period, the kubelet's last delete): no further bump.
        mark_deleting(&mut tracked, "2026-11-29T01:00:00Z", 0);
        assert_eq!(tracked["metadata"]["generation"], 4);
        assert_eq!(tracked["metadata"]["deletionGracePeriodSeconds"], 0);
        let mut untracked = json!({"metadata": {"name": "cm"}});
        mark_deleting(&mut untracked, "2026-11-29T01:00:00Z", 0);
        assert_eq!(untracked["metadata"].get("generation"), None);
        assert_eq!(
            untracked["metadata"]["deletionTimestamp"],
            "2026-11-29T01:00:00Z"
        );
    }

    #[test]
    fn delete_options_are_read_and_validated_as_apiserver_does() {
        assert_eq!(
            delete_options(b"").expect("empty"),
            DeleteOptions::default()
        );
        let options = delete_options(
            br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground",
                 "preconditions":{"uid":"u","resourceVersion":"7"},"dryRun":["All"]}"#,
        )
        .expect("valid");
        assert_eq!(options.propagation, Some(Propagation::Foreground));
        assert_eq!(options.uid.as_deref(), Some("u"));
        assert_eq!(options.resource_version.as_deref(), Some("7"));
        assert_eq!(options.dry_run, vec!["All".to_string()]);
        let orphan = delete_options(br#"{"orphanDependents":true}"#).expect("valid");
        assert_eq!(orphan.propagation, Some(Propagation::Orphan));
        assert_eq!(orphan.grace_period, None);
        let graceful = delete_options(br#"{"gracePeriodSeconds":0}"#).expect("valid");
        assert_eq!(graceful.grace_period, Some(0));
        let wrong = delete_options(br#"{"gracePeriodSeconds":"5"}"#).expect_err("a string");
        assert_eq!(wrong.code, 400);
        assert!(
            wrong.message.contains(
                "cannot unmarshal string into Go struct field DeleteOptions.gracePeriodSeconds of type int64"
            ),
            "{}",
            wrong.message
        );
        let fraction = delete_options(br#"{"gracePeriodSeconds":1.5}"#).expect_err("a fraction");
        assert_eq!(fraction.code, 400);
        assert!(
            fraction
                .message
                .contains("cannot unmarshal number 1.5 into Go struct field"),
            "{}",
            fraction.message
        );

        let bad = delete_options(b"{not json").expect_err("malformed");
        assert_eq!(bad.code, 400);
        let unknown = delete_options(br#"{"propagationPolicy":"Later"}"#).expect_err("unknown");
        assert_eq!(unknown.code, 422);
        assert!(
            unknown
                .message
                .contains(r#"propagationPolicy: Unsupported value: "Later""#),
            "{}",
            unknown.message
        );
        let both = delete_options(br#"{"propagationPolicy":"Orphan","orphanDependents":false}"#)
            .expect_err("both");
        assert_eq!(both.code, 422);
    }

    #[test]
    fn a_delete_answers_with_a_status_unless_the_object_stays_or_its_registry_returns_it() {
        let gone = json!({"metadata": {"name": "x", "uid": "u"}});
        assert_eq!(
            delete_answer("", "configmaps", gone.clone()),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                   "details": {"name": "x", "kind": "configmaps", "uid": "u"}})
        );
        let status = delete_answer("apps", "deployments", gone.clone());
        assert_eq!(status["details"]["group"], "apps");
        assert_eq!(delete_answer("", "services", gone.clone()), gone);
        let held = json!({"metadata": {"name": "x", "finalizers": ["f"]}});
        assert_eq!(
            delete_answer("lib.projectsveltos.io", "eventtriggers", held.clone()),
            held
        );
    }

    #[test]
    fn the_objects_finalizers_decide_when_the_delete_names_no_policy() {
        let none: Vec<String> = vec![];
        assert_eq!(propagation(None, &none), Propagation::Background);
        assert_eq!(propagation(None, &[ORPHAN.into()]), Propagation::Orphan);
        assert_eq!(
            propagation(None, &[FOREGROUND.into()]),
            Propagation::Foreground
        );
        assert_eq!(
            propagation(Some(Propagation::Background), &[ORPHAN.into()]),
            Propagation::Background
        );
    }

    #[test]
    fn dependents_follow_the_owner_references_as_objects_change() {
        let gr: GroupResource = ("apps".into(), "replicasets".into());
        let key: ObjectKey = ("ns".into(), "web-1".into());
        let owned = |uids: &[&str]| {
            let refs: Vec<Value> = uids
                .iter()
                .map(|u| json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": u}))
                .collect();
            json!({"metadata": {"name": "web-1", "ownerReferences": refs}})
        };
        let mut index = Dependents::default();
        let first = owned(&["a"]);
        index.replace(&gr, &key, None, Some(&first));
        assert_eq!(index.of("a"), vec![(gr.clone(), key.clone())]);
        let second = owned(&["b", "c"]);
        index.replace(&gr, &key, Some(&first), Some(&second));
        assert!(index.of("a").is_empty());
        assert_eq!(index.of("c").len(), 1);
        index.replace(&gr, &key, Some(&second), None);
        assert!(index.of("b").is_empty() && index.of("c").is_empty());

        let mut obj = owned(&["b", "c"]);
        assert!(drop_owner(&mut obj, "b"));
        assert!(!drop_owner(&mut obj, "b"));
        assert_eq!(owners(&obj).len(), 1);
        assert!(drop_owner(&mut obj, "c"));
        assert!(obj.pointer("/metadata/ownerReferences").is_none());
    }
}
