//! Entry point of the applier: the shared service lifecycle around `sluice_applier::run`.

sluice_runtime::service_main!(
    "applier",
    "Applies ClusterProfiles and instantiated ConfigMaps/Secrets, and cleans up",
    sluice_applier::ApplierArgs,
    sluice_applier::run
);
