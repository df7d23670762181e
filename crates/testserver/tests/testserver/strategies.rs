//! What kube-apiserver's registry strategies do to built-in kinds, seen through kubectl: namespace
//! finalizers and phase, which kinds carry `metadata.generation`, maps `omitempty` drops once
//! emptied, and no empty `managedFields`.

use sluice_testserver::Config;

use super::kubectl::Kubectl;
use super::support::server_with;

const HELD_CONFIGMAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: held, namespace: team-a, finalizers: [example.com/hold]}
"#;

#[tokio::test]
async fn a_new_namespace_carries_the_kubernetes_finalizer_and_is_active() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["create", "namespace", "team-a"], None).await;
    let ns = k.get(&["namespace", "team-a"]).await;
    assert_eq!(
        ns["spec"]["finalizers"],
        serde_json::json!(["kubernetes"]),
        "{ns}"
    );
    assert_eq!(ns["status"]["phase"], "Active", "{ns}");
    let seeded = k.get(&["namespace", "kube-system"]).await;
    assert_eq!(
        seeded["spec"]["finalizers"],
        serde_json::json!(["kubernetes"]),
        "{seeded}"
    );

    // An update cannot drop the finalizer; deleting still empties and removes the namespace.
    k.run(&["label", "namespace", "team-a", "x=1"], None).await;
    let labelled = k.get(&["namespace", "team-a"]).await;
    assert_eq!(
        labelled["spec"]["finalizers"],
        serde_json::json!(["kubernetes"]),
        "{labelled}"
    );
    k.run(&["create", "-f", "-"], Some(HELD_CONFIGMAP)).await;
    k.run(&["delete", "namespace", "team-a", "--wait=false"], None)
        .await;
    let terminating = k.get(&["namespace", "team-a"]).await;
    assert_eq!(
        terminating["status"]["phase"], "Terminating",
        "{terminating}"
    );
    assert_eq!(
        terminating["spec"]["finalizers"],
        serde_json::json!(["kubernetes"]),
        "{terminating}"
    );
    k.run(
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
        None,
    )
    .await;
    let (ok, _, err) = k.try_run(&["get", "namespace", "team-a"], None).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  replicas: 1
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec: {containers: [{name: c, image: nginx}]}
"#;

#[tokio::test]
async fn generation_is_set_only_for_kinds_whose_strategy_sets_it() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["create", "configmap", "c", "--from-literal=a=1"], None)
        .await;
    k.run(
        &["create", "secret", "generic", "s", "--from-literal=a=1"],
        None,
    )
    .await;
    k.run(&["create", "serviceaccount", "sa"], None).await;
    k.run(&["create", "namespace", "n"], None).await;
    k.run(&["create", "-f", "-"], Some(DEPLOYMENT)).await;
    for what in [
        "configmap/c",
        "secret/s",
        "serviceaccount/sa",
        "namespace/n",
    ] {
        let obj = k.get(&[what]).await;
        assert!(
            obj["metadata"].get("generation").is_none(),
            "{what} carries a generation: {obj}"
        );
    }
    k.run(&["label", "configmap", "c", "x=1"], None).await;
    k.run(
        &[
            "patch",
            "configmap",
            "c",
            "--type=merge",
            "-p",
            r#"{"data":{"a":"2"}}"#,
        ],
        None,
    )
    .await;
    let cm = k.get(&["configmap", "c"]).await;
    assert!(cm["metadata"].get("generation").is_none(), "{cm}");

    let d = k.get(&["deployment", "d"]).await;
    assert_eq!(d["metadata"]["generation"], 1, "{d}");
    k.run(
        &[
            "patch",
            "deployment",
            "d",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
        None,
    )
    .await;
    let d = k.get(&["deployment", "d"]).await;
    assert_eq!(d["metadata"]["generation"], 2, "{d}");
}

#[tokio::test]
async fn removing_the_last_annotation_or_label_drops_the_map() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["create", "configmap", "c", "--from-literal=a=1"], None)
        .await;
    k.run(&["annotate", "configmap", "c", "note=x"], None).await;
    k.run(&["label", "configmap", "c", "env=dev"], None).await;
    k.run(&["annotate", "configmap", "c", "note-"], None).await;
    k.run(&["label", "configmap", "c", "env-"], None).await;
    let cm = k.get(&["configmap", "c"]).await;
    assert!(cm["metadata"].get("annotations").is_none(), "{cm}");
    assert!(cm["metadata"].get("labels").is_none(), "{cm}");
    k.run(
        &[
            "patch",
            "configmap",
            "c",
            "--type=merge",
            "-p",
            r#"{"data":{"a":null}}"#,
        ],
        None,
    )
    .await;
    let cm = k.get(&["configmap", "c"]).await;
    assert!(cm.get("data").is_none(), "{cm}");
}

#[tokio::test]
async fn objects_no_manager_owns_a_field_of_carry_no_managed_fields() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    let seeded = k
        .get(&["namespace", "default", "--show-managed-fields"])
        .await;
    assert!(
        seeded["metadata"].get("managedFields").is_none(),
        "{seeded}"
    );
    k.run(&["create", "configmap", "c", "--from-literal=a=1"], None)
        .await;
    let cm = k.get(&["configmap", "c", "--show-managed-fields"]).await;
    let managers = cm["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("{cm}"));
    assert_eq!(managers.len(), 1, "{cm}");
    assert_eq!(managers[0]["manager"], "kubectl-create", "{cm}");
}

#[tokio::test]
async fn services_get_their_own_cluster_ip_and_keep_it() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    for name in ["web", "api"] {
        let service = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  ports: [{{port: 80}}]\n"
        );
        k.run(&["apply", "-f", "-"], Some(&service)).await;
    }
    let web = k.get(&["service", "web"]).await;
    let api = k.get(&["service", "api"]).await;
    let ip = web["spec"]["clusterIP"].as_str().unwrap_or("").to_string();
    assert!(ip.starts_with("10.9"), "{web}");
    assert_eq!(web["spec"]["clusterIPs"], serde_json::json!([ip]), "{web}");
    assert_eq!(
        web["spec"]["ipFamilies"],
        serde_json::json!(["IPv4"]),
        "{web}"
    );
    assert_ne!(api["spec"]["clusterIP"], web["spec"]["clusterIP"], "{api}");

    // A later write without the address keeps it; one with another address is refused.
    k.run(&["label", "service", "web", "tier=front"], None)
        .await;
    let labelled = k.get(&["service", "web"]).await;
    assert_eq!(labelled["spec"]["clusterIP"], web["spec"]["clusterIP"]);
    let (ok, _, err) = k
        .try_run(
            &[
                "patch",
                "service",
                "web",
                "--type=merge",
                "-p",
                r#"{"spec":{"clusterIP":"10.96.7.7","clusterIPs":["10.96.7.7"]}}"#,
            ],
            None,
        )
        .await;
    assert!(!ok && err.contains("may not change once set"), "{err}");

    // An address another Service holds is refused, naming it.
    let taken = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: copy, namespace: default}}\nspec:\n  clusterIP: {ip}\n  ports: [{{port: 80}}]\n"
    );
    let (ok, _, err) = k.try_run(&["apply", "-f", "-"], Some(&taken)).await;
    assert!(
        !ok && err.contains(&format!(
            "failed to allocate IP {ip}: provided IP is already allocated"
        )),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_control_plane_fills_namespaces_and_admits_pods_as_a_real_cluster_does() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    let api = k.get(&["service", "kubernetes", "-n", "default"]).await;
    assert_eq!(api["spec"]["clusterIP"], "10.96.0.1", "{api}");
    assert_eq!(api["spec"]["ports"][0]["port"], 443, "{api}");
    assert_eq!(
        api["metadata"]["labels"],
        serde_json::json!({"component": "apiserver", "provider": "kubernetes"})
    );

    let nodes = k.get(&["nodes"]).await;
    let node = &nodes["items"][0];
    assert_eq!(node["metadata"]["name"], "mgmt-control-plane", "{nodes}");
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    assert_eq!(
        ready.map(|c| &c["status"]),
        Some(&serde_json::json!("True")),
        "{node}"
    );
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.33.0");

    k.run(&["create", "namespace", "team-a"], None).await;
    let ns = k.get(&["namespace", "team-a"]).await;
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    // The label cannot be taken away.
    k.run(
        &[
            "label",
            "namespace",
            "team-a",
            "kubernetes.io/metadata.name-",
        ],
        None,
    )
    .await;
    let ns = k.get(&["namespace", "team-a"]).await;
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    let selected = k
        .run(
            &[
                "get",
                "ns",
                "-l",
                "kubernetes.io/metadata.name=team-a",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert_eq!(selected.trim(), "namespace/team-a");

    let sa = k.get(&["serviceaccount", "default", "-n", "team-a"]).await;
    assert_eq!(sa["metadata"]["namespace"], "team-a");
    let ca = k
        .get(&["configmap", "kube-root-ca.crt", "-n", "team-a"])
        .await;
    assert_eq!(
        ca["data"]["ca.crt"],
        server.ca_pem(),
        "the cluster's own CA"
    );
    // Deleted, both come back at once, as their controllers make them again.
    k.run(
        &[
            "delete",
            "-n",
            "team-a",
            "configmap/kube-root-ca.crt",
            "serviceaccount/default",
        ],
        None,
    )
    .await;
    let again = k
        .get(&["configmap", "kube-root-ca.crt", "-n", "team-a"])
        .await;
    assert_ne!(again["metadata"]["uid"], ca["metadata"]["uid"], "{again}");
    let sa_again = k.get(&["serviceaccount", "default", "-n", "team-a"]).await;
    assert_ne!(
        sa_again["metadata"]["uid"], sa["metadata"]["uid"],
        "{sa_again}"
    );
    // Edited, the CA ConfigMap is put back as its publisher wrote it: its data the CA alone,
    // with its description.
    k.run(
        &[
            "patch",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"data":{"ca.crt":"bogus","extra":"x"},"metadata":{"annotations":{"kubernetes.io/description":null}}}"#,
        ],
        None,
    )
    .await;
    let reset = k
        .get(&["configmap", "kube-root-ca.crt", "-n", "team-a"])
        .await;
    assert_eq!(
        reset["data"],
        serde_json::json!({"ca.crt": server.ca_pem()}),
        "{reset}"
    );
    assert_eq!(
        reset["metadata"]["annotations"]["kubernetes.io/description"],
        again["metadata"]["annotations"]["kubernetes.io/description"],
        "{reset}"
    );
    assert_eq!(reset["metadata"]["uid"], again["metadata"]["uid"]);

    k.run(&["run", "web", "--image=nginx:1.27", "-n", "team-a"], None)
        .await;
    let pod = k.get(&["pod", "web", "-n", "team-a"]).await;
    let spec = &pod["spec"];
    assert_eq!(spec["serviceAccountName"], "default", "{pod}");
    let volume = spec["volumes"][0]["name"].as_str().unwrap_or("");
    assert!(volume.starts_with("kube-api-access-"), "{pod}");
    assert_eq!(spec["containers"][0]["volumeMounts"][0]["name"], volume);
    assert_eq!(spec["priority"], 0);
    // Scheduled on the Node and started by its kubelet.
    assert_eq!(spec["nodeName"], "mgmt-control-plane", "{pod}");
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["qosClass"], "BestEffort");

    let (ok, _, err) = k
        .try_run(
            &[
                "run",
                "bot",
                "--image=nginx",
                "-n",
                "team-a",
                "--overrides",
                r#"{"spec": {"serviceAccountName": "robot"}}"#,
            ],
            None,
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains(r#"pods "bot" is forbidden: error looking up service account team-a/robot: serviceaccount "robot" not found"#),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn node_port_services_get_node_ports_of_their_own_and_give_them_back() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(
        &["create", "-f", "-"],
        Some(
            "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  ports: [{port: 80}]\n",
        ),
    )
    .await;
    k.run(
        &[
            "patch",
            "service",
            "web",
            "-p",
            r#"{"spec":{"type":"NodePort"}}"#,
        ],
        None,
    )
    .await;
    let web = k.get(&["service", "web"]).await;
    let node_port = web["spec"]["ports"][0]["nodePort"].as_i64().unwrap_or(0);
    assert!((30000..=32767).contains(&node_port), "{web}");
    assert_eq!(web["spec"]["externalTrafficPolicy"], "Cluster", "{web}");

    let taken = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: copy}}\nspec:\n  type: NodePort\n  ports: [{{port: 80, nodePort: {node_port}}}]\n"
    );
    let (ok, _, err) = k.try_run(&["create", "-f", "-"], Some(&taken)).await;
    assert!(
        !ok && err.contains(&format!(
            "spec.ports[0].nodePort: Invalid value: {node_port}: provided port is already allocated"
        )),
        "{err}"
    );

    // Back to ClusterIP: the node port is dropped and free for the other Service.
    k.run(
        &[
            "patch",
            "service",
            "web",
            "-p",
            r#"{"spec":{"type":"ClusterIP"}}"#,
        ],
        None,
    )
    .await;
    let web = k.get(&["service", "web"]).await;
    assert!(web["spec"]["ports"][0].get("nodePort").is_none(), "{web}");
    k.run(&["create", "-f", "-"], Some(&taken)).await;
    let copy = k.get(&["service", "copy"]).await;
    assert_eq!(copy["spec"]["ports"][0]["nodePort"], node_port);
    server.shutdown().await;
}

const BATCH_AND_SCALING: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: "busybox:1.36"}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: backup, image: "busybox:1.36"}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: "busybox:1.36"}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 5
"#;

#[tokio::test]
async fn jobs_cron_jobs_daemon_sets_and_autoscalers_are_served_as_a_real_cluster_serves_them() {
    let server = server_with(Config::default()).await;
    let k = Kubectl::new(&server);
    k.run(&["apply", "-f", "-"], Some(BATCH_AND_SCALING)).await;

    let job = k.get(&["job", "migrate"]).await;
    let uid = job["metadata"]["uid"].as_str().unwrap_or("").to_string();
    assert_eq!(
        job["spec"]["selector"],
        serde_json::json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        "{job}"
    );
    let labels = &job["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["batch.kubernetes.io/job-name"], "migrate", "{job}");
    assert_eq!(labels["controller-uid"], uid.as_str(), "{job}");
    let spec = &job["spec"];
    assert_eq!(
        (
            &spec["completions"],
            &spec["parallelism"],
            &spec["backoffLimit"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(6)
        ),
        "{job}"
    );
    assert_eq!(spec["completionMode"], "NonIndexed");
    assert_eq!(job["metadata"]["generation"], 1);

    let cron = k.get(&["cronjob", "nightly"]).await;
    assert_eq!(cron["spec"]["concurrencyPolicy"], "Allow", "{cron}");
    assert_eq!(cron["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
    let agent = k.get(&["daemonset", "agent"]).await;
    assert_eq!(
        agent["spec"]["updateStrategy"],
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    let hpa = k.get(&["hpa", "web"]).await;
    assert_eq!(hpa["spec"]["minReplicas"], 1, "{hpa}");
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    let all = k.run(&["get", "all", "-o", "name"], None).await;
    for name in [
        "job.batch/migrate",
        "cronjob.batch/nightly",
        "daemonset.apps/agent",
        "horizontalpodautoscaler.autoscaling/web",
    ] {
        assert!(all.lines().any(|l| l == name), "{name} in {all}");
    }

    // A Job whose Pods would restart Always, and a CronJob without a schedule, are refused.
    let always = BATCH_AND_SCALING
        .split("---")
        .next()
        .unwrap_or("")
        .replace("name: migrate}", "name: again}")
        .replace("      restartPolicy: Never\n", "");
    let (ok, _, err) = k.try_run(&["create", "-f", "-"], Some(&always)).await;
    assert!(!ok);
    assert!(
        err.contains(r#"spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never""#),
        "{err}"
    );
    let unscheduled = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: never}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers: [{name: c, image: x}]\n";
    let (ok, _, err) = k.try_run(&["create", "-f", "-"], Some(unscheduled)).await;
    assert!(
        !ok && err.contains("spec.schedule: Required value"),
        "{err}"
    );
    let inverted = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad}\nspec:\n  scaleTargetRef: {kind: Deployment, name: web}\n  minReplicas: 6\n  maxReplicas: 5\n";
    let (ok, _, err) = k.try_run(&["create", "-f", "-"], Some(inverted)).await;
    assert!(
        !ok && err.contains(
            "spec.minReplicas: Invalid value: 6: must be less than or equal to maxReplicas"
        ),
        "{err}"
    );
    server.shutdown().await;
}
