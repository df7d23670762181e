//! `sluice setup` and `sluice probe`: the one-shot job of docker-compose.yml and its health
//! checks. Setup prepares a running API test server the way an operator prepares real clusters:
//! the namespaces and RBAC of `k8s/base` in the management cluster, one kubeconfig per service
//! as its own ServiceAccount, the managed clusters registered the Sveltos way (kubeconfig Secret
//! plus SveltosCluster), optionally seed 000's first example, and a kubeconfig for the host.
//! It talks to the test server's plain-HTTP `/admin` endpoints and to the clusters over HTTPS.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::demo::{EVENT_BASED_ADDON, EVENT_SOURCE, SERVICE};
use crate::stack::{register_cluster, MANAGEMENT, SERVICES, SERVICE_NAMESPACE};

/// What `sluice setup` does.
#[derive(Clone, Debug, clap::Args)]
pub struct SetupArgs {
    /// The test server's plain-HTTP base URL, for its `/admin` endpoints.
    #[arg(
        long,
        env = "SLUICE_TESTSERVER_URL",
        default_value = "http://127.0.0.1:6443"
    )]
    pub server: String,
    /// host:port other containers reach the API at (written into the services' kubeconfigs
    /// and the clusters' kubeconfig Secrets); the test server's `--advertise`.
    #[arg(long)]
    pub advertise: String,
    /// host:port the host reaches the API at (a published port), for `<dir>/host.kubeconfig`.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub host_address: String,
    /// Where the kubeconfigs go: `<service>.kubeconfig` for each of the five services,
    /// `kubeconfig.yaml` (every cluster, as administrator, via --advertise) and `host.kubeconfig`.
    #[arg(long)]
    pub dir: PathBuf,
    /// A managed cluster to register, with its SveltosCluster labels: `NAME[:KEY=VALUE,...]`.
    #[arg(long = "cluster", value_parser = parse_cluster)]
    pub clusters: Vec<(String, BTreeMap<String, String>)>,
    /// Apply seed 000's first example: its EventSource, EventBasedAddOn and ConfigMap in the
    /// management cluster and its Service in this managed cluster.
    #[arg(long)]
    pub example: Option<String>,
    /// How long to wait for the test server to answer.
    #[arg(long, default_value_t = 60)]
    pub wait_seconds: u64,
}

/// `cluster-a:env=fv,tier=web` -> (`cluster-a`, {env: fv, tier: web}).
pub fn parse_cluster(text: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let (name, labels) = text.split_once(':').unwrap_or((text, ""));
    if name.is_empty() {
        return Err(format!("{text:?}: expected NAME[:KEY=VALUE,...]"));
    }
    let mut out = BTreeMap::new();
    for pair in labels.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: label {pair:?} is not KEY=VALUE"))?;
        out.insert(key.to_string(), value.to_string());
    }
    Ok((name.to_string(), out))
}

/// The kubeconfig with every cluster's server moved to `authority` (`host:port`), keeping the
/// scheme and path (`https://0.0.0.0:6443/clusters/mgmt` -> `https://testserver:6443/clusters/mgmt`).
pub fn rehost(kubeconfig: &Value, authority: &str) -> anyhow::Result<Value> {
    let mut out = kubeconfig.clone();
    let clusters = out
        .get_mut("clusters")
        .and_then(Value::as_array_mut)
        .context("kubeconfig has no clusters list")?;
    for (i, cluster) in clusters.iter_mut().enumerate() {
        let server = cluster
            .pointer_mut("/cluster/server")
            .with_context(|| format!("kubeconfig clusters[{i}].cluster.server is missing"))?;
        let text = server
            .as_str()
            .with_context(|| format!("kubeconfig clusters[{i}].cluster.server is no string"))?;
        let (scheme, rest) = text.split_once("://").with_context(|| {
            format!("kubeconfig clusters[{i}].cluster.server {text:?} has no scheme")
        })?;
        let path = rest.find('/').map_or("", |at| &rest[at..]);
        *server = Value::String(format!("{scheme}://{authority}{path}"));
    }
    Ok(out)
}

/// The kubeconfig reduced to the context `name` (and its cluster and user), made current: what
/// goes into that cluster's Sveltos kubeconfig Secret.
pub fn only_context(kubeconfig: &Value, name: &str) -> anyhow::Result<Value> {
    let find = |list: &str, wanted: &str| -> anyhow::Result<Value> {
        kubeconfig
            .get(list)
            .and_then(Value::as_array)
            .and_then(|items| items.iter().find(|item| item["name"] == wanted))
            .cloned()
            .with_context(|| format!("kubeconfig has no {list} entry named {wanted:?}"))
    };
    let context = find("contexts", name)?;
    let cluster_name = context["context"]["cluster"]
        .as_str()
        .with_context(|| format!("kubeconfig context {name:?} names no cluster"))?;
    let user_name = context["context"]["user"]
        .as_str()
        .with_context(|| format!("kubeconfig context {name:?} names no user"))?;
    let mut out = kubeconfig.clone();
    out["clusters"] = Value::Array(vec![find("clusters", cluster_name)?]);
    out["users"] = Value::Array(vec![find("users", user_name)?]);
    out["contexts"] = Value::Array(vec![context]);
    out["current-context"] = Value::String(name.to_string());
    Ok(out)
}

/// `http://host:port/path` -> (`host:port`, `/path`). Plain HTTP only.
pub fn split_http_url(url: &str) -> anyhow::Result<(String, String)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url:?}: only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        bail!("{url:?} names no host");
    }
    let authority = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path.to_string()))
}

/// The status code and body of an HTTP/1.x response read to its end.
pub fn parse_response(raw: &[u8]) -> anyhow::Result<(u16, Vec<u8>)> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("HTTP response has no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status_line = head.lines().next().unwrap_or_default();
    let code = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("bad HTTP status line {status_line:?}"))?;
    if head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    }) {
        bail!("chunked HTTP responses are not supported");
    }
    Ok((code, raw[end + 4..].to_vec()))
}

/// One plain HTTP/1.0 request (the connection closes after the answer): status and body.
pub async fn http(method: &str, url: &str, timeout: Duration) -> anyhow::Result<(u16, Vec<u8>)> {
    let (authority, path) = split_http_url(url)?;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(&authority).await?;
        let host = authority
            .rsplit_once(':')
            .map_or(authority.as_str(), |(h, _)| h);
        let request =
            format!("{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        anyhow::Ok(raw)
    };
    let raw = tokio::time::timeout(timeout, exchange)
        .await
        .with_context(|| format!("{method} {url}: no answer within {timeout:?}"))?
        .with_context(|| format!("{method} {url}"))?;
    parse_response(&raw).with_context(|| format!("{method} {url}"))
}

/// `sluice probe URL`: succeeds when a GET answers 2xx (container health checks).
pub async fn probe(url: &str) -> anyhow::Result<()> {
    let (code, body) = http("GET", url, Duration::from_secs(2)).await?;
    if !(200..300).contains(&code) {
        bail!(
            "GET {url}: HTTP {code}: {}",
            String::from_utf8_lossy(&body).trim()
        );
    }
    Ok(())
}

/// The body of a 2xx answer of the test server's admin API as YAML or JSON.
async fn admin(method: &str, url: &str) -> anyhow::Result<Value> {
    let (code, body) = http(method, url, Duration::from_secs(10)).await?;
    let text = String::from_utf8_lossy(&body);
    if !(200..300).contains(&code) {
        bail!("{method} {url}: HTTP {code}: {}", text.trim());
    }
    serde_yaml::from_str(&text).with_context(|| format!("{method} {url}: the answer is no YAML"))
}

/// Writes a kubeconfig whole (a temporary file renamed into place): a service starting meanwhile
/// reads the old file or the new one, never half of one.
fn write_kubeconfig(path: &Path, kubeconfig: &Value) -> anyhow::Result<()> {
    let text = serde_yaml::to_string(kubeconfig)?;
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, path))
        .with_context(|| format!("failed to write {}", path.display()))
}

/// Runs the setup against a running test server; prints each step.
pub async fn run(args: &SetupArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let base = args.server.trim_end_matches('/');
    let kubeconfig_url = format!("{base}/admin/kubeconfig");
    let admin_kubeconfig = sluice_testkit::wait_for(
        &format!("the test server at {kubeconfig_url}"),
        Duration::from_secs(args.wait_seconds),
        || async { admin("GET", &kubeconfig_url).await.ok() },
    )
    .await?;
    let inside = rehost(&admin_kubeconfig, &args.advertise)?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("failed to create {}", args.dir.display()))?;
    write_kubeconfig(&args.dir.join("kubeconfig.yaml"), &inside)?;
    let inside_text = serde_yaml::to_string(&inside)?;
    let mgmt = sluice_kube::client::from_kubeconfig_text(&inside_text, Some(MANAGEMENT))
        .await
        .with_context(|| format!("no client for {MANAGEMENT} at {}", args.advertise))?;

    writeln!(
        out,
        "applying the namespaces and RBAC of k8s/base to {MANAGEMENT}"
    )?;
    crate::stack::install_deployment_rbac(&mgmt, "sluice-setup").await?;
    for service in SERVICES {
        let url = format!(
            "{base}/admin/clusters/{MANAGEMENT}/serviceaccounts/{SERVICE_NAMESPACE}/{service}/kubeconfig"
        );
        let kubeconfig = rehost(&admin("POST", &url).await?, &args.advertise)?;
        let path = args.dir.join(format!("{service}.kubeconfig"));
        write_kubeconfig(&path, &kubeconfig)?;
        writeln!(
            out,
            "wrote {} ({MANAGEMENT} as ServiceAccount {SERVICE_NAMESPACE}/{service})",
            path.display()
        )?;
    }
    for (name, labels) in &args.clusters {
        let secret = serde_yaml::to_string(&only_context(&inside, name)?)?;
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        register_cluster(&mgmt, name, &secret, &labels)
            .await
            .with_context(|| format!("failed to register cluster {name}"))?;
        writeln!(
            out,
            "registered {name} (SveltosCluster default/{name} {labels:?}, Secret default/{name}-sveltos-kubeconfig)"
        )?;
    }
    if let Some(cluster) = &args.example {
        for yaml in [EVENT_SOURCE, EVENT_BASED_ADDON] {
            let documents = sluice_kube::manifest::parse_documents(yaml)?;
            sluice_kube::manifest::apply_documents(&mgmt, &documents, "sluice-setup").await?;
        }
        let managed = sluice_kube::client::from_kubeconfig_text(&inside_text, Some(cluster))
            .await
            .with_context(|| format!("no client for {cluster}"))?;
        let documents = sluice_kube::manifest::parse_documents(SERVICE)?;
        sluice_kube::manifest::apply_documents(&managed, &documents, "sluice-setup").await?;
        writeln!(
            out,
            "applied seed 000: EventSource sveltos-service, EventBasedAddOn service-network-policy, ConfigMap network-policy in {MANAGEMENT}; Service default/my-service in {cluster}"
        )?;
    }
    let host = args.dir.join("host.kubeconfig");
    write_kubeconfig(&host, &rehost(&admin_kubeconfig, &args.host_address)?)?;
    writeln!(
        out,
        "wrote {} (every cluster as administrator at https://{})",
        host.display(),
        args.host_address
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking

    use super::*;
    use serde_json::json;

    fn kubeconfig() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "mgmt",
            "clusters": [
                {"name": "mgmt", "cluster": {"server": "https://0.0.0.0:6443/clusters/mgmt", "certificate-authority-data": "Q0E="}},
                {"name": "cluster-a", "cluster": {"server": "https://0.0.0.0:6443/clusters/cluster-a", "certificate-authority-data": "Q0E="}}
            ],
            "users": [{"name": "mgmt-admin", "user": {"token": "m"}}, {"name": "a-admin", "user": {"token": "a"}}],
            "contexts": [
                {"name": "mgmt", "context": {"cluster": "mgmt", "user": "mgmt-admin"}},
                {"name": "cluster-a", "context": {"cluster": "cluster-a", "user": "a-admin"}}
            ]
        })
    }

    #[test]
    fn rehost_moves_every_server_and_keeps_scheme_and_path() {
        let moved = rehost(&kubeconfig(), "127.0.0.1:16443").unwrap();
        assert_eq!(
            moved["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:16443/clusters/mgmt"
        );
        assert_eq!(
            moved["clusters"][1]["cluster"]["server"],
            "https://127.0.0.1:16443/clusters/cluster-a"
        );
        let root =
            json!({"clusters": [{"name": "x", "cluster": {"server": "https://10.0.0.1:6443"}}]});
        assert_eq!(
            rehost(&root, "testserver:6443").unwrap()["clusters"][0]["cluster"]["server"],
            "https://testserver:6443"
        );
        let broken = json!({"clusters": [{"name": "x", "cluster": {"server": "10.0.0.1"}}]});
        let error = rehost(&broken, "a:1").unwrap_err().to_string();
        assert!(error.contains("clusters[0].cluster.server"), "{error}");
    }

    #[test]
    fn only_context_keeps_one_cluster_and_its_user() {
        let one = only_context(&kubeconfig(), "cluster-a").unwrap();
        assert_eq!(one["current-context"], "cluster-a");
        assert_eq!(one["clusters"].as_array().unwrap().len(), 1);
        assert_eq!(one["clusters"][0]["name"], "cluster-a");
        assert_eq!(
            one["users"],
            json!([{"name": "a-admin", "user": {"token": "a"}}])
        );
        assert_eq!(one["contexts"][0]["name"], "cluster-a");
        let error = only_context(&kubeconfig(), "cluster-z")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("contexts entry named \"cluster-z\""),
            "{error}"
        );
    }

    #[test]
    fn parse_cluster_reads_name_and_labels() {
        let (name, labels) = parse_cluster("cluster-a:env=fv,tier=web").unwrap();
        assert_eq!(name, "cluster-a");
        assert_eq!(
            labels,
            BTreeMap::from([("env".into(), "fv".into()), ("tier".into(), "web".into())])
        );
        assert_eq!(parse_cluster("b").unwrap(), ("b".into(), BTreeMap::new()));
        assert!(parse_cluster("b:env").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_cluster(":env=x").is_err());
    }

    #[test]
    fn http_urls_and_responses_parse() {
        assert_eq!(
            split_http_url("http://127.0.0.1:8080/healthz").unwrap(),
            ("127.0.0.1:8080".into(), "/healthz".into())
        );
        assert_eq!(
            split_http_url("http://testserver").unwrap(),
            ("testserver:80".into(), "/".into())
        );
        assert!(split_http_url("https://x/").is_err());
        let (code, body) =
            parse_response(b"HTTP/1.0 503 Service Unavailable\r\ncontent-length: 2\r\n\r\nno")
                .unwrap();
        assert_eq!((code, body.as_slice()), (503, b"no".as_slice()));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok")
                .is_err()
        );
    }

    #[tokio::test]
    async fn probe_answers_by_status_code() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for answer in [
                "HTTP/1.0 200 OK\r\n\r\nok",
                "HTTP/1.0 500 Oops\r\n\r\nbroken",
            ] {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await.unwrap();
                socket.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        let url = format!("http://{addr}/healthz");
        probe(&url).await.unwrap();
        let error = probe(&url).await.unwrap_err().to_string();
        assert!(error.contains("HTTP 500: broken"), "{error}");
    }
}
