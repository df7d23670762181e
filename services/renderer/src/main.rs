//! Entry point of the renderer: the shared service lifecycle around `sluice_renderer::run_partition`.

sluice_runtime::service_main!(
    "renderer",
    "Renders what each EventTrigger wants for each cluster",
    sluice_wire::service::PartitionArgs,
    sluice_renderer::run_partition
);
