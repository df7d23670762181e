//! Per-render timing over the bench fixtures, printed like the Go oracle's `bench-template`
//! (`ns_per_render`), so that both can be run back to back:
//! `bench FIXTURE.json ITERATIONS [shared|event]`. Every render starts from the decoded event
//! JSON and produces a fresh `String`: `shared` wraps it (`event_data_shared`, one allocation)
//! and renders; `event` renders it in place (`Template::render_event`).

use std::sync::Arc;
use std::time::Instant;

use sluice_template::{event_data_shared, oracle, Options, Template};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: bench FIXTURE.json ITERATIONS")?;
    let iterations: u64 = args.next().unwrap_or_else(|| "10000".into()).parse()?;
    let mode = args.next().unwrap_or_else(|| "shared".into());
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let text = fixture["template"]
        .as_str()
        .ok_or("fixture has no template")?;
    let options = Options {
        name: oracle::DEFAULT_NAME.into(),
        ..Options::default()
    };
    let template = Template::parse(text, &options)?;
    let data = Arc::new(fixture["data"].clone());
    let mut bytes = 0;
    // One untimed pass, as the oracle's warm-up.
    for _ in 0..iterations / 10 + 1 {
        bytes = render_once(&template, &data, &mode)?.len();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        let out = render_once(&template, &data, &mode)?;
        std::hint::black_box(out);
    }
    let elapsed = start.elapsed();
    println!(
        "{{\"ns_per_render\":{:.1},\"output_bytes\":{bytes},\"iterations\":{iterations},\"mode\":\"{mode}\"}}",
        elapsed.as_nanos() as f64 / iterations as f64
    );
    Ok(())
}

/// One timed render, from the decoded event JSON to a fresh `String`.
fn render_once(
    template: &Template,
    data: &Arc<serde_json::Value>,
    mode: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    Ok(match mode {
        "event" => template.render_event(data)?,
        "shared" => template.render(&event_data_shared(Arc::clone(data)))?,
        other => return Err(format!("unknown mode {other:?} (shared or event)").into()),
    })
}
