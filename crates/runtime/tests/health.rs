//! The health endpoint over real HTTP on a local port.
#![allow(clippy::unwrap_used)] // tests fail by panicking

use std::net::SocketAddr;
use std::time::Duration;

use sluice_runtime::{serve_health, CancellationToken, Health};
use sluice_testkit::{free_port, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A minimal HTTP/1.0 GET: status code and body.
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

#[tokio::test]
async fn serves_liveness_readiness_and_metrics_until_cancelled() {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let health = Health::new();
    let token = CancellationToken::new();
    let server = serve_health(addr, health.clone(), token.clone())
        .await
        .unwrap();

    assert_eq!(
        get(addr, "/healthz").await.unwrap(),
        (200, "ok\n".to_owned())
    );
    assert_eq!(
        get(addr, "/readyz").await.unwrap(),
        (503, "not ready: started\n".to_owned())
    );
    health.set_ready(true);
    assert_eq!(
        get(addr, "/readyz").await.unwrap(),
        (200, "ready\n".to_owned())
    );
    health.set_ready(false);
    assert_eq!(get(addr, "/readyz").await.unwrap().0, 503);

    let rejected = health.counter("sluice_evaluator_messages_rejected_total");
    rejected.inc();
    rejected.inc();
    let (status, body) = get(addr, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        body.contains("# TYPE sluice_evaluator_messages_rejected_total counter\n"),
        "{body}"
    );
    assert!(
        body.contains("\nsluice_evaluator_messages_rejected_total 2\n"),
        "{body}"
    );
    assert_eq!(get(addr, "/nope").await.unwrap().0, 404);

    token.cancel();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
    wait_for(
        "the port to refuse connections",
        Duration::from_secs(10),
        || async { TcpStream::connect(addr).await.is_err().then_some(()) },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_taken_port_is_a_startup_error_naming_the_address() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let error = serve_health(addr, Health::new(), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("failed to bind the health endpoint on {addr}")
    );
}
