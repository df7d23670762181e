//! The resource registry of one cluster: built-in kinds, kinds added by CustomResourceDefinitions, and the
//! discovery documents built from them. It does not store objects.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::schema::VersionSchema;

/// Every verb of a resource served whole, in discovery's order: what discovery lists for one,
/// and what the bootstrap `system:aggregate-to-*` roles grant as "read and write".
pub const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One served resource (a group, its served versions, a plural name).
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceInfo {
    pub group: String,
    pub versions: Vec<String>,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub status: bool,
    pub short_names: Vec<String>,
    /// The categories it belongs to (`all` for `kubectl get all`).
    pub categories: Vec<String>,
    /// Name of the CRD that defines it; `None` for built-ins.
    pub crd: Option<String>,
    /// The `openAPIV3Schema` of each CRD version that has one.
    pub schemas: Vec<VersionSchema>,
    /// The version objects are stored in (the only version of a built-in kind).
    pub storage_version: String,
    /// How objects move between versions (`spec.conversion` of a CRD).
    pub conversion: crate::conversion::Strategy,
}

/// The storage identity of a resource: group and plural, independent of version.
pub type GroupResource = (String, String);

impl ResourceInfo {
    pub fn gr(&self) -> GroupResource {
        (self.group.clone(), self.plural.clone())
    }

    /// `plural` for the core group, `plural.group` otherwise, as used in error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The structural schema of one version, for CRD kinds that declare one.
    pub fn schema(&self, version: &str) -> Option<&Arc<Value>> {
        self.schemas
            .iter()
            .find(|s| s.version == version)
            .map(|s| &s.schema)
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    fn discovery_entry(&self) -> Vec<Value> {
        let verbs = ALL_VERBS;
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
        })];
        if !self.categories.is_empty() {
            out[0]["categories"] = json!(self.categories);
        }
        if self.crd.is_none() && crate::api::scales(&self.group, &self.kind) {
            out.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.status {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    status: bool,
    short: &[&str],
) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        versions: vec![version.into()],
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        status,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        // kube-apiserver puts these kinds (and others not served here) in `all`.
        categories: match kind {
            "Pod"
            | "Service"
            | "Deployment"
            | "ReplicaSet"
            | "StatefulSet"
            | "DaemonSet"
            | "Job"
            | "CronJob"
            | "HorizontalPodAutoscaler" => vec!["all".into()],
            _ => Vec::new(),
        },
        crd: None,
        schemas: Vec::new(),
        storage_version: version.into(),
        conversion: crate::conversion::Strategy::None,
    }
}

const RBAC: &str = "rbac.authorization.k8s.io";

/// The built-in kinds every cluster serves.
/// The built-in kind named `kind`, for tests.
#[cfg(test)]
pub(crate) fn builtin_kind(kind: &str) -> ResourceInfo {
    builtins()
        .into_iter()
        .find(|r| r.kind == kind)
        .expect("built-in kind")
}

pub fn builtins() -> Vec<ResourceInfo> {
    vec![
        builtin("", "v1", "Namespace", "namespaces", false, true, &["ns"]),
        builtin("", "v1", "Node", "nodes", false, true, &["no"]),
        builtin("", "v1", "Service", "services", true, true, &["svc"]),
        builtin("", "v1", "ConfigMap", "configmaps", true, false, &["cm"]),
        builtin("", "v1", "Secret", "secrets", true, false, &[]),
        builtin("", "v1", "Endpoints", "endpoints", true, false, &["ep"]),
        builtin("", "v1", "Pod", "pods", true, true, &["po"]),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            false,
            &["sa"],
        ),
        builtin("", "v1", "Event", "events", true, false, &["ev"]),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            true,
            &["deploy"],
        ),
        builtin(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            true,
            true,
            &["rs"],
        ),
        builtin(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            true,
            true,
            &["sts"],
        ),
        builtin("apps", "v1", "DaemonSet", "daemonsets", true, true, &["ds"]),
        builtin("batch", "v1", "Job", "jobs", true, true, &[]),
        builtin("batch", "v1", "CronJob", "cronjobs", true, true, &["cj"]),
        builtin(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            true,
            true,
            &["hpa"],
        ),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
            &["pdb"],
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            true,
            true,
            &["ing"],
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            true,
            false,
            &["netpol"],
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
            &["crd", "crds"],
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            false,
            &[],
        ),
        builtin(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            false,
            &[],
        ),
        builtin(RBAC, "v1", "ClusterRole", "clusterroles", false, false, &[]),
        builtin(
            RBAC,
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            false,
            &[],
        ),
        builtin(RBAC, "v1", "Role", "roles", true, false, &[]),
        builtin(RBAC, "v1", "RoleBinding", "rolebindings", true, false, &[]),
    ]
}

/// Reads the resource a CRD defines; `Err` says which field is missing or wrong.
pub fn from_crd(crd: &Value) -> Result<ResourceInfo, String> {
    let spec = crd.get("spec").ok_or("spec is required")?;
    let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
    let group = s(spec, "/group").ok_or("spec.group is required")?;
    let kind = s(spec, "/names/kind").ok_or("spec.names.kind is required")?;
    let plural = s(spec, "/names/plural").ok_or("spec.names.plural is required")?;
    let singular = s(spec, "/names/singular").unwrap_or_else(|| kind.to_lowercase());
    let namespaced = match s(spec, "/scope").as_deref() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err("spec.scope must be Namespaced or Cluster".into()),
    };
    let name = s(crd, "/metadata/name").unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name must be spec.names.plural+\".\"+spec.group, {plural}.{group}"
        ));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("spec.versions is required")?;
    let mut served = Vec::new();
    let mut status = false;
    let mut storage_version = None;
    for v in versions {
        let vname = s(v, "/name").ok_or("spec.versions[].name is required")?;
        if v.get("storage").and_then(Value::as_bool).unwrap_or(false) {
            storage_version = Some(vname.clone());
        }
        if v.get("served").and_then(Value::as_bool).unwrap_or(false) {
            served.push(vname);
        }
        status |= v.pointer("/subresources/status").is_some();
    }
    if served.is_empty() {
        return Err("spec.versions must serve at least one version".into());
    }
    let storage_version = storage_version
        .or_else(|| served.first().cloned())
        .unwrap_or_default();
    let conversion = crate::conversion::strategy(crd)?;
    let strings = |pointer: &str| -> Vec<String> {
        spec.pointer(pointer)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let short_names = strings("/names/shortNames");
    let categories = strings("/names/categories");
    Ok(ResourceInfo {
        group,
        versions: served,
        kind,
        plural,
        singular,
        namespaced,
        status,
        short_names,
        categories,
        crd: Some(name),
        schemas: crate::schema::crd_schemas(crd),
        storage_version,
        conversion,
    })
}

/// All resources served by one cluster.
#[derive(Clone, Debug)]
pub struct Registry {
    resources: Vec<ResourceInfo>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            resources: builtins(),
        }
    }
}

impl Registry {
    /// The resource served at `group/version/plural`, if any.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources.iter().find(|r| {
            r.group == group && r.plural == plural && r.versions.iter().any(|v| v == version)
        })
    }

    pub fn all(&self) -> &[ResourceInfo] {
        &self.resources
    }

    /// Adds or replaces the resource defined by CRD `info.crd`.
    pub fn install(&mut self, info: ResourceInfo) {
        self.resources
            .retain(|r| !(r.group == info.group && r.plural == info.plural));
        self.resources.push(info);
    }

    pub fn uninstall(&mut self, crd_name: &str) -> Option<ResourceInfo> {
        let pos = self
            .resources
            .iter()
            .position(|r| r.crd.as_deref() == Some(crd_name))?;
        Some(self.resources.remove(pos))
    }

    /// Groups with their versions, in registration order (core group excluded), the groups of
    /// the identity endpoints first.
    fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = IDENTITY_GROUPS
            .iter()
            .map(|group| (group.to_string(), vec!["v1".to_string()]))
            .collect();
        for r in self.resources.iter().filter(|r| !r.group.is_empty()) {
            let entry = match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some(e) => e,
                None => {
                    out.push((r.group.clone(), Vec::new()));
                    let last = out.len() - 1;
                    &mut out[last]
                }
            };
            for v in &r.versions {
                if !entry.1.contains(v) {
                    entry.1.push(v.clone());
                }
            }
        }
        for (_, versions) in &mut out {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    /// `GET /api`.
    pub fn core_versions(&self) -> Value {
        json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
    }

    /// `GET /apis`.
    pub fn group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .map(|(g, versions)| {
                let vs: Vec<Value> = versions
                    .iter()
                    .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                    .collect();
                json!({"name": g, "versions": vs, "preferredVersion": vs[0]})
            })
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `GET /apis/<group>`, if the group exists.
    pub fn group(&self, group: &str) -> Option<Value> {
        let (g, versions) = self.groups().into_iter().find(|(g, _)| g == group)?;
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
            .collect();
        Some(
            json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": vs, "preferredVersion": vs[0]}),
        )
    }

    /// `GET /api/v1` or `GET /apis/<group>/<version>`, if that group version is served.
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let resources: Vec<Value> = self
            .resources
            .iter()
            .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
            .flat_map(ResourceInfo::discovery_entry)
            .chain(identity_entries(group, version))
            .collect();
        if resources.is_empty() {
            return None;
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
        )
    }
}

/// The groups of the identity endpoints, served in version v1 only.
const IDENTITY_GROUPS: [&str; 2] = ["authentication.k8s.io", "authorization.k8s.io"];

/// The discovery entries of `group/version`'s identity endpoints: resources that are only
/// created, never stored (`auth::serve` answers them), as kube-apiserver lists them. Only
/// those served here: no TokenReview, SubjectAccessReview or LocalSubjectAccessReview.
fn identity_entries(group: &str, version: &str) -> Vec<Value> {
    let review = |name: &str, kind: &str| {
        json!({
            "name": name,
            "singularName": kind.to_lowercase(),
            "namespaced": false,
            "kind": kind,
            "verbs": ["create"],
        })
    };
    match (group, version) {
        ("", "v1") => vec![json!({
            "name": "serviceaccounts/token",
            "singularName": "",
            "namespaced": true,
            "group": "authentication.k8s.io",
            "version": "v1",
            "kind": "TokenRequest",
            "verbs": ["create"],
        })],
        ("authentication.k8s.io", "v1") => vec![review("selfsubjectreviews", "SelfSubjectReview")],
        ("authorization.k8s.io", "v1") => vec![
            review("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
            review("selfsubjectrulesreviews", "SelfSubjectRulesReview"),
        ],
        _ => Vec::new(),
    }
}

/// Kubernetes version ordering: GA > beta > alpha, higher numbers first.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let rest = v.trim_start_matches('v');
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, minor) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n.parse().unwrap_or(0))
    } else {
        (2, 0)
    };
    (stage, major, minor)
}
