//! The conversion webhook of the local stack: a throwaway CA and a serving certificate for
//! 127.0.0.1 (what cert-manager provides in a cluster, ADR 0019), the watcher's webhook options,
//! and the URL the test server's CRDs call.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

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
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "sluice stack webhook CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "sluice-conversion-webhook");
        params.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        let cert_path = dir.join("webhook.crt");
        let key_path = dir.join("webhook.key");
        std::fs::write(&cert_path, cert.pem())
            .with_context(|| format!("failed to write {}", cert_path.display()))?;
        std::fs::write(&key_path, key.serialize_pem())
            .with_context(|| format!("failed to write {}", key_path.display()))?;
        Ok(StackWebhook {
            port: sluice_testkit::free_port(),
            ca_pem: ca_cert.pem().into_bytes(),
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
