//! Entry point of the applier: parses config and hands over to the shared service lifecycle.

use clap::Parser;
use sluice_runtime::CommonArgs;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-applier",
    version,
    about = "Applies ClusterProfiles and instantiated ConfigMaps/Secrets, and cleans up"
)]
struct Config {
    #[command(flatten)]
    common: CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: Config = sluice_runtime::parse_config();
    sluice_runtime::serve("applier", config.common, sluice_applier::run).await
}
