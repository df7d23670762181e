//! The `sveltos-nats` Secret's TLS authorization against a real TLS nats-server: the managed
//! cluster's NATS requires TLS and verifies client certificates (`--tlsverify`); the watcher
//! connects with the Secret's `clientCert` (`certPem`/`keyPem`) and `rootCA`, all base64 as Go
//! marshals `[]byte`. A client certificate from another CA, or no client certificate, is
//! refused by the server, counted, logged with the reason, and touches no other cluster.

use std::path::Path;

use base64::Engine as _;
use serde_json::{json, Value};
use sluice_testkit::{wait_for, Issued, NatsServer, TestCa};

#[path = "cloudevents/fixture.rs"]
#[allow(dead_code)] // shared with tests/cloudevents.rs, which uses all of it
mod fixture;

use fixture::*;

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

/// A core NATS configuration for `url` with this TLS authorization.
fn tls_secret(url: &str, client: Option<&Issued>, ca: &TestCa) -> Value {
    let mut authorization = json!({"rootCA": b64(ca.pem())});
    if let Some(client) = client {
        authorization["clientCert"] =
            json!({"certPem": b64(&client.cert), "keyPem": b64(&client.key)});
    }
    json!({"nats": {"configuration": {
        "url": url, "subjects": ["user-operation"], "authorization": authorization}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_and_root_ca_authenticate_against_a_tls_nats() -> anyhow::Result<()> {
    let clusters = ["production", "other-ca", "no-client-cert", "wrong-root-ca"];
    let mut fx = Fixture::start_with(&clusters).await?;
    let ca = TestCa::new("managed-cluster-ca")?;
    let server = ca.server("nats")?;
    let client = ca.client("sveltos")?;
    let someone_else = TestCa::new("someone-else")?;
    let stranger = someone_else.client("sveltos")?;

    let files = tempfile::tempdir()?;
    let ca_file = write(files.path(), "ca.pem", ca.pem())?;
    let cert_file = write(files.path(), "server.pem", &server.cert)?;
    let key_file = write(files.path(), "server-key.pem", &server.key)?;
    let tls_nats = NatsServer::start_with_args(&[
        "--tls",
        "--tlscert",
        &cert_file,
        "--tlskey",
        &key_file,
        "--tlscacert",
        &ca_file,
        "--tlsverify",
    ])
    .await?;
    let url = tls_nats.url();

    fx.nats_secret_in("production", &tls_secret(&url, Some(&client), &ca))
        .await?;
    fx.nats_secret_in("other-ca", &tls_secret(&url, Some(&stranger), &ca))
        .await?;
    fx.nats_secret_in("no-client-cert", &tls_secret(&url, None, &ca))
        .await?;
    // The watcher must not trust a server its root CA did not sign.
    fx.nats_secret_in(
        "wrong-root-ca",
        &tls_secret(&url, Some(&client), &someone_else),
    )
    .await?;
    fx.start_watcher()?;

    // The test's own client proves the server really demands a verified client certificate.
    let plain = async_nats::ConnectOptions::new()
        .add_root_certificates(files.path().join("ca.pem"))
        .connect(&url)
        .await;
    assert!(
        plain.is_err(),
        "the TLS nats-server accepted a client without certificate"
    );
    let client_cert = write(files.path(), "client.pem", &client.cert)?;
    let client_key = write(files.path(), "client-key.pem", &client.key)?;
    let nats = async_nats::ConnectOptions::new()
        .add_root_certificates(ca_file.into())
        .add_client_certificate(client_cert.into(), client_key.into())
        .connect(&url)
        .await?;

    fx.wait_subscribed_in("production", &nats, "user-operation")
        .await?;
    nats.publish("user-operation", SEED_LOGIN.into()).await?;
    nats.flush().await?;
    let (received, event) = fx
        .wait_event("the login over TLS", |e| e["id"] == "10001")
        .await?;
    assert_eq!(event, serde_json::from_str::<Value>(SEED_LOGIN)?);
    assert_eq!(
        received.cluster.as_ref().map(|c| c.name.as_str()),
        Some("production")
    );

    // The refused clusters are counted as connection errors and logged with the reason.
    let refused = wait_for("three refused TLS connections", DEADLINE, || async {
        fx.counter("sluice_watcher_nats_connect_errors_total")
            .await
            .ok()
            .filter(|n| *n >= 3)
    })
    .await;
    refused.map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    let log = fx.log();
    for (cluster, reason) in [
        ("other-ca", "UnknownCA"),
        ("no-client-cert", "CertificateRequired"),
        ("wrong-root-ca", "UnknownIssuer"),
    ] {
        let line = log
            .lines()
            .find(|line| line.contains("cannot listen to nats") && line.contains(cluster));
        let line = line.ok_or_else(|| anyhow::anyhow!("no connect error for {cluster}:\n{log}"))?;
        assert!(
            line.contains(&format!("failed to connect to {url}")) && line.contains(reason),
            "{cluster}: expected {reason:?} in {line}"
        );
    }
    let all = fx.received().await?;
    let forwarded: Vec<_> = all
        .iter()
        .filter_map(|r| r.cluster.as_ref().map(|c| c.name.as_str()))
        .filter(|name| *name != "production")
        .collect();
    assert!(
        forwarded.is_empty(),
        "refused clusters forwarded: {forwarded:?}"
    );

    // Giving them the right certificates is enough: no restart.
    for cluster in ["other-ca", "wrong-root-ca"] {
        fx.nats_secret_in(cluster, &tls_secret(&url, Some(&client), &ca))
            .await?;
        fx.wait_subscribed_in(cluster, &nats, "user-operation")
            .await?;
    }
    Ok(())
}
