//! The seeds' examples end to end, each with the seed's own YAML (`examples/seed-*`): a real
//! nats-server, the API test server and the five services as processes. Each test asserts the
//! exact objects created in the management cluster, then removes the trigger input and asserts
//! exact cleanup.

use std::time::Duration;

use serde_json::{json, Value};
use sluice_cli::demo::{self, owned_by, wait_cleaned, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_domain::naming;
use sluice_testkit::wait_for;

const DEADLINE: Duration = Duration::from_secs(30);

use sluice_cli::examples::seed_000_httproute as route;
use sluice_cli::examples::seed_000_ingress as ingress;
use sluice_cli::examples::{seed_001, seed_003};

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn service(namespace: &str, name: &str, ports: &[i64], selector: Value) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|p| json!({"name": format!("p{p}"), "port": p}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"selector": selector, "ports": ports}})
}

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

/// The one ConfigMap in `projectsveltos` a ClusterProfile's policyRef points at.
async fn referenced(stack: &Stack, profile: &Value, index: usize) -> anyhow::Result<Value> {
    let reference = &profile["spec"]["policyRefs"][index];
    anyhow::ensure!(reference["namespace"] == "projectsveltos", "{reference}");
    let name = reference["name"].as_str().unwrap_or_default();
    stack
        .get(MANAGEMENT, "v1", "ConfigMap", "projectsveltos", name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("ConfigMap projectsveltos/{name} missing"))
}

fn yaml_key(config_map: &Value, key: &str) -> Value {
    let text = config_map["data"][key].as_str().unwrap_or_default();
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{key} is not YAML ({e}):\n{text}"))
}

/// The objects a trigger owns for a cluster, once their count and content satisfy `ready`.
async fn wait_owned<F>(
    stack: &Stack,
    trigger: &str,
    cluster: &str,
    what: &str,
    ready: F,
) -> anyhow::Result<Vec<Value>>
where
    F: Fn(&[Value]) -> bool,
{
    wait_for(what, DEADLINE, || async {
        owned_by(stack, trigger, cluster)
            .await
            .ok()
            .filter(|owned| ready(owned))
    })
    .await
    .map_err(|e| fail(stack, e))
}

fn profile_of(owned: &[Value]) -> &Value {
    owned
        .iter()
        .find(|o| o["kind"] == "ClusterProfile")
        .expect("a ClusterProfile")
}

/// Seed 000's `eng` examples: cluster-a (env=fv) with namespace `eng`, and the seed's YAML.
async fn eng_stack(event_source: &str, addon: &str) -> anyhow::Result<Stack> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    stack.apply_yaml(MANAGEMENT, event_source).await?;
    stack.apply_yaml(MANAGEMENT, addon).await?;
    stack
        .apply("cluster-a", &namespace("eng", json!({})))
        .await?;
    Ok(stack)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_one_ingress_for_all_https_services_in_eng() -> anyhow::Result<()> {
    let stack = eng_stack(ingress::EVENT_SOURCE, ingress::EVENT_BASED_ADDON).await?;
    // The seed's two Services, plus two that must not count: http only, and https elsewhere.
    for svc in [
        service("eng", "my-service", &[80, 443], json!({"app": "a"})),
        service("eng", "my-service-2", &[80, 8443], json!({"app": "b"})),
        service("eng", "plain-http", &[80], json!({"app": "c"})),
        service("default", "elsewhere", &[443], json!({"app": "d"})),
    ] {
        stack.apply("cluster-a", &svc).await?;
    }
    let trigger = "ingress-configuration";
    let owned = wait_owned(
        &stack,
        trigger,
        "cluster-a",
        "the Ingress profile over two Services",
        |o| {
            o.len() == 2
                && o.iter().any(|c| {
                    c["data"]["ingress.yaml"]
                        .as_str()
                        .is_some_and(|t| t.contains("my-service-2"))
                })
        },
    )
    .await?;
    let profile = profile_of(&owned);
    // oneForEvent: false: one profile for the cluster, no per-resource labels.
    assert!(profile["metadata"]["labels"]
        .get(naming::LABEL_RESOURCE_NAME)
        .is_none());
    let ingress = yaml_key(&referenced(&stack, profile, 0).await?, "ingress.yaml");
    assert_eq!(ingress["kind"], "Ingress");
    assert_eq!(ingress["metadata"]["name"], "ingress");
    assert_eq!(
        ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/rewrite-target"],
        "/"
    );
    // What the seed shows Sveltos creating, path for path.
    assert_eq!(
        ingress["spec"],
        json!({"ingressClassName": "http-ingress", "rules": [{"http": {"paths": [
            {"path": "/my-service", "pathType": "Prefix",
             "backend": {"service": {"name": "my-service", "port": {"number": 443}}}},
            {"path": "/my-service-2", "pathType": "Prefix",
             "backend": {"service": {"name": "my-service-2", "port": {"number": 8443}}}}
        ]}}]})
    );

    stack
        .delete("cluster-a", "v1", "Service", "eng", "my-service")
        .await?;
    wait_owned(
        &stack,
        trigger,
        "cluster-a",
        "the Ingress over one Service",
        |o| {
            o.len() == 2
                && o.iter().any(|c| {
                    c["data"]["ingress.yaml"]
                        .as_str()
                        .is_some_and(|t| t.contains("my-service-2") && !t.contains("/my-service\n"))
                })
        },
    )
    .await?;
    stack
        .delete("cluster-a", "v1", "Service", "eng", "my-service-2")
        .await?;
    wait_cleaned(&stack, trigger, "cluster-a", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_one_http_route_per_service() -> anyhow::Result<()> {
    let stack = eng_stack(route::EVENT_SOURCE, route::EVENT_BASED_ADDON).await?;
    let trigger = "service-network-policy";
    stack
        .apply(
            "cluster-a",
            &service("eng", "shop", &[80], json!({"app": "shop"})),
        )
        .await?;
    stack
        .apply(
            "cluster-a",
            &service(
                "eng",
                "cart",
                &[8080, 80],
                json!({"app": "cart", "tier": "web"}),
            ),
        )
        .await?;
    stack
        .apply(
            "cluster-a",
            &service("eng", "tls-only", &[443], json!({"app": "tls"})),
        )
        .await?;
    for (name, selector, port) in [
        ("shop", json!({"app": "shop"}), 80),
        ("cart", json!({"app": "cart", "tier": "web"}), 8080),
    ] {
        let profile = wait_profile(&stack, trigger, "cluster-a", name, DEADLINE)
            .await
            .map_err(|e| fail(&stack, e))?;
        assert_eq!(
            profile["metadata"]["labels"][naming::LABEL_RESOURCE_NAMESPACE],
            "eng"
        );
        let route = yaml_key(&referenced(&stack, &profile, 0).await?, "http-route.yaml");
        assert_eq!(route["kind"], "HTTPRoute");
        assert_eq!(route["metadata"]["name"], name);
        assert_eq!(route["metadata"]["namespace"], "eng");
        assert_eq!(route["metadata"]["labels"], selector);
        assert_eq!(
            route["spec"]["rules"][0],
            json!({"matches": [{"path": {"type": "PathPrefix", "value": format!("/{name}")}}],
                   "backendRefs": [{"kind": "Service", "name": name, "port": port}]})
        );
        assert_eq!(
            route["spec"]["hostnames"],
            json!(["local.projectcontour.io"])
        );
    }
    assert!(demo::profiles_for(&stack, trigger, "cluster-a", "tls-only")
        .await?
        .is_empty());
    assert_eq!(owned_by(&stack, trigger, "cluster-a").await?.len(), 4);

    stack
        .delete("cluster-a", "v1", "Service", "eng", "shop")
        .await?;
    wait_owned(
        &stack,
        trigger,
        "cluster-a",
        "only cart's route left",
        |o| o.len() == 2,
    )
    .await?;
    assert_eq!(
        demo::profiles_for(&stack, trigger, "cluster-a", "cart")
            .await?
            .len(),
        1
    );
    stack
        .delete("cluster-a", "v1", "Service", "eng", "cart")
        .await?;
    wait_cleaned(&stack, trigger, "cluster-a", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_001_generator_replicates_credentials_for_labelled_namespaces() -> anyhow::Result<()> {
    let stack = Stack::start(&["workload", "staging"], None).await?;
    stack
        .register_cluster("workload", &[("env", "production")])
        .await?;
    stack
        .register_cluster("staging", &[("env", "staging")])
        .await?;
    stack.apply_yaml(MANAGEMENT, seed_001::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, seed_001::EVENT_TRIGGER)
        .await?;
    stack.apply_yaml(MANAGEMENT, seed_001::CONFIG_MAPS).await?;
    stack
        .apply(
            MANAGEMENT,
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": "login-credentials", "namespace": "default"},
                    "data": {"user": "YWRtaW4=", "password": "c2VjcmV0"}}),
        )
        .await?;
    for cluster in ["workload", "staging"] {
        for ns in ["eng", "hr"] {
            stack
                .apply(cluster, &namespace(ns, json!({"secret": "required"})))
                .await?;
        }
        stack
            .apply(cluster, &namespace("ops", json!({"team": "ops"})))
            .await?;
    }
    let trigger = "distribute-credentials";
    let generated = |owned: &[Value]| -> Option<Value> {
        owned
            .iter()
            .find(|o| o["metadata"]["name"] == "default-workload-namespaces")
            .cloned()
    };
    let owned = wait_owned(
        &stack,
        trigger,
        "workload",
        "generated namespaces ConfigMap",
        |o| {
            o.len() == 2
                && generated(o)
                    .is_some_and(|c| yaml_key(&c, "namespaces") == json!({"eng": "ok", "hr": "ok"}))
        },
    )
    .await?;
    let config_map = generated(&owned).expect("generated");
    assert_eq!(config_map["metadata"]["namespace"], "projectsveltos");
    assert_eq!(
        config_map["metadata"]["labels"][naming::LABEL_FROM_GENERATOR],
        "ok"
    );
    let profile = profile_of(&owned);
    // As stored: the ClusterProfile CRD's defaults (force, optional, skipNamespaceCreation,
    // tier) filled in by the API server.
    assert_eq!(
        profile["spec"]["policyRefs"],
        json!([{"kind": "ConfigMap", "namespace": "default", "name": "info", "deploymentType": "Remote",
                "force": false, "optional": false, "skipNamespaceCreation": false, "tier": 100}])
    );
    assert_eq!(
        profile["spec"]["templateResourceRefs"],
        json!([
            {"resource": {"apiVersion": "v1", "kind": "Secret", "name": "login-credentials", "namespace": "default"},
             "identifier": "Credentials", "ignoreStatusChanges": false, "optional": false},
            {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "default-workload-namespaces",
                          "namespace": "projectsveltos"},
             "identifier": "Namespaces", "ignoreStatusChanges": false, "optional": false}
        ])
    );
    // Only production clusters are selected.
    assert!(owned_by(&stack, trigger, "staging").await?.is_empty());

    // A namespace that stops requiring the secret leaves the list; the last one empties it.
    stack
        .apply("workload", &namespace("hr", json!({"secret": "no"})))
        .await?;
    wait_owned(
        &stack,
        trigger,
        "workload",
        "namespaces ConfigMap without hr",
        |o| generated(o).is_some_and(|c| yaml_key(&c, "namespaces") == json!({"eng": "ok"})),
    )
    .await?;
    stack
        .delete("workload", "v1", "Namespace", "", "eng")
        .await?;
    wait_cleaned(&stack, trigger, "workload", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_003_load_balancer_service_becomes_service_and_endpoints_for_eng_clusters(
) -> anyhow::Result<()> {
    let stack = Stack::start(&["gke", "kind-eng"], None).await?;
    stack
        .register_cluster("gke", &[("env", "production")])
        .await?;
    stack
        .register_cluster("kind-eng", &[("dep", "eng")])
        .await?;
    stack.apply_yaml(MANAGEMENT, seed_003::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, seed_003::EVENT_TRIGGER)
        .await?;
    stack.apply("gke", &namespace("test", json!({}))).await?;
    for mut document in sluice_kube_documents(seed_003::WORKLOAD)? {
        document["metadata"]["namespace"] = json!("test");
        stack.apply("gke", &document).await?;
    }
    let trigger = "service-policy";
    // No load balancer address yet: nothing matches (the API server's `status.loadBalancer: {}`).
    // The script runs on the Service without error and does not match. The watcher publishes
    // each kind of the configuration on its own, so a trigger read before its EventSource says
    // for a moment that the EventSource does not exist; the report then settles without it.
    let name = "sveltos--load-balancer-service--gke";
    let report = wait_for(
        "processed EventReport for gke without a failure",
        DEADLINE,
        || async {
            stack
                .event_report(name)
                .await
                .ok()
                .flatten()
                .filter(|r| r["status"]["phase"] == "Processed")
                .filter(|r| r["status"]["failureMessage"].is_null())
        },
    )
    .await;
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            let last = stack.event_report(name).await.ok().flatten();
            return Err(fail(
                &stack,
                error.context(format!("the report: {last:#?}")),
            ));
        }
    };
    assert!(report["spec"]["matchingResources"]
        .as_array()
        .is_none_or(Vec::is_empty));
    assert!(owned_by(&stack, trigger, "gke").await?.is_empty());

    stack
        .apply_status(
            "gke",
            &json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "my-lb-service", "namespace": "test"},
                    "status": {"loadBalancer": {"ingress": [{"ip": "34.172.32.172"}]}}}),
        )
        .await?;
    let profile = wait_profile(&stack, trigger, "gke", "my-lb-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    // Deployed to the dep=eng clusters, not back to the source cluster.
    assert_eq!(
        profile["spec"]["clusterSelector"],
        json!({"matchLabels": {"dep": "eng"}})
    );
    assert!(profile["spec"].get("clusterRefs").is_none());
    let copy = referenced(&stack, &profile, 0).await?;
    let service = yaml_key(&copy, "service.yaml");
    assert_eq!(
        service["metadata"],
        json!({"name": "external-my-lb-service", "namespace": "external"})
    );
    assert_eq!(service["spec"]["selector"], json!({}));
    assert_eq!(
        service["spec"]["ports"],
        json!([{"port": 60000, "protocol": "TCP", "targetPort": 50001}])
    );
    let endpoints = yaml_key(&copy, "endpoint.yaml");
    assert_eq!(endpoints["kind"], "Endpoints");
    assert_eq!(
        endpoints["subsets"],
        json!([{"addresses": [{"ip": "34.172.32.172"}], "ports": [{"port": 60000}]}])
    );
    assert!(owned_by(&stack, trigger, "kind-eng").await?.is_empty());

    stack
        .delete("gke", "v1", "Service", "test", "my-lb-service")
        .await?;
    wait_cleaned(&stack, trigger, "gke", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}

fn sluice_kube_documents(yaml: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(document)?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}
