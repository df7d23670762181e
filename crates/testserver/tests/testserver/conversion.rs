//! CRD conversion through a webhook, as kube-apiserver does it: objects are stored in the storage
//! version and converted for every read; the written version's schema validates before
//! conversion, the storage version's after; a failing webhook is a 500 naming the conversion.
//! The webhook here is a small HTTPS server on its own thread answering with sluice's
//! conversion (`sluice_domain::conversion`), or failing on purpose. The last test applies every
//! example and seed object with kubectl and reads each back in both versions.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use serde_json::{json, Value};
use sluice_testserver::{Config, TestServer};

use super::kubectl::Kubectl;
use super::support::{http, server_with};

/// What the in-test webhook answers.
#[derive(Clone, Copy)]
pub enum Answer {
    /// sluice's conversion.
    Convert,
    /// A `Failure` result with this message.
    Fail(&'static str),
}

/// An HTTPS conversion webhook on a thread of its own (the test server calls webhooks blocking).
pub struct Webhook {
    pub url: String,
    pub ca: Vec<u8>,
}

impl Webhook {
    pub fn start(answer: Answer) -> Webhook {
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "webhook-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_key = KeyPair::generate().expect("ca key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
        let issuer = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "webhook");
        params.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().expect("ip"))];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &issuer).expect("cert");

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
            )
            .expect("server config");
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!(
            "https://{}/convert",
            listener.local_addr().expect("local addr")
        );
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                    continue;
                };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let Some(body) = read_request(&mut tls) else {
                    continue;
                };
                let review: Value = serde_json::from_slice(&body).unwrap_or_default();
                let reply = match answer {
                    Answer::Convert => sluice_domain::conversion::review(&review)
                        .unwrap_or_else(|e| json!({"response": {"result": {"status": "Failure", "message": e.to_string()}}})),
                    Answer::Fail(message) => json!({
                        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                        "response": {"uid": review["request"]["uid"], "result": {"status": "Failure", "message": message}},
                    }),
                };
                let bytes = serde_json::to_vec(&reply).unwrap_or_default();
                let head = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", bytes.len());
                let _ = tls.write_all(head.as_bytes());
                let _ = tls.write_all(&bytes);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        Webhook {
            url,
            ca: ca_cert.pem().into_bytes(),
        }
    }
}

/// Reads one HTTP/1.1 request with a Content-Length body; returns the body.
fn read_request(stream: &mut impl Read) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(buf[end + 4..end + 4 + length].to_vec());
        }
    }
}

async fn converting_server(webhook: &Webhook) -> TestServer {
    server_with(Config {
        sveltos_crds: true,
        conversion_webhook: Some((webhook.url.clone(), webhook.ca.clone())),
        ..Config::default()
    })
    .await
}

const ES: &str = "/clusters/mgmt/apis/lib.projectsveltos.io";

fn flat_event_source() -> Value {
    json!({"apiVersion": "lib.projectsveltos.io/v1alpha1", "kind": "EventSource",
           "metadata": {"name": "sveltos-service"},
           "spec": {"collectResources": true, "group": "", "version": "v1", "kind": "Service",
                    "labelsFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]}})
}

async fn get(server: &TestServer, path: &str) -> Value {
    let (code, body) = http(server, "GET", path, "").await;
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

#[tokio::test]
async fn objects_are_stored_in_the_storage_version_and_read_in_any() {
    let webhook = Webhook::start(Answer::Convert);
    let server = converting_server(&webhook).await;
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1alpha1/eventsources"),
        &flat_event_source().to_string(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let created: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        created["spec"],
        flat_event_source()["spec"],
        "answered in the written version"
    );

    let beta = get(
        &server,
        &format!("{ES}/v1beta1/eventsources/sveltos-service"),
    )
    .await;
    assert_eq!(beta["apiVersion"], "lib.projectsveltos.io/v1beta1");
    assert_eq!(
        beta["spec"],
        json!({"collectResources": true, "resourceSelectors": [{"group": "", "version": "v1", "kind": "Service",
               "labelFilters": [{"key": "sveltos", "operation": "Equal", "value": "fv"}]}]})
    );
    let alpha = get(
        &server,
        &format!("{ES}/v1alpha1/eventsources/sveltos-service"),
    )
    .await;
    assert_eq!(alpha["spec"], flat_event_source()["spec"]);
    assert_eq!(
        alpha["metadata"]["annotations"],
        Value::Null,
        "no conversion data shows in v1alpha1"
    );

    let list = get(&server, &format!("{ES}/v1alpha1/eventsources")).await;
    assert_eq!(list["items"][0]["spec"], flat_event_source()["spec"]);
    let list = get(&server, &format!("{ES}/v1beta1/eventsources")).await;
    assert_eq!(list["items"][0]["spec"], beta["spec"]);

    // A merge patch in v1alpha1 applies to the v1alpha1 form and is stored converted.
    let (code, _, body) = super::support::http_with(
        &server,
        "PATCH",
        &format!("{ES}/v1alpha1/eventsources/sveltos-service"),
        "application/merge-patch+json",
        r#"{"spec": {"namespace": "web"}}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let beta = get(
        &server,
        &format!("{ES}/v1beta1/eventsources/sveltos-service"),
    )
    .await;
    assert_eq!(beta["spec"]["resourceSelectors"][0]["namespace"], "web");

    // A watch in v1alpha1 sees the flat form.
    let (code, body) = http(
        &server,
        "GET",
        &format!("{ES}/v1alpha1/eventsources?watch=true&timeoutSeconds=1"),
        "",
    )
    .await;
    assert_eq!(code, 200);
    let event: Value = body
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no watch event in {body}"));
    assert_eq!(event["type"], "ADDED");
    assert_eq!(
        event["object"]["apiVersion"],
        "lib.projectsveltos.io/v1alpha1"
    );
    assert_eq!(event["object"]["spec"]["namespace"], "web");
    assert_eq!(event["object"]["spec"]["kind"], "Service");
}

#[tokio::test]
async fn the_written_version_validates_before_conversion_and_the_storage_version_after() {
    let webhook = Webhook::start(Answer::Convert);
    let server = converting_server(&webhook).await;
    // v1alpha1's own schema: the flat `kind` has minLength 1.
    let mut empty_kind = flat_event_source();
    empty_kind["spec"]["kind"] = json!("");
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1alpha1/eventsources"),
        &empty_kind.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains(
            "spec.kind: Invalid value: \\\"\\\": spec.kind in body should be at least 1 chars long"
        ),
        "{body}"
    );
    // v1alpha1 allows a flat spec without `version`; the converted v1beta1 selector requires it.
    let mut no_version = flat_event_source();
    no_version["spec"]
        .as_object_mut()
        .map(|s| s.remove("version"));
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1alpha1/eventsources"),
        &no_version.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("spec.resourceSelectors[0].version: Required value"),
        "{body}"
    );
}

#[tokio::test]
async fn a_failing_webhook_fails_the_request_with_the_conversion_error() {
    let webhook = Webhook::start(Answer::Fail("no way"));
    let server = converting_server(&webhook).await;
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1alpha1/eventsources"),
        &flat_event_source().to_string(),
    )
    .await;
    assert_eq!(code, 500, "{body}");
    let status: Value = serde_json::from_str(&body).expect("Status");
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(
        status["message"],
        "conversion webhook for lib.projectsveltos.io/v1alpha1, Kind=EventSource failed: no way"
    );
    // Writes in the storage version need no conversion; reading them in v1alpha1 does.
    let beta = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "b"},
                      "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Pod"}]}});
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1beta1/eventsources"),
        &beta.to_string(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = http(&server, "GET", &format!("{ES}/v1alpha1/eventsources/b"), "").await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains(
            "conversion webhook for lib.projectsveltos.io/v1beta1, Kind=EventSource failed: no way"
        ),
        "{body}"
    );

    // An unreachable webhook (nothing listens) is reported the same way.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("https://{}/convert", closed.local_addr().expect("addr"));
    drop(closed);
    let server = server_with(Config {
        sveltos_crds: true,
        conversion_webhook: Some((url, webhook.ca.clone())),
        ..Config::default()
    })
    .await;
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1alpha1/eventsources"),
        &flat_event_source().to_string(),
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains(
            "conversion webhook for lib.projectsveltos.io/v1alpha1, Kind=EventSource failed: Post"
        ),
        "{body}"
    );
}

#[tokio::test]
async fn a_webhook_named_by_service_is_reached_through_the_configured_url() {
    let webhook = Webhook::start(Answer::Convert);
    // The CRD as shipped in k8s/crds (clientConfig.service), with the caBundle cert-manager injects.
    let mut crd: Value =
        serde_yaml::from_str(include_str!("../../../../k8s/crds/eventsources.yaml")).expect("CRD");
    assert_eq!(
        crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["name"],
        "sluice-conversion-webhook"
    );
    use base64::Engine as _;
    crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] =
        json!(base64::engine::general_purpose::STANDARD.encode(&webhook.ca));
    let base = webhook.url.trim_end_matches("/convert").to_string();
    let server = server_with(Config {
        objects: vec![crd],
        webhook_services: Arc::new(
            [("sluice-system/sluice-conversion-webhook".to_string(), base)].into(),
        ),
        ..Config::default()
    })
    .await;
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1alpha1/eventsources"),
        &flat_event_source().to_string(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let beta = get(
        &server,
        &format!("{ES}/v1beta1/eventsources/sveltos-service"),
    )
    .await;
    assert_eq!(beta["spec"]["resourceSelectors"][0]["kind"], "Service");
    // Without the mapping the Service cannot be reached.
    let server = server_with(Config {
        objects: vec![
            serde_yaml::from_str(include_str!("../../../../k8s/crds/eventsources.yaml"))
                .expect("CRD"),
        ],
        ..Config::default()
    })
    .await;
    let (code, body) = http(
        &server,
        "POST",
        &format!("{ES}/v1alpha1/eventsources"),
        &flat_event_source().to_string(),
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("failed: service \\\"sluice-conversion-webhook\\\" not found"),
        "{body}"
    );
}

fn example_files() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let mut yamls: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("example dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        yamls.sort();
        files.extend(yamls);
    }
    files
}

/// The objects of a YAML file, without nulls.
fn objects_of(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// `kubectl get <plural>.<version>.<group> <name> -o json`.
async fn read_back(kubectl: &Kubectl, object: &Value, version: &str) -> Value {
    let kind = object["kind"].as_str().unwrap_or("");
    let plural = format!("{}s", kind.to_lowercase());
    let resource = format!("{plural}.{version}.lib.projectsveltos.io");
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let out = kubectl
        .run(&["get", &resource, name, "-o", "json"], None)
        .await;
    serde_json::from_str(&out).expect("kubectl prints JSON")
}

#[tokio::test]
async fn kubectl_applies_every_example_and_seed_object_and_reads_it_in_both_versions() {
    let webhook = Webhook::start(Answer::Convert);
    let server = converting_server(&webhook).await;
    let kubectl = Kubectl::new(&server);
    kubectl
        .run(&["create", "namespace", "projectsveltos"], None)
        .await;
    let mut applied = 0;
    let mut both = 0;
    // Each example file as a user applies it.
    for file in example_files() {
        let path = file.display().to_string();
        kubectl.run(&["apply", "-f", &path], None).await;
        for object in objects_of(&std::fs::read_to_string(&file).expect("readable")) {
            applied += 1;
            both += check_versions(&kubectl, &object).await;
        }
    }
    // The seeds' objects one by one (several share a name), each replacing the one before.
    let seeds = include_str!("../fixtures/seed-objects.yaml");
    for object in objects_of(seeds) {
        let text = serde_yaml::to_string(&object).expect("YAML");
        let kind = object["kind"].as_str().unwrap_or("");
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let _ = kubectl
            .try_run(
                &["delete", &kind.to_lowercase(), name, "--ignore-not-found"],
                None,
            )
            .await;
        kubectl.run(&["apply", "-f", "-"], Some(&text)).await;
        applied += 1;
        both += check_versions(&kubectl, &object).await;
    }
    assert!(applied > 20, "applied {applied} objects");
    assert!(both >= 10, "{both} objects read in both versions");
}

/// For a kind served in both versions, reads the object back in each and checks that the
/// version it was written in gives back what was written and the other has that version's shape.
async fn check_versions(kubectl: &Kubectl, object: &Value) -> usize {
    let kind = object["kind"].as_str().unwrap_or("");
    if kind != "EventSource" && kind != "EventTrigger" {
        return 0;
    }
    let written = object["apiVersion"]
        .as_str()
        .unwrap_or("")
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    let other = if written == "v1alpha1" {
        "v1beta1"
    } else {
        "v1alpha1"
    };
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let same = read_back(kubectl, object, &written).await;
    assert!(
        contains(&same["spec"], &object["spec"]),
        "{kind} {name} read in {written}:\n{}\nwritten:\n{}",
        same["spec"],
        object["spec"]
    );
    let converted = read_back(kubectl, object, other).await;
    assert_eq!(
        converted["apiVersion"],
        format!("lib.projectsveltos.io/{other}")
    );
    let expected =
        sluice_domain::conversion::convert(&same, &format!("lib.projectsveltos.io/{other}"))
            .expect("converts");
    // The other version also shows its own schema's defaults.
    assert!(
        contains(&converted["spec"], &expected["spec"]),
        "{kind} {name} read in {other}:\n{}\nexpected:\n{}",
        converted["spec"],
        expected["spec"]
    );
    match (kind, other) {
        ("EventSource", "v1beta1") => assert!(
            converted["spec"]["resourceSelectors"].is_array(),
            "{converted}"
        ),
        ("EventTrigger", "v1beta1") => assert!(
            converted["spec"]["sourceClusterSelector"].is_object(),
            "{converted}"
        ),
        ("EventTrigger", _) => assert!(
            converted["spec"]["sourceClusterSelector"].is_string(),
            "{converted}"
        ),
        _ => {}
    }
    1
}

/// Whether `actual` holds everything of `expected` (objects may have more fields: defaults).
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|got| contains(got, v))),
        (Value::Array(a), Value::Array(e)) => {
            a.len() == e.len() && a.iter().zip(e).all(|(got, v)| contains(got, v))
        }
        _ => actual == expected,
    }
}
