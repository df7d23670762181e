//! Entry point of the reporter: parses config and hands over to the shared service lifecycle.

use clap::Parser;
use sluice_runtime::CommonArgs;

/// mimalloc, as in the evaluator: decoding JSON makes many small allocations, which glibc
/// malloc serves markedly slower (ADR 0016).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-reporter",
    version,
    about = "Keeps EventReports in step with match sets"
)]
struct Config {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: Config = sluice_runtime::parse_config();
    sluice_runtime::serve("reporter", config.common, sluice_reporter::run).await
}
