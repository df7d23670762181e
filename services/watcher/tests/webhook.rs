//! The watcher's conversion webhook over HTTPS, called by the API test server as kube-apiserver
//! calls a CRD's webhook: a v1alpha1 EventSource and EventTrigger are stored as v1beta1 and read
//! back in both versions; a selector the conversion rejects fails the write with the webhook's
//! message; bad TLS files fail the start.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use serde_json::{json, Value};
use sluice_runtime::{CancellationToken, Health};
use sluice_testserver::{Config, TestServer};
use sluice_watcher::webhook;

/// Writes a CA-signed serving certificate for 127.0.0.1 into `dir`; returns the CA PEM.
fn issue(dir: &Path) -> Vec<u8> {
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name.push(DnType::CommonName, "ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_key = KeyPair::generate().expect("ca key");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::default();
    params.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("cert");
    std::fs::write(dir.join("tls.crt"), cert.pem()).expect("write cert");
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("write key");
    ca.pem().into_bytes()
}

/// A raw request to the test server as the management cluster's administrator (the port also
/// answers plain HTTP); returns the status and the JSON body.
async fn request(server: &TestServer, method: &str, path: &str, body: &Value) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let token = server.admin_token("mgmt").expect("the mgmt cluster");
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connects");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (code, json)
}

const API: &str = "/clusters/mgmt/apis/lib.projectsveltos.io";

// Multi-threaded: the test server calls the webhook blocking (in `block_in_place`), and the
// webhook runs on this runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_converts_through_the_watchers_webhook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = issue(dir.path());
    let token = CancellationToken::new();
    let (addr, task) = webhook::serve(
        "127.0.0.1:0".parse().expect("addr"),
        &dir.path().join("tls.crt"),
        &dir.path().join("tls.key"),
        Health::new(),
        token.clone(),
    )
    .await
    .expect("webhook starts");
    let server = TestServer::start(Config {
        sveltos_crds: true,
        conversion_webhook: Some((format!("https://{addr}{}", webhook::CONVERT_PATH), ca)),
        ..Config::default()
    })
    .await
    .expect("test server starts");

    let source = json!({"apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventSource",
        "metadata": {"name": "sveltos-service"},
        "spec": {"collectResources": true, "group": "", "version": "v1", "kind": "Service",
                 "labelsFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]}});
    let (code, body) = request(
        &server,
        "POST",
        &format!("{API}/v1alpha1/eventsources"),
        &source,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (_, beta) = request(
        &server,
        "GET",
        &format!("{API}/v1beta1/eventsources/sveltos-service"),
        &Value::Null,
    )
    .await;
    assert_eq!(
        beta["spec"]["resourceSelectors"][0]["labelFilters"][0]["key"], "sveltos",
        "{beta}"
    );
    let (_, alpha) = request(
        &server,
        "GET",
        &format!("{API}/v1alpha1/eventsources/sveltos-service"),
        &Value::Null,
    )
    .await;
    assert_eq!(alpha["spec"], source["spec"]);

    let trigger = json!({"apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventTrigger",
        "metadata": {"name": "t"},
        "spec": {"sourceClusterSelector": "env=fv", "eventSourceName": "sveltos-service"}});
    let (code, body) = request(
        &server,
        "POST",
        &format!("{API}/v1alpha1/eventtriggers"),
        &trigger,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (_, beta) = request(
        &server,
        "GET",
        &format!("{API}/v1beta1/eventtriggers/t"),
        &Value::Null,
    )
    .await;
    assert_eq!(
        beta["spec"]["sourceClusterSelector"],
        json!({"matchLabels": {"env": "fv"}})
    );

    let mut broken = trigger.clone();
    broken["metadata"]["name"] = json!("broken");
    broken["spec"]["sourceClusterSelector"] = json!("env in (");
    let (code, body) = request(
        &server,
        "POST",
        &format!("{API}/v1alpha1/eventtriggers"),
        &broken,
    )
    .await;
    assert_eq!(code, 500, "{body}");
    let message = body["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("conversion webhook for lib.projectsveltos.io/v1alpha1, Kind=EventTrigger failed: failed to convert \"broken\": spec.sourceClusterSelector: invalid label selector"),
        "{message}"
    );

    token.cancel();
    task.await.expect("webhook stops");
    server.shutdown().await;
}

#[tokio::test]
async fn bad_tls_files_fail_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("empty.pem"), "").expect("write");
    let start = |cert: &str, key: &str| {
        let (cert, key) = (dir.path().join(cert), dir.path().join(key));
        async move {
            webhook::serve(
                "127.0.0.1:0".parse().expect("addr"),
                &cert,
                &key,
                Health::new(),
                CancellationToken::new(),
            )
            .await
            .map(|_| ())
        }
    };
    let missing = start("missing.crt", "missing.key")
        .await
        .expect_err("fails");
    assert!(
        missing
            .to_string()
            .starts_with("failed to read the webhook TLS file"),
        "{missing}"
    );
    let empty = start("empty.pem", "empty.pem").await.expect_err("fails");
    assert!(
        empty.to_string().ends_with("holds no usable certificate"),
        "{empty}"
    );
}
