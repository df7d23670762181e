//! The defaulting the real API server applies to built-in kinds that sluice's users and
//! templates read. Only what matters here: a Service gets `type: ClusterIP`, each port its
//! `protocol: TCP` and `targetPort` equal to `port`, and `status.loadBalancer: {}` — so a Lua
//! script reading `obj.status.loadBalancer.ingress` (seed 003) sees what a real cluster shows.

use serde_json::{json, Value};

use crate::resources::ResourceInfo;

/// Fills defaults in place, on every write of the main resource.
pub fn apply_defaults(info: &ResourceInfo, obj: &mut Value) {
    if info.group.is_empty() && info.kind == "Service" {
        service(obj);
    }
}

fn service(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let spec = map.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        spec.entry("type").or_insert_with(|| json!("ClusterIP"));
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.entry("protocol").or_insert_with(|| json!("TCP"));
                if let Some(number) = port.get("port").cloned() {
                    port.entry("targetPort").or_insert(number);
                }
            }
        }
    }
    let status = map.entry("status").or_insert_with(|| json!({}));
    if let Some(status) = status.as_object_mut() {
        status.entry("loadBalancer").or_insert_with(|| json!({}));
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
}
