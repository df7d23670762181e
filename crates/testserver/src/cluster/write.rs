//! Writes to one cluster's state: create, update (main resource or `/status`), delete with
//! finalizers, namespace cascade and CRD (un)installation. Each write bumps the cluster's
//! resourceVersion once per stored change and records the change for watches.

use std::sync::Arc;

use serde_json::{json, Value};

use super::controllers;
use super::defaults::apply_defaults;
use super::validate::check_object;
use super::{ChangeKind, State};
use crate::error::ApiError;
use crate::field_error::FieldError;
use crate::fields;
use crate::object::{finalizers, is_deleting, meta_str, now, remove_meta, set_meta, spec_part};
use crate::resources::{from_crd, GroupResource, ResourceInfo};

/// Who is writing, for `managedFields`.
#[derive(Clone, Debug)]
pub enum Owner {
    /// A create/update/patch by this manager: it takes ownership of the fields it changes.
    Update(String),
    /// A server-side apply: the caller already computed `managedFields`.
    Applied,
}

/// Which part of the object a write targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

fn namespaces_gr() -> GroupResource {
    (String::new(), "namespaces".to_string())
}

/// The storage refuses to create an object that names a resourceVersion it can read (etcd3's
/// `ErrResourceVersionSetOnCreate`, a reason-less 500), and ignores one it cannot read ("-1").
/// A dry run never reaches the storage's create, so it is not refused there.
pub(crate) fn no_resource_version_on_create(resource_version: &str) -> Result<(), ApiError> {
    if resource_version.parse::<u64>().is_ok_and(|rv| rv != 0) {
        return Err(ApiError::new(
            500,
            "",
            "resourceVersion should not be set on objects to be created",
        ));
    }
    Ok(())
}

pub(crate) fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}

/// Whether the kind's registry strategy sets `metadata.generation` (to 1 on create, bumped when
/// the desired state changes): custom resources, CRDs, and the built-ins whose `PrepareForCreate`
/// does so (the apps workloads, Job, CronJob, Ingress, NetworkPolicy, EndpointSlice). ConfigMap, Secret,
/// Namespace, Service, Pod, Endpoints, ServiceAccount, Event, Lease and the RBAC kinds carry no
/// generation.
pub fn tracks_generation(info: &ResourceInfo) -> bool {
    info.crd.is_some()
        || is_crd(info)
        || matches!(
            (info.group.as_str(), info.kind.as_str()),
            (
                "apps",
                "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet"
            ) | ("batch", "Job" | "CronJob")
                | ("networking.k8s.io", "Ingress" | "NetworkPolicy")
                | ("discovery.k8s.io", "EndpointSlice")
        )
}

/// Drops what Go's `omitempty` leaves out when a typed object is encoded: empty
/// `metadata.labels`, `annotations`, `finalizers`, `ownerReferences` and `managedFields` (every
/// kind: custom resources' metadata is round-tripped through the typed `ObjectMeta` too), and the
/// empty `data`/`binaryData` maps of ConfigMaps and Secrets. Other empty maps of custom resources
/// stay as written.
pub fn drop_empty_omitted(info: &ResourceInfo, obj: &mut Value) {
    let empty = |v: &Value| {
        v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
    };
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            if meta.get(field).is_some_and(empty) {
                meta.remove(field);
            }
        }
    }
    if info.crd.is_none()
        && info.group.is_empty()
        && matches!(info.kind.as_str(), "ConfigMap" | "Secret")
    {
        if let Some(m) = obj.as_object_mut() {
            for field in ["data", "binaryData", "stringData"] {
                if m.get(field).is_some_and(empty) {
                    m.remove(field);
                }
            }
        }
    }
}

/// The namespace strategy's create step: every namespace carries the `kubernetes` finalizer in
/// `spec.finalizers` and starts `Active`.
fn prepare_namespace(obj: &mut Value) {
    let listed = obj
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v == "kubernetes"));
    if !listed {
        if !obj.get("spec").is_some_and(Value::is_object) {
            obj["spec"] = json!({});
        }
        match obj["spec"]
            .get_mut("finalizers")
            .and_then(Value::as_array_mut)
        {
            Some(list) => list.push(json!("kubernetes")),
            None => obj["spec"]["finalizers"] = json!(["kubernetes"]),
        }
    }
    obj["status"] = json!({"phase": "Active"});
    controllers::label_namespace(obj);
}

fn is_namespace(info: &ResourceInfo) -> bool {
    info.crd.is_none() && info.group.is_empty() && info.kind == "Namespace"
}

impl State {
    /// Stores a new object. `namespace` comes from the URL ("" for cluster-scoped kinds). The
    /// workload controllers then act on what changed (`rollout`).
    pub fn create(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        obj: Value,
        owner: &Owner,
    ) -> Result<Value, ApiError> {
        let created = self.create_object(info, namespace, obj, owner);
        self.settle();
        created
    }

    fn create_object(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        mut obj: Value,
        owner: &Owner,
    ) -> Result<Value, ApiError> {
        let body_ns = meta_str(&obj, "namespace").to_string();
        if info.namespaced {
            if !body_ns.is_empty() && body_ns != namespace {
                return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
            }
            set_meta(&mut obj, "namespace", json!(namespace));
        } else {
            remove_meta(&mut obj, "namespace");
        }
        if meta_str(&obj, "name").is_empty() && !meta_str(&obj, "generateName").is_empty() {
            let suffix: String = uuid::Uuid::new_v4()
                .simple()
                .to_string()
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(5)
                .collect();
            // apiserver truncates the prefix so the generated name fits a DNS label.
            let prefix: String = meta_str(&obj, "generateName").chars().take(58).collect();
            let name = format!("{prefix}{suffix}");
            set_meta(&mut obj, "name", json!(name));
        }
        let name = meta_str(&obj, "name").to_string();
        if self.crd_terminating(info) {
            return Err(super::crd_cleanup::terminating_create(info));
        }
        if info.namespaced {
            match self.get(&namespaces_gr(), "", namespace) {
                None => {
                    return Err(ApiError::new(
                        404,
                        "NotFound",
                        format!("namespaces \"{namespace}\" not found"),
                    ));
                }
                Some(ns) if is_deleting(ns) => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!("{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated", info.qualified()),
                    ));
                }
                Some(_) => {}
            }
        }
        if info.status {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        // What the strategy sets is owned by no manager: ownership is recorded on the object as sent.
        let incoming = obj.clone();
        let uid = uuid::Uuid::new_v4().to_string();
        if is_namespace(info) {
            prepare_namespace(&mut obj);
        }
        if info.crd.is_none() && info.group == "batch" && info.kind == "Job" {
            controllers::select_job_pods(&mut obj, &uid);
        }
        apply_defaults(info, &mut obj);
        if info.crd.is_none() && info.group.is_empty() && info.kind == "Pod" {
            let suffix: String = uuid::Uuid::new_v4()
                .simple()
                .to_string()
                .chars()
                .take(5)
                .collect();
            let accounts = (String::new(), "serviceaccounts".to_string());
            controllers::admit_pod(
                &mut obj,
                namespace,
                |sa| self.get(&accounts, namespace, sa).cloned(),
                &suffix,
            )
            .map_err(|r| ApiError::new(403, "Forbidden", r.message))?;
        }
        drop_empty_omitted(info, &mut obj);
        // Validation sees the object as it would be stored, after status is reset and defaults are set.
        check_object(info, &obj, None)?;
        if !self.is_dry_run() {
            no_resource_version_on_create(meta_str(&obj, "resourceVersion"))?;
        }
        let gr = info.gr();
        if self.get(&gr, namespace, &name).is_some() {
            return Err(ApiError::already_exists(info, &name));
        }
        if is_crd(info) {
            let res = from_crd(&obj).map_err(|e| ApiError::invalid(info, &name, "spec", e))?;
            obj["status"] = crd_status(&obj);
            self.registry.install(res);
        }
        set_meta(&mut obj, "uid", json!(uid));
        set_meta(&mut obj, "creationTimestamp", json!(now()));
        if tracks_generation(info) {
            set_meta(&mut obj, "generation", json!(1));
        } else {
            remove_meta(&mut obj, "generation");
        }
        remove_meta(&mut obj, "deletionTimestamp");
        if let Owner::Update(manager) = owner {
            let api_version = obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let mut sent = if is_namespace(info) {
                let mut sent = obj.clone();
                for field in ["spec", "status"] {
                    match incoming.get(field) {
                        Some(v) => sent[field] = v.clone(),
                        None => {
                            sent.as_object_mut().map(|m| m.remove(field));
                        }
                    }
                }
                match incoming.pointer("/metadata/labels") {
                    Some(labels) => set_meta(&mut sent, "labels", labels.clone()),
                    None => {
                        remove_meta(&mut sent, "labels");
                    }
                }
                sent
            } else {
                obj.clone()
            };
            fields::record_update(
                None,
                &mut sent,
                manager,
                &api_version,
                fields::schema_of(info, &api_version),
                info.status,
                Subresource::Main,
            );
            match sent.pointer("/metadata/managedFields") {
                Some(mf) => set_meta(&mut obj, "managedFields", mf.clone()),
                None => {
                    remove_meta(&mut obj, "managedFields");
                }
            }
        }
        if super::service_ips::is_service(&gr) {
            self.service_ips
                .allocate(&mut obj, None)
                .and_then(|()| self.node_ports.allocate(&mut obj, None))
                .map_err(|e| ApiError::invalid_fields("", &info.kind, &name, &[e]))?;
        }
        check_storage_size(&obj)?;
        let rv = self.next_rv();
        set_meta(&mut obj, "resourceVersion", json!(rv.to_string()));
        let shared = self.put(&gr, (namespace.to_string(), name.clone()), obj.clone());
        self.emit(&gr, ChangeKind::Added, shared, None);
        self.collect_if_ownerless(&gr, namespace, &name);
        if is_namespace(info) {
            let objects = controllers::namespace_objects(&name, &self.plane);
            self.create_as_controller(&name, objects);
        }
        Ok(obj)
    }

    /// Registers the cluster's Node and its status, as a kubelet does.
    pub(crate) fn register_node(&mut self, cluster: &str) {
        let Some(info) = self.registry.lookup("", "v1", "nodes").cloned() else {
            return;
        };
        let (node, status) = controllers::node(cluster, &self.plane);
        let name = meta_str(&node, "name").to_string();
        let owner = Owner::Update("kubelet".into());
        if self.create(&info, "", node, &owner).is_ok() {
            let _ = self.update(&info, "", &name, status, Subresource::Status, &owner);
        }
    }

    /// Creates what a controller of the control plane creates (valid by construction; one that
    /// exists already is left as it is).
    pub(crate) fn create_as_controller(&mut self, namespace: &str, objects: Vec<(&str, Value)>) {
        for (plural, obj) in objects {
            let group = obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .and_then(|v| v.rsplit_once('/'))
                .map_or("", |(group, _)| group);
            let Some(info) = self.registry.lookup(group, "v1", plural).cloned() else {
                continue;
            };
            let owner = Owner::Update("kube-controller-manager".into());
            let _ = self.create(&info, namespace, obj, &owner);
        }
    }

    /// Replaces an object (or only its status). A set `metadata.resourceVersion` must be current.
    /// The workload controllers then act on what changed (`rollout`).
    pub fn update(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        new: Value,
        sub: Subresource,
        owner: &Owner,
    ) -> Result<Value, ApiError> {
        let updated = self.update_object(info, namespace, name, new, sub, owner);
        self.settle();
        updated
    }

    fn update_object(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        new: Value,
        sub: Subresource,
        owner: &Owner,
    ) -> Result<Value, ApiError> {
        let gr = info.gr();
        // Shared with the store, not copied: it is only read.
        let current = self
            .get_arc(&gr, namespace, name)
            .ok_or_else(|| ApiError::not_found(info, name))?;
        let current = current.as_ref();
        let rv_in = meta_str(&new, "resourceVersion");
        if !rv_in.is_empty() && rv_in != meta_str(current, "resourceVersion") {
            return Err(ApiError::conflict(info, name));
        }
        let body_uid = meta_str(&new, "uid");
        if !body_uid.is_empty() && body_uid != meta_str(current, "uid") {
            return Err(ApiError::invalid_fields(
                &info.group,
                &info.kind,
                name,
                &[FieldError::invalid(
                    "metadata.uid",
                    json!(body_uid),
                    "field is immutable",
                )],
            ));
        }
        let body_name = meta_str(&new, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let mut stored = match sub {
            Subresource::Main => {
                let mut s = new;
                if info.status || is_crd(info) || info.kind == "Namespace" {
                    match current.get("status") {
                        Some(st) => s["status"] = st.clone(),
                        None => {
                            s.as_object_mut().map(|m| m.remove("status"));
                        }
                    }
                }
                s
            }
            Subresource::Status => {
                let mut s = current.clone();
                match new.get("status") {
                    Some(st) => s["status"] = st.clone(),
                    None => {
                        s.as_object_mut().map(|m| m.remove("status"));
                    }
                }
                if let Some(mf) = new.pointer("/metadata/managedFields") {
                    set_meta(&mut s, "managedFields", mf.clone());
                }
                s
            }
        };
        set_meta(&mut stored, "name", json!(name));
        if info.namespaced {
            set_meta(&mut stored, "namespace", json!(namespace));
        }
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match current.pointer(&format!("/metadata/{field}")) {
                Some(v) => set_meta(&mut stored, field, v.clone()),
                None => {
                    remove_meta(&mut stored, field);
                }
            }
        }
        if sub == Subresource::Main {
            if is_namespace(info) {
                controllers::label_namespace(&mut stored);
                // The namespace strategy keeps spec.finalizers; only the finalize subresource changes them.
                match current.pointer("/spec/finalizers") {
                    Some(f) => {
                        if !stored.get("spec").is_some_and(Value::is_object) {
                            stored["spec"] = json!({});
                        }
                        stored["spec"]["finalizers"] = f.clone();
                    }
                    None => {
                        if let Some(spec) = stored.get_mut("spec").and_then(Value::as_object_mut) {
                            spec.remove("finalizers");
                        }
                    }
                }
            }
            apply_defaults(info, &mut stored);
            if super::service_ips::is_service(&gr) {
                self.service_ips
                    .allocate(&mut stored, Some(current))
                    .and_then(|()| self.node_ports.allocate(&mut stored, Some(current)))
                    .map_err(|e| ApiError::invalid_fields("", &info.kind, name, &[e]))?;
            }
        }
        drop_empty_omitted(info, &mut stored);
        check_object(info, &stored, Some(current))?;
        if let Owner::Update(manager) = owner {
            let api_version = stored
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            fields::record_update(
                Some(current),
                &mut stored,
                manager,
                &api_version,
                fields::schema_of(info, &api_version),
                info.status,
                sub,
            );
        }
        if equal_but_resource_version(&stored, current) {
            return Ok(current.clone());
        }
        if tracks_generation(info) && spec_part(&stored) != spec_part(current) {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            set_meta(&mut stored, "generation", json!(generation + 1));
        }
        check_storage_size(&stored)?;
        if is_crd(info) && sub == Subresource::Main {
            let res = from_crd(&stored).map_err(|e| ApiError::invalid(info, name, "spec", e))?;
            self.registry.install(res);
        }
        let rv = self.next_rv();
        set_meta(&mut stored, "resourceVersion", json!(rv.to_string()));
        let key = (namespace.to_string(), name.to_string());
        if is_deleting(&stored) && finalizers(&stored).is_empty() {
            self.take(&gr, &key);
            self.emit(&gr, ChangeKind::Deleted, Arc::new(stored.clone()), None);
            self.after_removal(&gr, &stored);
            return Ok(stored);
        }
        let previous = self.get_arc(&gr, namespace, name);
        let shared = self.put(&gr, key, stored.clone());
        self.emit(&gr, ChangeKind::Modified, shared, previous);
        self.collect_if_ownerless(&gr, namespace, name);
        Ok(stored)
    }

    /// Deletes an object as `options` ask (preconditions, propagation, grace period): at once
    /// without finalizers, otherwise it is marked with a deletionTimestamp.
    pub fn delete(
        &mut self,
        info: &ResourceInfo,
        namespace: &str,
        name: &str,
        options: &super::DeleteOptions,
    ) -> Result<Value, ApiError> {
        let gr = info.gr();
        let current = self
            .get(&gr, namespace, name)
            .ok_or_else(|| ApiError::not_found(info, name))?;
        let rv_mismatch = (options.resource_version.as_deref())
            .is_some_and(|rv| rv != meta_str(current, "resourceVersion"));
        let uid_mismatch =
            (options.uid.as_deref()).is_some_and(|uid| uid != meta_str(current, "uid"));
        if rv_mismatch || uid_mismatch {
            return Err(ApiError::conflict(info, name));
        }
        let deleted = if info.kind == "Namespace" && info.group.is_empty() {
            self.delete_namespace(name)
        } else if is_crd(info) {
            self.delete_crd(name)
        } else {
            self.delete_object(
                &gr,
                namespace,
                name,
                options.propagation,
                options.grace_period,
            )
        };
        self.settle();
        Ok(deleted)
    }

    /// Follow-ups once an object is gone: the garbage collector deals with its dependents; the
    /// last object of a terminating CRD's kind lets the CRD go, and a CRD gone takes its kind
    /// (and whatever of it is left, had its finalizer been removed by hand) with it; the last
    /// object of a terminating namespace lets the namespace go.
    pub(super) fn after_removal(&mut self, gr: &GroupResource, removed: &Value) {
        let namespace = meta_str(removed, "namespace").to_string();
        let namespace = namespace.as_str();
        let name = meta_str(removed, "name").to_string();
        let name = name.as_str();
        self.collect_dependents_of(removed);
        self.crd_object_removed(gr);
        if *gr == super::crd_cleanup::crds_gr() {
            if let Some(res) = self.registry.uninstall(name) {
                let rgr = res.gr();
                let keys: Vec<_> = self
                    .list(&rgr, None, None)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in keys {
                    if let Some(obj) = self.take(&rgr, &key) {
                        let mut obj = Arc::unwrap_or_clone(obj);
                        let rv = self.next_rv();
                        set_meta(&mut obj, "resourceVersion", json!(rv.to_string()));
                        self.emit(&rgr, ChangeKind::Deleted, Arc::new(obj), None);
                    }
                }
            }
        }
        if !namespace.is_empty() {
            self.restore_namespace_object(gr, namespace, name);
            self.finish_namespace(namespace);
        }
    }

    /// The ServiceAccount controller and the root CA publisher create their object again when it
    /// is deleted from a namespace that is not going away.
    fn restore_namespace_object(&mut self, gr: &GroupResource, namespace: &str, name: &str) {
        let live = self
            .get(&namespaces_gr(), "", namespace)
            .is_some_and(|ns| !is_deleting(ns));
        if !live || !gr.0.is_empty() {
            return;
        }
        let restored: Vec<_> = controllers::namespace_objects(namespace, &self.plane)
            .into_iter()
            .filter(|(plural, obj)| *plural == gr.1 && meta_str(obj, "name") == name)
            .collect();
        if !restored.is_empty() {
            self.create_as_controller(namespace, restored);
        }
    }

    fn delete_namespace(&mut self, name: &str) -> Value {
        let gr = namespaces_gr();
        if let Some(mut ns) = self.get(&gr, "", name).cloned() {
            if !is_deleting(&ns) {
                set_meta(&mut ns, "deletionTimestamp", json!(now()));
                ns["status"] = json!({"phase": "Terminating"});
                let rv = self.next_rv();
                set_meta(&mut ns, "resourceVersion", json!(rv.to_string()));
                let previous = self.get_arc(&gr, "", name);
                let shared = self.put(&gr, (String::new(), name.to_string()), ns);
                self.emit(&gr, ChangeKind::Modified, shared, previous);
            }
        }
        let contents: Vec<(GroupResource, String)> = self
            .objects
            .iter()
            .flat_map(|(g, m)| {
                m.keys()
                    .filter(|k| k.0 == name)
                    .map(move |k| (g.clone(), k.1.clone()))
            })
            .collect();
        for (g, obj_name) in contents {
            self.delete_object(&g, name, &obj_name, None, None);
        }
        self.finish_namespace(name);
        self.get(&gr, "", name).cloned().unwrap_or_else(
            || json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
    }

    fn finish_namespace(&mut self, name: &str) {
        let gr = namespaces_gr();
        let Some(ns) = self.get(&gr, "", name) else {
            return;
        };
        if !is_deleting(ns) || !finalizers(ns).is_empty() {
            return;
        }
        let empty = self
            .objects
            .values()
            .all(|m| !m.keys().any(|k| k.0 == name));
        if empty {
            let key = (String::new(), name.to_string());
            if let Some(obj) = self.take(&gr, &key) {
                let mut obj = Arc::unwrap_or_clone(obj);
                let rv = self.next_rv();
                set_meta(&mut obj, "resourceVersion", json!(rv.to_string()));
                self.emit(&gr, ChangeKind::Deleted, Arc::new(obj), None);
            }
        }
    }
}

/// Whether two objects are equal apart from `metadata.resourceVersion` (a write that changes
/// nothing else is no change), compared in place.
fn equal_but_resource_version(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let same_metadata = match (a.get("metadata"), b.get("metadata")) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => equal_but(x, y, "resourceVersion"),
        (x, y) => x == y,
    };
    same_metadata && equal_but(a, b, "metadata")
}

/// Whether two maps are equal apart from the entry `skip`.
fn equal_but(
    a: &serde_json::Map<String, Value>,
    b: &serde_json::Map<String, Value>,
    skip: &str,
) -> bool {
    let len = |m: &serde_json::Map<String, Value>| m.len() - usize::from(m.contains_key(skip));
    len(a) == len(b)
        && a.iter()
            .filter(|(k, _)| k.as_str() != skip)
            .all(|(k, v)| b.get(k) == Some(v))
}

/// The largest object etcd stores with its default `--max-request-bytes` (1.5 MiB).
pub const MAX_STORED_BYTES: usize = 3 * 512 * 1024;

/// etcd refuses larger writes; apiserver passes etcd's error on unclassified, as a 500 without a reason.
fn check_storage_size(obj: &Value) -> Result<(), ApiError> {
    if sluice_domain::size::json_len(obj) > MAX_STORED_BYTES {
        return Err(ApiError::new(500, "", "etcdserver: request is too large"));
    }
    Ok(())
}

/// The status a real server reports once a CRD's names are accepted.
fn crd_status(crd: &Value) -> Value {
    let t = now();
    let cond = |ty: &str, reason: &str| json!({"type": ty, "status": "True", "lastTransitionTime": t, "reason": reason, "message": ""});
    json!({
        "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")],
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "storedVersions": crd.pointer("/spec/versions").and_then(Value::as_array).map(|vs| {
            vs.iter().filter(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false)).filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>()
        }).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::equal_but_resource_version;
    use serde_json::json;

    #[test]
    fn only_the_resource_version_may_differ() {
        let a = json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": "v"}});
        let same = json!({"data": {"k": "v"}, "metadata": {"resourceVersion": "2", "name": "a"}});
        assert!(equal_but_resource_version(&a, &same));
        let without_rv = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        assert!(equal_but_resource_version(&a, &without_rv));
        for different in [
            json!({"metadata": {"name": "b", "resourceVersion": "1"}, "data": {"k": "v"}}),
            json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": "w"}}),
            json!({"metadata": {"name": "a", "resourceVersion": "1", "labels": {}}, "data": {"k": "v"}}),
            json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": "v"}, "x": 1}),
            json!({"metadata": {"name": "a", "resourceVersion": "1"}}),
            json!({"data": {"k": "v"}}),
        ] {
            assert!(!equal_but_resource_version(&a, &different), "{different}");
            assert!(!equal_but_resource_version(&different, &a), "{different}");
        }
    }
}
