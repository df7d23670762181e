//! The services' client against the API test server, which offers HTTP/2 by ALPN as
//! kube-apiserver does: the client takes it, and watches that nobody reads never hold up the
//! other requests that share their connection.

mod support;

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchParams};
use kube::core::ObjectMeta;
use sluice_testserver::{Config, TestServer};

async fn server() -> TestServer {
    TestServer::start(Config {
        clusters: vec!["mgmt".into()],
        ..Config::default()
    })
    .await
    .expect("test server starts")
}

#[tokio::test]
async fn the_client_speaks_http2_to_a_server_that_offers_it() {
    let server = server().await;
    let client = support::client(&server, "mgmt").await;
    let request = http::Request::get("/version")
        .body(Vec::new())
        .expect("request builds");
    let response = client
        .send(request.map(Into::into))
        .await
        .expect("GET /version");
    assert_eq!(response.status(), http::StatusCode::OK);
    assert_eq!(response.version(), http::Version::HTTP_2);
}

/// Each unread watch holds what the server sent it up to its stream's window. Under hyper's
/// default windows (2 MiB a stream, 5 MiB a connection) three such watches take the whole
/// connection's window, and every later answer on the connection waits for them to be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_watches_never_hold_up_the_requests_beside_them() {
    const WATCHES: usize = 4;
    const CREATED: usize = 1_200;
    let server = server().await;
    let client = support::client(&server, "mgmt").await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut unread = Vec::new();
    for _ in 0..WATCHES {
        unread.push(
            api.watch(&WatchParams::default(), "0")
                .await
                .expect("a watch starts"),
        );
    }
    // 1,200 ConfigMaps of 8 kB each: 9.6 MB sent to each watch, more than any window.
    let data = std::collections::BTreeMap::from([("padding".to_string(), "x".repeat(8_000))]);
    let created = tokio::time::timeout(Duration::from_secs(30), async {
        for chunk in (0..CREATED).collect::<Vec<_>>().chunks(16) {
            let creates = chunk.iter().map(|i| {
                let object = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("padded-{i}")),
                        ..ObjectMeta::default()
                    },
                    data: Some(data.clone()),
                    ..ConfigMap::default()
                };
                let api = api.clone();
                async move { api.create(&PostParams::default(), &object).await }
            });
            for result in join_all(creates).await {
                result.expect("a create is answered");
            }
        }
    })
    .await;
    assert!(
        created.is_ok(),
        "the creates stalled behind {WATCHES} unread watches"
    );
    drop(unread);
}
