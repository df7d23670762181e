//! Runs the public CEL specification conformance tests (the `simple` test files, as shipped in
//! JSON form by the npm package `@bufbuild/cel-spec`) against the `cel` crate the evaluator uses,
//! restricted to the standard library, and prints the pass rate per file. Tests that need protobuf
//! messages, a container, the type checker or a typed result cannot run here and are counted as
//! not applicable. See `crates/eval/README.md` for how to produce the input file.
//!
//! Usage: `cargo run -p sluice-eval --example cel_spec -- cel-spec-tests.json`

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use base64::Engine as _;
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Program, Value};
use serde_json::Value as Json;

/// The files that exercise the standard library (no extensions, no proto messages).
const STANDARD: &[&str] = &[
    "basic",
    "comparisons",
    "conversions",
    "fp_math",
    "integer_math",
    "lists",
    "logic",
    "macros",
    "parse",
    "plumbing",
    "string",
    "timestamps",
    "fields",
];

/// A JSON-encoded `cel.expr.Value`; `None` when it cannot be represented (protobuf messages).
fn value(v: &Json) -> Option<Value> {
    let (kind, inner) = v.as_object()?.iter().next()?;
    Some(match kind.as_str() {
        "int64Value" => Value::Int(inner.as_str()?.parse().ok()?),
        "uint64Value" => Value::UInt(inner.as_str()?.parse().ok()?),
        "doubleValue" => Value::Float(match inner {
            Json::String(s) if s == "NaN" => f64::NAN,
            Json::String(s) if s == "Infinity" => f64::INFINITY,
            Json::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
            other => other.as_f64()?,
        }),
        "stringValue" => Value::String(Arc::new(inner.as_str()?.to_string())),
        "boolValue" => Value::Bool(inner.as_bool()?),
        "nullValue" => Value::Null,
        "bytesValue" => Value::Bytes(Arc::new(
            base64::engine::general_purpose::STANDARD
                .decode(inner.as_str()?)
                .ok()?,
        )),
        "listValue" => Value::List(Arc::new(
            inner
                .get("values")
                .and_then(Json::as_array)
                .map(|items| items.iter().map(value).collect::<Option<Vec<_>>>())
                .unwrap_or(Some(Vec::new()))?,
        )),
        "mapValue" => {
            let mut map = HashMap::new();
            for entry in inner
                .get("entries")
                .and_then(Json::as_array)
                .unwrap_or(&Vec::new())
            {
                let key = match value(entry.get("key")?)? {
                    Value::Int(i) => Key::Int(i),
                    Value::UInt(u) => Key::Uint(u),
                    Value::Bool(b) => Key::Bool(b),
                    Value::String(s) => Key::String(s),
                    _ => return None,
                };
                map.insert(key, value(entry.get("value")?)?);
            }
            Value::Map(CelMap { map: Arc::new(map) })
        }
        _ => return None,
    })
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(x, y)| same(x, y))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map
                    .iter()
                    .all(|(k, v)| y.map.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

enum Outcome {
    Pass,
    Fail(String),
    NotApplicable,
}

fn run(test: &Json) -> Outcome {
    if test.get("container").is_some()
        || test.get("checkOnly").is_some()
        || test.get("typedResult").is_some()
    {
        return Outcome::NotApplicable;
    }
    let expr = test["expr"].as_str().unwrap_or_default();
    let mut context = Context::default();
    if let Some(bindings) = test.get("bindings").and_then(Json::as_object) {
        for (name, binding) in bindings {
            let Some(v) = binding.get("value").and_then(value) else {
                return Outcome::NotApplicable;
            };
            context.add_variable_from_value(name.clone(), v);
        }
    }
    let expected = match test.get("value") {
        Some(v) => match value(v) {
            Some(v) => Some(v),
            None => return Outcome::NotApplicable,
        },
        None => None,
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Program::compile(expr)
            .map_err(|e| e.to_string())
            .and_then(|p| p.execute(&context).map_err(|e| e.to_string()))
    }));
    match (outcome, expected) {
        (Err(_), _) => Outcome::Fail("panicked".into()),
        (Ok(Ok(got)), Some(want)) if same(&got, &want) => Outcome::Pass,
        (Ok(Ok(got)), Some(want)) => Outcome::Fail(format!("got {got:?}, want {want:?}")),
        (Ok(Err(_)), None) => Outcome::Pass,
        (Ok(Ok(got)), None) => Outcome::Fail(format!("expected an error, got {got:?}")),
        (Ok(Err(e)), Some(want)) => Outcome::Fail(format!("error {e}, want {want:?}")),
    }
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: cel_spec <cel-spec-tests.json>");
        std::process::exit(64);
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        eprintln!("cannot read {path}: {e}");
        std::process::exit(66);
    });
    let tests: Vec<Json> = serde_json::from_str(&text).unwrap_or_else(|e| {
        eprintln!("{path} is not a JSON list of tests: {e}");
        std::process::exit(65);
    });
    let verbose = std::env::var_os("VERBOSE").is_some();
    let mut per_file: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for test in &tests {
        let file = test["file"].as_str().unwrap_or_default();
        if !STANDARD.contains(&file) {
            continue;
        }
        let entry = per_file.entry(file.to_string()).or_default();
        match run(test) {
            Outcome::Pass => entry.0 += 1,
            Outcome::Fail(why) => {
                entry.1 += 1;
                if verbose {
                    println!(
                        "FAIL {file}/{}/{}: {} :: {why}",
                        test["section"].as_str().unwrap_or(""),
                        test["name"].as_str().unwrap_or(""),
                        test["expr"].as_str().unwrap_or("")
                    );
                }
            }
            Outcome::NotApplicable => entry.2 += 1,
        }
    }
    let (mut p, mut f, mut n) = (0, 0, 0);
    println!(
        "{:<14} {:>6} {:>6} {:>6} {:>7}",
        "file", "pass", "fail", "n/a", "rate"
    );
    for (file, (pass, fail, na)) in &per_file {
        let rate = 100.0 * *pass as f64 / (*pass + *fail).max(1) as f64;
        println!("{file:<14} {pass:>6} {fail:>6} {na:>6} {rate:>6.1}%");
        (p, f, n) = (p + pass, f + fail, n + na);
    }
    let rate = 100.0 * p as f64 / (p + f).max(1) as f64;
    println!("{:<14} {p:>6} {f:>6} {n:>6} {rate:>6.1}%", "total");
}
