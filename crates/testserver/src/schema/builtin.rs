//! The schemas of the built-in kinds the test server serves, from the Kubernetes OpenAPI that
//! `k8s-openapi` carries (its `schemars` feature), with every subschema inline and no
//! descriptions. They say which fields each kind declares, at any depth, so that an unknown field
//! of a Deployment or a Service is found where apiserver's typed decoding finds it
//! (`spec.template.spec.containers[0].portz`). `CustomResourceDefinition`, whose schema is
//! recursive, has none: [`prune_typed`] finds its unknown fields by decoding it as the typed
//! object instead, as apiserver does.

use std::collections::HashMap;
use std::sync::OnceLock;

use k8s_openapi::api::{apps, coordination, core, networking, policy, rbac};
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::Value;

/// The schemas by API group, then kind.
type Schemas = HashMap<&'static str, HashMap<&'static str, Value>>;

/// The schema of the built-in `kind` of API group `group` (`""` for core), if it has one.
pub fn schema(group: &str, kind: &str) -> Option<&'static Value> {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(all).get(group)?.get(kind)
}

fn all() -> Schemas {
    const RBAC: &str = crate::auth::RBAC_GROUP;
    let mut schemas = Schemas::new();
    for (group, kind, schema) in [
        ("", "Namespace", of::<core::v1::Namespace>()),
        ("", "Service", of::<core::v1::Service>()),
        ("", "ConfigMap", of::<core::v1::ConfigMap>()),
        ("", "Secret", of::<core::v1::Secret>()),
        ("", "Endpoints", of::<core::v1::Endpoints>()),
        ("", "Pod", of::<core::v1::Pod>()),
        ("", "ServiceAccount", of::<core::v1::ServiceAccount>()),
        ("", "Event", of::<core::v1::Event>()),
        ("apps", "Deployment", of::<apps::v1::Deployment>()),
        ("apps", "ReplicaSet", of::<apps::v1::ReplicaSet>()),
        ("apps", "StatefulSet", of::<apps::v1::StatefulSet>()),
        (
            "policy",
            "PodDisruptionBudget",
            of::<policy::v1::PodDisruptionBudget>(),
        ),
        (
            "networking.k8s.io",
            "Ingress",
            of::<networking::v1::Ingress>(),
        ),
        (
            "networking.k8s.io",
            "NetworkPolicy",
            of::<networking::v1::NetworkPolicy>(),
        ),
        (
            "coordination.k8s.io",
            "Lease",
            of::<coordination::v1::Lease>(),
        ),
        (RBAC, "ClusterRole", of::<rbac::v1::ClusterRole>()),
        (
            RBAC,
            "ClusterRoleBinding",
            of::<rbac::v1::ClusterRoleBinding>(),
        ),
        (RBAC, "Role", of::<rbac::v1::Role>()),
        (RBAC, "RoleBinding", of::<rbac::v1::RoleBinding>()),
    ] {
        schemas.entry(group).or_default().insert(kind, schema);
    }
    schemas
}

/// Removes from `obj` the fields that decoding it as the typed `T` drops, and returns their
/// paths, sorted. An object that does not decode as `T` at all (a value of the wrong kind) keeps
/// everything: its values are for validation to refuse.
pub fn prune_typed<T: serde::de::DeserializeOwned + serde::Serialize>(
    obj: &mut Value,
) -> Vec<String> {
    let Ok(typed) = serde_json::from_value::<T>(obj.clone()) else {
        return Vec::new();
    };
    let Ok(kept) = serde_json::to_value(&typed) else {
        return Vec::new();
    };
    let mut pruned = Vec::new();
    drop_missing(obj, &kept, "", &mut pruned);
    pruned.sort();
    pruned
}

/// Removes what `kept` lacks from `value` (a null counts as absent either way).
fn drop_missing(value: &mut Value, kept: &Value, path: &str, pruned: &mut Vec<String>) {
    match (value, kept) {
        (Value::Object(map), Value::Object(kept)) => map.retain(|key, value| {
            let at = super::child(path, key);
            match kept.get(key) {
                Some(kept) => {
                    drop_missing(value, kept, &at, pruned);
                    true
                }
                None if value.is_null() => true,
                None => {
                    pruned.push(at);
                    false
                }
            }
        }),
        (Value::Array(list), Value::Array(kept)) => {
            for (i, (value, kept)) in list.iter_mut().zip(kept).enumerate() {
                drop_missing(value, kept, &super::index(path, i), pruned);
            }
        }
        _ => {}
    }
}

/// `T`'s schema, every subschema inline, without descriptions.
fn of<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    strip(&mut schema);
    schema
}

/// Removes the `description`s and the meta-schema: only the structure is used.
fn strip(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("description");
            map.remove("$schema");
            for value in map.values_mut() {
                strip(value);
            }
        }
        Value::Array(list) => list.iter_mut().for_each(strip),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unknown_fields_of_a_deployment_are_found_at_any_depth_and_known_ones_kept() {
        let schema = schema("apps", "Deployment").expect("Deployment has a schema");
        let mut deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicass": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "nonsense": 1},
                    "spec": {"containers": [{
                        "name": "web", "image": "nginx", "portz": 80,
                        "ports": [{"containerPort": 80}],
                        "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}
                    }]}
                },
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}
            }
        });
        let pruned = crate::schema::prune(schema, &mut deployment);
        assert_eq!(
            pruned,
            [
                "spec.replicass",
                "spec.template.metadata.nonsense",
                "spec.template.spec.containers[0].portz"
            ]
        );
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0],
            json!({"name": "web", "image": "nginx", "ports": [{"containerPort": 80}],
                   "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}})
        );
        assert_eq!(
            deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
            "25%"
        );
    }

    #[test]
    fn unknown_fields_of_a_crd_are_found_by_its_typed_decoding() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let mut crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.org", "creationTimestamp": null},
            "spec": {
                "group": "example.org", "scope": "Namespaced",
                "names": {"kind": "Thing", "plural": "things"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true, "servd": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object",
                                 "x-kubernetes-preserve-unknown-field": true,
                                 "properties": {"size": {"type": "integer", "default": 1,
                                                         "maximum": 5}}}
                    }}}
                }]
            }
        });
        let before = crd.clone();
        let pruned = prune_typed::<CustomResourceDefinition>(&mut crd);
        assert_eq!(
            pruned,
            [
                "spec.versions[0].schema.openAPIV3Schema.properties.spec.x-kubernetes-preserve-unknown-field",
                "spec.versions[0].servd"
            ]
        );
        let mut expected = before;
        let version = &mut expected["spec"]["versions"][0];
        version.as_object_mut().map(|v| v.remove("servd"));
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]
            .as_object_mut()
            .map(|s| s.remove("x-kubernetes-preserve-unknown-field"));
        assert_eq!(crd, expected, "everything else is kept as written");

        let mut wrong_kind = json!({"spec": {"versions": "v1"}});
        assert!(prune_typed::<CustomResourceDefinition>(&mut wrong_kind).is_empty());
    }

    #[test]
    fn every_built_in_kind_but_the_crd_has_a_schema_declaring_its_own_fields() {
        for info in crate::resources::builtins() {
            let found = schema(&info.group, &info.kind);
            if info.kind == "CustomResourceDefinition" {
                assert!(found.is_none());
                continue;
            }
            let found = found.unwrap_or_else(|| panic!("{} has no schema", info.kind));
            let properties = found["properties"].as_object().expect("properties");
            assert!(
                properties.contains_key("apiVersion") && properties.contains_key("metadata"),
                "{}: {properties:?}",
                info.kind
            );
        }
    }
}
