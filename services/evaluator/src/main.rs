//! Entry point of the evaluator: the shared service lifecycle around `sluice_evaluator::run_partition`.

sluice_runtime::service_main!(
    "evaluator",
    "Decides which objects each EventSource selects and publishes match sets",
    sluice_wire::service::PartitionArgs,
    sluice_evaluator::run_partition
);
