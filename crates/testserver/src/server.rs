//! The process-level server: one listener, many clusters under `/clusters/<name>` (and, with
//! `Config::port_per_cluster`, each cluster also at the root of its own port), every port
//! answering TLS and plain HTTP, admin endpoints under `/admin`, generated kubeconfigs (as each
//! cluster's administrator or as a ServiceAccount), seeding objects, and shutdown.

mod admin;
mod inside;
mod port;
mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::cluster::{check_type, Cluster, Owner};
use crate::error::{Error, Result};
use crate::faults::Faults;
use crate::object::meta_str;
pub use inside::Inside;

/// Test server settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Listen address; port 0 picks a free port. Only loopback addresses should be used.
    pub bind: SocketAddr,
    /// Cluster names, each served under `/clusters/<name>`; the first is the kubeconfig's current context.
    pub clusters: Vec<String>,
    /// Changes retained per cluster for watches; older resourceVersions get `410 Gone`.
    pub watch_history: usize,
    /// Install the Sveltos and CAPI CRDs of `k8s/crds` into every cluster at start.
    pub sveltos_crds: bool,
    /// Objects created in every cluster at start (after the CRDs).
    pub objects: Vec<Value>,
    /// Also serve each cluster at the root of its own port on the listen IP, as kind does, and
    /// point kubeconfigs there (`https://127.0.0.1:<port>`, no path); `/clusters/<name>` on the
    /// shared listener keeps working.
    pub port_per_cluster: bool,
    /// Host names or addresses the serving certificate is valid for besides `localhost`,
    /// `127.0.0.1`, `::1` and the bind address (e.g. a docker-compose service name).
    pub tls_names: Vec<String>,
    /// Base URLs (`https://127.0.0.1:9443`) of the Services conversion webhooks name in
    /// `clientConfig.service`, by `namespace/name`.
    pub webhook_services: crate::conversion::ServiceUrls,
    /// Preinstalled Sveltos CRDs convert through this webhook (`clientConfig.url` and the PEM CA
    /// bundle); without it they use strategy `None`.
    pub conversion_webhook: Option<(String, Vec<u8>)>,
    /// Serve on a Tokio runtime of its own with this many worker threads, named
    /// [`THREAD_NAME`], so the server's CPU can be told apart from the caller's in
    /// `/proc/<pid>/task/*/stat`; `None` serves on the caller's runtime.
    pub worker_threads: Option<usize>,
}

/// The name of the threads of the server's own runtime (`Config::worker_threads`).
pub const THREAD_NAME: &str = "test-apiserver";

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            clusters: vec!["mgmt".to_string()],
            watch_history: 10_000,
            sveltos_crds: false,
            objects: Vec::new(),
            port_per_cluster: false,
            tls_names: Vec::new(),
            webhook_services: Default::default(),
            conversion_webhook: None,
            worker_threads: None,
        }
    }
}

/// State shared by every request handler.
pub struct Shared {
    clusters: RwLock<BTreeMap<String, Arc<Cluster>>>,
    config: Config,
    addr: SocketAddr,
    /// Per-cluster listeners (with `Config::port_per_cluster`), by cluster name.
    ports: RwLock<BTreeMap<String, port::ClusterPort>>,
    /// Cancelled at shutdown; per-cluster listeners stop with it.
    shutdown: CancellationToken,
    /// The authority and serving certificate every listener uses.
    tls: tls::Tls,
}

impl Shared {
    pub fn cluster(&self, name: &str) -> Option<Arc<Cluster>> {
        self.clusters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    fn names(&self) -> Vec<String> {
        self.clusters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Adds a cluster (no-op if it exists), preinstalling what the config asks for.
    fn add(self: &Arc<Self>, name: &str) -> Result<()> {
        if self.cluster(name).is_some() {
            return Ok(());
        }
        let bound = if self.config.port_per_cluster {
            Some(port::bind(self.addr.ip())?)
        } else {
            None
        };
        let cluster = Arc::new(
            Cluster::new(
                name,
                self.config.watch_history,
                crate::cluster::ControlPlane {
                    ca_pem: self.tls.ca_pem.clone(),
                    address: Some(self.addr),
                },
            )
            .with_webhook_services(self.config.webhook_services.clone()),
        );
        let mut seed: Vec<Value> = if self.config.sveltos_crds {
            crate::crds::with_conversion(
                crate::crds::sveltos_crds(),
                self.config.conversion_webhook.as_ref(),
            )
        } else {
            Vec::new()
        };
        seed.extend(self.config.objects.iter().cloned());
        for obj in seed {
            create_object(&cluster, obj)?;
        }
        self.clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), cluster);
        if let Some(bound) = bound {
            let served = port::start(bound, self, name, self.shutdown.child_token());
            let replaced = self
                .ports
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.to_string(), served);
            if let Some(old) = replaced {
                old.stop.cancel();
            }
        }
        Ok(())
    }

    /// Admin credentials of the named clusters that exist, in the given order.
    fn admin_credentials(&self, names: &[String]) -> Vec<Credential> {
        names
            .iter()
            .filter_map(|name| {
                let cluster = self.cluster(name)?;
                Some(Credential {
                    cluster: name.clone(),
                    user: name.clone(),
                    token: cluster.tokens.admin().to_string(),
                    namespace: "default".into(),
                })
            })
            .collect()
    }

    /// Mints a token for ServiceAccount `namespace/name` of `cluster`.
    fn service_account_token(&self, cluster: &str, namespace: &str, name: &str) -> Result<String> {
        let token_err = |message: String| Error::Token {
            cluster: cluster.to_string(),
            service_account: format!("{namespace}/{name}"),
            message,
        };
        let c = self
            .cluster(cluster)
            .ok_or_else(|| token_err("no such cluster".into()))?;
        let state = c.lock();
        c.tokens
            .issue(&state, namespace, name)
            .map_err(|e| token_err(e.message))
    }

    /// A kubeconfig for one cluster as ServiceAccount `namespace/name`, with a fresh token.
    fn service_account_kubeconfig(
        &self,
        cluster: &str,
        namespace: &str,
        name: &str,
    ) -> Result<String> {
        let token = self.service_account_token(cluster, namespace, name)?;
        Ok(self.kubeconfig(&[Credential {
            cluster: cluster.to_string(),
            user: format!("system:serviceaccount:{namespace}:{name}"),
            token,
            namespace: namespace.to_string(),
        }]))
    }

    fn remove(&self, name: &str) {
        let removed = self
            .clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(c) = removed {
            c.faults.drop_watches();
        }
        let port = self
            .ports
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(port) = port {
            port.stop.cancel();
        }
    }

    /// Base URL of one cluster's API: its own port's root, else `https://<addr>/clusters/<name>`.
    fn cluster_url(&self, name: &str) -> String {
        match self
            .ports
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            Some(port) => format!("https://{}", port.addr),
            None => format!("https://{}/clusters/{name}", self.addr),
        }
    }

    /// A kubeconfig with one context per credential, named after its cluster (the first is
    /// current): each cluster's `cluster_url`, trusted through the generated authority.
    fn kubeconfig(&self, credentials: &[Credential]) -> String {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.tls.ca_pem);
        let clusters: Vec<Value> = credentials
            .iter()
            .map(|c| json!({"name": c.cluster, "cluster": {"server": self.cluster_url(&c.cluster), "certificate-authority-data": ca}}))
            .collect();
        let users: Vec<Value> = credentials
            .iter()
            .map(|c| json!({"name": c.user, "user": {"token": c.token}}))
            .collect();
        let contexts: Vec<Value> = credentials
            .iter()
            .map(|c| json!({"name": c.cluster, "context": {"cluster": c.cluster, "user": c.user, "namespace": c.namespace}}))
            .collect();
        let doc = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": clusters,
            "users": users,
            "contexts": contexts,
            "current-context": credentials.first().map(|c| c.cluster.clone()).unwrap_or_default(),
        });
        serde_yaml::to_string(&doc).unwrap_or_default()
    }
}

/// The resource that serves `api_version` and `kind`, and the version part of `api_version`.
pub(crate) fn served<'a>(
    registry: &crate::resources::Registry,
    api_version: &'a str,
    kind: &str,
) -> Option<(crate::resources::ResourceInfo, &'a str)> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    registry
        .all()
        .iter()
        .find(|r| r.group == group && r.kind == kind && r.versions.iter().any(|v| v == version))
        .cloned()
        .map(|info| (info, version))
}

/// Creates `obj` in `cluster`, finding its resource by apiVersion and kind; a missing namespace is created first.
fn create_object(cluster: &Cluster, obj: Value) -> Result<Value> {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let what = format!(
        "{kind} {}/{}",
        meta_str(&obj, "namespace"),
        meta_str(&obj, "name")
    );
    let seed_err = |message: String| Error::Seed {
        cluster: cluster.name.clone(),
        what: what.clone(),
        message,
    };
    let mut state = cluster.lock();
    let (info, version) = served(&state.registry, &api_version, &kind)
        .ok_or_else(|| seed_err(format!("no resource serves {api_version} {kind}")))?;
    check_type(&info, version, &obj).map_err(|e| seed_err(e.message))?;
    // Seeds are decoded as `kubectl create -f` sends them: unknown fields are errors, defaults are set.
    let mut obj = obj;
    crate::admission::decode(
        &info,
        version,
        &mut obj,
        Vec::new(),
        crate::admission::Directive::Strict,
        crate::admission::Verb::Create,
    )
    .map_err(|e| seed_err(e.message))?;
    let mut namespace = meta_str(&obj, "namespace").to_string();
    if info.namespaced {
        if namespace.is_empty() {
            namespace = "default".into();
        }
        if state
            .get(&("".into(), "namespaces".into()), "", &namespace)
            .is_none()
        {
            if let Some(ns_info) = state.registry.lookup("", "v1", "namespaces").cloned() {
                let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
                state
                    .create(&ns_info, "", ns, &Owner::Update("sluice-testserver".into()))
                    .map_err(|e| seed_err(e.message))?;
            }
        }
    }
    state
        .create(
            &info,
            &namespace,
            obj,
            &Owner::Update("sluice-testserver".into()),
        )
        .map_err(|e| seed_err(e.message))
}

/// A running test server.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    runtime: OwnRuntime,
}

/// The server's own runtime (`Config::worker_threads`), if it has one. Dropped without waiting
/// for its tasks, which is allowed inside the caller's runtime (a plain drop is not).
#[derive(Default)]
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl OwnRuntime {
    /// Runs `f` where a `tokio::spawn` inside it lands on this runtime, if there is one.
    fn enter<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(runtime) => {
                let _entered = runtime.enter();
                f()
            }
            None => f(),
        }
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl TestServer {
    /// Binds, seeds every configured cluster and starts serving (on a runtime of its own with
    /// `Config::worker_threads`).
    pub async fn start(config: Config) -> Result<TestServer> {
        let Some(threads) = config.worker_threads else {
            return TestServer::start_here(config).await;
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(THREAD_NAME)
            // Threads that leave `block_in_place` stay until the server stops, so every CPU
            // tick of the server stays countable per thread in /proc.
            .thread_keep_alive(std::time::Duration::from_secs(24 * 3600))
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let mut server = runtime
            .spawn(TestServer::start_here(config))
            .await
            .map_err(|e| Error::Runtime(std::io::Error::other(e)))??;
        server.runtime = OwnRuntime(Some(runtime));
        Ok(server)
    }

    /// [`TestServer::start`] on the current runtime.
    async fn start_here(config: Config) -> Result<TestServer> {
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|source| Error::Bind {
                addr: config.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.bind,
            source,
        })?;
        let tls = tls::Tls::generate(addr, &config.tls_names).map_err(|message| Error::Tls {
            addr: config.bind,
            message,
        })?;
        let names = config.clusters.clone();
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            clusters: RwLock::new(BTreeMap::new()),
            config,
            addr,
            ports: RwLock::new(BTreeMap::new()),
            shutdown: shutdown.clone(),
            tls,
        });
        for name in &names {
            if let Err(error) = shared.add(name) {
                shutdown.cancel();
                return Err(error);
            }
        }
        let task = serve(listener, &shared.tls, app(shared.clone()), shutdown.clone());
        tracing::info!(%addr, clusters = names.len(), "sluice test server listening (test and demo use only)");
        Ok(TestServer {
            addr,
            shared,
            shutdown,
            task,
            runtime: OwnRuntime::default(),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL of one cluster's API: `https://<addr>/clusters/<name>`, or with
    /// `Config::port_per_cluster` the root of the cluster's own port, `https://127.0.0.1:<port>`
    /// (every port also answers plain HTTP).
    pub fn cluster_url(&self, cluster: &str) -> String {
        self.shared.cluster_url(cluster)
    }

    /// PEM of the certificate authority that signed the serving certificate (what the
    /// kubeconfigs carry as `certificate-authority-data`).
    pub fn ca_pem(&self) -> &str {
        &self.shared.tls.ca_pem
    }

    /// Names of the clusters currently served, sorted.
    pub fn clusters(&self) -> Vec<String> {
        self.shared.names()
    }

    /// A kubeconfig with one context per cluster; the first configured cluster is current.
    pub fn kubeconfig_yaml(&self) -> String {
        let mut names = self.shared.names();
        if let Some(first) = self
            .shared
            .config
            .clusters
            .first()
            .filter(|f| names.contains(f))
        {
            let first = first.clone();
            names.retain(|n| n != &first);
            names.insert(0, first);
        }
        self.shared
            .kubeconfig(&self.shared.admin_credentials(&names))
    }

    /// A kubeconfig for one cluster only (what goes into a Sveltos kubeconfig Secret), as its
    /// administrator.
    pub fn kubeconfig_for(&self, cluster: &str) -> String {
        self.shared
            .kubeconfig(&self.shared.admin_credentials(&[cluster.to_string()]))
    }

    /// The bearer token of a cluster's administrator (`kubernetes-admin`, group
    /// `system:masters`), `None` for an unknown cluster.
    pub fn admin_token(&self, cluster: &str) -> Option<String> {
        self.shared
            .cluster(cluster)
            .map(|c| c.tokens.admin().to_string())
    }

    /// Mints a token for an existing ServiceAccount, as a `TokenRequest` does: it authenticates
    /// as `system:serviceaccount:<namespace>:<name>` until that ServiceAccount is deleted.
    pub fn service_account_token(
        &self,
        cluster: &str,
        namespace: &str,
        name: &str,
    ) -> Result<String> {
        self.shared.service_account_token(cluster, namespace, name)
    }

    /// A kubeconfig for one cluster as an existing ServiceAccount (context named after the
    /// cluster, default namespace the ServiceAccount's), with a freshly minted token.
    pub fn service_account_kubeconfig(
        &self,
        cluster: &str,
        namespace: &str,
        name: &str,
    ) -> Result<String> {
        self.shared
            .service_account_kubeconfig(cluster, namespace, name)
    }

    /// Adds a cluster at run time, seeded like the configured ones.
    pub async fn add_cluster(&self, name: &str) {
        if let Err(error) = self.runtime.enter(|| self.shared.add(name)) {
            tracing::error!(
                error = &error as &dyn std::error::Error,
                cluster = name,
                "failed to seed added cluster"
            );
        }
    }

    /// Removes a cluster: its URL answers 404 from now on and its watches end.
    pub async fn remove_cluster(&self, name: &str) {
        self.shared.remove(name);
    }

    /// Creates an object in a cluster as a loader would (namespace created if missing).
    pub fn create_object(&self, cluster: &str, obj: Value) -> Result<Value> {
        let c = self.shared.cluster(cluster).ok_or_else(|| Error::Seed {
            cluster: cluster.to_string(),
            what: "object".into(),
            message: "no such cluster".into(),
        })?;
        create_object(&c, obj)
    }

    /// Number of objects stored in a cluster (0 for an unknown cluster).
    pub fn object_count(&self, cluster: &str) -> usize {
        self.shared
            .cluster(cluster)
            .map(|c| c.lock().object_count())
            .unwrap_or(0)
    }

    /// The fault injection handle of a cluster; a handle for an unknown cluster affects nothing.
    pub fn faults(&self, cluster: &str) -> Faults {
        self.shared
            .cluster(cluster)
            .map(|c| c.faults.clone())
            .unwrap_or_default()
    }

    /// Compacts a cluster's history of changes (`State::compact`): every watch or continued
    /// list from an older version is answered `410 Gone`. Nothing for an unknown cluster.
    pub fn compact(&self, cluster: &str) {
        if let Some(c) = self.shared.cluster(cluster) {
            c.lock().compact();
        }
    }

    /// Writes inside a cluster that bypass its faults (a cluster unreachable from outside still
    /// changes); `None` for an unknown cluster.
    pub fn inside(&self, cluster: &str) -> Option<Inside> {
        self.shared.cluster(cluster).map(Inside::new)
    }

    /// The requests of a cluster the authorizer refused with 403, oldest first (empty for an
    /// unknown cluster).
    pub fn denials(&self, cluster: &str) -> Vec<crate::audit::Denial> {
        self.shared
            .cluster(cluster)
            .map(|c| c.audit.denials())
            .unwrap_or_default()
    }

    /// The audit log of a cluster (empty for an unknown cluster).
    pub fn audit(&self, cluster: &str) -> Vec<crate::audit::AuditEntry> {
        self.shared
            .cluster(cluster)
            .map(|c| c.audit.entries())
            .unwrap_or_default()
    }

    /// Ends every watch, stops accepting requests and waits for the listener task.
    pub async fn shutdown(self) {
        for name in self.shared.names() {
            if let Some(c) = self.shared.cluster(&name) {
                c.faults.drop_watches();
            }
        }
        self.shutdown.cancel();
        // Open keep-alive connections can hold graceful shutdown; bound the wait.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.task).await;
    }
}

/// The HTTP application: admin endpoints and every cluster's API under `/clusters/<name>`.
fn app(shared: Arc<Shared>) -> axum::Router {
    admin::router()
        .fallback(crate::api::handle)
        .with_state(shared)
}

/// The streams one HTTP/2 connection may have open at once, as kube-apiserver allows since it
/// guards against rapid resets (Go's HTTP/2 client's own default).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 100;

/// Serves `app` on `listener`, TLS and plain HTTP alike, HTTP/1.1 or HTTP/2, until `stop` is
/// cancelled; then every connection is closed once its requests in flight are answered.
fn serve(
    listener: tokio::net::TcpListener,
    tls: &tls::Tls,
    app: axum::Router,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let mut listener = tls::DualListener::start(listener, tls, stop.clone());
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    tokio::spawn(async move {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        loop {
            let io = tokio::select! {
                () = stop.cancelled() => break,
                (io, _) = listener.next() => io,
            };
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(io), service)
                .into_owned();
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(
                        error = &*error as &dyn std::error::Error,
                        "connection ended"
                    );
                }
            });
        }
        graceful.shutdown().await;
    })
}

/// One context of a generated kubeconfig: a cluster, who uses it and the default namespace.
pub(crate) struct Credential {
    pub cluster: String,
    pub user: String,
    pub token: String,
    pub namespace: String,
}
