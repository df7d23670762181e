//! Server-side apply: create-on-apply, managers and conflicts, force, field removal, status apply.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::support::{client, server};

fn managers(cm: &ConfigMap) -> Vec<(String, String)> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn apply_tracks_managers_conflicts_and_force() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let cfg = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": data});

    let created = api
        .patch(
            "app",
            &PatchParams::apply("alice"),
            &Patch::Apply(cfg(json!({"a": "1", "b": "2"}))),
        )
        .await
        .expect("create on apply");
    assert_eq!(
        managers(&created),
        vec![("alice".to_string(), "Apply".to_string())]
    );

    let shared = api
        .patch(
            "app",
            &PatchParams::apply("bob"),
            &Patch::Apply(cfg(json!({"a": "1"}))),
        )
        .await
        .expect("same value, no conflict");
    assert_eq!(managers(&shared).len(), 2);

    match api
        .patch(
            "app",
            &PatchParams::apply("bob"),
            &Patch::Apply(cfg(json!({"a": "9"}))),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(
                s.message.contains("conflict with \"alice\": .data.a"),
                "{}",
                s.message
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let forced = api
        .patch(
            "app",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(cfg(json!({"a": "9"}))),
        )
        .await
        .expect("forced");
    assert_eq!(
        forced
            .data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("9")
    );

    // alice stops applying `b`; nobody else owns it, so it is removed. `a` now belongs to bob only.
    let dropped = api
        .patch(
            "app",
            &PatchParams::apply("alice"),
            &Patch::Apply(cfg(json!({"c": "3"}))),
        )
        .await
        .expect("alice reapplies");
    let data = dropped.data.unwrap_or_default();
    assert_eq!(data.get("b"), None);
    assert_eq!(data.get("a").map(String::as_str), Some("9"));
    assert_eq!(data.get("c").map(String::as_str), Some("3"));

    // An update by another manager takes the field it changes.
    api.patch(
        "app",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"c": "4"}})),
    )
    .await
    .expect("merge patch");
    match api
        .patch(
            "app",
            &PatchParams::apply("alice"),
            &Patch::Apply(cfg(json!({"c": "3"}))),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409, "{}", s.message),
        other => panic!("expected a conflict with the updater, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn apply_to_status_changes_only_status() {
    let server = server(&["mgmt"]).await;
    let api: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client(&server, "mgmt").await, "default");
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
    api.patch("s", &PatchParams::apply("owner"), &Patch::Apply(svc))
        .await
        .expect("apply service");
    let status = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 1}]}, "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}});
    let got = api
        .patch_status(
            "s",
            &PatchParams::apply("lb").force(),
            &Patch::Apply(status),
        )
        .await
        .expect("apply status");
    assert_eq!(got.spec.and_then(|s| s.ports).map(|p| p[0].port), Some(80));
    let ip = got
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .map(|i| i[0].ip.clone());
    assert_eq!(ip, Some(Some("10.0.0.1".to_string())));
    server.shutdown().await;
}
