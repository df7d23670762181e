//! What a real cluster's control plane adds around the objects its users write, done at the
//! write itself so tests see it at once:
//! - every Namespace carries the label `kubernetes.io/metadata.name: <name>` (the namespace
//!   strategy sets it on create and update);
//! - every new namespace gets the `default` ServiceAccount (the ServiceAccount controller) and
//!   the `kube-root-ca.crt` ConfigMap with the cluster's CA (the root CA publisher), made again
//!   when deleted while the namespace stays, and put back when edited (`rollout::Work::RootCa`);
//! - `default` holds the `kubernetes` Service (`10.96.0.1`, port 443) and its Endpoints;
//! - the cluster has one ready Node, `<cluster>-control-plane`, as a kind cluster has;
//! - a Pod is admitted as the ServiceAccount, DefaultTolerationSeconds and Priority admission
//!   plugins admit it: it runs as `default` unless it names a ServiceAccount, which must exist;
//!   it gets the projected `kube-api-access-*` token volume mounted in every container (unless
//!   automounting is off), the not-ready and unreachable tolerations of 300 s, `priority` and
//!   `preemptionPolicy`; and it starts `Pending` with its QoS class.

use serde_json::{json, Map, Value};

/// The label every Namespace carries with its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What the cluster's controllers need to know of its control plane.
#[derive(Clone, Debug, Default)]
pub struct ControlPlane {
    /// PEM of the authority that signed the API server's certificate.
    pub ca_pem: String,
    /// Where the API server listens, for the `kubernetes` Endpoints.
    pub address: Option<std::net::SocketAddr>,
}

/// Sets the namespace's name label (a Namespace's `metadata.name` is already set).
pub fn label_namespace(obj: &mut Value) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    labels[NAMESPACE_NAME_LABEL] = json!(name);
}

/// The objects the controllers create in a new namespace: (resource plural, object).
pub fn namespace_objects(namespace: &str, plane: &ControlPlane) -> Vec<(&'static str, Value)> {
    vec![
        (
            "serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": namespace}}),
        ),
        (
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "kube-root-ca.crt", "namespace": namespace,
                                "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                   "data": {"ca.crt": plane.ca_pem}}),
        ),
    ]
}

/// The `kubernetes` Service, Endpoints and EndpointSlice in `default`, as the API server's own
/// reconciler writes them: (resource plural, object).
pub fn api_service(plane: &ControlPlane) -> Vec<(&'static str, Value)> {
    let mut objects = vec![(
        "services",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "kubernetes", "namespace": "default",
                            "labels": {"component": "apiserver", "provider": "kubernetes"}},
               "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "sessionAffinity": "None",
                        "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                   "targetPort": 6443}]}}),
    )];
    if let Some(address) = plane.address {
        objects.push((
            "endpoints",
            json!({"apiVersion": "v1", "kind": "Endpoints",
                   "metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                   "subsets": [{"addresses": [{"ip": address.ip().to_string()}],
                                "ports": [{"name": "https", "port": address.port(),
                                           "protocol": "TCP"}]}]}),
        ));
        objects.push((
            "endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"kubernetes.io/service-name": "kubernetes"}},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": [address.ip().to_string()],
                                  "conditions": {"ready": true}}],
                   "ports": [{"name": "https", "port": address.port(), "protocol": "TCP"}]}),
        ));
    }
    objects
}

/// The Job strategy's create step: unless `spec.manualSelector` is true, the Job selects its
/// Pods by its uid, and its pod template carries the labels that select them.
pub fn select_job_pods(job: &mut Value, uid: &str) {
    if job.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let name = job
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.insert(
        "selector".into(),
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
    );
    let template = spec.entry("template").or_insert_with(|| json!({}));
    if !template.is_object() {
        return;
    }
    let metadata = template
        .as_object_mut()
        .map(|t| t.entry("metadata").or_insert_with(|| json!({})));
    let Some(labels) = metadata
        .and_then(Value::as_object_mut)
        .map(|m| m.entry("labels").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", uid),
        ("batch.kubernetes.io/job-name", name.as_str()),
        ("controller-uid", uid),
        ("job-name", name.as_str()),
    ] {
        labels.insert(key.into(), json!(value));
    }
}

/// The cluster's one Node, as kind names and registers its control-plane node: ready, untainted,
/// with the capacity of a small machine. Its status is written apart (a Node's status is a
/// subresource).
pub fn node(cluster: &str, plane: &ControlPlane) -> (Value, Value) {
    let name = format!("{cluster}-control-plane");
    let address = plane
        .address
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| "127.0.0.1".into());
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux", "node-role.kubernetes.io/control-plane": "",
            "node.kubernetes.io/exclude-from-external-load-balancers": ""}},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"],
                 "providerID": format!("kind://podman/{cluster}/{name}")}});
    let now = crate::object::now();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let resources = json!({"cpu": "2", "ephemeral-storage": "100Gi", "hugepages-2Mi": "0",
                           "memory": "8Gi", "pods": "110"});
    let status = json!({"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://2.1.1",
                     "kernelVersion": "6.1.0", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0",
                     "machineID": "", "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12 (bookworm)",
                     "systemUUID": ""}}});
    (node, status)
}

/// Why a Pod is not admitted: the status code and message apiserver answers with.
#[derive(Debug, PartialEq)]
pub struct Refused {
    pub message: String,
}

/// Admits a new Pod (defaults already set). `service_account` looks up a ServiceAccount of the
/// Pod's namespace by name; `suffix` names the token volume (`kube-api-access-<suffix>`).
pub fn admit_pod(
    pod: &mut Value,
    namespace: &str,
    service_account: impl Fn(&str) -> Option<Value>,
    suffix: &str,
) -> Result<(), Refused> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let account = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(a) if !a.is_empty() => a.to_string(),
        _ => match spec.get("serviceAccount").and_then(Value::as_str) {
            Some(a) if !a.is_empty() => a.to_string(),
            _ => "default".to_string(),
        },
    };
    let Some(sa) = service_account(&account) else {
        return Err(Refused {
            message: format!(
                "pods \"{name}\" is forbidden: error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found"
            ),
        });
    };
    spec.insert("serviceAccountName".into(), json!(account));
    spec.insert("serviceAccount".into(), json!(account));
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            sa.get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if automount {
        mount_token(spec, suffix);
    }
    tolerate_node_problems(spec);
    prioritize(spec, &name)?;
    let qos = qos_class(spec);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
    Ok(())
}

const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn containers(spec: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    spec.iter_mut()
        .filter(|(k, _)| matches!(k.as_str(), "initContainers" | "containers"))
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
        .filter_map(Value::as_object_mut)
}

fn mount_token(spec: &mut Map<String, Value>, suffix: &str) {
    let mounted = |c: &Map<String, Value>| {
        c.get("volumeMounts")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|m| m["mountPath"] == TOKEN_MOUNT_PATH))
    };
    if containers(spec).any(|c| mounted(c)) {
        return;
    }
    let volume = format!("kube-api-access-{suffix}");
    let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
    if let Some(list) = volumes.as_array_mut() {
        list.push(
            json!({"name": volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"apiVersion": "v1",
                                                         "fieldPath": "metadata.namespace"}}]}}
            ]}}),
        );
    }
    for container in containers(spec) {
        let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
        if let Some(list) = mounts.as_array_mut() {
            list.push(json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}));
        }
    }
}

fn tolerate_node_problems(spec: &mut Map<String, Value>) {
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let covered = list.iter().any(|t| {
            (t["key"] == key || (t["key"].is_null() && t["operator"] == "Exists"))
                && (t["effect"] == "NoExecute" || t["effect"].is_null())
        });
        if !covered {
            list.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}),
            );
        }
    }
}

/// The Priority admission plugin: the two system classes are known; no other PriorityClass
/// exists in the test server.
fn prioritize(spec: &mut Map<String, Value>, name: &str) -> Result<(), Refused> {
    let class = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let priority = match class {
        "" => 0,
        "system-cluster-critical" => 2_000_000_000,
        "system-node-critical" => 2_000_001_000,
        other => {
            return Err(Refused {
                message: format!(
                    "pods \"{name}\" is forbidden: no PriorityClass with name {other} was found"
                ),
            })
        }
    };
    spec.insert("priority".into(), json!(priority));
    spec.entry("preemptionPolicy")
        .or_insert_with(|| json!("PreemptLowerPriority"));
    Ok(())
}

/// `BestEffort` without any CPU or memory request or limit, `Guaranteed` when every container
/// limits both and requests what it limits, `Burstable` otherwise.
fn qos_class(spec: &mut Map<String, Value>) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for container in containers(spec) {
        let resources = container.get("resources");
        let get = |part: &str, r: &str| {
            resources
                .and_then(|res| res.get(part))
                .and_then(|p| p.get(r))
                .filter(|v| !v.is_null())
        };
        for r in ["cpu", "memory"] {
            let (request, limit) = (get("requests", r), get("limits", r));
            any |= request.is_some() || limit.is_some();
            guaranteed &= limit.is_some() && request.is_none_or(|q| Some(q) == limit);
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(name: &str) -> Option<Value> {
        (name == "default" || name == "builder").then(|| json!({"metadata": {"name": name}}))
    }

    #[test]
    fn a_bare_pod_runs_as_default_with_its_token_tolerations_priority_and_qos() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "nginx"}]}});
        admit_pod(&mut pod, "team", sa, "x2b4z").expect("admitted");
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        assert_eq!(spec["volumes"][0]["name"], "kube-api-access-x2b4z");
        assert_eq!(
            spec["containers"][0]["volumeMounts"],
            json!([{"name": "kube-api-access-x2b4z", "readOnly": true,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
        );
        assert_eq!(spec["tolerations"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            spec["tolerations"][1]["key"],
            "node.kubernetes.io/unreachable"
        );
        assert_eq!(spec["priority"], 0);
        assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
    }

    #[test]
    fn a_named_service_account_must_exist_and_automounting_can_be_off() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "serviceAccountName": "robot", "containers": [{"name": "c", "image": "x"}]}});
        assert_eq!(
            admit_pod(&mut pod, "team", sa, "abcde"),
            Err(Refused {
                message: "pods \"p\" is forbidden: error looking up service account team/robot: serviceaccount \"robot\" not found".into()
            })
        );
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "serviceAccountName": "builder", "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "x",
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                          "requests": {"cpu": "1", "memory": "1Gi"}}}]}});
        admit_pod(&mut pod, "team", sa, "abcde").expect("admitted");
        assert!(pod["spec"].get("volumes").is_none(), "{pod}");
        assert_eq!(pod["status"]["qosClass"], "Guaranteed");
    }

    #[test]
    fn qos_is_burstable_when_any_container_requests_less_than_it_limits() {
        let mut spec = json!({"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "100m"}}}]});
        let spec = spec.as_object_mut().expect("object");
        assert_eq!(qos_class(spec), "Burstable");
    }

    #[test]
    fn an_unknown_priority_class_is_refused_and_a_system_one_sets_its_priority() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "priorityClassName": "gold", "containers": [{"name": "c", "image": "x"}]}});
        assert!(admit_pod(&mut pod, "team", sa, "abcde").is_err());
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "priorityClassName": "system-node-critical",
            "containers": [{"name": "c", "image": "x"}]}});
        admit_pod(&mut pod, "team", sa, "abcde").expect("admitted");
        assert_eq!(pod["spec"]["priority"], 2_000_001_000);
    }

    #[test]
    fn namespaces_carry_their_name_as_a_label() {
        let mut ns = json!({"metadata": {"name": "team", "labels": {"a": "b"}}});
        label_namespace(&mut ns);
        assert_eq!(
            ns["metadata"]["labels"],
            json!({"a": "b", "kubernetes.io/metadata.name": "team"})
        );
    }
}
