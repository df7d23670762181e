//! The columns kube-apiserver prints for its built-in kinds when a client asks for a Table
//! (what `kubectl get` shows: `READY STATUS RESTARTS` for Pods, `TYPE CLUSTER-IP ...` for
//! Services), and each object's cells. Priority-1 columns are those `-o wide` adds. A kind
//! without columns here (a custom resource) gets Name and Age, as a CRD without printer
//! columns does.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::object::{meta_str, parse_time};

/// One column: its name, type and priority (0 always shown, 1 with `-o wide`).
pub struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub priority: u8,
}

const fn col(name: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        priority: 0,
    }
}

const fn int(name: &'static str) -> Column {
    Column {
        name,
        kind: "integer",
        priority: 0,
    }
}

const fn wide(name: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        priority: 1,
    }
}

/// The columns of `group`'s `kind`.
pub fn columns(group: &str, kind: &str) -> Vec<Column> {
    match (group, kind) {
        ("", "Pod") => vec![
            col("Name"),
            col("Ready"),
            col("Status"),
            col("Restarts"),
            col("Age"),
            wide("IP"),
            wide("Node"),
            wide("Nominated Node"),
            wide("Readiness Gates"),
        ],
        ("", "Service") => vec![
            col("Name"),
            col("Type"),
            col("Cluster-IP"),
            col("External-IP"),
            col("Port(s)"),
            col("Age"),
            wide("Selector"),
        ],
        ("", "ConfigMap") => vec![col("Name"), col("Data"), col("Age")],
        ("", "Secret") => vec![col("Name"), col("Type"), col("Data"), col("Age")],
        ("", "Namespace") => vec![col("Name"), col("Status"), col("Age")],
        ("", "ServiceAccount") => vec![col("Name"), col("Secrets"), col("Age")],
        ("", "Endpoints") => vec![col("Name"), col("Endpoints"), col("Age")],
        ("", "Node") => vec![
            col("Name"),
            col("Status"),
            col("Roles"),
            col("Age"),
            col("Version"),
            wide("Internal-IP"),
            wide("External-IP"),
            wide("OS-Image"),
            wide("Kernel-Version"),
            wide("Container-Runtime"),
        ],
        ("", "Event") => vec![
            col("Last Seen"),
            col("Type"),
            col("Reason"),
            col("Object"),
            wide("Subobject"),
            wide("Source"),
            col("Message"),
            wide("First Seen"),
            wide("Count"),
            wide("Name"),
        ],
        ("apps", "Deployment") => vec![
            col("Name"),
            col("Ready"),
            col("Up-to-date"),
            col("Available"),
            col("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("apps", "ReplicaSet") => vec![
            col("Name"),
            int("Desired"),
            int("Current"),
            int("Ready"),
            col("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("apps", "StatefulSet") => vec![
            col("Name"),
            col("Ready"),
            col("Age"),
            wide("Containers"),
            wide("Images"),
        ],
        ("apps", "DaemonSet") => vec![
            col("Name"),
            int("Desired"),
            int("Current"),
            int("Ready"),
            int("Up-to-date"),
            int("Available"),
            col("Node Selector"),
            col("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("batch", "Job") => vec![
            col("Name"),
            col("Status"),
            col("Completions"),
            col("Duration"),
            col("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("batch", "CronJob") => vec![
            col("Name"),
            col("Schedule"),
            col("Timezone"),
            Column {
                name: "Suspend",
                kind: "boolean",
                priority: 0,
            },
            int("Active"),
            col("Last Schedule"),
            col("Age"),
            wide("Containers"),
            wide("Images"),
            wide("Selector"),
        ],
        ("policy", "PodDisruptionBudget") => vec![
            col("Name"),
            col("Min Available"),
            col("Max Unavailable"),
            int("Allowed Disruptions"),
            col("Age"),
        ],
        ("networking.k8s.io", "Ingress") => vec![
            col("Name"),
            col("Class"),
            col("Hosts"),
            col("Address"),
            col("Ports"),
            col("Age"),
        ],
        ("networking.k8s.io", "NetworkPolicy") => {
            vec![col("Name"), col("Pod-Selector"), col("Age")]
        }
        ("coordination.k8s.io", "Lease") => vec![col("Name"), col("Holder"), col("Age")],
        ("autoscaling", "HorizontalPodAutoscaler") => vec![
            col("Name"),
            col("Reference"),
            col("Targets"),
            col("MinPods"),
            int("MaxPods"),
            int("Replicas"),
            col("Age"),
        ],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            col("Name"),
            col("AddressType"),
            col("Ports"),
            col("Endpoints"),
            col("Age"),
        ],
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole")
        | ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            vec![col("Name"), col("Created At")]
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => vec![
            col("Name"),
            col("Role"),
            col("Age"),
            wide("Users"),
            wide("Groups"),
            wide("ServiceAccounts"),
        ],
        _ => vec![col("Name"), col("Age")],
    }
}

/// The column definitions of a Table, as `columnDefinitions`.
pub fn definitions(columns: &[Column]) -> Value {
    let defs: Vec<Value> = columns
        .iter()
        .map(|c| {
            let (format, description) = match c.name {
                "Name" => ("name", "Name must be unique within a namespace."),
                "Age" => ("", "Time since the object was created."),
                _ => ("", ""),
            };
            json!({"name": c.name, "type": c.kind, "format": format, "description": description, "priority": c.priority})
        })
        .collect();
    Value::Array(defs)
}

/// The cells of `obj`, one per column of [`columns`] for its kind, at `now`.
pub fn cells(group: &str, kind: &str, obj: &Value, now: time::OffsetDateTime) -> Vec<Value> {
    let name = json!(meta_str(obj, "name"));
    let age = json!(age_of(meta_str(obj, "creationTimestamp"), now));
    let s = |pointer: &str| text(obj, pointer);
    let n = |pointer: &str| number(obj, pointer);
    match (group, kind) {
        ("", "Pod") => {
            let pod = pod_status(obj, now);
            vec![
                name,
                json!(pod.ready),
                json!(pod.status),
                json!(pod.restarts),
                age,
                json!(or_none(
                    obj.pointer("/status/podIPs/0/ip")
                        .and_then(Value::as_str)
                        .unwrap_or_else(|| s("/status/podIP"))
                )),
                json!(or_none(s("/spec/nodeName"))),
                json!(or_none(s("/status/nominatedNodeName"))),
                json!(readiness_gates(obj)),
            ]
        }
        ("", "Service") => vec![
            name,
            json!(service_type(obj)),
            json!(or_none(
                obj.pointer("/spec/clusterIPs/0")
                    .and_then(Value::as_str)
                    .unwrap_or_else(|| s("/spec/clusterIP"))
            )),
            json!(external_ips(obj)),
            json!(service_ports(obj)),
            age,
            json!(format_labels(obj.pointer("/spec/selector"))),
        ],
        ("", "ConfigMap") => vec![
            name,
            json!(len(obj, "/data") + len(obj, "/binaryData")),
            age,
        ],
        ("", "Secret") => vec![name, json!(s("/type")), json!(len(obj, "/data")), age],
        ("", "Namespace") => vec![name, json!(s("/status/phase")), age],
        ("", "ServiceAccount") => vec![name, json!(len(obj, "/secrets")), age],
        ("", "Endpoints") => vec![name, json!(endpoints(obj)), age],
        ("", "Node") => {
            let address = |kind: &str| {
                items(obj, "/status/addresses")
                    .find(|a| text(a, "/type") == kind)
                    .map_or("<none>".to_string(), |a| text(a, "/address").to_string())
            };
            vec![
                name,
                json!(node_status(obj)),
                json!(node_roles(obj)),
                age,
                json!(s("/status/nodeInfo/kubeletVersion")),
                json!(address("InternalIP")),
                json!(address("ExternalIP")),
                json!(or_unknown(s("/status/nodeInfo/osImage"))),
                json!(or_unknown(s("/status/nodeInfo/kernelVersion"))),
                json!(or_unknown(s("/status/nodeInfo/containerRuntimeVersion"))),
            ]
        }
        ("", "Event") => event_cells(obj, now),
        ("apps", "Deployment") => vec![
            name,
            json!(format!("{}/{}", n("/status/readyReplicas"), replicas(obj))),
            json!(n("/status/updatedReplicas")),
            json!(n("/status/availableReplicas")),
            age,
        ]
        .into_iter()
        .chain(template_cells(obj))
        .collect(),
        ("apps", "ReplicaSet") => vec![
            name,
            json!(replicas(obj)),
            json!(n("/status/replicas")),
            json!(n("/status/readyReplicas")),
            age,
        ]
        .into_iter()
        .chain(template_cells(obj))
        .collect(),
        ("apps", "StatefulSet") => vec![
            name,
            json!(format!("{}/{}", n("/status/readyReplicas"), replicas(obj))),
            age,
        ]
        .into_iter()
        .chain(template_cells(obj).into_iter().take(2))
        .collect(),
        ("apps", "DaemonSet") => vec![
            name,
            json!(n("/status/desiredNumberScheduled")),
            json!(n("/status/currentNumberScheduled")),
            json!(n("/status/numberReady")),
            json!(n("/status/updatedNumberScheduled")),
            json!(n("/status/numberAvailable")),
            json!(format_labels(
                obj.pointer("/spec/template/spec/nodeSelector")
            )),
            age,
        ]
        .into_iter()
        .chain(template_cells(obj))
        .collect(),
        ("batch", "Job") => vec![
            name,
            json!(job_status(obj)),
            json!(job_completions(obj)),
            json!(job_duration(obj, now)),
            age,
        ]
        .into_iter()
        .chain(template_cells(obj))
        .collect(),
        ("batch", "CronJob") => {
            let template = obj.pointer("/spec/jobTemplate").unwrap_or(&Value::Null);
            vec![
                name,
                json!(s("/spec/schedule")),
                json!(or_none(s("/spec/timeZone"))),
                json!(match obj.pointer("/spec/suspend") {
                    Some(Value::Bool(true)) => "True",
                    Some(Value::Bool(false)) => "False",
                    _ => "<unset>",
                }),
                json!(len(obj, "/status/active")),
                json!(match s("/status/lastScheduleTime") {
                    "" => "<none>".to_string(),
                    at => age_of(at, now),
                }),
                age,
            ]
            .into_iter()
            .chain(template_cells(template))
            .collect()
        }
        ("policy", "PodDisruptionBudget") => {
            let bound = |pointer: &str| match obj.pointer(pointer) {
                Some(Value::String(v)) => v.clone(),
                Some(Value::Number(v)) => v.to_string(),
                _ => "N/A".to_string(),
            };
            vec![
                name,
                json!(bound("/spec/minAvailable")),
                json!(bound("/spec/maxUnavailable")),
                json!(n("/status/disruptionsAllowed")),
                age,
            ]
        }
        ("networking.k8s.io", "Ingress") => vec![
            name,
            json!(or_none(s("/spec/ingressClassName"))),
            json!(ingress_hosts(obj)),
            json!(load_balancer(obj).join(",")),
            json!(if len(obj, "/spec/tls") > 0 {
                "80, 443"
            } else {
                "80"
            }),
            age,
        ],
        ("networking.k8s.io", "NetworkPolicy") => vec![
            name,
            json!(format_selector(obj.pointer("/spec/podSelector"))),
            age,
        ],
        ("coordination.k8s.io", "Lease") => vec![name, json!(s("/spec/holderIdentity")), age],
        ("autoscaling", "HorizontalPodAutoscaler") => vec![
            name,
            json!(format!(
                "{}/{}",
                s("/spec/scaleTargetRef/kind"),
                s("/spec/scaleTargetRef/name")
            )),
            json!(hpa_targets(obj)),
            json!(obj
                .pointer("/spec/minReplicas")
                .and_then(Value::as_i64)
                .map_or("<unset>".to_string(), |n| n.to_string())),
            json!(n("/spec/maxReplicas")),
            json!(n("/status/currentReplicas")),
            age,
        ],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            name,
            json!(s("/addressType")),
            json!(slice_ports(obj)),
            json!(slice_endpoints(obj)),
            age,
        ],
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole")
        | ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            vec![name, json!(meta_str(obj, "creationTimestamp"))]
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            let subjects = |kind: &str| {
                items(obj, "/subjects")
                    .filter(|s| text(s, "/kind") == kind)
                    .map(|s| match (kind, text(s, "/namespace")) {
                        ("ServiceAccount", namespace) => {
                            format!("{namespace}/{}", text(s, "/name"))
                        }
                        _ => text(s, "/name").to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                name,
                json!(format!("{}/{}", s("/roleRef/kind"), s("/roleRef/name"))),
                age,
                json!(subjects("User")),
                json!(subjects("Group")),
                json!(subjects("ServiceAccount")),
            ]
        }
        _ => vec![name, age],
    }
}

/// How long ago `timestamp` was, as kubectl's `AGE` shows it (apimachinery's human duration):
/// `90s`, `4m30s`, `25m`, `5h12m`, `20h`, `3d4h`, `40d`, `2y30d`; `<unknown>` without one.
pub fn age_of(timestamp: &str, now: time::OffsetDateTime) -> String {
    match parse_time(timestamp) {
        Some(at) => human_duration((now - at).whole_seconds()),
        None => "<unknown>".to_string(),
    }
}

/// A duration of `seconds` in the coarse, two-unit form kubectl prints.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return two(minutes, "m", seconds % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return two(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return two(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    if hours < 24 * 365 * 8 {
        return two(days / 365, "y", days % 365, "d");
    }
    format!("{}y", days / 365)
}

fn two(big: i64, big_unit: &str, small: i64, small_unit: &str) -> String {
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{small}{small_unit}")
    }
}

fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn number(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn items<'a>(obj: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn len(obj: &Value, pointer: &str) -> usize {
    match obj.pointer(pointer) {
        Some(Value::Object(map)) => map.len(),
        Some(Value::Array(list)) => list.len(),
        _ => 0,
    }
}

/// `parts` joined with `,`, or `empty` when there are none.
fn joined_or(parts: &[impl AsRef<str>], empty: &str) -> String {
    if parts.is_empty() {
        return empty.to_string();
    }
    parts
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(",")
}

fn or_none(value: &str) -> String {
    if value.is_empty() {
        "<none>".into()
    } else {
        value.into()
    }
}

fn or_unknown(value: &str) -> String {
    if value.is_empty() {
        "<unknown>".into()
    } else {
        value.into()
    }
}

/// `spec.replicas`, 1 when unset (the default a workload is given).
fn replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// The `-o wide` cells of a workload (or a CronJob's job template): its template's container
/// names and images, comma-separated, and its selector.
fn template_cells(workload: &Value) -> [Value; 3] {
    [
        json!(containers(workload, "name")),
        json!(containers(workload, "image")),
        json!(format_selector(workload.pointer("/spec/selector"))),
    ]
}

/// The names (or images) of a workload template's containers, comma-separated.
fn containers(obj: &Value, field: &str) -> String {
    items(obj, "/spec/template/spec/containers")
        .map(|c| text(c, &format!("/{field}")))
        .collect::<Vec<_>>()
        .join(",")
}

/// A label map as `k=v,k2=v2` in key order; `<none>` when empty.
fn format_labels(labels: Option<&Value>) -> String {
    let pairs: BTreeMap<&str, &str> = labels
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
        .collect();
    let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    joined_or(&pairs, "<none>")
}

/// A label selector as kubectl prints it: its requirements in key order (`k=v`,
/// `k in (a,b)`, `k notin (a)`, `k`, `!k`), comma-separated; `<none>` when it selects by
/// nothing.
fn format_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector.filter(|s| s.is_object()) else {
        return "<none>".into();
    };
    let mut requirements: Vec<(String, String)> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))))
        .collect();
    for expression in items(selector, "/matchExpressions") {
        let key = text(expression, "/key");
        let mut values: Vec<&str> = items(expression, "/values")
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let printed = match text(expression, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key.to_string(), printed));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    let printed: Vec<String> = requirements.into_iter().map(|(_, p)| p).collect();
    joined_or(&printed, "<none>")
}

fn service_type(obj: &Value) -> String {
    let kind = text(obj, "/spec/type");
    if kind.is_empty() {
        "ClusterIP".into()
    } else {
        kind.into()
    }
}

/// The load balancer's ingress points of a Service's or Ingress's status.
fn load_balancer(obj: &Value) -> Vec<String> {
    let points: std::collections::BTreeSet<String> = items(obj, "/status/loadBalancer/ingress")
        .filter_map(|i| {
            let ip = text(i, "/ip");
            let host = text(i, "/hostname");
            (!ip.is_empty())
                .then(|| ip.to_string())
                .or_else(|| (!host.is_empty()).then(|| host.to_string()))
        })
        .collect();
    points.into_iter().collect()
}

fn external_ips(obj: &Value) -> String {
    let external: Vec<String> = items(obj, "/spec/externalIPs")
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    match service_type(obj).as_str() {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".into(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let mut all = load_balancer(obj);
            all.extend(external);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => text(obj, "/spec/externalName").to_string(),
        _ => "<unknown>".into(),
    }
}

/// `80/TCP,443:30443/TCP`; `<none>` without ports.
fn service_ports(obj: &Value) -> String {
    let ports: Vec<String> = items(obj, "/spec/ports")
        .map(|p| {
            let protocol = match text(p, "/protocol") {
                "" => "TCP",
                protocol => protocol,
            };
            match number(p, "/nodePort") {
                0 => format!("{}/{protocol}", number(p, "/port")),
                node => format!("{}:{node}/{protocol}", number(p, "/port")),
            }
        })
        .collect();
    joined_or(&ports, "<none>")
}

/// Up to three `ip:port` pairs of an Endpoints object, then how many more.
fn endpoints(obj: &Value) -> String {
    let mut all = Vec::new();
    for subset in items(obj, "/subsets") {
        let addresses: Vec<&str> = items(subset, "/addresses")
            .map(|a| text(a, "/ip"))
            .collect();
        let ports: Vec<i64> = items(subset, "/ports")
            .map(|p| number(p, "/port"))
            .collect();
        for address in &addresses {
            if ports.is_empty() {
                all.push(address.to_string());
            }
            for port in &ports {
                all.push(format!("{address}:{port}"));
            }
        }
    }
    match all.len() {
        0 => "<none>".into(),
        1..=3 => all.join(","),
        n => format!("{} + {} more...", all[..3].join(","), n - 3),
    }
}

/// An HPA's metrics as `current/target`, up to two, then how many more; `<none>` without any.
/// A metric the status does not report yet is `<unknown>`.
fn hpa_targets(obj: &Value) -> String {
    let specs: Vec<&Value> = items(obj, "/spec/metrics").collect();
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses: Vec<&Value> = items(obj, "/status/currentMetrics").collect();
    let quantity = |v: &Value, pointer: &str| match v.pointer(pointer) {
        Some(Value::String(q)) => Some(q.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let percent = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_i64)
            .map(|p| format!("{p}%"))
    };
    let unknown = || "<unknown>".to_string();
    let listed: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let status = statuses.get(i).copied().unwrap_or(&Value::Null);
            let source = |kind: &str| (spec.get(kind), status.get(kind));
            match text(spec, "/type") {
                kind @ ("External" | "Object") => {
                    let field = if kind == "External" {
                        "external"
                    } else {
                        "object"
                    };
                    let (spec, status) = source(field);
                    let spec = spec.unwrap_or(&Value::Null);
                    let status = status.unwrap_or(&Value::Null);
                    match quantity(spec, "/target/averageValue") {
                        Some(target) => format!(
                            "{}/{target} (avg)",
                            quantity(status, "/current/averageValue").unwrap_or_else(unknown)
                        ),
                        None => format!(
                            "{}/{}",
                            quantity(status, "/current/value").unwrap_or_else(unknown),
                            quantity(spec, "/target/value").unwrap_or_default()
                        ),
                    }
                }
                "Pods" => {
                    let (spec, status) = source("pods");
                    format!(
                        "{}/{}",
                        status
                            .and_then(|s| quantity(s, "/current/averageValue"))
                            .unwrap_or_else(unknown),
                        spec.and_then(|s| quantity(s, "/target/averageValue"))
                            .unwrap_or_default()
                    )
                }
                kind @ ("Resource" | "ContainerResource") => {
                    let field = if kind == "Resource" {
                        "resource"
                    } else {
                        "containerResource"
                    };
                    let (spec, status) = source(field);
                    let spec = spec.unwrap_or(&Value::Null);
                    let status = status.unwrap_or(&Value::Null);
                    let name = text(spec, "/name");
                    match quantity(spec, "/target/averageValue") {
                        Some(target) => format!(
                            "{name}: {}/{target}",
                            quantity(status, "/current/averageValue").unwrap_or_else(unknown)
                        ),
                        None => format!(
                            "{name}: {}/{}",
                            percent(status, "/current/averageUtilization").unwrap_or_else(unknown),
                            percent(spec, "/target/averageUtilization")
                                .unwrap_or_else(|| "<auto>".into())
                        ),
                    }
                }
                _ => "<unknown type>".into(),
            }
        })
        .collect();
    if listed.len() > 2 {
        format!("{} + {} more...", listed[..2].join(", "), listed.len() - 2)
    } else {
        listed.join(", ")
    }
}

/// Up to three of `all` joined, then how many more; `<unset>` for none.
fn up_to_three(all: &[String]) -> String {
    match all.len() {
        0 => "<unset>".into(),
        1..=3 => all.join(","),
        n => format!("{} + {} more...", all[..3].join(","), n - 3),
    }
}

/// An EndpointSlice's ports: each number (its name when it has none, else `*`), up to three.
fn slice_ports(obj: &Value) -> String {
    let ports: Vec<String> = items(obj, "/ports")
        .map(|p| match p.get("port").and_then(Value::as_i64) {
            Some(port) => port.to_string(),
            None => p
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_string(),
        })
        .collect();
    up_to_three(&ports)
}

/// An EndpointSlice's addresses, up to three.
fn slice_endpoints(obj: &Value) -> String {
    let addresses: Vec<String> = items(obj, "/endpoints")
        .flat_map(|e| items(e, "/addresses"))
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    up_to_three(&addresses)
}

/// The rules' hosts up to three, then how many rules more; `*` when none names a host.
fn ingress_hosts(obj: &Value) -> String {
    let rules: Vec<&Value> = items(obj, "/spec/rules").collect();
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in &rules {
        more |= hosts.len() == 3;
        let host = text(rule, "/host");
        if !more && !host.is_empty() {
            hosts.push(host);
        }
    }
    match (hosts.is_empty(), more) {
        (true, _) => "*".into(),
        (false, true) => format!("{} + {} more...", hosts.join(","), rules.len() - 3),
        (false, false) => hosts.join(","),
    }
}

fn node_status(obj: &Value) -> String {
    let ready = items(obj, "/status/conditions")
        .find(|c| text(c, "/type") == "Ready")
        .map(|c| text(c, "/status"));
    let mut status = match ready {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
    .to_string();
    if obj.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push_str(",SchedulingDisabled");
    }
    status
}

fn node_roles(obj: &Value) -> String {
    let mut roles: Vec<String> = obj
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role.to_string()),
                _ if key == "kubernetes.io/role" => value.as_str().map(str::to_string),
                _ => None,
            },
        )
        .collect();
    roles.sort();
    roles.dedup();
    joined_or(&roles, "<none>")
}

fn readiness_gates(obj: &Value) -> String {
    let gates: Vec<&str> = items(obj, "/spec/readinessGates")
        .map(|g| text(g, "/conditionType"))
        .collect();
    if gates.is_empty() {
        return "<none>".into();
    }
    let met = gates
        .iter()
        .filter(|gate| {
            items(obj, "/status/conditions")
                .any(|c| text(c, "/type") == **gate && text(c, "/status") == "True")
        })
        .count();
    format!("{met}/{}", gates.len())
}

/// A Pod's `READY`, `STATUS` and `RESTARTS` cells.
struct PodCells {
    ready: String,
    status: String,
    restarts: String,
}

/// The most recent `lastState.terminated.finishedAt` of `statuses`, and their restarts.
fn restarts_of<'a>(
    statuses: impl Iterator<Item = &'a Value>,
) -> (i64, Option<time::OffsetDateTime>) {
    let mut count = 0;
    let mut last: Option<time::OffsetDateTime> = None;
    for status in statuses {
        count += number(status, "/restartCount");
        if let Some(at) = parse_time(text(status, "/lastState/terminated/finishedAt")) {
            last = Some(last.map_or(at, |last| last.max(at)));
        }
    }
    (count, last)
}

/// Why a container stopped: its reason, else its signal or exit code.
fn terminated_reason(terminated: &Value) -> String {
    match (text(terminated, "/reason"), number(terminated, "/signal")) {
        ("", 0) => format!("ExitCode:{}", number(terminated, "/exitCode")),
        ("", signal) => format!("Signal:{signal}"),
        (why, _) => why.to_string(),
    }
}

fn has_condition(obj: &Value, kind: &str) -> bool {
    items(obj, "/status/conditions")
        .any(|c| text(c, "/type") == kind && text(c, "/status") == "True")
}

/// What kubectl shows of a Pod's state: the reason of the first init container not done
/// (`Init:1/2`, `Init:CrashLoopBackOff`), else the last container's waiting or terminated
/// reason, else the phase; `Terminating` once it is being deleted and not yet finished.
/// Sidecars (init containers that restart always) count among the containers once started.
/// Restarts count the containers' (and the sidecars'), with how long ago the last one ended.
fn pod_status(obj: &Value, now: time::OffsetDateTime) -> PodCells {
    let phase = text(obj, "/status/phase");
    let mut reason = match text(obj, "/status/reason") {
        "" => phase.to_string(),
        reason => reason.to_string(),
    };
    if items(obj, "/status/conditions")
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let sidecars: Vec<&str> = items(obj, "/spec/initContainers")
        .filter(|c| text(c, "/restartPolicy") == "Always")
        .map(|c| text(c, "/name"))
        .collect();
    let is_sidecar = |status: &Value| sidecars.contains(&text(status, "/name"));
    let total = len(obj, "/spec/containers") + sidecars.len();
    let init_total = len(obj, "/spec/initContainers");
    let init_statuses: Vec<&Value> = items(obj, "/status/initContainerStatuses").collect();
    let mut ready = 0;
    let mut initializing = false;
    let (mut restarts, mut last_restart) = restarts_of(init_statuses.iter().copied());
    for (index, status) in init_statuses.iter().enumerate() {
        let terminated = status.pointer("/state/terminated");
        if terminated.is_some_and(|t| number(t, "/exitCode") == 0) {
            continue;
        }
        if is_sidecar(status) && status.pointer("/started") == Some(&Value::Bool(true)) {
            if status.pointer("/ready") == Some(&Value::Bool(true)) {
                ready += 1;
            }
            continue;
        }
        initializing = true;
        reason = match (terminated, text(status, "/state/waiting/reason")) {
            (Some(terminated), _) => format!("Init:{}", terminated_reason(terminated)),
            (None, "" | "PodInitializing") => format!("Init:{index}/{init_total}"),
            (None, waiting) => format!("Init:{waiting}"),
        };
        break;
    }
    if !initializing || has_condition(obj, "Initialized") {
        (restarts, last_restart) =
            restarts_of(init_statuses.iter().copied().filter(|s| is_sidecar(s)));
        let statuses: Vec<&Value> = items(obj, "/status/containerStatuses").collect();
        let (count, last) = restarts_of(statuses.iter().copied());
        restarts += count;
        last_restart = match (last_restart, last) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let mut running = false;
        for status in statuses.iter().rev() {
            let waiting = text(status, "/state/waiting/reason");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(terminated) = status.pointer("/state/terminated") {
                reason = terminated_reason(terminated);
            } else if status.pointer("/ready") == Some(&Value::Bool(true))
                && status.pointer("/state/running").is_some()
            {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if has_condition(obj, "Ready") {
                "Running"
            } else {
                "NotReady"
            }
            .to_string();
        }
    }
    if !meta_str(obj, "deletionTimestamp").is_empty() {
        if text(obj, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    let restarts = match last_restart {
        Some(at) if restarts > 0 => {
            format!(
                "{restarts} ({} ago)",
                human_duration((now - at).whole_seconds())
            )
        }
        _ => restarts.to_string(),
    };
    PodCells {
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts,
    }
}

/// A Job's `STATUS`: its first true condition of Complete, Failed, (being deleted),
/// Suspended, FailureTarget; else Running.
fn job_status(obj: &Value) -> &'static str {
    let condition = |kind: &str| {
        items(obj, "/status/conditions")
            .find(|c| text(c, "/type") == kind)
            .is_some_and(|c| text(c, "/status") == "True")
    };
    if condition("Complete") {
        "Complete"
    } else if condition("Failed") {
        "Failed"
    } else if !meta_str(obj, "deletionTimestamp").is_empty() {
        "Terminating"
    } else if condition("Suspended") {
        "Suspended"
    } else if condition("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// `succeeded/completions`, or `succeeded/1 of parallelism` for a work queue.
fn job_completions(obj: &Value) -> String {
    let succeeded = number(obj, "/status/succeeded");
    match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match number(obj, "/spec/parallelism") {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    }
}

/// How long a Job ran (until now while it runs); empty before it started.
fn job_duration(obj: &Value, now: time::OffsetDateTime) -> String {
    match (
        parse_time(text(obj, "/status/startTime")),
        parse_time(text(obj, "/status/completionTime")),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration((now - start).whole_seconds()),
        (Some(start), Some(end)) => human_duration((end - start).whole_seconds()),
    }
}

fn event_cells(obj: &Value, now: time::OffsetDateTime) -> Vec<Value> {
    let first = match text(obj, "/firstTimestamp") {
        "" => text(obj, "/eventTime"),
        first => first,
    };
    let last = match text(obj, "/lastTimestamp") {
        "" => first,
        last => last,
    };
    let count = number(obj, "/count");
    let first_seen = age_of(first, now);
    let last_seen = if count > 1 {
        format!("{} (x{count} over {first_seen})", age_of(last, now))
    } else {
        age_of(last, now)
    };
    let component = match text(obj, "/source/component") {
        "" => text(obj, "/reportingComponent"),
        component => component,
    };
    let source = match text(obj, "/source/host") {
        "" => component.to_string(),
        host => format!("{component}, {host}"),
    };
    vec![
        json!(last_seen),
        json!(text(obj, "/type")),
        json!(text(obj, "/reason")),
        json!(format!(
            "{}/{}",
            text(obj, "/involvedObject/kind").to_lowercase(),
            text(obj, "/involvedObject/name")
        )),
        json!(text(obj, "/involvedObject/fieldPath")),
        json!(source),
        json!(text(obj, "/message").trim()),
        json!(first_seen),
        json!(count.to_string()),
        json!(meta_str(obj, "name")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> time::OffsetDateTime {
        parse_time("2026-11-28T12:00:00Z").expect("a time")
    }

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (seconds, printed) in [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (270, "4m30s"),
            (1500, "25m"),
            (3 * 3600 + 60, "3h1m"),
            (5 * 3600, "5h"),
            (20 * 3600 + 59 * 60, "20h"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (40 * 86_400, "40d"),
            (3 * 365 * 86_400 + 30 * 86_400, "3y30d"),
            (9 * 365 * 86_400, "9y"),
            (-5, "<invalid>"),
        ] {
            assert_eq!(human_duration(seconds), printed, "{seconds}");
        }
    }

    #[test]
    fn every_kind_has_a_cell_per_column() {
        let empty = json!({"metadata": {"name": "x", "creationTimestamp": "2026-11-28T11:59:00Z"}});
        for (group, kind) in [
            ("", "Pod"),
            ("", "Service"),
            ("", "ConfigMap"),
            ("", "Secret"),
            ("", "Namespace"),
            ("", "ServiceAccount"),
            ("", "Endpoints"),
            ("", "Node"),
            ("", "Event"),
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("policy", "PodDisruptionBudget"),
            ("batch", "Job"),
            ("batch", "CronJob"),
            ("networking.k8s.io", "Ingress"),
            ("networking.k8s.io", "NetworkPolicy"),
            ("coordination.k8s.io", "Lease"),
            ("discovery.k8s.io", "EndpointSlice"),
            ("autoscaling", "HorizontalPodAutoscaler"),
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("rbac.authorization.k8s.io", "RoleBinding"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("lib.projectsveltos.io", "EventSource"),
        ] {
            assert_eq!(
                cells(group, kind, &empty, now()).len(),
                columns(group, kind).len(),
                "{group} {kind}"
            );
        }
    }

    #[test]
    fn an_hpas_targets_are_current_over_target_up_to_two() {
        let hpa = |metrics: Value, current: Value| json!({"spec": {"metrics": metrics}, "status": {"currentMetrics": current}});
        assert_eq!(hpa_targets(&hpa(json!([]), json!([]))), "<none>");
        let cpu = json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}});
        assert_eq!(
            hpa_targets(&hpa(json!([cpu]), json!(null))),
            "cpu: <unknown>/80%"
        );
        let cpu_now = json!({"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 12, "averageValue": "3m"}}});
        assert_eq!(
            hpa_targets(&hpa(json!([cpu]), json!([cpu_now]))),
            "cpu: 12%/80%"
        );
        let memory = json!({"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "AverageValue", "averageValue": "500Mi"}}});
        let pods = json!({"type": "Pods", "pods": {"metric": {"name": "qps"},
            "target": {"type": "AverageValue", "averageValue": "1k"}}});
        assert_eq!(
            hpa_targets(&hpa(json!([cpu, memory, pods]), json!([cpu_now]))),
            "cpu: 12%/80%, memory: <unknown>/500Mi + 1 more..."
        );
        let external = json!({"type": "External", "external": {"metric": {"name": "queue"},
            "target": {"type": "Value", "value": "30"}}});
        assert_eq!(
            hpa_targets(&hpa(json!([external]), json!([]))),
            "<unknown>/30"
        );
    }

    #[test]
    fn a_pods_state_is_its_containers_reasons() {
        let pod = |status: Value| {
            json!({"metadata": {"name": "p", "creationTimestamp": "2026-11-28T11:00:00Z"},
                   "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]},
                   "status": status})
        };
        let shown = |obj: &Value| {
            let p = pod_status(obj, now());
            (p.ready, p.status, p.restarts)
        };
        assert_eq!(
            shown(&pod(json!({"phase": "Pending"}))),
            ("0/2".into(), "Pending".into(), "0".into())
        );
        assert_eq!(
            shown(&pod(json!({"phase": "Pending", "initContainerStatuses": [
                {"state": {"waiting": {"reason": "PodInitializing"}}}]}))),
            ("0/2".into(), "Init:0/1".into(), "0".into())
        );
        assert_eq!(
            shown(&pod(json!({"phase": "Running",
                "initContainerStatuses": [{"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                "containerStatuses": [
                    {"ready": true, "restartCount": 0, "state": {"running": {}}},
                    {"ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-28T11:55:00Z"}}}]}))),
            ("1/2".into(), "CrashLoopBackOff".into(), "3 (5m ago)".into())
        );
        assert_eq!(
            shown(&pod(json!({"phase": "Running", "containerStatuses": [
                {"ready": true, "state": {"running": {}}},
                {"ready": true, "state": {"running": {}}}]}))),
            ("2/2".into(), "Running".into(), "0".into())
        );
        let mut deleting = pod(json!({"phase": "Running"}));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-28T11:59:00Z");
        assert_eq!(shown(&deleting).1, "Terminating");
    }

    #[test]
    fn a_sidecar_counts_among_the_containers_once_started() {
        let pod = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app"}],
                     "initContainers": [{"name": "proxy", "restartPolicy": "Always"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [{"name": "proxy", "started": true, "ready": true, "restartCount": 1,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"exitCode": 137, "finishedAt": "2026-11-28T10:00:00Z"}}}],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "state": {"running": {}}}]}});
        let shown = pod_status(&pod, now());
        assert_eq!(
            (
                shown.ready.as_str(),
                shown.status.as_str(),
                shown.restarts.as_str()
            ),
            ("2/2", "Running", "1 (120m ago)")
        );
    }

    #[test]
    fn jobs_print_status_completions_and_duration() {
        let job = json!({"metadata": {"name": "j"},
            "spec": {"completions": 3, "parallelism": 1},
            "status": {"succeeded": 3, "startTime": "2026-11-28T11:00:00Z", "completionTime": "2026-11-28T11:04:30Z",
                       "conditions": [{"type": "Complete", "status": "True"}]}});
        let row = cells("batch", "Job", &job, now());
        assert_eq!(
            row[1..4].to_vec(),
            [json!("Complete"), json!("3/3"), json!("4m30s")]
        );
        let queue = json!({"metadata": {"name": "q"}, "spec": {"parallelism": 4},
            "status": {"startTime": "2026-11-28T11:59:00Z"}});
        let row = cells("batch", "Job", &queue, now());
        assert_eq!(
            row[1..4].to_vec(),
            [json!("Running"), json!("0/1 of 4"), json!("60s")]
        );
        let cron = json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "suspend": false}});
        let row = cells("batch", "CronJob", &cron, now());
        assert_eq!(
            row[1..6].to_vec(),
            [
                json!("*/5 * * * *"),
                json!("<none>"),
                json!("False"),
                json!(0),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn services_print_type_addresses_and_ports() {
        let service = json!({"metadata": {"name": "s"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.12", "selector": {"b": "2", "a": "1"},
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}});
        let row = cells("", "Service", &service, now());
        assert_eq!(
            row[1..5].to_vec(),
            [
                json!("NodePort"),
                json!("10.96.0.12"),
                json!("<none>"),
                json!("80:30080/TCP,53/UDP")
            ]
        );
        assert_eq!(row[6], json!("a=1,b=2"));
        let pending = json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.13"}});
        assert_eq!(external_ips(&pending), "<pending>");
    }

    #[test]
    fn selectors_print_their_requirements_in_key_order() {
        let selector = json!({"matchLabels": {"tier": "web"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "fv"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]});
        assert_eq!(
            format_selector(Some(&selector)),
            "!canary,env in (fv,prod),tier=web"
        );
        assert_eq!(format_selector(Some(&json!({}))), "<none>");
        assert_eq!(format_selector(None), "<none>");
    }
}
