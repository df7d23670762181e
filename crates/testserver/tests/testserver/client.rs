//! kube-rs `Api` against the server: CRUD, validation, generation, status, finalizers, namespaces,
//! pagination, selectors and multiple clusters.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;

use super::support::{client, code, server};

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
        "data": {"k": name},
    }))
    .expect("valid configmap")
}

#[tokio::test]
async fn crud_with_resource_versions_and_conflicts() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let created = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .expect("create");
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(
        meta.generation, None,
        "the ConfigMap strategy sets no generation"
    );
    assert_eq!(
        code(api.create(&PostParams::default(), &cm("a", &[])).await),
        409
    );

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "v2".to_string())].into());
    let replaced = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .expect("replace");
    assert!(replaced.metadata.resource_version > created.metadata.resource_version);
    assert_eq!(
        replaced.metadata.generation, None,
        "a data change sets no generation on a ConfigMap"
    );
    // `changed` still carries the old resourceVersion.
    assert_eq!(
        code(api.replace("a", &PostParams::default(), &changed).await),
        409
    );

    let got = api.get("a").await.expect("get");
    assert_eq!(
        got.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("v2")
    );
    api.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(code(api.get("a").await), 404);
    assert_eq!(code(api.delete("a", &DeleteParams::default()).await), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn invalid_objects_get_422_with_a_status() {
    let server = server(&["mgmt"]).await;
    let ar = ApiResource::erase::<ConfigMap>(&());
    let api: Api<DynamicObject> =
        Api::namespaced_with(client(&server, "mgmt").await, "default", &ar);
    for (obj, field) in [
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "bad value"}}}),
            "metadata.labels",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
            "metadata.name",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Upper"}}),
            "metadata.name",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}),
            "kind",
        ),
        (
            json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "x"}}),
            "apiVersion",
        ),
    ] {
        let obj: DynamicObject = serde_json::from_value(obj).expect("deserializes");
        match api.create(&PostParams::default(), &obj).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(
                    (s.code, s.reason.as_str()),
                    (422, "Invalid"),
                    "{field}: {}",
                    s.message
                );
                assert!(
                    s.message.contains(field),
                    "{} should name {field}",
                    s.message
                );
            }
            other => panic!("{field}: expected 422, got {other:?}"),
        }
    }
    let missing_ns: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "nope");
    let missing_ns: Api<ConfigMap> = missing_ns;
    assert_eq!(
        code(
            missing_ns
                .create(&PostParams::default(), &cm("x", &[]))
                .await
        ),
        404
    );
    server.shutdown().await;
}

#[tokio::test]
async fn generation_and_status_subresource() {
    let server = server(&["mgmt"]).await;
    // A StatefulSet: no controller of the test server writes its status.
    let api: Api<StatefulSet> = Api::namespaced(client(&server, "mgmt").await, "default");
    let dep: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        "status": {"replicas": 7},
    }))
    .expect("deployment");
    let created = api
        .create(&PostParams::default(), &dep)
        .await
        .expect("create");
    assert_eq!(created.status, None, "status is dropped on create");
    let pp = PatchParams::default();
    let labelled = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .expect("label");
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata change keeps generation"
    );
    let scaled = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 9}})),
        )
        .await
        .expect("scale");
    assert_eq!(
        scaled.metadata.generation,
        Some(2),
        "spec change bumps generation"
    );
    assert_eq!(scaled.status, None, "main resource ignores status");

    let with_status = api
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({"status": {"replicas": 3}})),
        )
        .await
        .expect("patch_status");
    assert_eq!(with_status.status.as_ref().map(|s| s.replicas), Some(3));
    assert_eq!(
        with_status.metadata.generation,
        Some(2),
        "status change keeps generation"
    );
    let mut next = with_status.clone();
    next.status.as_mut().expect("status").ready_replicas = Some(2);
    next.spec.as_mut().expect("spec").replicas = Some(50);
    let replaced = api
        .replace_status("web", &PostParams::default(), &next)
        .await
        .expect("replace_status");
    assert_eq!(
        replaced.status.as_ref().and_then(|s| s.ready_replicas),
        Some(2)
    );
    assert_eq!(
        replaced.spec.and_then(|s| s.replicas),
        Some(3),
        "status update ignores spec"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_and_namespaces_cascade() {
    let server = server(&["mgmt"]).await;
    let c = client(&server, "mgmt").await;
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        )
        .expect("ns"),
    )
    .await
    .expect("create ns");
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "team");
    let mut held = cm("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held)
        .await
        .expect("create held");
    api.create(&PostParams::default(), &cm("plain", &[]))
        .await
        .expect("create plain");

    api.delete("held", &DeleteParams::default())
        .await
        .expect("delete held");
    let marked = api.get("held").await.expect("still there");
    assert!(marked.metadata.deletion_timestamp.is_some());

    nss.delete("team", &DeleteParams::default())
        .await
        .expect("delete ns");
    assert_eq!(
        code(api.get("plain").await),
        404,
        "namespace deletion removes contents"
    );
    let ns = nss
        .get("team")
        .await
        .expect("namespace waits for the held object");
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    assert_eq!(
        code(api.create(&PostParams::default(), &cm("new", &[])).await),
        403
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop finalizer");
    assert_eq!(code(api.get("held").await), 404);
    assert_eq!(
        code(nss.get("team").await),
        404,
        "empty terminating namespace goes away"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn pagination_and_selectors() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    for i in 0..25 {
        let env = ["prod", "dev", "qa"][i % 3];
        let mut labels = vec![("env", env)];
        if i % 5 == 0 {
            labels.push(("legacy", "yes"));
        }
        api.create(&PostParams::default(), &cm(&format!("cm-{i:02}"), &labels))
            .await
            .expect("create");
    }
    let mut names = Vec::new();
    // `env` leaves out the root CA ConfigMap the cluster keeps in every namespace.
    let mut lp = ListParams::default().labels("env").limit(10);
    let mut pages = 0;
    let mut page = api.list(&lp).await.expect("page");
    let first_rv = page.metadata.resource_version.clone();
    loop {
        pages += 1;
        assert_eq!(
            page.metadata.resource_version, first_rv,
            "pages share the snapshot version"
        );
        names.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        match page.metadata.continue_.clone().filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => break,
        }
        page = api.list(&lp).await.expect("page");
    }
    assert_eq!(pages, 3);
    assert_eq!(
        names,
        (0..25).map(|i| format!("cm-{i:02}")).collect::<Vec<_>>()
    );

    let count = |sel: &'static str| {
        let api = api.clone();
        async move {
            api.list(&ListParams::default().labels(sel))
                .await
                .expect("list")
                .items
                .len()
        }
    };
    assert_eq!(count("env=prod").await, 9);
    // `!=` and `!` also match the root CA ConfigMap, which has neither label.
    assert_eq!(count("env!=prod").await, 17);
    assert_eq!(count("env in (dev,qa)").await, 16);
    assert_eq!(count("env notin (dev,qa),legacy").await, 2);
    assert_eq!(count("!legacy").await, 21);
    assert_eq!(count("legacy,env=dev").await, 1);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=cm-07"))
        .await
        .expect("field selector");
    assert_eq!(by_name.items.len(), 1);
    let not_name = api
        .list(&ListParams::default().fields("metadata.namespace=default,metadata.name!=cm-07"))
        .await
        .expect("fields");
    assert_eq!(not_name.items.len(), 25, "24 and the root CA");
    assert_eq!(
        code(api.list(&ListParams::default().labels("env in (")).await),
        400
    );
    server.shutdown().await;
}

#[tokio::test]
async fn clusters_are_isolated_and_can_be_added_and_removed() {
    let server = server(&["mgmt", "c1"]).await;
    let mgmt: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let c1: Api<ConfigMap> = Api::namespaced(client(&server, "c1").await, "default");
    mgmt.create(&PostParams::default(), &cm("only-mgmt", &[]))
        .await
        .expect("create");
    assert_eq!(code(c1.get("only-mgmt").await), 404);

    server.add_cluster("c2").await;
    let kubeconfig = server.kubeconfig_yaml();
    assert!(kubeconfig.contains("current-context: mgmt"), "{kubeconfig}");
    assert!(server.kubeconfig_for("c2").contains("/clusters/c2"));
    let c2: Api<ConfigMap> = Api::namespaced(client(&server, "c2").await, "default");
    c2.create(&PostParams::default(), &cm("x", &[]))
        .await
        .expect("create in added cluster");
    server.remove_cluster("c2").await;
    assert_eq!(code(c2.get("x").await), 404);
    assert_eq!(
        server.object_count("mgmt"),
        31,
        "4 built-in namespaces with their default ServiceAccount and root CA ConfigMap, the kubernetes Service, Endpoints and EndpointSlice, the Node, the 14 bootstrap ClusterRoles and ClusterRoleBindings (admin, edit, view and their three system:aggregate-to-* roles among them), one configmap"
    );
    server.shutdown().await;
}

/// Names of this process's threads, from /proc.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim_end().to_string())
        .collect()
}

#[tokio::test]
async fn serves_on_its_own_named_threads_when_asked() {
    let server = super::support::server_with(sluice_testserver::Config {
        clusters: vec!["mgmt".into()],
        worker_threads: Some(1),
        port_per_cluster: true,
        ..Default::default()
    })
    .await;
    let name = sluice_testserver::THREAD_NAME;
    assert!(
        thread_names().iter().any(|t| t == name),
        "a thread named {name} serves: {:?}",
        thread_names()
    );
    // This test's runtime has one thread: requests answered here are served by the other one.
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    api.create(&PostParams::default(), &cm("a", &[]))
        .await
        .expect("create");
    server.add_cluster("added").await;
    let added: Api<ConfigMap> = Api::namespaced(client(&server, "added").await, "default");
    assert_eq!(code(added.get("a").await), 404, "the added cluster answers");
    let url = server.cluster_url("mgmt");
    // Dropped inside this runtime, the server's runtime stops without blocking it.
    drop(server);
    let gone = refused_within_5s(&url).await;
    assert!(gone, "nothing answers at {url} after the drop");
}

/// Whether connecting to the `https://host:port` of `url` is refused (within 5 s).
async fn refused_within_5s(url: &str) -> bool {
    let addr = url.trim_start_matches("https://").to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if tokio::net::TcpStream::connect(&addr).await.is_err() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn later_pages_show_the_first_pages_snapshot_until_it_is_compacted() {
    let server = super::support::server_with(sluice_testserver::Config {
        watch_history: 20,
        ..sluice_testserver::Config::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    for name in ["a", "c", "e", "g"] {
        api.create(&PostParams::default(), &cm(name, &[("env", "x")]))
            .await
            .expect("create");
    }
    let first = api
        .list(&ListParams::default().labels("env").limit(2))
        .await
        .expect("first page");
    let names = |list: &kube::api::ObjectList<ConfigMap>| -> Vec<String> {
        list.items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    };
    assert_eq!(names(&first), ["a", "c"]);
    let token = first.metadata.continue_.clone().expect("more to come");

    // After the first page: one object is created, one changed, one deleted on the later page.
    api.create(&PostParams::default(), &cm("d", &[("env", "x")]))
        .await
        .expect("create");
    let mut live = api.get("e").await.expect("get");
    live.data = Some(BTreeMap::from([("k".to_string(), "changed".to_string())]));
    api.replace("e", &PostParams::default(), &live)
        .await
        .expect("replace");
    api.delete("g", &DeleteParams::default())
        .await
        .expect("delete");

    let rest = api
        .list(
            &ListParams::default()
                .labels("env")
                .limit(10)
                .continue_token(&token),
        )
        .await
        .expect("later page");
    assert_eq!(names(&rest), ["e", "g"], "as they were when the list began");
    assert_eq!(
        rest.items[0].data,
        Some(BTreeMap::from([("k".to_string(), "e".to_string())])),
        "e as it was"
    );
    assert_eq!(
        rest.metadata.resource_version,
        first.metadata.resource_version
    );
    let fresh = api
        .list(&ListParams::default().labels("env"))
        .await
        .expect("fresh");
    assert_eq!(names(&fresh), ["a", "c", "d", "e"]);

    // Once the history no longer reaches back to the snapshot, the token has expired.
    for i in 0..25 {
        api.create(&PostParams::default(), &cm(&format!("z{i}"), &[]))
            .await
            .expect("create");
    }
    let expired = api
        .list(
            &ListParams::default()
                .labels("env")
                .limit(10)
                .continue_token(&token),
        )
        .await;
    assert_eq!(code(expired), 410);
    server.shutdown().await;
}

/// The storage refuses to create an object that names a resourceVersion (etcd3's
/// `ErrResourceVersionSetOnCreate`: what `kubectl create -f` of a `kubectl get -o yaml` output
/// meets), by POST or by a server-side apply that creates, unless it is a dry run, and ignores
/// one it cannot read.
#[tokio::test]
async fn a_create_that_names_a_resource_version_is_refused() {
    let server = server(&["mgmt"]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let refused = |r: Result<ConfigMap, kube::Error>| match r {
        Err(kube::Error::Api(status)) => (status.code, status.reason, status.message),
        other => panic!("expected an API error, got {other:?}"),
    };
    let expected = (
        500,
        String::new(),
        "resourceVersion should not be set on objects to be created".to_string(),
    );
    let mut exported = cm("exported", &[]);
    exported.metadata.resource_version = Some("5".into());
    assert_eq!(
        refused(api.create(&PostParams::default(), &exported).await),
        expected
    );
    assert_eq!(
        refused(
            api.patch(
                "exported",
                &PatchParams::apply("test"),
                &Patch::Apply(&exported)
            )
            .await
        ),
        expected
    );
    // A dry run never reaches the storage's create (kube-apiserver's `DryRunnableStorage`):
    // it is not refused, and creates nothing.
    let dry = api
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &exported,
        )
        .await
        .expect("a dry run is not refused");
    assert_eq!(dry.metadata.name.as_deref(), Some("exported"));
    let mut dry_apply = PatchParams::apply("test");
    dry_apply.dry_run = true;
    api.patch("exported", &dry_apply, &Patch::Apply(&exported))
        .await
        .expect("a dry-run apply is not refused");
    assert!(api.get_opt("exported").await.expect("get").is_none());
    let mut unreadable = cm("unreadable", &[]);
    unreadable.metadata.resource_version = Some("-1".into());
    let created = api
        .create(&PostParams::default(), &unreadable)
        .await
        .expect("an unreadable resourceVersion is ignored");
    assert_ne!(created.metadata.resource_version.as_deref(), Some("-1"));
    server.shutdown().await;
}
