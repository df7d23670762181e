//! The schemas of the built-in kinds the test server serves, from the Kubernetes OpenAPI that
//! `k8s-openapi` carries (its `schemars` feature), with the strategic merge patch strategies of
//! Kubernetes' types ([`PATCH_STRATEGIES`]) and the list map keys that server-side apply names
//! their items by ([`LIST_MAPS`], [`KEY_DEFAULTS`]). Each kind's schema is kept in two
//! forms: structural ([`schema`]: every subschema inline, no descriptions), which says which
//! fields each kind declares at any depth, so that an unknown field of a Deployment or a Service
//! is found where apiserver's typed decoding finds it (`spec.template.spec.containers[0].portz`)
//! and a strategic merge patch knows each list's merge key; and as OpenAPI components
//! ([`openapi`]), which `/openapi/v3` publishes. `CustomResourceDefinition`, whose schema is
//! recursive, has none: [`prune_typed`] finds its unknown fields by decoding it as the typed
//! object instead, as apiserver does.

use std::collections::HashMap;
use std::sync::OnceLock;

use k8s_openapi::api::{
    apps, autoscaling, batch, coordination, core, discovery, networking, policy, rbac,
};
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

/// The schemas by API group, then kind.
type Schemas = HashMap<&'static str, HashMap<&'static str, Value>>;

/// The schema of the built-in `kind` of API group `group` (`""` for core), if it has one.
pub fn schema(group: &str, kind: &str) -> Option<&'static Value> {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(all).get(group)?.get(kind)
}

fn all() -> Schemas {
    let mut schemas = Schemas::new();
    for (group, kind, generated) in KINDS {
        schemas
            .entry(*group)
            .or_default()
            .insert(*kind, generated().structural());
    }
    schemas
}

/// The OpenAPI v3 form of the built-in `kind` of `group`, as kube-apiserver publishes it: the
/// name of its schema, and the schemas it refers to (itself included) by
/// `#/components/schemas/<name>`, with descriptions and the patch strategies.
pub fn openapi(group: &str, kind: &str) -> Option<&'static (String, Map<String, Value>)> {
    type Published = HashMap<&'static str, HashMap<&'static str, (String, Map<String, Value>)>>;
    static PUBLISHED: OnceLock<Published> = OnceLock::new();
    PUBLISHED
        .get_or_init(|| {
            let mut published = Published::new();
            for (group, kind, generated) in KINDS {
                published
                    .entry(*group)
                    .or_default()
                    .insert(*kind, generated().components());
            }
            published
        })
        .get(group)?
        .get(kind)
}

const RBAC: &str = crate::auth::RBAC_GROUP;

/// A built-in kind: its API group, its kind, and the generator of its schema.
type Kind = (&'static str, &'static str, fn() -> Generated);

/// Each built-in kind with a schema.
const KINDS: &[Kind] = &[
    ("", "Namespace", generate::<core::v1::Namespace>),
    ("", "Node", generate::<core::v1::Node>),
    ("", "Service", generate::<core::v1::Service>),
    ("", "ConfigMap", generate::<core::v1::ConfigMap>),
    ("", "Secret", generate::<core::v1::Secret>),
    ("", "Endpoints", generate::<core::v1::Endpoints>),
    ("", "Pod", generate::<core::v1::Pod>),
    ("", "ServiceAccount", generate::<core::v1::ServiceAccount>),
    ("", "Event", generate::<core::v1::Event>),
    ("apps", "Deployment", generate::<apps::v1::Deployment>),
    ("apps", "ReplicaSet", generate::<apps::v1::ReplicaSet>),
    ("apps", "StatefulSet", generate::<apps::v1::StatefulSet>),
    ("apps", "DaemonSet", generate::<apps::v1::DaemonSet>),
    ("batch", "Job", generate::<batch::v1::Job>),
    ("batch", "CronJob", generate::<batch::v1::CronJob>),
    (
        "autoscaling",
        "HorizontalPodAutoscaler",
        generate::<autoscaling::v2::HorizontalPodAutoscaler>,
    ),
    (
        "policy",
        "PodDisruptionBudget",
        generate::<policy::v1::PodDisruptionBudget>,
    ),
    (
        "networking.k8s.io",
        "Ingress",
        generate::<networking::v1::Ingress>,
    ),
    (
        "networking.k8s.io",
        "NetworkPolicy",
        generate::<networking::v1::NetworkPolicy>,
    ),
    (
        "coordination.k8s.io",
        "Lease",
        generate::<coordination::v1::Lease>,
    ),
    (
        "discovery.k8s.io",
        "EndpointSlice",
        generate::<discovery::v1::EndpointSlice>,
    ),
    (RBAC, "ClusterRole", generate::<rbac::v1::ClusterRole>),
    (
        RBAC,
        "ClusterRoleBinding",
        generate::<rbac::v1::ClusterRoleBinding>,
    ),
    (RBAC, "Role", generate::<rbac::v1::Role>),
    (RBAC, "RoleBinding", generate::<rbac::v1::RoleBinding>),
];

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

/// `T`'s schema as schemars generates it from `k8s-openapi`, with the strategic merge patch
/// strategies of [`PATCH_STRATEGIES`] on the fields they name.
struct Generated {
    name: String,
    root: Value,
    definitions: Map<String, Value>,
}

fn generate<T: JsonSchema>() -> Generated {
    let mut root = SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    let mut definitions = match root.as_object_mut() {
        Some(r) => {
            r.remove("$schema");
            match r.remove("$defs") {
                Some(Value::Object(definitions)) => definitions,
                _ => Map::new(),
            }
        }
        None => Map::new(),
    };
    let name = T::schema_name().to_string();
    for (definition, field, strategy, key) in PATCH_STRATEGIES {
        let Some(property) = holder(&mut root, &mut definitions, &name, definition)
            .and_then(|d| d.pointer_mut(&format!("/properties/{field}")))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        property.insert("x-kubernetes-patch-strategy".into(), (*strategy).into());
        if let Some(key) = key {
            property.insert("x-kubernetes-patch-merge-key".into(), (*key).into());
        }
    }
    for (definition, field, keys) in LIST_MAPS {
        if let Some(property) = holder(&mut root, &mut definitions, &name, definition)
            .and_then(|d| d.pointer_mut(&format!("/properties/{field}")))
            .and_then(Value::as_object_mut)
        {
            property.insert("x-kubernetes-list-type".into(), "map".into());
            property.insert("x-kubernetes-list-map-keys".into(), json!(keys));
        }
    }
    for (definition, field, default) in KEY_DEFAULTS {
        if let Some(property) = holder(&mut root, &mut definitions, &name, definition)
            .and_then(|d| d.pointer_mut(&format!("/properties/{field}")))
            .and_then(Value::as_object_mut)
        {
            property.insert("default".into(), (*default).into());
        }
    }
    Generated {
        name,
        root,
        definitions,
    }
}

/// The schema named `definition`: the generated root's, or one of its definitions.
fn holder<'a>(
    root: &'a mut Value,
    definitions: &'a mut Map<String, Value>,
    name: &str,
    definition: &str,
) -> Option<&'a mut Value> {
    if definition == name {
        Some(root)
    } else {
        definitions.get_mut(definition)
    }
}

impl Generated {
    /// Every subschema inline, without descriptions: what pruning walks.
    fn structural(mut self) -> Value {
        strip(&mut self.root);
        for definition in self.definitions.values_mut() {
            strip(definition);
        }
        inline(&mut self.root, &self.definitions, &mut Vec::new());
        self.root
    }

    /// The schemas by name, referring to one another under `#/components/schemas/`; a reference
    /// with a description beside it is wrapped in `allOf`, as kube-apiserver writes it.
    fn components(self) -> (String, Map<String, Value>) {
        let mut components = self.definitions;
        components.insert(self.name.clone(), self.root);
        for schema in components.values_mut() {
            to_components(schema);
        }
        (self.name, components)
    }
}

fn to_components(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref") {
                if let Some(name) = reference.strip_prefix("#/$defs/") {
                    *reference = format!("#/components/schemas/{name}");
                }
                if map.len() > 1 {
                    if let Some(reference) = map.remove("$ref") {
                        map.insert("allOf".into(), json!([{"$ref": reference}]));
                    }
                }
            }
            for value in map.values_mut() {
                to_components(value);
            }
        }
        Value::Array(list) => list.iter_mut().for_each(to_components),
        _ => {}
    }
}

/// Replaces every `$ref` to a definition by the definition itself. A definition met again inside
/// itself (none of the kinds here has one) becomes an open schema.
fn inline(
    schema: &mut Value,
    definitions: &serde_json::Map<String, Value>,
    within: &mut Vec<String>,
) {
    match schema {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
                .map(str::to_string)
            {
                map.remove("$ref");
                if within.contains(&name) {
                    map.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
                    return;
                }
                if let Some(Value::Object(definition)) = definitions.get(&name) {
                    for (k, v) in definition {
                        map.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                within.push(name);
                for value in map.values_mut() {
                    inline(value, definitions, within);
                }
                within.pop();
                return;
            }
            for value in map.values_mut() {
                inline(value, definitions, within);
            }
        }
        Value::Array(list) => list.iter_mut().for_each(|v| inline(v, definitions, within)),
        _ => {}
    }
}

/// The strategic merge patch strategy of each field that has one, by definition and field, with
/// its merge key: the `patchStrategy` and `patchMergeKey` tags of Kubernetes' Go types (k8s.io/api
/// and apimachinery), which its OpenAPI publishes as `x-kubernetes-patch-strategy` and
/// `x-kubernetes-patch-merge-key`. Every other list is replaced whole by a patch.
#[rustfmt::skip]
const PATCH_STRATEGIES: &[(&str, &str, &str, Option<&str>)] = &[
    (META_V1_OBJECT_META, "finalizers", "merge", None),
    (META_V1_OBJECT_META, "ownerReferences", "merge", Some("uid")),
    ("io.k8s.api.core.v1.Container", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.Container", "ports", "merge", Some("containerPort")),
    ("io.k8s.api.core.v1.Container", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "merge", Some("name")),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", "merge", Some("containerPort")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeDevices", "merge", Some("devicePath")),
    ("io.k8s.api.core.v1.EphemeralContainer", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.ContainerStatus", "allocatedResourcesStatus", "merge", Some("name")),
    ("io.k8s.api.core.v1.ContainerStatus", "volumeMounts", "merge", Some("mountPath")),
    ("io.k8s.api.core.v1.PodSpec", "containers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "resourceClaims", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "schedulingGates", "merge", Some("name")),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", "merge", Some("topologyKey")),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.PodStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.PodStatus", "hostIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodStatus", "podIPs", "merge", Some("ip")),
    ("io.k8s.api.core.v1.PodStatus", "resourceClaimStatuses", "merge,retainKeys", Some("name")),
    ("io.k8s.api.core.v1.NamespaceStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.NodeSpec", "podCIDRs", "merge", None),
    ("io.k8s.api.core.v1.NodeStatus", "addresses", "merge", Some("type")),
    ("io.k8s.api.core.v1.NodeStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.core.v1.ServiceAccount", "secrets", "merge", Some("name")),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", "merge", Some("port")),
    ("io.k8s.api.core.v1.ServiceStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.DeploymentSpec", "strategy", "retainKeys", None),
    ("io.k8s.api.apps.v1.DeploymentStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.ReplicaSetStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.StatefulSetStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.apps.v1.DaemonSetStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.batch.v1.JobStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus", "conditions", "merge", Some("type")),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "selector", "replace", None),
    ("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", "conditions", "merge", Some("type")),
];

/// The lists whose items server-side apply tells apart by more than their strategic merge key:
/// the `+listType=map` and `+listMapKey` markers of Kubernetes' Go types, which its OpenAPI
/// publishes as `x-kubernetes-list-type` and `x-kubernetes-list-map-keys` (a Service's port 53
/// over TCP and over UDP are two items; a strategic merge patch still merges them by `port`).
#[rustfmt::skip]
const LIST_MAPS: &[(&str, &str, &[&str])] = &[
    ("io.k8s.api.core.v1.Container", "ports", &["containerPort", "protocol"]),
    ("io.k8s.api.core.v1.EphemeralContainer", "ports", &["containerPort", "protocol"]),
    ("io.k8s.api.core.v1.ServiceSpec", "ports", &["port", "protocol"]),
    ("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints", &["topologyKey", "whenUnsatisfiable"]),
];

/// The defaults of the key fields of [`LIST_MAPS`], which kube-apiserver's OpenAPI v3 publishes
/// and server-side apply names an item by when it leaves the field out.
#[rustfmt::skip]
const KEY_DEFAULTS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.ContainerPort", "protocol", "TCP"),
    ("io.k8s.api.core.v1.ServicePort", "protocol", "TCP"),
];

const META_V1_OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

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
    fn every_patch_strategy_lands_on_its_field() {
        fn found(s: &Value, field: &str, strategy: &str, key: Option<&str>) -> bool {
            let here = s.pointer(&format!("/properties/{field}")).is_some_and(|p| {
                p["x-kubernetes-patch-strategy"] == strategy
                    && p.get("x-kubernetes-patch-merge-key")
                        .and_then(Value::as_str)
                        == key
            });
            here || match s {
                Value::Object(m) => m.values().any(|v| found(v, field, strategy, key)),
                Value::Array(l) => l.iter().any(|v| found(v, field, strategy, key)),
                _ => false,
            }
        }
        let schemas = all();
        for (definition, field, strategy, key) in PATCH_STRATEGIES {
            assert!(
                schemas
                    .values()
                    .flat_map(HashMap::values)
                    .any(|s| found(s, field, strategy, *key)),
                "{definition}.{field} is in no schema"
            );
        }
        let service = schema("", "Service").expect("Service");
        assert_eq!(
            service.pointer("/properties/spec/properties/ports/x-kubernetes-patch-merge-key"),
            Some(&Value::from("port"))
        );
    }

    #[test]
    fn every_list_map_and_key_default_lands_on_its_field() {
        fn found(s: &Value, field: &str, test: &dyn Fn(&Value) -> bool) -> bool {
            s.pointer(&format!("/properties/{field}")).is_some_and(test)
                || match s {
                    Value::Object(m) => m.values().any(|v| found(v, field, test)),
                    Value::Array(l) => l.iter().any(|v| found(v, field, test)),
                    _ => false,
                }
        }
        let schemas = all();
        let anywhere = |field: &str, test: &dyn Fn(&Value) -> bool| {
            schemas
                .values()
                .flat_map(HashMap::values)
                .any(|s| found(s, field, test))
        };
        for (definition, field, keys) in LIST_MAPS {
            let is_map = |p: &Value| {
                p["x-kubernetes-list-type"] == "map"
                    && p["x-kubernetes-list-map-keys"] == json!(keys)
            };
            assert!(
                anywhere(field, &is_map),
                "{definition}.{field} is in no schema"
            );
        }
        for (definition, field, default) in KEY_DEFAULTS {
            let defaults = |p: &Value| p["default"] == *default;
            assert!(
                anywhere(field, &defaults),
                "{definition}.{field} is in no schema"
            );
        }
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
