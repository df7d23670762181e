//! Measures what a flat per-object layout would save over `serde_json::Value` trees, before
//! building one: the evaluator parses every changed object, keeps it for re-evaluation and frees
//! it when replaced, and the Lua bench walks 10,000 objects that do not fit in cache.
//!
//! Both layouts start from the same JSON bytes (10,000 Services, as the Lua bench builds them).
//! The "tape" is `sluice_eval::tape::Tape`: the raw bytes plus one array of 16-byte nodes in
//! document order, each node knowing where its subtree ends; object keys are compared in place
//! in the bytes. For each
//! layout the probe times: parsing, dropping, and a walk that does what `Filter::lists` and the
//! https script read (kind, apiVersion, metadata.deletionTimestamp, spec.ports[*].port == 443),
//! over all 10,000 objects (cold) and over 300 of them (in cache).
//!
//! ```text
//! cargo run --release -p sluice-eval --example layout_probe
//! ```

use std::hint::black_box;
use std::time::Instant;

use serde_json::Value;
use sluice_eval::tape::Tape;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/common/services.rs"]
mod services;
use services::service;

fn walk_value(o: &Value) -> bool {
    let meta = o.get("metadata");
    if meta.and_then(|m| m.get("deletionTimestamp")).is_some()
        || o.get("kind").and_then(Value::as_str) != Some("Service")
        || o.get("apiVersion").and_then(Value::as_str) != Some("v1")
    {
        return false;
    }
    o.get("spec")
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .is_some_and(|ports| {
            ports
                .iter()
                .any(|p| p.get("port").and_then(Value::as_i64) == Some(443))
        })
}

fn walk_tape(t: &Tape) -> bool {
    let root = t.root();
    let meta = root.get("metadata");
    if meta.and_then(|m| m.get("deletionTimestamp")).is_some()
        || !root.get("kind").is_some_and(|k| k.str_eq("Service"))
        || !root.get("apiVersion").is_some_and(|k| k.str_eq("v1"))
    {
        return false;
    }
    root.get("spec")
        .and_then(|s| s.get("ports"))
        .is_some_and(|ports| {
            ports
                .items()
                .any(|p| p.get("port").and_then(|n| n.as_i64()) == Some(443))
        })
}

/// Best ns per object over `passes` passes of `f` over `items`.
fn time<T>(items: &[T], passes: usize, f: impl Fn(&T) -> bool) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..passes {
        let start = Instant::now();
        let hits = items.iter().filter(|i| f(black_box(i))).count();
        black_box(hits);
        best = best.min(start.elapsed().as_nanos() as f64 / items.len() as f64);
    }
    best
}

fn main() {
    let texts: Vec<Vec<u8>> = (0..10_000)
        .map(|i| serde_json::to_vec(&service(i)).expect("serializes"))
        .collect();
    let parse = |passes: usize, f: &dyn Fn(&[u8]) -> usize| {
        let mut best = f64::INFINITY;
        for _ in 0..passes {
            let start = Instant::now();
            for t in &texts {
                black_box(f(t));
            }
            best = best.min(start.elapsed().as_nanos() as f64 / texts.len() as f64);
        }
        best
    };
    let value_parse = parse(5, &|t| {
        let v: Value = serde_json::from_slice(t).expect("parses");
        usize::from(v.is_object())
    });
    let tape_parse = parse(5, &|t| {
        Tape::parse(t.to_vec()).map_or(0, |t| t.root().len())
    });

    let values: Vec<Value> = texts
        .iter()
        .map(|t| serde_json::from_slice(t).expect("parses"))
        .collect();
    let tapes: Vec<Tape> = texts
        .iter()
        .map(|t| Tape::parse(t.clone()).expect("parses"))
        .collect();
    let agree = values
        .iter()
        .zip(&tapes)
        .all(|(v, t)| walk_value(v) == walk_tape(t));
    assert!(agree, "both layouts must give the same answers");
    let matched = values.iter().filter(|v| walk_value(v)).count();

    let bytes: usize = tapes.iter().map(|t| t.bytes().len()).sum();
    println!(
        "10,000 Services, {} bytes of JSON each on average; {matched} match",
        bytes / tapes.len()
    );
    println!(
        "parse (ns/object, includes the drop): serde_json {value_parse:.0}, tape {tape_parse:.0}"
    );
    for (label, count) in [
        ("cold, 10,000 objects", 10_000),
        ("in cache, 300 objects", 300),
    ] {
        let v = time(&values[..count], 20, walk_value);
        let t = time(&tapes[..count], 20, walk_tape);
        println!("walk {label} (ns/object): serde_json {v:.0}, tape {t:.0}");
    }
    let start = Instant::now();
    drop(values);
    let value_drop = start.elapsed().as_nanos() as f64 / 10_000.0;
    let start = Instant::now();
    drop(tapes);
    let tape_drop = start.elapsed().as_nanos() as f64 / 10_000.0;
    println!("drop (ns/object): serde_json {value_drop:.0}, tape {tape_drop:.0}");
}
