//! `sluice`: the user-facing command line tool. Thin: each subcommand calls a library.

use std::io::Read;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// mimalloc, as in the evaluator: decoding JSON makes many small allocations, which glibc
/// malloc serves markedly slower (ADR 0016).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Event-driven add-on distribution for fleets of Kubernetes clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the local stack (NATS, the API test server, the five services) and seed 000's
    /// first example: a Service event becomes a ClusterProfile, and goes away again.
    Demo {
        /// Keep the stack running afterwards (Ctrl-C stops it); kubeconfig in --dir.
        #[arg(long)]
        keep_running: bool,
        /// Where to write kubeconfigs.
        #[arg(long, default_value = ".sluice")]
        dir: PathBuf,
        /// Afterwards, measure create-to-ClusterProfile latency over this many Services.
        #[arg(long)]
        bench: Option<usize>,
        /// Instead of the demo, measure one trigger's reconcile over a fleet:
        /// `<clusters>x<Services per cluster>`, e.g. `100x100`.
        #[arg(long, value_parser = parse_fleet)]
        fleet: Option<(usize, usize)>,
        /// With `--fleet`: spread the clusters round-robin over this many shards
        /// (`sharding.projectsveltos.io/key`), each watched by a watcher of its own (ADR 0050).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        shards: u16,
        /// With `--fleet`: run the evaluator and the renderer as this many partitions each,
        /// every one owning the clusters whose name hashes to it (ADR 0051).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
        partitions: u16,
        /// Instead of the demo, measure seed 004's CloudEvent path: this many logins one at a
        /// time (publish -> ClusterProfile latency), then as many back to back (throughput).
        #[arg(long)]
        cloudevents: Option<usize>,
        /// Instead of the demo, open-loop load on seed 000's NetworkPolicy trigger:
        /// `<Services per second>x<count>`, e.g. `1000x2000`, created then deleted at that rate
        /// after `--preload` matching Services; prints latency percentiles, and CPU and context
        /// switches per event.
        #[arg(long, value_parser = parse_load)]
        load: Option<(f64, usize)>,
        /// With `--load`: matching Services created and converged first.
        #[arg(long, default_value_t = 0)]
        preload: usize,
        /// With `--load`: also time each hop of the pipeline (watcher, evaluator, renderer,
        /// applier) from the bus; its subscriptions add to nats-server's CPU.
        #[arg(long)]
        hops: bool,
        /// With `--load`: once the preloaded Services' ClusterProfiles exist, delete them all
        /// by hand at once and time until the applier has written them all again.
        #[arg(long)]
        repair: bool,
        /// With `--load`: once the preloaded Services' ClusterProfiles exist, stop this
        /// service (e.g. `sluice-applier`), start it again and time until it is ready.
        #[arg(long, value_name = "SERVICE")]
        restart: Option<String>,
        /// With `--load`: run this service as two processes with leader election (set
        /// `SLUICE_LEADER_ELECT=true`) and kill the lease holder halfway through the creates;
        /// the standby takes over and nothing may be lost.
        #[arg(long, value_name = "SERVICE")]
        failover: Option<String>,
    },
    /// Kubernetes API test server for tests and demos only, never production.
    Testserver(sluice_testserver::CliArgs),
    /// Prepare a running API test server (docker-compose's one-shot job): the RBAC of k8s/base,
    /// a kubeconfig per service as its ServiceAccount, managed clusters registered the Sveltos
    /// way, optionally seed 000's first example, and a kubeconfig for the host.
    Setup(sluice_cli::setup::SetupArgs),
    /// Exit 0 when a plain-HTTP GET of the URL answers 2xx (container health checks).
    Probe {
        /// e.g. `http://127.0.0.1:8080/healthz`
        url: String,
    },
    /// Print pipeline messages on a subject (wildcards allowed), decoded from protobuf.
    Tap {
        /// Subject filter, e.g. `sluice.v1.>` or `sluice.v1.desired.>`.
        #[arg(default_value = sluice_bus::topology::ALL)]
        subject: String,
        #[arg(long, env = "SLUICE_NATS_URL", default_value = "nats://127.0.0.1:4222")]
        nats_url: String,
        /// The tap's NATS identity and TLS files (the services' options and variables).
        #[command(flatten)]
        nats_auth: sluice_runtime::NatsAuth,
        #[arg(short = 'o', long, value_enum, default_value = "yaml")]
        output: sluice_cli::tap::Format,
        /// Stop after this many messages.
        #[arg(long)]
        count: Option<usize>,
    },
    /// Print the nats-server authorization (an include file) that admits each identity of the
    /// topology with exactly the subjects it uses: `NAME=PUBLIC_NKEY` pairs (names: watcher,
    /// evaluator, reporter, renderer, applier, tap, admin), and/or seeds generated into a directory.
    NatsConfig {
        /// `NAME=PUBLIC_NKEY`, e.g. `evaluator=UABC...`.
        nkeys: Vec<String>,
        /// Write a seed file `<name>.nk` for every identity and the administrator into this
        /// directory (existing seeds are kept) and include their public keys.
        #[arg(long)]
        generate: Option<PathBuf>,
        /// Also print the server's TLS block: its certificate...
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// ...its private key...
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// ...and the CA that signed the clients' certificates (the server then verifies them).
        #[arg(long, requires = "tls_cert")]
        tls_client_ca: Option<PathBuf>,
        /// Instead: issue a secured local bus into this directory unless it holds one already
        /// (docker-compose's first start): a CA, the server's certificate for host `nats`, per
        /// identity and `admin` a seed `<name>.nk` and a client certificate `<name>.crt`/`.key`,
        /// a bus key `bus.key`, and the server configuration `nats.conf` (TLS, clients verified,
        /// the generated authorization).
        #[arg(long, conflicts_with_all = ["nkeys", "generate", "tls_cert"])]
        issue: Option<PathBuf>,
    },
    /// What sluice would write for EventSources, EventTriggers and a managed cluster's
    /// resources, computed offline by the services' own stages: the ClusterProfiles and
    /// ConfigMaps/Secrets on stdout (YAML, or a JSON `List`), every failure on stderr with
    /// where it is; exits 1 when something fails. E.g.
    /// `sluice dry-run -f examples/seed-000-networkpolicy --cluster-label env=fv`.
    DryRun(sluice_cli::dryrun::DryRunArgs),
    /// Evaluate an EventSource offline: the oracle's `eventsource` request JSON on stdin
    /// (one object or an array), the response JSON on stdout.
    Eval,
    /// Render a template offline: the oracle's `template` request JSON on stdin (one object or
    /// an array), the response JSON on stdout.
    Render,
}

fn parse_load(text: &str) -> Result<(f64, usize), String> {
    let (rate, count) = text
        .split_once('x')
        .ok_or_else(|| format!("{text:?}: expected <rate>x<count>, e.g. 1000x2000"))?;
    let rate: f64 = rate.parse().map_err(|e| format!("rate {rate:?}: {e}"))?;
    let count: usize = count.parse().map_err(|e| format!("count {count:?}: {e}"))?;
    if rate.is_nan() || rate <= 0.0 || count == 0 {
        return Err(format!("{text:?}: rate and count must be positive"));
    }
    Ok((rate, count))
}

fn parse_fleet(text: &str) -> Result<(usize, usize), String> {
    let (clusters, resources) = text
        .split_once('x')
        .ok_or_else(|| format!("{text:?}: expected <clusters>x<resources>, e.g. 100x100"))?;
    let number = |s: &str| {
        s.parse::<usize>()
            .map_err(|e| format!("{text:?}: {s:?} is not a count: {e}"))
    };
    Ok((number(clusters)?, number(resources)?))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    sluice_runtime::without_huge_pages();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo {
            keep_running,
            dir,
            bench,
            fleet,
            shards,
            partitions,
            cloudevents,
            load,
            preload,
            hops,
            repair,
            restart,
            failover,
        } => {
            tracing_subscriber::fmt().with_env_filter("warn").init();
            if let Some((rate, count)) = load {
                let options = sluice_cli::load::LoadOptions {
                    preload,
                    rate,
                    count,
                    hops,
                    repair,
                    restart,
                    failover,
                };
                let report = sluice_cli::load::measure(&options, &mut std::io::stdout()).await?;
                let (p50, p99, max) = sluice_cli::demo::percentiles(&report.create);
                println!(
                    "open loop, {} matching before, {count} Services at {rate}/s: create -> ClusterProfile p50 {p50:?}, p99 {p99:?}, max {max:?}",
                    report.preload
                );
                let (p50, p99, max) = sluice_cli::demo::percentiles(&report.delete);
                println!("  delete -> ClusterProfile gone p50 {p50:?}, p99 {p99:?}, max {max:?}");
                println!(
                    "  CPU per event, all processes: {:?} (of which the load generator and observer: {:?}); context switches per event: {:.1}",
                    report.cpu_per_event(),
                    report.load_generator_cpu_per_event(),
                    report.switches_per_event(None)
                );
                for (((name, seconds), (_, rss)), (_, creates)) in report
                    .cpu
                    .iter()
                    .zip(&report.peak_rss_kb)
                    .zip(&report.create_cpu)
                {
                    println!(
                        "    {name}: {seconds:.2} s CPU ({creates:.2} s until the creates were done), {:.1} context switches per event, peak RSS {} MB",
                        report.switches_per_event(Some(name)),
                        rss / 1024
                    );
                }
                println!(
                    "    of the sluice process's CPU, the API test server's threads: {:.2} s",
                    report.api_server_cpu
                );
                let ms = |observed: &sluice_cli::load::Observed, q| match observed.quantile_bound(q)
                {
                    None => "-".to_string(),
                    Some(b) if b.is_infinite() => "over 30 s".to_string(),
                    Some(b) => format!("{} ms", b * 1000.0),
                };
                if let Some(applier) = report.inside.iter().find(|i| i.consumer == "applier") {
                    let ages = &applier.age;
                    println!(
                        "  the applier's own sluice_event_age_seconds over the creates: {} inputs, {:.1} % within 25 ms, p50 <= {}, p99 <= {}",
                        ages.count(),
                        100.0 * ages.share_within(0.025).unwrap_or(0.0),
                        ms(ages, 0.5),
                        ms(ages, 0.99)
                    );
                }
                for inside in &report.inside {
                    let count = |observed: &sluice_cli::load::Observed, q| {
                        observed
                            .quantile_bound(q)
                            .map_or("-".to_string(), |b| b.to_string())
                    };
                    println!(
                        "    {}/{} over the creates, p50/p99 at most: input wait {}/{}, batch {}/{}, inputs per batch {}/{}, event age {}/{}",
                        inside.consumer,
                        inside.stream,
                        ms(&inside.wait, 0.5),
                        ms(&inside.wait, 0.99),
                        ms(&inside.batch, 0.5),
                        ms(&inside.batch, 0.99),
                        count(&inside.inputs, 0.5),
                        count(&inside.inputs, 0.99),
                        ms(&inside.age, 0.5),
                        ms(&inside.age, 0.99),
                    );
                }
                for (phase, hops) in ["create", "delete"]
                    .iter()
                    .zip(report.hops.iter().flatten())
                {
                    let timed: Vec<String> = hops
                        .iter()
                        .filter(|(_, d)| !d.is_empty())
                        .map(|(hop, d)| {
                            let (p50, p99, _) = sluice_cli::demo::percentiles(d);
                            format!("{hop} {p50:.1?}/{p99:.1?}")
                        })
                        .collect();
                    println!(
                        "  {phase} hops, p50/p99 after the one before: {}",
                        timed.join(", ")
                    );
                }
                return Ok(());
            }
            if let Some(events) = cloudevents.filter(|n| *n > 0) {
                let report =
                    sluice_cli::cloudevents::measure(events, &mut std::io::stdout()).await?;
                let (p50, p99, max) = sluice_cli::demo::percentiles(&report.latencies);
                println!(
                    "CloudEvent publish -> ClusterProfile, {events} single events: p50 {p50:?}, p99 {p99:?}, max {max:?}"
                );
                println!(
                    "{} CloudEvents back to back: all ClusterProfiles in {:?} ({:.0} events/s)",
                    report.burst,
                    report.burst_elapsed,
                    report.burst as f64 / report.burst_elapsed.as_secs_f64()
                );
                return Ok(());
            }
            if let Some((clusters, resources)) = fleet {
                let shards = usize::from(shards);
                let spread = sluice_cli::fleet::Spread { shards, partitions };
                let report =
                    sluice_cli::fleet::measure(clusters, resources, spread, &mut std::io::stdout())
                        .await?;
                println!(
                    "fleet {}x{} in {} shard(s) and {} partition(s): trigger applied -> all ClusterProfiles in {:?}; trigger deleted -> all gone in {:?}",
                    report.clusters, report.resources, shards, partitions, report.reconcile, report.teardown
                );
                return Ok(());
            }
            let stack =
                sluice_cli::stack::Stack::start(&["cluster-a", "cluster-b"], Some(&dir)).await?;
            let mut stdout = std::io::stdout();
            let outcome = sluice_cli::demo::run(&stack, &mut stdout).await;
            if let Err(error) = &outcome {
                eprintln!("demo failed: {error:#}\n{}", stack.logs());
            }
            let (created, deleted) = outcome?;
            println!("\nsummary: event -> ClusterProfile in {created:?}; delete -> cleanup in {deleted:?}");
            if let Some(events) = bench.filter(|n| *n > 0) {
                for (accumulate, label) in
                    [(false, "single events"), (true, "accumulating matches")]
                {
                    let samples =
                        sluice_cli::demo::measure_latency(&stack, events, accumulate).await?;
                    let (p50, p99, max) = sluice_cli::demo::percentiles(&samples);
                    println!(
                        "latency Service create -> ClusterProfile, {events} {label}: p50 {p50:?}, p99 {p99:?}, max {max:?}"
                    );
                }
            }
            if keep_running {
                println!(
                    "stack running: kubectl --kubeconfig {}/kubeconfig.yaml --context mgmt get clusterprofiles\n\
                     tap the pipeline: {} sluice tap --nats-url {} 'sluice.v1.>'\nCtrl-C to stop",
                    dir.display(),
                    stack
                        .nats_credentials
                        .env("tap")
                        .iter()
                        .map(|(var, value)| format!("{var}={value}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    stack.nats_url(),
                );
                tokio::signal::ctrl_c().await?;
            }
            Ok(())
        }
        Command::Testserver(args) => sluice_testserver::run_cli(args).await,
        Command::Setup(args) => sluice_cli::setup::run(&args, &mut std::io::stdout()).await,
        Command::Probe { url } => sluice_cli::setup::probe(&url).await,
        Command::Tap {
            subject,
            nats_url,
            nats_auth,
            output,
            count,
        } => {
            let bus = sluice_bus::BusOptions::new(nats_url)
                .with_identity(sluice_bus::topology::TAP)
                .with_auth(nats_auth);
            sluice_cli::tap::run(&bus, &subject, output, count).await
        }
        Command::NatsConfig {
            nkeys,
            generate,
            tls_cert,
            tls_key,
            tls_client_ca,
            issue,
        } => {
            if let Some(dir) = issue {
                let issued = sluice_cli::natsauth::issue_once(&dir)?;
                let what = if issued { "issued" } else { "kept" };
                eprintln!("nats-config: secured bus {what} in {}", dir.display());
                return Ok(());
            }
            let tls = tls_cert.zip(tls_key).map(|(cert_file, key_file)| {
                sluice_cli::natsauth::ServerTls {
                    cert_file,
                    key_file,
                    verify_clients_with: tls_client_ca,
                }
            });
            sluice_cli::natsauth::run(
                &nkeys,
                generate.as_deref(),
                tls.as_ref(),
                &mut std::io::stdout(),
            )
        }
        Command::DryRun(args) => {
            let clean = sluice_cli::dryrun::run(
                &args,
                &mut std::io::stdout().lock(),
                &mut std::io::stderr().lock(),
            )?;
            if !clean {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Eval => {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input)?;
            println!("{}", sluice_eval::oracle::run(&input));
            Ok(())
        }
        Command::Render => {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input)?;
            println!("{}", sluice_template::oracle::run(&input));
            Ok(())
        }
    }
}
