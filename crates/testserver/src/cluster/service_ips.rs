//! Cluster IPs of Services, as kube-apiserver's allocator hands them out from the service CIDR
//! `10.96.0.0/12` (kubeadm's and kind's default): a Service of type ClusterIP, NodePort or
//! LoadBalancer without one gets a free address (`spec.clusterIP`, `spec.clusterIPs`, with
//! `ipFamilies: [IPv4]` and `ipFamilyPolicy: SingleStack`); one that asks for an address gets it
//! if it is in range and free; a headless one (`None`) gets the families only; an update keeps
//! the address and may not change it. Node ports are allocated apart (`node_ports`).

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{json, Value};

use crate::field_error::FieldError;
use crate::resources::GroupResource;

/// The service CIDR: 10.96.0.0/12.
const RANGE_START: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const RANGE_BITS: u32 = 12;
const RANGE_TEXT: &str = "10.96.0.0/12";
const RANGE_SIZE: u32 = 1 << (32 - RANGE_BITS);

pub fn is_service(gr: &GroupResource) -> bool {
    gr.0.is_empty() && gr.1 == "services"
}

/// The addresses stored Services hold, and where the next search for a free one starts.
#[derive(Clone, Debug, Default)]
pub struct ServiceIps {
    held: HashSet<u32>,
    /// Offset in the range of the next address to try.
    next: u32,
}

fn cluster_ips(service: &Value) -> Vec<u32> {
    service
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(service.pointer("/spec/clusterIP"))
        .filter_map(Value::as_str)
        .filter_map(|ip| ip.parse::<Ipv4Addr>().ok())
        .map(u32::from)
        .collect()
}

impl ServiceIps {
    /// Records the addresses of a stored Service.
    pub fn hold(&mut self, service: &Value) {
        self.held.extend(cluster_ips(service));
    }

    /// Forgets the addresses of a Service no longer stored.
    pub fn release(&mut self, service: &Value) {
        for ip in cluster_ips(service) {
            self.held.remove(&ip);
        }
    }

    /// Gives `service` (as it is about to be stored; `old` when it is an update) its cluster IP
    /// and IP families, or the field errors apiserver answers with.
    pub fn allocate(&mut self, service: &mut Value, old: Option<&Value>) -> Result<(), FieldError> {
        let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
            return Ok(());
        }
        let old_ip = old
            .and_then(|old| old.pointer("/spec/clusterIP"))
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty());
        let asked = spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(str::to_string);
        let ip = match (old_ip, asked) {
            (Some(old_ip), None) => old_ip.to_string(),
            (Some(old_ip), Some(asked)) if asked != old_ip => {
                return Err(FieldError::invalid(
                    "spec.clusterIPs[0]",
                    json!(asked),
                    "may not change once set",
                ));
            }
            (Some(old_ip), Some(_)) => old_ip.to_string(),
            (None, Some(asked)) if asked == "None" => asked,
            (None, Some(asked)) => {
                self.claim(&asked)?;
                asked
            }
            (None, None) => self.free()?,
        };
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
        spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
        Ok(())
    }

    /// Checks that an address asked for is in range and free.
    fn claim(&self, asked: &str) -> Result<(), FieldError> {
        let refuse = |why: String| {
            Err(FieldError::invalid(
                "spec.clusterIPs",
                json!([asked]),
                format!("failed to allocate IP {asked}: {why}"),
            ))
        };
        let Ok(address) = asked.parse::<Ipv4Addr>() else {
            return Err(FieldError::invalid(
                "spec.clusterIPs[0]",
                json!(asked),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        };
        let offset = u32::from(address).wrapping_sub(RANGE_START);
        if offset == 0 || offset >= RANGE_SIZE - 1 {
            return refuse(format!(
                "the provided IP ({asked}) is not in the valid range. The range of valid IPs is {RANGE_TEXT}"
            ));
        }
        if self.held.contains(&u32::from(address)) {
            return refuse("provided IP is already allocated".into());
        }
        Ok(())
    }

    /// The next free address of the range (neither its network nor its broadcast address).
    fn free(&mut self) -> Result<String, FieldError> {
        for _ in 0..RANGE_SIZE {
            let offset = self.next;
            self.next = (self.next + 1) % RANGE_SIZE;
            if offset == 0 || offset == RANGE_SIZE - 1 {
                continue;
            }
            let address = RANGE_START + offset;
            if !self.held.contains(&address) {
                return Ok(Ipv4Addr::from(address).to_string());
            }
        }
        Err(FieldError::invalid(
            "spec.clusterIPs",
            Value::Null,
            "failed to allocate a serviceIP: range is full",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "spec": spec})
    }

    #[test]
    fn services_get_distinct_addresses_and_a_released_one_is_free_again() {
        let mut ips = ServiceIps::default();
        let mut first = service(json!({"type": "ClusterIP"}));
        ips.allocate(&mut first, None).expect("allocated");
        ips.hold(&first);
        let mut second = service(json!({"type": "LoadBalancer"}));
        ips.allocate(&mut second, None).expect("allocated");
        ips.hold(&second);
        assert_eq!(first["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(first["spec"]["clusterIPs"], json!(["10.96.0.1"]));
        assert_eq!(first["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(first["spec"]["ipFamilyPolicy"], "SingleStack");
        assert_eq!(second["spec"]["clusterIP"], "10.96.0.2");

        let mut taken = service(json!({"clusterIP": "10.96.0.2"}));
        let refused = ips.allocate(&mut taken, None).expect_err("taken");
        assert!(
            refused
                .detail
                .contains("failed to allocate IP 10.96.0.2: provided IP is already allocated"),
            "{refused:?}"
        );
        ips.release(&second);
        ips.allocate(&mut taken, None).expect("free again");
        assert_eq!(taken["spec"]["clusterIPs"], json!(["10.96.0.2"]));

        let mut outside = service(json!({"clusterIP": "192.168.0.1"}));
        let refused = ips.allocate(&mut outside, None).expect_err("out of range");
        assert!(
            refused
                .detail
                .contains("is not in the valid range. The range of valid IPs is 10.96.0.0/12"),
            "{refused:?}"
        );
    }

    #[test]
    fn an_update_keeps_the_address_and_may_not_change_it() {
        let mut ips = ServiceIps::default();
        let mut stored = service(json!({}));
        ips.allocate(&mut stored, None).expect("allocated");
        ips.hold(&stored);
        let mut update = service(json!({"ports": [{"port": 80}]}));
        ips.allocate(&mut update, Some(&stored)).expect("kept");
        assert_eq!(update["spec"]["clusterIP"], stored["spec"]["clusterIP"]);
        let mut moved = service(json!({"clusterIP": "10.96.0.99"}));
        let refused = ips
            .allocate(&mut moved, Some(&stored))
            .expect_err("immutable");
        assert_eq!(refused.field, "spec.clusterIPs[0]");
    }

    #[test]
    fn headless_and_external_name_services_get_no_address() {
        let mut ips = ServiceIps::default();
        let mut headless = service(json!({"clusterIP": "None"}));
        ips.allocate(&mut headless, None).expect("headless");
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        let mut external = service(json!({"type": "ExternalName", "externalName": "example.org"}));
        ips.allocate(&mut external, None).expect("external");
        assert!(external["spec"].get("clusterIP").is_none());
    }
}
