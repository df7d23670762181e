//! The RBAC objects every cluster starts with, a subset of kube-apiserver's bootstrap policy:
//! `cluster-admin` for `system:masters`, discovery and version for every authenticated user, the
//! self-reviews (`kubectl auth can-i`), and the user-facing roles `admin`, `edit` and `view`,
//! which the aggregation controller builds from the `system:aggregate-to-*` roles (and which a
//! CRD's installer extends by labelling its own ClusterRoles). Nothing else is granted by
//! default.

use serde_json::{json, Value};

/// ClusterRoles and ClusterRoleBindings, in creation order.
pub fn bootstrap_policy() -> Vec<Value> {
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
               "rules": rules})
    };
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    let info = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery = vec![
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/openapi",
        "/openapi/*",
    ];
    discovery.extend(info);
    let mut policy = vec![
        role(
            "cluster-admin",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        binding("cluster-admin", &["system:masters"]),
        role(
            "system:discovery",
            json!([{"nonResourceURLs": discovery, "verbs": ["get"]}]),
        ),
        binding("system:discovery", &["system:authenticated"]),
        role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": info, "verbs": ["get"]}]),
        ),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        role(
            "system:basic-user",
            json!([{"apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                   {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
        ),
        binding("system:basic-user", &["system:authenticated"]),
    ];
    policy.extend(user_facing_roles());
    policy
}

/// `admin`, `edit` and `view` (rules left to the aggregation controller) and the
/// `system:aggregate-to-*` roles they aggregate, with kube-apiserver's rules.
fn user_facing_roles() -> Vec<Value> {
    const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
    let metadata = |name: &str, into: Option<&str>| {
        let mut labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
        if let Some(into) = into {
            labels[format!("{AGGREGATE_TO}{into}")] = json!("true");
        }
        json!({"name": name, "labels": labels,
               "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
    };
    let aggregated = |name: &str, into: Option<&str>| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": metadata(name, into),
               "aggregationRule": {"clusterRoleSelectors": [
                   {"matchLabels": {format!("{AGGREGATE_TO}{name}"): "true"}}]},
               "rules": null})
    };
    let parts = |into: &str, rules: Vec<Value>| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": metadata(&format!("system:aggregate-to-{into}"), Some(into)),
               "rules": rules})
    };
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| json!({"apiGroups": [group], "resources": resources, "verbs": verbs});
    let read = ["get", "list", "watch"];
    let write = ["create", "delete", "deletecollection", "patch", "update"];
    let read_write = crate::resources::ALL_VERBS;
    let admin_parts = vec![
        rule(
            "authorization.k8s.io",
            &["localsubjectaccessreviews"],
            &["create"],
        ),
        rule(
            "rbac.authorization.k8s.io",
            &["rolebindings", "roles"],
            &read_write,
        ),
    ];
    let pod_access = ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy"];
    let edit_parts = vec![
        rule(
            "",
            &[&pod_access[..], &["secrets", "services/proxy"]].concat(),
            &read,
        ),
        rule("", &["serviceaccounts"], &["impersonate"]),
        rule("", &[&["pods"][..], &pod_access].concat(), &write),
        rule("", &["pods/eviction"], &["create"]),
        rule(
            "",
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            &write,
        ),
        rule("", &["serviceaccounts/token"], &["create"]),
        rule(
            "apps",
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            &write,
        ),
        rule("autoscaling", &["horizontalpodautoscalers"], &write),
        rule("batch", &["cronjobs", "jobs"], &write),
        rule(
            "extensions",
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
            &write,
        ),
        rule("policy", &["poddisruptionbudgets"], &write),
        rule(
            "networking.k8s.io",
            &["ingresses", "networkpolicies"],
            &write,
        ),
        rule("coordination.k8s.io", &["leases"], &read_write),
    ];
    let view_parts = vec![
        rule(
            "",
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            &read,
        ),
        rule(
            "",
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            &read,
        ),
        rule("", &["namespaces"], &read),
        rule("discovery.k8s.io", &["endpointslices"], &read),
        rule(
            "apps",
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            &read,
        ),
        rule(
            "autoscaling",
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            &read,
        ),
        rule(
            "batch",
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            &read,
        ),
        rule(
            "extensions",
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
            &read,
        ),
        rule(
            "policy",
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            &read,
        ),
        rule(
            "networking.k8s.io",
            &["ingresses", "ingresses/status", "networkpolicies"],
            &read,
        ),
    ];
    vec![
        parts("admin", admin_parts),
        parts("edit", edit_parts),
        parts("view", view_parts),
        aggregated("admin", None),
        aggregated("edit", Some("admin")),
        aggregated("view", Some("edit")),
    ]
}
