//! kubectl's everyday edits of built-in kinds. It sends most as strategic merge patches, whose
//! lists are merged by their merge keys, as on a real cluster, with no directive stored; `scale`
//! goes through the scale subresource.

use serde_json::{json, Value};
use sluice_testserver::Config;

use super::kubectl::Kubectl;
use super::support::{http, server_with};

const SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
"#;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports: [{containerPort: 80}]
        env: [{name: A, value: "1"}]
      - {name: side, image: busybox:1.36}
"#;

#[tokio::test]
async fn kubectl_apply_of_an_edited_service_changes_the_edited_port_only() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["apply", "-f", "-"], Some(SERVICE)).await;
    let edited = SERVICE.replace("port: 80,", "port: 82,");
    k.run(&["apply", "-f", "-"], Some(&edited)).await;
    let service = k.get(&["service", "web"]).await;
    assert_eq!(
        service["spec"]["ports"],
        json!([
            {"name": "http", "port": 82, "protocol": "TCP", "targetPort": 8080},
            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}
        ]),
        "{service}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_set_and_rollout_edit_one_container_and_keep_the_rest() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["apply", "-f", "-"], Some(DEPLOYMENT)).await;
    k.run(&["set", "image", "deployment/web", "web=nginx:1.27"], None)
        .await;
    k.run(&["set", "env", "deployment/web", "-c", "web", "B=2"], None)
        .await;
    k.run(&["rollout", "restart", "deployment/web"], None).await;
    let deployment = k.get(&["deployment", "web"]).await;
    let template = &deployment["spec"]["template"];
    let containers = &template["spec"]["containers"];
    assert_eq!(containers.as_array().map(Vec::len), Some(2), "{containers}");
    assert_eq!(containers[0]["image"], "nginx:1.27", "{containers}");
    assert_eq!(
        containers[0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
        "{containers}"
    );
    assert_eq!(
        containers[0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    assert_eq!(containers[1]["image"], "busybox:1.36", "{containers}");
    assert!(
        template["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_string(),
        "{template}"
    );

    // A container removed by name, and the strategy switched with its old fields cleared.
    k.run(
        &["patch", "deployment", "web", "--type", "strategic", "-p",
          r#"{"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}}"#],
        None,
    )
    .await;
    let recreate = DEPLOYMENT.replace(
        "spec:\n  selector",
        "spec:\n  strategy: {type: Recreate}\n  selector",
    );
    k.run(&["apply", "-f", "-"], Some(&recreate)).await;
    let deployment = k.get(&["deployment", "web"]).await;
    assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
    let names: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    // The apply restores `side` from the manifest, as on a real cluster.
    assert_eq!(names, ["web", "side"], "{deployment}");
    assert!(
        !deployment.to_string().contains('$'),
        "no directive is stored: {deployment}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_strategic_patch_item_without_its_merge_key_is_refused() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["apply", "-f", "-"], Some(DEPLOYMENT)).await;
    let (ok, _, err) = k
        .try_run(
            &[
                "patch",
                "deployment",
                "web",
                "--type",
                "strategic",
                "-p",
                r#"{"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}"#,
            ],
            None,
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains(r#"does not contain declared merge key: name"#),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_scale_sets_the_replicas_through_the_scale_subresource() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["apply", "-f", "-"], Some(DEPLOYMENT)).await;
    k.run(&["scale", "deployment/web", "--replicas=3"], None)
        .await;
    let deployment = k.get(&["deployment", "web"]).await;
    assert_eq!(deployment["spec"]["replicas"], 3, "{deployment}");
    let (code, body) = http(
        &server,
        "GET",
        "/clusters/mgmt/apis/apps/v1/namespaces/default/deployments/web/scale",
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let scale: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"], json!({"replicas": 3}));
    assert_eq!(scale["status"]["selector"], "app=web");
    assert_eq!(
        scale["metadata"]["resourceVersion"],
        deployment["metadata"]["resourceVersion"]
    );

    // kubectl checks --current-replicas against the Scale it reads.
    let (ok, _, err) = k
        .try_run(
            &[
                "scale",
                "deployment/web",
                "--current-replicas=2",
                "--replicas=4",
            ],
            None,
        )
        .await;
    assert!(!ok);
    assert!(err.contains("Expected replicas to be 2, was 3"), "{err}");
    let (ok, _, err) = k
        .try_run(&["scale", "deployment/web", "--replicas=-1"], None)
        .await;
    assert!(!ok, "a negative count is refused: {err}");
    assert_eq!(k.get(&["deployment", "web"]).await["spec"]["replicas"], 3);
    server.shutdown().await;
}
