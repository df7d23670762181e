//! Per-render timing over the bench fixtures, printed like the Go oracle's `bench-template`
//! (`ns_per_render`), so that both can be run back to back:
//! `bench FIXTURE.json ITERATIONS [shared|event|decode-doc|decode-value]`. Every render starts
//! from the decoded event (a [`Doc`], as the renderer decodes a match set's resources, ADR 0015)
//! and produces a fresh `String`: `shared` wraps it (`event_data_shared`, one allocation) and
//! renders; `event` renders it in place (`Template::render_event`). The decode modes time what
//! comes before, untimed in the others and in Go's: decoding the fixture's data from JSON text
//! into a `Doc` or, as before ADR 0015, into a `serde_json::Value`.

use std::sync::Arc;
use std::time::Instant;

use sluice_template::{event_data_shared, oracle, Doc, Options, Template};

// The allocator the renderer runs with (ADR 0016), so that the figures are what it pays.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    let json_text = serde_json::to_string(&fixture["data"])?;
    let data: Arc<Doc> = Arc::new(serde_json::from_str(&json_text)?);
    if let Some(kind) = mode.strip_prefix("decode-") {
        return decode(&json_text, kind, iterations);
    }
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

/// Times decoding `text` into a `Doc` (`doc`) or a `serde_json::Value` (`value`).
fn decode(text: &str, kind: &str, iterations: u64) -> Result<(), Box<dyn std::error::Error>> {
    let once = |text: &str| -> Result<(), Box<dyn std::error::Error>> {
        match kind {
            "doc" => drop(std::hint::black_box(serde_json::from_str::<Doc>(text)?)),
            "value" => drop(std::hint::black_box(serde_json::from_str::<
                serde_json::Value,
            >(text)?)),
            other => return Err(format!("unknown decode {other:?} (doc or value)").into()),
        }
        Ok(())
    };
    for _ in 0..iterations / 10 + 1 {
        once(text)?;
    }
    let start = Instant::now();
    for _ in 0..iterations {
        once(text)?;
    }
    let elapsed = start.elapsed();
    println!(
        "{{\"ns_per_decode\":{:.1},\"input_bytes\":{},\"iterations\":{iterations},\"mode\":\"decode-{kind}\"}}",
        elapsed.as_nanos() as f64 / iterations as f64,
        text.len()
    );
    Ok(())
}

/// One timed render, from the decoded event JSON to a fresh `String`.
fn render_once(
    template: &Template,
    data: &Arc<Doc>,
    mode: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    Ok(match mode {
        "event" => template.render_event(data)?,
        "shared" => template.render(&event_data_shared(Arc::clone(data)))?,
        other => return Err(format!("unknown mode {other:?} (shared or event)").into()),
    })
}
