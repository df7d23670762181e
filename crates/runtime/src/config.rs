//! The configuration every service accepts (flags with environment fallbacks), its validation,
//! and the bad-config exit path. Service-specific options live in each service.

use std::fmt::{self, Display};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};

use crate::error::{Error, Result};

/// Exit code for unusable configuration (`EX_USAGE` from sysexits.h).
pub const EXIT_BAD_CONFIG: i32 = 64;

/// Environment variable holding the tracing filter (`info` when unset).
pub const LOG_FILTER_ENV: &str = "RUST_LOG";

/// Options shared by all five services; flatten it into a service's clap struct with
/// `#[command(flatten)] common: CommonArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct CommonArgs {
    /// NATS server URL; several servers of one cluster separated by commas
    /// (`nats://a:4222,nats://b:4222`), as NATS clients take them
    #[arg(long, env = "SLUICE_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,

    /// Kubeconfig file of the management cluster; without it: in-cluster config, then KUBECONFIG
    #[arg(long, env = "SLUICE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Context to use from the kubeconfig (its current context when unset)
    #[arg(long, env = "SLUICE_KUBE_CONTEXT")]
    pub kube_context: Option<String>,

    /// Address of the /healthz, /readyz and /metrics endpoint
    #[arg(long, env = "SLUICE_HEALTH_ADDR", default_value = "0.0.0.0:8080")]
    pub health_addr: SocketAddr,

    /// Log line format
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Namespace holding the Sveltos resources (EventReports, ClusterProfiles, ConfigMaps)
    #[arg(
        long,
        env = "SLUICE_SVELTOS_NAMESPACE",
        default_value = "projectsveltos"
    )]
    pub sveltos_namespace: String,

    /// File holding the 32-byte key (raw or base64) that seals Secret contents on the bus;
    /// without it, no Secret contents go on the bus
    #[arg(long, env = "SLUICE_BUS_KEY_FILE")]
    pub bus_key_file: Option<PathBuf>,

    /// How the service authenticates to NATS and verifies it (nkey, CA, client certificate)
    #[command(flatten)]
    pub nats_auth: NatsAuth,

    /// JetStream replicas of every stream the service creates (3 for a NATS cluster)
    #[arg(long, env = "SLUICE_STREAM_REPLICAS", default_value_t = 1)]
    pub stream_replicas: usize,

    /// Microseconds a batch of inputs may wait for more after its first, while inputs come
    /// faster than one per two lingers (0: never wait); fewer wake-ups per event at high rates
    #[arg(long, env = "SLUICE_LINGER_US", default_value_t = DEFAULT_LINGER_US)]
    pub linger_us: u64,

    /// Threads of the service's async runtime; CPU-bound work runs beside them, so one keeps
    /// the bus and the API calls going (ADR 0037). Replicas, not threads, scale a service out
    #[arg(long, env = "SLUICE_WORKER_THREADS", default_value_t = DEFAULT_WORKER_THREADS)]
    pub worker_threads: usize,

    /// Do the service's work only while holding its lease on the bus, so that of several
    /// replicas one works and the others stand by to take over (ADR 0046)
    #[arg(
        long,
        env = "SLUICE_LEADER_ELECT",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true"
    )]
    pub leader_elect: bool,

    /// How long the lease stands after its holder last renewed it (whole seconds)
    #[arg(long, env = "SLUICE_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,

    /// How long the holder goes on without renewing before it stops (the process exits 75)
    #[arg(long, env = "SLUICE_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,

    /// How often the holder renews the lease and a standby looks at it
    #[arg(long, env = "SLUICE_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
}

/// How long a service's lease lasts and how often it is renewed (ADR 0046): Kubernetes's leader
/// election's parameters and defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a lease record stands after it is written (whole seconds: NATS message TTLs are).
    pub duration: Duration,
    /// How long a holder acts without a successful renewal before it counts the lease as lost.
    pub renew_deadline: Duration,
    /// How often a holder renews and a standby looks again.
    pub retry_period: Duration,
}

impl LeaseTiming {
    /// 15 s, 10 s, 2 s.
    pub const DEFAULT: LeaseTiming = LeaseTiming {
        duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };

    /// Why these cannot keep one holder at a time, if they cannot: the duration must be whole
    /// seconds, the deadline shorter than it (the holder stops before its record expires), and
    /// the period shorter than the deadline (a holder renews before it gives up).
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.duration < Duration::from_secs(1) || self.duration.subsec_nanos() != 0 {
            return Err(format!(
                "the lease duration must be whole seconds, at least 1s (got {:?})",
                self.duration
            ));
        }
        if self.renew_deadline >= self.duration {
            return Err(format!(
                "the renew deadline ({:?}) must be shorter than the lease duration ({:?})",
                self.renew_deadline, self.duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "the retry period ({:?}) must be above zero and shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}

/// A duration as Go and Kubernetes write them: numbers with units, `ms`, `s`, `m` or `h`
/// (`15s`, `500ms`, `1m30s`); `0` alone for none.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 15s, 500ms or 1m30s");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit] {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.checked_mul(60).ok_or_else(bad)?),
            "h" => Duration::from_secs(number.checked_mul(3600).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        total = total.checked_add(part).ok_or_else(bad)?;
        rest = &rest[unit..];
    }
    Ok(total)
}

/// The default of `--linger-us` (ADR 0036).
pub const DEFAULT_LINGER_US: u64 = 2_000;

/// The default of `--worker-threads` (ADR 0037).
pub const DEFAULT_WORKER_THREADS: usize = 1;

/// The most `--worker-threads` a service accepts.
pub const MAX_WORKER_THREADS: usize = 256;

/// The NATS identity and TLS files of a client: every service's, and the CLI's (`sluice tap`).
/// Files are read when connecting, so a missing one fails that connection and names the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct NatsAuth {
    /// File holding this client's nkey seed (its NATS identity); anonymous when unset
    #[arg(long, env = "SLUICE_NATS_NKEY_FILE")]
    pub nats_nkey_file: Option<PathBuf>,

    /// CA bundle (PEM) that signed the NATS server's certificate; TLS is required when set
    #[arg(long, env = "SLUICE_NATS_CA_FILE")]
    pub nats_ca_file: Option<PathBuf>,

    /// Client certificate (PEM) for servers that verify clients (mTLS); needs --nats-key-file
    #[arg(long, env = "SLUICE_NATS_CERT_FILE", requires = "nats_key_file")]
    pub nats_cert_file: Option<PathBuf>,

    /// Private key (PEM) of the client certificate; needs --nats-cert-file
    #[arg(long, env = "SLUICE_NATS_KEY_FILE", requires = "nats_cert_file")]
    pub nats_key_file: Option<PathBuf>,
}

/// JetStream's largest replica count.
pub const MAX_STREAM_REPLICAS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl CommonArgs {
    /// Every flag at its default, but NATS at `nats_url` and the health endpoint on a free local
    /// port: a service run in-process beside others (tests, tools).
    pub fn local(nats_url: &str) -> CommonArgs {
        CommonArgs {
            nats_url: nats_url.to_string(),
            kubeconfig: None,
            kube_context: None,
            health_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log_format: LogFormat::Text,
            sveltos_namespace: "projectsveltos".into(),
            bus_key_file: None,
            nats_auth: NatsAuth::default(),
            stream_replicas: 1,
            linger_us: DEFAULT_LINGER_US,
            worker_threads: DEFAULT_WORKER_THREADS,
            leader_elect: false,
            leader_elect_lease_duration: LeaseTiming::DEFAULT.duration,
            leader_elect_renew_deadline: LeaseTiming::DEFAULT.renew_deadline,
            leader_elect_retry_period: LeaseTiming::DEFAULT.retry_period,
        }
    }

    /// Checks what clap's types cannot: URL scheme, kubeconfig presence, namespace syntax.
    pub fn validate(&self) -> Result<()> {
        for url in self.nats_url.split(',').map(str::trim) {
            let scheme_ok = ["nats://", "tls://", "ws://", "wss://"]
                .iter()
                .any(|scheme| url.starts_with(scheme) && url.len() > scheme.len());
            if !scheme_ok {
                return Err(Error::InvalidNatsUrl {
                    url: redact_url(url),
                });
            }
        }
        if let Some(path) = &self.kubeconfig {
            if !path.is_file() {
                return Err(Error::MissingKubeconfig { path: path.clone() });
            }
        }
        if !is_dns_label(&self.sveltos_namespace) {
            return Err(Error::InvalidNamespace {
                namespace: self.sveltos_namespace.clone(),
            });
        }
        if !(1..=MAX_STREAM_REPLICAS).contains(&self.stream_replicas) {
            return Err(Error::InvalidStreamReplicas {
                replicas: self.stream_replicas,
            });
        }
        if !(1..=MAX_WORKER_THREADS).contains(&self.worker_threads) {
            return Err(Error::InvalidWorkerThreads {
                threads: self.worker_threads,
            });
        }
        self.lease_timing()
            .check()
            .map_err(|reason| Error::InvalidLeaseTiming { reason })?;
        self.nats_auth.validate()
    }

    /// The lease's timing from the `--leader-elect-*` flags.
    pub fn lease_timing(&self) -> LeaseTiming {
        LeaseTiming {
            duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }

    /// One line for the startup log with credentials in the NATS URL masked.
    pub fn redacted(&self) -> String {
        let kubeconfig = self.kubeconfig.as_ref().map_or_else(
            || "in-cluster".to_owned(),
            |path| path.display().to_string(),
        );
        format!(
            "nats_url={} {} stream_replicas={} linger_us={} worker_threads={} kubeconfig={} \
             kube_context={} health_addr={} log_format={} sveltos_namespace={} bus_key_file={} \
             leader_elect={} lease={:?}/{:?}/{:?}",
            redact_url(&self.nats_url),
            self.nats_auth.redacted(),
            self.stream_replicas,
            self.linger_us,
            self.worker_threads,
            kubeconfig,
            self.kube_context.as_deref().unwrap_or("-"),
            self.health_addr,
            self.log_format,
            self.sveltos_namespace,
            self.bus_key_file
                .as_ref()
                .map_or_else(|| "-".to_owned(), |path| path.display().to_string()),
            self.leader_elect,
            self.leader_elect_lease_duration,
            self.leader_elect_renew_deadline,
            self.leader_elect_retry_period,
        )
    }
}

impl NatsAuth {
    /// A client certificate needs its key and the other way round (clap checks flags; this
    /// checks values from anywhere, e.g. an empty environment variable).
    pub fn validate(&self) -> Result<()> {
        if self.nats_cert_file.is_some() != self.nats_key_file.is_some() {
            return Err(Error::IncompleteClientCertificate);
        }
        Ok(())
    }

    /// The files for the startup log: paths only, never their contents.
    pub fn redacted(&self) -> String {
        let path = |file: &Option<PathBuf>| {
            file.as_ref()
                .map_or_else(|| "-".to_owned(), |path| path.display().to_string())
        };
        format!(
            "nats_nkey_file={} nats_ca_file={} nats_cert_file={} nats_key_file={}",
            path(&self.nats_nkey_file),
            path(&self.nats_ca_file),
            path(&self.nats_cert_file),
            path(&self.nats_key_file),
        )
    }
}

impl Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// The environment variables [`CommonArgs`] reads, taken from its clap definition (so tests of
/// manifests and compose files cannot drift from the code). [`LOG_FILTER_ENV`] is not included.
pub fn common_env_vars() -> Vec<String> {
    let command = CommonArgs::augment_args(clap::Command::new("common"));
    command
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .map(|name| name.to_string_lossy().into_owned())
        .collect()
}

/// Parses the process arguments into `C`. `--help` and `--version` print and exit 0; any other
/// error exits with [`EXIT_BAD_CONFIG`] and clap's one-line message.
pub fn parse_config<C: Parser>() -> C {
    parse_config_from::<C, _, _>(std::env::args_os())
}

fn parse_config_from<C, I, T>(args: I) -> C
where
    C: Parser,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    parse_command(C::command(), args)
}

/// [`parse_config`] with the command given (a shared struct named for its service).
pub(crate) fn parse_command<C, I, T>(mut command: clap::Command, args: I) -> C
where
    C: clap::FromArgMatches,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let parsed = command
        .try_get_matches_from_mut(args)
        .and_then(|mut matches| C::from_arg_matches_mut(&mut matches));
    match parsed {
        Ok(config) => config,
        Err(error) if !error.use_stderr() => error.exit(),
        Err(error) => {
            let rendered = error.render().to_string();
            let line = rendered.lines().next().unwrap_or("invalid arguments");
            exit_on_bad_config(line.trim_start_matches("error: "))
        }
    }
}

/// Prints `invalid configuration: {err}` as one line on stderr and exits with
/// [`EXIT_BAD_CONFIG`]. Call it before any port is bound.
pub fn exit_on_bad_config(err: impl Display) -> ! {
    let message = err.to_string().replace('\n', " ");
    eprintln!("invalid configuration: {message}");
    std::process::exit(EXIT_BAD_CONFIG)
}

/// Masks the user-info part of a URL: `nats://user:pw@host` -> `nats://***@host`.
fn redact_url(url: &str) -> String {
    if url.contains(',') {
        let urls: Vec<String> = url.split(',').map(redact_url).collect();
        return urls.join(",");
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

/// RFC 1123 label: lowercase alphanumerics and `-`, at most 63, no leading or trailing `-`.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse(args: &[&str]) -> Result<CommonArgs, clap::Error> {
        let argv = std::iter::once("svc").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(|cli| cli.common)
    }

    #[test]
    fn defaults_match_the_service_convention() {
        // the environment of the test process must not leak into the defaults
        for name in common_env_vars() {
            assert!(
                std::env::var_os(&name).is_none(),
                "{name} is set in the test environment"
            );
        }
        let common = parse(&[]).unwrap();
        assert_eq!(common.nats_url, "nats://127.0.0.1:4222");
        assert_eq!(common.kubeconfig, None);
        assert_eq!(common.kube_context, None);
        assert_eq!(common.health_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(common.log_format, LogFormat::Text);
        assert_eq!(common.sveltos_namespace, "projectsveltos");
        assert_eq!(common.nats_auth, NatsAuth::default());
        assert_eq!(common.stream_replicas, 1);
        assert_eq!(common.linger_us, DEFAULT_LINGER_US);
        assert_eq!(common.worker_threads, 1);
        assert!(!common.leader_elect);
        assert_eq!(common.lease_timing(), LeaseTiming::DEFAULT);
        common.validate().unwrap();
    }

    #[test]
    fn leader_election_is_turned_on_and_timed_by_flags() {
        let common = parse(&[
            "--leader-elect",
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=2500ms",
            "--leader-elect-retry-period=500ms",
        ])
        .unwrap();
        assert!(common.leader_elect);
        // As Kubernetes components take it: with a value too.
        assert!(parse(&["--leader-elect=true"]).unwrap().leader_elect);
        assert!(!parse(&["--leader-elect=false"]).unwrap().leader_elect);
        assert_eq!(
            common.lease_timing(),
            LeaseTiming {
                duration: Duration::from_secs(4),
                renew_deadline: Duration::from_millis(2_500),
                retry_period: Duration::from_millis(500),
            }
        );
        common.validate().unwrap();
        let unsafe_timing = parse(&["--leader-elect-renew-deadline=20s"]).unwrap();
        let error = unsafe_timing.validate().unwrap_err().to_string();
        assert!(
            error.contains("--leader-elect-") && error.contains("shorter than the lease duration"),
            "{error}"
        );
        let error = parse(&["--leader-elect-retry-period=2"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a duration"), "{error}");
    }

    #[test]
    fn durations_are_read_as_go_writes_them() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "15", "s", "1.5s", "15sec", "-1s", "1s2"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn timings_that_cannot_keep_one_holder_are_refused() {
        assert_eq!(LeaseTiming::DEFAULT.check(), Ok(()));
        let bad = |duration_ms: u64, deadline_ms: u64, period_ms: u64| {
            LeaseTiming {
                duration: Duration::from_millis(duration_ms),
                renew_deadline: Duration::from_millis(deadline_ms),
                retry_period: Duration::from_millis(period_ms),
            }
            .check()
            .unwrap_err()
        };
        assert!(bad(1_500, 1_000, 100).contains("whole seconds"));
        assert!(bad(500, 100, 10).contains("at least 1s"));
        assert!(bad(2_000, 2_000, 100).contains("shorter than the lease duration"));
        assert!(bad(2_000, 1_000, 1_000).contains("shorter than the renew deadline"));
        assert!(bad(2_000, 1_000, 0).contains("above zero"));
    }

    #[test]
    fn flags_override_defaults() {
        let common = parse(&[
            "--nats-url=nats://10.0.0.1:4222",
            "--kube-context=mgmt",
            "--health-addr=127.0.0.1:9090",
            "--log-format=json",
            "--sveltos-namespace=fleet",
            "--bus-key-file=/etc/sluice/bus-key/key",
        ])
        .unwrap();
        assert_eq!(common.nats_url, "nats://10.0.0.1:4222");
        assert_eq!(common.kube_context.as_deref(), Some("mgmt"));
        assert_eq!(common.health_addr.port(), 9090);
        assert_eq!(common.log_format, LogFormat::Json);
        assert_eq!(common.sveltos_namespace, "fleet");
        assert_eq!(
            common.bus_key_file.as_deref(),
            Some(std::path::Path::new("/etc/sluice/bus-key/key"))
        );
    }

    #[test]
    fn env_vars_come_from_the_clap_definition() {
        assert_eq!(
            common_env_vars(),
            [
                "SLUICE_NATS_URL",
                "SLUICE_KUBECONFIG",
                "SLUICE_KUBE_CONTEXT",
                "SLUICE_HEALTH_ADDR",
                "SLUICE_LOG_FORMAT",
                "SLUICE_SVELTOS_NAMESPACE",
                "SLUICE_BUS_KEY_FILE",
                "SLUICE_NATS_NKEY_FILE",
                "SLUICE_NATS_CA_FILE",
                "SLUICE_NATS_CERT_FILE",
                "SLUICE_NATS_KEY_FILE",
                "SLUICE_STREAM_REPLICAS",
                "SLUICE_LINGER_US",
                "SLUICE_WORKER_THREADS",
                "SLUICE_LEADER_ELECT",
                "SLUICE_LEADER_ELECT_LEASE_DURATION",
                "SLUICE_LEADER_ELECT_RENEW_DEADLINE",
                "SLUICE_LEADER_ELECT_RETRY_PERIOD",
            ]
        );
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(parse(&["--health-addr=nonsense"]).is_err());
        assert!(parse(&["--log-format=xml"]).is_err());
        let check = |args: &[&str], expected: &str| {
            let error = parse(args).unwrap().validate().unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        };
        check(&["--nats-url=http://x:4222"], "invalid nats url");
        check(
            &["--nats-url=nats://a:4222,http://b:4222"],
            "invalid nats url http://b:4222",
        );
        check(&["--nats-url=nats://a:4222,"], "invalid nats url");
        check(
            &["--kubeconfig=/no/such/kubeconfig"],
            "/no/such/kubeconfig does not exist",
        );
        check(
            &["--sveltos-namespace=Not_A_Label"],
            "invalid sveltos namespace",
        );
        check(&["--stream-replicas=0"], "invalid stream replicas 0");
        check(&["--stream-replicas=7"], "invalid stream replicas 7");
        check(&["--worker-threads=0"], "invalid worker threads 0");
        check(&["--worker-threads=257"], "invalid worker threads 257");
        assert!(parse(&["--nats-cert-file=/tls/client.crt"]).is_err());
        assert!(parse(&["--nats-key-file=/tls/client.key"]).is_err());
        let mut half = parse(&[]).unwrap();
        half.nats_auth.nats_key_file = Some("/tls/client.key".into());
        let error = half.validate().unwrap_err().to_string();
        assert!(error.contains("client certificate"), "{error}");
    }

    #[test]
    fn nats_identity_and_tls_files_parse_and_are_logged_as_paths() {
        let common = parse(&[
            "--nats-nkey-file=/var/run/nats/seed",
            "--nats-ca-file=/var/run/nats/ca.crt",
            "--nats-cert-file=/var/run/nats/tls.crt",
            "--nats-key-file=/var/run/nats/tls.key",
            "--stream-replicas=3",
            "--worker-threads=4",
        ])
        .unwrap();
        common.validate().unwrap();
        assert_eq!(common.stream_replicas, 3);
        assert_eq!(common.worker_threads, 4);
        let line = common.redacted();
        for expected in [
            "nats_nkey_file=/var/run/nats/seed",
            "nats_ca_file=/var/run/nats/ca.crt",
            "nats_cert_file=/var/run/nats/tls.crt",
            "nats_key_file=/var/run/nats/tls.key",
            "stream_replicas=3",
            "worker_threads=4",
        ] {
            assert!(line.contains(expected), "{line}");
        }
    }

    #[test]
    fn redacted_masks_credentials() {
        let common = parse(&["--nats-url=nats://alice:s3cret@nats:4222"]).unwrap();
        let line = common.redacted();
        assert!(!line.contains("s3cret"), "{line}");
        assert!(!line.contains("alice"), "{line}");
        assert!(line.contains("nats_url=nats://***@nats:4222"), "{line}");
        assert!(line.contains("kubeconfig=in-cluster"), "{line}");
        assert_eq!(redact_url("nats://nats:4222/x@y"), "nats://nats:4222/x@y");
        assert_eq!(
            redact_url("nats://a:p@n1:4222,nats://n2:4222,tls://b:q@n3:4222"),
            "nats://***@n1:4222,nats://n2:4222,tls://***@n3:4222"
        );
    }
}
