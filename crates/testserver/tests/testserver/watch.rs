//! Watches: kube-rs watcher and reflector through dropped streams and forced 410s, history expiry,
//! bookmarks and filtered watches.

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use serde_json::json;
use sluice_testserver::Config;

use super::support::{client, eventually, server, server_with};

/// The resourceVersion a list of ConfigMaps reports (where a watch from now starts).
async fn list_version(api: &Api<ConfigMap>) -> String {
    api.list(&Default::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": "x"}}})).expect("cm")
}

#[tokio::test]
async fn reflector_survives_dropped_streams_and_forced_gone_without_losing_events() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(api.clone(), watcher::Config::default()).default_backoff(),
    )
    .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    let names = |reader: &reflector::Store<ConfigMap>| -> BTreeSet<String> {
        reader
            .state()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            // Every namespace holds the cluster's root CA, as on a real cluster.
            .filter(|n| n != "kube-root-ca.crt")
            .collect()
    };
    let want = |n: usize| (0..n).map(|i| format!("cm-{i}")).collect::<BTreeSet<_>>();

    api.create(&PostParams::default(), &cm("cm-0"))
        .await
        .expect("create");
    eventually(10, "cm-0 in the store", || async {
        (names(&reader) == want(1)).then_some(())
    })
    .await;

    let faults = server.faults("mgmt");
    faults.drop_watches();
    api.create(&PostParams::default(), &cm("cm-1"))
        .await
        .expect("create while dropped");
    eventually(10, "cm-1 after a dropped stream", || async {
        (names(&reader) == want(2)).then_some(())
    })
    .await;

    faults.force_gone_next_watch();
    faults.drop_watches();
    api.create(&PostParams::default(), &cm("cm-2"))
        .await
        .expect("create while gone");
    api.delete("cm-0", &DeleteParams::default())
        .await
        .expect("delete while gone");
    let expected: BTreeSet<String> = ["cm-1", "cm-2"].iter().map(|s| s.to_string()).collect();
    eventually(10, "re-list after 410", || async {
        (names(&reader) == expected).then_some(())
    })
    .await;
    assert!(
        !faults.settings().gone_next_watch,
        "the forced 410 was consumed"
    );
    task.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn expired_resource_version_gets_an_error_event_with_410() {
    let server = server_with(Config {
        watch_history: 5,
        ..Config::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let first = api
        .create(&PostParams::default(), &cm("old"))
        .await
        .expect("create");
    let old_rv = first.metadata.resource_version.clone().expect("rv");
    for i in 0..10 {
        api.create(&PostParams::default(), &cm(&format!("n{i}")))
            .await
            .expect("create");
    }
    let mut events = api
        .watch(&WatchParams::default(), &old_rv)
        .await
        .expect("watch starts")
        .boxed();
    match events.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    // A recent version replays what followed it.
    let recent = list_version(&api).await;
    let mut events = api
        .watch(&WatchParams::default(), &recent)
        .await
        .expect("watch")
        .boxed();
    api.patch(
        "n3",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "b"}})),
    )
    .await
    .expect("patch");
    match events.next().await {
        Some(Ok(WatchEvent::Modified(c))) => assert_eq!(c.metadata.name.as_deref(), Some("n3")),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    server.shutdown().await;
}

/// A watch that falls behind (`Faults::stall_watches`) sends nothing until released, then what
/// it missed; one that missed more than its feed holds ends; and after a compaction a watch
/// from an older version is answered `410 Gone` (as after etcd's compaction).
#[tokio::test]
async fn a_stalled_watch_catches_up_or_ends_and_a_compacted_history_answers_gone() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let faults = server.faults("mgmt");
    let rv = list_version(&api).await;
    let mut events = api
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    faults.stall_watches(true);
    assert!(faults.settings().watches_stalled);
    api.create(&PostParams::default(), &cm("while-stalled"))
        .await
        .expect("create");
    let quiet = tokio::time::timeout(std::time::Duration::from_millis(500), events.next()).await;
    assert!(quiet.is_err(), "a stalled watch sent {quiet:?}");
    faults.stall_watches(false);
    match events.next().await {
        Some(Ok(WatchEvent::Added(c))) => {
            assert_eq!(c.metadata.name.as_deref(), Some("while-stalled"))
        }
        other => panic!("expected ADDED once released, got {other:?}"),
    }

    // More than a feed holds (1,024 changes) while stalled: the stream ends once released.
    faults.stall_watches(true);
    for i in 0..1100 {
        api.create(&PostParams::default(), &cm(&format!("burst-{i}")))
            .await
            .expect("create");
    }
    faults.stall_watches(false);
    let mut delivered = 0;
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            event.expect("event");
            delivered += 1;
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream did not end");
    assert!(delivered < 1100, "it delivered {delivered} of 1,100");

    // Compacted: a watch from before is gone, one from now runs.
    server.compact("mgmt");
    let mut events = api
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch starts")
        .boxed();
    match events.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    let now = list_version(&api).await;
    let mut events = api
        .watch(&WatchParams::default(), &now)
        .await
        .expect("watch")
        .boxed();
    api.create(&PostParams::default(), &cm("after"))
        .await
        .expect("create");
    match events.next().await {
        Some(Ok(WatchEvent::Added(c))) => assert_eq!(c.metadata.name.as_deref(), Some("after")),
        other => panic!("expected ADDED after the compaction, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn filtered_watch_reports_objects_leaving_the_selector_and_bookmarks() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let rv = list_version(&api).await;
    let mut wp = WatchParams::default().labels("app=x");
    wp.bookmarks = true;
    let mut events = api.watch(&wp, &rv).await.expect("watch").boxed();
    api.create(&PostParams::default(), &cm("a"))
        .await
        .expect("create");
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .expect("relabel");
    let mut seen = Vec::new();
    let mut bookmark = false;
    let mut advanced = false;
    while let Some(ev) = events.next().await {
        match ev.expect("event") {
            WatchEvent::Added(c) => {
                seen.push(format!("ADDED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Deleted(c) => {
                seen.push(format!("DELETED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Modified(c) => {
                seen.push(format!("MODIFIED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Bookmark(_) => bookmark = true,
            WatchEvent::Error(e) => panic!("error event {e:?}"),
        }
        if seen.len() >= 2 && bookmark {
            break;
        }
        if seen.len() == 2 && !advanced {
            // An unrelated change advances the cluster version, which a bookmark then reports.
            let other: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "labels": {"app": "q"}}})).expect("cm");
            api.create(&PostParams::default(), &other)
                .await
                .expect("create other");
            advanced = true;
        }
    }
    assert_eq!(seen[..2], ["ADDED a".to_string(), "DELETED a".to_string()]);
    assert!(bookmark);
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_then_changes() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    api.create(&PostParams::default(), &cm("before"))
        .await
        .expect("create");
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().streaming_lists();
    let task = tokio::spawn(
        reflector(writer, watcher(api.clone(), config).default_backoff())
            .applied_objects()
            .for_each(|_| async {}),
    );
    reader
        .wait_until_ready()
        .await
        .expect("initial events end with a bookmark");
    let mut initial: Vec<String> = reader
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    initial.sort();
    assert_eq!(initial, ["before", "kube-root-ca.crt"]);
    api.create(&PostParams::default(), &cm("after"))
        .await
        .expect("create");
    eventually(10, "second object", || async {
        (reader.state().len() == 3).then_some(())
    })
    .await;
    task.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn a_bookmark_reports_changes_of_other_kinds_after_every_event_of_its_own() {
    let server = server(&["mgmt"]).await;
    let client = client(&server, "mgmt").await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, "default");
    let rv = list_version(&configmaps).await;
    let wp = WatchParams {
        bookmarks: true,
        ..WatchParams::default()
    };
    let mut events = configmaps.watch(&wp, &rv).await.expect("watch").boxed();
    let created = configmaps
        .create(&PostParams::default(), &cm("mine"))
        .await
        .expect("create");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other"}}),
    )
    .expect("secret");
    let other = secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let rv_of = |rv: Option<String>| -> u64 { rv.and_then(|r| r.parse().ok()).expect("rv") };
    let mine = rv_of(created.metadata.resource_version);
    let other = rv_of(other.metadata.resource_version);
    let mut added = false;
    let watched = async {
        while let Some(event) = events.next().await {
            match event.expect("event") {
                WatchEvent::Added(c) => {
                    assert_eq!(rv_of(c.metadata.resource_version), mine);
                    added = true;
                }
                WatchEvent::Bookmark(b) => {
                    let at: u64 = b.metadata.resource_version.parse().expect("bookmark rv");
                    assert!(
                        added || at < mine,
                        "a bookmark at {at} came before the event at {mine}"
                    );
                    if at >= other {
                        return;
                    }
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), watched)
        .await
        .expect("a bookmark reaches the Secret's resourceVersion within 10 s");
    assert!(added, "the ConfigMap's event came");
    server.shutdown().await;
}

/// client-go's metadata client and kube-rs's `Api<PartialObjectMeta<K>>` ask for the metadata
/// only (`Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`): a get,
/// a list and a watch answer with it, never the object's contents; the form of the other shape
/// is a 406, as kube-apiserver answers.
#[tokio::test]
async fn metadata_only_reads_carry_the_metadata_and_nothing_else() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::PartialObjectMeta;
    const OBJECT: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let server = server(&["mgmt"]).await;
    let client = client(&server, "mgmt").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let secret: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "labels": {"app": "x"}, "annotations": {"note": "kept"}},
        "stringData": {"password": "hunter2"}}))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create");

    // kube-rs: get, list and a watcher, metadata only
    let metadata: Api<PartialObjectMeta<Secret>> = Api::namespaced(client, "default");
    let got = metadata.get("s").await.expect("get");
    assert_eq!(got.metadata.annotations.unwrap_or_default()["note"], "kept");
    let listed = metadata.list(&Default::default()).await.expect("list");
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    assert_eq!(names, ["s"]);
    let before_delete = listed.metadata.resource_version.expect("list version");
    let mut watch = watcher(metadata, watcher::Config::default().labels("app=x")).boxed();
    let mut first = Vec::new();
    while let Some(event) = watch.next().await {
        match event.expect("event") {
            watcher::Event::InitApply(m) => first.push(m.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(first, ["s"]);
    secrets
        .delete("s", &DeleteParams::default())
        .await
        .expect("delete");
    let deleted = loop {
        match watch.next().await.expect("open").expect("event") {
            watcher::Event::Delete(m) => break m,
            _ => continue,
        }
    };
    assert_eq!(
        deleted.metadata.annotations.unwrap_or_default()["note"],
        "kept"
    );
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create again");

    // on the wire: the metadata-only kinds, no contents
    let token = server.admin_token("mgmt").expect("token");
    let raw = |accept: &str, path: &str| {
        let headers = format!("Authorization: Bearer {token}\r\nAccept: {accept}\r\n");
        let path = format!("/clusters/mgmt/api/v1/namespaces/default/secrets{path}");
        let server = &server;
        async move { super::support::http_raw(server, "GET", &path, &headers, "").await }
    };
    let (code, _, body) = raw(OBJECT, "/s").await;
    assert_eq!(code, 200, "{body}");
    let object: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(object["kind"], "PartialObjectMetadata");
    assert_eq!(object["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(object["metadata"]["name"], "s");
    assert!(object.get("data").is_none(), "{body}");
    let (code, _, body) = raw(LIST, "").await;
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert!(list["metadata"]["resourceVersion"].is_string());
    let (code, _, body) = raw(OBJECT, "?watch=true&timeoutSeconds=1").await;
    assert_eq!(code, 200);
    assert!(body.contains(r#""kind":"PartialObjectMetadata""#), "{body}");
    assert!(
        !body.contains("aHVudGVyMg") && !body.contains("hunter2"),
        "{body}"
    );
    // changes replayed from a version: the metadata-only form first, then whole objects
    // (the two forms of one change are kept apart)
    let replay = format!("?watch=true&resourceVersion={before_delete}&timeoutSeconds=1");
    let (code, _, body) = raw(OBJECT, &replay).await;
    assert_eq!(code, 200);
    assert!(body.contains(r#""type":"DELETED""#), "{body}");
    assert!(body.contains(r#""type":"ADDED""#), "{body}");
    assert_eq!(
        body.matches(r#""kind":"PartialObjectMetadata""#).count(),
        2,
        "{body}"
    );
    assert!(!body.contains("aHVudGVyMg"), "{body}");
    let (code, _, body) = raw("application/json", &replay).await;
    assert_eq!(code, 200);
    assert_eq!(body.matches(r#""kind":"Secret""#).count(), 2, "{body}");
    assert_eq!(body.matches("aHVudGVyMg").count(), 2, "{body}");
    for (accept, path, message) in [
        (
            LIST,
            "/s",
            "you requested PartialObjectMetadataList, but the requested object is not a list",
        ),
        (
            OBJECT,
            "",
            "you requested PartialObjectMetadata, but the requested object is a list",
        ),
    ] {
        let (code, _, body) = raw(accept, path).await;
        assert_eq!(code, 406, "{body}");
        let status: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(status["reason"], "NotAcceptable");
        assert_eq!(status["message"], message);
    }
    server.shutdown().await;
}
