//! Runs the per-object evaluation of the bench's label or https script over 10,000 Services in
//! a loop (or as many as the third argument says), for profilers (`perf record`); prints ns per object. Not a benchmark of record: see
//! `benches/lua.rs` for the side-by-side numbers.

use std::hint::black_box;
use std::time::Instant;

use serde_json::json;
use sluice_eval::{compile_object, Tape};

/// The allocator of the evaluator service (`services/evaluator/src/main.rs`), where these
/// evaluations run in production.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/common/services.rs"]
mod services;
use services::service;

const LABELS: &str = "function evaluate()\n  hs = {}\n  hs.matching = false\n  hs.message = \"\"\n  if obj.metadata.labels ~= nil then\n    for key, value in pairs(obj.metadata.labels) do\n      if key == \"sveltos\" then\n        if value == \"fv\" then\n          hs.matching = true\n        end\n      end\n    end\n  end\n  return hs\nend\n";
const HTTPS: &str = "function evaluate()\n  hs = {}\n  hs.matching = false\n  if obj.spec.ports ~= nil then\n    for _,p in pairs(obj.spec.ports) do\n      if p.port == 443 or p.port == 8443 then\n        hs.matching = true\n      end\n    end\n  end\n  return hs\nend\n";

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "labels".into());
    let passes: usize = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    // A third argument sets how many distinct objects a pass walks (10,000 by default, more than
    // the caches hold); a few hundred show the cost with the objects in cache.
    let count: usize = std::env::args()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let script = match which.as_str() {
        "https" => HTTPS,
        "labels" => LABELS,
        "nolua" => "",
        "empty" => "function evaluate() return {matching = true} end",
        "name" => "function evaluate() return {matching = obj.metadata.name == 'x'} end",
        "labelget" => "function evaluate() hs = {} hs.matching = obj.metadata.labels.sveltos == 'fv' return hs end",
        other => panic!("unknown script {other}"),
    };
    let mut selector = json!({"group": "", "version": "v1", "kind": "Service"});
    if !script.is_empty() {
        selector["evaluate"] = json!(script);
    }
    let es = compile_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "profile"},
        "spec": {"resourceSelectors": [selector]}
    }))
    .expect("profile EventSource compiles");
    let objects: Vec<Tape> = (0..count)
        .map(|i| Tape::from_value(&service(i)).expect("a document"))
        .collect();
    let mut best = f64::INFINITY;
    for _ in 0..passes {
        let start = Instant::now();
        let mut matched = 0;
        for o in &objects {
            matched += usize::from(es.evaluate(black_box(o)).expect("evaluates").matching);
        }
        black_box(matched);
        best = best.min(start.elapsed().as_nanos() as f64 / objects.len() as f64);
    }
    println!("{which}: best {best:.0} ns per object over {passes} passes");
}
