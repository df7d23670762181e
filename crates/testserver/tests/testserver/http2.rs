//! HTTP/2: the server offers it by ALPN beside HTTP/1.1, as kube-apiserver does, with at most
//! 100 streams open at once on a connection. client-go (kubectl) takes it and carries its
//! watches and requests as streams of one connection; kube-rs's own client offers HTTP/1.1
//! alone and keeps it.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use serde_json::{json, Value};
use sluice_testserver::TestServer;
use tokio::net::TcpStream;

use super::support;

/// A TLS connection to the server that offers `alpn`, trusting the server's authority.
async fn connect(
    server: &TestServer,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice(server.ca_pem().as_bytes()).expect("the CA is PEM");
    roots.add(ca).expect("the CA is a certificate");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(server.addr()).await.expect("connects");
    let name = ServerName::try_from("localhost").expect("a server name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake")
}

type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// An HTTP/2 client over `tls`, its connection driven by a task of its own.
async fn handshake(tls: tokio_rustls::client::TlsStream<TcpStream>) -> Sender {
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    sender
}

/// A request of cluster `mgmt` with its admin `token`.
fn request(token: &str, method: &str, path: &str, body: String) -> hyper::Request<Full<Bytes>> {
    hyper::Request::builder()
        .method(method)
        .uri(format!("https://localhost/clusters/mgmt{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a request")
}

/// The next line of a watch's body, as JSON.
async fn next_event(body: &mut Incoming, pending: &mut Vec<u8>) -> Value {
    loop {
        if let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            return serde_json::from_slice(&line).expect("a watch event is JSON");
        }
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("the watch tells the change within 10 s")
            .expect("the watch goes on")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            pending.extend_from_slice(&data);
        }
    }
}

#[tokio::test]
async fn clients_that_offer_http2_get_it_and_carry_a_watch_and_writes_on_one_connection() {
    let server = support::server(&["mgmt"]).await;
    let h1 = connect(&server, &[b"http/1.1"]).await;
    assert_eq!(h1.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let h2 = connect(&server, &[b"h2", b"http/1.1"]).await;
    assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    let mut sender = handshake(h2).await;
    let token = server.admin_token("mgmt").expect("the admin token");
    let request = |method: &str, path: &str, body: String| request(&token, method, path, body);
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let watch = sender
        .send_request(request(
            "GET",
            &format!("{configmaps}?watch=true&labelSelector=via%3Dh2"),
            String::new(),
        ))
        .await
        .expect("the watch is answered");
    assert_eq!(watch.version(), hyper::Version::HTTP_2);
    assert_eq!(watch.status(), 200);
    let mut events = watch.into_body();
    let mut pending = Vec::new();
    for name in ["a", "b"] {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"via": "h2"}}, "data": {"k": name}});
        let created = sender
            .send_request(request("POST", configmaps, object.to_string()))
            .await
            .expect("the create is answered");
        assert_eq!(created.version(), hyper::Version::HTTP_2);
        let status = created.status();
        let answer = created
            .into_body()
            .collect()
            .await
            .expect("the answer's body")
            .to_bytes();
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&answer));
        let event = next_event(&mut events, &mut pending).await;
        assert_eq!(
            (&event["type"], &event["object"]["metadata"]["name"]),
            (&json!("ADDED"), &json!(name)),
            "{event}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_talks_http2_to_the_server() {
    let server = support::server(&["mgmt"]).await;
    let kubectl = super::kubectl::Kubectl::new(&server);
    // Go's HTTP/2 transport says what it does on stderr with this debug setting.
    let mut command = kubectl.command(&["get", "namespaces", "-o", "name"]);
    command.env("GODEBUG", "http2debug=1");
    let out = command.output().await.expect("kubectl runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.lines().any(|l| l == "namespace/default"), "{stdout}");
    assert!(
        stderr.contains("http2: Transport creating client conn"),
        "kubectl did not use HTTP/2: {stderr}"
    );
    server.shutdown().await;
}

/// kube-apiserver lets a connection have 100 streams open at once: a client with 100 watches
/// open on one connection has its next request wait until one of them ends.
#[tokio::test]
async fn one_connection_has_at_most_100_streams_open_at_once() {
    let server = support::server(&["mgmt"]).await;
    let mut sender = handshake(connect(&server, &[b"h2"]).await).await;
    let token = server.admin_token("mgmt").expect("the admin token");
    let watch = "/api/v1/namespaces/default/configmaps?watch=true";
    let version = || request(&token, "GET", "/version", String::new());
    let mut watches = Vec::new();
    for _ in 0..99 {
        let watch = sender
            .send_request(request(&token, "GET", watch, String::new()))
            .await
            .expect("a watch is answered");
        assert_eq!(watch.status(), 200);
        watches.push(watch);
    }
    // A 100th stream beside 99 watches is served.
    let answered = tokio::time::timeout(Duration::from_secs(5), sender.send_request(version()))
        .await
        .expect("a request beside 99 watches is answered")
        .expect("GET /version");
    assert_eq!(answered.status(), 200);
    watches.push(
        sender
            .send_request(request(&token, "GET", watch, String::new()))
            .await
            .expect("the 100th watch is answered"),
    );
    // A 101st waits for a stream to end.
    let waiting = tokio::spawn(sender.send_request(version()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "a 101st stream was served beside 100 watches"
    );
    drop(watches.pop());
    let answered = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the request is answered once a watch ends")
        .expect("the request's task")
        .expect("GET /version");
    assert_eq!(answered.status(), 200);
    server.shutdown().await;
}
