//! Deployment files stay in step with the code: the kustomize renders (real `kubectl kustomize`),
//! `docker-compose.yml` and the `Dockerfile` run binaries this workspace builds, with exactly
//! the configuration `sluice_runtime::CommonArgs` accepts, probes on its health endpoint, and
//! the RBAC and NATS the services need. Nothing is deployed; everything is rendered and parsed.
#![allow(clippy::unwrap_used)] // tests fail by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use clap::{Args, FromArgMatches};
use serde_json::Value;
use sluice_runtime::{common_env_vars, CommonArgs, LOG_FILTER_ENV};
use sluice_testkit::{repo_root, try_bin_path};

const SERVICES: [&str; 5] = ["watcher", "evaluator", "reporter", "renderer", "applier"];
const NAMESPACE: &str = "sluice-system";
const HEALTH_PORT: u16 = 8080;

/// The binary targets of every workspace package, from `cargo metadata`.
fn workspace_binaries() -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(repo_root().join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut binaries = BTreeSet::new();
    for package in metadata["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            if target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .any(|kind| kind == "bin")
            {
                binaries.insert(target["name"].as_str().unwrap().to_owned());
            }
        }
    }
    binaries
}

/// Every object of `kubectl kustomize <dir>`.
fn kustomize(dir: &str) -> Vec<Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(repo_root().join(dir))
        .output()
        .unwrap_or_else(|error| panic!("failed to run kubectl kustomize {dir}: {error}"));
    assert!(
        output.status.success(),
        "kubectl kustomize {dir} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the render"))
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Parses `env` (name -> value) with the clap definition of [`CommonArgs`], as a service would
/// at startup: unknown names and unparsable values fail here. `RUST_LOG` is the one extra name.
fn parse_common_env(env: &BTreeMap<String, String>, context: &str) -> CommonArgs {
    let known: BTreeSet<String> = common_env_vars().into_iter().collect();
    for name in env.keys() {
        assert!(
            known.contains(name) || name == LOG_FILTER_ENV,
            "{context}: {name} is not an option of CommonArgs (known: {known:?})"
        );
    }
    let command = CommonArgs::augment_args(clap::Command::new("service"));
    let mut argv = vec!["service".to_owned()];
    for arg in command.get_arguments() {
        let (Some(env_name), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        if let Some(value) = env.get(env_name.to_str().unwrap()) {
            argv.push(format!("--{long}={value}"));
        }
    }
    let mut matches = command
        .try_get_matches_from(&argv)
        .unwrap_or_else(|error| panic!("{context}: {error}"));
    CommonArgs::from_arg_matches_mut(&mut matches).unwrap()
}

fn container_env(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|e| {
                    let name = e["name"].as_str().unwrap().to_owned();
                    let value = e["value"]
                        .as_str()
                        .unwrap_or_else(|| panic!("env {name} must be a literal value, got {e}"));
                    (name, value.to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Checks the five Deployments of a render and returns (service -> parsed config, replicas).
fn check_deployments(objects: &[Value]) -> BTreeMap<&'static str, (CommonArgs, u64, String)> {
    let binaries = workspace_binaries();
    let deployments = of_kind(objects, "Deployment");
    assert_eq!(
        deployments.len(),
        SERVICES.len(),
        "one Deployment per service"
    );
    let mut out = BTreeMap::new();
    for service in SERVICES {
        let name = format!("sluice-{service}");
        let deployment = find(objects, "Deployment", &name);
        assert_eq!(deployment["metadata"]["namespace"], NAMESPACE, "{name}");
        let pod = &deployment["spec"]["template"]["spec"];
        let account = pod["serviceAccountName"].as_str().unwrap();
        find(objects, "ServiceAccount", account);
        let containers = pod["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "{name}");
        let container = &containers[0];

        let command: Vec<&str> = container["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(command, [name.as_str()], "{name} runs its own binary");
        assert!(
            binaries.contains(&name),
            "{name} is not a binary of this workspace: {binaries:?}"
        );

        let ports = container["ports"].as_array().unwrap();
        let http = ports.iter().find(|p| p["name"] == "http").unwrap();
        assert_eq!(http["containerPort"], HEALTH_PORT, "{name}");
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let get = &container[probe]["httpGet"];
            assert_eq!(get["path"], path, "{name} {probe}");
            assert!(
                get["port"] == "http" || get["port"] == HEALTH_PORT,
                "{name} {probe}"
            );
        }
        let resources = &container["resources"];
        for field in ["requests", "limits"] {
            assert!(
                resources[field]["memory"].is_string(),
                "{name}: no memory {field}"
            );
        }
        assert!(
            resources["requests"]["cpu"].is_string(),
            "{name}: no cpu request"
        );

        let env = container_env(container);
        let config = parse_common_env(&env, &name);
        assert!(
            env.contains_key("SLUICE_NATS_URL"),
            "{name}: NATS URL must be explicit"
        );
        assert_eq!(
            config.kubeconfig, None,
            "{name}: in-cluster config, no kubeconfig file"
        );
        assert_eq!(
            config.health_addr.port(),
            HEALTH_PORT,
            "{name}: probes hit the health port"
        );
        CommonArgs {
            kubeconfig: None,
            ..config.clone()
        }
        .validate()
        .unwrap_or_else(|error| panic!("{name}: {error}"));
        let replicas = deployment["spec"]["replicas"].as_u64().unwrap();
        let rust_log = env.get(LOG_FILTER_ENV).cloned().unwrap_or_default();
        out.insert(service, (config, replicas, rust_log));
    }
    out
}

/// The NATS Service and StatefulSet exist, run JetStream, and the services' URL points at them.
fn check_nats(objects: &[Value], configs: &BTreeMap<&'static str, (CommonArgs, u64, String)>) {
    let service = find(objects, "Service", "nats");
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "client")
        .unwrap()["port"]
        .as_u64()
        .unwrap();
    let statefulset = find(objects, "StatefulSet", "nats");
    let container = &statefulset["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"-js"),
        "nats runs without JetStream: {args:?}"
    );
    assert!(
        statefulset["spec"]["volumeClaimTemplates"].is_array(),
        "JetStream store needs a volume"
    );
    let expected = format!("nats://nats.{NAMESPACE}.svc:{port}");
    for (service, (config, _, _)) in configs {
        assert_eq!(config.nats_url, expected, "{service}");
    }
}

#[test]
fn base_runs_each_service_binary_with_probes_and_common_env() {
    let objects = kustomize("k8s/base");
    let configs = check_deployments(&objects);
    check_nats(&objects, &configs);
    find(&objects, "Namespace", NAMESPACE);
    for (service, (config, _, _)) in &configs {
        assert_eq!(config.sveltos_namespace, "projectsveltos", "{service}");
    }
}

#[test]
fn dev_overlay_runs_one_replica_with_debug_logs() {
    let objects = kustomize("k8s/overlays/dev");
    let configs = check_deployments(&objects);
    check_nats(&objects, &configs);
    for (service, (config, replicas, rust_log)) in &configs {
        assert_eq!(*replicas, 1, "{service}");
        assert!(rust_log.contains("debug"), "{service}: RUST_LOG={rust_log}");
        assert_eq!(config.log_format.to_string(), "text", "{service}");
    }
}

/// Every grant of ServiceAccount `account` in the base, one `<scope> <group>/<resource> <verb>`
/// line each: scope `*` through a ClusterRoleBinding, else the RoleBinding's namespace.
fn grants_of(objects: &[Value], account: &str) -> BTreeSet<String> {
    let mut grants = BTreeSet::new();
    for binding_kind in ["ClusterRoleBinding", "RoleBinding"] {
        for binding in of_kind(objects, binding_kind) {
            let binds = binding["subjects"].as_array().unwrap().iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"] == NAMESPACE
            });
            if !binds {
                continue;
            }
            let scope = binding["metadata"]["namespace"].as_str().unwrap_or("*");
            let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
            let name = binding["roleRef"]["name"].as_str().unwrap();
            let role = of_kind(objects, role_kind)
                .into_iter()
                .find(|r| {
                    r["metadata"]["name"] == name
                        && (role_kind == "ClusterRole" || r["metadata"]["namespace"] == scope)
                })
                .unwrap_or_else(|| panic!("{binding_kind} {name} names a missing {role_kind}"));
            for rule in role["rules"].as_array().unwrap() {
                assert!(
                    rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none(),
                    "{role_kind} {name}: unexpected rule {rule}"
                );
                let list = |field: &str| -> Vec<&str> {
                    rule[field]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect()
                };
                for group in list("apiGroups") {
                    for resource in list("resources") {
                        for verb in list("verbs") {
                            grants.insert(format!("{scope} {group}/{resource} {verb}"));
                        }
                    }
                }
            }
        }
    }
    grants
}

/// `<scope> <group>/<resource> <verb>` for every combination.
fn expand(scope: &str, group: &str, resources: &[&str], verbs: &[&str]) -> Vec<String> {
    resources
        .iter()
        .flat_map(|r| {
            verbs
                .iter()
                .map(move |v| format!("{scope} {group}/{r} {v}"))
        })
        .collect()
}

/// Least privilege: each service is granted exactly what its code does in the management
/// cluster (k8s/README.md says why); the e2e suite runs every service under these grants on the
/// API test server, which enforces them, so a missing grant fails there and an extra one here.
#[test]
fn rbac_grants_each_service_exactly_what_it_uses() {
    let objects = kustomize("k8s/base");
    let sveltos = "lib.projectsveltos.io";
    let expected: BTreeMap<&str, Vec<String>> = BTreeMap::from([
        (
            "watcher",
            [
                expand(
                    "*",
                    sveltos,
                    &[
                        "eventsources",
                        "eventtriggers",
                        "eventbasedaddons",
                        "sveltosclusters",
                        "clustersets",
                    ],
                    &["list", "watch"],
                ),
                expand("*", "cluster.x-k8s.io", &["clusters"], &["list", "watch"]),
                expand("*", "", &["configmaps", "secrets"], &["list", "watch"]),
            ]
            .concat(),
        ),
        ("evaluator", Vec::new()),
        ("renderer", Vec::new()),
        (
            "reporter",
            [
                expand(
                    "*",
                    sveltos,
                    &["eventreports"],
                    &["get", "create", "patch", "delete"],
                ),
                expand("*", sveltos, &["eventreports/status"], &["patch"]),
            ]
            .concat(),
        ),
        (
            "applier",
            [
                expand(
                    "*",
                    "config.projectsveltos.io",
                    &["clusterprofiles"],
                    &["list", "create", "patch", "delete"],
                ),
                expand(
                    "*",
                    sveltos,
                    &["eventtriggers", "eventbasedaddons"],
                    &["get", "patch"],
                ),
                expand(
                    "*",
                    sveltos,
                    &["eventtriggers/status", "eventbasedaddons/status"],
                    &["patch"],
                ),
                expand("*", "", &["configmaps", "secrets"], &["list"]),
                expand(
                    "projectsveltos",
                    "",
                    &["configmaps", "secrets"],
                    &["create", "patch", "delete"],
                ),
                expand("default", "", &["events"], &["create", "patch"]),
            ]
            .concat(),
        ),
    ]);
    for service in SERVICES {
        let account = format!("sluice-{service}");
        assert!(
            of_kind(&objects, "ServiceAccount")
                .iter()
                .any(|sa| sa["metadata"]["name"] == account.as_str()
                    && sa["metadata"]["namespace"] == NAMESPACE),
            "no ServiceAccount {account}"
        );
        let want: BTreeSet<String> = expected[service].iter().cloned().collect();
        assert_eq!(grants_of(&objects, &account), want, "{account}");
    }
}

/// `docker-compose.yml` with its `<<` merge keys resolved (nested merges need several passes).
fn compose() -> Value {
    let text = std::fs::read_to_string(repo_root().join("docker-compose.yml")).unwrap();
    let mut yaml: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    for _ in 0..8 {
        yaml.apply_merge().unwrap();
    }
    let json = serde_json::to_value(&yaml).unwrap();
    assert!(
        !json.to_string().contains("\"<<\""),
        "unresolved merge key in docker-compose.yml"
    );
    json
}

fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("expected a list, got {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn compose_runs_workspace_binaries_with_common_env_and_health_checks() {
    let binaries = workspace_binaries();
    let compose = compose();
    let services = compose["services"].as_object().unwrap();

    let nats_command = string_list(&services["nats"]["command"]);
    assert!(nats_command.contains(&"-js".to_owned()), "{nats_command:?}");

    let testserver = string_list(&services["testserver"]["command"]);
    assert_eq!(&testserver[..2], ["sluice", "testserver"]);
    assert!(binaries.contains("sluice"), "{binaries:?}");
    let flag = |name: &str| {
        let at = testserver.iter().position(|a| a == name).unwrap();
        testserver[at + 1].clone()
    };
    assert_eq!(flag("--cluster-names"), "mgmt,cluster-a,cluster-b");
    let kubeconfig = flag("--kubeconfig");

    for service in SERVICES {
        let name = format!("sluice-{service}");
        let spec = &services[service];
        assert_eq!(string_list(&spec["command"]), [name.as_str()], "{service}");
        assert!(
            binaries.contains(&name),
            "{name} is not a binary of this workspace"
        );

        let env: BTreeMap<String, String> = spec["environment"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        let config = parse_common_env(&env, service);
        let nats_host = config
            .nats_url
            .trim_start_matches("nats://")
            .split(':')
            .next()
            .unwrap();
        assert!(
            services.contains_key(nats_host),
            "{service}: NATS host {nats_host} is no service"
        );
        assert_eq!(
            config.kubeconfig.as_deref(),
            Some(Path::new(&kubeconfig)),
            "{service}"
        );

        let health = string_list(&spec["healthcheck"]["test"]).join(" ");
        let addr: SocketAddr = config.health_addr;
        assert!(
            health.contains(&format!(":{}/healthz", addr.port())),
            "{service}: {health}"
        );

        let depends: BTreeSet<&String> = spec["depends_on"].as_object().unwrap().keys().collect();
        assert!(depends.contains(&"nats".to_owned()) && depends.contains(&"testserver".to_owned()));
        let volumes = string_list(&spec["volumes"]);
        let shared = Path::new(&kubeconfig).parent().unwrap().to_str().unwrap();
        assert!(
            volumes.iter().any(|v| v.split(':').nth(1) == Some(shared)),
            "{service} does not mount {shared}: {volumes:?}"
        );
    }
}

/// `nats:2.11-alpine` -> (2, 11).
fn nats_image_version(image: &str) -> (u32, u32) {
    let tag = image.strip_prefix("nats:").unwrap();
    let mut parts = tag.split(['.', '-']);
    (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    )
}

#[test]
fn nats_image_is_the_same_everywhere_and_has_jetstream_2_10() {
    let compose_image = compose()["services"]["nats"]["image"]
        .as_str()
        .unwrap()
        .to_owned();
    let objects = kustomize("k8s/base");
    let k8s_image = find(&objects, "StatefulSet", "nats")["spec"]["template"]["spec"]["containers"]
        [0]["image"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(compose_image, k8s_image);
    assert!(nats_image_version(&k8s_image) >= (2, 10), "{k8s_image}");
}

#[test]
fn dockerfile_ships_every_binary_the_manifests_run() {
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let mut run: BTreeSet<String> = SERVICES.iter().map(|s| format!("sluice-{s}")).collect();
    run.insert("sluice".to_owned());
    // the builder stage copies `for bin in <names>; do cp ...` into the runtime image
    let line = dockerfile
        .lines()
        .find(|line| line.contains("for bin in"))
        .unwrap();
    let names = line
        .split("for bin in")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    let copied: BTreeSet<String> = names.split_whitespace().map(str::to_owned).collect();
    assert_eq!(copied, run);
}

/// The environment variables the built binary `bin` documents in its `--help`, plus `RUST_LOG`:
/// the truth for service-specific options that `CommonArgs` does not know.
fn accepted_env(bin: &str) -> BTreeSet<String> {
    let path = try_bin_path(bin).unwrap_or_else(|error| panic!("{error:#}"));
    let output = Command::new(&path).arg("--help").output().unwrap();
    assert!(output.status.success(), "{bin} --help failed");
    let help = String::from_utf8(output.stdout).unwrap();
    let mut names: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .map(|rest| rest.split(['=', ']']).next().unwrap().to_owned())
        .collect();
    names.insert(LOG_FILTER_ENV.to_owned());
    names
}

#[test]
fn built_service_binaries_accept_every_variable_the_manifests_set() {
    let compose = compose();
    let objects = kustomize("k8s/base");
    for service in SERVICES {
        let bin = format!("sluice-{service}");
        let accepted = accepted_env(&bin);
        for name in common_env_vars() {
            assert!(
                accepted.contains(&name),
                "{bin} does not take CommonArgs ({name})"
            );
        }
        let deployment = find(&objects, "Deployment", &bin);
        let k8s = container_env(&deployment["spec"]["template"]["spec"]["containers"][0]);
        let compose_env = compose["services"][service]["environment"]
            .as_object()
            .unwrap();
        for name in k8s.keys().chain(compose_env.keys()) {
            assert!(
                accepted.contains(name),
                "{bin} does not accept {name}: {accepted:?}"
            );
        }
    }
}

#[test]
fn built_cli_accepts_the_compose_testserver_command() {
    let compose = compose();
    let command = string_list(&compose["services"]["testserver"]["command"]);
    let path = try_bin_path(&command[0]).unwrap_or_else(|error| panic!("{error:#}"));
    let output = Command::new(&path)
        .args([command[1].as_str(), "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{command:?} --help failed: {help}");
    for flag in command.iter().filter(|arg| arg.starts_with("--")) {
        assert!(
            help.contains(flag.as_str()),
            "{} {} has no {flag}: {help}",
            command[0],
            command[1]
        );
    }
}
