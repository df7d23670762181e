//! The test fixture of the watcher's CloudEvent tests: the sluice bus, the managed cluster's
//! NATS (user `admin` / `my-password`, as in seed 004), the API test server with the management
//! cluster and managed clusters, and the watcher process; plus readers of what reached the bus.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use prost::Message as _;
use serde_json::{json, Value};
use sluice_bus::{topology, Bus};
use sluice_kube::apply;
use sluice_proto::v1 as pb;
use sluice_testkit::{free_port, wait_for, NatsServer, ServiceProcess};
use sluice_testserver::{Config, TestServer};

pub const DEADLINE: Duration = Duration::from_secs(60);
pub const MANAGEMENT: &str = "mgmt";
pub const CLUSTER: &str = "production";
pub const USER: &str = "admin";
pub const PASSWORD: &str = "my-password";

/// Seed 004's management-cluster configuration, as written in the product document.
pub const SEED_CONFIG: &str = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: user-operation
spec:
  messagingMatchCriteria:
  - subject: "user-operation"
    cloudEventSource: "auth.example.com"
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: manage-namespace
spec:
  sourceClusterSelector:
    matchLabels:
      env: production
  eventSourceName: user-operation
  oneForEvent: true
  syncMode: ContinuousWithDriftDetection
  cloudEventAction: '{{if eq .CloudEvent.type "auth.example.com.logout"}}Delete{{else}}Create{{end}}'
  policyRefs:
  - name: namespace
    namespace: default
    kind: ConfigMap
"#;

/// Seed 004's login event, byte for byte as the document publishes it.
pub const SEED_LOGIN: &str = r#"{
  "specversion": "1.0",
  "type": "auth.example.com.login",
  "source": "auth.example.com",
  "id": "10001",
  "subject": "mgianluc",
  "datacontenttype": "application/json",
  "data": {
    "message": "User mgianluc login"
  }
}"#;

/// Everything one test runs: the bus, the managed cluster's NATS, the API server, the watcher.
pub struct Fixture {
    pub bus_nats: NatsServer,
    pub managed_nats: NatsServer,
    pub server: TestServer,
    pub bus: Bus,
    pub watcher: Option<ServiceProcess>,
    pub health_addr: String,
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn start() -> anyhow::Result<Fixture> {
        Fixture::start_with(&[CLUSTER]).await
    }

    /// The management cluster with seed 004's configuration and these managed clusters, all
    /// labelled env: production.
    pub async fn start_with(clusters: &[&str]) -> anyhow::Result<Fixture> {
        let bus_nats = NatsServer::start().await?;
        let managed_nats =
            NatsServer::start_with_args(&["--user", USER, "--pass", PASSWORD]).await?;
        let server = TestServer::start(Config {
            clusters: std::iter::once(MANAGEMENT)
                .chain(clusters.iter().copied())
                .map(str::to_string)
                .collect(),
            sveltos_crds: true,
            ..Default::default()
        })
        .await?;
        let dir = tempfile::tempdir()?;
        std::fs::write(
            dir.path().join("mgmt.kubeconfig"),
            server.kubeconfig_for(MANAGEMENT),
        )?;
        let bus = Bus::connect(&bus_nats.url()).await?;
        let health_addr = format!("127.0.0.1:{}", free_port());
        let fixture = Fixture {
            bus_nats,
            managed_nats,
            server,
            bus,
            watcher: None,
            health_addr,
            dir,
        };
        for cluster in clusters {
            fixture.register_cluster(cluster).await?;
        }
        let config = sluice_kube::manifest::parse_documents(SEED_CONFIG)?;
        fixture.apply(MANAGEMENT, &config).await?;
        Ok(fixture)
    }

    pub async fn client(&self, cluster: &str) -> anyhow::Result<kube::Client> {
        Ok(
            sluice_kube::client::from_kubeconfig_text(&self.server.kubeconfig_for(cluster), None)
                .await?,
        )
    }

    pub async fn apply(&self, cluster: &str, objects: &[Value]) -> anyhow::Result<()> {
        let client = self.client(cluster).await?;
        sluice_kube::manifest::apply_documents(&client, objects, "test").await?;
        Ok(())
    }

    /// A ready SveltosCluster `production` (env: production) with its kubeconfig Secret.
    pub async fn register_cluster(&self, name: &str) -> anyhow::Result<()> {
        let kubeconfig =
            base64::engine::general_purpose::STANDARD.encode(self.server.kubeconfig_for(name));
        self.apply(MANAGEMENT, &[
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("{name}-sveltos-kubeconfig"), "namespace": "default"},
                   "data": {"kubeconfig": kubeconfig}}),
            json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                   "metadata": {"name": name, "namespace": "default", "labels": {"env": "production"}},
                   "spec": {}}),
        ])
        .await?;
        let client = self.client(MANAGEMENT).await?;
        let kind =
            apply::resolve(&client, "lib.projectsveltos.io/v1beta1", "SveltosCluster").await?;
        apply::apply_status(
            &client,
            &kind,
            "default",
            name,
            &json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                    "metadata": {"name": name, "namespace": "default"}, "status": {"ready": true}}),
            "test",
        )
        .await?;
        Ok(())
    }

    /// Writes the managed cluster's `projectsveltos/sveltos-nats` Secret with this configuration.
    pub async fn nats_secret(&self, configuration: &Value) -> anyhow::Result<()> {
        self.nats_secret_in(CLUSTER, configuration).await
    }

    pub async fn nats_secret_in(&self, cluster: &str, configuration: &Value) -> anyhow::Result<()> {
        let value = base64::engine::general_purpose::STANDARD.encode(configuration.to_string());
        self.apply(cluster, &[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "projectsveltos"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "sveltos-nats", "namespace": "projectsveltos"},
                   "data": {"sveltos-nats": value}}),
        ])
        .await
    }

    /// A JetStream stream `USERS` (subject `user-operation`) in the managed NATS, which the
    /// cluster's `sveltos-nats` Secret names; the JetStream context to publish with.
    pub async fn jetstream_users(&self) -> anyhow::Result<async_nats::jetstream::Context> {
        let js = async_nats::jetstream::new(self.managed_client().await?);
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "USERS".into(),
            subjects: vec!["user-operation".into()],
            ..Default::default()
        })
        .await?;
        self.nats_secret(&json!({"jetstream": {"configuration": {
            "url": self.managed_nats.url(),
            "streams": [{"name": "USERS", "subjects": ["user-operation"]}],
            "authorization": Fixture::auth()}}}))
            .await?;
        Ok(js)
    }

    pub fn auth() -> Value {
        json!({"user": {"user": USER, "password": PASSWORD}})
    }

    pub fn start_watcher(&mut self) -> anyhow::Result<()> {
        let kubeconfig: PathBuf = self.dir.path().join("mgmt.kubeconfig");
        let health = self.health_addr.clone();
        let env = [
            ("SLUICE_NATS_URL", self.bus_nats.url()),
            ("SLUICE_KUBECONFIG", kubeconfig.display().to_string()),
            ("SLUICE_HEALTH_ADDR", health),
            ("SLUICE_LOG_FORMAT", "text".to_string()),
            ("RUST_LOG", "info,sluice_watcher=debug".to_string()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.watcher = Some(ServiceProcess::spawn(&watcher_binary(), &[], &env)?);
        Ok(())
    }

    pub fn kill_watcher(&mut self) {
        if let Some(mut watcher) = self.watcher.take() {
            watcher.kill();
        }
    }

    pub fn log(&self) -> String {
        self.watcher
            .as_ref()
            .map(ServiceProcess::log)
            .unwrap_or_default()
    }

    pub async fn managed_client(&self) -> anyhow::Result<async_nats::Client> {
        Ok(
            async_nats::ConnectOptions::with_user_and_password(USER.into(), PASSWORD.into())
                .connect(self.managed_nats.url())
                .await?,
        )
    }

    /// The watcher's counter `name`, read from its `/metrics` endpoint.
    pub async fn counter(&self, name: &str) -> anyhow::Result<u64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut connection = tokio::net::TcpStream::connect(&self.health_addr).await?;
        connection
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: watcher\r\nConnection: close\r\n\r\n")
            .await?;
        let mut text = String::new();
        connection.read_to_string(&mut text).await?;
        let value = text.lines().find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        });
        value.ok_or_else(|| anyhow::anyhow!("no counter {name} in /metrics"))
    }

    /// Every CloudEventReceived stored on the bus, in order.
    pub async fn received(&self) -> anyhow::Result<Vec<pb::CloudEventReceived>> {
        let mut stream = self
            .bus
            .jetstream()
            .get_stream(topology::CLOUDEVENTS.name)
            .await?;
        let state = stream.info().await?.state.clone();
        let mut out = Vec::new();
        if state.messages == 0 {
            return Ok(out);
        }
        for sequence in state.first_sequence..=state.last_sequence {
            let message = stream.get_raw_message(sequence).await?;
            out.push(pb::CloudEventReceived::decode(message.payload)?);
        }
        Ok(out)
    }

    /// Waits for a stored event satisfying `pick`, failing with the watcher's log.
    pub async fn wait_event<F>(
        &self,
        what: &str,
        pick: F,
    ) -> anyhow::Result<(pb::CloudEventReceived, Value)>
    where
        F: Fn(&Value) -> bool,
    {
        let found = wait_for(what, DEADLINE, || async {
            let all = self.received().await.ok()?;
            all.into_iter().find_map(|r| {
                let event: Value = serde_json::from_slice(&r.event_json).ok()?;
                pick(&event).then_some((r, event))
            })
        })
        .await;
        found.map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", self.log()))
    }

    /// Core NATS is at most once: until the watcher has subscribed, publishes are lost. Probe
    /// with throwaway events until one arrives.
    pub async fn wait_subscribed(
        &self,
        client: &async_nats::Client,
        subject: &str,
    ) -> anyhow::Result<()> {
        self.wait_subscribed_in(CLUSTER, client, subject).await
    }

    /// Core NATS is at most once: until the watcher has subscribed for `cluster`, publishes are
    /// lost. Probe with throwaway events until one arrives from that cluster.
    pub async fn wait_subscribed_in(
        &self,
        cluster: &str,
        client: &async_nats::Client,
        subject: &str,
    ) -> anyhow::Result<()> {
        let probe = format!("probe-{subject}");
        let what = format!("watcher subscribed to {subject} for {cluster}");
        let result = wait_for(&what, DEADLINE, || async {
            let event =
                json!({"specversion": "1.0", "id": probe, "source": "probe", "type": "probe"});
            client
                .publish(subject.to_string(), event.to_string().into())
                .await
                .ok()?;
            client.flush().await.ok()?;
            let all = self.received().await.ok()?;
            all.iter()
                .any(|r| {
                    r.subject == subject && r.cluster.as_ref().is_some_and(|c| c.name == cluster)
                })
                .then_some(())
        })
        .await;
        result.map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", self.log()))
    }
}

/// The watcher binary: the one Cargo built for these tests, or (for the benchmark example,
/// which Cargo gives no such path) the one next to the `examples` directory it runs from.
fn watcher_binary() -> String {
    if let Some(path) = option_env!("CARGO_BIN_EXE_sluice-watcher") {
        return path.to_string();
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let profile = exe
        .ancestors()
        .find(|dir| dir.join("sluice-watcher").is_file())
        .map(|dir| dir.join("sluice-watcher"));
    profile.map_or_else(
        || {
            sluice_testkit::bin_path("sluice-watcher")
                .display()
                .to_string()
        },
        |path| path.display().to_string(),
    )
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.kill_watcher();
    }
}
