//! Entry point of the reporter: the shared service lifecycle around `sluice_reporter::run`.

sluice_runtime::service_main!(
    "reporter",
    "Keeps EventReports in step with match sets",
    sluice_reporter::run
);
