//! The CRD conversion webhook the watcher serves (ADR 0019): `POST /convert` answers an
//! `apiextensions.k8s.io/v1` `ConversionReview` for EventSource and EventTrigger with
//! `sluice_domain::conversion`, over HTTPS with a PEM certificate and key read at startup.
//! It reads no cluster and no bus: the API server calls it, it only converts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use sluice_runtime::{CancellationToken, Health};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The path the CRDs' `clientConfig` names.
pub const CONVERT_PATH: &str = "/convert";

/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and with which certificate the webhook listens.
#[derive(Clone, Debug, clap::Args)]
pub struct WebhookArgs {
    /// Serve the CRD conversion webhook (HTTPS, `POST /convert`) on this address; off when unset.
    #[arg(long, env = "SLUICE_WEBHOOK_ADDR", requires_all = ["webhook_tls_cert", "webhook_tls_key"])]
    pub webhook_addr: Option<SocketAddr>,
    /// PEM certificate chain of the webhook (`tls.crt` of the Secret cert-manager writes).
    #[arg(long, env = "SLUICE_WEBHOOK_TLS_CERT")]
    pub webhook_tls_cert: Option<PathBuf>,
    /// PEM private key of the webhook (`tls.key`).
    #[arg(long, env = "SLUICE_WEBHOOK_TLS_KEY")]
    pub webhook_tls_key: Option<PathBuf>,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("failed to read the webhook TLS file {path}")]
    ReadTls {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the webhook TLS file {path} holds no usable {what}")]
    BadTls { path: PathBuf, what: &'static str },
    #[error("invalid webhook TLS configuration")]
    Config(#[source] rustls::Error),
    #[error("failed to bind the webhook on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Binds the webhook and serves it until `token` is cancelled. Returns the bound address (port 0
/// picks a free one) and the serving task.
pub async fn serve(
    addr: SocketAddr,
    cert: &Path,
    key: &Path,
    health: Health,
    token: CancellationToken,
) -> Result<(SocketAddr, JoinHandle<()>), WebhookError> {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(cert, key)?));
    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|source| WebhookError::Bind { addr, source })?;
    let bound = tcp
        .local_addr()
        .map_err(|source| WebhookError::Bind { addr, source })?;
    let reviews = health.counter_with(
        "sluice_watcher_conversion_reviews_total",
        &[("result", "success")],
    );
    let failures = health.counter_with(
        "sluice_watcher_conversion_reviews_total",
        &[("result", "failure")],
    );
    let router = Router::new().route(
        CONVERT_PATH,
        post(move |body: axum::body::Bytes| async move {
            let answer = answer(&body);
            match answer
                .pointer("/response/result/status")
                .and_then(Value::as_str)
            {
                Some("Success") => reviews.inc(),
                _ => failures.inc(),
            }
            answer_response(answer)
        }),
    );
    let listener = TlsListener { tcp, acceptor };
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(token.cancelled_owned())
            .await;
        if let Err(error) = served {
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "conversion webhook stopped"
            );
        }
    });
    tracing::info!(addr = %bound, path = CONVERT_PATH, "serving the CRD conversion webhook");
    Ok((bound, task))
}

/// The review's answer; a body that is not a review gets a `Failure` with an empty uid, which
/// the API server reports as a failed conversion.
fn answer(body: &[u8]) -> Value {
    let review = serde_json::from_slice::<Value>(body)
        .map_err(|e| format!("request body is not JSON: {e}"))
        .and_then(|review| {
            sluice_domain::conversion::review(&review)
                .map_err(|e| format!("malformed ConversionReview: {e}"))
        });
    match review {
        Ok(answer) => answer,
        Err(message) => {
            tracing::warn!(%message, "rejecting conversion review");
            serde_json::json!({
                "apiVersion": sluice_domain::conversion::REVIEW_API_VERSION,
                "kind": "ConversionReview",
                "response": {"uid": "", "result": {"status": "Failure", "message": message}},
            })
        }
    }
}

fn answer_response(answer: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        serde_json::to_vec(&answer).unwrap_or_default(),
    )
        .into_response()
}

fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, WebhookError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| WebhookError::ReadTls {
            path: path.to_path_buf(),
            source,
        })
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<_, _>>()
        .ok()
        .filter(|c: &Vec<_>| !c.is_empty())
        .ok_or_else(|| WebhookError::BadTls {
            path: cert.to_path_buf(),
            what: "certificate",
        })?;
    let private = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|_| WebhookError::BadTls {
        path: key.to_path_buf(),
        what: "private key",
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(WebhookError::Config)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(WebhookError::Config)
}

/// Accepts TCP connections and completes their TLS handshake; a failed or slow handshake drops
/// that connection only.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(error)) => {
                    tracing::debug!(%addr, error = &error as &dyn std::error::Error, "webhook TLS handshake failed")
                }
                Err(_) => tracing::debug!(%addr, "webhook TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
