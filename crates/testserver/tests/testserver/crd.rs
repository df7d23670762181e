//! CRD gating: a kind is served only while its CustomResourceDefinition exists, in every served version.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::Discovery;
use serde_json::json;
use sluice_testserver::{sveltos_crds, Config};

use super::support::{client, code, server, server_with};

fn event_source(version: &str) -> (ApiResource, DynamicObject) {
    let gvk = GroupVersionKind::gvk("lib.projectsveltos.io", version, "EventSource");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "eventsources");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("lib.projectsveltos.io/{version}"), "kind": "EventSource",
        "metadata": {"name": "es"},
        "spec": {"collectResources": true, "group": "", "version": "v1", "kind": "Service"},
    }))
    .expect("dynamic object");
    (ar, obj)
}

/// Creates the shipped EventSource CRD. It converts through the watcher's webhook
/// (tests/conversion.rs); here with strategy None, so an object is stored as written.
async fn create_event_source_crd(crds: &Api<CustomResourceDefinition>) -> CustomResourceDefinition {
    let mut def = sveltos_crds()
        .into_iter()
        .find(|c| c["metadata"]["name"] == "eventsources.lib.projectsveltos.io")
        .expect("eventsource crd");
    def["spec"]["conversion"] = json!({"strategy": "None"});
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(def).expect("crd"),
    )
    .await
    .expect("create crd")
}

#[tokio::test]
async fn crd_kinds_are_served_only_while_the_crd_exists() {
    let server = server(&["mgmt"]).await;
    let c = client(&server, "mgmt").await;
    let (ar, obj) = event_source("v1alpha1");
    let es: Api<DynamicObject> = Api::all_with(c.clone(), &ar);
    assert_eq!(
        code(es.create(&PostParams::default(), &obj).await),
        404,
        "unknown kind before the CRD"
    );

    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let created = create_event_source_crd(&crds).await;
    let established = created
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(established
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True"));

    es.create(&PostParams::default(), &obj)
        .await
        .expect("create v1alpha1 object");
    let (ar_beta, _) = event_source("v1beta1");
    let es_beta: Api<DynamicObject> = Api::all_with(c.clone(), &ar_beta);
    let as_beta = es_beta.get("es").await.expect("read through v1beta1");
    assert_eq!(
        as_beta.types.map(|t| t.api_version).as_deref(),
        Some("lib.projectsveltos.io/v1beta1")
    );
    assert_eq!(
        as_beta.data["spec"]["kind"], "Service",
        "stored as written, no conversion"
    );

    let discovery = Discovery::new(c.clone()).run().await.expect("discovery");
    let group = discovery
        .groups()
        .find(|g| g.name() == "lib.projectsveltos.io")
        .expect("group discovered");
    assert_eq!(
        group.versions().collect::<Vec<_>>(),
        vec!["v1beta1", "v1alpha1"]
    );

    crds.delete(
        "eventsources.lib.projectsveltos.io",
        &DeleteParams::default(),
    )
    .await
    .expect("delete crd");
    assert_eq!(code(es.get("es").await), 404);
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(sveltos_crds()[0].clone()).expect("crd"),
    )
    .await
    .expect("recreate");
    assert_eq!(
        code(es.get("es").await),
        404,
        "objects went away with the CRD"
    );
    server.shutdown().await;
}

/// As apiextensions-apiserver: a deleted CRD stays, terminating, until every object of its kind
/// is gone, and an object's finalizer holds it; nothing new of its kind is created meanwhile.
#[tokio::test]
async fn a_deleted_crd_waits_for_its_objects_and_their_finalizers() {
    let server = server(&["mgmt"]).await;
    let c = client(&server, "mgmt").await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    create_event_source_crd(&crds).await;
    let (ar, free) = event_source("v1beta1");
    let es: Api<DynamicObject> = Api::all_with(c.clone(), &ar);
    es.create(&PostParams::default(), &free)
        .await
        .expect("create");
    let mut held = free.clone();
    held.metadata.name = Some("held".into());
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    es.create(&PostParams::default(), &held)
        .await
        .expect("create held");

    let name = "eventsources.lib.projectsveltos.io";
    let answered = crds
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete crd")
        .left()
        .expect("the DELETE answers with the CRD, marked");
    assert!(answered.metadata.deletion_timestamp.is_some());
    assert_eq!(
        answered.metadata.finalizers.as_deref(),
        Some(&["customresourcecleanup.apiextensions.k8s.io".to_string()][..])
    );

    let terminating = |crd: &CustomResourceDefinition| {
        crd.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Terminating"))
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
    };
    let crd = crds.get(name).await.expect("the CRD stays");
    assert_eq!(
        terminating(&crd),
        Some(("True".into(), "InstanceDeletionInProgress".into()))
    );
    assert_eq!(
        code(es.get("es").await),
        404,
        "an object without finalizers went"
    );
    let held_now = es.get("held").await.expect("a finalizer holds its object");
    assert!(held_now.metadata.deletion_timestamp.is_some());

    let mut another = free.clone();
    another.metadata.name = Some("another".into());
    match es.create(&PostParams::default(), &another).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str(), status.message.as_str()),
                (
                    405,
                    "MethodNotAllowed",
                    "create not allowed while custom resource definition is terminating"
                )
            );
        }
        other => panic!("a create while the CRD terminates: {other:?}"),
    }

    // Its finalizer removed, the last object goes, and the CRD with it.
    es.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove the finalizer");
    assert_eq!(
        code(crds.get(name).await),
        404,
        "the CRD went after its last object"
    );
    assert_eq!(code(es.get("held").await), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn preinstalled_sveltos_crds_with_status_subresources() {
    let server = server_with(Config {
        sveltos_crds: true,
        ..Config::default()
    })
    .await;
    let c = client(&server, "mgmt").await;
    let gvk = GroupVersionKind::gvk("lib.projectsveltos.io", "v1beta1", "EventReport");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "eventreports");
    let reports: Api<DynamicObject> = Api::namespaced_with(c, "default", &ar);
    let report: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventReport",
        "metadata": {"name": "r"},
        "spec": {"clusterName": "c1", "clusterNamespace": "default", "clusterType": "Sveltos", "eventSourceName": "es"},
        "status": {"phase": "WaitingForDelivery"},
    }))
    .expect("report");
    let created = reports
        .create(&PostParams::default(), &report)
        .await
        .expect("create report");
    assert!(
        created.data.get("status").is_none(),
        "status dropped on create"
    );
    let pp = kube::api::PatchParams::default();
    let patched = reports
        .patch_status(
            "r",
            &pp,
            &kube::api::Patch::Merge(json!({"status": {"phase": "Processed"}})),
        )
        .await
        .expect("status patch");
    assert_eq!(patched.data["status"]["phase"], "Processed");
    server.shutdown().await;
}

/// The generic store's update rules for what a replace names: a custom resource (and a CRD) is
/// replaced only at a resourceVersion (`AllowUnconditionalUpdate` is false for them), a
/// ConfigMap also without one; no object's uid changes.
#[tokio::test]
async fn a_replace_needs_a_resource_version_for_custom_resources_and_keeps_the_uid() {
    let server = server_with(Config {
        sveltos_crds: true,
        ..Config::default()
    })
    .await;
    let c = client(&server, "mgmt").await;
    let message = |r: Result<DynamicObject, kube::Error>| match r {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected an API error, got {other:?}"),
    };

    let gvk = GroupVersionKind::gvk("lib.projectsveltos.io", "v1beta1", "EventReport");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "eventreports");
    let reports: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &ar);
    let report: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventReport",
        "metadata": {"name": "r"},
        "spec": {"clusterName": "c1", "clusterNamespace": "default", "clusterType": "Sveltos", "eventSourceName": "es"},
    }))
    .expect("report");
    let created = reports
        .create(&PostParams::default(), &report)
        .await
        .expect("create report");
    assert_eq!(
        message(reports.replace("r", &PostParams::default(), &report).await),
        (
            422,
            "eventreports.lib.projectsveltos.io \"r\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update".to_string()
        )
    );
    let mut other_uid = created.clone();
    other_uid.metadata.uid = Some("other".into());
    assert_eq!(
        message(reports.replace("r", &PostParams::default(), &other_uid).await),
        (
            422,
            "EventReport.lib.projectsveltos.io \"r\" is invalid: metadata.uid: Invalid value: \"other\": field is immutable".to_string()
        )
    );
    reports
        .replace("r", &PostParams::default(), &created)
        .await
        .expect("a replace at the current resourceVersion");

    let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let maps: Api<DynamicObject> = Api::namespaced_with(c, "default", &ar);
    let map: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"}, "data": {"k": "1"},
    }))
    .expect("map");
    maps.create(&PostParams::default(), &map)
        .await
        .expect("create map");
    let mut changed = map.clone();
    changed.data["data"]["k"] = json!("2");
    let replaced = maps
        .replace("m", &PostParams::default(), &changed)
        .await
        .expect("a ConfigMap is replaced without a resourceVersion");
    assert_eq!(replaced.data["data"]["k"], "2");
    server.shutdown().await;
}
