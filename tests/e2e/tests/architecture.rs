//! The architecture invariants of `ARCHITECTURE.md`, checked mechanically: forbidden dependency
//! edges read from `cargo metadata` (rust-analyzer's tidy test does the same), and where subjects,
//! acks and Kubernetes calls may appear in the source, and that ARCHITECTURE.md's stream and
//! stage tables say what `topology.rs` declares. Reads metadata and files; builds nothing.
#![allow(clippy::unwrap_used)] // tests fail by panicking

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sluice_testkit::repo_root;

const SERVICES: [&str; 5] = [
    "sluice-watcher",
    "sluice-evaluator",
    "sluice-reporter",
    "sluice-renderer",
    "sluice-applier",
];

/// The run-time (normal, non-dev, non-build) dependency graph of the workspace, resolved for the
/// host platform so that `cargo metadata` needs no crates the build did not already fetch.
struct Graph {
    names: BTreeMap<String, String>,
    deps: BTreeMap<String, Vec<String>>,
    members: BTreeMap<String, String>,
}

impl Graph {
    fn load() -> Graph {
        let cargo = env!("CARGO");
        let version = Command::new(cargo).arg("-vV").output().unwrap();
        let version = String::from_utf8(version.stdout).unwrap();
        let host = version
            .lines()
            .find_map(|line| line.strip_prefix("host: "))
            .unwrap_or_else(|| panic!("`cargo -vV` names no host:\n{version}"));
        let output = Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--filter-platform",
                host,
            ])
            .arg("--manifest-path")
            .arg(repo_root().join("Cargo.toml"))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
        let names: BTreeMap<String, String> = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (id(&p["id"]), p["name"].as_str().unwrap().to_owned()))
            .collect();
        let members = metadata["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (names[&id(m)].clone(), id(m)))
            .collect();
        let deps = metadata["resolve"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|node| {
                let normal = node["deps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|dep| {
                        dep["dep_kinds"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|kind| kind["kind"].is_null())
                    })
                    .map(|dep| id(&dep["pkg"]))
                    .collect();
                (id(&node["id"]), normal)
            })
            .collect();
        Graph {
            names,
            deps,
            members,
        }
    }

    /// Every package `member` needs at run time, directly or not, each with one dependency path
    /// (`sluice-domain -> sluice-proto -> prost`) to show in a failure.
    fn closure(&self, member: &str) -> BTreeMap<String, String> {
        let root = self
            .members
            .get(member)
            .unwrap_or_else(|| panic!("{member} is not a workspace member"));
        let mut paths = BTreeMap::new();
        let mut queue = VecDeque::from([(root.clone(), member.to_owned())]);
        let mut seen = std::collections::BTreeSet::from([root.clone()]);
        while let Some((package, path)) = queue.pop_front() {
            for dep in &self.deps[&package] {
                if seen.insert(dep.clone()) {
                    let name = &self.names[dep];
                    let path = format!("{path} -> {name}");
                    paths.entry(name.clone()).or_insert_with(|| path.clone());
                    queue.push_back((dep.clone(), path));
                }
            }
        }
        paths
    }

    /// The paths by which `member` reaches a forbidden crate or one of its family
    /// (`kube` also forbids `kube-client`, `tokio` also `tokio-util`).
    fn forbidden_paths(&self, member: &str, forbidden: &[&str]) -> Vec<String> {
        self.closure(member)
            .into_iter()
            .filter(|(name, _)| forbidden.iter().any(|f| in_family(name, f)))
            .map(|(_, path)| path)
            .collect()
    }
}

fn id(value: &Value) -> String {
    value.as_str().unwrap().to_owned()
}

fn in_family(name: &str, family: &str) -> bool {
    name.strip_prefix(family)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

fn assert_no_paths(rule: &str, paths: Vec<String>) {
    assert!(
        paths.is_empty(),
        "architecture invariant broken: {rule}\nforbidden dependency paths:\n  {}",
        paths.join("\n  ")
    );
}

#[test]
fn forbidden_dependency_edges() {
    let graph = Graph::load();

    assert_no_paths(
        "the domain crate knows nothing of the async runtime, the wire, the bus, the cluster or Lua",
        graph.forbidden_paths(
            "sluice-domain",
            &["tokio", "prost", "async-nats", "kube", "mlua", "k8s-openapi"],
        ),
    );

    let mut test_support = Vec::new();
    for service in SERVICES {
        test_support.extend(graph.forbidden_paths(
            service,
            &["sluice-testserver", "sluice-testkit", "sluice-harness"],
        ));
    }
    assert_no_paths(
        "the API test server, the test kit and the harness are never run-time dependencies of a service",
        test_support,
    );

    let mut engines = Vec::new();
    for engine in ["sluice-template", "sluice-eval"] {
        engines
            .extend(graph.forbidden_paths(engine, &["tokio", "async-nats", "kube", "k8s-openapi"]));
    }
    assert_no_paths(
        "the template and Lua/CEL engines are synchronous and do no IO",
        engines,
    );

    let mut pure_stages = Vec::new();
    for service in ["sluice-evaluator", "sluice-renderer"] {
        pure_stages.extend(graph.forbidden_paths(service, &["kube", "k8s-openapi"]));
    }
    assert_no_paths(
        "only the watcher, the reporter and the applier talk to Kubernetes",
        pure_stages,
    );
}

/// Places that still break the subject rule, each with the text that breaks it. The test fails
/// when one of them is fixed, so that this list only shrinks.
const SUBJECT_EXCEPTIONS: [(&str, &str); 0] = [];

#[test]
fn subjects_are_named_only_in_the_bus_crate() {
    let mut violations = Vec::new();
    let mut used_exceptions = Vec::new();
    for (path, code) in production_sources() {
        if path.starts_with("crates/bus/") {
            continue;
        }
        for needle in ["\"sluice.v1.", "topology::PREFIX"] {
            let lines = lines_containing(&code, needle);
            if lines.is_empty() {
                continue;
            }
            if SUBJECT_EXCEPTIONS.contains(&(path.as_str(), needle)) {
                used_exceptions.push((path.clone(), needle));
            } else {
                violations.extend(lines.into_iter().map(|n| format!("{path}:{n}: {needle}")));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "subjects are built outside crates/bus (use a function or constant of \
         crates/bus/src/topology.rs):\n  {}",
        violations.join("\n  ")
    );
    for (path, needle) in SUBJECT_EXCEPTIONS {
        assert!(
            used_exceptions
                .iter()
                .any(|(p, n)| p == path && *n == needle),
            "{path} no longer contains {needle}: remove it from SUBJECT_EXCEPTIONS"
        );
    }
}

#[test]
fn inputs_are_acked_only_by_the_ack_window() {
    let violations = production_lines_containing(
        |path| path != "crates/bus/src/window.rs",
        &[".ack()", ".double_ack(", "AckKind::Ack"],
    );
    assert!(
        violations.is_empty(),
        "inputs acked outside sluice_bus::AckWindow (which acks only after the outputs are \
         stored):\n  {}",
        violations.join("\n  ")
    );
}

/// `path:line: needle` for every production line of the files `scanned` picks that contains one
/// of `needles`.
fn production_lines_containing(scanned: impl Fn(&str) -> bool, needles: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, code) in production_sources() {
        if !scanned(&path) {
            continue;
        }
        for needle in needles {
            found.extend(
                lines_containing(&code, needle)
                    .into_iter()
                    .map(|n| format!("{path}:{n}: {needle}")),
            );
        }
    }
    found
}

/// Services whose consuming stages run on `sluice_bus::runner` (ADR 0021); the others still
/// run loops of their own and join this list as they move.
const ON_THE_RUNNER: [&str; 5] = [
    "services/applier/",
    "services/evaluator/src/",
    "services/renderer/",
    "services/reporter/",
    "services/watcher/",
];

#[test]
fn stages_on_the_runner_have_no_consumer_loop_of_their_own() {
    let violations = production_lines_containing(
        |path| ON_THE_RUNNER.iter().any(|dir| path.starts_with(dir)),
        &[
            "coalesce::",
            ".durable(",
            ".park(",
            "AckWindow",
            "ack_with(",
        ],
    );
    assert!(
        violations.is_empty(),
        "a stage on the runner pulls, acks, nacks or dead-letters by itself:\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn services_call_kubernetes_only_through_sluice_kube() {
    let mut violations = Vec::new();
    for (path, code) in production_sources() {
        if !path.starts_with("services/") {
            continue;
        }
        for (n, line) in code_lines(&code) {
            if uses_kube_beyond_client(line) {
                violations.push(format!("{path}:{n}: {}", line.trim()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "services use kube-rs beyond holding a kube::Client (call sluice_kube instead):\n  {}",
        violations.join("\n  ")
    );
}

/// Every `.rs` file of the repository that is not a test, as (path relative to the root with
/// `/` separators, code before its `#[cfg(test)]` module). Directories named `tests`, `target`
/// and hidden ones are skipped.
fn production_sources() -> Vec<(String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !(name.starts_with('.') || name == "target" || name == "tests") {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let code = match text.find("#[cfg(test)]") {
                    Some(at) => text[..at].to_owned(),
                    None => text,
                };
                out.push((relative(&root, &path), code));
            }
        }
    }
    assert!(
        out.iter().any(|(p, _)| p == "crates/bus/src/topology.rs"),
        "the source walk missed crates/bus/src/topology.rs"
    );
    out
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap()
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Lines that are not comments, numbered from 1.
fn code_lines(code: &str) -> impl Iterator<Item = (usize, &str)> {
    code.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line))
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
}

/// Whether a line names a kube-rs path other than `kube::Client` (or any k8s-openapi type);
/// `sluice_kube::...` is the adapter and allowed.
fn uses_kube_beyond_client(line: &str) -> bool {
    let mut rest = line;
    while let Some(at) = rest.find("kube::") {
        let before = rest[..at].chars().next_back();
        let starts_path = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if starts_path && !rest[at..].starts_with("kube::Client") {
            return true;
        }
        rest = &rest[at + "kube::".len()..];
    }
    line.contains("k8s_openapi")
}

fn lines_containing(code: &str, needle: &str) -> Vec<usize> {
    code_lines(code)
        .filter(|(_, line)| line.contains(needle))
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn source_scans_see_what_they_look_for() {
    // The scanners must find the constructs they forbid, or a green run means nothing.
    let sample = "use kube::api::Api;\n// \"sluice.v1.x\" in a comment\nlet s = \"sluice.v1.match\";\nm.ack().await;\n";
    assert_eq!(lines_containing(sample, "\"sluice.v1."), [3]);
    assert_eq!(lines_containing(sample, ".ack()"), [4]);
    assert!(in_family("kube-client", "kube") && in_family("kube", "kube"));
    assert!(!in_family("kubex", "kube") && !in_family("sluice-kube", "kube"));
    assert!(uses_kube_beyond_client("use kube::api::Api;"));
    assert!(uses_kube_beyond_client(
        "let c: kube::Client = x; let a: kube::Api<P>;"
    ));
    assert!(uses_kube_beyond_client(
        "use k8s_openapi::api::core::v1::Pod;"
    ));
    assert!(!uses_kube_beyond_client(
        "client: &kube::Client, k: sluice_kube::apply::Kind"
    ));
}

/// The rows of the Markdown table in ARCHITECTURE.md whose header row starts with `header`, as
/// trimmed cells (the header and the `|---|` row left out).
fn architecture_table(header: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(repo_root().join("ARCHITECTURE.md")).unwrap();
    let mut lines = text.lines().skip_while(|line| !line.starts_with(header));
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no table headed `{header}`"
    );
    lines
        .skip(1)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
            inner
                .split('|')
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

/// The `code` spans of a table cell, in order.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn stream_names(streams: &[sluice_bus::topology::StreamSpec]) -> Vec<String> {
    streams.iter().map(|s| s.name.to_string()).collect()
}

#[test]
fn the_stage_table_agrees_with_the_topology() {
    use sluice_bus::topology::{Acks, IDENTITIES};
    let rows = architecture_table("| service | consumes |");
    let names: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
    let declared: Vec<&str> = IDENTITIES.iter().map(|i| i.name).collect();
    assert_eq!(names, declared, "one row per identity, in topology order");
    for (row, identity) in rows.iter().zip(IDENTITIES) {
        let name = identity.name;
        assert_eq!(row.len(), 7, "{name}: seven cells");
        let consumes: Vec<(String, String, bool)> = row[1]
            .split(';')
            .filter(|segment| !segment.trim().is_empty())
            .map(|segment| {
                let spans = code_spans(segment);
                assert_eq!(
                    spans.len(),
                    2,
                    "{name}: `durable` on `stream` in {segment:?}"
                );
                (
                    spans[0].clone(),
                    spans[1].clone(),
                    segment.contains("covering acks"),
                )
            })
            .collect();
        let declared: Vec<(String, String, bool)> = identity
            .consumes
            .iter()
            .map(|c| {
                (
                    c.durable.to_string(),
                    c.stream.name.to_string(),
                    c.acks == Acks::Covering,
                )
            })
            .collect();
        assert_eq!(consumes, declared, "{name}: consumes");
        assert_eq!(
            code_spans(&row[2]),
            stream_names(identity.follows),
            "{name}: follows"
        );
        assert_eq!(
            code_spans(&row[3]),
            stream_names(identity.publishes),
            "{name}: publishes"
        );
        assert_eq!(
            code_spans(&row[4]),
            stream_names(identity.purges),
            "{name}: purges"
        );
        let dead_letters = if identity.dead_letters { "yes" } else { "no" };
        assert_eq!(row[5], dead_letters, "{name}: dead letters");
        assert_eq!(code_spans(&row[6]), identity.taps, "{name}: taps");
    }
}

#[test]
fn the_stream_table_agrees_with_the_topology() {
    use sluice_bus::topology::ALL_STREAMS;
    let rows = architecture_table("| stream | subjects |");
    assert_eq!(rows.len(), ALL_STREAMS.len(), "one row per stream");
    for (row, stream) in rows.iter().zip(ALL_STREAMS) {
        assert_eq!(code_spans(&row[0]), [stream.name], "stream name");
        assert_eq!(
            code_spans(&row[1]),
            [stream.subjects],
            "{}: subjects",
            stream.name
        );
        let retention = &row[2];
        match stream.max_per_subject {
            Some(1) => assert!(
                retention.starts_with("last value per subject"),
                "{}: {retention}",
                stream.name
            ),
            None => assert!(retention.starts_with("log"), "{}: {retention}", stream.name),
            Some(other) => panic!("{}: {other} values per subject", stream.name),
        }
        assert_eq!(
            retention.contains("(`Nats-TTL`)"),
            stream.message_ttl,
            "{}: whether tombstones expire: {retention}",
            stream.name
        );
    }
}
