//! The conversion webhook of the local stack: a throwaway CA and a serving certificate for
//! 127.0.0.1 (what cert-manager provides in a cluster, ADR 0019), the watcher's webhook options,
//! and the URL the test server's CRDs call.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sluice_testkit::TestCa;

/// Where the stack's webhook listens and how the watcher and the API server find it.
#[derive(Clone, Debug)]
pub struct StackWebhook {
    pub port: u16,
    /// PEM CA bundle the API server trusts for the webhook.
    pub ca_pem: Vec<u8>,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl StackWebhook {
    /// Issues the certificates into `dir` and picks a free port.
    pub fn issue(dir: &Path) -> anyhow::Result<StackWebhook> {
        let ca = TestCa::new("sluice stack webhook CA")?;
        let issued = ca.server("sluice-conversion-webhook")?;
        let cert_path = dir.join("webhook.crt");
        let key_path = dir.join("webhook.key");
        std::fs::write(&cert_path, &issued.cert)
            .with_context(|| format!("failed to write {}", cert_path.display()))?;
        std::fs::write(&key_path, &issued.key)
            .with_context(|| format!("failed to write {}", key_path.display()))?;
        Ok(StackWebhook {
            port: sluice_testkit::free_port(),
            ca_pem: ca.pem().as_bytes().to_vec(),
            cert: cert_path,
            key: key_path,
        })
    }

    /// `clientConfig.url` of the CRDs.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/convert", self.port)
    }

    /// The watcher's webhook options, as environment.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "SLUICE_WEBHOOK_ADDR".into(),
                format!("127.0.0.1:{}", self.port),
            ),
            (
                "SLUICE_WEBHOOK_TLS_CERT".into(),
                self.cert.display().to_string(),
            ),
            (
                "SLUICE_WEBHOOK_TLS_KEY".into(),
                self.key.display().to_string(),
            ),
        ]
    }

    /// Waits until the webhook accepts connections (the watcher starts it before anything else).
    pub async fn wait_listening(&self, deadline: std::time::Duration) -> anyhow::Result<()> {
        let port = self.port;
        sluice_testkit::wait_for(
            "the conversion webhook to listen",
            deadline,
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await
    }
}
