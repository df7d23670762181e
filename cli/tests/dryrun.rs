//! `sluice dry-run` as a user runs it: files in, objects on stdout, failures on stderr, and an
//! exit code a CI job can act on.

use std::process::{Command, Output};

fn dry_run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("dry-run")
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("sluice runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_readmes_example_prints_the_profile_and_its_config_map_and_exits_0() {
    let output = dry_run(&[
        "-f",
        "examples/seed-000-networkpolicy",
        "--cluster-label",
        "env=fv",
    ]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let objects: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["ConfigMap", "ClusterProfile"], "{stdout}");
    assert!(
        stdout.contains("# eventtrigger service-network-policy, cluster sveltos:default/dry-run"),
        "{stdout}"
    );
    assert!(stderr.contains("2 objects"), "{stderr}");

    // As a JSON List, with the EventReport first.
    let output = dry_run(&[
        "-f",
        "examples/seed-000-networkpolicy",
        "--cluster-label",
        "env=fv",
        "--reports",
        "-o",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["EventReport", "ConfigMap", "ClusterProfile"]);
}

#[test]
fn a_failure_goes_to_stderr_with_where_and_exits_1_and_bad_input_exits_2() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let source = std::fs::read_to_string("../examples/seed-003-cross-cluster/eventsource.yaml")
        .expect("seed 003")
        .replace("hs.matching = false", "hs.matching = = false");
    let path = dir.path().join("broken.yaml");
    std::fs::write(&path, source).expect("written");
    let output = dry_run(&[
        "-f",
        path.to_str().expect("utf-8"),
        "-f",
        "examples/seed-003-cross-cluster/eventtrigger.yaml",
        "-f",
        "examples/seed-003-cross-cluster/workload.yaml",
        "--cluster-label",
        "env=production",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("error: ")
            && l.contains("load-balancer-service")
            && l.contains("spec.resourceSelectors[0].evaluate")),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));

    // A file that is not there, and a document without a name, stop it with where.
    let output = dry_run(&["-f", "no-such-file.yaml"]);
    assert_ne!(output.status.code(), Some(0));
    assert!(text(&output.stderr).contains("no-such-file.yaml"));
    let unnamed = dir.path().join("unnamed.yaml");
    std::fs::write(&unnamed, "apiVersion: v1\nkind: Service\nmetadata: {}\n").expect("written");
    let output = dry_run(&["-f", unnamed.to_str().expect("utf-8")]);
    let stderr = text(&output.stderr);
    assert_ne!(output.status.code(), Some(0));
    assert!(
        stderr.contains("unnamed.yaml, document 1") && stderr.contains("metadata.name"),
        "{stderr}"
    );
    // A malformed option is clap's usage error.
    let output = dry_run(&["-f", "x", "--cluster-label", "novalue"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("expected KEY=VALUE"));
}

#[test]
fn against_its_own_output_nothing_changes_and_against_nothing_all_is_created() {
    let args = [
        "-f",
        "examples/seed-000-networkpolicy",
        "--cluster-label",
        "env=fv",
    ];
    let first = dry_run(&args);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let dir = tempfile::tempdir().expect("temporary directory");
    let written = dir.path().join("written.yaml");
    std::fs::write(&written, &first.stdout).expect("written");
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "").expect("written");

    let again = dry_run(&[&args[..], &["--against", written.to_str().expect("utf-8")]].concat());
    let stderr = text(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "against the existing objects: 0 to create, 0 to change, 0 to delete, 2 unchanged"
        ),
        "{stderr}"
    );
    let fresh = dry_run(&[&args[..], &["--against", empty.to_str().expect("utf-8")]].concat());
    let stderr = text(&fresh.stderr);
    assert!(
        stderr.contains(
            "against the existing objects: 2 to create, 0 to change, 0 to delete, 0 unchanged"
        ),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("create ClusterProfile sveltos-")
                && l.ends_with(
                    "(eventtrigger service-network-policy, resource default/my-service)"
                )),
        "{stderr}"
    );
}
