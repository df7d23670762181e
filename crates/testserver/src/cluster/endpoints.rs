//! The endpoints and EndpointSlice controllers: a Service with a selector gets an Endpoints
//! object of its name and EndpointSlices (`discovery.k8s.io/v1`, `<service>-<suffix>`,
//! controlled by the Service) listing the Pods it selects that have an IP, ready or not, with
//! each service port resolved to the Pod's port (a named `targetPort` looked up in its
//! containers). A Service without a selector, or of type ExternalName, gets nothing from them:
//! its Endpoints are whoever writes them. The Endpoints of a deleted Service are deleted; its
//! slices go with it through their owner reference.
//!
//! The work is per Service (`Work::Endpoints`): a change of a Service, of its Endpoints
//! deleted, or of one of its slices; and per Pod (`Work::PodEndpoints`): the Services of its
//! namespace that select it or list it. Decisions are pure functions of the objects;
//! `State::reconcile_endpoints` writes them.

use serde_json::{json, Map, Value};

use crate::object::{is_deleting, meta_str, now};
use crate::resources::GroupResource;

use super::rollout::{is_ready, Work};
use super::ChangeKind;

pub const SERVICES: (&str, &str) = ("", "services");
pub const ENDPOINTS: (&str, &str) = ("", "endpoints");
pub const SLICES: (&str, &str) = ("discovery.k8s.io", "endpointslices");
const PODS: (&str, &str) = ("", "pods");

/// The label that names a slice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label that names the controller managing a slice.
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// The EndpointSlice controller's name in [`MANAGED_BY`].
pub const CONTROLLER: &str = "endpointslice-controller.k8s.io";
/// The label of the Endpoints and slices of a Service without a cluster IP.
const HEADLESS: &str = "service.kubernetes.io/headless";
/// When the last change that moved the endpoints happened.
const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// The most endpoints one slice holds (kube-controller-manager's `--max-endpoints-per-slice`).
pub const MAX_PER_SLICE: usize = 100;

fn is(resource: &GroupResource, pair: (&str, &str)) -> bool {
    resource.0 == pair.0 && resource.1 == pair.1
}

/// What a change of `object` gives the endpoints controllers to look at.
pub fn work_for(resource: &GroupResource, kind: ChangeKind, object: &Value) -> Option<Work> {
    let namespace = meta_str(object, "namespace").to_string();
    if is(resource, SERVICES) || (is(resource, ENDPOINTS) && kind == ChangeKind::Deleted) {
        return Some(Work::Endpoints(
            namespace,
            meta_str(object, "name").to_string(),
        ));
    }
    if is(resource, SLICES) {
        let labels = object.pointer("/metadata/labels");
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        if label(MANAGED_BY) == Some(CONTROLLER) {
            return Some(Work::Endpoints(namespace, label(SERVICE_NAME)?.to_string()));
        }
        return None;
    }
    if is(resource, PODS) {
        return Some(Work::PodEndpoints(
            namespace,
            meta_str(object, "name").to_string(),
        ));
    }
    None
}

/// The Service's selector, if it gets endpoints from the controllers: it has one and is not of
/// type ExternalName.
pub fn selector(service: &Value) -> Option<&Map<String, Value>> {
    if service.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
        return None;
    }
    service.pointer("/spec/selector")?.as_object()
}

/// Whether `selector` (a Service's, equality on every key) selects `object`.
pub fn selects(selector: &Map<String, Value>, object: &Value) -> bool {
    let labels = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object);
    selector
        .iter()
        .all(|(key, value)| labels.and_then(|l| l.get(key)) == Some(value))
}

fn pod_ip(pod: &Value) -> Option<&str> {
    pod.pointer("/status/podIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
}

/// Whether a Pod is listed at all: it has an IP, has not ended for good, and is not being
/// deleted unless `terminating` ones are wanted (slices list them, Endpoints only when the
/// Service publishes not-ready addresses).
pub fn is_listed(pod: &Value, terminating: bool) -> bool {
    if pod_ip(pod).is_none() {
        return false;
    }
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    let restart = pod
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    let ended = match restart {
        "Never" => matches!(phase, Some("Succeeded" | "Failed")),
        "OnFailure" => phase == Some("Succeeded"),
        _ => false,
    };
    !ended && (terminating || !is_deleting(pod))
}

fn protocol(port: &Value) -> &str {
    port.get("protocol")
        .and_then(Value::as_str)
        .unwrap_or("TCP")
}

/// The Pod's port a service port sends to: a numeric `targetPort` (or, without one, the port
/// itself) as it is; a named one looked up among the Pod's containers and sidecars by name and
/// protocol. `None` when the Pod has no such port.
pub fn target_port(pod: &Value, service_port: &Value) -> Option<i64> {
    let target = service_port
        .get("targetPort")
        .or_else(|| service_port.get("port"))?;
    if let Some(number) = target.as_i64() {
        return Some(number);
    }
    let name = target.as_str()?;
    let wanted = protocol(service_port);
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    let sidecars = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("restartPolicy").and_then(Value::as_str) == Some("Always"));
    containers
        .into_iter()
        .flatten()
        .chain(sidecars)
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name) && protocol(p) == wanted)
        .and_then(|p| p.get("containerPort").and_then(Value::as_i64))
}

fn is_headless(service: &Value) -> bool {
    matches!(
        service.pointer("/spec/clusterIP").and_then(Value::as_str),
        None | Some("") | Some("None")
    )
}

fn service_ports(service: &Value) -> &[Value] {
    service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// An endpoint port of each service port the Pod has: (name, port, protocol, appProtocol).
fn ports_of(service: &Value, pod: &Value) -> Vec<Value> {
    service_ports(service)
        .iter()
        .filter_map(|port| {
            let number = target_port(pod, port)?;
            let mut out = json!({"name": port.get("name").and_then(Value::as_str).unwrap_or(""),
                                 "port": number, "protocol": protocol(port)});
            if let Some(app) = port.get("appProtocol") {
                out["appProtocol"] = app.clone();
            }
            Some(out)
        })
        .collect()
}

fn target_ref(pod: &Value) -> Value {
    json!({"kind": "Pod", "namespace": meta_str(pod, "namespace"),
           "name": meta_str(pod, "name"), "uid": meta_str(pod, "uid")})
}

/// An address of the Endpoints object for `pod`.
fn address(pod: &Value) -> Value {
    let mut address = json!({"ip": pod_ip(pod), "targetRef": target_ref(pod)});
    if let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str) {
        address["nodeName"] = json!(node);
    }
    address
}

/// The subsets of the Service's Endpoints over the Pods it selects: one per set of ports, its
/// ready addresses apart from the others, in IP order; subsets ordered by their ports.
pub fn subsets(service: &Value, pods: &[&Value]) -> Vec<Value> {
    let publish = service
        .pointer("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let portless = service_ports(service).is_empty();
    if portless && !is_headless(service) {
        return Vec::new();
    }
    // Ports (as written) → (ready addresses, not-ready addresses).
    let mut groups: std::collections::BTreeMap<String, (Value, Vec<Value>, Vec<Value>)> =
        std::collections::BTreeMap::new();
    for pod in pods.iter().filter(|p| is_listed(p, publish)) {
        let ports = ports_of(service, pod);
        if ports.is_empty() && !portless {
            continue;
        }
        let key = Value::Array(ports.clone()).to_string();
        let entry = groups
            .entry(key)
            .or_insert_with(|| (Value::Array(ports), Vec::new(), Vec::new()));
        if publish || is_ready(pod) {
            entry.1.push(address(pod));
        } else {
            entry.2.push(address(pod));
        }
    }
    let by_ip = |a: &Value, b: &Value| {
        let ip = |v: &Value| v["ip"].as_str().unwrap_or("").to_string();
        ip(a).cmp(&ip(b))
    };
    groups
        .into_values()
        .map(|(ports, mut ready, mut not_ready)| {
            ready.sort_by(by_ip);
            not_ready.sort_by(by_ip);
            let mut subset = Map::new();
            if !ready.is_empty() {
                subset.insert("addresses".into(), Value::Array(ready));
            }
            if !not_ready.is_empty() {
                subset.insert("notReadyAddresses".into(), Value::Array(not_ready));
            }
            if ports.as_array().is_some_and(|p| !p.is_empty()) {
                subset.insert("ports".into(), ports);
            }
            Value::Object(subset)
        })
        .collect()
}

/// The labels of a Service's Endpoints and slices: the Service's, with the headless mark.
fn labels_of(service: &Value, reserved: &[&str]) -> Map<String, Value> {
    let mut labels: Map<String, Value> = service
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(key, _)| !reserved.contains(&key.as_str()) && key.as_str() != HEADLESS)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if is_headless(service) {
        labels.insert(HEADLESS.into(), json!(""));
    }
    labels
}

/// Gives a controller's object its `labels` and the time of the change that moved it.
fn stamp(object: &mut Value, labels: Map<String, Value>) {
    object["metadata"]["labels"] = Value::Object(labels);
    let annotations = object["metadata"]
        .as_object_mut()
        .map(|m| m.entry("annotations").or_insert_with(|| json!({})));
    if let Some(annotations) = annotations.and_then(Value::as_object_mut) {
        annotations.insert(TRIGGER_TIME.into(), json!(now()));
    }
}

/// The Service's Endpoints as the controller writes them, from `current` (its uid, version and
/// other metadata kept) if there is one; `None` when `current` already says all of it.
pub fn endpoints(service: &Value, subsets: Vec<Value>, current: Option<&Value>) -> Option<Value> {
    let labels = labels_of(service, &[]);
    let subsets_now = current
        .and_then(|c| c.get("subsets"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let labels_now = current
        .and_then(|c| c.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if current.is_some() && subsets_now == subsets && labels_now == labels {
        return None;
    }
    let mut object = current.cloned().unwrap_or_else(|| {
        json!({"apiVersion": "v1", "kind": "Endpoints",
               "metadata": {"name": meta_str(service, "name"),
                            "namespace": meta_str(service, "namespace")}})
    });
    stamp(&mut object, labels);
    match object.as_object_mut() {
        Some(map) if subsets.is_empty() => {
            map.remove("subsets");
        }
        Some(map) => {
            map.insert("subsets".into(), Value::Array(subsets));
        }
        None => {}
    }
    Some(object)
}

/// An endpoint of a slice for `pod`, with its conditions.
fn slice_endpoint(service: &Value, pod: &Value) -> Value {
    let serving = is_ready(pod);
    let terminating = is_deleting(pod);
    let publish = service
        .pointer("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut endpoint = json!({
        "addresses": [pod_ip(pod)],
        "conditions": {"ready": publish || (serving && !terminating), "serving": serving,
                       "terminating": terminating},
        "targetRef": target_ref(pod),
    });
    if let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str) {
        endpoint["nodeName"] = json!(node);
    }
    endpoint
}

/// What one slice holds: its ports and endpoints (`None`: the placeholder of a Service that
/// selects nothing, whose endpoints are null).
#[derive(Clone, Debug, PartialEq)]
pub struct SliceContent {
    pub ports: Vec<Value>,
    pub endpoints: Option<Vec<Value>>,
}

/// The slices a Service wants: the Pods it lists grouped by their ports, at most
/// [`MAX_PER_SLICE`] a slice, in name order; one placeholder when it lists none.
pub fn slice_contents(service: &Value, pods: &[&Value]) -> Vec<SliceContent> {
    let headless_portless = service_ports(service).is_empty() && is_headless(service);
    let mut groups: std::collections::BTreeMap<String, (Vec<Value>, Vec<&Value>)> =
        std::collections::BTreeMap::new();
    for pod in pods.iter().filter(|p| is_listed(p, true)) {
        let ports = ports_of(service, pod);
        if ports.is_empty() && !headless_portless {
            continue;
        }
        groups
            .entry(Value::Array(ports.clone()).to_string())
            .or_insert_with(|| (ports, Vec::new()))
            .1
            .push(pod);
    }
    let mut contents = Vec::new();
    for (ports, mut members) in groups.into_values() {
        members.sort_by_key(|p| meta_str(p, "name").to_string());
        for chunk in members.chunks(MAX_PER_SLICE) {
            contents.push(SliceContent {
                ports: ports.clone(),
                endpoints: Some(chunk.iter().map(|p| slice_endpoint(service, p)).collect()),
            });
        }
    }
    if contents.is_empty() {
        contents.push(SliceContent {
            ports: Vec::new(),
            endpoints: None,
        });
    }
    contents
}

/// A slice of the Service holding `content`, from `current` (its name, uid, version and other
/// metadata kept) or new, named by the Service's prefix; `None` when `current` already holds
/// it with the Service's labels.
pub fn slice(service: &Value, content: &SliceContent, current: Option<&Value>) -> Option<Value> {
    let mut labels = labels_of(service, &[SERVICE_NAME, MANAGED_BY]);
    labels.insert(SERVICE_NAME.into(), json!(meta_str(service, "name")));
    labels.insert(MANAGED_BY.into(), json!(CONTROLLER));
    let ports = (!content.ports.is_empty()).then(|| Value::Array(content.ports.clone()));
    let endpoints = content.endpoints.clone().map_or(Value::Null, Value::Array);
    if let Some(current) = current {
        let same = current.get("ports") == ports.as_ref()
            && current.get("endpoints").unwrap_or(&Value::Null) == &endpoints
            && current
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                == Some(&labels);
        if same {
            return None;
        }
    }
    let mut object = current.cloned().unwrap_or_else(|| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"generateName": format!("{}-", meta_str(service, "name")),
                            "namespace": meta_str(service, "namespace"),
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Service",
                                "name": meta_str(service, "name"),
                                "uid": meta_str(service, "uid"),
                                "controller": true, "blockOwnerDeletion": true}]},
               "addressType": "IPv4"})
    });
    stamp(&mut object, labels);
    if let Some(map) = object.as_object_mut() {
        match ports {
            Some(ports) => map.insert("ports".into(), ports),
            None => map.remove("ports"),
        };
        map.insert("endpoints".into(), endpoints);
    }
    Some(object)
}

/// Whether the Endpoints object `endpoints` lists the Pod `name`.
pub fn lists_pod(endpoints: &Value, name: &str) -> bool {
    endpoints
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|s| {
            ["addresses", "notReadyAddresses"]
                .into_iter()
                .filter_map(|f| s.get(f).and_then(Value::as_array))
                .flatten()
        })
        .any(|a| a.pointer("/targetRef/name").and_then(Value::as_str) == Some(name))
}

/// Logs a controller's write the API refused (a namespace being deleted, say); the next change
/// of the Service or its Pods tries again, as kube-controller-manager's queue would.
fn refused(
    kind: &str,
    namespace: &str,
    service: &str,
    written: Result<Value, crate::error::ApiError>,
) {
    if let Err(error) = written {
        tracing::warn!(kind, namespace, service, error = %error.message, "the endpoints controllers' write was refused");
    }
}

impl super::State {
    /// The endpoints controllers on one Service: its Endpoints and slices made to say what it
    /// selects now, or its Endpoints deleted once it is gone.
    pub(super) fn reconcile_endpoints(&mut self, namespace: &str, name: &str) {
        let gr = |pair: (&str, &str)| (pair.0.to_string(), pair.1.to_string());
        let Some(service) = self.get(&gr(SERVICES), namespace, name).cloned() else {
            if self.get(&gr(ENDPOINTS), namespace, name).is_some() {
                self.delete_object(&gr(ENDPOINTS), namespace, name, None, None);
            }
            return;
        };
        if is_deleting(&service) {
            return;
        }
        let Some(selector) = selector(&service).cloned() else {
            return;
        };
        let pods: Vec<Value> = self
            .list(&gr(PODS), Some(namespace), None)
            .map(|(_, pod)| pod)
            .filter(|pod| selects(&selector, pod))
            .cloned()
            .collect();
        let pods: Vec<&Value> = pods.iter().collect();
        let controller = super::Owner::Update(super::rollout::MANAGER.into());

        let current = self.get(&gr(ENDPOINTS), namespace, name).cloned();
        if let Some(info) = self.registry.lookup("", "v1", "endpoints").cloned() {
            if let Some(wanted) = endpoints(&service, subsets(&service, &pods), current.as_ref()) {
                let written = match current {
                    Some(_) => self.update(
                        &info,
                        namespace,
                        name,
                        wanted,
                        super::Subresource::Main,
                        &controller,
                    ),
                    None => self.create(&info, namespace, wanted, &controller),
                };
                refused("Endpoints", namespace, name, written);
            }
        }

        let Some(info) = self.registry.lookup(SLICES.0, "v1", SLICES.1).cloned() else {
            return;
        };
        let uid = meta_str(&service, "uid").to_string();
        let mut current: Vec<Value> = self
            .dependents
            .of(&uid)
            .into_iter()
            .filter(|(resource, _)| is(resource, SLICES))
            .filter_map(|(resource, (ns, slice))| self.get(&resource, &ns, &slice).cloned())
            .filter(|s| {
                !is_deleting(s)
                    && s.pointer(&format!(
                        "/metadata/labels/{}",
                        MANAGED_BY.replace('/', "~1")
                    )) == Some(&json!(CONTROLLER))
            })
            .collect();
        current.sort_by_key(|s| meta_str(s, "name").to_string());
        let contents = slice_contents(&service, &pods);
        for (index, content) in contents.iter().enumerate() {
            let existing = current.get(index);
            let Some(wanted) = slice(&service, content, existing) else {
                continue;
            };
            let written = match existing {
                Some(existing) => self.update(
                    &info,
                    namespace,
                    meta_str(existing, "name"),
                    wanted,
                    super::Subresource::Main,
                    &controller,
                ),
                None => self.create(&info, namespace, wanted, &controller),
            };
            refused("EndpointSlice", namespace, name, written);
        }
        for surplus in current.iter().skip(contents.len()) {
            self.delete_object(
                &gr(SLICES),
                namespace,
                meta_str(surplus, "name"),
                None,
                None,
            );
        }
    }

    /// The endpoints controllers on one Pod: every Service of its namespace that selects it now
    /// or lists it still.
    pub(super) fn reconcile_pod_endpoints(&mut self, namespace: &str, pod: &str) {
        let gr = |pair: (&str, &str)| (pair.0.to_string(), pair.1.to_string());
        let current = self.get(&gr(PODS), namespace, pod).cloned();
        let services: Vec<String> = self
            .list(&gr(SERVICES), Some(namespace), None)
            .filter(|(_, service)| {
                let Some(selector) = selector(service) else {
                    return false;
                };
                let name = meta_str(service, "name");
                current.as_ref().is_some_and(|p| selects(selector, p))
                    || self
                        .get(&gr(ENDPOINTS), namespace, name)
                        .is_some_and(|e| lists_pod(e, pod))
            })
            .map(|(key, _)| key.1.clone())
            .collect();
        for service in services {
            self.reconcile_endpoints(namespace, &service);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(selector: Value, ports: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid",
                            "labels": {"app": "web", HEADLESS: "x"}},
               "spec": {"selector": selector, "clusterIP": "10.96.0.7", "ports": ports}})
    }

    fn pod(name: &str, ip: &str, ready: bool) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                            "labels": {"app": "web"}},
               "spec": {"nodeName": "node-1",
                        "containers": [{"name": "c", "ports": [{"name": "http",
                                        "containerPort": 8080, "protocol": "TCP"}]}]},
               "status": {"phase": "Running", "podIP": ip,
                          "conditions": [{"type": "Ready",
                                          "status": if ready { "True" } else { "False" }}]}})
    }

    #[test]
    fn a_service_selects_pods_with_every_label_of_its_selector() {
        let selector = json!({"app": "web"});
        let selector = selector.as_object().expect("map");
        assert!(selects(selector, &pod("a", "10.0.0.1", true)));
        let mut other = pod("b", "10.0.0.2", true);
        other["metadata"]["labels"]["app"] = json!("db");
        assert!(!selects(selector, &other));
        let external = json!({"spec": {"type": "ExternalName", "selector": {"app": "web"}}});
        assert!(selector_of_none(&external));
        assert!(selector_of_none(&json!({"spec": {}})));
    }

    fn selector_of_none(service: &Value) -> bool {
        super::selector(service).is_none()
    }

    #[test]
    fn a_named_target_port_is_the_pods_container_port_of_that_name_and_protocol() {
        let pod = pod("a", "10.0.0.1", true);
        assert_eq!(
            target_port(&pod, &json!({"port": 80, "targetPort": "http"})),
            Some(8080)
        );
        assert_eq!(
            target_port(
                &pod,
                &json!({"port": 80, "targetPort": "http", "protocol": "UDP"})
            ),
            None
        );
        assert_eq!(
            target_port(&pod, &json!({"port": 80, "targetPort": 9376})),
            Some(9376)
        );
        assert_eq!(target_port(&pod, &json!({"port": 80})), Some(80));
        assert_eq!(
            target_port(&pod, &json!({"port": 80, "targetPort": "grpc"})),
            None
        );
    }

    #[test]
    fn endpoints_list_ready_and_not_ready_pods_apart_and_skip_pods_without_an_ip() {
        let service = service(
            json!({"app": "web"}),
            json!([{"name": "h", "port": 80,
                                                            "targetPort": "http"}]),
        );
        let (ready, not_ready, no_ip) = (
            pod("a", "10.0.0.9", true),
            pod("b", "10.0.0.3", false),
            pod("c", "", true),
        );
        let mut ready_too = pod("d", "10.0.0.2", true);
        ready_too["spec"]["nodeName"] = json!("node-2");
        let subsets = subsets(&service, &[&ready, &not_ready, &no_ip, &ready_too]);
        assert_eq!(
            subsets,
            vec![json!({
                "addresses": [
                    {"ip": "10.0.0.2", "nodeName": "node-2",
                     "targetRef": {"kind": "Pod", "namespace": "ns", "name": "d", "uid": "d-uid"}},
                    {"ip": "10.0.0.9", "nodeName": "node-1",
                     "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "a-uid"}}],
                "notReadyAddresses": [
                    {"ip": "10.0.0.3", "nodeName": "node-1",
                     "targetRef": {"kind": "Pod", "namespace": "ns", "name": "b", "uid": "b-uid"}}],
                "ports": [{"name": "h", "port": 8080, "protocol": "TCP"}]})]
        );
        let object = endpoints(&service, subsets.clone(), None).expect("new");
        assert_eq!(object["metadata"]["name"], "web");
        // The Service's labels, without a headless mark it does not deserve.
        assert_eq!(object["metadata"]["labels"], json!({"app": "web"}));
        assert!(object["metadata"]["annotations"][TRIGGER_TIME].is_string());
        // Written once, the same subsets write nothing.
        assert_eq!(endpoints(&service, subsets, Some(&object)), None);
    }

    #[test]
    fn a_terminating_pod_leaves_the_endpoints_and_stays_in_its_slice_as_terminating() {
        let service = service(
            json!({"app": "web"}),
            json!([{"port": 80, "targetPort": 80}]),
        );
        let mut leaving = pod("a", "10.0.0.1", true);
        leaving["metadata"]["deletionTimestamp"] = json!("2026-11-28T00:00:00Z");
        assert!(subsets(&service, &[&leaving]).is_empty());
        let contents = slice_contents(&service, &[&leaving]);
        let endpoints = contents[0].endpoints.as_ref().expect("listed");
        assert_eq!(
            endpoints[0]["conditions"],
            json!({"ready": false, "serving": true, "terminating": true})
        );
    }

    #[test]
    fn slices_hold_at_most_a_hundred_endpoints_and_a_service_selecting_nothing_has_a_placeholder() {
        let service = service(
            json!({"app": "web"}),
            json!([{"port": 80, "targetPort": 80}]),
        );
        let placeholder = slice_contents(&service, &[]);
        assert_eq!(
            placeholder,
            vec![SliceContent {
                ports: Vec::new(),
                endpoints: None
            }]
        );
        let object = slice(&service, &placeholder[0], None).expect("new");
        assert_eq!(object["endpoints"], Value::Null);
        assert!(object.get("ports").is_none());
        assert_eq!(object["metadata"]["generateName"], "web-");
        assert_eq!(object["metadata"]["labels"][SERVICE_NAME], "web");
        assert_eq!(object["metadata"]["labels"][MANAGED_BY], CONTROLLER);
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "svc-uid");
        assert_eq!(slice(&service, &placeholder[0], Some(&object)), None);

        let pods: Vec<Value> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i:03}"),
                    &format!("10.0.{}.{}", i / 200, i % 200),
                    true,
                )
            })
            .collect();
        let contents = slice_contents(&service, &pods.iter().collect::<Vec<_>>());
        let sizes: Vec<usize> = contents
            .iter()
            .map(|c| c.endpoints.as_ref().map_or(0, Vec::len))
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert_eq!(
            contents[0].ports,
            vec![json!({"name": "", "port": 80, "protocol": "TCP"})]
        );
    }

    #[test]
    fn a_change_gives_the_endpoints_controllers_the_service_to_look_at_again() {
        let gr = |g: &str, r: &str| (g.to_string(), r.to_string());
        let svc = service(json!({"app": "web"}), json!([]));
        assert_eq!(
            work_for(&gr("", "services"), ChangeKind::Added, &svc),
            Some(Work::Endpoints("ns".into(), "web".into()))
        );
        let ep = json!({"metadata": {"name": "web", "namespace": "ns"}});
        assert_eq!(
            work_for(&gr("", "endpoints"), ChangeKind::Modified, &ep),
            None
        );
        assert_eq!(
            work_for(&gr("", "endpoints"), ChangeKind::Deleted, &ep),
            Some(Work::Endpoints("ns".into(), "web".into()))
        );
        let managed = slice(
            &svc,
            &SliceContent {
                ports: vec![],
                endpoints: None,
            },
            None,
        )
        .expect("new");
        assert_eq!(
            work_for(
                &gr("discovery.k8s.io", "endpointslices"),
                ChangeKind::Modified,
                &managed
            ),
            Some(Work::Endpoints("ns".into(), "web".into()))
        );
        let mut mirrored = managed.clone();
        mirrored["metadata"]["labels"][MANAGED_BY] = json!("someone-else");
        assert_eq!(
            work_for(
                &gr("discovery.k8s.io", "endpointslices"),
                ChangeKind::Modified,
                &mirrored
            ),
            None
        );
        assert_eq!(
            work_for(
                &gr("", "pods"),
                ChangeKind::Modified,
                &pod("a", "10.0.0.1", true)
            ),
            Some(Work::PodEndpoints("ns".into(), "a".into()))
        );
    }
}
