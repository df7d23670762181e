//! Rendering benchmarks over the fixtures in `benches/data/` (the same templates and data the
//! Go oracle's `bench-template` mode is run on, see `oracle.sh`). Every "render" figure includes
//! turning the event's decoded JSON into template values, which Go's preparsed figure does not.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Arc;

use sluice_template::{event_data, event_data_shared, oracle, Options, Template, TemplateCache};

fn fixture(name: &str) -> (String, serde_json::Value) {
    let path = format!("{}/benches/data/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    let template = json["template"]
        .as_str()
        .expect("fixture template")
        .to_string();
    (template, json["data"].clone())
}

fn bench(c: &mut Criterion) {
    let options = Options {
        name: oracle::DEFAULT_NAME.into(),
        ..Options::default()
    };
    for name in ["networkpolicy", "ingress-50", "helm-values-200"] {
        let (text, data) = fixture(name);
        let template = Template::parse(&text, &options).expect("fixture parses");
        let values = event_data(&data);
        let expected = template.render(&values).expect("fixture renders");
        let shared = Arc::new(sluice_template::Doc::from(&data));
        let mut group = c.benchmark_group(name);
        // What the renderer does per event and template: wrap the decoded event JSON (shared
        // by all its templates) and render; only what the template reads is converted.
        group.bench_function("shared+render", |b| {
            b.iter(|| {
                let values = event_data_shared(Arc::clone(black_box(&shared)));
                let out = template.render(&values).expect("render");
                debug_assert_eq!(out, expected);
                out
            })
        });
        group.bench_function("convert+render", |b| {
            b.iter(|| {
                let values = event_data(black_box(&data));
                let out = template.render(&values).expect("render");
                debug_assert_eq!(out, expected);
                out
            })
        });
        group.bench_function("render", |b| {
            b.iter(|| template.render(black_box(&values)).expect("render"))
        });
        let cache = TemplateCache::new(64);
        group.bench_function("cache+shared+render", |b| {
            b.iter(|| {
                let t = cache
                    .get_or_parse(black_box(&text), &options)
                    .expect("parse");
                t.render(&event_data_shared(Arc::clone(black_box(&shared))))
                    .expect("render")
            })
        });
        group.bench_function("parse+convert+render", |b| {
            b.iter(|| {
                let t = Template::parse(black_box(&text), &options).expect("parse");
                t.render(&event_data(black_box(&data))).expect("render")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
