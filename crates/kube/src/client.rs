//! Building clients: the management cluster from a kubeconfig file (or in-cluster), managed
//! clusters from the kubeconfig text held in their Secret.

use std::path::Path;
use std::time::Duration;

use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use sluice_runtime::Fence;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

use crate::error::{Error, Result};

/// Client from kubeconfig text (a managed cluster's Secret), optionally for one context.
pub async fn from_kubeconfig_text(text: &str, context: Option<&str>) -> Result<Client> {
    client_of(config_of_text(text, context).await?)
}

/// The configuration of [`from_kubeconfig_text`].
async fn config_of_text(text: &str, context: Option<&str>) -> Result<Config> {
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| Error::Kubeconfig {
        source: Box::new(e),
    })?;
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| Error::Kubeconfig {
            source: Box::new(e),
        })
}

/// The management cluster: the given kubeconfig file, else in-cluster config, else `KUBECONFIG`.
pub async fn management(path: Option<&Path>, context: Option<&str>) -> Result<Client> {
    client_of(management_config(path, context).await?)
}

/// The configuration of [`management`].
async fn management_config(path: Option<&Path>, context: Option<&str>) -> Result<Config> {
    match path {
        Some(path) => {
            let text =
                tokio::fs::read_to_string(path)
                    .await
                    .map_err(|source| Error::ReadKubeconfig {
                        path: path.display().to_string(),
                        source,
                    })?;
            config_of_text(&text, context).await
        }
        None => Config::infer().await.map_err(|e| Error::Kubeconfig {
            source: Box::new(e),
        }),
    }
}

/// The management-cluster client of a service, from its common options, whose writes ask
/// `fence` first (the process's, [`fenced`]); the service's readiness then requires the API
/// server to answer ([`crate::reachability::api_check`], until `token` is cancelled).
pub async fn for_service(
    common: &sluice_runtime::CommonArgs,
    health: &sluice_runtime::Health,
    token: &tokio_util::sync::CancellationToken,
    fence: &Fence,
) -> Result<Client> {
    let config =
        management_config(common.kubeconfig.as_deref(), common.kube_context.as_deref()).await?;
    let client = fenced(config, fence.clone())?;
    health.require("kubernetes", crate::reachability::api_check(&client, token));
    Ok(client)
}

/// The HTTP/2 window of one stream: what one watch may hold unread (Go's transport: 4 MiB).
const STREAM_WINDOW: u32 = 4 << 20;

/// The HTTP/2 window of a connection, shared by its streams (Go's transport: 1 GiB).
const CONNECTION_WINDOW: u32 = 1 << 30;

/// How a client tells that an HTTP/2 connection stopped answering: a ping once `interval`
/// passes without a frame from the server, with streams open or not; no answer within
/// `timeout` closes the connection and every stream on it (a watch's ends, and is watched
/// again on a new connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
}

impl HealthCheck {
    /// client-go's: 30 s, then 15 s.
    pub const CLIENT_GO: HealthCheck = HealthCheck {
        interval: Duration::from_secs(30),
        timeout: Duration::from_secs(15),
    };
}

/// A client of `config` that offers HTTP/2 by ALPN beside HTTP/1.1, as client-go does: where the
/// API server takes it, every request and watch of the client is a stream of one connection,
/// checked as client-go checks it ([`HealthCheck::CLIENT_GO`]). Otherwise the client is
/// kube-rs's own: its TLS, timeouts, authentication, extra headers and retry of transient
/// failures.
pub fn client_of(config: Config) -> Result<Client> {
    client_with(config, HealthCheck::CLIENT_GO)
}

/// [`client_of`] with its connections' health checked by `check`.
pub fn client_with(config: Config, check: HealthCheck) -> Result<Client> {
    build(config, check, Fence::open())
}

/// [`client_of`] whose every write (`POST`, `PUT`, `PATCH`, `DELETE`) asks `fence` first: a
/// write it refuses fails with [`Fenced`](sluice_runtime::Fenced) as its source, without
/// reaching the server. Reads and watches go on regardless.
pub fn fenced(config: Config, fence: Fence) -> Result<Client> {
    build(config, HealthCheck::CLIENT_GO, fence)
}

/// Whether a request of `method` changes something on the server.
pub fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

fn build(config: Config, check: HealthCheck, fence: Fence) -> Result<Client> {
    let kubeconfig = |e: kube::Error| Error::Kubeconfig {
        source: Box::new(e),
    };
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    // HTTP/2 writes each stream's frames as they come: without TCP_NODELAY a small write waits
    // for the acknowledgement of the one before it.
    http.set_nodelay(true);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config().map_err(kubeconfig)?)
        .https_or_http();
    if let Some(name) = config.tls_server_name.as_ref() {
        let invalid = |e: rustls::pki_types::InvalidDnsNameError| Error::Kubeconfig {
            source: Box::new(e),
        };
        let name = name.clone().try_into().map_err(invalid)?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let mut connector = hyper_timeout::TimeoutConnector::new(
        tls.enable_http1().enable_http2().wrap_connector(http),
    );
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    // Flow control as Go's HTTP/2 transport sets it for client-go: a stream's window bounds what
    // one unread watch holds, and the connection's window is so large that unread watches never
    // hold up the other streams of the connection.
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .http2_initial_connection_window_size(CONNECTION_WINDOW)
            .http2_keep_alive_interval(check.interval)
            .http2_keep_alive_timeout(check.timeout)
            .http2_keep_alive_while_idle(true)
            .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(kubeconfig)?)
        .layer(config.extra_headers_layer().map_err(kubeconfig)?)
        .filter(move |request: http::Request<Body>| {
            if is_write(request.method()) {
                fence.check()?;
            }
            Ok::<_, sluice_runtime::Fenced>(request)
        })
        .map_err(BoxError::from)
        .service(http)
        .map_response(|response| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        });
    Ok(ClientBuilder::new(
        tower::util::BoxService::new(service),
        config.default_namespace,
    )
    .build())
}
