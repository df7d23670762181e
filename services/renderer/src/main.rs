//! Entry point of the renderer: parses config and hands over to the shared service lifecycle.

use clap::Parser;
use sluice_runtime::CommonArgs;

/// mimalloc, as in the evaluator: decoding JSON makes many small allocations, which glibc
/// malloc serves markedly slower (ADR 0016).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-renderer",
    version,
    about = "Renders what each EventTrigger wants for each cluster"
)]
struct Config {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: Config = sluice_runtime::parse_config();
    sluice_runtime::serve("renderer", config.common, sluice_renderer::run).await
}
