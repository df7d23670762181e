//! Workloads run as in a real cluster, through the real kubectl: a Deployment gets its
//! ReplicaSet and running Pods, `rollout status`, `wait`, `set image`, `rollout undo`, `scale`
//! and deleting a Pod or the Deployment behave as they do against kube-controller-manager.

use serde_json::Value;

use super::kubectl::Kubectl;
use super::support::{http, server};

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

/// `kubectl rollout status`, which fails the test unless the rollout completes.
async fn rolled_out(k: &Kubectl, deployment: &str) {
    let target = format!("deployment/{deployment}");
    k.run(&["rollout", "status", &target, "--timeout=20s"], None)
        .await;
}

fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = items(list)
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn deployments_roll_out_scale_and_clean_up_as_kube_controller_manager_does() {
    let server = server(&["c"]).await;
    let k = Kubectl::new(&server);
    k.create_web(3, &[]).await;
    rolled_out(&k, "web").await;
    k.run(
        &[
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "--timeout=10s",
        ],
        None,
    )
    .await;
    let deployment = k.get(&["deployment", "web"]).await;
    let status = &deployment["status"];
    for field in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        assert_eq!(status[field], 3, "{field}: {deployment}");
    }
    assert_eq!(
        status["observedGeneration"], deployment["metadata"]["generation"],
        "{deployment}"
    );
    assert_eq!(
        deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );

    let sets = k.get(&["rs", "-l", "app=web"]).await;
    let sets = items(&sets);
    assert_eq!(sets.len(), 1, "{sets:?}");
    let rs = &sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("hash");
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rs["status"]["readyReplicas"], 3, "{rs}");
    let pods = items(&k.get(&["pods", "-l", "app=web"]).await);
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        assert_eq!(pod["status"]["phase"], "Running", "{pod}");
        assert_eq!(pod["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["name"],
            rs["metadata"]["name"]
        );
        assert_eq!(pod["spec"]["nodeName"], "c-control-plane");
        assert!(pod["status"]["podIP"].is_string(), "{pod}");
    }

    // A new template rolls out on a new ReplicaSet; the old one is kept at zero.
    k.run(
        &["set", "image", "deployment/web", "nginx=nginx:1.28"],
        None,
    )
    .await;
    rolled_out(&k, "web").await;
    let sets = items(&k.get(&["rs", "-l", "app=web"]).await);
    assert_eq!(sets.len(), 2);
    let replicas: Vec<i64> = sets
        .iter()
        .map(|rs| rs["spec"]["replicas"].as_i64().unwrap_or(-1))
        .collect();
    assert!(
        replicas.contains(&0) && replicas.contains(&3),
        "{replicas:?}"
    );
    let pods = items(&k.get(&["pods", "-l", "app=web"]).await);
    assert_eq!(pods.len(), 3);
    assert!(pods
        .iter()
        .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.28"));

    // Undo takes the first template back under a new revision.
    k.run(&["rollout", "undo", "deployment/web"], None).await;
    rolled_out(&k, "web").await;
    let history = k.run(&["rollout", "history", "deployment/web"], None).await;
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(revisions, ["2", "3"], "{history}");
    let current = items(
        &k.get(&["rs", "-l", format!("pod-template-hash={hash}").as_str()])
            .await,
    );
    assert_eq!(current[0]["spec"]["replicas"], 3, "{current:?}");

    // Scaling and a deleted Pod: the ReplicaSet keeps its count.
    k.run(&["scale", "deployment/web", "--replicas=2"], None)
        .await;
    let pods = k.get(&["pods", "-l", "app=web"]).await;
    assert_eq!(names(&pods).len(), 2);
    let gone = names(&pods)[0].clone();
    // In the foreground, as `kubectl delete --cascade=foreground` asks: a Pod has no dependents
    // to wait for, so it goes.
    k.run(
        &[
            "delete",
            "pod",
            &gone,
            "--cascade=foreground",
            "--wait=false",
        ],
        None,
    )
    .await;
    let after = names(&k.get(&["pods", "-l", "app=web"]).await);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(!after.contains(&gone), "{after:?}");

    // Deleting the Deployment takes its ReplicaSets and Pods with it.
    k.run(&["delete", "deployment", "web"], None).await;
    assert!(items(&k.get(&["rs"]).await).is_empty());
    assert!(items(&k.get(&["pods"]).await).is_empty());
}

#[tokio::test]
async fn a_replica_set_that_cannot_create_its_pods_says_why() {
    let server = server(&["c"]).await;
    let k = Kubectl::new(&server);
    let manifest = "apiVersion: apps/v1
kind: Deployment
metadata: {name: bot}
spec:
  replicas: 2
  selector: {matchLabels: {app: bot}}
  template:
    metadata: {labels: {app: bot}}
    spec:
      serviceAccountName: robot
      containers: [{name: bot, image: busybox}]
";
    k.run(&["apply", "-f", "-"], Some(manifest)).await;
    let rs = items(&k.get(&["rs", "-l", "app=bot"]).await);
    assert_eq!(rs.len(), 1);
    let condition = &rs[0]["status"]["conditions"][0];
    assert_eq!(condition["type"], "ReplicaFailure", "{rs:?}");
    assert_eq!(condition["reason"], "FailedCreate");
    assert!(
        condition["message"]
            .as_str()
            .is_some_and(|m| m.contains("serviceaccount \"robot\" not found")),
        "{condition}"
    );
    let deployment = k.get(&["deployment", "bot"]).await;
    assert_eq!(
        deployment["status"]["conditions"][0]["status"], "False",
        "{deployment}"
    );
    assert_eq!(deployment["status"]["unavailableReplicas"], 2);
    let (ok, _, err) = k
        .try_run(
            &["rollout", "status", "deployment/bot", "--timeout=2s"],
            None,
        )
        .await;
    assert!(!ok, "the rollout cannot complete");
    assert!(err.contains("timed out"), "{err}");

    // Once the ServiceAccount exists, the ReplicaSet creates its Pods.
    k.run(&["create", "serviceaccount", "robot"], None).await;
    rolled_out(&k, "bot").await;

    // A Pod whose node selector the Node does not carry stays pending, and says why.
    k.run(
        &[
            "run",
            "picky",
            "--image=busybox",
            r#"--overrides={"spec":{"nodeSelector":{"disk":"ssd"}}}"#,
        ],
        None,
    )
    .await;
    let picky = k.get(&["pod", "picky"]).await;
    assert_eq!(picky["status"]["phase"], "Pending", "{picky}");
    assert_eq!(picky["status"]["conditions"][0]["reason"], "Unschedulable");
    // A Pod bound to no node is marked with no grace period whatever is asked, and goes.
    let (code, body) = http(
        &server,
        "DELETE",
        "/clusters/c/api/v1/namespaces/default/pods/picky",
        r#"{"gracePeriodSeconds":20}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        answer["metadata"]["deletionGracePeriodSeconds"], 0,
        "{answer}"
    );
    assert!(
        answer["metadata"]["deletionTimestamp"].is_string(),
        "{answer}"
    );
    let (found, _, err) = k.try_run(&["get", "pod", "picky"], None).await;
    assert!(!found && err.contains("NotFound"), "{err}");

    // A running Pod is deleted gracefully: the answer is the Pod marked for its grace period.
    let running = items(&k.get(&["pods", "-l", "app=bot"]).await);
    let name = running[0]["metadata"]["name"].as_str().expect("name");
    let (code, body) = http(
        &server,
        "DELETE",
        &format!("/clusters/c/api/v1/namespaces/default/pods/{name}"),
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["kind"], "Pod", "{answer}");
    assert_eq!(answer["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(answer["metadata"]["deletionTimestamp"].is_string());

    // The grace period of the DeleteOptions replaces the Pod's own; a negative one counts as
    // one second; a string is not a DeleteOptions.
    for (asked, marked) in [("4", 4), ("-3", 1), ("0", 0)] {
        let running = items(&k.get(&["pods", "-l", "app=bot"]).await);
        let name = running[0]["metadata"]["name"].as_str().expect("name");
        let path = format!("/clusters/c/api/v1/namespaces/default/pods/{name}");
        let (code, body) = http(
            &server,
            "DELETE",
            &path,
            &format!(
                r#"{{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":{asked}}}"#
            ),
        )
        .await;
        assert_eq!(code, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(
            answer["metadata"]["deletionGracePeriodSeconds"], marked,
            "gracePeriodSeconds {asked}: {answer}"
        );
    }
    let running = items(&k.get(&["pods", "-l", "app=bot"]).await);
    let name = running[0]["metadata"]["name"].as_str().expect("name");
    let path = format!("/clusters/c/api/v1/namespaces/default/pods/{name}");
    let (code, body) = http(&server, "DELETE", &path, r#"{"gracePeriodSeconds":"4"}"#).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("DeleteOptions.gracePeriodSeconds"), "{body}");
    // kubectl sends its --grace-period in the DeleteOptions.
    k.run(&["delete", "pod", name, "--grace-period=2"], None)
        .await;
    let (gone, _, err) = k.try_run(&["get", "pod", name], None).await;
    assert!(!gone && err.contains("NotFound"), "{err}");
}

/// The addresses an Endpoints object lists ready, sorted.
fn ready_ips(endpoints: &Value) -> Vec<String> {
    let mut ips: Vec<String> = endpoints["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["ip"].as_str().map(str::to_string))
        .collect();
    ips.sort();
    ips
}

/// The addresses of a Service's EndpointSlices, sorted.
fn slice_ips(slices: &Value) -> Vec<String> {
    let mut ips: Vec<String> = items(slices)
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    ips.sort();
    ips
}

/// A Service with a selector gets Endpoints and an EndpointSlice listing the Pods it selects,
/// kept as they come and go, with its named target port resolved; a Service without one keeps
/// the Endpoints someone wrote; a deleted Service's go with it.
#[tokio::test]
async fn a_services_endpoints_and_slices_follow_the_pods_it_selects() {
    let server = server(&["c"]).await;
    let k = Kubectl::new(&server);
    k.create_web(2, &["--port=8080"]).await;
    rolled_out(&k, "web").await;
    // A Service selecting nothing has empty Endpoints and one placeholder slice.
    k.run(
        &["create", "service", "clusterip", "idle", "--tcp=80:80"],
        None,
    )
    .await;
    let idle = k.get(&["endpoints", "idle"]).await;
    assert!(idle.get("subsets").is_none(), "{idle}");
    let placeholder = k
        .get(&["endpointslices", "-l", "kubernetes.io/service-name=idle"])
        .await;
    let placeholder = items(&placeholder);
    assert_eq!(placeholder.len(), 1, "{placeholder:?}");
    assert_eq!(placeholder[0]["endpoints"], Value::Null);
    assert_eq!(placeholder[0]["addressType"], "IPv4");

    let service = r#"{"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http-alt"}]}}"#;
    // The Deployment's container port gets the name the Service targets.
    k.run(
        &[
            "patch",
            "deployment",
            "web",
            "--type=json",
            "-p",
            r#"[{"op": "add", "path": "/spec/template/spec/containers/0/ports/0/name", "value": "http-alt"}]"#,
        ],
        None,
    )
    .await;
    rolled_out(&k, "web").await;
    // Applied server-side, as sluice and the load generator write.
    k.run(&["apply", "--server-side", "-f", "-"], Some(service))
        .await;
    let pods = k.get(&["pods", "-l", "app=web"]).await;
    let mut pod_ips: Vec<String> = items(&pods)
        .iter()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .filter_map(|p| p["status"]["podIP"].as_str().map(str::to_string))
        .collect();
    pod_ips.sort();
    assert_eq!(pod_ips.len(), 2, "{pods}");

    let endpoints = k.get(&["endpoints", "web"]).await;
    assert_eq!(ready_ips(&endpoints), pod_ips, "{endpoints}");
    assert_eq!(
        endpoints["subsets"][0]["ports"],
        serde_json::json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(endpoints["metadata"]["labels"]["tier"], "front");
    let slices = k
        .get(&["endpointslices", "-l", "kubernetes.io/service-name=web"])
        .await;
    assert_eq!(slice_ips(&slices), pod_ips, "{slices}");
    let slice = &items(&slices)[0];
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Service");
    assert!(
        slice["metadata"]["generation"].as_i64() >= Some(1),
        "{slice}"
    );
    assert_eq!(slice["ports"][0]["port"], 8080);
    assert_eq!(
        slice["endpoints"][0]["conditions"],
        serde_json::json!({"ready": true, "serving": true, "terminating": false})
    );
    let table = k
        .run(
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=web",
            ],
            None,
        )
        .await;
    assert!(
        table.starts_with("NAME") && table.contains("ADDRESSTYPE") && table.contains("IPv4"),
        "{table}"
    );

    // Scaled up, the new Pod is listed; scaled down, the gone ones leave.
    k.run(&["scale", "deployment/web", "--replicas=3"], None)
        .await;
    rolled_out(&k, "web").await;
    assert_eq!(ready_ips(&k.get(&["endpoints", "web"]).await).len(), 3);
    k.run(&["scale", "deployment/web", "--replicas=1"], None)
        .await;
    rolled_out(&k, "web").await;
    assert_eq!(ready_ips(&k.get(&["endpoints", "web"]).await).len(), 1);
    let slices = k
        .get(&["endpointslices", "-l", "kubernetes.io/service-name=web"])
        .await;
    assert_eq!(slice_ips(&slices).len(), 1, "{slices}");

    // A Pod relabelled out of the selector leaves at once.
    let pods = k.get(&["pods", "-l", "app=web"]).await;
    let pod = items(&pods)[0]["metadata"]["name"]
        .as_str()
        .expect("a pod")
        .to_string();
    k.run(
        &["label", "pod", &pod, "app=elsewhere", "--overwrite"],
        None,
    )
    .await;
    let endpoints = k.get(&["endpoints", "web"]).await;
    let replaced = k.get(&["pods", "-l", "app=web"]).await;
    assert_eq!(
        ready_ips(&endpoints).len(),
        1,
        "the ReplicaSet's new Pod is listed instead: {endpoints} {replaced}"
    );
    let released = k.get(&["pod", &pod]).await;
    assert!(
        released["metadata"].get("ownerReferences").is_none(),
        "the ReplicaSet still controls the relabelled Pod: {released}"
    );
    assert!(
        !endpoints.to_string().contains(&format!("\"{pod}\"")),
        "the relabelled Pod is still listed: {endpoints}"
    );

    // A Service without a selector keeps the Endpoints someone wrote.
    let external = r#"{"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "external"}, "spec": {"ports": [{"port": 443}]}}"#;
    let written = r#"{"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "external"},
        "subsets": [{"addresses": [{"ip": "192.0.2.10"}], "ports": [{"port": 443}]}]}"#;
    k.run(&["apply", "-f", "-"], Some(external)).await;
    k.run(&["apply", "-f", "-"], Some(written)).await;
    assert_eq!(
        ready_ips(&k.get(&["endpoints", "external"]).await),
        ["192.0.2.10"]
    );
    let none = k
        .get(&[
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=external",
        ])
        .await;
    assert!(items(&none).is_empty(), "{none}");

    // A deleted Service's Endpoints and slices go with it.
    k.run(&["delete", "service", "web"], None).await;
    let (found, _, _) = k.try_run(&["get", "endpoints", "web"], None).await;
    assert!(!found, "the Endpoints of a deleted Service remain");
    let gone = k
        .get(&["endpointslices", "-l", "kubernetes.io/service-name=web"])
        .await;
    assert!(items(&gone).is_empty(), "{gone}");
}

/// A Deployment claims ReplicaSets as kube-controller-manager's controller-ref manager does:
/// an orphan ReplicaSet it selects is adopted (and, not of its template, scaled to zero), and
/// one relabelled out of its selector is released, keeping what it runs.
#[tokio::test]
async fn a_deployment_adopts_a_matching_orphan_replica_set_and_releases_a_relabelled_one() {
    let server = server(&["c"]).await;
    let k = Kubectl::new(&server);
    k.create_web(2, &[]).await;
    rolled_out(&k, "web").await;
    let orphan = r#"{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-old", "labels": {"app": "web", "pod-template-hash": "old"}},
        "spec": {"replicas": 1,
                 "selector": {"matchLabels": {"app": "web", "pod-template-hash": "old"}},
                 "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "old"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx:1.26"}]}}}}"#;
    k.run(&["create", "-f", "-"], Some(orphan)).await;
    let owner_of = |rs: Value| rs["metadata"]["ownerReferences"].clone();
    let deployment = k.get(&["deployment", "web"]).await;
    let adopted = k.get(&["rs", "web-old"]).await;
    assert_eq!(
        owner_of(adopted.clone())[0]["uid"],
        deployment["metadata"]["uid"],
        "adopted: {adopted}"
    );
    assert_eq!(owner_of(adopted.clone())[0]["controller"], true);
    assert_eq!(
        adopted["spec"]["replicas"], 0,
        "not of the Deployment's template, it is scaled to zero: {adopted}"
    );
    let current: Vec<String> = names(&k.get(&["rs", "-l", "app=web"]).await);
    assert_eq!(current.len(), 2, "{current:?}");

    k.run(&["label", "rs", "web-old", "app=gone", "--overwrite"], None)
        .await;
    let released = k.get(&["rs", "web-old"]).await;
    assert_eq!(
        owner_of(released.clone()),
        Value::Null,
        "released: {released}"
    );
    // Its own now: the Deployment no longer scales it to zero.
    k.run(&["scale", "rs", "web-old", "--replicas=1"], None)
        .await;
    let released_pods = items(&k.get(&["pods", "-l", "pod-template-hash=old"]).await);
    assert_eq!(released_pods.len(), 1, "{released_pods:?}");
    assert_eq!(k.get(&["rs", "web-old"]).await["spec"]["replicas"], 1);
    let deployment = k.get(&["deployment", "web"]).await;
    assert_eq!(deployment["status"]["replicas"], 2, "{deployment}");
}
