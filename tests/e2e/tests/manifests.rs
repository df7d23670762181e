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
    render(&repo_root().join(dir), &[])
}

/// Every object of the base with `k8s/components/<component>`, as an overlay of the operator's
/// would add it: a kustomization in a directory of its own that names both by relative paths.
fn kustomize_with_component(component: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let k8s = format!(
        "{up}{}",
        repo_root()
            .join("k8s")
            .display()
            .to_string()
            .trim_start_matches('/')
    );
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [{k8s}/base]\ncomponents: [{k8s}/components/{component}]\n"
        ),
    )
    .unwrap();
    render(dir.path(), &["--load-restrictor", "LoadRestrictionsNone"])
}

fn render(dir: &Path, args: &[&str]) -> Vec<Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .args(args)
        .arg(dir)
        .output()
        .unwrap_or_else(|error| panic!("failed to run kubectl kustomize {dir:?}: {error}"));
    assert!(
        output.status.success(),
        "kubectl kustomize {dir:?} failed: {}",
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
/// at startup: unknown names and unparsable values fail here. `RUST_LOG` and the span export's
/// variables (`sluice_runtime::spans::ENV_VARS`) are the extra names a service reads.
fn parse_common_env(env: &BTreeMap<String, String>, context: &str) -> CommonArgs {
    let known: BTreeSet<String> = common_env_vars().into_iter().collect();
    for name in env.keys() {
        assert!(
            known.contains(name)
                || name == LOG_FILTER_ENV
                || sluice_runtime::spans::ENV_VARS.contains(&name.as_str()),
            "{context}: {name} is not an option of CommonArgs (known: {known:?})"
        );
    }
    // With none of them set on the host, compose passes them empty: no span export.
    let spans = sluice_runtime::spans::SpanConfig::from_env(|name| env.get(name).cloned())
        .unwrap_or_else(|error| panic!("{context}: {error:?}"));
    assert!(!spans.export, "{context}: spans exported by default");
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
    for (service, (config, replicas, _)) in &configs {
        assert_eq!(config.sveltos_namespace, "projectsveltos", "{service}");
        // Two processes, one at work: the other stands by to take the lease over (ADR 0046).
        assert_eq!(*replicas, 2, "{service}");
        assert!(
            config.leader_elect,
            "{service}: two replicas need --leader-elect"
        );
        let budget = find(
            &objects,
            "PodDisruptionBudget",
            &format!("sluice-{service}"),
        );
        assert_eq!(budget["spec"]["maxUnavailable"], 1, "{service}");
        assert_eq!(
            budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
            format!("sluice-{service}")
        );
    }
}

/// The Prometheus Operator component scrapes the health port of each of the five services and
/// nothing else, and carries alerts with a severity.
#[test]
fn the_monitoring_component_scrapes_every_service_on_its_health_port() {
    let objects = kustomize_with_component("monitoring");
    let monitor = find(&objects, "PodMonitor", "sluice");
    assert_eq!(monitor["metadata"]["namespace"], NAMESPACE);
    let selector = &monitor["spec"]["selector"];
    let selects = |labels: &Value| {
        let wanted = selector["matchLabels"].as_object().unwrap();
        wanted.iter().all(|(key, value)| &labels[key] == value)
            && selector["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|expression| {
                    assert_eq!(expression["operator"], "In", "{expression}");
                    expression["values"]
                        .as_array()
                        .unwrap()
                        .contains(&labels[expression["key"].as_str().unwrap()])
                })
    };
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let mut scraped = BTreeSet::new();
    for workload in objects
        .iter()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "StatefulSet")
    {
        let template = &workload["spec"]["template"];
        if !selects(&template["metadata"]["labels"]) {
            continue;
        }
        let ports = template["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap();
        let port = ports
            .iter()
            .find(|p| p["name"] == endpoint["port"])
            .unwrap_or_else(|| {
                panic!(
                    "no port {} in {}",
                    endpoint["port"], workload["metadata"]["name"]
                )
            });
        assert_eq!(port["containerPort"], HEALTH_PORT);
        scraped.insert(
            template["metadata"]["labels"]["app.kubernetes.io/component"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let services: BTreeSet<String> = SERVICES.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        scraped, services,
        "the PodMonitor scrapes exactly the five services"
    );
    let rules = find(&objects, "PrometheusRule", "sluice");
    assert_eq!(rules["metadata"]["namespace"], NAMESPACE);
    let alerts: Vec<&Value> = rules["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert!(!alerts.is_empty());
    for alert in alerts {
        assert!(
            alert["alert"].is_string() && alert["expr"].is_string(),
            "{alert}"
        );
        assert!(alert["labels"]["severity"].is_string(), "{alert}");
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
                    &["get", "list", "watch", "create", "patch", "delete"],
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
                    &["list", "watch", "create", "patch", "delete"],
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
                // ConfigMaps and Secrets: only where it writes them, listing and watching
                // included.
                expand(
                    "projectsveltos",
                    "",
                    &["configmaps", "secrets"],
                    &["list", "watch", "create", "patch", "delete"],
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

/// Resolves compose variable interpolation as `docker compose config` does for an empty
/// environment: `${VAR:-default}` and `${VAR-default}` become the default, `$$` a literal `$`.
/// A variable without a default (`${VAR}`, `$VAR`) or with an empty one (which podman-compose
/// 1.0.3 does not substitute) is an error: the file must work as written.
fn interpolate(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| format!("unclosed ${{ in {:?}", &rest[at..]))?;
            let expr = &body[..end];
            let (name, default) = expr
                .split_once(":-")
                .or_else(|| expr.split_once('-'))
                .ok_or_else(|| format!("variable ${{{expr}}} has no default"))?;
            if default.is_empty() {
                return Err(format!(
                    "${{{expr}}} has an empty default, which podman-compose 1.0.3 leaves as written: give a default, or no value at all (compose then passes the host's)"
                ));
            }
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(format!("bad variable name {name:?} in ${{{expr}}}"));
            }
            out.push_str(default);
            rest = &body[end + 1..];
        } else {
            return Err(format!(
                "bare $ (a variable without default?) in {:?}",
                &rest[at..]
            ));
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[test]
fn interpolation_resolves_defaults_and_refuses_unset_variables() {
    assert_eq!(
        interpolate("image: ${A:-nats:2.15.1-alpine} port ${B-1}:2 $$HOME").unwrap(),
        "image: nats:2.15.1-alpine port 1:2 $HOME"
    );
    assert!(interpolate("image: ${SLUICE_IMAGE}")
        .unwrap_err()
        .contains("no default"));
    assert!(interpolate("image: $SLUICE_IMAGE").is_err());
    assert!(interpolate("image: ${A:-x").is_err());
    assert!(interpolate("endpoint: \"${A:-}\"")
        .unwrap_err()
        .contains("empty default"));
}

/// `docker-compose.yml` as `docker compose config` sees it without environment: variables at
/// their defaults, `<<` merge keys resolved (nested merges need several passes).
fn compose() -> Value {
    let text = std::fs::read_to_string(repo_root().join("docker-compose.yml")).unwrap();
    let text = interpolate(&text).unwrap_or_else(|e| panic!("docker-compose.yml: {e}"));
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

/// The compose file's structure as `docker compose config` checks it: known top-level and
/// service keys (compose specification), every dependency a service with a valid condition,
/// health checks where a dependency waits for health, a one-shot job that is not restarted,
/// declared named volumes, and images for every service.
#[test]
fn compose_file_is_valid_compose() {
    let compose = compose();
    let top: BTreeSet<&str> = [
        "name", "services", "volumes", "networks", "configs", "secrets",
    ]
    .into();
    for key in compose.as_object().unwrap().keys() {
        assert!(
            top.contains(key.as_str()) || key.starts_with("x-"),
            "unknown top-level key {key}"
        );
    }
    let service_keys: BTreeSet<&str> = [
        "image",
        "build",
        "command",
        "entrypoint",
        "environment",
        "env_file",
        "ports",
        "expose",
        "volumes",
        "depends_on",
        "healthcheck",
        "restart",
        "stop_signal",
        "stop_grace_period",
        "user",
        "working_dir",
        "networks",
        "labels",
        "container_name",
        "profiles",
        "init",
    ]
    .into();
    let services = compose["services"].as_object().unwrap();
    let volumes: BTreeSet<&String> = compose["volumes"].as_object().unwrap().keys().collect();
    for (name, spec) in services {
        for key in spec.as_object().unwrap().keys() {
            assert!(
                service_keys.contains(key.as_str()),
                "services.{name}: unknown key {key}"
            );
        }
        assert!(
            spec["image"].as_str().is_some_and(|i| !i.is_empty()),
            "services.{name}.image"
        );
        for volume in spec["volumes"].as_array().into_iter().flatten() {
            let source = volume.as_str().unwrap().split(':').next().unwrap();
            if !source.starts_with(['.', '/']) {
                assert!(
                    volumes.contains(&source.to_owned()),
                    "services.{name}: volume {source} is not declared"
                );
            }
        }
        for port in spec["ports"].as_array().into_iter().flatten() {
            let parts: Vec<&str> = port.as_str().unwrap().split(':').collect();
            assert_eq!(
                parts.len(),
                3,
                "services.{name}: port {port} is not IP:HOST:CONTAINER"
            );
            for number in &parts[1..] {
                number
                    .parse::<u16>()
                    .unwrap_or_else(|e| panic!("services.{name}: port {port}: {e}"));
            }
        }
        for (dependency, condition) in spec["depends_on"].as_object().into_iter().flatten() {
            let target = services
                .get(dependency)
                .unwrap_or_else(|| panic!("services.{name} depends on unknown {dependency}"));
            match condition["condition"].as_str().unwrap() {
                "service_healthy" => assert!(
                    target["healthcheck"]["test"].is_array(),
                    "services.{name} waits for {dependency} to be healthy, which has no health check"
                ),
                "service_completed_successfully" => assert_eq!(
                    target["restart"], "no",
                    "services.{name} waits for {dependency} to complete, which is restarted"
                ),
                "service_started" => {}
                other => panic!("services.{name}.depends_on.{dependency}: unknown condition {other}"),
            }
        }
    }
}

fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("expected a list, got {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// The value after `flag` in a command line.
fn flag_values(command: &[String], flag: &str) -> Vec<String> {
    command
        .windows(2)
        .filter(|pair| pair[0] == flag)
        .map(|pair| pair[1].clone())
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
    assert_eq!(
        flag_values(&testserver, "--cluster-names"),
        ["mgmt,cluster-a,cluster-b"]
    );
    let advertise = flag_values(&testserver, "--advertise");
    assert_eq!(advertise, [format!("testserver:{}", 6443)]);

    // the one-shot job prepares exactly the clusters the test server serves
    let setup = string_list(&services["setup"]["command"]);
    assert_eq!(&setup[..2], ["sluice", "setup"]);
    assert_eq!(flag_values(&setup, "--advertise"), advertise);
    assert_eq!(flag_values(&setup, "--server"), ["http://testserver:6443"]);
    let registered: Vec<String> = flag_values(&setup, "--cluster")
        .iter()
        .map(|c| c.split(':').next().unwrap().to_owned())
        .collect();
    assert_eq!(registered, ["cluster-a", "cluster-b"]);
    assert_eq!(flag_values(&setup, "--example"), ["cluster-a"]);
    let dir = flag_values(&setup, "--dir").pop().unwrap();
    assert!(
        string_list(&services["setup"]["volumes"]).contains(&format!("shared:{dir}")),
        "setup writes {dir} to the shared volume"
    );
    // the host kubeconfig names the port compose publishes on the host
    let published = string_list(&services["testserver"]["ports"]);
    let host_port = published[0].rsplit_once(':').unwrap().0;
    assert_eq!(
        flag_values(&setup, "--host-address"),
        [host_port.to_owned()]
    );

    for service in SERVICES {
        let name = format!("sluice-{service}");
        let spec = &services[service];
        assert_eq!(string_list(&spec["command"]), [name.as_str()], "{service}");
        assert!(
            binaries.contains(&name),
            "{name} is not a binary of this workspace"
        );

        // A variable without a value is passed from the host's environment when set there.
        let env: BTreeMap<String, String> = spec["environment"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| !v.is_null())
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
        // its own ServiceAccount's kubeconfig, as `sluice setup` writes it
        assert_eq!(
            config.kubeconfig.as_deref(),
            Some(Path::new(&dir).join(format!("{name}.kubeconfig")).as_path()),
            "{service}"
        );

        let health = string_list(&spec["healthcheck"]["test"]);
        let addr: SocketAddr = config.health_addr;
        assert_eq!(
            health,
            [
                "CMD",
                "sluice",
                "probe",
                &format!("http://127.0.0.1:{}/healthz", addr.port())
            ],
            "{service}"
        );

        let depends: BTreeMap<&String, &Value> =
            spec["depends_on"].as_object().unwrap().iter().collect();
        for (dependency, condition) in [
            ("nats", "service_healthy"),
            ("testserver", "service_healthy"),
            ("setup", "service_completed_successfully"),
        ] {
            assert_eq!(
                depends.get(&dependency.to_owned()).map(|d| &d["condition"]),
                Some(&Value::from(condition)),
                "{service} waits for {dependency}"
            );
        }
        let volumes = string_list(&spec["volumes"]);
        assert!(
            volumes.contains(&format!("shared:{dir}:ro")),
            "{service} does not mount {dir} read-only: {volumes:?}"
        );
    }
}

/// The NATS version the tests run (`scripts/install-nats.sh`).
fn tested_nats_version() -> String {
    let script = std::fs::read_to_string(repo_root().join("scripts/install-nats.sh")).unwrap();
    script
        .lines()
        .find_map(|l| l.strip_prefix("NATS_VERSION=\""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap()
        .to_owned()
}

/// `nats:2.15.1-alpine` -> (2, 15).
fn nats_image_version(image: &str) -> (u32, u32) {
    let tag = image.strip_prefix("nats:").unwrap();
    let mut parts = tag.split(['.', '-']);
    (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    )
}

#[test]
fn nats_image_is_the_same_everywhere_the_tested_version_with_jetstream() {
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
    assert_eq!(
        compose_image,
        format!("nats:{}-alpine", tested_nats_version()),
        "the images run the NATS version the tests use"
    );
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
    // the `prebuilt` target copies the same binaries from its build context
    let line = dockerfile
        .lines()
        .find(|line| line.starts_with("COPY sluice "))
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    let prebuilt: BTreeSet<String> = words[1..words.len() - 1]
        .iter()
        .map(|w| w.to_string())
        .collect();
    assert_eq!(prebuilt, run);
    assert_eq!(words.last(), Some(&"/usr/local/bin/"));
}

/// `ARG NAME=value` of the Dockerfile.
fn dockerfile_arg(dockerfile: &str, name: &str) -> String {
    dockerfile
        .lines()
        .find_map(|l| l.strip_prefix(&format!("ARG {name}=")))
        .unwrap_or_else(|| panic!("Dockerfile has no ARG {name}="))
        .to_owned()
}

#[test]
fn image_is_labelled_non_root_and_the_licence_file_exists() {
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let cargo: toml::Value = std::fs::read_to_string(repo_root().join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let package = &cargo["workspace"]["package"];
    let version = package["version"].as_str().unwrap();
    let license = package["license"].as_str().unwrap();
    assert_eq!(dockerfile_arg(&dockerfile, "VERSION"), version);
    for label in [
        "org.opencontainers.image.version=\"${VERSION}\"",
        "org.opencontainers.image.source=\"${SOURCE_URL}\"",
        &format!("org.opencontainers.image.licenses=\"{license}\""),
    ] {
        assert!(
            dockerfile.contains(label),
            "Dockerfile lacks the label {label}"
        );
    }
    // every final image runs as the unprivileged user the base stage sets
    assert!(dockerfile.contains("USER 65532:65532"));
    for stage in [
        "FROM runtime-base AS prebuilt",
        "FROM runtime-base AS runtime",
    ] {
        assert!(dockerfile.contains(stage), "{stage}");
    }
    let text = std::fs::read_to_string(repo_root().join("LICENSE"))
        .unwrap_or_else(|e| panic!("Cargo.toml names licence {license}, but LICENSE: {e}"));
    assert_eq!(license, "Apache-2.0");
    assert!(text.contains("Apache License") && text.contains("Version 2.0, January 2004"));
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

/// What `k8s/README.md` tells an operator to set is what the binaries take: every `SLUICE_*`
/// variable it names is accepted by the service binaries it is for (a renamed flag fails here).
#[test]
fn every_variable_the_deployment_guide_names_is_one_a_service_takes() {
    let guide = std::fs::read_to_string(repo_root().join("k8s/README.md")).unwrap();
    let named: BTreeSet<String> = guide
        .split('`')
        .filter(|token| {
            token.starts_with("SLUICE_")
                && token.len() > "SLUICE_".len()
                && token.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        })
        .map(str::to_owned)
        .collect();
    assert!(named.contains("SLUICE_NATS_URL"), "{named:?}");
    let accepted: BTreeMap<&str, BTreeSet<String>> = SERVICES
        .iter()
        .map(|service| (*service, accepted_env(&format!("sluice-{service}"))))
        .collect();
    for name in &named {
        let takers: Vec<&str> = SERVICES
            .iter()
            .copied()
            .filter(|service| accepted[service].contains(name))
            .collect();
        assert!(
            !takers.is_empty(),
            "k8s/README.md names {name}, which no service binary takes"
        );
    }
    // A variable of one service only is described as such.
    assert_eq!(
        SERVICES
            .iter()
            .filter(|service| accepted[*service].contains("SLUICE_APPLY_CONCURRENCY"))
            .collect::<Vec<_>>(),
        vec![&"applier"]
    );
    assert!(guide.contains("| `SLUICE_APPLY_CONCURRENCY` | applier only"));
}

/// The compose stack's bus has the prod overlay's shape: `nats-init` issues the credentials into
/// the shared volume, NATS runs with the configuration it wrote (TLS, generated authorization),
/// and every service connects with its own nkey and client certificate, the CA, and the bus key.
#[test]
fn compose_runs_the_bus_with_identities_tls_and_a_bus_key() {
    let compose = compose();
    let services = compose["services"].as_object().unwrap();
    let init = string_list(&services["nats-init"]["command"]);
    assert_eq!(&init[..3], ["sluice", "nats-config", "--issue"]);
    let dir = flag_values(&init, "--issue").pop().unwrap();
    let nats = string_list(&services["nats"]["command"]);
    assert_eq!(flag_values(&nats, "-c"), [format!("{dir}/nats.conf")]);
    assert_eq!(
        services["nats"]["depends_on"]["nats-init"]["condition"],
        "service_completed_successfully"
    );
    for service in SERVICES {
        let env = &services[service]["environment"];
        for (var, file) in [
            ("SLUICE_NATS_NKEY_FILE", format!("{service}.nk")),
            ("SLUICE_NATS_CERT_FILE", format!("{service}.crt")),
            ("SLUICE_NATS_KEY_FILE", format!("{service}.key")),
            ("SLUICE_NATS_CA_FILE", "nats-ca.crt".to_string()),
            ("SLUICE_BUS_KEY_FILE", "bus.key".to_string()),
        ] {
            assert_eq!(env[var], format!("{dir}/{file}"), "{service}: {var}");
        }
    }
}

#[test]
fn built_cli_accepts_the_compose_commands() {
    let compose = compose();
    let services = compose["services"].as_object().unwrap();
    let mut commands = vec![
        string_list(&services["testserver"]["command"]),
        string_list(&services["setup"]["command"]),
        string_list(&services["nats-init"]["command"]),
    ];
    for (name, spec) in services {
        let test = spec["healthcheck"]["test"].as_array().into_iter().flatten();
        let test: Vec<String> = test.map(|v| v.as_str().unwrap().to_owned()).collect();
        if test.get(1).map(String::as_str) == Some("sluice") {
            assert_eq!(test[0], "CMD", "{name}");
            commands.push(test[1..].to_vec());
        }
    }
    assert!(
        commands.len() >= 8,
        "testserver, setup and the health checks: {commands:?}"
    );
    for command in commands {
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
}

/// Every document of a YAML file of this repository.
fn yaml_documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join(path)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

/// `kubectl apply --dry-run=server` of the whole render of `dir` against the validating API test
/// server, as on a management cluster that runs Sveltos (its CRDs and its `projectsveltos`
/// namespace exist) and cert-manager (its CRDs). The render's namespaces are created first, as
/// the real apply creates them before what they hold (a dry run creates nothing). Every object
/// must be accepted, and nothing may be stored by the dry run.
async fn dry_run_render(dir: &str) {
    use sluice_testserver::{Config, TestServer};
    let objects = kustomize(dir);
    let server = TestServer::start(Config {
        clusters: vec!["mgmt".into()],
        sveltos_crds: true,
        ..Config::default()
    })
    .await
    .unwrap();
    for crd in yaml_documents("tests/e2e/fixtures/cert-manager-crds.yaml") {
        server.create_object("mgmt", crd).unwrap();
    }
    let sveltos = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "projectsveltos"}});
    for namespace in of_kind(&objects, "Namespace").into_iter().chain([&sveltos]) {
        let name = namespace["metadata"]["name"].as_str().unwrap();
        let exists = server.create_object("mgmt", namespace.clone());
        assert!(
            exists.is_ok() || name == "projectsveltos",
            "{dir}: namespace {name}: {exists:?}"
        );
    }
    let stored = server.object_count("mgmt");

    let work = tempfile::tempdir().unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    let render = work.path().join("render.yaml");
    let text: Vec<String> = objects
        .iter()
        .map(|o| serde_yaml::to_string(o).unwrap())
        .collect();
    std::fs::write(&render, text.join("---\n")).unwrap();
    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "--dry-run=server", "-f"])
        .arg(&render)
        .env("HOME", work.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{dir}: kubectl apply --dry-run=server refused:\n{stderr}\n{stdout}"
    );
    let accepted = stdout
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    assert_eq!(
        accepted,
        objects.len(),
        "{dir}: every object is applied in the dry run:\n{stdout}"
    );
    assert_eq!(
        server.object_count("mgmt"),
        stored,
        "{dir}: a dry run stores nothing"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_passes_a_server_dry_run() {
    for dir in ["k8s/base", "k8s/overlays/dev", "k8s/overlays/prod"] {
        dry_run_render(dir).await;
    }
}

/// The mount path of the volume `volume` in `container`.
fn mount_path<'a>(container: &'a Value, volume: &str) -> &'a str {
    container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume)
        .unwrap_or_else(|| panic!("no mount of volume {volume}"))["mountPath"]
        .as_str()
        .unwrap()
}

/// The volume that holds `path` in a container (a file in a mounted directory), with the volume
/// definition of the pod.
fn volume_of<'a>(pod: &'a Value, container: &Value, path: &str) -> &'a Value {
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            Path::new(path)
                .parent()
                .is_some_and(|dir| dir == Path::new(m["mountPath"].as_str().unwrap()))
        })
        .unwrap_or_else(|| panic!("{path} is in no mounted volume"));
    pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap()
}

/// The prod overlay: a 3-node NATS JetStream cluster with TLS and the generated authorization
/// included, spread over nodes with a disruption budget, routes between exactly its servers, a
/// certificate naming the addresses clients and routes use, and every service on TLS with its
/// own nkey, the CA only, R3 streams, and the bus key.
#[test]
fn prod_overlay_runs_a_tls_nats_cluster_and_per_service_identities() {
    let objects = kustomize("k8s/overlays/prod");
    let statefulset = find(&objects, "StatefulSet", "nats");
    let spec = &statefulset["spec"];
    assert_eq!(spec["replicas"], 3);
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    assert!(spread
        .iter()
        .any(|c| c["topologyKey"] == "kubernetes.io/hostname"
            && c["whenUnsatisfiable"] == "DoNotSchedule"
            && c["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]));
    let budget = find(&objects, "PodDisruptionBudget", "nats");
    assert_eq!(budget["spec"]["selector"], spec["selector"]);
    assert_eq!(budget["spec"]["maxUnavailable"], 1);

    // nats.conf and auth.conf side by side in the directory --config names
    let args = string_list(&container["args"]);
    let config_path = flag_values(&args, "--config").pop().unwrap();
    let config_dir = Path::new(&config_path).parent().unwrap();
    let config_volume = volume_of(pod, container, &config_path);
    let sources = config_volume["projected"]["sources"].as_array().unwrap();
    let config_map = sources.iter().find(|s| s["configMap"].is_object()).unwrap();
    let auth = sources.iter().find(|s| s["secret"].is_object()).unwrap();
    assert_eq!(auth["secret"]["name"], "sluice-nats-auth");
    assert_eq!(auth["secret"]["items"][0]["path"], "auth.conf");
    let config = find(
        &objects,
        "ConfigMap",
        config_map["configMap"]["name"].as_str().unwrap(),
    )["data"]["nats.conf"]
        .as_str()
        .unwrap();
    assert!(config.contains("include auth.conf"), "{config}");
    assert!(config.contains("jetstream {"), "{config}");
    let service_name = spec["serviceName"].as_str().unwrap();
    for i in 0..3 {
        let route = format!("nats://nats-{i}.{service_name}.{NAMESPACE}.svc:6222");
        assert!(config.contains(&route), "no route {route}: {config}");
    }
    let tls_dir = mount_path(container, "tls");
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(config.contains(&format!("{tls_dir}/{file}")), "{config}");
    }
    assert!(config.contains("verify: true"), "routes check certificates");
    assert_eq!(config_dir, Path::new(mount_path(container, "config")));
    let routes = find(&objects, "Service", service_name);
    assert_eq!(routes["spec"]["publishNotReadyAddresses"], true);

    // the server certificate names the client address and every route address
    let tls_secret = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "tls")
        .unwrap()["secret"]["secretName"]
        .as_str()
        .unwrap();
    let certificate = of_kind(&objects, "Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == tls_secret)
        .unwrap();
    let names = string_list(&certificate["spec"]["dnsNames"]);
    for name in [
        format!("nats.{NAMESPACE}.svc"),
        format!("*.{service_name}.{NAMESPACE}.svc"),
    ] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }

    let mut nkey_secrets = BTreeSet::new();
    for service in SERVICES {
        let name = format!("sluice-{service}");
        let deployment = find(&objects, "Deployment", &name);
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let env = container_env(container);
        assert_eq!(
            env["SLUICE_NATS_URL"],
            format!("tls://nats.{NAMESPACE}.svc:4222"),
            "{name}"
        );
        assert_eq!(env["SLUICE_STREAM_REPLICAS"], "3", "{name}");
        let nkey = volume_of(pod, container, &env["SLUICE_NATS_NKEY_FILE"]);
        assert_eq!(nkey["secret"]["secretName"], format!("{name}-nats"));
        assert!(nkey_secrets.insert(nkey["secret"]["secretName"].to_string()));
        // the CA alone: the server's private key never enters a service's pod
        let ca = volume_of(pod, container, &env["SLUICE_NATS_CA_FILE"]);
        assert_eq!(ca["secret"]["secretName"], tls_secret, "{name}");
        assert_eq!(
            ca["secret"]["items"],
            serde_json::json!([{"key": "ca.crt", "path": "ca.crt"}]),
            "{name}"
        );
        // Every service reads or writes Secret payloads: the management cluster's (watcher,
        // renderer, applier) and the managed clusters' an EventSource selects (watcher,
        // evaluator, reporter, renderer).
        assert!(
            env.contains_key("SLUICE_BUS_KEY_FILE"),
            "{name}: every service has the bus key"
        );
        if let Some(path) = env.get("SLUICE_BUS_KEY_FILE") {
            let key = volume_of(pod, container, path);
            assert_eq!(key["secret"]["secretName"], "sluice-bus-key", "{name}");
        }
    }
    // Last, as for the other renders: every variable is an option of CommonArgs that parses.
    check_deployments(&objects);
}

/// The `nats.conf` the prod overlay's NATS servers run, as rendered.
fn prod_nats_conf(objects: &[Value]) -> String {
    of_kind(objects, "ConfigMap")
        .into_iter()
        .find_map(|c| c["data"]["nats.conf"].as_str())
        .unwrap()
        .to_owned()
}

/// The prod overlay's nats.conf is a valid configuration of the nats-server version the tests
/// run (`nats-server -t`), with the mounted files in a temporary directory and an authorization
/// block in the place of the generated one.
#[tokio::test]
async fn prod_nats_config_is_accepted_by_nats_server() {
    let objects = kustomize("k8s/overlays/prod");
    let config = prod_nats_conf(&objects);
    let work = tempfile::tempdir().unwrap();
    let certs = sluice_cli::webhook::StackWebhook::issue(work.path()).unwrap();
    let tls = work.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    std::fs::copy(&certs.cert, tls.join("tls.crt")).unwrap();
    std::fs::copy(&certs.key, tls.join("tls.key")).unwrap();
    std::fs::write(tls.join("ca.crt"), &certs.ca_pem).unwrap();
    let config = config
        .replace("/etc/nats-tls", tls.to_str().unwrap())
        .replace("/data", work.path().join("data").to_str().unwrap());
    std::fs::write(work.path().join("nats.conf"), config).unwrap();
    std::fs::write(
        work.path().join("auth.conf"),
        "authorization { users = [ {user: probe, password: probe} ] }\n",
    )
    .unwrap();
    // the nats-server the tests run (scripts/install-nats.sh), as sluice_testkit finds it
    let nats = std::env::var_os(sluice_testkit::NATS_SERVER_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/nats-server"));
    let output = std::process::Command::new(nats)
        .arg("-t")
        .arg("--config")
        .arg(work.path().join("nats.conf"))
        .env("POD_NAME", "nats-0")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "nats-server -t refused the prod config: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The prod overlay's NATS runs as three servers with TLS on its routes, each verifying the
/// others' certificates: its own `nats.conf`, as rendered, runs here as a real three-node
/// cluster (only its addresses, paths and `$POD_NAME` made local) with a certificate of the
/// usages `nats-tls.yaml` asks cert-manager for; the cluster forms over those routes, and an
/// administrator over TLS writes to a stream of three replicas, every replica current. A
/// certificate without `client auth` would not join: a server presents it when it dials a route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prod_nats_config_forms_a_cluster_over_tls_routes() {
    let objects = kustomize("k8s/overlays/prod");
    let config = prod_nats_conf(&objects);
    let certificate = find(&objects, "Certificate", "nats-server");
    let usages: Vec<&str> = certificate["spec"]["usages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|usage| usage.as_str().unwrap())
        .collect();
    let work = tempfile::tempdir().unwrap();
    let ca = sluice_testkit::TestCa::new("sluice-nats-ca").unwrap();
    let issued = ca.with_usages("nats-server", &usages).unwrap();
    let tls = work.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    std::fs::write(tls.join("tls.crt"), &issued.cert).unwrap();
    std::fs::write(tls.join("tls.key"), &issued.key).unwrap();
    std::fs::write(tls.join("ca.crt"), ca.pem()).unwrap();
    let credentials = sluice_cli::natsauth::Credentials::issue(work.path()).unwrap();
    let routes: Vec<u16> = (0..3).map(|_| sluice_testkit::free_port()).collect();
    let monitors: Vec<u16> = (0..3).map(|_| sluice_testkit::free_port()).collect();
    let mut nodes = Vec::new();
    for node in 0..3 {
        let dir = work.path().join(format!("nats-{node}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("auth.conf"), credentials.authorization()).unwrap();
        let mut text = config.replace("/etc/nats-tls", tls.to_str().unwrap());
        let mut local = |from: String, to: String| {
            assert!(
                text.contains(&from),
                "the prod nats.conf has no {from:?}:\n{text}"
            );
            text = text.replace(&from, &to);
        };
        local("$POD_NAME".into(), format!("nats-{node}"));
        // The test's server has a store of its own (`-sd`), which may not be named twice.
        local("store_dir: /data".into(), String::new());
        local(
            "http: 0.0.0.0:8222".into(),
            format!("http: 127.0.0.1:{}", monitors[node]),
        );
        local(
            "listen: 0.0.0.0:6222".into(),
            format!("listen: 127.0.0.1:{}", routes[node]),
        );
        for (peer, port) in routes.iter().enumerate() {
            // `localhost`, which the certificate names, as the pods' routes name theirs.
            local(
                format!("nats://nats-{peer}.nats-cluster.sluice-system.svc:6222"),
                format!("nats://localhost:{port}"),
            );
        }
        std::fs::write(dir.join("nats.conf"), text).unwrap();
        let path = dir.join("nats.conf").display().to_string();
        let server = sluice_testkit::NatsServer::start_with_args(&["-c", &path])
            .await
            .unwrap();
        nodes.push(server);
    }
    let cluster = sluice_testkit::NatsCluster::of_nodes(nodes, monitors);
    cluster.wait_healthy().await.unwrap();
    let mut auth = credentials.auth("admin");
    auth.nats_ca_file = Some(tls.join("ca.crt"));
    (auth.nats_cert_file, auth.nats_key_file) = (None, None);
    let client = sluice_bus::BusOptions::new(cluster.urls())
        .with_auth(auth)
        .connect_client()
        .await
        .unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "PROD_TLS_ROUTES".into(),
        subjects: vec!["prod.tls.>".into()],
        num_replicas: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("prod.tls.one", "stored".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let replicas = sluice_testkit::wait_for(
        "every replica current",
        std::time::Duration::from_secs(30),
        || {
            let js = js.clone();
            async move {
                let info = js
                    .get_stream("PROD_TLS_ROUTES")
                    .await
                    .ok()?
                    .info()
                    .await
                    .ok()?
                    .clone();
                let cluster = info.cluster.clone()?;
                let current = cluster.replicas.iter().filter(|r| r.current).count();
                (info.state.messages == 1 && cluster.leader.is_some() && current == 2)
                    .then_some(cluster)
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(replicas.replicas.len(), 2, "{replicas:?}");
}

/// Whether a NetworkPolicy peer's `podSelector` (matchLabels, `In` expressions) selects `labels`.
fn peer_selects(selector: &Value, labels: &Value) -> bool {
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| &labels[k] == v);
    let by_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            assert_eq!(
                e["operator"], "In",
                "only In expressions are evaluated here"
            );
            e["values"]
                .as_array()
                .unwrap()
                .contains(&labels[e["key"].as_str().unwrap()])
        });
    by_labels && by_expressions
}

/// Kubernetes hygiene of every render: ingress to sluice-system denied by default, NATS's client
/// port reachable from exactly the five services' pods, every container non-root with a
/// read-only root filesystem, Deployments replaced (not rolled) on upgrade, and an in-memory
/// emptyDir at /tmp where the watcher writes credentials.
#[test]
fn only_the_services_reach_nats_and_every_container_is_read_only() {
    for dir in ["k8s/base", "k8s/overlays/dev", "k8s/overlays/prod"] {
        let objects = kustomize(dir);
        let policies = of_kind(&objects, "NetworkPolicy");
        assert!(
            policies
                .iter()
                .any(|p| p["spec"]["podSelector"] == serde_json::json!({})
                    && p["spec"]["ingress"].is_null()
                    && string_list(&p["spec"]["policyTypes"]) == ["Ingress"]),
            "{dir}: no default deny of ingress"
        );
        let nats = find(&objects, "StatefulSet", "nats");
        let nats_labels = &nats["spec"]["template"]["metadata"]["labels"];
        let mut pods: Vec<(String, &Value)> = vec![("nats".into(), nats_labels)];
        for deployment in of_kind(&objects, "Deployment") {
            pods.push((
                deployment["metadata"]["name"].as_str().unwrap().to_owned(),
                &deployment["spec"]["template"]["metadata"]["labels"],
            ));
        }
        // who may reach NATS's client port: a peer of a policy selecting the NATS pods
        let mut clients = BTreeSet::new();
        for policy in &policies {
            if !peer_selects(&policy["spec"]["podSelector"], nats_labels) {
                continue;
            }
            for rule in policy["spec"]["ingress"].as_array().into_iter().flatten() {
                let client_port = rule["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["port"] == "client" || p["port"] == 4222);
                if !client_port {
                    continue;
                }
                let peers = rule["from"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{dir}: NATS's client port is open to any source"));
                for peer in peers {
                    assert!(
                        peer["namespaceSelector"].is_null() && peer["ipBlock"].is_null(),
                        "{dir}: NATS reachable from outside sluice-system: {peer}"
                    );
                    for (name, labels) in &pods {
                        if peer_selects(&peer["podSelector"], labels) {
                            clients.insert(name.clone());
                        }
                    }
                }
            }
        }
        let services: BTreeSet<String> = SERVICES.iter().map(|s| format!("sluice-{s}")).collect();
        assert_eq!(clients, services, "{dir}: who reaches NATS");

        for workload in of_kind(&objects, "Deployment").into_iter().chain([nats]) {
            let name = workload["metadata"]["name"].as_str().unwrap();
            let pod = &workload["spec"]["template"]["spec"];
            assert_eq!(
                pod["securityContext"]["runAsNonRoot"], true,
                "{dir}: {name}"
            );
            for container in pod["containers"].as_array().unwrap() {
                let security = &container["securityContext"];
                assert_eq!(security["readOnlyRootFilesystem"], true, "{dir}: {name}");
                assert_eq!(security["allowPrivilegeEscalation"], false, "{dir}: {name}");
            }
        }
        for deployment in of_kind(&objects, "Deployment") {
            let name = deployment["metadata"]["name"].as_str().unwrap();
            let replicas = deployment["spec"]["replicas"].as_u64().unwrap();
            let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
            let leader_elect = env
                .as_array()
                .unwrap()
                .iter()
                .any(|var| var["name"] == "SLUICE_LEADER_ELECT" && var["value"] == "true");
            // Two processes of a service run side by side (a replica, an update's new pod) only
            // with the lease deciding which one works (ADR 0046).
            if replicas > 1 || deployment["spec"]["strategy"]["type"] != "Recreate" {
                assert!(
                    leader_elect,
                    "{dir}: {name} overlaps without --leader-elect"
                );
            }
            // An update starts the new pod first: it stands by until the old one releases.
            assert_eq!(
                deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
                "{dir}: {name}"
            );
        }
        let watcher = find(&objects, "Deployment", "sluice-watcher");
        let pod = &watcher["spec"]["template"]["spec"];
        let tmp = volume_of(pod, &pod["containers"][0], "/tmp/sluice-nats-tls");
        assert_eq!(tmp["emptyDir"]["medium"], "Memory", "{dir}");
    }
}
