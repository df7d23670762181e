//! Entry point of the evaluator: the shared service lifecycle around `sluice_evaluator::run`.

sluice_runtime::service_main!(
    "evaluator",
    "Decides which objects each EventSource selects and publishes match sets",
    sluice_evaluator::run
);
