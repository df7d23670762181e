//! The 10,000 Services the Lua bench and the probes evaluate: the objects of
//! `shared/oracle/bench/make_inputs.py`, which the oracle's `bench-lua` gets too.

use serde_json::{json, Value};

/// The same Service as `shared/oracle/bench/make_inputs.py` `service(i)`.
pub fn service(i: usize) -> Value {
    let mut labels = json!({"app": format!("app-{}", i % 17), "tier": "web"});
    if i.is_multiple_of(2) {
        labels["sveltos"] = json!("fv");
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{i:04}"), "namespace": format!("ns-{}", i % 10), "labels": labels,
                     "annotations": {"owner": format!("team-{}", i % 5)}, "resourceVersion": (1000 + i).to_string(),
                     "uid": format!("00000000-0000-0000-0000-{i:012}"), "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"type": "ClusterIP", "clusterIP": format!("10.0.{}.{}", i / 250, i % 250),
                 "selector": {"app": format!("app-{}", i % 17)},
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                           {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}]},
        "status": {"loadBalancer": {}},
    })
}
