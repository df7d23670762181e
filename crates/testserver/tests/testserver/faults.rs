//! Fault injection through the Rust handle and the admin endpoint: errors, unreachability, latency.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use super::support::{client, client_without_retry, code, http, server};

#[tokio::test]
async fn error_rate_unreachable_and_heal_through_the_rust_handle() {
    let server = server(&["mgmt", "c1"]).await;
    let api: Api<ConfigMap> =
        Api::namespaced(client_without_retry(&server, "mgmt").await, "default");
    let other: Api<ConfigMap> =
        Api::namespaced(client_without_retry(&server, "c1").await, "default");
    let faults = server.faults("mgmt");

    faults.set_error_rate(0.5, 500);
    let codes: Vec<u16> = futures::future::join_all((0..4).map(|_| async {
        api.list(&Default::default())
            .await
            .err()
            .map(|_| 500)
            .unwrap_or(200)
    }))
    .await;
    assert_eq!(
        codes.iter().filter(|c| **c == 500).count(),
        2,
        "half of the requests fail: {codes:?}"
    );
    faults.set_error_rate(1.0, 429);
    assert_eq!(code(api.get("x").await), 429);
    other
        .list(&Default::default())
        .await
        .expect("other clusters are unaffected");

    faults.heal();
    faults.set_unreachable(true);
    assert_eq!(code(api.list(&Default::default()).await), 503);
    faults.heal();
    api.list(&Default::default()).await.expect("healed");

    // With its default retry policy kube-rs rides out a short outage on its own.
    let retrying: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    faults.set_error_rate(0.5, 503);
    retrying
        .list(&Default::default())
        .await
        .expect("retried past injected 503s");
    faults.heal();

    faults.set_latency(Duration::from_millis(300));
    let start = Instant::now();
    api.list(&Default::default()).await.expect("slow list");
    assert!(start.elapsed() >= Duration::from_millis(300));
    server.shutdown().await;
}

#[tokio::test]
async fn admin_endpoint_sets_faults_and_manages_clusters() {
    let server = server(&["mgmt"]).await;
    let (status, body) = http(
        &server,
        "POST",
        "/admin/clusters/mgmt/faults",
        r#"{"errorRate": 1.0, "errorStatus": 503}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let api: Api<ConfigMap> =
        Api::namespaced(client_without_retry(&server, "mgmt").await, "default");
    assert_eq!(code(api.list(&Default::default()).await), 503);
    let (_, body) = http(&server, "GET", "/admin/clusters/mgmt/faults", "").await;
    assert!(body.contains("\"errorRate\":1.0"), "{body}");
    http(
        &server,
        "POST",
        "/admin/clusters/mgmt/faults",
        r#"{"heal": true}"#,
    )
    .await;
    api.list(&Default::default()).await.expect("healed");

    assert_eq!(
        http(&server, "POST", "/admin/clusters", r#"{"name": "extra"}"#)
            .await
            .0,
        201
    );
    let (_, list) = http(&server, "GET", "/admin/clusters", "").await;
    assert!(list.contains("extra"), "{list}");
    let (_, kubeconfig) = http(&server, "GET", "/admin/kubeconfig", "").await;
    assert!(kubeconfig.contains("/clusters/extra"), "{kubeconfig}");
    assert_eq!(
        http(&server, "DELETE", "/admin/clusters/extra", "").await.0,
        200
    );
    assert_eq!(http(&server, "GET", "/clusters/extra/api", "").await.0, 404);
    assert_eq!(
        http(&server, "POST", "/admin/clusters/missing/faults", "{}")
            .await
            .0,
        404
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_audit_log_records_each_request_of_its_cluster_with_its_query() {
    use kube::api::ListParams;
    let server = server(&["mgmt", "c1"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "c1").await, "kube-system");
    api.list(&ListParams::default().fields("metadata.name=only"))
        .await
        .expect("list");
    assert_eq!(code(api.get("missing").await), 404);
    let c1 = server.audit("c1");
    let requests: Vec<(&str, &str, &str)> = c1
        .iter()
        .filter(|e| e.path.contains("configmaps"))
        .map(|e| (e.method.as_str(), e.path.as_str(), e.query.as_str()))
        .collect();
    assert_eq!(
        requests,
        [
            (
                "GET",
                "/api/v1/namespaces/kube-system/configmaps",
                "&fieldSelector=metadata.name%3Donly"
            ),
            (
                "GET",
                "/api/v1/namespaces/kube-system/configmaps/missing",
                ""
            ),
        ]
    );
    assert!(
        server
            .audit("mgmt")
            .iter()
            .all(|e| !e.path.contains("configmaps")),
        "requests of c1 were recorded for mgmt"
    );
    assert!(server.audit("no-such-cluster").is_empty());
}

#[tokio::test]
async fn an_unreachable_cluster_still_changes_inside_and_shows_it_once_reachable() {
    let server = server(&["mgmt", "c1"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client_without_retry(&server, "c1").await, "work");
    let inside = server.inside("c1").expect("c1 exists");
    let config_map = |value: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "work"}, "data": {"v": value}})
    };
    inside.put(config_map("1")).expect("created inside");
    let before = api.get("a").await.expect("visible");
    let version = before.metadata.resource_version.clone().unwrap_or_default();

    server.faults("c1").set_unreachable(true);
    assert_eq!(code(api.get("a").await), 503);
    inside
        .put(config_map("2"))
        .expect("replaced inside, whatever its version");
    let b = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "b", "namespace": "work"}});
    inside.put(b).expect("created inside");
    assert!(inside
        .delete("v1", "ConfigMap", "work", "b")
        .expect("deleted"));
    assert!(!inside.delete("v1", "ConfigMap", "work", "b").expect("gone"));
    assert!(inside
        .put(serde_json::json!({"apiVersion": "v9", "kind": "Nothing",
        "metadata": {"name": "x"}}))
        .is_err());

    server.faults("c1").set_unreachable(false);
    let after = api.get("a").await.expect("reachable again");
    assert_eq!(
        after.data.unwrap_or_default().get("v").map(String::as_str),
        Some("2")
    );
    assert_ne!(after.metadata.resource_version.unwrap_or_default(), version);
    assert_eq!(code(api.get("b").await), 404);
    server.shutdown().await;
}
