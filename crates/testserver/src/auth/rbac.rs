//! The RBAC authorization decision, as kube-apiserver's RBAC authorizer makes it: a pure function
//! of the request's attributes and the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings of
//! one cluster. It does not read the cluster or know HTTP; `auth` feeds it.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

/// Who is asking, as the authenticator established it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    /// The uid of the object the credential stands for (a ServiceAccount's); empty for a user
    /// of no object, as kube-apiserver leaves it.
    pub uid: String,
    pub groups: Vec<String>,
}

/// The group whose members bypass authorization (kube-apiserver's privileged group).
pub const MASTERS: &str = "system:masters";

impl UserInfo {
    /// The cluster administrator of a kubeadm cluster's `admin.conf`.
    pub fn admin() -> UserInfo {
        UserInfo {
            name: "kubernetes-admin".into(),
            uid: String::new(),
            groups: vec![MASTERS.into(), "system:authenticated".into()],
        }
    }

    /// A ServiceAccount's identity: `system:serviceaccount:<ns>:<name>` and its three groups.
    pub fn service_account(namespace: &str, name: &str) -> UserInfo {
        UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            uid: String::new(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// What a request asks to do, in the authorizer's terms (kube-apiserver's `RequestInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A request on an API resource.
    Resource {
        verb: String,
        group: String,
        version: String,
        resource: String,
        subresource: String,
        /// Empty for cluster-scoped requests and for lists across all namespaces.
        namespace: String,
        /// Empty for collections, unless a list or watch selects one name by field selector.
        name: String,
    },
    /// A request on any other path (`/version`, `/apis`, `/healthz`).
    NonResource { verb: String, path: String },
}

impl Action {
    /// The denial message kube-apiserver writes for this action (`forbiddenMessage` and
    /// `NewForbidden`): `<resource>.<group> "<name>" is forbidden: User "..." cannot ...`.
    pub fn forbidden_message(&self, user: &str) -> String {
        match self {
            Action::NonResource { verb, path } => {
                format!("forbidden: User {user:?} cannot {verb} path {path:?}")
            }
            Action::Resource {
                verb,
                group,
                resource,
                subresource,
                namespace,
                name,
                ..
            } => {
                let combined = if subresource.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}/{subresource}")
                };
                let scope = if namespace.is_empty() {
                    "at the cluster scope".to_string()
                } else {
                    format!("in the namespace {namespace:?}")
                };
                let what = if group.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}.{group}")
                };
                let subject = if name.is_empty() {
                    what
                } else {
                    format!("{what} {name:?}")
                };
                format!(
                    "{subject} is forbidden: User {user:?} cannot {verb} resource {combined:?} in API group {group:?} {scope}"
                )
            }
        }
    }
}

/// One rule of a Role or ClusterRole (`rbac.authorization.k8s.io/v1` `PolicyRule`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// A binding's subject (`User`, `Group` or `ServiceAccount`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Subject {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// A binding's `roleRef`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct RoleRef {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

/// A RoleBinding (with its namespace) or a ClusterRoleBinding (namespace empty).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    #[serde(skip)]
    pub namespace: String,
    #[serde(default)]
    pub role_ref: RoleRef,
    #[serde(default)]
    pub subjects: Vec<Subject>,
}

/// Every RBAC object of one cluster, as the authorizer reads them.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub cluster_roles: HashMap<String, Vec<PolicyRule>>,
    /// Roles by (namespace, name).
    pub roles: HashMap<(String, String), Vec<PolicyRule>>,
    pub cluster_role_bindings: Vec<Binding>,
    pub role_bindings: Vec<Binding>,
}

impl Policy {
    /// Adds a stored RBAC object; objects of other kinds and unreadable fields are ignored, as
    /// the real authorizer skips what it cannot use.
    pub fn add(&mut self, kind: &str, object: &Value) {
        let meta = |key: &str| {
            object
                .pointer(&format!("/metadata/{key}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let binding = || -> Option<Binding> {
            let mut b = Binding::deserialize(object).ok()?;
            b.namespace = meta("namespace");
            Some(b)
        };
        match kind {
            "ClusterRole" => {
                self.cluster_roles.insert(meta("name"), rules_of(object));
            }
            "Role" => {
                self.roles
                    .insert((meta("namespace"), meta("name")), rules_of(object));
            }
            "ClusterRoleBinding" => self.cluster_role_bindings.extend(binding()),
            "RoleBinding" => self.role_bindings.extend(binding()),
            _ => {}
        }
    }

    /// Whether any rule bound to `user` allows `action` (RBAC only grants; nothing denies).
    pub fn allows(&self, user: &UserInfo, action: &Action) -> bool {
        let namespace = match action {
            Action::Resource { namespace, .. } => namespace.as_str(),
            Action::NonResource { .. } => "",
        };
        self.rules_for(user, namespace)
            .any(|rule| rule_allows(rule, action))
    }

    /// Every rule bound to `user` that applies in `namespace` (empty: cluster-wide only): its
    /// ClusterRoleBindings' roles, then its RoleBindings' in `namespace`, in their order; what
    /// a `SelfSubjectRulesReview` lists.
    pub fn rules_for<'a>(
        &'a self,
        user: &'a UserInfo,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a PolicyRule> + 'a {
        let cluster_wide = self
            .cluster_role_bindings
            .iter()
            .filter(move |b| b.role_ref.kind == "ClusterRole" && binds(b, user))
            .filter_map(|b| self.cluster_roles.get(&b.role_ref.name));
        let in_namespace = self
            .role_bindings
            .iter()
            .filter(move |b| !namespace.is_empty() && b.namespace == namespace && binds(b, user))
            .filter_map(|b| match b.role_ref.kind.as_str() {
                "ClusterRole" => self.cluster_roles.get(&b.role_ref.name),
                "Role" => self
                    .roles
                    .get(&(b.namespace.clone(), b.role_ref.name.clone())),
                _ => None,
            });
        cluster_wide.chain(in_namespace).flatten()
    }
}

/// The `rules` of a Role or ClusterRole; none when they are absent or unreadable, as the real
/// authorizer skips what it cannot use.
pub fn rules_of(object: &Value) -> Vec<PolicyRule> {
    object
        .get("rules")
        .and_then(|r| Vec::<PolicyRule>::deserialize(r).ok())
        .unwrap_or_default()
}

/// Whether a binding names `user` among its subjects. A ServiceAccount subject without a
/// namespace means the binding's own namespace.
fn binds(binding: &Binding, user: &UserInfo) -> bool {
    binding.subjects.iter().any(|s| match s.kind.as_str() {
        "User" => s.name == user.name,
        "Group" => user.in_group(&s.name),
        "ServiceAccount" => {
            let namespace = if s.namespace.is_empty() {
                &binding.namespace
            } else {
                &s.namespace
            };
            !namespace.is_empty()
                && user.name == format!("system:serviceaccount:{namespace}:{}", s.name)
        }
        _ => false,
    })
}

fn has(values: &[String], want: &str) -> bool {
    values.iter().any(|v| v == "*" || v == want)
}

/// kube-apiserver's `RuleAllows`: verb, group, resource (with `*/<subresource>`) and name for
/// resource requests; verb and URL (exact, or a prefix ending in `*`) for the others.
pub fn rule_allows(rule: &PolicyRule, action: &Action) -> bool {
    match action {
        Action::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let resource_matches = rule.resources.iter().any(|r| {
                r == "*"
                    || *r == combined
                    || (!subresource.is_empty()
                        && r.strip_prefix("*/") == Some(subresource.as_str()))
            });
            has(&rule.verbs, verb)
                && has(&rule.api_groups, group)
                && resource_matches
                && (rule.resource_names.is_empty() || rule.resource_names.iter().any(|n| n == name))
        }
        Action::NonResource { verb, path } => {
            has(&rule.verbs, verb)
                && rule.non_resource_urls.iter().any(|u| {
                    u == "*"
                        || u == path
                        || u.strip_suffix('*')
                            .is_some_and(|prefix| path.starts_with(prefix))
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resource(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Action {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Action::Resource {
            verb: verb.into(),
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn path(verb: &str, path: &str) -> Action {
        Action::NonResource {
            verb: verb.into(),
            path: path.into(),
        }
    }

    fn rule(value: Value) -> PolicyRule {
        PolicyRule::deserialize(value).expect("rule parses")
    }

    /// A policy from (kind, object) pairs.
    fn policy(objects: &[Value]) -> Policy {
        let mut p = Policy::default();
        for o in objects {
            p.add(o["kind"].as_str().expect("kind"), o);
        }
        p
    }

    fn sa(namespace: &str, name: &str) -> UserInfo {
        UserInfo::service_account(namespace, name)
    }

    fn check_rule(rule_json: Value, action: Action, allowed: bool) {
        let r = rule(rule_json.clone());
        assert_eq!(
            rule_allows(&r, &action),
            allowed,
            "rule {rule_json} on {action:?}"
        );
    }

    #[test]
    fn rules_match_verbs_groups_resources_and_names() {
        let events = json!({"apiGroups": ["lib.projectsveltos.io"], "resources": ["eventreports"], "verbs": ["create", "patch"]});
        let cases = [
            (
                events.clone(),
                resource(
                    "create",
                    "lib.projectsveltos.io",
                    "eventreports",
                    "default",
                    "",
                ),
                true,
            ),
            (
                events.clone(),
                resource(
                    "patch",
                    "lib.projectsveltos.io",
                    "eventreports",
                    "default",
                    "r",
                ),
                true,
            ),
            (
                events.clone(),
                resource(
                    "delete",
                    "lib.projectsveltos.io",
                    "eventreports",
                    "default",
                    "r",
                ),
                false,
            ),
            (
                events.clone(),
                resource("create", "", "eventreports", "default", ""),
                false,
            ),
            (
                events.clone(),
                resource("create", "lib.projectsveltos.io", "eventsources", "", ""),
                false,
            ),
            // a subresource is a resource of its own
            (
                events.clone(),
                resource(
                    "patch",
                    "lib.projectsveltos.io",
                    "eventreports/status",
                    "default",
                    "r",
                ),
                false,
            ),
            (
                json!({"apiGroups": ["lib.projectsveltos.io"], "resources": ["eventtriggers/status"], "verbs": ["patch"]}),
                resource("patch", "lib.projectsveltos.io", "eventtriggers", "", "t"),
                false,
            ),
            (
                json!({"apiGroups": ["lib.projectsveltos.io"], "resources": ["eventtriggers/status"], "verbs": ["patch"]}),
                resource(
                    "patch",
                    "lib.projectsveltos.io",
                    "eventtriggers/status",
                    "",
                    "t",
                ),
                true,
            ),
            (
                json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}),
                resource("update", "apps", "deployments/status", "ns", "d"),
                true,
            ),
            (
                json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}),
                resource("update", "apps", "deployments", "ns", "d"),
                false,
            ),
            (
                json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                resource("create", "", "serviceaccounts/token", "ns", "sa"),
                true,
            ),
            // resourceNames need the request to name the object
            (
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["sveltos-nats"], "verbs": ["get", "list", "watch"]}),
                resource("get", "", "secrets", "projectsveltos", "sveltos-nats"),
                true,
            ),
            (
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["sveltos-nats"], "verbs": ["get", "list", "watch"]}),
                resource("get", "", "secrets", "projectsveltos", "other"),
                false,
            ),
            (
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["sveltos-nats"], "verbs": ["get", "list", "watch"]}),
                resource("list", "", "secrets", "projectsveltos", ""),
                false,
            ),
            (
                json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["c"], "verbs": ["create"]}),
                resource("create", "", "configmaps", "ns", ""),
                false,
            ),
            // a list or watch selecting one name by field selector carries that name
            (
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["sveltos-nats"], "verbs": ["watch"]}),
                resource("watch", "", "secrets", "projectsveltos", "sveltos-nats"),
                true,
            ),
            // resource rules never grant paths and path rules never grant resources
            (
                json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                path("get", "/version"),
                false,
            ),
            (
                json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
                resource("get", "", "pods", "ns", "p"),
                false,
            ),
            (
                json!({"nonResourceURLs": ["/version"], "verbs": ["get"]}),
                path("get", "/version"),
                true,
            ),
            (
                json!({"nonResourceURLs": ["/version"], "verbs": ["get"]}),
                path("post", "/version"),
                false,
            ),
            (
                json!({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}),
                path("get", "/apis/apps/v1"),
                true,
            ),
            (
                json!({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}),
                path("get", "/apis"),
                false,
            ),
            (
                json!({"nonResourceURLs": ["/openapi", "/openapi/*"], "verbs": ["get"]}),
                path("get", "/openapi/v3"),
                true,
            ),
        ];
        for (r, action, allowed) in cases {
            check_rule(r, action, allowed);
        }
    }

    fn sluice_policy() -> Policy {
        policy(&[
            json!({"kind": "ClusterRole", "metadata": {"name": "reader"},
                   "rules": [{"apiGroups": ["lib.projectsveltos.io"], "resources": ["eventsources"], "verbs": ["get", "list", "watch"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "reader"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": "sluice-system"},
                                {"kind": "Group", "name": "auditors"}, {"kind": "User", "name": "jane"}]}),
            json!({"kind": "ClusterRole", "metadata": {"name": "writer"},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "writer", "namespace": "team"},
                   "roleRef": {"kind": "ClusterRole", "name": "writer"},
                   "subjects": [{"kind": "ServiceAccount", "name": "applier", "namespace": "sluice-system"},
                                {"kind": "ServiceAccount", "name": "local"}]}),
            json!({"kind": "Role", "metadata": {"name": "reports", "namespace": "team"},
                   "rules": [{"apiGroups": ["lib.projectsveltos.io"], "resources": ["eventreports"], "verbs": ["*"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "reports", "namespace": "team"},
                   "roleRef": {"kind": "Role", "name": "reports"},
                   "subjects": [{"kind": "ServiceAccount", "name": "reporter", "namespace": "sluice-system"}]}),
            // a RoleBinding in another namespace naming a Role that only exists in "team"
            json!({"kind": "RoleBinding", "metadata": {"name": "reports", "namespace": "other"},
                   "roleRef": {"kind": "Role", "name": "reports"},
                   "subjects": [{"kind": "ServiceAccount", "name": "reporter", "namespace": "sluice-system"}]}),
        ])
    }

    #[test]
    fn bindings_grant_their_roles_to_their_subjects_in_their_scope() {
        let p = sluice_policy();
        let es = |ns: &str| resource("list", "lib.projectsveltos.io", "eventsources", ns, "");
        let cm = |ns: &str| resource("create", "", "configmaps", ns, "");
        let report = |ns: &str| resource("create", "lib.projectsveltos.io", "eventreports", ns, "");
        let group = |name: &str, group: &str| UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: vec![group.into(), "system:authenticated".into()],
        };
        let cases = [
            // ClusterRoleBinding: everywhere, to each kind of subject
            (sa("sluice-system", "watcher"), es(""), true),
            (sa("sluice-system", "watcher"), es("default"), true),
            (group("someone", "auditors"), es("x"), true),
            (group("jane", "devs"), es(""), true),
            (group("john", "devs"), es(""), false),
            // a ServiceAccount of the same name in another namespace is someone else
            (sa("default", "watcher"), es(""), false),
            // a ServiceAccount bound elsewhere only gets nothing here
            (sa("sluice-system", "applier"), es(""), false),
            // RoleBinding to a ClusterRole: only in the binding's namespace
            (sa("sluice-system", "applier"), cm("team"), true),
            (sa("sluice-system", "applier"), cm("default"), false),
            (sa("sluice-system", "applier"), cm(""), false),
            // a ServiceAccount subject without namespace is the binding's namespace's
            (sa("team", "local"), cm("team"), true),
            (sa("sluice-system", "local"), cm("team"), false),
            // RoleBinding to a Role: the Role of the binding's namespace only
            (sa("sluice-system", "reporter"), report("team"), true),
            (sa("sluice-system", "reporter"), report("other"), false),
            (sa("sluice-system", "reporter"), report(""), false),
        ];
        for (user, action, allowed) in cases {
            assert_eq!(
                p.allows(&user, &action),
                allowed,
                "{} {action:?}",
                user.name
            );
        }
    }

    #[test]
    fn without_bindings_nothing_is_allowed_not_even_for_masters() {
        // system:masters bypasses the authorizer before it runs; RBAC itself knows no groups.
        let p = Policy::default();
        assert!(!p.allows(&UserInfo::admin(), &resource("get", "", "pods", "ns", "p")));
        assert!(!p.allows(&UserInfo::admin(), &path("get", "/version")));
    }

    #[test]
    fn forbidden_messages_are_kube_apiservers() {
        let user = "system:serviceaccount:projectsveltos:sluice-reporter";
        let cases = [
            (
                resource(
                    "create",
                    "lib.projectsveltos.io",
                    "eventreports",
                    "default",
                    "",
                ),
                r#"eventreports.lib.projectsveltos.io is forbidden: User "system:serviceaccount:projectsveltos:sluice-reporter" cannot create resource "eventreports" in API group "lib.projectsveltos.io" in the namespace "default""#,
            ),
            (
                resource(
                    "patch",
                    "lib.projectsveltos.io",
                    "eventtriggers/status",
                    "",
                    "t1",
                ),
                r#"eventtriggers.lib.projectsveltos.io "t1" is forbidden: User "system:serviceaccount:projectsveltos:sluice-reporter" cannot patch resource "eventtriggers/status" in API group "lib.projectsveltos.io" at the cluster scope"#,
            ),
            (
                resource("list", "", "secrets", "", ""),
                r#"secrets is forbidden: User "system:serviceaccount:projectsveltos:sluice-reporter" cannot list resource "secrets" in API group "" at the cluster scope"#,
            ),
            (
                path("get", "/metrics"),
                r#"forbidden: User "system:serviceaccount:projectsveltos:sluice-reporter" cannot get path "/metrics""#,
            ),
        ];
        for (action, message) in cases {
            assert_eq!(action.forbidden_message(user), message);
        }
    }
}
