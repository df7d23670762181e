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
use sluice_eval::{compile_object, CompiledEventSource, Tape};

/// The allocator of the evaluator service (`services/evaluator/src/main.rs`), where these
/// evaluations run in production.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/services.rs"]
mod services;
use services::service;

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

fn event_source(script: &str) -> CompiledEventSource {
    compile_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource", "metadata": {"name": "bench"},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service", "evaluate": script}]}
    }))
    .expect("bench EventSource compiles")
}

fn pass(es: &CompiledEventSource, objects: &[Tape]) -> usize {
    objects
        .iter()
        .filter(|o| es.evaluate(black_box(o)).expect("evaluates").matching)
        .count()
}

/// ns per object over `passes` consecutive timed passes (their mean, as the oracle reports).
fn sluice_ns_per_object(es: &CompiledEventSource, objects: &[Tape], passes: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..passes {
        black_box(pass(es, objects));
    }
    start.elapsed().as_nanos() as f64 / (objects.len() * passes) as f64
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

/// Rounds of the side-by-side comparison. Each round measures sluice (mean of 3 passes), the
/// oracle in `sveltos` mode (1 pass) and in `pooled` mode (mean of 3 passes) one after the
/// other, so that a change in machine load hits all three; the table reports, per column, the
/// best round (the same rule for both engines) and the ratios of those.
const ROUNDS: usize = 3;

/// An oracle figure: ns per object and objects matched per pass.
type OracleFigure = Option<(f64, u64)>;
/// One round: sluice ns per object, oracle `sveltos`, oracle `pooled`.
type Round = (f64, OracleFigure, OracleFigure);

fn side_by_side(c: &mut Criterion) {
    let objects: Vec<Value> = (0..OBJECTS).map(service).collect();
    // Ours start from the evaluator's stored form of an object (a tape: the parsed document),
    // as the oracle's start from decoded Go maps.
    let tapes: Vec<Tape> = objects
        .iter()
        .map(|o| Tape::from_value(o).expect("a document"))
        .collect();
    let mut group = c.benchmark_group("eventsource-evaluate-10k-services");
    group.throughput(Throughput::Elements(OBJECTS as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let oracle = oracle_path();
    let mut table = Vec::new();
    for (name, script) in [("labels", LABELS), ("https", HTTPS)] {
        let es = event_source(script);
        let matched = pass(&es, &tapes);
        group.bench_function(name, |b| b.iter(|| pass(&es, &tapes)));
        let mut rounds = Vec::new();
        for _ in 0..ROUNDS {
            let ours = sluice_ns_per_object(&es, &tapes, 3);
            let theirs = |mode: &str, iterations: u32| {
                oracle
                    .as_ref()
                    .and_then(|o| oracle_ns_per_object(o, script, &objects, mode, iterations))
            };
            rounds.push((ours, theirs("sveltos", 1), theirs("pooled", 3)));
        }
        table.push((name, matched, rounds));
    }
    group.finish();

    println!(
        "\nper-object evaluation, {OBJECTS} Services, best of {ROUNDS} interleaved rounds \
         (sluice: mean of 3 passes; oracle bench-lua: sveltos 1 pass, pooled mean of 3 passes)"
    );
    println!(
        "{:<8} {:>8} {:>10} {:>16} {:>16} {:>10} {:>10} {:>22}",
        "script",
        "matched",
        "sluice ns",
        "gopher sveltos",
        "gopher pooled",
        "x sveltos",
        "x pooled",
        "per-round x (s / p)"
    );
    for (name, matched, rounds) in table {
        let best = |f: &dyn Fn(&Round) -> Option<f64>| {
            rounds
                .iter()
                .filter_map(f)
                .fold(None, |acc: Option<f64>, v| {
                    Some(acc.map_or(v, |a| a.min(v)))
                })
        };
        let ours = best(&|r| Some(r.0)).unwrap_or(f64::NAN);
        let sveltos = best(&|r| r.1.map(|(ns, _)| ns));
        let pooled = best(&|r| r.2.map(|(ns, _)| ns));
        let go_matched: Vec<String> = rounds
            .iter()
            .flat_map(|r| [r.1, r.2])
            .flatten()
            .map(|(_, m)| m.to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let fmt = |v: Option<f64>| v.map_or("n/a".to_string(), |ns| format!("{ns:.0}"));
        let ratio = |v: Option<f64>| v.map_or("n/a".to_string(), |ns| format!("{:.1}", ns / ours));
        let per_round: Vec<String> = rounds
            .iter()
            .map(|(o, s, p)| {
                let r = |v: &OracleFigure| v.map_or("-".into(), |(ns, _)| format!("{:.0}", ns / o));
                format!("{}/{}", r(s), r(p))
            })
            .collect();
        println!(
            "{name:<8} {matched:>8} {ours:>10.0} {:>16} {:>16} {:>10} {:>10} {:>22}",
            fmt(sveltos),
            fmt(pooled),
            ratio(sveltos),
            ratio(pooled),
            per_round.join(" ")
        );
        if !go_matched.is_empty() && go_matched != [matched.to_string()] {
            println!("  ! the oracle matched {go_matched:?} objects, sluice {matched}");
        }
    }
}

criterion_group!(benches, side_by_side);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
