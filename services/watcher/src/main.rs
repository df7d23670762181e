//! Entry point of the watcher: parses config and hands over to the shared service lifecycle.

use clap::Parser;
use sluice_runtime::CommonArgs;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-watcher",
    version,
    about = "Watches the management and managed clusters and publishes what changes"
)]
struct Config {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: Config = sluice_runtime::parse_config();
    sluice_runtime::serve("watcher", config.common, sluice_watcher::run).await
}
