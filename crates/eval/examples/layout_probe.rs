//! Measures what a flat per-object layout would save over `serde_json::Value` trees, before
//! building one: the evaluator parses every changed object, keeps it for re-evaluation and frees
//! it when replaced, and the Lua bench walks 10,000 objects that do not fit in cache.
//!
//! Both layouts start from the same JSON bytes (10,000 Services, as the Lua bench builds them).
//! The "tape" is the raw bytes plus one array of 16-byte nodes in document order, each node
//! knowing where its subtree ends; object keys are compared in place in the bytes. For each
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

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/common/services.rs"]
mod services;
use services::service;

#[derive(Clone, Copy, PartialEq)]
enum Tag {
    Object,
    Array,
    Str,
    Number,
    True,
    False,
    Null,
}

/// One JSON value: `start..start+len` is its text (strings without quotes), `end` the index of
/// the first node after its subtree.
#[derive(Clone, Copy)]
struct Node {
    tag: Tag,
    start: u32,
    len: u32,
    end: u32,
}

struct Tape {
    bytes: Vec<u8>,
    nodes: Vec<Node>,
}

impl Tape {
    fn parse(bytes: &[u8]) -> Option<Tape> {
        let mut tape = Tape {
            bytes: bytes.to_vec(),
            nodes: Vec::with_capacity(bytes.len() / 8),
        };
        let mut pos = 0;
        tape.value(&mut pos)?;
        Some(tape)
    }

    fn skip_ws(&self, pos: &mut usize) {
        while matches!(self.bytes.get(*pos), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            *pos += 1;
        }
    }

    fn push(&mut self, tag: Tag, start: usize, len: usize) -> usize {
        let at = self.nodes.len();
        self.nodes.push(Node {
            tag,
            start: start as u32,
            len: len as u32,
            end: at as u32 + 1,
        });
        at
    }

    fn value(&mut self, pos: &mut usize) -> Option<()> {
        self.skip_ws(pos);
        match *self.bytes.get(*pos)? {
            b'{' | b'[' => {
                let object = self.bytes[*pos] == b'{';
                let at = self.push(if object { Tag::Object } else { Tag::Array }, *pos, 0);
                *pos += 1;
                let close = if object { b'}' } else { b']' };
                let mut count = 0;
                loop {
                    self.skip_ws(pos);
                    if *self.bytes.get(*pos)? == close {
                        *pos += 1;
                        break;
                    }
                    if count > 0 {
                        (*self.bytes.get(*pos)? == b',').then_some(())?;
                        *pos += 1;
                    }
                    if object {
                        self.skip_ws(pos);
                        self.string(pos)?;
                        self.skip_ws(pos);
                        (*self.bytes.get(*pos)? == b':').then_some(())?;
                        *pos += 1;
                    }
                    self.value(pos)?;
                    count += 1;
                }
                let end = self.nodes.len() as u32;
                self.nodes[at].len = count;
                self.nodes[at].end = end;
            }
            b'"' => self.string(pos)?,
            b't' => {
                self.push(Tag::True, *pos, 4);
                *pos += 4;
            }
            b'f' => {
                self.push(Tag::False, *pos, 5);
                *pos += 5;
            }
            b'n' => {
                self.push(Tag::Null, *pos, 4);
                *pos += 4;
            }
            _ => {
                let start = *pos;
                while matches!(
                    self.bytes.get(*pos),
                    Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                ) {
                    *pos += 1;
                }
                self.push(Tag::Number, start, *pos - start);
            }
        }
        Some(())
    }

    fn string(&mut self, pos: &mut usize) -> Option<()> {
        *pos += 1;
        let start = *pos;
        let rest = self.bytes.get(start..)?;
        let mut i = 0;
        loop {
            match *rest.get(i)? {
                b'"' => break,
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
        self.push(Tag::Str, start, i);
        *pos = start + i + 1;
        Some(())
    }

    fn text(&self, node: usize) -> &[u8] {
        let n = self.nodes[node];
        &self.bytes[n.start as usize..(n.start + n.len) as usize]
    }

    /// The value of `key` in the object at `node`.
    fn get(&self, node: usize, key: &str) -> Option<usize> {
        let object = self.nodes.get(node)?;
        if object.tag != Tag::Object {
            return None;
        }
        let mut child = node + 1;
        for _ in 0..object.len {
            let value = child + 1;
            if self.text(child) == key.as_bytes() {
                return Some(value);
            }
            child = self.nodes[value].end as usize;
        }
        None
    }

    fn items(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        let array = self.nodes[node];
        let mut child = node + 1;
        (0..if array.tag == Tag::Array {
            array.len
        } else {
            0
        })
            .map(move |_| {
                let at = child;
                child = self.nodes[at].end as usize;
                at
            })
    }
}

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
    let meta = t.get(0, "metadata");
    if meta.and_then(|m| t.get(m, "deletionTimestamp")).is_some()
        || t.get(0, "kind").map(|k| t.text(k)) != Some(b"Service")
        || t.get(0, "apiVersion").map(|k| t.text(k)) != Some(b"v1")
    {
        return false;
    }
    t.get(0, "spec")
        .and_then(|s| t.get(s, "ports"))
        .is_some_and(|ports| {
            t.items(ports)
                .any(|p| t.get(p, "port").map(|n| t.text(n)) == Some(b"443"))
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
    let tape_parse = parse(5, &|t| Tape::parse(t).map_or(0, |t| t.nodes.len()));

    let values: Vec<Value> = texts
        .iter()
        .map(|t| serde_json::from_slice(t).expect("parses"))
        .collect();
    let tapes: Vec<Tape> = texts
        .iter()
        .map(|t| Tape::parse(t).expect("parses"))
        .collect();
    let agree = values
        .iter()
        .zip(&tapes)
        .all(|(v, t)| walk_value(v) == walk_tape(t));
    assert!(agree, "both layouts must give the same answers");
    let matched = values.iter().filter(|v| walk_value(v)).count();

    let nodes: usize = tapes.iter().map(|t| t.nodes.len()).sum();
    let bytes: usize = tapes.iter().map(|t| t.bytes.len()).sum();
    println!(
        "10,000 Services, {} bytes of JSON and {} nodes each on average; {matched} match",
        bytes / tapes.len(),
        nodes / tapes.len()
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
