//! Entry point of the reporter: parses config, starts telemetry and health, runs the service.

use clap::Parser;
use sluice_runtime::{CommonArgs, Health};

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
    if let Err(error) = config.common.validate() {
        sluice_runtime::exit_on_bad_config(error);
    }
    sluice_runtime::init_telemetry("reporter", config.common.log_format)?;
    tracing::info!(config = %config.common.redacted(), "starting sluice-reporter");
    let token = sluice_runtime::shutdown_token()?;
    let health = Health::new();
    let server =
        sluice_runtime::serve_health(config.common.health_addr, health.clone(), token.clone())
            .await?;
    sluice_reporter::run(config.common, health, token).await?;
    server.await?;
    Ok(())
}
