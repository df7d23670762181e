//! Command line entry: `sluice testserver` and the standalone `sluice-testserver` binary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::{Config, TestServer};

/// Kubernetes API test server for tests and demos. Never use it as a production dependency: it
/// keeps everything in memory, has no authentication and implements only what sluice and kubectl use.
#[derive(Clone, Debug, clap::Args)]
#[command(about = "Kubernetes API test server for tests and demos (never a production dependency)")]
pub struct CliArgs {
    /// Number of clusters to serve, named mgmt, cluster-1, cluster-2, ...
    #[arg(long, default_value_t = 1, conflicts_with = "cluster_names")]
    pub clusters: usize,
    /// Comma-separated cluster names (the first is the kubeconfig's current context).
    #[arg(long, value_delimiter = ',')]
    pub cluster_names: Vec<String>,
    /// Address to listen on (loopback only).
    #[arg(
        long,
        default_value = "127.0.0.1:6443",
        env = "SLUICE_TESTSERVER_LISTEN"
    )]
    pub listen: SocketAddr,
    /// Host:port clients should use in the written kubeconfig, when it differs from --listen
    /// (in docker-compose: `testserver:6443`, since 0.0.0.0 is not an address other containers reach).
    #[arg(long)]
    pub advertise: Option<String>,
    /// Write a kubeconfig with one context per cluster to this file.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// YAML manifests (a file or a directory of *.yaml/*.yml/*.json) created in every cluster at start.
    #[arg(long)]
    pub load: Option<PathBuf>,
    /// Do not preinstall the Sveltos and CAPI CRDs.
    #[arg(long)]
    pub no_crds: bool,
    /// Changes retained per cluster for watches before clients get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    pub watch_history: usize,
    /// Also serve each cluster at the root of its own free port on the listen IP (as kind does);
    /// the kubeconfig then points there. `/clusters/<name>` on --listen keeps working.
    #[arg(long, conflicts_with = "advertise")]
    pub port_per_cluster: bool,
    /// Where a Service named by a conversion webhook's `clientConfig.service` is reached:
    /// `namespace/name=https://127.0.0.1:9443` (repeatable).
    #[arg(long = "webhook-service", value_parser = parse_service_url)]
    pub webhook_services: Vec<(String, String)>,
    /// The preinstalled Sveltos CRDs convert v1alpha1 and v1beta1 through this webhook URL
    /// (`https://127.0.0.1:9443/convert`); without it they use conversion strategy None.
    #[arg(long, requires = "conversion_webhook_ca")]
    pub conversion_webhook_url: Option<String>,
    /// PEM CA bundle the conversion webhook's serving certificate chains to.
    #[arg(long, requires = "conversion_webhook_url")]
    pub conversion_webhook_ca: Option<PathBuf>,
}

fn parse_service_url(text: &str) -> Result<(String, String), String> {
    let (service, url) = text
        .split_once('=')
        .ok_or("expected namespace/name=https://host:port")?;
    if !service.contains('/') || !url.starts_with("https://") {
        return Err("expected namespace/name=https://host:port".into());
    }
    Ok((service.to_string(), url.to_string()))
}

/// Top-level parser for the standalone binary.
#[derive(Debug, clap::Parser)]
#[command(
    name = "sluice-testserver",
    version,
    about = "Kubernetes API test server for tests and demos (never a production dependency)"
)]
pub struct Cli {
    #[command(flatten)]
    pub args: CliArgs,
}

/// Cluster names for `--clusters N`: `mgmt`, then `cluster-1` .. `cluster-(N-1)`.
pub fn default_names(n: usize) -> Vec<String> {
    (0..n.max(1))
        .map(|i| {
            if i == 0 {
                "mgmt".to_string()
            } else {
                format!("cluster-{i}")
            }
        })
        .collect()
}

/// Runs the server until Ctrl-C.
pub async fn run_cli(args: CliArgs) -> anyhow::Result<()> {
    let clusters = if args.cluster_names.is_empty() {
        default_names(args.clusters)
    } else {
        args.cluster_names.clone()
    };
    let objects = match &args.load {
        Some(path) => load_manifests(path)?,
        None => Vec::new(),
    };
    let tls_names = args
        .advertise
        .iter()
        .map(|a| host_of(a).to_string())
        .collect();
    let config = Config {
        bind: args.listen,
        clusters,
        watch_history: args.watch_history,
        sveltos_crds: !args.no_crds,
        objects,
        port_per_cluster: args.port_per_cluster,
        tls_names,
        webhook_services: std::sync::Arc::new(args.webhook_services.iter().cloned().collect()),
        conversion_webhook: match (&args.conversion_webhook_url, &args.conversion_webhook_ca) {
            (Some(url), Some(ca)) => Some((
                url.clone(),
                std::fs::read(ca).with_context(|| format!("failed to read {}", ca.display()))?,
            )),
            _ => None,
        },
        worker_threads: None,
    };
    let server = TestServer::start(config)
        .await
        .context("failed to start the test server")?;
    if let Some(path) = &args.kubeconfig {
        let mut text = server.kubeconfig_yaml();
        if let Some(advertise) = &args.advertise {
            text = text.replace(
                &format!("https://{}/", server.addr()),
                &format!("https://{advertise}/"),
            );
        }
        std::fs::write(path, text)
            .with_context(|| format!("failed to write kubeconfig {}", path.display()))?;
    }
    println!(
        "sluice test server (tests and demos only) on https://{} (and plain HTTP for /admin)",
        server.addr()
    );
    for name in server.clusters() {
        println!("  {name}: {}", server.cluster_url(&name));
    }
    tokio::signal::ctrl_c()
        .await
        .context("failed to wait for Ctrl-C")?;
    server.shutdown().await;
    Ok(())
}

/// The host of `host:port` (`[v6]:port` too).
fn host_of(address: &str) -> &str {
    let host = address
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Reads every YAML document of a file, or of every manifest file in a directory (sorted by name).
pub fn load_manifests(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut files = Vec::new();
    if path.is_dir() {
        for entry in std::fs::read_dir(path)
            .with_context(|| format!("failed to read directory {}", path.display()))?
        {
            let p = entry?.path();
            if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("failed to read {}", file.display()))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("failed to parse {}", file.display()))?;
            if v.is_object() {
                out.push(v);
            }
        }
    }
    // CRDs first, then namespaces, so later objects find their kinds and namespaces.
    out.sort_by_key(|v| match v.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    });
    Ok(out)
}
