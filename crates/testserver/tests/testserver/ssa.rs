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

/// The fieldsV1 of `manager`'s entry in `object`'s managedFields.
fn fields_of(object: &serde_json::Value, manager: &str) -> serde_json::Value {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or_default()
}

/// The names of a Deployment's containers, in order.
fn container_names(deployment: &serde_json::Value) -> Vec<&str> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// Lists that are maps or sets are owned item by item, as kube-apiserver owns them: two managers
/// each apply their own item without a conflict, an item's fields conflict on their own, and an
/// item its manager stops applying goes unless another owns it.
#[tokio::test]
async fn list_items_are_owned_by_their_keys_and_set_values_each() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let server = server(&["mgmt"]).await;
    let c = client(&server, "mgmt").await;
    let apply = |manager: &str| PatchParams::apply(manager);

    // metadata.finalizers: a set, on every kind.
    let maps: Api<DynamicObject> =
        Api::namespaced_with(c.clone(), "default", &ApiResource::erase::<ConfigMap>(&()));
    let cm = |finalizers: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "finalizers": finalizers}})
    };
    maps.patch(
        "held",
        &apply("alice"),
        &Patch::Apply(cm(json!(["a.io/one"]))),
    )
    .await
    .expect("alice's finalizer");
    let both = maps
        .patch(
            "held",
            &apply("bob"),
            &Patch::Apply(cm(json!(["b.io/two"]))),
        )
        .await
        .expect("bob's finalizer: no conflict");
    let both = serde_json::to_value(&both).expect("json");
    assert_eq!(
        both["metadata"]["finalizers"],
        json!(["a.io/one", "b.io/two"])
    );
    assert_eq!(
        fields_of(&both, "bob"),
        json!({"f:metadata": {"f:finalizers": {"v:\"b.io/two\"": {}}}})
    );
    let left = maps
        .patch("held", &apply("alice"), &Patch::Apply(cm(json!([]))))
        .await
        .expect("alice lets hers go");
    assert_eq!(left.metadata.finalizers, Some(vec!["b.io/two".to_string()]));
    // An item added beside a set applied empty is no conflict: the set's values are owned each.
    let more = maps
        .patch(
            "held",
            &apply("bob"),
            &Patch::Apply(cm(json!(["b.io/two", "b.io/three"]))),
        )
        .await
        .expect("bob adds one");
    assert_eq!(more.metadata.finalizers.map(|f| f.len()), Some(2));
    // Nor is a set applied empty beside another applied empty: neither takes the other's values.
    let none = maps
        .patch("held", &apply("carol"), &Patch::Apply(cm(json!([]))))
        .await
        .expect("carol applies none");
    assert_eq!(none.metadata.finalizers.map(|f| f.len()), Some(2));

    // A Deployment's containers: a map by name.
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        c.clone(),
        "default",
        &ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
    );
    let deployment = |containers: serde_json::Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": containers}}}})
    };
    deployments
        .patch(
            "web",
            &apply("alice"),
            &Patch::Apply(deployment(json!([{"name": "app", "image": "app:1"}]))),
        )
        .await
        .expect("alice's container");
    let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "proxy:1"}]}}}});
    let both = deployments
        .patch("web", &apply("bob"), &Patch::Apply(sidecar))
        .await
        .expect("bob's container beside alice's: no conflict");
    let both = serde_json::to_value(&both).expect("json");
    assert_eq!(container_names(&both), ["app", "proxy"]);
    let bobs = &fields_of(&both, "bob")["f:spec"]["f:template"]["f:spec"]["f:containers"];
    assert_eq!(
        bobs,
        &json!({"k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {}}})
    );
    let takeover = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}});
    match deployments
        .patch("web", &apply("bob"), &Patch::Apply(takeover))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 409);
            assert!(
                s.message.contains(
                    r#"conflict with "alice": .spec.template.spec.containers[name="app"].image"#
                ),
                "{}",
                s.message
            );
        }
        other => panic!("expected a conflict on alice's image, got {other:?}"),
    }
    let renamed = deployments
        .patch(
            "web",
            &apply("alice"),
            &Patch::Apply(deployment(json!([{"name": "main", "image": "app:1"}]))),
        )
        .await
        .expect("alice renames hers");
    let renamed = serde_json::to_value(&renamed).expect("json");
    assert_eq!(
        container_names(&renamed),
        ["proxy", "main"],
        "alice's old item goes, bob's stays"
    );

    // A Service's ports: a map by port and protocol, a port without protocol being the TCP one
    // (its default). DNS's port 53 over UDP and over TCP are two items, applied twice alike.
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(c.clone(), "default");
    let dns = |ports: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns"},
        "spec": {"selector": {"app": "dns"}, "ports": ports}})
    };
    let ports_of = |service: &k8s_openapi::api::core::v1::Service| -> Vec<(String, String)> {
        service
            .spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.name.unwrap_or_default(), p.protocol.unwrap_or_default()))
            .collect()
    };
    let port = |name: &str, protocol: &str| (name.to_string(), protocol.to_string());
    let alices = json!([{"name": "dns", "port": 53, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": 53}]);
    for _ in 0..2 {
        let applied = services
            .patch("dns", &apply("alice"), &Patch::Apply(dns(alices.clone())))
            .await
            .expect("both ports of 53");
        assert_eq!(
            ports_of(&applied),
            [port("dns", "UDP"), port("dns-tcp", "TCP")]
        );
        let owned = serde_json::to_value(&applied).expect("json");
        let keys: Vec<String> = fields_of(&owned, "alice")["f:spec"]["f:ports"]
            .as_object()
            .expect("alice's ports")
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            [
                r#"k:{"port":53,"protocol":"TCP"}"#,
                r#"k:{"port":53,"protocol":"UDP"}"#
            ]
        );
    }
    // Another protocol of one port is another item: bob's SCTP port is no conflict.
    let sctp = json!([{"name": "dns-sctp", "port": 53, "protocol": "SCTP"}]);
    let three = services
        .patch("dns", &apply("bob"), &Patch::Apply(dns(sctp)))
        .await
        .expect("bob's SCTP port beside alice's: no conflict");
    assert_eq!(
        ports_of(&three),
        [
            port("dns", "UDP"),
            port("dns-tcp", "TCP"),
            port("dns-sctp", "SCTP")
        ]
    );
    // The TCP one, named without its protocol, is alice's: applying it alike shares it, and
    // renaming it conflicts.
    let same = json!([{"name": "dns-sctp", "port": 53, "protocol": "SCTP"},
                      {"name": "dns-tcp", "port": 53}]);
    services
        .patch("dns", &apply("bob"), &Patch::Apply(dns(same)))
        .await
        .expect("bob applies alice's TCP port as it is: no conflict");
    let renamed = json!([{"name": "dns-sctp", "port": 53, "protocol": "SCTP"},
                         {"name": "other", "port": 53}]);
    match services
        .patch("dns", &apply("bob"), &Patch::Apply(dns(renamed)))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 409);
            assert!(
                s.message
                    .contains(r#"conflict with "alice": .spec.ports[port=53,protocol="TCP"].name"#),
                "{}",
                s.message
            );
        }
        other => panic!("expected a conflict on alice's TCP port's name, got {other:?}"),
    }
    // Alice stops applying her UDP port: it alone goes.
    let tcp_only = json!([{"name": "dns-tcp", "port": 53, "protocol": "TCP"}]);
    let left = services
        .patch("dns", &apply("alice"), &Patch::Apply(dns(tcp_only)))
        .await
        .expect("alice drops UDP");
    assert_eq!(
        ports_of(&left),
        [port("dns-tcp", "TCP"), port("dns-sctp", "SCTP")]
    );

    // A CRD's list-type map: a ClusterProfile's templateResourceRefs, by identifier.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(c.clone());
    let mut def = sluice_testserver::sveltos_crds()
        .into_iter()
        .find(|d| d["metadata"]["name"] == "clusterprofiles.config.projectsveltos.io")
        .expect("the ClusterProfile CRD");
    def["spec"]["conversion"] = json!({"strategy": "None"});
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(def).expect("crd"),
    )
    .await
    .expect("create the CRD");
    let gvk = GroupVersionKind::gvk("config.projectsveltos.io", "v1beta1", "ClusterProfile");
    let profiles: Api<DynamicObject> = Api::all_with(
        c.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "clusterprofiles"),
    );
    let profile = |id: &str| {
        json!({"apiVersion": "config.projectsveltos.io/v1beta1", "kind": "ClusterProfile",
        "metadata": {"name": "p"},
        "spec": {"templateResourceRefs": [{"identifier": id,
            "resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": id}}]}})
    };
    let created = super::support::eventually(10, "the ClusterProfile kind served", || {
        let profiles = profiles.clone();
        let first = profile("one");
        async move {
            profiles
                .patch("p", &PatchParams::apply("alice"), &Patch::Apply(first))
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(
        created.data["spec"]["templateResourceRefs"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let both = profiles
        .patch("p", &apply("bob"), &Patch::Apply(profile("two")))
        .await
        .expect("bob's reference beside alice's: no conflict");
    let ids: Vec<&str> = both.data["spec"]["templateResourceRefs"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|r| r["identifier"].as_str())
        .collect();
    assert_eq!(ids, ["one", "two"]);
    server.shutdown().await;
}
