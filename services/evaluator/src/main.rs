//! Entry point of the evaluator: parses config and hands over to the shared service lifecycle.

use clap::Parser;
use sluice_runtime::CommonArgs;

// The stage allocates and frees many small values per change (parsed objects, match-set
// entries, bus messages); mimalloc measured faster than glibc malloc for it (docs/measurements.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-evaluator",
    version,
    about = "Decides which objects each EventSource selects and publishes match sets"
)]
struct Config {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: Config = sluice_runtime::parse_config();
    sluice_runtime::serve("evaluator", config.common, sluice_evaluator::run).await
}
