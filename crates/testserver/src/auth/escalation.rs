//! RBAC's escalation prevention, as kube-apiserver's RBAC registries apply it to every create
//! and update of a Role, ClusterRole, RoleBinding or ClusterRoleBinding: a user may only grant
//! what it already holds.
//!
//! - A Role or ClusterRole is written if the user may `escalate` it, or holds every permission
//!   its rules grant (in the role's namespace, or cluster-wide for a ClusterRole); a
//!   ClusterRole with an `aggregationRule` additionally needs every permission there is.
//! - A binding is written if the user may `bind` the role it refers to, or holds every
//!   permission of that role (in the binding's namespace, or cluster-wide); a role that does
//!   not exist is then `404 NotFound`.
//! - `system:masters` may do anything; a write that changes nothing but owner references and
//!   finalizers (the garbage collector's) is not checked.
//!
//! The comparison is upstream's: each rule to grant is broken down into one verb on one
//! resource (or URL, or name), and each of those must be covered by one rule the user holds.
//! What is missing is listed in the 403's message as kube-apiserver words it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;

use super::rbac::{rules_of, Action, Policy, PolicyRule, RoleRef, UserInfo, MASTERS};
use super::RBAC_GROUP;
use crate::error::ApiError;
use crate::field_error::go_quote;
use crate::object::meta_str;

/// Why a write of an RBAC object is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The message after `<resource> "<name>" is forbidden: `.
    Forbidden(String),
    /// The binding's role does not exist: (its resource, its name).
    RoleNotFound(&'static str, String),
}

/// Whether `user` may write `object`, an object of the RBAC kind `kind` in `namespace` (empty
/// for the cluster-scoped kinds), `previous` being what is stored now, if anything.
pub fn confirm(
    policy: &Policy,
    user: &UserInfo,
    kind: &str,
    namespace: &str,
    object: &Value,
    previous: Option<&Value>,
) -> Result<(), Refusal> {
    if user.in_group(MASTERS) || previous.is_some_and(|p| only_gc_fields_change(p, object)) {
        return Ok(());
    }
    let name = meta_str(object, "name");
    match kind {
        "Role" | "ClusterRole" => {
            let resource = if kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if policy.allows(user, &rbac_action("escalate", resource, namespace, name)) {
                return Ok(());
            }
            let owned: Vec<&PolicyRule> = policy.rules_for(user, namespace).collect();
            confirm_held(&owned, &rules_of(object), user)?;
            if object
                .pointer("/aggregationRule")
                .is_some_and(|r| !r.is_null())
            {
                let everything = [
                    rule(&["*"], &["*"], &["*"], &[]),
                    rule(&[], &[], &["*"], &["*"]),
                ];
                if !missing(&owned, &everything).is_empty() {
                    return Err(Refusal::Forbidden(
                        "must have cluster-admin privileges to use an aggregationRule".into(),
                    ));
                }
            }
            Ok(())
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            let role_ref = object
                .get("roleRef")
                .and_then(|r| RoleRef::deserialize(r).ok())
                .unwrap_or_default();
            let (resource, rules) = match role_ref.kind.as_str() {
                "Role" => (
                    "roles",
                    policy
                        .roles
                        .get(&(namespace.to_string(), role_ref.name.clone())),
                ),
                _ => ("clusterroles", policy.cluster_roles.get(&role_ref.name)),
            };
            if policy.allows(
                user,
                &rbac_action("bind", resource, namespace, &role_ref.name),
            ) {
                return Ok(());
            }
            let rules = rules.ok_or(Refusal::RoleNotFound(resource, role_ref.name.clone()))?;
            let owned: Vec<&PolicyRule> = policy.rules_for(user, namespace).collect();
            confirm_held(&owned, rules, user)
        }
        _ => Ok(()),
    }
}

/// The refusal as kube-apiserver answers it for the RBAC `resource` `name`.
pub fn to_api_error(refusal: Refusal, resource: &str, name: &str) -> ApiError {
    let (code, reason, message, resource, name) = match refusal {
        Refusal::Forbidden(why) => (
            403,
            "Forbidden",
            format!("{resource}.{RBAC_GROUP} {name:?} is forbidden: {why}"),
            resource.to_string(),
            name.to_string(),
        ),
        Refusal::RoleNotFound(role_resource, role) => (
            404,
            "NotFound",
            format!("{role_resource}.{RBAC_GROUP} {role:?} not found"),
            role_resource.to_string(),
            role,
        ),
    };
    let mut error = ApiError::new(code, reason, message);
    error.details = Some(serde_json::json!({"name": name, "group": RBAC_GROUP, "kind": resource}));
    error
}

fn rbac_action(verb: &str, resource: &str, namespace: &str, name: &str) -> Action {
    Action::Resource {
        verb: verb.into(),
        group: RBAC_GROUP.into(),
        version: "v1".into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], urls: &[&str]) -> PolicyRule {
    let owned = |values: &[&str]| values.iter().map(|v| v.to_string()).collect();
    PolicyRule {
        verbs: owned(verbs),
        api_groups: owned(groups),
        resources: owned(resources),
        resource_names: Vec::new(),
        non_resource_urls: owned(urls),
    }
}

/// Refuses with kube-apiserver's message unless `owned` covers every rule of `granted`.
fn confirm_held(
    owned: &[&PolicyRule],
    granted: &[PolicyRule],
    user: &UserInfo,
) -> Result<(), Refusal> {
    let missing = missing(owned, granted);
    if missing.is_empty() {
        return Ok(());
    }
    let described: BTreeSet<String> = compact(missing).iter().map(compact_string).collect();
    Err(Refusal::Forbidden(format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        quoted_list(&user.groups),
        described.into_iter().collect::<Vec<_>>().join("\n")
    )))
}

/// The parts of `granted` (one verb on one resource, name or URL each) that no rule of `owned`
/// covers, in the order they are granted.
pub fn missing(owned: &[&PolicyRule], granted: &[PolicyRule]) -> Vec<PolicyRule> {
    granted
        .iter()
        .flat_map(break_down)
        .filter(|part| !owned.iter().any(|rule| covers(rule, part)))
        .collect()
}

/// One rule as single grants: each group × resource × verb (× name), then each URL × verb.
fn break_down(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut parts = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let names: Vec<Option<&String>> = if rule.resource_names.is_empty() {
                    vec![None]
                } else {
                    rule.resource_names.iter().map(Some).collect()
                };
                for name in names {
                    parts.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: vec![group.clone()],
                        resources: vec![resource.clone()],
                        resource_names: name.into_iter().cloned().collect(),
                        non_resource_urls: Vec::new(),
                    });
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            parts.push(PolicyRule {
                verbs: vec![verb.clone()],
                non_resource_urls: vec![url.clone()],
                ..PolicyRule::default()
            });
        }
    }
    parts
}

fn holds_all(owned: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| owned.contains(w))
}

/// Whether `owner` grants everything `part` does (upstream's `ruleCovers`).
fn covers(owner: &PolicyRule, part: &PolicyRule) -> bool {
    let star = |values: &[String]| values.iter().any(|v| v == "*");
    let verbs = star(&owner.verbs) || holds_all(&owner.verbs, &part.verbs);
    let groups = star(&owner.api_groups) || holds_all(&owner.api_groups, &part.api_groups);
    let resources = star(&owner.resources)
        || part.resources.iter().all(|resource| {
            owner.resources.contains(resource)
                || resource
                    .split_once('/')
                    .is_some_and(|(_, sub)| owner.resources.contains(&format!("*/{sub}")))
        });
    let names = owner.resource_names.is_empty()
        || (!part.resource_names.is_empty()
            && holds_all(&owner.resource_names, &part.resource_names));
    let urls = part.non_resource_urls.iter().all(|url| {
        owner.non_resource_urls.iter().any(|o| {
            o == "*" || o == url || o.strip_suffix('*').is_some_and(|p| url.starts_with(p))
        })
    });
    verbs && groups && resources && names && urls
}

/// Upstream's `CompactRules`: the parts on one group and one resource (and at most one name)
/// become one rule with their verbs together.
fn compact(parts: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut simple: BTreeMap<(String, String, Option<String>), PolicyRule> = BTreeMap::new();
    let mut others = Vec::new();
    for part in parts {
        let is_simple = part.api_groups.len() == 1
            && part.resources.len() == 1
            && part.resource_names.len() <= 1
            && part.non_resource_urls.is_empty();
        if !is_simple {
            others.push(part);
            continue;
        }
        let key = (
            part.api_groups[0].clone(),
            part.resources[0].clone(),
            part.resource_names.first().cloned(),
        );
        match simple.get_mut(&key) {
            Some(rule) => rule.verbs.extend(part.verbs),
            None => {
                simple.insert(key, part);
            }
        }
    }
    others.extend(simple.into_values());
    others
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn quoted_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[{}]", quoted.join(" "))
}

/// Upstream's `CompactString`: the rule's non-empty lists, `%q`-quoted.
fn compact_string(rule: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (label, values) in [
        ("APIGroups", &rule.api_groups),
        ("Resources", &rule.resources),
        ("NonResourceURLs", &rule.non_resource_urls),
        ("ResourceNames", &rule.resource_names),
        ("Verbs", &rule.verbs),
    ] {
        if !values.is_empty() {
            parts.push(format!("{label}:{}", quoted_list(values)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// Whether `next` differs from `previous` only in owner references and finalizers (and what
/// the server keeps itself): upstream's `IsOnlyMutatingGCFields`.
fn only_gc_fields_change(previous: &Value, next: &Value) -> bool {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
                "creationTimestamp",
                "uid",
            ] {
                meta.remove(field);
            }
        }
        object
    };
    strip(previous) == strip(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(objects: &[(&str, Value)]) -> Policy {
        let mut policy = Policy::default();
        for (kind, object) in objects {
            policy.add(kind, object);
        }
        policy
    }

    fn robot() -> UserInfo {
        UserInfo::service_account("team", "robot")
    }

    /// The robot holds `rules` in `team` through a Role and a RoleBinding.
    fn holding(rules: Value) -> Vec<(&'static str, Value)> {
        vec![
            (
                "Role",
                json!({"metadata": {"name": "held", "namespace": "team"}, "rules": rules}),
            ),
            (
                "RoleBinding",
                json!({"metadata": {"name": "held", "namespace": "team"},
                       "roleRef": {"kind": "Role", "name": "held"},
                       "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}]}),
            ),
        ]
    }

    fn role(namespace: &str, rules: Value) -> Value {
        json!({"metadata": {"name": "new", "namespace": namespace}, "rules": rules})
    }

    #[test]
    fn a_role_within_what_the_user_holds_is_written_and_one_beyond_it_is_refused() {
        let p = policy(&holding(json!([
            {"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]},
        ])));
        let within = role(
            "team",
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                   {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]}]),
        );
        assert_eq!(confirm(&p, &robot(), "Role", "team", &within, None), Ok(()));
        let beyond = role(
            "team",
            json!([{"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "delete"]}]),
        );
        assert_eq!(
            confirm(&p, &robot(), "Role", "team", &beyond, None),
            Err(Refusal::Forbidden(
                "user \"system:serviceaccount:team:robot\" (groups=[\"system:serviceaccounts\" \
                 \"system:serviceaccounts:team\" \"system:authenticated\"]) is attempting to \
                 grant RBAC permissions not currently held:\n\
                 {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n\
                 {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
                    .into()
            ))
        );
        assert!(
            confirm(&p, &robot(), "Role", "elsewhere", &within, None).is_err(),
            "held in team only"
        );
        assert_eq!(
            confirm(&p, &UserInfo::admin(), "Role", "elsewhere", &beyond, None),
            Ok(()),
            "system:masters"
        );
    }

    #[test]
    fn escalate_and_bind_let_a_user_grant_what_it_does_not_hold() {
        let mut objects = holding(json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "verbs": ["bind"], "resourceNames": ["admin"]},
        ]));
        objects.push((
            "ClusterRole",
            json!({"metadata": {"name": "admin"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        ));
        objects.push((
            "ClusterRole",
            json!({"metadata": {"name": "other"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        ));
        let p = policy(&objects);
        let secrets = role(
            "team",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]),
        );
        assert_eq!(
            confirm(&p, &robot(), "Role", "team", &secrets, None),
            Ok(())
        );
        let binding = |role: &str| {
            json!({"metadata": {"name": "b", "namespace": "team"},
                   "roleRef": {"kind": "ClusterRole", "name": role, "apiGroup": "rbac.authorization.k8s.io"},
                   "subjects": [{"kind": "User", "name": "someone"}]})
        };
        assert_eq!(
            confirm(&p, &robot(), "RoleBinding", "team", &binding("admin"), None),
            Ok(())
        );
        assert!(matches!(
            confirm(&p, &robot(), "RoleBinding", "team", &binding("other"), None),
            Err(Refusal::Forbidden(_))
        ));
        assert_eq!(
            confirm(
                &p,
                &robot(),
                "RoleBinding",
                "team",
                &binding("absent"),
                None
            ),
            Err(Refusal::RoleNotFound("clusterroles", "absent".into()))
        );
    }

    #[test]
    fn an_aggregation_rule_needs_every_permission() {
        let p = policy(&holding(
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        ));
        let aggregated = json!({"metadata": {"name": "agg"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}});
        // Held in team only: cluster-wide the robot holds nothing.
        assert!(confirm(&p, &robot(), "ClusterRole", "", &aggregated, None).is_err());
        let mut everything = holding(json!([]));
        everything.push((
            "ClusterRole",
            json!({"metadata": {"name": "all"}, "rules": [
                {"apiGroups": ["*"], "resources": ["*"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        ));
        everything.push((
            "ClusterRoleBinding",
            json!({"metadata": {"name": "all"}, "roleRef": {"kind": "ClusterRole", "name": "all"},
                   "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}]}),
        ));
        let p = policy(&everything);
        assert_eq!(
            confirm(&p, &robot(), "ClusterRole", "", &aggregated, None),
            Err(Refusal::Forbidden(
                "must have cluster-admin privileges to use an aggregationRule".into()
            )),
            "every resource, but not every verb (and not escalate)"
        );
    }

    #[test]
    fn names_subresources_and_urls_are_covered_as_upstream_covers_them() {
        let owner = PolicyRule {
            verbs: vec!["get".into()],
            api_groups: vec!["".into()],
            resources: vec!["*/status".into(), "configmaps".into()],
            resource_names: vec!["a".into()],
            non_resource_urls: Vec::new(),
        };
        let part = |resource: &str, names: &[&str]| PolicyRule {
            verbs: vec!["get".into()],
            api_groups: vec!["".into()],
            resources: vec![resource.into()],
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            non_resource_urls: Vec::new(),
        };
        assert!(covers(&owner, &part("pods/status", &["a"])));
        assert!(covers(&owner, &part("configmaps", &["a"])));
        assert!(
            !covers(&owner, &part("configmaps", &[])),
            "every name is more than one"
        );
        assert!(!covers(&owner, &part("configmaps", &["b"])));
        assert!(!covers(&owner, &part("pods", &["a"])));
        let urls = rule(&[], &[], &["get"], &["/metrics*"]);
        assert!(covers(&urls, &rule(&[], &[], &["get"], &["/metrics/x"])));
        assert!(!covers(&urls, &rule(&[], &[], &["get"], &["/healthz"])));
    }

    #[test]
    fn a_write_of_owner_references_or_finalizers_alone_is_not_checked() {
        let p = Policy::default();
        let before = role(
            "team",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        );
        let mut after = before.clone();
        after["metadata"]["finalizers"] = json!(["x"]);
        assert_eq!(
            confirm(&p, &robot(), "Role", "team", &after, Some(&before)),
            Ok(())
        );
        after["metadata"]["labels"] = json!({"a": "b"});
        assert!(confirm(&p, &robot(), "Role", "team", &after, Some(&before)).is_err());
    }
}
