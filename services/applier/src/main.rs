//! Entry point of the applier service: parses config, starts telemetry and runs the service.

fn main() {
    println!("sluice-applier {}", env!("CARGO_PKG_VERSION"));
}
