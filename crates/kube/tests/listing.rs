//! `apply::visit_labelled_metadata_in` against the API test server: metadata only, a page at a
//! time, every labelled object once, and a listing whose continue token expired starts again.

mod support;

use std::collections::BTreeMap;

use serde_json::json;
use sluice_kube::apply::{self, Listed, METADATA_PAGE};
use sluice_testserver::{Config, TestServer};

fn config_map(name: &str, labelled: bool) -> serde_json::Value {
    let labels = if labelled {
        json!({"app": "x"})
    } else {
        json!({})
    };
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": labels},
           "data": {"payload": "x".repeat(1000)}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_labelled_objects_metadata_once_a_page_at_a_time_and_again_after_an_expired_token() {
    const LABELLED: usize = 1_100;
    let server = TestServer::start(Config {
        clusters: vec!["mgmt".into()],
        ..Config::default()
    })
    .await
    .expect("test server starts");
    for i in 0..LABELLED {
        server
            .create_object("mgmt", config_map(&format!("cm-{i:04}"), true))
            .expect("create");
    }
    for i in 0..10 {
        server
            .create_object("mgmt", config_map(&format!("other-{i}"), false))
            .expect("create");
    }
    let client = support::client(&server, "mgmt").await;
    let kind = apply::resolve(&client, "v1", "ConfigMap")
        .await
        .expect("ConfigMaps are served");
    let labels = BTreeMap::from([("app".to_string(), "x".to_string())]);

    let mut names = Vec::new();
    apply::visit_labelled_metadata_in(&client, &kind, Some("default"), &labels, |listed| {
        match listed {
            Listed::Object(object) => {
                assert_eq!(object["kind"], "ConfigMap", "{object}");
                assert_eq!(object["apiVersion"], "v1", "{object}");
                assert!(object.get("data").is_none(), "metadata only: {object}");
                assert_eq!(object["metadata"]["labels"]["app"], "x", "{object}");
                names.push(
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                );
            }
            Listed::Restarted => panic!("nothing expired"),
        }
    })
    .await
    .expect("listed");
    let want: Vec<String> = (0..LABELLED).map(|i| format!("cm-{i:04}")).collect();
    assert_eq!(names, want, "each once, in the server's order");
    let pages: Vec<String> = server
        .audit("mgmt")
        .into_iter()
        .filter(|e| e.method == "GET" && e.path == "/api/v1/namespaces/default/configmaps")
        .map(|e| e.query)
        .collect();
    assert_eq!(
        pages.len(),
        LABELLED.div_ceil(METADATA_PAGE as usize),
        "{pages:?}"
    );
    assert!(pages.iter().all(|q| q.contains("limit=500")), "{pages:?}");
    assert!(
        pages[1..].iter().all(|q| q.contains("continue=")),
        "{pages:?}"
    );

    // The history compacted after the first page: the next page's token has expired (410), and
    // the listing starts again from the first.
    let (mut seen, mut restarts) = (0, 0);
    apply::visit_labelled_metadata_in(&client, &kind, Some("default"), &labels, |listed| {
        match listed {
            Listed::Object(_) => {
                seen += 1;
                if seen == METADATA_PAGE as usize && restarts == 0 {
                    server
                        .create_object("mgmt", config_map("moves-the-version", false))
                        .expect("create");
                    server.compact("mgmt");
                }
            }
            Listed::Restarted => {
                restarts += 1;
                seen = 0;
            }
        }
    })
    .await
    .expect("listed after starting again");
    assert_eq!((restarts, seen), (1, LABELLED));
    server.shutdown().await;
}
