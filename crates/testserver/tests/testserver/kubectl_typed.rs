//! The real kubectl's typed commands: `create secret|configmap|namespace|serviceaccount` send
//! protobuf bodies, `label` and `annotate` send merge patches; request media types; and clusters
//! served on their own ports (`Config::port_per_cluster`), where kubectl's path-less requests
//! (`get --raw /version`) work.

use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams};
use serde_json::{json, Value};
use sluice_testserver::{Config, TestServer};

use super::kubectl::Kubectl;
use super::support::{client, eventually, http, server_with};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text.as_str().expect("a base64 string"))
        .expect("valid base64")
}

async fn get_json(k: &Kubectl, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
    serde_json::from_str(&k.run(&all, None).await).expect("kubectl prints JSON")
}

async fn two_clusters(port_per_cluster: bool) -> TestServer {
    server_with(Config {
        clusters: vec!["mgmt".into(), "c1".into()],
        port_per_cluster,
        ..Config::default()
    })
    .await
}

#[tokio::test]
async fn kubectl_create_secret_generic_from_file_registers_a_cluster_kubeconfig() {
    let server = two_clusters(false).await;
    let k = Kubectl::new(&server);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c1.kubeconfig");
    let kubeconfig = server.kubeconfig_for("c1");
    std::fs::write(&file, &kubeconfig).expect("write kubeconfig");

    k.run(&["create", "namespace", "fleet"], None).await;
    let from_file = format!("--from-file=kubeconfig={}", file.display());
    let out = k
        .run(
            &[
                "create",
                "secret",
                "generic",
                "c1-sveltos-kubeconfig",
                "-n",
                "fleet",
                &from_file,
            ],
            None,
        )
        .await;
    assert_eq!(out.trim(), "secret/c1-sveltos-kubeconfig created");

    let secret = get_json(&k, &["secret", "c1-sveltos-kubeconfig", "-n", "fleet"]).await;
    assert_eq!(
        secret["data"],
        json!({"kubeconfig": b64(kubeconfig.as_bytes())})
    );
    assert_eq!(secret["metadata"]["namespace"], "fleet");
    assert_eq!(
        secret["metadata"]["managedFields"][0]["manager"],
        "kubectl-create"
    );
    assert!(secret.get("stringData").is_none(), "{secret}");

    // The stored kubeconfig reaches cluster c1, as a Sveltos controller would use it.
    let stored = dir.path().join("stored.kubeconfig");
    std::fs::write(&stored, unb64(&secret["data"]["kubeconfig"])).expect("write");
    let stored_arg = stored.display().to_string();
    k.run(&["--context", "c1", "create", "namespace", "in-c1"], None)
        .await;
    let names = k
        .run(
            &[
                "--kubeconfig",
                &stored_arg,
                "get",
                "namespaces",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert!(names.lines().any(|l| l == "namespace/in-c1"), "{names}");
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_create_secret_tls_and_docker_registry_set_type_and_data() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let cert = format!("--cert={fixtures}/tls.crt");
    let key = format!("--key={fixtures}/tls.key");
    k.run(&["create", "secret", "tls", "web-tls", &cert, &key], None)
        .await;
    let tls = get_json(&k, &["secret", "web-tls"]).await;
    assert_eq!(tls["type"], "kubernetes.io/tls");
    let cert_pem = std::fs::read(format!("{fixtures}/tls.crt")).expect("fixture");
    assert_eq!(unb64(&tls["data"]["tls.crt"]), cert_pem);
    let key_pem = std::fs::read(format!("{fixtures}/tls.key")).expect("fixture");
    assert_eq!(unb64(&tls["data"]["tls.key"]), key_pem);

    k.run(
        &[
            "create",
            "secret",
            "docker-registry",
            "pull",
            "--docker-server=registry.example",
            "--docker-username=robot",
            "--docker-password=s3cret",
        ],
        None,
    )
    .await;
    let pull = get_json(&k, &["secret", "pull"]).await;
    assert_eq!(pull["type"], "kubernetes.io/dockerconfigjson");
    let config: Value =
        serde_json::from_slice(&unb64(&pull["data"][".dockerconfigjson"])).expect("json");
    assert_eq!(config["auths"]["registry.example"]["username"], "robot");
    assert_eq!(config["auths"]["registry.example"]["password"], "s3cret");
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_create_namespace_serviceaccount_and_configmap() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    assert_eq!(
        k.run(&["create", "namespace", "team-a"], None).await.trim(),
        "namespace/team-a created"
    );
    let ns = get_json(&k, &["namespace", "team-a"]).await;
    assert_eq!(ns["metadata"]["name"], "team-a");
    assert_eq!(ns["status"]["phase"], "Active");
    let (ok, _, err) = k.try_run(&["create", "namespace", "team-a"], None).await;
    assert!(!ok && err.contains("already exists"), "{err}");

    k.run(
        &["create", "serviceaccount", "robot", "--namespace", "team-a"],
        None,
    )
    .await;
    let sa = get_json(&k, &["serviceaccount", "robot", "-n", "team-a"]).await;
    assert_eq!(sa["metadata"]["name"], "robot");
    assert_eq!(sa["metadata"]["namespace"], "team-a");

    k.run(
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--from-literal=mode=fast",
            "--from-literal=empty=",
        ],
        None,
    )
    .await;
    let cm = get_json(&k, &["configmap", "settings", "-n", "team-a"]).await;
    assert_eq!(cm["data"], json!({"mode": "fast", "empty": ""}));
    assert!(cm.get("binaryData").is_none(), "{cm}");

    // A file that is not UTF-8 goes to binaryData.
    let dir = tempfile::tempdir().expect("tempdir");
    let blob = dir.path().join("blob");
    std::fs::write(&blob, [0u8, 159, 146, 150]).expect("write");
    let from_file = format!("--from-file=blob={}", blob.display());
    k.run(
        &["create", "configmap", "files", "-n", "team-a", &from_file],
        None,
    )
    .await;
    let cm = get_json(&k, &["configmap", "files", "-n", "team-a"]).await;
    assert_eq!(cm["binaryData"], json!({"blob": b64(&[0, 159, 146, 150])}));
    assert!(cm.get("data").is_none(), "{cm}");

    // A namespace that does not exist is refused, as for JSON bodies.
    let (ok, _, err) = k
        .try_run(
            &[
                "create",
                "configmap",
                "x",
                "-n",
                "missing",
                "--from-literal=a=b",
            ],
            None,
        )
        .await;
    assert!(!ok && err.contains("not found"), "{err}");
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_create_ingress_sends_protobuf_the_server_reads() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(
        &[
            "create",
            "ingress",
            "web",
            "--class=nginx",
            "--rule=web.example.org/api*=api:8080,tls=web-tls",
            "--default-backend=web:http",
        ],
        None,
    )
    .await;
    let ingress = get_json(&k, &["ingress", "web"]).await;
    let spec = &ingress["spec"];
    assert_eq!(spec["ingressClassName"], "nginx", "{spec}");
    assert_eq!(
        spec["defaultBackend"],
        json!({"service": {"name": "web", "port": {"name": "http"}}})
    );
    assert_eq!(
        spec["rules"],
        json!([{"host": "web.example.org", "http": {"paths": [{"path": "/api", "pathType": "Prefix",
            "backend": {"service": {"name": "api", "port": {"number": 8080}}}}]}}])
    );
    assert_eq!(
        spec["tls"],
        json!([{"hosts": ["web.example.org"], "secretName": "web-tls"}])
    );
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_workload_generators_send_protobuf_the_server_reads() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.create_web(2, &["--port=80"]).await;
    let web = get_json(&k, &["deployment", "web"]).await;
    assert_eq!(web["spec"]["replicas"], 2, "{web}");
    assert_eq!(
        web["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    let container = &web["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (&container["name"], &container["image"]),
        (&json!("nginx"), &json!("nginx:1.27")),
        "{container}"
    );
    assert_eq!(
        container["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );

    k.run(
        &["create", "service", "nodeport", "web", "--tcp=80:8080"],
        None,
    )
    .await;
    let service = get_json(&k, &["service", "web"]).await;
    assert_eq!(service["spec"]["type"], "NodePort");
    assert_eq!(service["spec"]["selector"], json!({"app": "web"}));
    let port = &service["spec"]["ports"][0];
    assert_eq!(
        (&port["port"], &port["targetPort"]),
        (&json!(80), &json!(8080)),
        "{port}"
    );
    assert!(
        port["nodePort"].as_i64().is_some_and(|p| p >= 30000),
        "{port}"
    );

    k.run(
        &[
            "autoscale",
            "deployment",
            "web",
            "--max=5",
            "--cpu-percent=70",
        ],
        None,
    )
    .await;
    let hpa = get_json(&k, &["hpa", "web"]).await;
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(hpa["spec"]["maxReplicas"], 5);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        70
    );
    k.run(
        &[
            "create",
            "pdb",
            "web",
            "--selector=app=web",
            "--min-available=1",
        ],
        None,
    )
    .await;
    let pdb = get_json(&k, &["pdb", "web"]).await;
    assert_eq!(pdb["spec"]["minAvailable"], 1);

    k.run(
        &[
            "create",
            "job",
            "once",
            "--image=busybox:1.36",
            "--",
            "echo",
            "hi",
        ],
        None,
    )
    .await;
    let once = get_json(&k, &["job", "once"]).await;
    let pod = &once["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["containers"][0]["command"], json!(["echo", "hi"]));
    k.run(
        &[
            "create",
            "cronjob",
            "nightly",
            "--image=busybox:1.36",
            "--schedule=0 3 * * *",
            "--",
            "date",
        ],
        None,
    )
    .await;
    let nightly = get_json(&k, &["cronjob", "nightly"]).await;
    assert_eq!(nightly["spec"]["schedule"], "0 3 * * *");
    // A Job made from the CronJob carries its (defaulted) template and names it as owner.
    k.run(&["create", "job", "now", "--from=cronjob/nightly"], None)
        .await;
    let now = get_json(&k, &["job", "now"]).await;
    assert_eq!(now["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    assert_eq!(
        now["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["date"])
    );
    server.shutdown().await;
}

/// POSTs `body` to `mgmt` as its administrator with an optional Content-Type; returns the status
/// code and body.
async fn post(
    server: &TestServer,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connects");
    let ct = content_type
        .map(|c| format!("Content-Type: {c}\r\n"))
        .unwrap_or_default();
    let token = server.admin_token("mgmt").expect("mgmt");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n{ct}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        server.addr(),
        body.len()
    );
    stream.write_all(req.as_bytes()).await.expect("writes");
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.expect("reads");
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

#[tokio::test]
async fn request_bodies_need_a_known_media_type() {
    let server = server_with(Config::default()).await;
    let path = "/clusters/mgmt/api/v1/namespaces/default/configmaps";
    let cm = |name: &str| {
        format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#)
    };
    let (code, text) = post(&server, path, Some("text/plain"), &cm("plain")).await;
    assert_eq!(code, 415, "{text}");
    assert!(
        text.contains("UnsupportedMediaType") && text.contains("text/plain"),
        "{text}"
    );
    let (code, text) = post(
        &server,
        path,
        Some("application/json; charset=utf-8"),
        &cm("json"),
    )
    .await;
    assert_eq!(code, 201, "{text}");
    let (code, text) = post(&server, path, None, &cm("untyped")).await;
    assert_eq!(code, 201, "no Content-Type is JSON: {text}");
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: yaml}\n";
    let (code, text) = post(&server, path, Some("application/yaml"), yaml).await;
    assert_eq!(code, 201, "{text}");
    let (code, text) = post(
        &server,
        path,
        Some("application/vnd.kubernetes.protobuf"),
        &cm("x"),
    )
    .await;
    assert_eq!(code, 400, "JSON sent as protobuf lacks the magic: {text}");
    let configmaps: Api<ConfigMap> = Api::namespaced(client(&server, "mgmt").await, "default");
    let mut names: Vec<String> = configmaps
        .list(&ListParams::default())
        .await
        .expect("list configmaps")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["json", "kube-root-ca.crt", "untyped", "yaml"]);
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_label_and_annotate_set_overwrite_and_remove() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(
        &["create", "configmap", "settings", "--from-literal=a=1"],
        None,
    )
    .await;
    let meta = |obj: Value, field: &str| obj["metadata"][field].clone();

    k.run(
        &["label", "configmap", "settings", "tier=web", "env=dev"],
        None,
    )
    .await;
    let cm = get_json(&k, &["configmap", "settings"]).await;
    assert_eq!(meta(cm, "labels"), json!({"tier": "web", "env": "dev"}));

    let (ok, _, err) = k
        .try_run(&["label", "configmap", "settings", "tier=db"], None)
        .await;
    assert!(!ok && err.contains("already has a value"), "{err}");
    k.run(
        &["label", "configmap", "settings", "tier=db", "--overwrite"],
        None,
    )
    .await;
    k.run(&["label", "configmap", "settings", "env-"], None)
        .await;
    let cm = get_json(&k, &["configmap", "settings"]).await;
    assert_eq!(meta(cm, "labels"), json!({"tier": "db"}));

    k.run(
        &["annotate", "configmap", "settings", "owner=ops", "note=x"],
        None,
    )
    .await;
    k.run(
        &[
            "annotate",
            "configmap",
            "settings",
            "owner=sre",
            "--overwrite",
        ],
        None,
    )
    .await;
    k.run(&["annotate", "configmap", "settings", "note-"], None)
        .await;
    let cm = get_json(&k, &["configmap", "settings"]).await;
    assert_eq!(meta(cm.clone(), "annotations"), json!({"owner": "sre"}));
    assert_eq!(cm["data"], json!({"a": "1"}));
    let managers: Vec<&str> = cm["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(
        managers,
        vec!["kubectl-create", "kubectl-label", "kubectl-annotate"]
    );

    // Cluster-scoped objects are labeled through the same patch.
    k.run(&["create", "namespace", "team-a"], None).await;
    k.run(&["label", "namespace", "team-a", "env=prod"], None)
        .await;
    let ns = get_json(&k, &["namespace", "team-a"]).await;
    assert_eq!(ns["metadata"]["labels"]["env"], "prod");
    server.shutdown().await;
}

#[tokio::test]
async fn port_per_cluster_serves_each_cluster_at_the_root_of_its_own_port() {
    let server = two_clusters(true).await;
    let mgmt = server.cluster_url("mgmt");
    let c1 = server.cluster_url("c1");
    for url in [&mgmt, &c1] {
        let port: u16 = url
            .strip_prefix("https://127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{url} is not https://127.0.0.1:<port>"));
        assert_ne!(port, server.addr().port(), "{url}");
    }
    assert_ne!(mgmt, c1);
    assert!(server
        .kubeconfig_yaml()
        .contains(&format!("server: {c1}\n")));

    let k = Kubectl::new(&server);
    let version: Value =
        serde_json::from_str(&k.run(&["get", "--raw", "/version"], None).await).expect("json");
    assert_eq!(version["gitVersion"], "v1.33.0-sluice-testserver");
    let names = k.run(&["get", "ns", "-o", "name"], None).await;
    assert!(names.lines().any(|l| l == "namespace/default"), "{names}");

    k.run(&["--context", "c1", "create", "namespace", "only-c1"], None)
        .await;
    let in_c1 = k
        .run(
            &["--context", "c1", "get", "ns", "only-c1", "-o", "name"],
            None,
        )
        .await;
    assert_eq!(in_c1.trim(), "namespace/only-c1");
    let (ok, _, err) = k.try_run(&["get", "ns", "only-c1"], None).await;
    assert!(
        !ok && err.contains("NotFound"),
        "mgmt sees c1's namespace: {err}"
    );

    // The OpenAPI index points at the port's root, and kubectl's client-side apply follows it.
    let index: Value = serde_json::from_str(
        &k.run(&["--context", "c1", "get", "--raw", "/openapi/v3"], None)
            .await,
    )
    .expect("json");
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("api/v1 in the index");
    assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
    let applied = k
        .run(
            &["--context", "c1", "apply", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {a: b}\n"),
        )
        .await;
    assert_eq!(applied.trim(), "configmap/applied created");

    // The path layout on the shared listener keeps serving the same clusters.
    let path_url = format!("--server=https://{}/clusters/c1", server.addr());
    let via_path = k
        .run(
            &[
                "--context",
                "c1",
                &path_url,
                "get",
                "ns",
                "only-c1",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert_eq!(via_path.trim(), "namespace/only-c1");
    let index: Value = serde_json::from_str(
        &k.run(
            &[
                "--context",
                "c1",
                &path_url,
                "get",
                "--raw",
                "/clusters/c1/openapi/v3",
            ],
            None,
        )
        .await,
    )
    .expect("json");
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("api/v1 in the index");
    assert!(
        url.starts_with("/clusters/c1/openapi/v3/api/v1?hash="),
        "{url}"
    );
    let (code, body) = http(&server, "GET", "/admin/clusters", "").await;
    assert_eq!((code, body.contains("c1")), (200, true), "{body}");

    // kube-rs reads the same kubeconfig.
    let namespaces: Api<Namespace> = Api::all(client(&server, "c1").await);
    let listed = namespaces
        .list(&ListParams::default())
        .await
        .expect("list namespaces");
    assert!(listed
        .items
        .iter()
        .any(|n| n.metadata.name.as_deref() == Some("only-c1")));

    // Clusters added at run time get a port; removing one closes it.
    server.add_cluster("late").await;
    let late = server.cluster_url("late");
    let addr = late.trim_start_matches("https://").to_string();
    let late_k = Kubectl::new(&server);
    let got = late_k
        .run(
            &[
                "--context",
                "late",
                "get",
                "--raw",
                "/api/v1/namespaces/default",
            ],
            None,
        )
        .await;
    assert!(got.contains("\"name\":\"default\""), "{got}");
    server.remove_cluster("late").await;
    eventually(10, "the removed cluster's port to close", || {
        let addr = addr.clone();
        async move { tokio::net::TcpStream::connect(&addr).await.err() }
    })
    .await;
    server.shutdown().await;
}
