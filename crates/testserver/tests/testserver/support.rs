//! Shared helpers: start a server, build kube-rs clients from its kubeconfig, poll with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use sluice_testserver::{Config as ServerConfig, TestServer};

pub async fn server(clusters: &[&str]) -> TestServer {
    server_with(ServerConfig {
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        ..ServerConfig::default()
    })
    .await
}

pub async fn server_with(config: ServerConfig) -> TestServer {
    TestServer::start(config).await.expect("test server starts")
}

/// A kube-rs client for one cluster, built from the server's generated kubeconfig.
pub async fn client(server: &TestServer, cluster: &str) -> Client {
    Client::try_from(config(server, cluster).await).expect("client builds")
}

/// A client that reports 429/503 at once: kube-rs 5 otherwise retries them (up to 15 times, with backoff).
pub async fn client_without_retry(server: &TestServer, cluster: &str) -> Client {
    let mut config = config(server, cluster).await;
    config.default_retry = false;
    Client::try_from(config).expect("client builds")
}

async fn config(server: &TestServer, cluster: &str) -> Config {
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig_yaml()).expect("kubeconfig parses");
    let options = KubeConfigOptions {
        context: Some(cluster.to_string()),
        ..KubeConfigOptions::default()
    };
    Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("kubeconfig context loads")
}

/// Polls `check` until it returns `Some`, failing after `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The HTTP status of a kube-rs API error (0 for other errors).
pub fn code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A raw HTTP/1.1 request to the server (for admin endpoints and raw watch lines), as the
/// administrator of the cluster its path names.
pub async fn http(server: &TestServer, method: &str, path: &str, body: &str) -> (u16, String) {
    let (code, _, body) = http_with(server, method, path, "application/json", body).await;
    (code, body)
}

/// A raw HTTP/1.1 request with a content type, as the administrator of the cluster its path
/// names (`/clusters/<name>/...`, no token otherwise); returns the status, the response head and
/// the body.
pub async fn http_with(
    server: &TestServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String, String) {
    let token = path
        .strip_prefix("/clusters/")
        .and_then(|rest| server.admin_token(rest.split(['/', '?']).next()?));
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let headers = format!("{authorization}Content-Type: {content_type}\r\n");
    http_raw(server, method, path, &headers, body).await
}

/// A raw plain-HTTP/1.1 request with exactly the given header lines (each ending in `\r\n`)
/// besides `Host`, `Content-Length` and `Connection`; returns the status, the response head and
/// the body. The server may answer before it has read a large body, so a failed write is not an
/// error here.
pub async fn http_raw(
    server: &TestServer,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connects");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        server.addr(),
        body.len()
    );
    let _ = stream.write_all(req.as_bytes()).await;
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .map(|(h, b)| (h.to_string(), b.to_string()))
        .unwrap_or_default();
    (code, head, body)
}
