//! Throughput of the evaluator's pure stage (`stage::Evaluator`): object changes per second
//! across 100 EventSources, match-set bookkeeping and publishing decisions included, no bus.
//!
//! Workload (all numbers are flags): `--clusters` managed clusters, every one selected by 100
//! EventTriggers, one per EventSource, so every EventSource is deployed to every cluster. The
//! EventSources watch `--kinds` kinds (EventSource i watches kind i mod kinds), so one change
//! is evaluated by 100/kinds EventSources. Of every ten EventSources four are label filters only
//! (`labelFilters` tier=web), three are CEL (alternately a label rule and a port rule) and
//! three are Lua (alternately the seed label script and the seed https-port script). Each
//! cluster starts with `--objects` objects per kind (Service-shaped, half labelled
//! `sveltos: fv`, a third `tier: web`); then `--changes` changes, round robin over clusters,
//! kinds and objects, each a new resourceVersion and status, and one in `--flip` also flips the
//! labels and the https port, which moves the object in or out of most match sets.
//!
//! ```text
//! cargo run --release -p sluice-evaluator --example stage_throughput -- --kinds 10
//! ```
//!
//! Prints the boot (initial evaluation of every object) and two runs over the same changes:
//! one `on_change` per change, and `on_changes` in batches of `--batch`.

use std::time::Instant;

use serde_json::{json, Value};
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_domain::config::ConfigState;
use sluice_evaluator::Evaluator;
use sluice_proto::v1 as pb;

const EVENT_SOURCES: usize = 100;

const LABELS: &str = "function evaluate()\n  hs = {}\n  hs.matching = false\n  hs.message = \"\"\n  if obj.metadata.labels ~= nil then\n    for key, value in pairs(obj.metadata.labels) do\n      if key == \"sveltos\" then\n        if value == \"fv\" then\n          hs.matching = true\n        end\n      end\n    end\n  end\n  return hs\nend\n";
const HTTPS: &str = "function evaluate()\n  hs = {}\n  hs.matching = false\n  if obj.spec.ports ~= nil then\n    for _,p in pairs(obj.spec.ports) do\n      if p.port == 443 or p.port == 8443 then\n        hs.matching = true\n      end\n    end\n  end\n  return hs\nend\n";

struct Options {
    clusters: usize,
    kinds: usize,
    objects: usize,
    changes: usize,
    flip: usize,
    batch: usize,
}

fn options() -> Options {
    let mut o = Options {
        clusters: 10,
        kinds: 10,
        objects: 200,
        changes: 200_000,
        flip: 10,
        batch: 256,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair
            .get(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{} needs a number", pair[0]));
        match pair[0].as_str() {
            "--clusters" => o.clusters = value,
            "--kinds" => o.kinds = value,
            "--objects" => o.objects = value,
            "--changes" => o.changes = value,
            "--flip" => o.flip = value,
            "--batch" => o.batch = value,
            other => panic!("unknown flag {other}"),
        }
    }
    o
}

fn cluster_id(c: usize) -> ClusterId {
    ClusterId {
        cluster_type: ClusterType::Sveltos,
        namespace: "fleet".into(),
        name: format!("c{c}"),
    }
}

fn kind(k: usize) -> String {
    format!("Kind{k}")
}

fn event_source(i: usize, kinds: usize) -> Value {
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

fn config(o: &Options) -> ConfigState {
    let mut state = ConfigState::default();
    for c in 0..o.clusters {
        let id = cluster_id(c);
        let cluster = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
            "metadata": {"name": id.name, "namespace": id.namespace, "labels": {"env": "prod"}},
            "status": {"ready": true}});
        state.apply("SveltosCluster", &id.namespace, &id.name, Some(&cluster));
    }
    for i in 0..EVENT_SOURCES {
        let es = event_source(i, o.kinds);
        state.apply("EventSource", "", &format!("es-{i:03}"), Some(&es));
        let trigger = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": format!("t-{i:03}")},
            "spec": {"sourceClusterSelector": {"matchLabels": {"env": "prod"}},
                     "eventSourceName": format!("es-{i:03}")}});
        state.apply("EventTrigger", "", &format!("t-{i:03}"), Some(&trigger));
    }
    state
}

/// One object; `version` changes its resourceVersion and status, `flipped` its labels and port.
fn object(k: usize, n: usize, version: usize, flipped: bool) -> Value {
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

fn change(c: usize, k: usize, n: usize, version: usize, flipped: bool) -> pb::ResourceChange {
    let object = object(k, n, version, flipped);
    pb::ResourceChange {
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

fn main() {
    let o = options();
    let mut initial = Vec::new();
    for c in 0..o.clusters {
        for k in 0..o.kinds {
            for n in 0..o.objects {
                initial.push(change(c, k, n, 1, false));
            }
        }
    }
    // Round robin over clusters, then kinds, then objects; every `flip`-th change flips the
    // object's labels and port relative to its current state.
    let mut flipped = vec![false; o.clusters * o.kinds * o.objects];
    let changes: Vec<(pb::ResourceChange, u64)> = (0..o.changes)
        .map(|i| {
            let c = i % o.clusters;
            let k = (i / o.clusters) % o.kinds;
            let n = (i / (o.clusters * o.kinds)) % o.objects;
            let slot = (c * o.kinds + k) * o.objects + n;
            if o.flip > 0 && i.is_multiple_of(o.flip) {
                flipped[slot] = !flipped[slot];
            }
            (change(c, k, n, i + 2, flipped[slot]), i as u64 + 2)
        })
        .collect();
    let per_change = EVENT_SOURCES / o.kinds;
    println!(
        "stage throughput: {EVENT_SOURCES} EventSources x {} clusters ({} pairs), {} kinds \
         ({per_change} EventSources evaluate each change), {} objects, {} changes, 1 in {} flips",
        o.clusters,
        EVENT_SOURCES * o.clusters,
        o.kinds,
        initial.len(),
        o.changes,
        o.flip
    );

    for mode in ["one by one", "batched"] {
        let mut stage = Evaluator::new(config(&o));
        let start = Instant::now();
        for change in &initial {
            stage.load_object(change);
        }
        let boot = stage.recompute_all(1);
        let boot_secs = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut published = 0usize;
        if mode == "one by one" {
            for (change, sequence) in &changes {
                published += stage.on_change(change, *sequence).len();
            }
        } else {
            for batch in changes.chunks(o.batch.max(1)) {
                published += stage.on_changes(batch).len();
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{mode:<10}: boot {} objects in {boot_secs:.2} s ({} sets); {} changes in {secs:.2} s = \
             {:.0} changes/s ({:.0} evaluations/s), {published} match sets published",
            initial.len(),
            boot.len(),
            o.changes,
            o.changes as f64 / secs,
            (o.changes * per_change) as f64 / secs,
        );
    }
}
