//! kube-controller-manager's ClusterRole aggregation controller: a ClusterRole with an
//! `aggregationRule` has as its `rules` the rules of every other ClusterRole one of its
//! `clusterRoleSelectors` selects, selector by selector, the selected roles in name order, each
//! rule once (the first time it is seen). What is written into such a role's `rules` by anyone
//! else is replaced. The bootstrap policy's `admin`, `edit` and `view` are built so, from the
//! `system:aggregate-to-*` roles and from each other (`view` is labelled to aggregate into
//! `edit`, and `edit` into `admin`).
//!
//! Any ClusterRole's change reconciles every aggregated ClusterRole (`Work::Aggregation`), as
//! the upstream controller enqueues them all; the rules are the pure [`aggregated_rules`],
//! written as upstream writes them, by a forced server-side apply of `rules` alone.

use serde_json::{json, Value};

use crate::auth::PolicyRule;
use crate::object::meta_str;
use crate::resources::GroupResource;

use super::rollout::Work;
use super::workloads::selects;
use super::write::{Owner, Subresource};

pub const CLUSTER_ROLES: (&str, &str) = ("rbac.authorization.k8s.io", "clusterroles");
/// The field manager of the controller's writes.
const MANAGER: &str = "clusterrole-aggregation-controller";

/// What a change of `object` gives the aggregation controller to look at.
pub fn work_for(resource: &GroupResource) -> Option<Work> {
    (resource.0 == CLUSTER_ROLES.0 && resource.1 == CLUSTER_ROLES.1).then_some(Work::Aggregation)
}

/// The rules `role` aggregates from `roles` (every ClusterRole stored), or `None` when it has no
/// `aggregationRule`.
pub fn aggregated_rules(role: &Value, roles: &[&Value]) -> Option<Vec<Value>> {
    let selectors = role.pointer("/aggregationRule/clusterRoleSelectors")?;
    let name = meta_str(role, "name");
    let mut sorted: Vec<&Value> = roles
        .iter()
        .copied()
        .filter(|r| meta_str(r, "name") != name)
        .collect();
    sorted.sort_by(|a, b| meta_str(a, "name").cmp(meta_str(b, "name")));
    let mut rules: Vec<Value> = Vec::new();
    let mut seen: Vec<PolicyRule> = Vec::new();
    for selector in selectors.as_array().into_iter().flatten() {
        for selected in sorted.iter().filter(|r| {
            let empty = serde_json::Map::new();
            let labels = r
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            selects(selector, labels)
        }) {
            for rule in selected
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let parsed = parse(rule);
                if !seen.contains(&parsed) {
                    seen.push(parsed);
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(rules)
}

/// A rule as the authorizer reads it: a missing list and an empty one are the same, as they are
/// to kube-controller-manager's semantic comparison.
fn parse(rule: &Value) -> PolicyRule {
    serde::Deserialize::deserialize(rule).unwrap_or_default()
}

/// Whether `current` (a role's `rules`, perhaps absent) already says `wanted`.
fn same_rules(current: Option<&Value>, wanted: &[Value]) -> bool {
    let current: Vec<PolicyRule> = current
        .and_then(Value::as_array)
        .map(|rules| rules.iter().map(parse).collect())
        .unwrap_or_default();
    current == wanted.iter().map(parse).collect::<Vec<_>>()
}

impl super::State {
    /// Writes every aggregated ClusterRole's rules where they differ from what it aggregates.
    pub(super) fn reconcile_aggregation(&mut self) {
        let resource: GroupResource = (CLUSTER_ROLES.0.to_string(), CLUSTER_ROLES.1.to_string());
        let Some(info) = self
            .registry
            .lookup(CLUSTER_ROLES.0, "v1", CLUSTER_ROLES.1)
            .cloned()
        else {
            return;
        };
        let roles: Vec<Value> = self
            .list(&resource, None, None)
            .map(|(_, role)| role.clone())
            .collect();
        let all: Vec<&Value> = roles.iter().collect();
        for role in &roles {
            let Some(wanted) = aggregated_rules(role, &all) else {
                continue;
            };
            if same_rules(role.get("rules"), &wanted) {
                continue;
            }
            let name = meta_str(role, "name").to_string();
            // The controller applies the rules alone, forcing ownership of them: its managed
            // fields are an `Apply` of `rules`, as upstream's server-side apply writes them.
            let config = json!({
                "apiVersion": format!("{}/v1", CLUSTER_ROLES.0),
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": wanted,
            });
            let schema = crate::fields::schema_of(&info, "v1");
            let Ok(merged) = crate::fields::apply(
                Some(role),
                &config,
                MANAGER,
                true,
                schema,
                info.status,
                Subresource::Main,
            ) else {
                continue;
            };
            // A write refused now is made again on the next ClusterRole change.
            let _ = self.update(&info, "", &name, merged, Subresource::Main, &Owner::Applied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str, labels: Value, rules: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    fn aggregate(name: &str, selectors: Value) -> Value {
        json!({"metadata": {"name": name}, "aggregationRule": {"clusterRoleSelectors": selectors}})
    }

    #[test]
    fn an_aggregated_role_takes_each_selected_roles_rules_once_in_selector_then_name_order() {
        let read_pods = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let read_cms = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]});
        let write_cms =
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]});
        let b = role("b", json!({"view": "true"}), json!([read_pods, read_cms]));
        let a = role("a", json!({"view": "true"}), json!([read_cms]));
        let c = role("c", json!({"edit": "true"}), json!([write_cms, read_pods]));
        let other = role(
            "d",
            json!({}),
            json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]),
        );
        let target = aggregate(
            "target",
            json!([{"matchLabels": {"edit": "true"}}, {"matchLabels": {"view": "true"}}]),
        );
        let roles = [&b, &a, &c, &other, &target];
        let rules = aggregated_rules(&target, &roles).expect("aggregated");
        assert_eq!(rules, vec![write_cms, read_pods, read_cms]);
        assert_eq!(aggregated_rules(&b, &roles), None, "not aggregated");
    }

    #[test]
    fn a_role_is_not_aggregated_into_itself_and_an_empty_selector_selects_every_other() {
        let rule = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]});
        let mut everything = aggregate("everything", json!([{}]));
        everything["metadata"]["labels"] = json!({});
        everything["rules"] = json!([{"apiGroups": ["x"], "resources": ["y"], "verbs": ["z"]}]);
        let one = role("one", json!({"k": "v"}), json!([rule]));
        let rules = aggregated_rules(&everything, &[&everything, &one]).expect("aggregated");
        assert_eq!(rules, vec![rule], "its own rules are replaced, not kept");
        let none = aggregate("none", json!([{"matchLabels": {"absent": "true"}}]));
        assert_eq!(aggregated_rules(&none, &[&none, &one]), Some(Vec::new()));
    }

    #[test]
    fn rules_that_differ_only_by_an_absent_or_empty_list_are_the_same() {
        let with_empty = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": []}]);
        let without = vec![json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})];
        assert!(same_rules(Some(&with_empty), &without));
        assert!(same_rules(None, &[]), "no rules and an empty list");
        assert!(!same_rules(Some(&with_empty), &[]));
    }
}
