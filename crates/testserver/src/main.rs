//! Standalone `sluice-testserver` binary: parses flags and runs the test server (tests and demos only).

use clap::Parser;

/// mimalloc, as in the evaluator: decoding JSON makes many small allocations, which glibc
/// malloc serves markedly slower (ADR 0016).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    // Without transparent huge pages, as every sluice binary (ADR 0040).
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let cli = sluice_testserver::Cli::parse();
    if let Err(error) = sluice_testserver::run_cli(cli.args).await {
        eprintln!("sluice-testserver: {error:#}");
        std::process::exit(1);
    }
}
