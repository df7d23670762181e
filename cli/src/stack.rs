//! The local stack: a real nats-server with JetStream, the Kubernetes API test server with a
//! management cluster and managed clusters, and the five services as separate processes,
//! configured as in docker-compose.yml. Each service talks to the management cluster as its own
//! ServiceAccount with exactly the RBAC of `k8s/base` (the namespaces and `rbac.yaml` are applied
//! first), so a missing grant fails as it would in a real cluster. Managed clusters are
//! registered the Sveltos way: a SveltosCluster plus its kubeconfig Secret in the management
//! cluster (spec §13); that kubeconfig is the managed cluster's administrator, as Sveltos's
//! registration commonly uses a cluster-admin ServiceAccount. nats-server requires TLS with
//! client certificates and admits only the services' own nkeys (and the stack's administrator
//! and tap), each with the permissions `sluice_bus::permissions` generates from the topology, so
//! a service that uses the bus beyond its declared identity fails here as it would in a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::{json, Value};
use sluice_kube::apply;
use sluice_testkit::{NatsServer, ServiceProcess};
use sluice_testserver::{Config, TestServer};

/// The five services, in start order (upstream first).
pub const SERVICES: [&str; 5] = [
    "sluice-applier",
    "sluice-renderer",
    "sluice-reporter",
    "sluice-evaluator",
    "sluice-watcher",
];

/// Namespace of the services' ServiceAccounts (`k8s/base/rbac.yaml`).
pub const SERVICE_NAMESPACE: &str = "sluice-system";

/// Sveltos's namespace, where EventReports, ClusterProfiles' instantiated objects live.
pub const SVELTOS_NAMESPACE: &str = "projectsveltos";

/// This process's name among the stack's [`Stack::processes`].
pub const THIS_PROCESS: &str = "sluice (API test server)";

/// The name of a service's second process ([`Stack::start_replica`]): `sluice-applier-b` beside
/// `sluice-applier`.
pub fn replica_name(service: &str) -> Option<&'static str> {
    Some(match service {
        "sluice-watcher" => "sluice-watcher-b",
        "sluice-evaluator" => "sluice-evaluator-b",
        "sluice-reporter" => "sluice-reporter-b",
        "sluice-renderer" => "sluice-renderer-b",
        "sluice-applier" => "sluice-applier-b",
        _ => return None,
    })
}

/// A signal [`Stack::signal`] sends to a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A crash: the process cannot drain or release anything.
    Kill,
    /// A pause (a stopped VM, a long stall), until [`Signal::Cont`].
    Stop,
    Cont,
}

/// Name of the management cluster in the test server.
pub const MANAGEMENT: &str = "mgmt";

/// The services' tuning variables the stack passes on from its own environment (its services
/// inherit no other `SLUICE_*` variable), so a measurement can set them.
const TUNING_ENV: [&str; 7] = [
    "SLUICE_LINGER_US",
    "SLUICE_WORKER_THREADS",
    "SLUICE_APPLY_CONCURRENCY",
    "SLUICE_LEADER_ELECT",
    "SLUICE_LEADER_ELECT_LEASE_DURATION",
    "SLUICE_LEADER_ELECT_RENEW_DEADLINE",
    "SLUICE_LEADER_ELECT_RETRY_PERIOD",
];

/// The namespaces and RBAC of the deployment (`k8s/base`): the services' ServiceAccounts, Roles,
/// ClusterRoles and bindings, applied to the management cluster as they are.
const DEPLOYMENT_RBAC: [&str; 2] = [
    include_str!("../../k8s/base/namespace.yaml"),
    include_str!("../../k8s/base/rbac.yaml"),
];

/// Prepares a management cluster the way an installation finds and makes it: Sveltos's namespace
/// (Sveltos creates it; sluice's manifests only place Roles in it, k8s/README.md), then the
/// namespaces and RBAC of `k8s/base` as they are.
pub async fn install_deployment_rbac(
    client: &kube::Client,
    field_manager: &str,
) -> anyhow::Result<()> {
    let sveltos =
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SVELTOS_NAMESPACE}\n");
    let documents = sluice_kube::manifest::parse_documents(&sveltos)?;
    sluice_kube::manifest::apply_documents(client, &documents, field_manager)
        .await
        .context("failed to create Sveltos's namespace")?;
    for yaml in DEPLOYMENT_RBAC {
        let documents = sluice_kube::manifest::parse_documents(yaml)?;
        sluice_kube::manifest::apply_documents(client, &documents, field_manager)
            .await
            .context("failed to apply the RBAC of k8s/base")?;
    }
    Ok(())
}

/// A running stack. Dropping it stops every process.
pub struct Stack {
    /// The bus's server, or its first node when it is a cluster ([`Stack::start_on_nats_cluster`]).
    pub nats: NatsServer,
    /// The other nodes of a bus that is a JetStream cluster; none for one server.
    pub nats_peers: Vec<NatsServer>,
    /// The bus's CA, server certificate and every identity's nkey and client certificate.
    pub nats_credentials: crate::natsauth::Credentials,
    pub server: TestServer,
    pub dir: PathBuf,
    services: BTreeMap<&'static str, ServiceProcess>,
    /// Where each started service serves `/healthz`, `/readyz` and `/metrics`.
    health_addrs: BTreeMap<&'static str, String>,
    clients: BTreeMap<String, kube::Client>,
    /// The watcher's conversion webhook, which the CRDs of two versions call.
    pub webhook: crate::webhook::StackWebhook,
    _temp: Option<tempfile::TempDir>,
}

impl Stack {
    /// Starts NATS and the test server with `mgmt` plus `managed` clusters, then the services.
    /// `dir` keeps the kubeconfigs (a temporary directory when `None`).
    /// With `SLUICE_NATS_MONITOR_PORT` set, nats-server also serves its monitoring endpoints
    /// (`/varz`, `/jsz`, `/connz`) on that port of localhost, to count messages under load.
    pub async fn start(managed: &[&str], dir: Option<&Path>) -> anyhow::Result<Stack> {
        let monitor = match std::env::var("SLUICE_NATS_MONITOR_PORT") {
            Ok(port) => {
                let port: u16 = port
                    .parse()
                    .context("SLUICE_NATS_MONITOR_PORT is not a port number")?;
                format!("\nhttp: \"127.0.0.1:{port}\"\n")
            }
            Err(_) => String::new(),
        };
        Stack::start_with_nats_config(managed, dir, &monitor).await
    }

    /// [`Stack::start`] with more nats-server configuration after the stack's TLS and
    /// authorization (e.g. `max_payload: 65536`).
    pub async fn start_with_nats_config(
        managed: &[&str],
        dir: Option<&Path>,
        nats_config: &str,
    ) -> anyhow::Result<Stack> {
        Stack::start_with_nats(managed, dir, nats_config, 1).await
    }

    /// [`Stack::start`] on a bus of `nodes` nats-servers forming one JetStream cluster, as
    /// production runs NATS: the services get every node's URL and create their streams with
    /// that many replicas (`SLUICE_STREAM_REPLICAS`).
    pub async fn start_on_nats_cluster(managed: &[&str], nodes: usize) -> anyhow::Result<Stack> {
        Stack::start_with_nats(managed, None, "", nodes).await
    }

    async fn start_with_nats(
        managed: &[&str],
        dir: Option<&Path>,
        nats_config: &str,
        nodes: usize,
    ) -> anyhow::Result<Stack> {
        let (dir, temp) = match dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (d.to_path_buf(), None)
            }
            None => {
                let t = tempfile::tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let crate::natsauth::SecureNats {
            server: nats,
            peers: nats_peers,
            credentials: nats_credentials,
        } = crate::natsauth::SecureNats::start_nodes(&dir, nats_config, nodes)
            .await
            .context("failed to start nats-server")?;
        let mut clusters = vec![MANAGEMENT.to_string()];
        clusters.extend(managed.iter().map(|c| c.to_string()));
        let webhook = crate::webhook::StackWebhook::issue(&dir)?;
        let server = TestServer::start(Config {
            clusters: clusters.clone(),
            sveltos_crds: true,
            conversion_webhook: Some((webhook.url(), webhook.ca_pem.clone())),
            // Its own named threads: the load tool tells its CPU apart from this process's rest.
            worker_threads: Some(2),
            ..Default::default()
        })
        .await
        .context("failed to start the API test server")?;
        std::fs::write(dir.join("kubeconfig.yaml"), server.kubeconfig_yaml())?;
        std::fs::write(
            dir.join("mgmt.kubeconfig"),
            server.kubeconfig_for(MANAGEMENT),
        )?;
        let mut clients = BTreeMap::new();
        for name in &clusters {
            let client =
                sluice_kube::client::from_kubeconfig_text(&server.kubeconfig_for(name), None)
                    .await?;
            clients.insert(name.clone(), client);
        }
        let mut stack = Stack {
            nats,
            nats_peers,
            nats_credentials,
            server,
            dir,
            services: BTreeMap::new(),
            health_addrs: BTreeMap::new(),
            clients,
            webhook,
            _temp: temp,
        };
        install_deployment_rbac(stack.client(MANAGEMENT)?, "sluice-stack").await?;
        for service in SERVICES {
            let kubeconfig = stack
                .server
                .service_account_kubeconfig(MANAGEMENT, SERVICE_NAMESPACE, service)
                .with_context(|| format!("failed to mint a token for {service}"))?;
            std::fs::write(stack.service_kubeconfig(service), kubeconfig)?;
        }
        std::fs::write(stack.bus_key_file(), sluice_wire::BusKey::generate_base64())?;
        for service in SERVICES {
            stack.start_service(service)?;
        }
        // v1alpha1 objects cannot be written or read before the webhook answers.
        stack
            .webhook
            .wait_listening(Duration::from_secs(30))
            .await
            .with_context(|| stack.logs())?;
        Ok(stack)
    }

    /// The file holding the key that seals Secret contents on the bus (`SLUICE_BUS_KEY_FILE`),
    /// written at start with a new random key; every service gets it.
    pub fn bus_key_file(&self) -> PathBuf {
        self.dir.join("bus.key")
    }

    /// The kubeconfig file a service uses: the management cluster as its ServiceAccount
    /// `sluice-system/<service>`.
    pub fn service_kubeconfig(&self, service: &str) -> PathBuf {
        self.dir.join(format!("{service}.kubeconfig"))
    }

    /// Connection options for the stack's bus as its administrator (tests, the demo), with the
    /// services' stream replicas (a client that sets streams up with fewer would scale them
    /// down).
    pub fn bus_options(&self) -> sluice_bus::BusOptions {
        let mut options = self.nats_credentials.bus_options(&self.nats_url(), None);
        options.stream_replicas = self.stream_replicas();
        options
    }

    /// Every server of the bus, comma-separated, as `SLUICE_NATS_URL` takes them.
    pub fn nats_url(&self) -> String {
        sluice_testkit::nats_urls(std::iter::once(&self.nats).chain(&self.nats_peers))
    }

    /// How many replicas the services give their streams: one per node of the bus, up to
    /// JetStream's usual three.
    fn stream_replicas(&self) -> usize {
        (1 + self.nats_peers.len()).min(3)
    }

    /// The environment every service gets (as in docker-compose.yml, but with the service's own
    /// kubeconfig and NATS identity).
    pub fn service_env(&self, service: &str) -> Vec<(String, String)> {
        let identity = service.strip_prefix("sluice-").unwrap_or(service);
        let mut env = vec![
            ("SLUICE_NATS_URL".into(), self.nats_url()),
            (
                "SLUICE_STREAM_REPLICAS".into(),
                self.stream_replicas().to_string(),
            ),
            (
                "SLUICE_KUBECONFIG".into(),
                self.service_kubeconfig(service).display().to_string(),
            ),
            (
                "SLUICE_HEALTH_ADDR".into(),
                format!("127.0.0.1:{}", sluice_testkit::free_port()),
            ),
            ("SLUICE_LOG_FORMAT".into(), "text".into()),
            (
                "SLUICE_BUS_KEY_FILE".into(),
                self.bus_key_file().display().to_string(),
            ),
            (
                "RUST_LOG".into(),
                std::env::var("RUST_LOG")
                    .unwrap_or_else(|_| format!("info,{}=debug", service.replace('-', "_"))),
            ),
        ];
        env.extend(self.nats_credentials.env(identity));
        // An error a service stops on is logged; a backtrace after it would push the log
        // line out of the tail a failed test prints.
        env.push(("RUST_LIB_BACKTRACE".into(), "0".into()));
        // Tuning the stack is run with (a load measurement's linger, say) reaches every service.
        for tuning in TUNING_ENV {
            if let Ok(value) = std::env::var(tuning) {
                env.push((tuning.into(), value));
            }
        }
        // So does the OpenTelemetry configuration: with an OTLP endpoint set, the stack's
        // services export their spans there (ADR 0045).
        env.extend(std::env::vars().filter(|(name, _)| name.starts_with("OTEL_")));
        env
    }

    pub fn start_service(&mut self, service: &'static str) -> anyhow::Result<()> {
        self.start_service_without(service, &[])
    }

    /// Starts a service with its environment less the variables named in `unset` (e.g. the
    /// bus key, to see how a service without it behaves).
    pub fn start_service_without(
        &mut self,
        service: &'static str,
        unset: &[&str],
    ) -> anyhow::Result<()> {
        self.start_service_changed(service, unset, &[])
    }

    /// Stops a service (it drains) and starts it again with `extra` added to its environment.
    pub fn restart_service_with(
        &mut self,
        service: &'static str,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        self.stop_service(service)?;
        self.start_service_changed(service, &[], extra)
    }

    /// Starts one more process of `service` under the name `replica` (its own health address,
    /// log and pid; [`Stack::stop_service`], [`Stack::kill_service`] and
    /// [`Stack::health_url`] take that name), with `extra` added to its environment: a second
    /// replica beside the first, as a Deployment with two replicas runs (ADR 0046). Only the
    /// process named `sluice-watcher` serves the conversion webhook, whose address the API test
    /// server calls.
    pub fn start_replica(
        &mut self,
        service: &'static str,
        replica: &'static str,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        self.spawn_service(service, replica, &[], extra)
    }

    fn start_service_changed(
        &mut self,
        service: &'static str,
        unset: &[&str],
        extra: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        self.spawn_service(service, service, unset, extra)
    }

    fn spawn_service(
        &mut self,
        service: &'static str,
        name: &'static str,
        unset: &[&str],
        extra: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let mut env = self.service_env(service);
        env.retain(|(name, _)| !unset.contains(&name.as_str()));
        env.extend(
            extra
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
        );
        // The API test server calls one webhook address: a replica of the watcher serves none.
        if name == "sluice-watcher" {
            env.extend(self.webhook.env());
        }
        if let Some((_, addr)) = env.iter().find(|(var, _)| var == "SLUICE_HEALTH_ADDR") {
            self.health_addrs.insert(name, addr.clone());
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let process = ServiceProcess::spawn(service, &[], &env)
            .with_context(|| format!("failed to start {name}"))?;
        self.services.insert(name, process);
        Ok(())
    }

    /// `http://<health addr><path>` of a started service, e.g. its `/readyz`.
    pub fn health_url(&self, service: &str, path: &str) -> Option<String> {
        self.health_addrs
            .get(service)
            .map(|addr| format!("http://{addr}{path}"))
    }

    /// Stops a service with SIGTERM (it drains) and waits for it.
    pub fn stop_service(&mut self, service: &str) -> anyhow::Result<()> {
        if let Some(mut process) = self.services.remove(service) {
            process.terminate_within(Duration::from_secs(10))?;
        }
        Ok(())
    }

    /// Kills a service without letting it drain, as a crash would.
    pub fn kill_service(&mut self, service: &str) {
        if let Some(mut process) = self.services.remove(service) {
            process.kill();
        }
    }

    /// Every process of the stack by name, with its pid: the five services, nats-server, and
    /// this process ([`THIS_PROCESS`], which holds the API test server).
    pub fn processes(&self) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = self
            .services
            .iter()
            .map(|(name, p)| (name.to_string(), p.pid()))
            .collect();
        out.push(("nats-server".to_string(), self.nats.pid()));
        for (index, peer) in self.nats_peers.iter().enumerate() {
            out.push((format!("nats-server-{}", index + 1), peer.pid()));
        }
        out.push((THIS_PROCESS.to_string(), std::process::id()));
        out
    }

    /// Sends `signal` to the process of the stack named `name` (a service or a replica).
    pub fn signal(&self, name: &str, signal: Signal) -> anyhow::Result<()> {
        let process = self
            .services
            .get(name)
            .with_context(|| format!("{name} is not running"))?;
        let number = match signal {
            Signal::Kill => libc::SIGKILL,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        };
        sluice_testkit::send_signal(name, process.pid(), number)
    }

    /// The services that have exited (none should, whatever their input).
    pub fn exited_services(&mut self) -> Vec<&'static str> {
        self.services
            .iter_mut()
            .filter_map(|(name, process)| {
                (!matches!(process.try_status(), Ok(None))).then_some(*name)
            })
            .collect()
    }

    /// The exit code of a process of the stack that has exited; `None` while it runs (or if a
    /// signal ended it).
    pub fn exit_code(&mut self, name: &str) -> Option<i32> {
        let process = self.services.get_mut(name)?;
        process.try_status().ok().flatten()?.code()
    }

    pub fn service_log(&self, service: &str) -> String {
        self.services
            .get(service)
            .map(ServiceProcess::log)
            .unwrap_or_default()
    }

    /// Every service's log and the management cluster's 403s, for a failing test's message
    /// (a service logs only that a write failed; the denial says which grant is missing).
    pub fn logs(&self) -> String {
        let mut parts: Vec<String> = self
            .services
            .iter()
            .map(|(name, p)| format!("===== {name} =====\n{}", tail(&p.log(), 60)))
            .collect();
        let denials = self.denials();
        if !denials.is_empty() {
            // Services retry: the same denial repeats; each is shown once with its count.
            let mut distinct: Vec<(&String, usize)> = Vec::new();
            for denial in &denials {
                match distinct.iter_mut().find(|(d, _)| *d == denial) {
                    Some((_, count)) => *count += 1,
                    None => distinct.push((denial, 1)),
                }
            }
            let lines: Vec<String> = distinct
                .iter()
                .take(20)
                .map(|(d, count)| format!("{count}x {d}"))
                .collect();
            parts.push(format!(
                "===== {} requests denied by RBAC in {MANAGEMENT} =====\n{}",
                denials.len(),
                lines.join("\n")
            ));
        }
        parts.join("\n")
    }

    /// The management cluster's 403s so far, oldest first: `<method> <path>: <message>`.
    pub fn denials(&self) -> Vec<String> {
        self.server
            .denials(MANAGEMENT)
            .into_iter()
            .map(|d| format!("{} {}: {}", d.method, d.path, d.message))
            .collect()
    }

    pub fn client(&self, cluster: &str) -> anyhow::Result<&kube::Client> {
        self.clients
            .get(cluster)
            .with_context(|| format!("no cluster {cluster}"))
    }

    /// Server-side applies one object to a cluster.
    pub async fn apply(&self, cluster: &str, object: &Value) -> anyhow::Result<Value> {
        let applied = sluice_kube::manifest::apply_documents(
            self.client(cluster)?,
            std::slice::from_ref(object),
            "sluice-cli",
        )
        .await?;
        applied.into_iter().next().context("nothing applied")
    }

    /// Runs `kubectl` with `args` against `cluster` (its context in the stack's
    /// `kubeconfig.yaml`), as a user would; returns its standard output, or an error with its
    /// standard error when it fails.
    pub async fn kubectl(&self, cluster: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.dir.join("kubeconfig.yaml"))
            .args(["--context", cluster])
            .args(args)
            .env("HOME", &self.dir)
            .output()
            .await
            .context("failed to run kubectl")?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }

    /// Server-side applies an object's `status` (the status subresource), as a controller would.
    pub async fn apply_status(&self, cluster: &str, object: &Value) -> anyhow::Result<()> {
        let client = self.client(cluster)?;
        let r = sluice_wire::object_ref(object);
        let kind = apply::resolve(client, &r.api_version, &r.kind).await?;
        apply::apply_status(client, &kind, &r.namespace, &r.name, object, "sluice-cli").await?;
        Ok(())
    }

    /// Server-side applies every document of a YAML text to a cluster.
    pub async fn apply_yaml(&self, cluster: &str, yaml: &str) -> anyhow::Result<Vec<Value>> {
        let documents = sluice_kube::manifest::parse_documents(yaml)?;
        Ok(
            sluice_kube::manifest::apply_documents(self.client(cluster)?, &documents, "sluice-cli")
                .await?,
        )
    }

    pub async fn delete(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let client = self.client(cluster)?;
        let kind = apply::resolve(client, api_version, kind).await?;
        Ok(apply::delete(client, &kind, namespace, name).await?)
    }

    /// Objects of a kind in a cluster carrying the given labels.
    pub async fn list(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<Vec<Value>> {
        let client = self.client(cluster)?;
        let kind = apply::resolve(client, api_version, kind).await?;
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(apply::list_labelled(client, &kind, &labels).await?)
    }

    pub async fn get(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Option<Value>> {
        let client = self.client(cluster)?;
        let kind = apply::resolve(client, api_version, kind).await?;
        Ok(apply::get(client, &kind, namespace, name).await?)
    }

    /// The management cluster's EventReport `name` for a cluster registered in `default`.
    pub async fn event_report(&self, name: &str) -> anyhow::Result<Option<Value>> {
        self.get(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventReport",
            "default",
            name,
        )
        .await
    }

    /// Registers a managed cluster the Sveltos way: its kubeconfig Secret and a ready
    /// SveltosCluster with the given labels, in namespace `default` of the management cluster.
    pub async fn register_cluster(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        register_cluster(
            self.client(MANAGEMENT)?,
            name,
            &self.server.kubeconfig_for(name),
            labels,
        )
        .await
    }
}

/// Registers a managed cluster the Sveltos way in the management cluster `mgmt`: the Secret
/// `default/<name>-sveltos-kubeconfig` holding `kubeconfig`, and a ready SveltosCluster
/// `default/<name>` with the given labels.
pub async fn register_cluster(
    mgmt: &kube::Client,
    name: &str,
    kubeconfig: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<()> {
    let kubeconfig = base64::engine::general_purpose::STANDARD.encode(kubeconfig);
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let documents = [
        json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-sveltos-kubeconfig"), "namespace": "default"},
                "data": {"kubeconfig": kubeconfig}}),
        json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                "metadata": {"name": name, "namespace": "default", "labels": labels},
                "spec": {}}),
    ];
    sluice_kube::manifest::apply_documents(mgmt, &documents, "sluice-cli").await?;
    let kind = apply::resolve(mgmt, "lib.projectsveltos.io/v1beta1", "SveltosCluster").await?;
    apply::apply_status(
        mgmt,
        &kind,
        "default",
        name,
        &json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                "metadata": {"name": name, "namespace": "default"}, "status": {"ready": true}}),
        "sluice-cli",
    )
    .await?;
    Ok(())
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
