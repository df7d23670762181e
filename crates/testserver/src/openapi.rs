//! The OpenAPI v3 documents: the root index, and per group version the kinds' paths (list and
//! item, with `x-kubernetes-group-version-kind`; PATCH with the `fieldValidation` parameter) and
//! `components.schemas` holding each CustomResourceDefinition version's schema, named as
//! kube-apiserver names them (`io.projectsveltos.lib.v1beta1.EventTrigger`). That is what
//! `kubectl explain` reads (it finds the kind from a path's operation, then the schema carrying
//! that kind) and what `kubectl create/apply` check to leave field validation to the server.
//! Every built-in kind is published with Kubernetes 1.33's schemas from `k8s-openapi`, with their
//! descriptions and patch strategies (`schema::builtin::openapi`), under the names kube-apiserver
//! gives them (`io.k8s.api.apps.v1.Deployment`); `metadata` of a CRD kind refers to a short
//! ObjectMeta schema, in a document without a built-in kind.

use serde_json::{json, Map, Value};

use crate::resources::{Registry, ResourceInfo};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// `GET /openapi/v3`: one entry per served group version; `base` is the path the cluster's API is under.
pub fn root(base: &str, registry: &Registry, hash: u64) -> Value {
    let mut paths = Map::new();
    for r in registry.all() {
        for v in &r.versions {
            let gv = if r.group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{}/{v}", r.group)
            };
            let url = format!("{base}/openapi/v3/{gv}?hash={hash:016X}");
            paths.insert(gv, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// The name kube-apiserver gives the schema of a kind: the group's labels reversed, then the
/// version and the kind (`lib.projectsveltos.io`, `v1beta1`, `EventTrigger` ->
/// `io.projectsveltos.lib.v1beta1.EventTrigger`); core kinds are `io.k8s.api.core.<version>.<Kind>`.
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() {
        return format!("io.k8s.api.core.{version}.{kind}");
    }
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// `GET /openapi/v3/<gv>`: the kinds' operations and the CRD kinds' schemas. `crd` returns the
/// stored CustomResourceDefinition object of a name.
pub fn group_version<'a>(
    registry: &Registry,
    crd: impl Fn(&str) -> Option<&'a Value>,
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for r in registry
        .all()
        .iter()
        .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
    {
        let gvk = json!({"group": group, "version": version, "kind": r.kind});
        let list_path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        let builtin = match r.crd {
            Some(_) => None,
            None => crate::schema::builtin::openapi(group, &r.kind),
        };
        let schema = r
            .crd
            .as_deref()
            .and_then(&crd)
            .and_then(|c| crd_version_schema(c, version));
        let name = match builtin {
            Some((name, _)) => name.clone(),
            None => schema_name(group, version, &r.kind),
        };
        let reference = (schema.is_some() || builtin.is_some())
            .then(|| json!({"$ref": format!("#/components/schemas/{name}")}));
        paths.insert(list_path.clone(), json!({"get": list_operation(r, &gvk)}));
        paths.insert(
            format!("{list_path}/{{name}}"),
            json!({"get": get_operation(r, &gvk, reference.as_ref()), "patch": patch_operation(r, &gvk)}),
        );
        if let Some((name, components)) = builtin {
            for (component, schema) in components {
                schemas
                    .entry(component.clone())
                    .or_insert_with(|| schema.clone());
            }
            if let Some(root) = schemas.get_mut(name).and_then(Value::as_object_mut) {
                root.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
            }
        }
        if let Some(mut schema) = schema {
            if let Some(object) = schema.as_object_mut() {
                object.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
                if let Some(properties) =
                    object.get_mut("properties").and_then(Value::as_object_mut)
                {
                    let description = properties
                        .get("metadata")
                        .and_then(|m| m.get("description"))
                        .cloned()
                        .unwrap_or_else(|| json!("Standard object metadata."));
                    properties.insert(
                        "metadata".into(),
                        json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": description}),
                    );
                }
            }
            schemas.insert(schema_name(group, version, &r.kind), schema);
        }
    }
    if paths.is_empty() {
        return None;
    }
    if !schemas.is_empty() {
        schemas
            .entry(OBJECT_META.to_string())
            .or_insert_with(object_meta);
    }
    schemas.insert(
        PATCH.into(),
        json!({"type": "object", "description": "The body of a PATCH request, in the format its Content-Type names."}),
    );
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The `openAPIV3Schema` of one version of a CRD object, if it serves that version.
fn crd_version_schema(crd: &Value, version: &str) -> Option<Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        .cloned()
}

fn query(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

fn list_operation(r: &ResourceInfo, gvk: &Value) -> Value {
    json!({
        "operationId": format!("list{}", r.kind),
        "parameters": [query("labelSelector"), query("fieldSelector"), query("limit"), query("continue"), query("watch")],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "list",
        "x-kubernetes-group-version-kind": gvk,
    })
}

fn get_operation(r: &ResourceInfo, gvk: &Value, schema: Option<&Value>) -> Value {
    let mut ok = json!({"description": "OK"});
    if let Some(schema) = schema {
        ok["content"] = json!({"application/json": {"schema": schema}});
    }
    json!({
        "operationId": format!("read{}", r.kind),
        "responses": {"200": ok},
        "x-kubernetes-action": "get",
        "x-kubernetes-group-version-kind": gvk,
    })
}

/// The PATCH operation with the patch types the kind accepts: kubectl's client-side apply sends a
/// strategic merge patch computed from the published schema when the operation lists that type.
fn patch_operation(r: &ResourceInfo, gvk: &Value) -> Value {
    let mut types = vec![
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if r.crd.is_none() {
        types.push("application/strategic-merge-patch+json");
    }
    let body = json!({"$ref": format!("#/components/schemas/{PATCH}")});
    let content: Map<String, Value> = types
        .into_iter()
        .map(|t| (t.to_string(), json!({"schema": body})))
        .collect();
    json!({
        "operationId": format!("patch{}", r.kind),
        "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation"), query("force")],
        "requestBody": {"content": content, "required": true},
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": gvk,
    })
}

/// The ObjectMeta fields objects carry here, described in our words.
fn object_meta() -> Value {
    let string = |d: &str| json!({"type": "string", "description": d});
    let map = |d: &str| json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": d});
    json!({
        "type": "object",
        "description": "Metadata every persisted object has: identity, labels, annotations, and what the server maintains.",
        "properties": {
            "name": string("Name of the object, unique among objects of its kind in its namespace."),
            "generateName": string("Prefix from which the server generates a unique name when name is empty."),
            "namespace": string("Namespace of the object; empty for cluster-scoped objects."),
            "uid": string("Unique identifier the server assigns at creation."),
            "resourceVersion": string("Version of the object, changed by every write; used for optimistic concurrency and watches."),
            "generation": {"type": "integer", "format": "int64", "description": "Incremented by the server when the desired state (anything but metadata and status) changes."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description": "When the object was created."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description": "When deletion was requested; the object goes once its finalizers are removed."},
            "labels": map("Key/value pairs used to select objects."),
            "annotations": map("Key/value pairs for tools and controllers; not used to select objects."),
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Controllers that must finish cleanup before the object is deleted."},
            "ownerReferences": {"type": "array", "description": "Objects this object depends on; it is garbage collected when they are gone.",
                "items": {"type": "object", "required": ["apiVersion", "kind", "name", "uid"], "properties": {
                    "apiVersion": string("API version of the owner."),
                    "kind": string("Kind of the owner."),
                    "name": string("Name of the owner."),
                    "uid": string("UID of the owner."),
                    "controller": {"type": "boolean", "description": "True when the owner is the managing controller."},
                    "blockOwnerDeletion": {"type": "boolean", "description": "True when the owner cannot be deleted in the foreground before this object."}}}},
            "managedFields": {"type": "array", "description": "Which manager owns which fields, maintained by server-side apply.",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_follow_kube_apiserver() {
        assert_eq!(
            schema_name("lib.projectsveltos.io", "v1beta1", "EventTrigger"),
            "io.projectsveltos.lib.v1beta1.EventTrigger"
        );
        assert_eq!(
            schema_name("cluster.x-k8s.io", "v1beta1", "Cluster"),
            "io.x-k8s.cluster.v1beta1.Cluster"
        );
        assert_eq!(
            schema_name("", "v1", "ConfigMap"),
            "io.k8s.api.core.v1.ConfigMap"
        );
    }

    #[test]
    fn built_in_kinds_are_published_with_kubernetes_schemas_and_patch_strategies() {
        let registry = Registry::default();
        let doc = group_version(&registry, |_| None, "", "v1").expect("core v1 document");
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        for kind in [
            "ConfigMap",
            "Secret",
            "Namespace",
            "Service",
            "Pod",
            "ServiceAccount",
        ] {
            let name = format!("io.k8s.api.core.v1.{kind}");
            assert_eq!(
                schemas[&name]["x-kubernetes-group-version-kind"],
                json!([{"group": "", "version": "v1", "kind": kind}]),
                "{name}"
            );
        }
        let ports = &schemas["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "port");
        assert_eq!(
            ports["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.ServicePort"
        );
        assert!(schemas["io.k8s.api.core.v1.ServicePort"]["description"].is_string());
        // A reference with a description beside it is wrapped, as kube-apiserver writes it.
        let spec = &schemas["io.k8s.api.core.v1.Service"]["properties"]["spec"];
        assert_eq!(
            spec["allOf"],
            json!([{"$ref": "#/components/schemas/io.k8s.api.core.v1.ServiceSpec"}])
        );
        // Every reference resolves.
        let text = doc.to_string();
        for reference in text.split("\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap_or("");
            assert!(
                schemas.contains_key(name),
                "{name} is referred to but missing"
            );
        }
        // kubectl's client-side apply computes a strategic merge patch only where PATCH lists it.
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"];
        assert!(
            patch["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object(),
            "{patch}"
        );
        let apps = group_version(&registry, |_| None, "apps", "v1").expect("apps/v1 document");
        assert!(apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
        assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"].is_object());
    }

    #[test]
    fn a_crd_version_is_published_with_its_kind_and_paths() {
        let crd = crate::crds::sveltos_crds()
            .into_iter()
            .find(|c| c["metadata"]["name"] == "eventtriggers.lib.projectsveltos.io")
            .expect("EventTrigger CRD");
        let mut registry = Registry::default();
        registry.install(crate::resources::from_crd(&crd).expect("CRD defines a resource"));
        let lookup = |name: &str| (name == "eventtriggers.lib.projectsveltos.io").then_some(&crd);
        for version in ["v1beta1", "v1alpha1"] {
            let doc = group_version(&registry, lookup, "lib.projectsveltos.io", version)
                .expect("document");
            let name = format!("io.projectsveltos.lib.{version}.EventTrigger");
            let schema = &doc["components"]["schemas"][&name];
            assert_eq!(
                schema["x-kubernetes-group-version-kind"],
                json!([{"group": "lib.projectsveltos.io", "version": version, "kind": "EventTrigger"}])
            );
            assert_eq!(
                schema["properties"]["metadata"]["allOf"][0]["$ref"],
                format!("#/components/schemas/{OBJECT_META}")
            );
            assert!(doc["components"]["schemas"][OBJECT_META].is_object());
            let list =
                &doc["paths"][format!("/apis/lib.projectsveltos.io/{version}/eventtriggers")];
            assert_eq!(
                list["get"]["x-kubernetes-group-version-kind"]["kind"],
                "EventTrigger"
            );
            let item = &doc["paths"]
                [format!("/apis/lib.projectsveltos.io/{version}/eventtriggers/{{name}}")];
            assert_eq!(item["patch"]["x-kubernetes-action"], "patch");
            let content = &item["patch"]["requestBody"]["content"];
            assert!(
                content["application/merge-patch+json"].is_object(),
                "{content}"
            );
            assert!(
                content
                    .get("application/strategic-merge-patch+json")
                    .is_none(),
                "custom resources take no strategic merge patch: {content}"
            );
        }
        let alpha = group_version(&registry, lookup, "lib.projectsveltos.io", "v1alpha1")
            .expect("v1alpha1");
        assert_eq!(
            alpha["components"]["schemas"]["io.projectsveltos.lib.v1alpha1.EventTrigger"]
                ["properties"]["spec"]["properties"]["sourceClusterSelector"]["type"],
            "string"
        );
    }
}
