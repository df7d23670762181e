//! Entry point of the applier: parses config, starts telemetry and health, runs the service.

use clap::Parser;
use sluice_runtime::{CommonArgs, Health};

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
    if let Err(error) = config.common.validate() {
        sluice_runtime::exit_on_bad_config(error);
    }
    sluice_runtime::init_telemetry("applier", config.common.log_format)?;
    tracing::info!(config = %config.common.redacted(), "starting sluice-applier");
    let token = sluice_runtime::shutdown_token()?;
    let health = Health::new();
    let server =
        sluice_runtime::serve_health(config.common.health_addr, health.clone(), token.clone())
            .await?;
    sluice_applier::run(config.common, health, token).await?;
    server.await?;
    Ok(())
}
