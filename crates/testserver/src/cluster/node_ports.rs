//! Node ports of Services, as kube-apiserver's allocator hands them out from its default range
//! 30000-32767: each port of a NodePort Service, and of a LoadBalancer Service unless
//! `allocateLoadBalancerNodePorts` is false, gets a free `nodePort` unless it asks for one, which
//! must be in range and free; a LoadBalancer Service with `externalTrafficPolicy: Local` also
//! gets a `healthCheckNodePort`. An update keeps the node port of a port it still has (same
//! `port` and `protocol`) and may not take one another Service holds; a Service that stops being
//! a NodePort or LoadBalancer Service gives its node ports back, and a ClusterIP Service may not
//! ask for one.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use crate::field_error::FieldError;

const FIRST: i64 = 30000;
const LAST: i64 = 32767;
const RANGE_TEXT: &str = "30000-32767";

/// The node ports stored Services hold, and where the next search for a free one starts.
#[derive(Clone, Debug, Default)]
pub struct NodePorts {
    held: HashSet<i64>,
    /// Offset in the range of the next port to try.
    next: i64,
}

/// The node ports a Service holds: its ports' and its health check's.
fn held_by(service: &Value) -> Vec<i64> {
    let spec = service.get("spec");
    spec.and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort"))
        .chain(spec.and_then(|s| s.get("healthCheckNodePort")))
        .filter_map(Value::as_i64)
        .filter(|p| *p != 0)
        .collect()
}

/// Whether a Service of this spec has node ports.
fn wants_node_ports(spec: &Map<String, Value>) -> bool {
    match spec.get("type").and_then(Value::as_str) {
        Some("NodePort") => true,
        Some("LoadBalancer") => spec.get("allocateLoadBalancerNodePorts") != Some(&json!(false)),
        _ => false,
    }
}

impl NodePorts {
    /// Records the node ports of a stored Service.
    pub fn hold(&mut self, service: &Value) {
        self.held.extend(held_by(service));
    }

    /// Forgets the node ports of a Service no longer stored.
    pub fn release(&mut self, service: &Value) {
        for port in held_by(service) {
            self.held.remove(&port);
        }
    }

    /// Gives `service` (as it is about to be stored; `old` when it is an update, whose ports it
    /// may keep) its node ports, or the field errors apiserver answers with.
    pub fn allocate(&mut self, service: &mut Value, old: Option<&Value>) -> Result<(), FieldError> {
        let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let kept = old.map(held_by).unwrap_or_default();
        let taken = |held: &HashSet<i64>, port: i64| held.contains(&port) && !kept.contains(&port);
        if !wants_node_ports(spec) {
            let kind = spec
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP")
                .to_string();
            let old_ports = old.map(held_by).unwrap_or_default();
            for (i, port) in ports(spec).enumerate() {
                match port.get("nodePort").and_then(Value::as_i64) {
                    // A type change from NodePort drops the node ports the old Service held.
                    Some(p) if old_ports.contains(&p) => {
                        port.remove("nodePort");
                    }
                    Some(p) if p != 0 && kind != "LoadBalancer" => {
                        return Err(FieldError::forbidden(
                            format!("spec.ports[{i}].nodePort"),
                            format!("may not be used when `type` is '{kind}'"),
                        ));
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        let old_ports: Vec<(Value, Value, i64)> = old
            .and_then(|o| o.pointer("/spec/ports"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let node_port = p.get("nodePort").and_then(Value::as_i64)?;
                Some((p["port"].clone(), protocol(p.get("protocol")), node_port))
            })
            .collect();
        let mut chosen: Vec<i64> = Vec::new();
        let mut indexes = Vec::new();
        for (i, port) in ports(spec).enumerate() {
            match port
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|p| *p != 0)
            {
                Some(asked) => {
                    self.claim(asked, &format!("spec.ports[{i}].nodePort"), &taken, &chosen)?;
                    chosen.push(asked);
                }
                None => {
                    let key = (
                        port.get("port").cloned().unwrap_or(Value::Null),
                        protocol(port.get("protocol")),
                    );
                    match old_ports
                        .iter()
                        .find(|(p, proto, _)| (p, proto) == (&key.0, &key.1))
                    {
                        Some((_, _, kept_port)) if !chosen.contains(kept_port) => {
                            port.insert("nodePort".into(), json!(kept_port));
                            chosen.push(*kept_port);
                        }
                        _ => indexes.push(i),
                    }
                }
            }
        }
        for i in indexes {
            let free = self.free(&taken, &chosen)?;
            if let Some(port) = ports(spec).nth(i) {
                port.insert("nodePort".into(), json!(free));
            }
            chosen.push(free);
        }
        let local = spec.get("type").and_then(Value::as_str) == Some("LoadBalancer")
            && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local");
        if local {
            let port = match spec
                .get("healthCheckNodePort")
                .and_then(Value::as_i64)
                .filter(|p| *p != 0)
            {
                Some(asked) => {
                    self.claim(asked, "spec.healthCheckNodePort", &taken, &chosen)?;
                    asked
                }
                None => match old
                    .and_then(|o| o.pointer("/spec/healthCheckNodePort"))
                    .and_then(Value::as_i64)
                {
                    Some(p) if p != 0 && !chosen.contains(&p) => p,
                    _ => self.free(&taken, &chosen)?,
                },
            };
            spec.insert("healthCheckNodePort".into(), json!(port));
        }
        Ok(())
    }

    /// Checks that a node port asked for is in range and free.
    fn claim(
        &self,
        asked: i64,
        field: &str,
        taken: &impl Fn(&HashSet<i64>, i64) -> bool,
        chosen: &[i64],
    ) -> Result<(), FieldError> {
        if !(FIRST..=LAST).contains(&asked) {
            return Err(FieldError::invalid(
                field,
                json!(asked),
                format!("provided port is not in the valid range. The range of valid ports is {RANGE_TEXT}"),
            ));
        }
        if taken(&self.held, asked) || chosen.contains(&asked) {
            return Err(FieldError::invalid(
                field,
                json!(asked),
                "provided port is already allocated",
            ));
        }
        Ok(())
    }

    /// The next free node port.
    fn free(
        &mut self,
        taken: &impl Fn(&HashSet<i64>, i64) -> bool,
        chosen: &[i64],
    ) -> Result<i64, FieldError> {
        let size = LAST - FIRST + 1;
        for _ in 0..size {
            let port = FIRST + self.next;
            self.next = (self.next + 1) % size;
            if !taken(&self.held, port) && !chosen.contains(&port) {
                return Ok(port);
            }
        }
        Err(FieldError::invalid(
            "spec.ports",
            Value::Null,
            "failed to allocate a nodePort: range is full",
        ))
    }
}

fn ports(spec: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    spec.get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// A port's protocol, TCP when unset.
fn protocol(field: Option<&Value>) -> Value {
    field.cloned().unwrap_or_else(|| json!("TCP"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(kind: &str, ports: Value) -> Value {
        json!({"spec": {"type": kind, "ports": ports}})
    }

    #[test]
    fn node_ports_come_from_the_range_once_each_and_an_update_keeps_them() {
        let mut node_ports = NodePorts::default();
        let mut a = service(
            "NodePort",
            json!([{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]),
        );
        node_ports.allocate(&mut a, None).expect("allocated");
        assert_eq!(a["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(a["spec"]["ports"][1]["nodePort"], 30001);
        node_ports.hold(&a);

        let mut b = service("NodePort", json!([{"port": 80, "nodePort": 30001}]));
        let taken = node_ports.allocate(&mut b, None).expect_err("taken");
        assert_eq!(taken.field, "spec.ports[0].nodePort");
        assert!(
            taken.detail.contains("provided port is already allocated"),
            "{taken:?}"
        );
        let mut c = service("NodePort", json!([{"port": 80, "nodePort": 8080}]));
        let outside = node_ports.allocate(&mut c, None).expect_err("out of range");
        assert!(outside.detail.contains("30000-32767"), "{outside:?}");

        // An update without node ports keeps the old ones and may ask for its own again.
        let old = a.clone();
        let mut updated = service(
            "NodePort",
            json!([{"port": 443, "protocol": "TCP"}, {"port": 80, "protocol": "TCP", "nodePort": 30000}]),
        );
        node_ports.allocate(&mut updated, Some(&old)).expect("kept");
        assert_eq!(updated["spec"]["ports"][0]["nodePort"], 30001);
        assert_eq!(updated["spec"]["ports"][1]["nodePort"], 30000);

        // Back to ClusterIP: the node ports are dropped; a ClusterIP Service may not ask for one.
        let mut cluster_ip = old.clone();
        cluster_ip["spec"]["type"] = json!("ClusterIP");
        node_ports
            .allocate(&mut cluster_ip, Some(&old))
            .expect("dropped");
        assert!(
            cluster_ip["spec"]["ports"][0].get("nodePort").is_none(),
            "{cluster_ip}"
        );
        let mut asks = service("ClusterIP", json!([{"port": 80, "nodePort": 30005}]));
        let forbidden = node_ports.allocate(&mut asks, None).expect_err("forbidden");
        assert_eq!(forbidden.field, "spec.ports[0].nodePort");

        node_ports.release(&a);
        let mut d = service("NodePort", json!([{"port": 80, "nodePort": 30001}]));
        node_ports
            .allocate(&mut d, None)
            .expect("freed by the release");
    }

    #[test]
    fn load_balancers_get_node_ports_unless_told_not_to_and_a_health_check_port_when_local() {
        let mut node_ports = NodePorts::default();
        let mut lb = json!({"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                                     "ports": [{"port": 80}]}});
        node_ports.allocate(&mut lb, None).expect("allocated");
        assert_eq!(lb["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(lb["spec"]["healthCheckNodePort"], 30001);
        let mut bare = json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
                                       "ports": [{"port": 80}]}});
        node_ports.allocate(&mut bare, None).expect("none");
        assert!(bare["spec"]["ports"][0].get("nodePort").is_none());
    }
}
