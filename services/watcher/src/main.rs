//! Entry point of the watcher service: parses config, starts telemetry and runs the service.

fn main() {
    println!("sluice-watcher {}", env!("CARGO_PKG_VERSION"));
}
