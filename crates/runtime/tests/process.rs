//! Process-level behaviour (signals, exit codes, log output): each test re-runs this test binary
//! as a child restricted to itself, with `CHILD_ENV` set, and checks the child from outside.
#![allow(clippy::unwrap_used)] // tests fail by panicking

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use clap::Parser;
use sluice_runtime::{
    exit_on_bad_config, init_telemetry, parse_config, shutdown_token, CommonArgs, LogFormat,
    EXIT_BAD_CONFIG, EXIT_SECOND_SIGNAL,
};
use sluice_testkit::{wait_for, ServiceProcess};

const CHILD_ENV: &str = "SLUICE_RUNTIME_TEST_CHILD";
const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

/// Runs the test `name` of this binary in a child process with `CHILD_ENV` set.
fn spawn_child(name: &str, env: &[(&str, &str)]) -> ServiceProcess {
    let exe = std::env::current_exe().unwrap();
    let mut env = env.to_vec();
    env.push((CHILD_ENV, "1"));
    ServiceProcess::spawn(
        exe.to_str().unwrap(),
        &["--exact", name, "--nocapture", "--test-threads=1"],
        &env,
    )
    .unwrap()
}

fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

async fn wait_for_log(child: &ServiceProcess, needle: &str) {
    wait_for(
        &format!("{needle:?} in the child's log"),
        DEADLINE,
        || async { child.log().contains(needle).then_some(()) },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\nlog:\n{}", child.log()));
}

#[tokio::test]
async fn first_sigterm_cancels_the_token_and_lets_the_process_drain() {
    if is_child() {
        let token = shutdown_token().unwrap();
        println!("child waiting for a signal");
        token.cancelled().await;
        println!("child drained");
        return;
    }
    let mut child = spawn_child(
        "first_sigterm_cancels_the_token_and_lets_the_process_drain",
        &[],
    );
    wait_for_log(&child, "child waiting for a signal").await;
    child.signal(libc::SIGTERM).unwrap();
    let status = child.wait_exit(DEADLINE).unwrap();
    assert!(status.success(), "{status}: {}", child.log());
    assert!(child.log().contains("child drained"), "{}", child.log());
}

#[tokio::test]
async fn second_signal_exits_at_once_with_130() {
    if is_child() {
        let token = shutdown_token().unwrap();
        println!("child waiting for a signal");
        token.cancelled().await;
        println!("child draining slowly");
        // a drain that never finishes: only the second signal ends this process
        std::future::pending::<()>().await;
        return;
    }
    let mut child = spawn_child("second_signal_exits_at_once_with_130", &[]);
    wait_for_log(&child, "child waiting for a signal").await;
    child.signal(libc::SIGINT).unwrap();
    wait_for_log(&child, "child draining slowly").await;
    child.signal(libc::SIGTERM).unwrap();
    let status = child.wait_exit(DEADLINE).unwrap();
    assert_eq!(
        status.code(),
        Some(EXIT_SECOND_SIGNAL),
        "{status}: {}",
        child.log()
    );
    assert_eq!(status.signal(), None);
}

#[tokio::test]
async fn invalid_config_exits_64_with_one_line() {
    if is_child() {
        let cli = Cli::try_parse_from(["svc", "--nats-url=http://nats:4222"]).unwrap();
        match cli.common.validate() {
            Ok(()) => println!("validation unexpectedly passed"),
            Err(error) => exit_on_bad_config(error),
        }
        return;
    }
    let mut child = spawn_child("invalid_config_exits_64_with_one_line", &[]);
    let status = child.wait_exit(DEADLINE).unwrap();
    assert_eq!(status.code(), Some(EXIT_BAD_CONFIG), "{}", child.log());
    let line = "invalid configuration: invalid nats url http://nats:4222: \
                expected nats://, tls://, ws:// or wss://\n";
    assert!(child.log().contains(line), "{}", child.log());
}

#[tokio::test]
async fn unparsable_arguments_exit_64_with_one_line() {
    if is_child() {
        // the child's own arguments are the test harness flags, which this Cli does not know
        let cli: Cli = parse_config();
        println!("parsed unexpectedly: {cli:?}");
        return;
    }
    let mut child = spawn_child("unparsable_arguments_exit_64_with_one_line", &[]);
    let status = child.wait_exit(DEADLINE).unwrap();
    assert_eq!(status.code(), Some(EXIT_BAD_CONFIG), "{}", child.log());
    let log = child.log();
    // the harness prints "test <name> ... " without a newline before the child's stderr
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("invalid configuration"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("unexpected argument '--exact'"), "{log}");
    assert!(!log.contains("Usage:"), "{log}");
}

#[tokio::test]
async fn unparsable_rust_log_is_a_config_error() {
    if is_child() {
        match init_telemetry("probe", LogFormat::Text) {
            Ok(()) => println!("telemetry unexpectedly initialised"),
            Err(error) => exit_on_bad_config(error),
        }
        return;
    }
    let mut child = spawn_child(
        "unparsable_rust_log_is_a_config_error",
        &[("RUST_LOG", "sluice=loud")],
    );
    let status = child.wait_exit(DEADLINE).unwrap();
    assert_eq!(status.code(), Some(EXIT_BAD_CONFIG), "{}", child.log());
    assert!(
        child
            .log()
            .contains("invalid configuration: invalid RUST_LOG filter \"sluice=loud\"\n"),
        "{}",
        child.log()
    );
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_filtered_by_rust_log() {
    if is_child() {
        init_telemetry("probe", LogFormat::Json).unwrap();
        tracing::debug!(hidden = true, "debug line filtered out");
        tracing::warn!(answer = 42, "hello from the child");
        // a second install fails instead of silently replacing the first
        assert!(init_telemetry("probe", LogFormat::Text).is_err());
        return;
    }
    let mut child = spawn_child(
        "json_logs_are_one_object_per_line_filtered_by_rust_log",
        &[("RUST_LOG", "info")],
    );
    let status = child.wait_exit(DEADLINE).unwrap();
    assert!(status.success(), "{}", child.log());
    let log = child.log();
    let records: Vec<serde_json::Value> = log
        .lines()
        // the first record may follow the harness's "test <name> ... " on the same line
        .filter_map(|line| line.find('{').map(|start| &line[start..]))
        .map(|record| serde_json::from_str(record).unwrap())
        .collect();
    let started = records
        .iter()
        .find(|r| r["message"] == "telemetry initialised")
        .unwrap_or_else(|| panic!("no startup line: {log}"));
    assert_eq!(started["service"], "probe");
    assert_eq!(started["level"], "INFO");
    let hello = records
        .iter()
        .find(|r| r["message"] == "hello from the child")
        .unwrap_or_else(|| panic!("no hello line: {log}"));
    assert_eq!(hello["answer"], 42);
    assert_eq!(hello["level"], "WARN");
    assert!(!log.contains("debug line filtered out"), "{log}");
}

#[tokio::test]
async fn a_span_export_sluice_cannot_follow_is_a_config_error() {
    if is_child() {
        let cli = Cli::try_parse_from(["svc"]).unwrap();
        let served = sluice_runtime::serve("probe", cli.common, |_, _, _| async {
            println!("served unexpectedly");
            Ok(())
        })
        .await;
        println!("serve returned unexpectedly: {served:?}");
        return;
    }
    let mut child = spawn_child(
        "a_span_export_sluice_cannot_follow_is_a_config_error",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    let status = child.wait_exit(DEADLINE).unwrap();
    assert_eq!(status.code(), Some(EXIT_BAD_CONFIG), "{}", child.log());
    assert!(
        child.log().contains(
            "invalid configuration: OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\": sluice exports spans \
             over OTLP/HTTP with protobuf only: http/protobuf\n"
        ),
        "{}",
        child.log()
    );
}
