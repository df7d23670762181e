//! The RBAC objects every cluster starts with, a subset of kube-apiserver's bootstrap policy:
//! `cluster-admin` for `system:masters`, discovery and version for every authenticated user, and
//! the self-reviews (`kubectl auth can-i`). Nothing else is granted by default.

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
    vec![
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
    ]
}
