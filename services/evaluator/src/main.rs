//! Entry point of the evaluator service: parses config, starts telemetry and runs the service.

fn main() {
    println!("sluice-evaluator {}", env!("CARGO_PKG_VERSION"));
}
