//! `sluice setup` (docker-compose's one-shot job) against a running API test server, checked with
//! the kubeconfigs it writes: each service's is its own ServiceAccount under the RBAC of
//! `k8s/base`, the managed clusters are registered the Sveltos way with working kubeconfig
//! Secrets, seed 000's example is in place, and the host kubeconfig works with kubectl.
#![allow(clippy::unwrap_used)] // tests fail by panicking

use std::process::Command;

use base64::Engine as _;
use serde_json::{json, Value};
use sluice_cli::setup::{parse_cluster, run, SetupArgs};
use sluice_kube::{apply, client::from_kubeconfig_text};
use sluice_testserver::{Config, TestServer};

async fn get(client: &kube::Client, api_version: &str, kind: &str, ns: &str, name: &str) -> Value {
    let resolved = apply::resolve(client, api_version, kind).await.unwrap();
    apply::get(client, &resolved, ns, name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no {kind} {ns}/{name}"))
}

// multi-threaded: kubectl runs as a blocking child process while this runtime serves the API
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_prepares_clusters_service_accounts_example_and_host_kubeconfig() {
    let server = TestServer::start(Config {
        clusters: vec!["mgmt".into(), "cluster-a".into(), "cluster-b".into()],
        sveltos_crds: true,
        ..Config::default()
    })
    .await
    .unwrap();
    let addr = server.addr().to_string();
    let dir = tempfile::tempdir().unwrap();
    let args = SetupArgs {
        server: format!("http://{addr}"),
        advertise: format!("localhost:{}", server.addr().port()),
        host_address: addr.clone(),
        dir: dir.path().to_path_buf(),
        clusters: vec![
            parse_cluster("cluster-a:env=fv").unwrap(),
            parse_cluster("cluster-b:env=prod").unwrap(),
        ],
        example: Some("cluster-a".into()),
        wait_seconds: 10,
    };
    let mut out = Vec::new();
    run(&args, &mut out).await.unwrap();
    // a second run (a restarted job) changes nothing and succeeds
    run(&args, &mut Vec::new()).await.unwrap();
    let printed = String::from_utf8(out).unwrap();
    assert!(printed.contains("registered cluster-a"), "{printed}");

    let host = dir.path().join("host.kubeconfig");
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&host)
        .args(["--context", "cluster-b", "get", "namespaces", "-o", "name"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl with the host kubeconfig: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("namespace/default"));

    let admin = from_kubeconfig_text(&server.kubeconfig_for("mgmt"), None)
        .await
        .unwrap();
    for (name, env) in [("cluster-a", "fv"), ("cluster-b", "prod")] {
        let cluster = get(
            &admin,
            "lib.projectsveltos.io/v1beta1",
            "SveltosCluster",
            "default",
            name,
        )
        .await;
        assert_eq!(cluster["metadata"]["labels"], json!({"env": env}), "{name}");
        assert_eq!(cluster["status"]["ready"], true, "{name}");
        let secret = get(
            &admin,
            "v1",
            "Secret",
            "default",
            &format!("{name}-sveltos-kubeconfig"),
        )
        .await;
        let kubeconfig = base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["kubeconfig"].as_str().unwrap())
            .unwrap();
        let kubeconfig = String::from_utf8(kubeconfig).unwrap();
        assert!(
            kubeconfig.contains(&format!("https://{}/clusters/{name}", args.advertise)),
            "{kubeconfig}"
        );
        // the Secret's kubeconfig reaches that cluster (and only names that one)
        let managed = from_kubeconfig_text(&kubeconfig, None).await.unwrap();
        let ns = get(&managed, "v1", "Namespace", "", "default").await;
        assert_eq!(ns["metadata"]["name"], "default");
        let other = if name == "cluster-a" {
            "cluster-b"
        } else {
            "cluster-a"
        };
        assert!(
            !kubeconfig.contains(&format!("/clusters/{other}")),
            "{kubeconfig}"
        );
    }

    get(
        &admin,
        "lib.projectsveltos.io/v1alpha1",
        "EventSource",
        "",
        "sveltos-service",
    )
    .await;
    get(
        &admin,
        "lib.projectsveltos.io/v1alpha1",
        "EventBasedAddOn",
        "",
        "service-network-policy",
    )
    .await;
    get(&admin, "v1", "ConfigMap", "default", "network-policy").await;
    let managed = from_kubeconfig_text(&server.kubeconfig_for("cluster-a"), None)
        .await
        .unwrap();
    let service = get(&managed, "v1", "Service", "default", "my-service").await;
    assert_eq!(service["metadata"]["labels"]["sveltos"], "fv");

    for service in sluice_cli::stack::SERVICES {
        let text =
            std::fs::read_to_string(dir.path().join(format!("{service}.kubeconfig"))).unwrap();
        let client = from_kubeconfig_text(&text, None).await.unwrap();
        // the service is authenticated as its own ServiceAccount, which is no administrator
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("by-{service}")}});
        let created = sluice_kube::manifest::apply_documents(&client, &[namespace], "test").await;
        let error = format!("{:?}", created.unwrap_err());
        assert!(
            error.contains(&format!("system:serviceaccount:sluice-system:{service}")),
            "{service}: {error}"
        );
    }
}
