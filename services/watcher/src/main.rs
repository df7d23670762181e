//! Entry point of the watcher: parses config and hands over to the shared service lifecycle.

use clap::Parser;
use sluice_runtime::CommonArgs;

/// mimalloc, as in the evaluator: decoding JSON makes many small allocations, which glibc
/// malloc serves markedly slower (ADR 0016).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-watcher",
    version,
    about = "Watches the management and managed clusters and publishes what changes"
)]
struct Config {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    webhook: sluice_watcher::webhook::WebhookArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config: Config = sluice_runtime::parse_config();
    let webhook = config.webhook;
    sluice_runtime::serve("watcher", config.common, |common, health, token| {
        sluice_watcher::run_with_webhook(common, webhook, health, token)
    })
    .await
}
