//! Entry point of the renderer service: parses config, starts telemetry and runs the service.

fn main() {
    println!("sluice-renderer {}", env!("CARGO_PKG_VERSION"));
}
