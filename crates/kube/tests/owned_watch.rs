//! `watch::watch_owned` read through `watch::drained` against the API test server: the watch is
//! read as fast as the server sends, whenever its consumer reads what it yields, so that a
//! consumer busy with other work (the applier between batches) never makes the server close the
//! watch and the watch list every object again.

mod support;

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{json, Value};
use sluice_kube::apply;
use sluice_kube::watch::{self, OwnedChanges, Written};
use sluice_testserver::{Config, TestServer};

/// A labelled ConfigMap whose metadata alone is large (a 10 kB annotation): thousands of them
/// are more than the sockets between the server and the client buffer.
fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"},
                        "annotations": {"padding": "x".repeat(10_000)}}})
}

fn name_of(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_consumer_is_busy_keeps_up_and_lists_nothing_again() {
    const WRITTEN: usize = 5_000;
    let server = TestServer::start(Config {
        clusters: vec!["mgmt".into()],
        // A short history: a watch that falls behind by more (a consumer that stops reading
        // for the whole burst) is answered 410 and lists again; a reader that keeps up is not.
        watch_history: 1_500,
        ..Config::default()
    })
    .await
    .expect("test server starts");
    let client = support::client(&server, "mgmt").await;
    let kind = apply::resolve(&client, "v1", "ConfigMap")
        .await
        .expect("ConfigMaps are served");
    let changes = watch::drained(watch::watch_owned(
        client,
        kind,
        Some("default"),
        "app",
        (name_of, "writer"),
        Written::default(),
        None,
    ));
    let mut changes = std::pin::pin!(changes);
    let first = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("the first list completes");
    assert_eq!(
        first.map(|batch| batch.expect("no error")),
        Some(OwnedChanges {
            listed: Some(0),
            ..OwnedChanges::default()
        })
    );

    // The consumer reads nothing while thousands of objects are written, paced as a busy
    // management cluster writes them.
    for chunk in 0..WRITTEN / 100 {
        for i in 0..100 {
            server
                .create_object("mgmt", config_map(&format!("cm-{chunk:02}-{i:02}")))
                .expect("create");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Then one is deleted by someone else: the next batch tells it, and no list came before.
    let inside = server.inside("mgmt").expect("mgmt");
    assert!(inside
        .delete("v1", "ConfigMap", "default", "cm-00-00")
        .expect("delete"));
    let next = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("the deletion is told");
    let next = next.expect("the watch goes on").expect("no error");
    assert_eq!(next.listed, None, "listed again: {next:?}");
    assert_eq!(
        next.gone
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>(),
        ["cm-00-00"]
    );
    let lists = server
        .audit("mgmt")
        .iter()
        .filter(|e| e.method == "GET" && e.path.ends_with("/configmaps"))
        .filter(|e| !e.query.contains("watch=true"))
        .count();
    assert_eq!(lists, 1, "the first list only");
}
