//! The real kubectl binary against the server: create -f, get with selectors and output formats,
//! label, apply --server-side, delete, get -w, api-resources and categories (`get all`).

use std::process::Stdio;

use serde_json::Value;
use sluice_testserver::{Config, TestServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::support::server_with;

pub struct Kubectl {
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
}

impl Kubectl {
    pub fn new(server: &TestServer) -> Kubectl {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml()).expect("write kubeconfig");
        Kubectl {
            _dir: dir,
            kubeconfig,
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        cmd.env("HOME", self._dir.path()).kill_on_drop(true);
        cmd
    }

    /// Runs kubectl with `stdin`; returns stdout, failing the test with stderr on a non-zero exit.
    pub async fn run(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out, err) = self.try_run(args, stdin).await;
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }

    /// `kubectl create deployment web --image=nginx:1.27 --replicas=<replicas>`, with `extra`
    /// flags: the workload the tests of the server's controllers run.
    pub async fn create_web(&self, replicas: u32, extra: &[&str]) {
        let replicas = format!("--replicas={replicas}");
        let mut args = vec![
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            &replicas,
        ];
        args.extend_from_slice(extra);
        self.run(&args, None).await;
    }

    /// `kubectl get <args> -o json`, parsed.
    pub async fn get(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let out = self.run(&all, None).await;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl get {args:?}: {e}: {out}"))
    }

    pub async fn try_run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let mut input = child.stdin.take().expect("stdin");
        input
            .write_all(stdin.unwrap_or("").as_bytes())
            .await
            .expect("write stdin");
        drop(input);
        let out = child.wait_with_output().await.expect("kubectl output");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into(),
            String::from_utf8_lossy(&out.stderr).into(),
        )
    }
}

const MANIFESTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: web
  labels: {env: prod, tier: web}
data: {a: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: db
  labels: {env: dev}
data: {a: "2"}
"#;

#[tokio::test]
async fn kubectl_create_get_label_apply_delete() {
    let server = server_with(Config {
        sveltos_crds: true,
        ..Config::default()
    })
    .await;
    let k = Kubectl::new(&server);
    let out = k.run(&["create", "-f", "-"], Some(MANIFESTS)).await;
    assert!(
        out.contains("configmap/web created") && out.contains("configmap/db created"),
        "{out}"
    );

    let table = k
        .run(&["get", "configmaps", "-l", "env in (prod,qa)"], None)
        .await;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("AGE"),
        "{table}"
    );
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[1].starts_with("web "), "{table}");

    let json: Value = serde_json::from_str(
        &k.run(&["get", "cm", "-l", "!tier", "-o", "json"], None)
            .await,
    )
    .expect("json");
    let names: Vec<&str> = json["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    // The root CA the cluster keeps in every namespace has no `tier` either.
    assert_eq!(names, vec!["db", "kube-root-ca.crt"]);

    assert!(k
        .run(&["label", "cm", "db", "team=blue"], None)
        .await
        .contains("labeled"));
    let yaml = k.run(&["get", "cm", "db", "-o", "yaml"], None).await;
    let obj: Value = serde_yaml::from_str(&yaml).expect("yaml");
    assert_eq!(obj["metadata"]["labels"]["team"], "blue");

    let applied = k
        .run(
            &["apply", "--server-side", "--field-manager=ops", "-f", "-"],
            Some(MANIFESTS),
        )
        .await;
    assert!(applied.contains("serverside-applied"), "{applied}");
    let conflicting = MANIFESTS.replace("a: \"2\"", "a: \"3\"");
    let (ok, _, err) = k
        .try_run(
            &["apply", "--server-side", "--field-manager=other", "-f", "-"],
            Some(&conflicting),
        )
        .await;
    assert!(
        !ok && err.contains("conflict"),
        "expected a conflict: {err}"
    );
    k.run(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=other",
            "-f",
            "-",
        ],
        Some(&conflicting),
    )
    .await;
    assert_eq!(
        k.run(&["get", "cm", "db", "-o", "jsonpath={.data.a}"], None)
            .await,
        "3"
    );

    assert!(k
        .run(&["delete", "cm", "web"], None)
        .await
        .contains("deleted"));
    let (ok, _, err) = k.try_run(&["get", "cm", "web"], None).await;
    assert!(!ok && err.contains("NotFound"), "{err}");

    let resources = k.run(&["api-resources"], None).await;
    for needle in [
        "configmaps",
        "deployments",
        "eventsources",
        "eventtriggers",
        "clusterprofiles",
        "sveltosclusters",
    ] {
        assert!(
            resources.contains(needle),
            "api-resources lacks {needle}: {resources}"
        );
    }
    let es = "apiVersion: lib.projectsveltos.io/v1alpha1\nkind: EventSource\nmetadata: {name: svc}\nspec: {group: \"\", version: v1, kind: Service, collectResources: true}\n";
    k.run(&["create", "-f", "-"], Some(es)).await;
    let listed = k
        .run(
            &[
                "get",
                "eventsources.v1beta1.lib.projectsveltos.io",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert_eq!(listed.trim(), "eventsource.lib.projectsveltos.io/svc");
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_get_watch_streams_changes() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["create", "-f", "-"], Some(MANIFESTS)).await;
    let mut child = k
        .command(&["get", "cm", "-w", "-l", "env=dev"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let header = lines.next_line().await.expect("read").expect("header");
    assert!(header.starts_with("NAME"), "{header}");
    let first = lines.next_line().await.expect("read").expect("row");
    assert!(first.starts_with("db "), "{first}");
    k.run(&["label", "cm", "db", "seen=yes"], None).await;
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
        .await
        .expect("event in time")
        .expect("read")
        .expect("row");
    assert!(next.starts_with("db "), "{next}");
    child.kill().await.expect("kill kubectl");
    server.shutdown().await;
}

const WORKLOADS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: nats, namespace: default}
spec:
  replicas: 3
  serviceName: nats
  selector: {matchLabels: {app: nats}}
  template:
    metadata: {labels: {app: nats}}
    spec:
      containers:
        - name: nats
          image: nats:2.15.1-alpine
          volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: nats, namespace: default}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: nats}}
"#;

/// `kubectl apply --dry-run=server` and `delete --dry-run=server`: the server admits and
/// validates the write as a real one (StatefulSet, PodDisruptionBudget) and keeps nothing: no
/// object, no resourceVersion step, no watch event.
#[tokio::test]
async fn kubectl_dry_run_validates_and_keeps_nothing() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    let version = || async {
        let (_, body) =
            super::support::http(&server, "GET", "/clusters/mgmt/api/v1/namespaces", "").await;
        let list: Value = serde_json::from_str(&body).expect("namespace list");
        list["metadata"]["resourceVersion"]
            .as_str()
            .expect("resourceVersion")
            .to_owned()
    };
    let before = version().await;
    let out = k
        .run(&["apply", "--dry-run=server", "-f", "-"], Some(WORKLOADS))
        .await;
    assert!(
        out.contains("statefulset.apps/nats created (server dry run)")
            && out.contains("poddisruptionbudget.policy/nats created (server dry run)"),
        "{out}"
    );
    assert_eq!(version().await, before, "a dry run stores nothing");
    let (ok, _, err) = k.try_run(&["get", "sts,pdb", "nats"], None).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
    let audit = server.audit("mgmt");
    assert!(
        audit
            .iter()
            .any(|e| e.method == "POST" && e.query.contains("dryRun=All")),
        "{audit:?}"
    );

    // invalid objects are refused as by a real write
    let bad = WORKLOADS.replace("maxUnavailable: 1", "maxUnavailable: 1\n  minAvailable: 2");
    let (ok, _, err) = k
        .try_run(&["apply", "--dry-run=server", "-f", "-"], Some(&bad))
        .await;
    assert!(
        !ok && err.contains("minAvailable and maxUnavailable cannot be both set"),
        "{err}"
    );
    let bad = WORKLOADS.replace(
        "{name: data, mountPath: /data}",
        "{name: other, mountPath: /data}",
    );
    let (ok, _, err) = k
        .try_run(&["apply", "--dry-run=server", "-f", "-"], Some(&bad))
        .await;
    assert!(
        !ok && err.contains(
            "spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"other\""
        ),
        "{err}"
    );

    // changes and deletions of existing objects are tried, not made
    k.run(&["apply", "-f", "-"], Some(WORKLOADS)).await;
    let stored = version().await;
    let scaled = WORKLOADS.replace("replicas: 3", "replicas: 5");
    let out = k
        .run(&["apply", "--dry-run=server", "-f", "-"], Some(&scaled))
        .await;
    assert!(
        out.contains("statefulset.apps/nats configured (server dry run)"),
        "{out}"
    );
    k.run(&["delete", "--dry-run=server", "pdb", "nats"], None)
        .await;
    assert_eq!(version().await, stored);
    assert_eq!(
        k.run(
            &["get", "sts", "nats", "-o", "jsonpath={.spec.replicas}"],
            None
        )
        .await,
        "3"
    );
    k.run(&["get", "pdb", "nats"], None).await;

    let (status, body) = super::support::http(
        &server,
        "POST",
        "/clusters/mgmt/api/v1/namespaces/default/configmaps?dryRun=Some",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("dryRun: Unsupported value"), "{body}");
    server.shutdown().await;
}

const CATEGORIZED_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.org}
spec:
  group: example.org
  scope: Namespaced
  names: {kind: Widget, plural: widgets, categories: [gadgets]}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

#[tokio::test]
async fn kubectl_get_all_and_a_crds_category_list_their_kinds() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["run", "pod1", "--image=nginx"], None).await;
    k.run(&["create", "-f", "-"], Some(MANIFESTS)).await;
    let service =
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n";
    k.run(&["create", "-f", "-"], Some(service)).await;
    let all = k.run(&["get", "all", "-o", "name"], None).await;
    let mut names: Vec<&str> = all.lines().collect();
    names.sort_unstable();
    // ConfigMaps are in no category: `all` leaves them out, as on a real cluster, which also
    // holds the `kubernetes` Service.
    assert_eq!(
        names,
        ["pod/pod1", "service/kubernetes", "service/web"],
        "{all}"
    );

    k.run(&["apply", "-f", "-"], Some(CATEGORIZED_CRD)).await;
    let widget = "apiVersion: example.org/v1\nkind: Widget\nmetadata: {name: w1}\n";
    let (server_ok, err) = eventually_created(&k, widget).await;
    assert!(server_ok, "{err}");
    let gadgets = k.run(&["get", "gadgets", "-o", "name"], None).await;
    assert_eq!(gadgets.trim(), "widget.example.org/w1");
    server.shutdown().await;
}

/// `kubectl get` prints the columns kube-apiserver's Table gives each built-in kind (`-o wide`
/// adds the priority-1 ones), with the controllers' statuses in them; a custom resource
/// without printer columns gets Name and Age.
#[tokio::test]
async fn kubectl_get_prints_each_kinds_columns() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.create_web(2, &[]).await;
    k.run(
        &[
            "expose",
            "deployment",
            "web",
            "--port=80",
            "--type=NodePort",
        ],
        None,
    )
    .await;
    k.run(&["create", "configmap", "c1", "--from-literal=a=b"], None)
        .await;
    let rows = |out: String| -> Vec<Vec<String>> {
        out.lines()
            .map(|line| {
                line.split("  ")
                    .map(str::trim)
                    .filter(|cell| !cell.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .collect()
    };
    // The Deployment's Pods are made and run by the server's controllers.
    let mut pods = Vec::new();
    for _ in 0..50 {
        pods = rows(k.run(&["get", "pods", "-o", "wide"], None).await);
        if pods.len() == 3 && pods[1..].iter().all(|row| row[2] == "Running") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        pods[0],
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ],
        "{pods:?}"
    );
    for pod in &pods[1..] {
        assert!(pod[0].starts_with("web-"), "{pod:?}");
        assert_eq!(
            (pod[1].as_str(), pod[2].as_str(), pod[3].as_str()),
            ("1/1", "Running", "0"),
            "{pod:?}"
        );
        assert_eq!(pod[7..], ["<none>", "<none>"], "{pod:?}");
    }
    let deployments = rows(k.run(&["get", "deployments", "-o", "wide"], None).await);
    assert_eq!(
        deployments,
        [
            [
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ]
            .map(String::from)
            .to_vec(),
            vec![
                "web".into(),
                "2/2".into(),
                "2".into(),
                "2".into(),
                deployments[1][4].clone(),
                "nginx".into(),
                "nginx:1.27".into(),
                "app=web".into()
            ],
        ]
    );
    let services = rows(k.run(&["get", "service", "web"], None).await);
    assert_eq!(
        services[0],
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    assert_eq!(services[1][1], "NodePort");
    assert_eq!(services[1][3], "<none>");
    assert!(
        services[1][4].starts_with("80:") && services[1][4].ends_with("/TCP"),
        "{services:?}"
    );
    let config_maps = rows(k.run(&["get", "configmap", "c1"], None).await);
    assert_eq!(config_maps[0], ["NAME", "DATA", "AGE"]);
    assert_eq!(config_maps[1][..2], ["c1", "1"]);
    let namespaces = rows(k.run(&["get", "namespace", "default"], None).await);
    assert_eq!(namespaces[0], ["NAME", "STATUS", "AGE"]);
    assert_eq!(namespaces[1][..2], ["default", "Active"]);
    // No metrics pipeline runs here: the current utilization is unknown.
    k.run(
        &[
            "autoscale",
            "deployment",
            "web",
            "--min=1",
            "--max=3",
            "--cpu-percent=80",
        ],
        None,
    )
    .await;
    let autoscalers = rows(k.run(&["get", "hpa", "web"], None).await);
    assert_eq!(
        autoscalers[0],
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ]
    );
    assert_eq!(
        autoscalers[1][..6],
        ["web", "Deployment/web", "cpu: <unknown>/80%", "1", "3", "0"],
        "{autoscalers:?}"
    );

    k.run(&["apply", "-f", "-"], Some(CATEGORIZED_CRD)).await;
    let widget = "apiVersion: example.org/v1\nkind: Widget\nmetadata: {name: w1}\n";
    let (server_ok, err) = eventually_created(&k, widget).await;
    assert!(server_ok, "{err}");
    let widgets = rows(k.run(&["get", "widgets"], None).await);
    assert_eq!(widgets[0], ["NAME", "AGE"]);
    server.shutdown().await;
}

/// Creates `manifest` once its CRD is served (kubectl's discovery may lag the CRD by a moment).
async fn eventually_created(k: &Kubectl, manifest: &str) -> (bool, String) {
    let mut last = String::new();
    for _ in 0..50 {
        let (ok, _, err) = k.try_run(&["create", "-f", "-"], Some(manifest)).await;
        if ok {
            return (true, String::new());
        }
        last = err;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    (false, last)
}

#[tokio::test]
async fn field_selectors_take_the_fields_each_kind_offers_and_refuse_others() {
    let server = server_with(Config {
        sveltos_crds: true,
        ..Config::default()
    })
    .await;
    let k = Kubectl::new(&server);
    k.run(&["run", "web", "--image=nginx"], None).await;
    let running = k
        .run(
            &[
                "get",
                "pods",
                "--field-selector",
                "status.phase=Running,spec.restartPolicy=Always",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert_eq!(running.trim(), "pod/web");
    let pending = k
        .run(
            &[
                "get",
                "pods",
                "--field-selector",
                "status.phase=Pending",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert!(pending.trim().is_empty(), "{pending}");
    let opaque = k
        .run(
            &[
                "get",
                "secrets",
                "-A",
                "--field-selector",
                "type=Opaque",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert!(opaque.trim().is_empty(), "{opaque}");

    let (ok, _, err) = k
        .try_run(&["get", "configmaps", "--field-selector", "data.a=1"], None)
        .await;
    assert!(
        !ok && err.contains("field label not supported: data.a"),
        "{err}"
    );
    let (ok, _, err) = k
        .try_run(
            &[
                "get",
                "eventtriggers",
                "--field-selector",
                "spec.oneForEvent=true",
            ],
            None,
        )
        .await;
    assert!(
        !ok && err.contains(r#""spec.oneForEvent" is not a known field selector: only "metadata.name", "metadata.namespace""#),
        "{err}"
    );
    server.shutdown().await;
}
