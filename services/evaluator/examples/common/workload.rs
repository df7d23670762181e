//! The workload both throughput examples share: 100 EventSources of mixed kinds (label
//! filters, CEL, Lua) deployed to every cluster, and Service-shaped objects whose changes move
//! them in or out of the match sets. See `stage_throughput.rs` for the shape in words.

use serde_json::{json, Value};
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_domain::config::ConfigState;
use sluice_proto::v1 as pb;

pub const EVENT_SOURCES: usize = 100;

pub const LABELS: &str = "function evaluate()\n  hs = {}\n  hs.matching = false\n  hs.message = \"\"\n  if obj.metadata.labels ~= nil then\n    for key, value in pairs(obj.metadata.labels) do\n      if key == \"sveltos\" then\n        if value == \"fv\" then\n          hs.matching = true\n        end\n      end\n    end\n  end\n  return hs\nend\n";
pub const HTTPS: &str = "function evaluate()\n  hs = {}\n  hs.matching = false\n  if obj.spec.ports ~= nil then\n    for _,p in pairs(obj.spec.ports) do\n      if p.port == 443 or p.port == 8443 then\n        hs.matching = true\n      end\n    end\n  end\n  return hs\nend\n";

pub fn cluster_id(c: usize) -> ClusterId {
    ClusterId {
        cluster_type: ClusterType::Sveltos,
        namespace: "fleet".into(),
        name: format!("c{c}"),
    }
}

pub fn kind(k: usize) -> String {
    format!("Kind{k}")
}

pub fn event_source(i: usize, kinds: usize) -> Value {
    let mut selector =
        json!({"group": "bench.sluice.io", "version": "v1", "kind": kind(i % kinds)});
    match i % 10 {
        0..=3 => {
            selector["labelFilters"] =
                json!([{"key": "tier", "operation": "Equal", "value": "web"}])
        }
        4..=6 if i.is_multiple_of(2) => {
            selector["evaluateCEL"] =
                json!([{"name": "fv", "rule": "resource.metadata.labels.sveltos == 'fv'"}])
        }
        4..=6 => {
            selector["evaluateCEL"] =
                json!([{"name": "https", "rule": "resource.spec.ports.exists(p, p.port == 443)"}])
        }
        _ if i.is_multiple_of(2) => selector["evaluate"] = json!(LABELS),
        _ => selector["evaluate"] = json!(HTTPS),
    }
    json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
        "metadata": {"name": format!("es-{i:03}")}, "spec": {"resourceSelectors": [selector]}})
}

/// Every configuration object of the workload as (kind, namespace, name, object): the clusters,
/// the EventSources and one EventTrigger per EventSource selecting every cluster.
pub fn config_objects(clusters: usize, kinds: usize) -> Vec<(&'static str, String, String, Value)> {
    let mut out = Vec::new();
    for c in 0..clusters {
        let id = cluster_id(c);
        let cluster = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
            "metadata": {"name": id.name, "namespace": id.namespace, "labels": {"env": "prod"}},
            "status": {"ready": true}});
        out.push((
            "SveltosCluster",
            id.namespace.clone(),
            id.name.clone(),
            cluster,
        ));
    }
    for i in 0..EVENT_SOURCES {
        out.push((
            "EventSource",
            String::new(),
            format!("es-{i:03}"),
            event_source(i, kinds),
        ));
        let trigger = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": format!("t-{i:03}")},
            "spec": {"sourceClusterSelector": {"matchLabels": {"env": "prod"}},
                     "eventSourceName": format!("es-{i:03}")}});
        out.push(("EventTrigger", String::new(), format!("t-{i:03}"), trigger));
    }
    out
}

/// The workload's configuration as the stage holds it.
#[allow(dead_code)] // used by stage_throughput only
pub fn config(clusters: usize, kinds: usize) -> ConfigState {
    let mut state = ConfigState::default();
    for (kind, namespace, name, object) in config_objects(clusters, kinds) {
        state.apply(kind, &namespace, &name, Some(&object));
    }
    state
}

/// One object; `version` changes its resourceVersion and status, `flipped` its labels and port.
pub fn object(k: usize, n: usize, version: usize, flipped: bool) -> Value {
    let mut labels = json!({"app": format!("app-{}", n % 17)});
    if n.is_multiple_of(2) != flipped {
        labels["sveltos"] = json!("fv");
    }
    if n.is_multiple_of(3) != flipped {
        labels["tier"] = json!("web");
    }
    let https = if n.is_multiple_of(4) == flipped {
        443
    } else {
        8080
    };
    json!({
        "apiVersion": "bench.sluice.io/v1", "kind": kind(k),
        "metadata": {"name": format!("obj-{n:05}"), "namespace": format!("ns-{}", n % 10), "labels": labels,
                     "annotations": {"owner": format!("team-{}", n % 5)}, "resourceVersion": version.to_string(),
                     "uid": format!("00000000-0000-0000-0000-{n:012}"), "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"type": "ClusterIP", "clusterIP": format!("10.0.{}.{}", n / 250, n % 250),
                 "selector": {"app": format!("app-{}", n % 17)},
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                           {"name": "https", "port": https, "protocol": "TCP", "targetPort": 8443}]},
        "status": {"observedVersion": version, "loadBalancer": {}},
    })
}

pub fn change(c: usize, k: usize, n: usize, version: usize, flipped: bool) -> pb::ResourceChange {
    let object = object(k, n, version, flipped);
    pb::ResourceChange {
        sealed_object_json: Vec::new(),
        cluster: Some(sluice_wire::cluster_ref(&cluster_id(c))),
        api_version: "bench.sluice.io/v1".into(),
        kind: kind(k),
        namespace: format!("ns-{}", n % 10),
        name: format!("obj-{n:05}"),
        deleted: false,
        resource_version: version.to_string(),
        object_json: serde_json::to_vec(&object).expect("serializes"),
    }
}

/// Sets each `--name value` pair of the command line on the field registered under that name.
pub fn parse_flags(flags: &mut [(&str, &mut usize)]) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair
            .get(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{} needs a number", pair[0]));
        let (_, slot) = flags
            .iter_mut()
            .find(|(name, _)| *name == pair[0])
            .unwrap_or_else(|| panic!("unknown flag {}", pair[0]));
        **slot = value;
    }
}
