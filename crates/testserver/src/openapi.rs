//! A minimal OpenAPI v3 surface: the root index and one document per group version listing each
//! kind's PATCH operation with the `fieldValidation` parameter. That is what kubectl checks to
//! decide that the server validates fields itself, so `kubectl create -f`/`apply -f` work without
//! downloading schemas. No schemas are published (`kubectl explain` does not work).

use serde_json::{json, Map, Value};

use crate::resources::Registry;

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

/// `GET /openapi/v3/<gv>`: PATCH operations tagged with their group-version-kind.
pub fn group_version(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
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
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        let param = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        let op = json!({
            "operationId": format!("patch{}", r.kind),
            "parameters": [param("dryRun"), param("fieldManager"), param("fieldValidation"), param("force")],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
        });
        paths.insert(path, json!({"patch": op}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": paths, "components": {"schemas": {}}}),
    )
}
