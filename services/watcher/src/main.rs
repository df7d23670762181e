//! Entry point of the watcher: the shared service lifecycle around the watcher and its CRD
//! conversion webhook.

sluice_runtime::service_main!(
    "watcher",
    "Watches the management and managed clusters and publishes what changes",
    sluice_watcher::WatcherArgs,
    sluice_watcher::run_with_webhook
);
