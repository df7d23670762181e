//! HTTPS for the test server: a certificate authority generated at start, a serving certificate
//! it signs (localhost, the loopback addresses and any extra names), and a listener that serves
//! TLS and plain HTTP on the same port. TLS offers HTTP/2 and HTTP/1.1 by ALPN, as
//! kube-apiserver does, so client-go (kubectl) speaks HTTP/2 here as it does to a real cluster.
//! kubectl sends credentials only over TLS (client-go drops a kubeconfig's user on an `http://`
//! server), so the generated kubeconfigs use `https://` with the authority as
//! `certificate-authority-data`; plain HTTP remains for the `/admin` endpoints and raw test
//! requests.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;

/// The first byte of a TLS handshake record.
const HANDSHAKE: u8 = 0x16;

/// The server's TLS identity.
pub struct Tls {
    /// PEM of the authority that signed the serving certificate (what clients trust).
    pub ca_pem: String,
    acceptor: TlsAcceptor,
}

impl Tls {
    /// A fresh authority and serving certificate for `localhost`, `127.0.0.1`, `::1`, `bind`'s
    /// address and `names` (host names or IP addresses clients use instead).
    pub fn generate(bind: SocketAddr, names: &[String]) -> Result<Tls, String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("failed to {what}: {e}");
        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "sluice-testserver-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().map_err(|e| fail("generate the CA key", &e))?;
        let ca_cert = ca
            .self_signed(&ca_key)
            .map_err(|e| fail("sign the CA certificate", &e))?;
        let issuer = Issuer::new(ca, ca_key);

        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "sluice-testserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        if !bind.ip().is_unspecified() {
            hosts.push(bind.ip().to_string());
        }
        hosts.extend(names.iter().cloned());
        hosts.dedup();
        for host in hosts {
            let san = match host.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    host.clone()
                        .try_into()
                        .map_err(|e| fail(&format!("use {host:?} as a DNS name"), &e))?,
                ),
            };
            if !params.subject_alt_names.contains(&san) {
                params.subject_alt_names.push(san);
            }
        }
        let key = KeyPair::generate().map_err(|e| fail("generate the serving key", &e))?;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| fail("sign the serving certificate", &e))?;
        let key_der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| fail("encode the serving key", &e))?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| fail("configure TLS", &e))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key_der)
        .map_err(|e| fail("configure the serving certificate", &e))?;
        // HTTP/2 to the clients that offer it (client-go, kubectl), as kube-apiserver does;
        // HTTP/1.1 to the others.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            ca_pem: ca_cert.pem(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// One accepted connection, TLS or plain.
pub type Connection = Either<TlsStream<TcpStream>, TcpStream>;

/// A listener fed by a task that accepts TCP connections and finishes each TLS
/// handshake in a task of its own, so that a slow client never holds up the others.
pub struct DualListener {
    accepted: mpsc::Receiver<(Connection, SocketAddr)>,
}

impl DualListener {
    /// Starts accepting on `listener` until `shutdown` is cancelled.
    pub fn start(listener: TcpListener, tls: &Tls, shutdown: CancellationToken) -> DualListener {
        let (sender, accepted) = mpsc::channel(64);
        let acceptor = tls.acceptor.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(error) => {
                            tracing::warn!(error = &error as &dyn std::error::Error, "failed to accept a connection");
                            continue;
                        }
                    },
                };
                // Small request/response exchanges stall on delayed ACKs without TCP_NODELAY.
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "failed to set TCP_NODELAY"
                    );
                }
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    let mut first = [0u8; 1];
                    let connection = match tcp.peek(&mut first).await {
                        Ok(1) if first[0] == HANDSHAKE => match acceptor.accept(tcp).await {
                            Ok(tls) => Either::Left(tls),
                            Err(error) => {
                                tracing::debug!(error = &error as &dyn std::error::Error, %peer, "TLS handshake failed");
                                return;
                            }
                        },
                        Ok(_) => Either::Right(tcp),
                        Err(_) => return,
                    };
                    // The server has stopped when nobody receives.
                    let _ = sender.send((connection, peer)).await;
                });
            }
        });
        DualListener { accepted }
    }
}

impl DualListener {
    /// The next accepted connection, TLS handshake done.
    pub async fn next(&mut self) -> (Connection, SocketAddr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accept task ended (shutdown): wait for the server's own shutdown to finish.
            None => std::future::pending().await,
        }
    }
}
