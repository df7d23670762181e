//! A service's whole `main.rs`: [`service_main!`] names the service, says what it does and
//! which function runs it; the flags (the common ones plus the service's own), the allocator,
//! the async runtime and the lifecycle ([`crate::serve`]) are the same for every service.
//! It does not know what a service does.

use std::future::Future;

use clap::{Args, CommandFactory, Parser};

use crate::{CancellationToken, CommonArgs, Health};

/// No flags besides the common ones.
#[derive(Clone, Debug, Args)]
pub struct NoArgs {}

/// A service's flags: [`CommonArgs`] and its own, `E`.
#[derive(Debug, Parser)]
#[command(version)]
struct ServiceConfig<E: Args> {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    own: E,
}

/// What `--help` says of the span export's variables ([`crate::spans::ENV_VARS`], ADR 0045),
/// marked as clap marks the flags' variables.
const SPANS_HELP: &str = "\
Span export (OpenTelemetry, OTLP/HTTP with protobuf; ADR 0045), from the standard variables:
      The receiver's base URL; unset or empty: no spans exported [env: OTEL_EXPORTER_OTLP_ENDPOINT]
      The receiver's URL for spans, instead [env: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT]
      http/protobuf only [env: OTEL_EXPORTER_OTLP_PROTOCOL] [env: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL]
      otlp or none [env: OTEL_TRACES_EXPORTER]
      always_on, always_off, traceidratio or their parentbased_ forms [env: OTEL_TRACES_SAMPLER]
      The share of traces sampled, 0 to 1 [env: OTEL_TRACES_SAMPLER_ARG]
      true: no spans exported [env: OTEL_SDK_DISABLED]";

/// Turns transparent huge pages off ([`crate::without_huge_pages`]), parses the flags of
/// `binary` (the common ones and `E`; bad ones exit 64) and runs `app` through
/// [`crate::serve`] on the service's [`runtime`].
pub fn main<E, F, Fut>(
    service: &'static str,
    binary: &'static str,
    about: &'static str,
    app: F,
) -> anyhow::Result<()>
where
    E: Args,
    F: FnOnce(CommonArgs, E, Health, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    crate::without_huge_pages();
    let command = ServiceConfig::<E>::command()
        .name(binary)
        .about(about)
        .after_help(SPANS_HELP);
    let config: ServiceConfig<E> = crate::config::parse_command(command, std::env::args_os());
    let own = config.own;
    runtime(&config.common)?.block_on(crate::serve(
        service,
        config.common,
        |common, health, token| app(common, own, health, token),
    ))
}

/// The service's tokio runtime: multi-threaded with `--worker-threads` workers, so that
/// `block_in_place` hands a worker's tasks on while CPU-bound work runs (ADR 0037).
pub fn runtime(common: &CommonArgs) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(common.worker_threads.clamp(1, crate::MAX_WORKER_THREADS))
        .enable_all()
        .build()
}

/// Defines a service binary's allocator and `main`:
/// `service_main!("reporter", "Writes ...", sluice_reporter::run)` for a service with the
/// common flags only (`run(common, health, token)`), or
/// `service_main!("applier", "Applies ...", ApplierArgs, sluice_applier::run)` for one with
/// flags of its own (`ApplierArgs: clap::Args`, `run(common, own, health, token)`). The binary
/// is `sluice-<service>`.
///
/// Every binary allocates with mimalloc (ADR 0016): decoding JSON makes many small
/// allocations, which glibc malloc serves markedly slower.
#[macro_export]
macro_rules! service_main {
    ($service:literal, $about:literal, $run:path) => {
        $crate::service_main!(
            $service,
            $about,
            $crate::NoArgs,
            |common, _: $crate::NoArgs, health, token| $run(common, health, token)
        );
    };
    ($service:literal, $about:literal, $own:ty, $app:expr) => {
        #[global_allocator]
        static ALLOCATOR: $crate::MiMalloc = $crate::MiMalloc;

        fn main() -> $crate::MainResult {
            $crate::service::main::<$own, _, _>(
                $service,
                concat!("sluice-", $service),
                $about,
                $app,
            )
        }
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, Args)]
    struct Own {
        #[arg(long)]
        extra: Option<String>,
    }

    #[test]
    fn a_service_takes_the_common_flags_and_its_own_under_its_name() {
        let command = ServiceConfig::<Own>::command()
            .name("sluice-test")
            .about("tests");
        let config: ServiceConfig<Own> = crate::config::parse_command(
            command,
            [
                "sluice-test",
                "--nats-url",
                "nats://elsewhere:4222",
                "--extra",
                "x",
            ],
        );
        assert_eq!(config.common.nats_url, "nats://elsewhere:4222");
        assert_eq!(config.own.extra.as_deref(), Some("x"));
        let help = ServiceConfig::<NoArgs>::command()
            .name("sluice-test")
            .about("tests")
            .render_help()
            .to_string();
        assert!(
            help.contains("tests") && help.contains("--nats-url"),
            "{help}"
        );
    }

    #[test]
    fn the_runtime_has_the_workers_the_flag_asks_for() {
        let workers = |args: &[&str]| {
            let command = ServiceConfig::<NoArgs>::command().name("sluice-test");
            let config: ServiceConfig<NoArgs> = crate::config::parse_command(
                command,
                std::iter::once("sluice-test").chain(args.iter().copied()),
            );
            runtime(&config.common).unwrap().metrics().num_workers()
        };
        assert_eq!(workers(&[]), 1);
        assert_eq!(workers(&["--worker-threads=3"]), 3);
    }

    #[test]
    fn the_help_names_every_span_variable_read() {
        let named: std::collections::BTreeSet<&str> = SPANS_HELP
            .split("[env: ")
            .skip(1)
            .filter_map(|rest| rest.split(']').next())
            .collect();
        let read: std::collections::BTreeSet<&str> =
            crate::spans::ENV_VARS.iter().copied().collect();
        assert_eq!(named, read);
    }
}
