//! Per-object EventSource evaluation over 10,000 Services: the seed label script and the seed
//! https-port script, side by side with the reference oracle's gopher-lua (`bench-lua`, modes
//! `sveltos` and `pooled`) on the same script and objects, in the same run.
//!
//! The oracle is found at `$SLUICE_ORACLE` or `~/.cache/sluice-oracle/oracle` (built by
//! `shared/oracle/build.sh`); without it only the sluice side runs and the table says so.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use serde_json::{json, Value};
use sluice_eval::{compile_object, CompiledEventSource};

const OBJECTS: usize = 10_000;

const LABELS: &str = r#"function evaluate()
  hs = {}
  hs.matching = false
  hs.message = ""
  if obj.metadata.labels ~= nil then
    for key, value in pairs(obj.metadata.labels) do
      if key == "sveltos" then
        if value == "fv" then
          hs.matching = true
        end
      end
    end
  end
  return hs
end
"#;

const HTTPS: &str = r#"function evaluate()
  hs = {}
  hs.matching = false
  if obj.spec.ports ~= nil then
    for _,p in pairs(obj.spec.ports) do
      if p.port == 443 or p.port == 8443 then
        hs.matching = true
      end
    end
  end
  return hs
end
"#;

/// The same Service as `shared/oracle/bench/make_inputs.py` `service(i)`.
fn service(i: usize) -> Value {
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

fn event_source(script: &str) -> CompiledEventSource {
    compile_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "bench"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service", "evaluate": script}]}
    }))
    .expect("bench EventSource compiles")
}

fn pass(es: &CompiledEventSource, objects: &[Value]) -> usize {
    objects
        .iter()
        .filter(|o| es.evaluate(black_box(o)).expect("evaluates").matching)
        .count()
}

/// ns per object of the best of `rounds` timed passes.
fn sluice_ns_per_object(es: &CompiledEventSource, objects: &[Value], rounds: usize) -> f64 {
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            black_box(pass(es, objects));
            start.elapsed().as_nanos() as f64 / objects.len() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn oracle_path() -> Option<PathBuf> {
    let path = std::env::var_os("SLUICE_ORACLE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/sluice-oracle/oracle"))
        })?;
    path.exists().then_some(path)
}

/// Runs the oracle's `bench-lua` and returns its ns per object and matches per pass.
fn oracle_ns_per_object(
    oracle: &PathBuf,
    script: &str,
    objects: &[Value],
    mode: &str,
    iterations: u32,
) -> Option<(f64, u64)> {
    let request =
        json!({"script": script, "objects": objects, "iterations": iterations, "mode": mode});
    let mut child = Command::new(oracle)
        .arg("bench-lua")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take()?;
        stdin.write_all(request.to_string().as_bytes()).ok()?;
    }
    let out = child.wait_with_output().ok()?;
    let answer: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some((
        answer["ns_per_object"].as_f64()?,
        answer["matched_per_pass"].as_u64()?,
    ))
}

fn side_by_side(c: &mut Criterion) {
    let objects: Vec<Value> = (0..OBJECTS).map(service).collect();
    let mut group = c.benchmark_group("eventsource-evaluate-10k-services");
    group.throughput(Throughput::Elements(OBJECTS as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let mut table = Vec::new();
    for (name, script) in [("labels", LABELS), ("https", HTTPS)] {
        let es = event_source(script);
        let matched = pass(&es, &objects);
        group.bench_function(name, |b| b.iter(|| pass(&es, &objects)));
        let ours = sluice_ns_per_object(&es, &objects, 5);
        let oracle = oracle_path();
        let theirs = |mode: &str, iterations: u32| {
            oracle
                .as_ref()
                .and_then(|o| oracle_ns_per_object(o, script, &objects, mode, iterations))
        };
        table.push((
            name,
            matched,
            ours,
            theirs("sveltos", 1),
            theirs("pooled", 3),
        ));
    }
    group.finish();

    println!(
        "\nper-object evaluation, {OBJECTS} Services, best of 5 passes (sluice) / oracle bench-lua"
    );
    println!(
        "{:<8} {:>8} {:>12} {:>16} {:>16} {:>10} {:>10}",
        "script",
        "matched",
        "sluice ns",
        "gopher sveltos",
        "gopher pooled",
        "x sveltos",
        "x pooled"
    );
    for (name, matched, ours, sveltos, pooled) in table {
        let fmt =
            |v: Option<(f64, u64)>| v.map_or("n/a".to_string(), |(ns, m)| format!("{ns:.0} ({m})"));
        let ratio = |v: Option<(f64, u64)>| {
            v.map_or("n/a".to_string(), |(ns, _)| format!("{:.1}", ns / ours))
        };
        println!(
            "{name:<8} {matched:>8} {ours:>12.0} {:>16} {:>16} {:>10} {:>10}",
            fmt(sveltos),
            fmt(pooled),
            ratio(sveltos),
            ratio(pooled)
        );
    }
}

criterion_group!(benches, side_by_side);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
