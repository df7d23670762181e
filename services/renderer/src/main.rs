//! Entry point of the renderer: the shared service lifecycle around `sluice_renderer::run`.

sluice_runtime::service_main!(
    "renderer",
    "Renders what each EventTrigger wants for each cluster",
    sluice_renderer::run
);
