//! A cluster's own listener (`Config::port_per_cluster`): like a kind cluster, the cluster's API is
//! at the root of its own address, `https://127.0.0.1:<port>/api/v1/...`, for clients that drop a
//! path in the server URL. Requests are served by the same application as the shared listener
//! (same certificate, TLS and plain HTTP, authentication and RBAC), with `/clusters/<name>` put in
//! front of the path; admin endpoints are not reachable here.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::Router;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::{app, serve, Shared};
use crate::error::{Error, Result};

/// A bound, not yet serving, per-cluster listener.
pub struct BoundPort {
    listener: tokio::net::TcpListener,
    pub addr: SocketAddr,
}

/// A serving per-cluster listener; cancelling `stop` closes it.
pub struct ClusterPort {
    pub addr: SocketAddr,
    pub stop: CancellationToken,
}

/// Binds a free port on the shared listener's IP address.
pub fn bind(ip: std::net::IpAddr) -> Result<BoundPort> {
    let wanted = SocketAddr::new(ip, 0);
    let bind_err = |source| Error::Bind {
        addr: wanted,
        source,
    };
    let std_listener = std::net::TcpListener::bind(wanted).map_err(bind_err)?;
    std_listener.set_nonblocking(true).map_err(bind_err)?;
    let addr = std_listener.local_addr().map_err(bind_err)?;
    let listener = tokio::net::TcpListener::from_std(std_listener).map_err(bind_err)?;
    Ok(BoundPort { listener, addr })
}

/// Starts serving cluster `name` on a bound port until `stop` is cancelled.
pub fn start(
    bound: BoundPort,
    shared: &Arc<Shared>,
    name: &str,
    stop: CancellationToken,
) -> ClusterPort {
    let prefix = format!("/clusters/{name}");
    let inner = app(shared.clone());
    let router = Router::new()
        .fallback_service(inner.map_request(move |req: Request| under_prefix(req, &prefix)));
    let addr = bound.addr;
    tracing::info!(%addr, cluster = name, "serving cluster on its own port");
    drop(serve(bound.listener, &shared.tls, router, stop.clone()));
    ClusterPort { addr, stop }
}

/// The request with `prefix` put in front of its path, marked as arriving on a cluster's own port.
fn under_prefix(mut req: Request, prefix: &str) -> Request {
    req.extensions_mut().insert(crate::api::AtRoot);
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    match format!("{prefix}{path_and_query}").parse() {
        Ok(uri) => *req.uri_mut() = uri,
        // A cluster name that does not fit in a URI path: the request then finds no cluster (404).
        Err(_) => *req.uri_mut() = axum::http::Uri::from_static("/clusters/"),
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_are_moved_under_the_cluster() {
        for (path, expected) in [
            ("/version", "/clusters/c1/version"),
            (
                "/api/v1/namespaces?limit=500",
                "/clusters/c1/api/v1/namespaces?limit=500",
            ),
            ("/", "/clusters/c1/"),
        ] {
            let req = Request::builder()
                .uri(path)
                .body(axum::body::Body::empty())
                .expect("request");
            assert_eq!(under_prefix(req, "/clusters/c1").uri(), expected);
        }
    }
}
