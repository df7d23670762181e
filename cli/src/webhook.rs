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

    /// Waits until the webhook answers a TLS handshake with the certificate the stack issued
    /// (the watcher starts it before anything else). A server on the port with another
    /// certificate is an error at once: it holds the port the CRDs name, and the API server's
    /// conversions would go to it.
    pub async fn wait_listening(&self, deadline: std::time::Duration) -> anyhow::Result<()> {
        let connector = tokio_rustls::TlsConnector::from(trusting(&self.ca_pem)?);
        let port = self.port;
        let answered =
            sluice_testkit::wait_for("the conversion webhook to listen", deadline, || {
                let connector = connector.clone();
                async move {
                    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .ok()?;
                    let name =
                        rustls::pki_types::ServerName::from(std::net::IpAddr::from([127, 0, 0, 1]));
                    match connector.connect(name, tcp).await {
                        Ok(_) => Some(Ok(())),
                        Err(error) if is_certificate_refusal(&error) => Some(Err(error)),
                        // Not serving yet (accepted, then closed while it starts).
                        Err(_) => None,
                    }
                }
            })
            .await?;
        answered.with_context(|| {
            format!(
                "the server on 127.0.0.1:{port} is not the stack's conversion webhook: its \
                 certificate is not one the stack issued (another process holds the port)"
            )
        })
    }
}

/// A TLS client configuration trusting only the CAs of `ca_pem`.
fn trusting(ca_pem: &[u8]) -> anyhow::Result<std::sync::Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.context("the webhook CA is not PEM")?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}

/// Whether a failed handshake means the server's certificate is not trusted (rather than a
/// server not ready yet).
fn is_certificate_refusal(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use sluice_testkit::TestCa;

    use super::*;

    /// Serves TLS handshakes on a free port with a certificate of `ca`, until aborted.
    async fn tls_server(ca: &TestCa) -> anyhow::Result<(u16, tokio::task::JoinHandle<()>)> {
        let issued = ca.server("elsewhere")?;
        let chain = CertificateDer::pem_slice_iter(issued.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(issued.key.as_bytes())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let port = sluice_testkit::free_port();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let serving = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        Ok((port, serving))
    }

    fn webhook_on(port: u16, ca: &TestCa) -> StackWebhook {
        StackWebhook {
            port,
            ca_pem: ca.pem().as_bytes().to_vec(),
            cert: PathBuf::new(),
            key: PathBuf::new(),
        }
    }

    #[tokio::test]
    async fn the_webhook_is_up_once_it_shows_the_certificate_the_stack_issued() -> anyhow::Result<()>
    {
        let ca = TestCa::new("stack")?;
        let (port, serving) = tls_server(&ca).await?;
        let up = webhook_on(port, &ca)
            .wait_listening(Duration::from_secs(10))
            .await;
        serving.abort();
        up
    }

    #[tokio::test]
    async fn another_server_on_the_webhook_port_is_an_error_naming_the_port() -> anyhow::Result<()>
    {
        let stack_ca = TestCa::new("stack")?;
        let other_ca = TestCa::new("someone else")?;
        let (port, serving) = tls_server(&other_ca).await?;
        let started = std::time::Instant::now();
        let up = webhook_on(port, &stack_ca)
            .wait_listening(Duration::from_secs(10))
            .await;
        serving.abort();
        let Err(error) = up else {
            anyhow::bail!("a server with another CA's certificate passed for the webhook");
        };
        let message = format!("{error:#}");
        anyhow::ensure!(
            message.contains(&format!(
                "127.0.0.1:{port} is not the stack's conversion webhook"
            )),
            "{message}"
        );
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(5),
            "refused only at the deadline: {message}"
        );
        Ok(())
    }
}
