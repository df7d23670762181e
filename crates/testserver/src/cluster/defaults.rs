//! The defaulting the real API server applies to the built-in kinds sluice's users create and
//! their EventSources read (Kubernetes' `SetDefaults_*` of core/v1 and apps/v1), so that a Lua
//! script or CEL rule reading `obj.spec.replicas` of a Deployment created without it sees `1`, as
//! on a real cluster:
//! - Service: `type: ClusterIP`, `sessionAffinity: None`, each port's `protocol: TCP` and
//!   `targetPort` equal to its `port`, `internalTrafficPolicy: Cluster`, for NodePort and
//!   LoadBalancer `externalTrafficPolicy: Cluster`, for LoadBalancer
//!   `allocateLoadBalancerNodePorts: true`, and `status.loadBalancer: {}` (seed 003 reads
//!   `obj.status.loadBalancer.ingress`). Cluster IPs are allocated apart (`service_ips`).
//! - Deployment, ReplicaSet, StatefulSet: `replicas: 1`; a Deployment's `RollingUpdate` strategy
//!   of 25 % and 25 %, `revisionHistoryLimit: 10`, `progressDeadlineSeconds: 600`; a
//!   StatefulSet's `podManagementPolicy: OrderedReady`, `RollingUpdate` with `partition: 0`,
//!   `revisionHistoryLimit: 10`, claim retention `Retain`/`Retain`, claim templates'
//!   `volumeMode: Filesystem`.
//! - Pods and pod templates: `restartPolicy: Always`, `dnsPolicy: ClusterFirst`,
//!   `terminationGracePeriodSeconds: 30`, `schedulerName: default-scheduler`,
//!   `securityContext: {}`; each container's termination message path and policy, its
//!   `imagePullPolicy` (`Always` for `:latest` or no tag, else `IfNotPresent`), its ports'
//!   `protocol: TCP`, its probes' timings and HTTP `path`/`scheme`, `fieldRef.apiVersion: v1`;
//!   `defaultMode: 420` of ConfigMap, Secret and projected volumes. A Pod (not a template) also
//!   gets `enableServiceLinks: true` and a container's `requests` copied from its `limits`.
//! - DaemonSet: `RollingUpdate` with `maxUnavailable: 1` and `maxSurge: 0`,
//!   `revisionHistoryLimit: 10`.
//! - Job: `completions` and `parallelism` of 1, `backoffLimit: 6`, `completionMode: NonIndexed`,
//!   `suspend: false`, `podReplacementPolicy`; CronJob: `concurrencyPolicy: Allow`,
//!   `suspend: false`, history limits of 3 and 1; both their pod templates.
//! - HorizontalPodAutoscaler (autoscaling/v2): `minReplicas: 1` and 80 % CPU utilisation as the
//!   metric when none is given.

use serde_json::{json, Map, Value};

use crate::resources::ResourceInfo;

/// Fills defaults in place, on every write of the main resource.
pub fn apply_defaults(info: &ResourceInfo, obj: &mut Value) {
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Service") => service(obj),
        ("", "Pod") => pod(obj),
        ("apps", "Deployment") => deployment(obj),
        ("apps", "ReplicaSet") => replica_set(obj),
        ("apps", "StatefulSet") => stateful_set(obj),
        ("apps", "DaemonSet") => daemon_set(obj),
        ("batch", "Job") => job(obj),
        ("batch", "CronJob") => cron_job(obj),
        ("autoscaling", "HorizontalPodAutoscaler") => autoscaler(obj),
        _ => {}
    }
}

/// The object at `key` of `map`, created empty when absent; `None` when it is not an object.
fn object<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    map.entry(key).or_insert_with(|| json!({})).as_object_mut()
}

/// Sets `key` to `value` unless it is set (a JSON null counts as unset, as Go decodes it).
fn or(map: &mut Map<String, Value>, key: &str, value: Value) {
    match map.get(key) {
        None | Some(Value::Null) => {
            map.insert(key.to_string(), value);
        }
        Some(_) => {}
    }
}

/// The objects of the list at `key`, if there is one.
fn each<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    map.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

fn service(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if let Some(spec) = object(map, "spec") {
        or(spec, "type", json!("ClusterIP"));
        or(spec, "sessionAffinity", json!("None"));
        for port in each(spec, "ports") {
            or(port, "protocol", json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                or(port, "targetPort", number);
            }
        }
        let kind = spec.get("type").and_then(Value::as_str).unwrap_or("");
        let balanced = kind == "LoadBalancer";
        let exposed = balanced || kind == "NodePort";
        if exposed || kind == "ClusterIP" {
            or(spec, "internalTrafficPolicy", json!("Cluster"));
        }
        if exposed {
            or(spec, "externalTrafficPolicy", json!("Cluster"));
        }
        if balanced {
            or(spec, "allocateLoadBalancerNodePorts", json!(true));
        }
    }
    if let Some(status) = object(map, "status") {
        or(status, "loadBalancer", json!({}));
    }
}

fn deployment(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    or(spec, "replicas", json!(1));
    or(spec, "revisionHistoryLimit", json!(10));
    or(spec, "progressDeadlineSeconds", json!(600));
    if let Some(strategy) = object(spec, "strategy") {
        or(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type") == Some(&json!("RollingUpdate")) {
            if let Some(rolling) = object(strategy, "rollingUpdate") {
                or(rolling, "maxUnavailable", json!("25%"));
                or(rolling, "maxSurge", json!("25%"));
            }
        }
    }
    template(spec);
}

fn replica_set(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    or(spec, "replicas", json!(1));
    template(spec);
}

fn stateful_set(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    or(spec, "replicas", json!(1));
    or(spec, "revisionHistoryLimit", json!(10));
    or(spec, "podManagementPolicy", json!("OrderedReady"));
    if let Some(strategy) = object(spec, "updateStrategy") {
        if matches!(strategy.get("type"), None | Some(Value::Null)) {
            strategy.insert("type".into(), json!("RollingUpdate"));
            or(strategy, "rollingUpdate", json!({}));
        }
        if strategy.get("type") == Some(&json!("RollingUpdate")) {
            if let Some(rolling) = strategy
                .get_mut("rollingUpdate")
                .and_then(Value::as_object_mut)
            {
                or(rolling, "partition", json!(0));
            }
        }
    }
    if let Some(retention) = object(spec, "persistentVolumeClaimRetentionPolicy") {
        or(retention, "whenDeleted", json!("Retain"));
        or(retention, "whenScaled", json!("Retain"));
    }
    for claim in each(spec, "volumeClaimTemplates") {
        if let Some(claim_spec) = object(claim, "spec") {
            or(claim_spec, "volumeMode", json!("Filesystem"));
        }
    }
    template(spec);
}

fn daemon_set(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    or(spec, "revisionHistoryLimit", json!(10));
    if let Some(strategy) = object(spec, "updateStrategy") {
        or(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type") == Some(&json!("RollingUpdate")) {
            if let Some(rolling) = object(strategy, "rollingUpdate") {
                or(rolling, "maxUnavailable", json!(1));
                or(rolling, "maxSurge", json!(0));
            }
        }
    }
    template(spec);
}

fn job(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    job_spec(spec);
}

/// `SetDefaults_Job`: one completion at a time unless told otherwise, 6 retries, the
/// non-indexed mode, not suspended, and Pods replaced once terminating or failed (only once
/// failed under a pod failure policy).
fn job_spec(spec: &mut Map<String, Value>) {
    if matches!(spec.get("completions"), None | Some(Value::Null))
        && matches!(spec.get("parallelism"), None | Some(Value::Null))
    {
        spec.insert("completions".into(), json!(1));
    }
    or(spec, "parallelism", json!(1));
    let per_index = !matches!(spec.get("backoffLimitPerIndex"), None | Some(Value::Null));
    or(
        spec,
        "backoffLimit",
        json!(if per_index { i32::MAX } else { 6 }),
    );
    or(spec, "completionMode", json!("NonIndexed"));
    or(spec, "suspend", json!(false));
    let policy = !matches!(spec.get("podFailurePolicy"), None | Some(Value::Null));
    or(
        spec,
        "podReplacementPolicy",
        json!(if policy {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    template(spec);
}

/// `SetDefaults_CronJob`; the job template's pod template gets the pod defaults.
fn cron_job(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    or(spec, "concurrencyPolicy", json!("Allow"));
    or(spec, "suspend", json!(false));
    or(spec, "successfulJobsHistoryLimit", json!(3));
    or(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(job) = spec
        .get_mut("jobTemplate")
        .and_then(Value::as_object_mut)
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        template(job);
    }
}

/// `SetDefaults_HorizontalPodAutoscaler` (autoscaling/v2): at least one replica, and 80 % CPU
/// utilisation when no metric is given.
fn autoscaler(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    or(spec, "minReplicas", json!(1));
    let no_metrics = spec
        .get("metrics")
        .is_none_or(|m| m.as_array().is_none_or(Vec::is_empty));
    if no_metrics {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
}

/// The pod template of a workload's `spec`.
fn template(spec: &mut Map<String, Value>) {
    if let Some(pod) = spec
        .get_mut("template")
        .and_then(Value::as_object_mut)
        .and_then(|template| template.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_spec(pod);
    }
}

fn pod(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|map| object(map, "spec")) else {
        return;
    };
    pod_spec(spec);
    or(spec, "enableServiceLinks", json!(true));
    for list in ["initContainers", "containers"] {
        for container in each(spec, list) {
            let limits = container
                .get("resources")
                .and_then(|resources| resources.get("limits"))
                .and_then(Value::as_object)
                .cloned();
            if let (Some(limits), Some(resources)) = (limits, object(container, "resources")) {
                if let Some(requests) = object(resources, "requests") {
                    for (name, quantity) in limits {
                        requests.entry(name).or_insert(quantity);
                    }
                }
            }
        }
    }
}

fn pod_spec(spec: &mut Map<String, Value>) {
    or(spec, "restartPolicy", json!("Always"));
    or(spec, "dnsPolicy", json!("ClusterFirst"));
    or(spec, "terminationGracePeriodSeconds", json!(30));
    or(spec, "schedulerName", json!("default-scheduler"));
    or(spec, "securityContext", json!({}));
    for list in ["initContainers", "containers"] {
        for c in each(spec, list) {
            container(c);
        }
    }
    for volume in each(spec, "volumes") {
        for source in ["configMap", "secret", "projected"] {
            if let Some(source) = volume.get_mut(source).and_then(Value::as_object_mut) {
                or(source, "defaultMode", json!(420));
            }
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    or(c, "terminationMessagePath", json!("/dev/termination-log"));
    or(c, "terminationMessagePolicy", json!("File"));
    if let Some(image) = c.get("image").and_then(Value::as_str) {
        let policy = pull_policy(image);
        or(c, "imagePullPolicy", json!(policy));
    }
    for port in each(c, "ports") {
        or(port, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = c.get_mut(probe).and_then(Value::as_object_mut) {
            or(probe, "timeoutSeconds", json!(1));
            or(probe, "periodSeconds", json!(10));
            or(probe, "successThreshold", json!(1));
            or(probe, "failureThreshold", json!(3));
            if let Some(get) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
                or(get, "path", json!("/"));
                or(get, "scheme", json!("HTTP"));
            }
        }
    }
    for env in each(c, "env") {
        if let Some(field) = env
            .get_mut("valueFrom")
            .and_then(|from| from.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            or(field, "apiVersion", json!("v1"));
        }
    }
}

/// `Always` for an image without a tag or tagged `latest`, `IfNotPresent` otherwise (a digest
/// counts as pinned), as `SetDefaults_Container` decides.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag follows the last ':' after the last '/' (a registry's port is before it).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_gets_the_api_server_defaults_and_keeps_what_is_set() {
        let mut svc = json!({"apiVersion": "v1", "kind": "Service",
            "spec": {"ports": [{"port": 80}, {"port": 443, "protocol": "UDP", "targetPort": 8443}]}});
        service(&mut svc);
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(
            svc["spec"]["ports"][1],
            json!({"port": 443, "protocol": "UDP", "targetPort": 8443})
        );
        assert_eq!(svc["status"], json!({"loadBalancer": {}}));
    }

    fn written(kind: &str, group: &str, mut obj: Value) -> Value {
        let info = crate::resources::builtins()
            .into_iter()
            .find(|r| r.kind == kind && r.group == group)
            .expect("built-in kind");
        apply_defaults(&info, &mut obj);
        obj
    }

    #[test]
    fn a_deployment_gets_the_api_server_defaults_down_to_its_containers() {
        let deployment = written(
            "Deployment",
            "apps",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                    "containers": [
                        {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}],
                         "readinessProbe": {"httpGet": {"port": 80}},
                         "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]},
                        {"name": "side", "image": "registry:5000/side:1.2", "imagePullPolicy": "Never"}
                    ],
                    "volumes": [{"name": "conf", "configMap": {"name": "conf"}}]
                }}
            }}),
        );
        let spec = &deployment["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["dnsPolicy"], "ClusterFirst");
        assert_eq!(pod["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["schedulerName"], "default-scheduler");
        assert_eq!(pod["securityContext"], json!({}));
        assert!(
            pod.get("enableServiceLinks").is_none(),
            "a template has none: {pod}"
        );
        let web = &pod["containers"][0];
        assert_eq!(web["imagePullPolicy"], "Always");
        assert_eq!(web["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(web["terminationMessagePolicy"], "File");
        assert_eq!(web["ports"][0]["protocol"], "TCP");
        assert_eq!(
            web["readinessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
                   "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(web["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(pod["containers"][1]["imagePullPolicy"], "Never", "kept");
        assert_eq!(pod["volumes"][0]["configMap"]["defaultMode"], 420);
    }

    #[test]
    fn what_is_set_is_kept_and_a_recreate_strategy_gets_no_rolling_update() {
        let deployment = written(
            "Deployment",
            "apps",
            json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}}}),
        );
        assert_eq!(deployment["spec"]["replicas"], 0);
        assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn images_are_pulled_always_only_when_untagged_or_latest() {
        assert_eq!(pull_policy("nginx"), "Always");
        assert_eq!(pull_policy("nginx:latest"), "Always");
        assert_eq!(pull_policy("registry:5000/nginx"), "Always");
        assert_eq!(pull_policy("registry:5000/nginx:1.27"), "IfNotPresent");
        assert_eq!(pull_policy("nginx@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn a_stateful_set_and_a_pod_get_theirs() {
        let set = written(
            "StatefulSet",
            "apps",
            json!({"spec": {"serviceName": "db", "template": {"spec": {"containers": []}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}}),
        );
        let spec = &set["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            spec["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(
            spec["volumeClaimTemplates"][0]["spec"]["volumeMode"],
            "Filesystem"
        );
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");

        let pod = written(
            "Pod",
            "",
            json!({"spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}}]}}),
        );
        assert_eq!(pod["spec"]["enableServiceLinks"], true);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
    }

    #[test]
    fn a_load_balancer_service_gets_its_traffic_policies() {
        let svc = written(
            "Service",
            "",
            json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
        );
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
        assert_eq!(svc["spec"]["internalTrafficPolicy"], "Cluster");
        assert_eq!(svc["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], true);
        let external = written(
            "Service",
            "",
            json!({"spec": {"type": "ExternalName", "externalName": "example.org"}}),
        );
        assert!(
            external["spec"].get("internalTrafficPolicy").is_none(),
            "{external}"
        );
    }
}
