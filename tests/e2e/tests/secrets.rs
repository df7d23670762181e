//! Only what is needed goes on the bus (issue 22): on the whole stack, the management cluster's
//! ConfigMaps and Secrets reach a stream only when a trigger makes the renderer read them, a
//! Secret's contents only sealed, and a reference removed (also while the watcher is down)
//! withdraws its object. Every message of every stream and every service's log is searched
//! for the contents of each Secret and unreferenced ConfigMap, while seed 001's credentials
//! example and a trigger instantiating a sealed Secret still render (the instantiated copy
//! travels sealed to the applier too). A managed cluster's Secret selected by an EventSource
//! travels sealed in the evaluator's input (a CEL rule over its data still matches), and its
//! EventReport carries it only with `collectResources`, whose match member is sealed too; a
//! watcher without the key publishes it without its contents (it still matches by metadata).

use std::time::Duration;

use base64::Engine as _;
use prost::Message as _;
use serde_json::{json, Value};
use sluice_bus::{topology, Bus};
use sluice_cli::demo::owned_by;
use sluice_cli::examples::seed_001;
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_testkit::wait_for;

const DEADLINE: Duration = Duration::from_secs(30);

const CLUSTER_PROFILE: &str = "addons.projectsveltos.io/cluster-profile";
/// Contents no stream and no log may show, in clear or as base64.
const LOGIN_PASSWORD: &str = "e2e-login-password-7f3a";
const SEALED_TOKEN: &str = "e2e-sealed-token-91c2";
const UNREFERENCED_TOKEN: &str = "e2e-unreferenced-token-55d0";
const UNREFERENCED_CONFIG: &str = "e2e-unreferenced-config-0b7e";
/// A managed cluster's Secret two EventSources select, one with `collectResources`: the
/// evaluator reads it sealed from `SLUICE_CHANGES`, the collecting set's member carries it
/// sealed, only the collecting EventReport shows it, and no stream or log carries it in clear.
const MANAGED_TOKEN: &str = "e2e-managed-token-3e8f";
/// A referenced ConfigMap's contents, which must travel (the search would miss nothing).
const REFERENCED_CONFIG: &str = "e2e-referenced-config-c4e1";

/// A trigger that reads a cluster-profile Secret and a ConfigMap named after the cluster.
fn sealed_trigger(with_secret: bool) -> Value {
    let mut refs = vec![json!({"kind": "ConfigMap", "namespace": "default",
                               "name": "{{ .Cluster.metadata.name }}-policy"})];
    if with_secret {
        refs.push(json!({"kind": "Secret", "namespace": "default", "name": "app-credentials"}));
    }
    json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
           "metadata": {"name": "sealed-policy"},
           "spec": {"sourceClusterSelector": {"matchLabels": {"env": "production"}},
                    "eventSourceName": "requiring-credentials",
                    "policyRefs": refs}})
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn secret(name: &str, kind_type: &str, key: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": kind_type,
           "metadata": {"name": name, "namespace": "default"},
           "data": {key: b64(value)}})
}

/// A cluster-profile Secret the renderer instantiates per cluster.
fn instantiated_secret() -> Value {
    let mut object = secret(
        "app-credentials",
        CLUSTER_PROFILE,
        "token",
        &format!("{SEALED_TOKEN}-{{{{ .Cluster.metadata.name }}}}"),
    );
    object["metadata"]["annotations"] = json!({"projectsveltos.io/instantiate": "ok"});
    object
}

fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"},
           "data": {"policy.yaml": value}})
}

/// Namespace `eng` of the managed cluster asks for credentials: seed 001's EventSource matches.
async fn require_credentials(stack: &Stack) -> anyhow::Result<()> {
    let eng = json!({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "eng", "labels": {"secret": "required"}}});
    stack.apply("workload", &eng).await?;
    Ok(())
}

/// Every message every stream holds now, as (stream, subject, payload).
async fn every_message(bus: &Bus) -> anyhow::Result<Vec<(String, String, Vec<u8>)>> {
    let mut out = Vec::new();
    for spec in topology::ALL_STREAMS {
        let mut stream = bus.jetstream().get_stream(spec.name).await?;
        let state = stream.info().await?.state.clone();
        if state.messages == 0 {
            continue;
        }
        for sequence in state.first_sequence..=state.last_sequence {
            // A sequence removed (replaced, purged, expired) is simply not there.
            if let Ok(message) = stream.get_raw_message(sequence).await {
                out.push((
                    spec.name.to_string(),
                    message.subject.to_string(),
                    message.payload.to_vec(),
                ));
            }
        }
    }
    Ok(out)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// The config message a subject holds, if any.
async fn config_object(
    bus: &Bus,
    kind: &str,
    name: &str,
) -> anyhow::Result<Option<sluice_proto::v1::ConfigObject>> {
    let subject = topology::config_subject(kind, "default", name);
    let held = bus.replay_state(topology::CONFIG, &subject).await?;
    held.last()
        .map(|d| sluice_proto::v1::ConfigObject::decode(d.payload.as_ref()))
        .transpose()
        .map_err(Into::into)
}

/// Waits until a subject holds no object: gone, or only a deletion.
async fn wait_withdrawn(stack: &Stack, bus: &Bus, kind: &str, name: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("{kind} default/{name} withdrawn from SLUICE_CONFIG"),
        DEADLINE,
        || async {
            match config_object(bus, kind, name).await {
                Ok(None) => Some(()),
                Ok(Some(message)) if message.deleted && message.object_json.is_empty() => Some(()),
                _ => None,
            }
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))
}

/// The policyRefs of the ClusterProfile the sealed-policy trigger made for `workload`.
async fn profile_refs(stack: &Stack) -> Option<Vec<Value>> {
    let owned = owned_by(stack, "sealed-policy", "workload").await.ok()?;
    let profile = owned.iter().find(|o| o["kind"] == "ClusterProfile")?;
    let refs = profile["spec"]["policyRefs"].as_array()?;
    Some(
        refs.iter()
            .map(|r| json!({"kind": r["kind"], "namespace": r["namespace"], "name": r["name"]}))
            .collect(),
    )
}

/// An EventSource `name` selecting the Secrets of namespace `eng` (with a CEL rule when given)
/// and its EventTrigger for the production clusters.
fn secrets_source(name: &str, collect: bool, cel: Option<&str>) -> [Value; 2] {
    let mut selector = json!({"group": "", "version": "v1", "kind": "Secret", "namespace": "eng"});
    if let Some(rule) = cel {
        selector["evaluateCEL"] = json!([{"name": "rule", "rule": rule}]);
    }
    [
        json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
               "metadata": {"name": name},
               "spec": {"collectResources": collect, "resourceSelectors": [selector]}}),
        json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
               "metadata": {"name": format!("{name}-trigger")},
               "spec": {"sourceClusterSelector": {"matchLabels": {"env": "production"}},
                        "eventSourceName": name}}),
    ]
}

/// The managed cluster's Secret `eng/app-token`, holding `MANAGED_TOKEN`.
async fn apply_managed_secret(stack: &Stack) -> anyhow::Result<()> {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": "app-token", "namespace": "eng",
                                     "labels": {"team": "eng"}},
                        "data": {"token": b64(MANAGED_TOKEN)}});
    stack.apply("workload", &secret).await?;
    Ok(())
}

/// The EventReport of `event_source` in `workload` once it names the managed Secret.
async fn app_token_report(stack: &Stack, event_source: &str) -> anyhow::Result<Value> {
    let name = format!("sveltos--{event_source}--workload");
    wait_for(&format!("the EventReport {name}"), DEADLINE, || async {
        stack
            .event_report(&name)
            .await
            .ok()
            .flatten()
            .filter(|r| r["spec"]["matchingResources"][0]["name"] == "app-token")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))
}

fn forbidden(kubeconfig_token: &str) -> Vec<String> {
    let mut out = Vec::new();
    for text in [
        LOGIN_PASSWORD,
        SEALED_TOKEN,
        UNREFERENCED_TOKEN,
        UNREFERENCED_CONFIG,
        kubeconfig_token,
    ] {
        out.push(text.to_string());
        out.push(b64(text));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_referenced_config_travels_secrets_sealed_and_withdrawn_when_unreferenced(
) -> anyhow::Result<()> {
    let mut stack = Stack::start(&["workload"], None).await?;
    stack
        .register_cluster("workload", &[("env", "production")])
        .await?;
    // The token in the managed cluster's kubeconfig Secret.
    let kubeconfig_token = stack
        .server
        .admin_token("workload")
        .ok_or_else(|| anyhow::anyhow!("the managed cluster has an administrator token"))?;
    assert!(stack
        .server
        .kubeconfig_for("workload")
        .contains(&kubeconfig_token));
    // Seed 001: the credentials Secret is read by addon-controller (templateResourceRefs), never
    // by sluice, so it must not travel; the policy ConfigMap and generator source must.
    stack.apply_yaml(MANAGEMENT, seed_001::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, seed_001::EVENT_TRIGGER)
        .await?;
    stack.apply_yaml(MANAGEMENT, seed_001::CONFIG_MAPS).await?;
    for object in [
        secret("login-credentials", "Opaque", "password", LOGIN_PASSWORD),
        instantiated_secret(),
        secret("unreferenced", CLUSTER_PROFILE, "token", UNREFERENCED_TOKEN),
        config_map("unreferenced", UNREFERENCED_CONFIG),
        config_map("workload-policy", REFERENCED_CONFIG),
        sealed_trigger(true),
    ]
    .into_iter()
    .chain(secrets_source("watched-secrets", false, None))
    // Selects by the Secret's data: the evaluator must open it to match (a Secret whose
    // contents are withheld has no data).
    .chain(secrets_source(
        "collected-secrets",
        true,
        Some("has(resource.data.token)"),
    )) {
        stack.apply(MANAGEMENT, &object).await?;
    }
    require_credentials(&stack).await?;
    apply_managed_secret(&stack).await?;

    // Both triggers render: seed 001's generator output, and the profile that references the
    // sealed Secret (the renderer opened it: a withheld Secret fails the trigger instead).
    wait_for("seed 001's generated ConfigMap", DEADLINE, || async {
        owned_by(&stack, "distribute-credentials", "workload")
            .await
            .ok()
            .filter(|owned| {
                owned
                    .iter()
                    .any(|o| o["metadata"]["name"] == "default-workload-namespaces")
            })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    let kinds = |refs: &[Value]| -> Vec<String> {
        refs.iter()
            .map(|r| {
                format!(
                    "{}:{}",
                    r["kind"].as_str().unwrap_or(""),
                    r["namespace"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    let refs = wait_for(
        "the profile over the instantiated Secret",
        DEADLINE,
        || async {
            profile_refs(&stack)
                .await
                .filter(|refs| kinds(refs) == ["ConfigMap:default", "Secret:projectsveltos"])
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    // The renderer opened the Secret, rendered it and sealed the copy; the applier opened that.
    let copy_name = refs[1]["name"].as_str().unwrap_or_default();
    let copy = stack
        .get(MANAGEMENT, "v1", "Secret", "projectsveltos", copy_name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the instantiated Secret exists"))?;
    assert_eq!(
        copy["data"]["token"],
        json!(b64(&format!("{SEALED_TOKEN}-workload")))
    );

    // The managed Secret matches, and its EventReport names it without its contents.
    let report = app_token_report(&stack, "watched-secrets").await?;
    assert!(report["spec"].get("resources").is_none(), "{report}");
    // The collecting EventSource matched on the data (the evaluator opened the change) and its
    // report carries the Secret (the reporter opened the member), as Sveltos's does.
    let collected = app_token_report(&stack, "collected-secrets").await?;
    let resources = base64::engine::general_purpose::STANDARD
        .decode(collected["spec"]["resources"].as_str().unwrap_or_default())?;
    assert!(contains(&resources, &b64(MANAGED_TOKEN)), "{collected}");

    let bus = Bus::connect(stack.bus_options()).await?;
    let sealed = config_object(&bus, "Secret", "app-credentials")
        .await?
        .ok_or_else(|| anyhow::anyhow!("the referenced Secret travels"))?;
    assert!(sealed.object_json.is_empty() && !sealed.sealed_object_json.is_empty());
    for (kind, name) in [
        ("Secret", "login-credentials"),
        ("Secret", "unreferenced"),
        ("Secret", "workload-sveltos-kubeconfig"),
        ("ConfigMap", "unreferenced"),
    ] {
        assert!(
            config_object(&bus, kind, name).await?.is_none(),
            "{kind} {name} is not referenced and must not travel"
        );
    }
    let messages = every_message(&bus).await?;
    assert!(
        messages
            .iter()
            .any(|(_, _, payload)| contains(payload, REFERENCED_CONFIG)),
        "a referenced ConfigMap's contents travel: the search sees payloads"
    );
    for text in forbidden(&kubeconfig_token) {
        for (stream, subject, payload) in &messages {
            assert!(
                !contains(payload, &text),
                "{stream} {subject} carries {text:?}"
            );
        }
    }
    // The managed Secret travels sealed only: as the evaluator's input and as the collecting
    // set's member.
    for (stream, subject, payload) in &messages {
        let carries = contains(payload, MANAGED_TOKEN) || contains(payload, &b64(MANAGED_TOKEN));
        assert!(!carries, "{stream} {subject} carries the managed Secret");
    }
    let sealed_change = messages.iter().any(|(stream, _, payload)| {
        stream == topology::CHANGES.name
            && sluice_proto::v1::ResourceChange::decode(payload.as_slice()).is_ok_and(|c| {
                c.kind == "Secret"
                    && c.name == "app-token"
                    && c.object_json.is_empty()
                    && !c.sealed_object_json.is_empty()
            })
    });
    assert!(
        sealed_change,
        "the evaluator's input holds the Secret sealed"
    );
    let sealed_member = messages.iter().any(|(stream, _, payload)| {
        stream == topology::MATCH.name
            && sluice_proto::v1::MatchUnit::decode(payload.as_slice()).is_ok_and(|u| {
                matches!(u.unit, Some(sluice_proto::v1::match_unit::Unit::Member(m))
                    if m.event_source == "collected-secrets"
                        && m.resource.is_empty() && !m.sealed_resource.is_empty())
            })
    });
    assert!(
        sealed_member,
        "the collected member holds the Secret sealed"
    );

    // A reference removed: the Secret leaves the stream; the ConfigMap stays.
    stack.apply(MANAGEMENT, &sealed_trigger(false)).await?;
    wait_withdrawn(&stack, &bus, "Secret", "app-credentials").await?;
    wait_for("the profile without the Secret", DEADLINE, || async {
        profile_refs(&stack)
            .await
            .filter(|refs| kinds(refs) == ["ConfigMap:default"])
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    assert!(config_object(&bus, "ConfigMap", "workload-policy")
        .await?
        .is_some_and(|m| !m.deleted));

    // The referenced ConfigMap gains sluice's owner label: the watcher's label selector leaves
    // it out from then on (a deletion on the watch), so it is withdrawn as an output would be;
    // the label gone again, it travels again.
    let mut labelled = config_map("workload-policy", REFERENCED_CONFIG);
    labelled["metadata"]["labels"] =
        json!({ sluice_domain::naming::LABEL_EVENT_TRIGGER: "another-trigger" });
    stack.apply(MANAGEMENT, &labelled).await?;
    wait_withdrawn(&stack, &bus, "ConfigMap", "workload-policy").await?;
    stack
        .apply(
            MANAGEMENT,
            &config_map("workload-policy", REFERENCED_CONFIG),
        )
        .await?;
    wait_for("workload-policy published again", DEADLINE, || async {
        config_object(&bus, "ConfigMap", "workload-policy")
            .await
            .ok()
            .flatten()
            .filter(|m| !m.deleted)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;

    // While the watcher is down the last reference goes: at its start the ConfigMap leaves.
    stack.stop_service("sluice-watcher")?;
    stack
        .delete(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventTrigger",
            "",
            "sealed-policy",
        )
        .await?;
    stack.start_service("sluice-watcher")?;
    wait_withdrawn(&stack, &bus, "ConfigMap", "workload-policy").await?;

    // The watcher's ConfigMap watches ask the API server to leave sluice's outputs out.
    let selector = format!(
        "labelSelector=!{}",
        sluice_domain::naming::LABEL_EVENT_TRIGGER
    );
    let watches: Vec<String> = stack
        .server
        .audit(MANAGEMENT)
        .into_iter()
        .filter(|e| e.method == "GET" && e.path == "/api/v1/configmaps")
        .filter(|e| e.query.contains("watch=true"))
        .map(|e| e.query.replace("%21", "!").replace("%2F", "/"))
        .collect();
    assert!(!watches.is_empty(), "the watcher watches ConfigMaps");
    for query in &watches {
        assert!(query.contains(&selector), "{query}");
    }

    // No service ever logged a Secret's contents.
    let mut all = forbidden(&kubeconfig_token);
    all.extend([MANAGED_TOKEN.to_string(), b64(MANAGED_TOKEN)]);
    for text in all {
        for service in sluice_cli::stack::SERVICES {
            assert!(
                !stack.service_log(service).contains(&text),
                "{service} logged {text:?}"
            );
        }
    }
    bus.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bus_key_secret_contents_stay_off_the_bus_and_the_trigger_says_why(
) -> anyhow::Result<()> {
    let mut stack = Stack::start(&["workload"], None).await?;
    for service in ["sluice-watcher", "sluice-renderer"] {
        stack.stop_service(service)?;
        stack.start_service_without(service, &["SLUICE_BUS_KEY_FILE"])?;
    }
    stack
        .register_cluster("workload", &[("env", "production")])
        .await?;
    stack.apply_yaml(MANAGEMENT, seed_001::EVENT_SOURCE).await?;
    for object in [
        instantiated_secret(),
        config_map("workload-policy", REFERENCED_CONFIG),
        sealed_trigger(true),
    ]
    .into_iter()
    .chain(secrets_source("collected-secrets", true, None))
    {
        stack.apply(MANAGEMENT, &object).await?;
    }
    require_credentials(&stack).await?;
    apply_managed_secret(&stack).await?;
    let message = wait_for("the trigger's status to say why", DEADLINE, || async {
        let trigger = stack
            .get(
                MANAGEMENT,
                "lib.projectsveltos.io/v1beta1",
                "EventTrigger",
                "",
                "sealed-policy",
            )
            .await
            .ok()
            .flatten()?;
        let info = &trigger["status"]["clusterInfo"][0];
        let message = info["failureMessage"].as_str().unwrap_or("");
        // Until the EventSource arrives the status names that; then the Secret.
        (info["status"] == "Failed" && message.contains("app-credentials"))
            .then(|| message.to_string())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    assert_eq!(
        message,
        format!(
            "eventtrigger sealed-policy: spec.policyRefs[1]: Secret default/app-credentials: {}",
            sluice_wire::NO_KEY_AT_WATCHER
        )
    );
    let bus = Bus::connect(stack.bus_options()).await?;
    let stand_in = config_object(&bus, "Secret", "app-credentials")
        .await?
        .ok_or_else(|| anyhow::anyhow!("the referenced Secret's stand-in travels"))?;
    assert!(stand_in.sealed_object_json.is_empty());
    // The managed Secret still matches by its metadata; its report shows it without contents,
    // saying why.
    let report = app_token_report(&stack, "collected-secrets").await?;
    let resources = base64::engine::general_purpose::STANDARD
        .decode(report["spec"]["resources"].as_str().unwrap_or_default())?;
    assert!(
        contains(&resources, sluice_wire::NO_KEY_AT_WATCHER),
        "{report}"
    );
    assert!(contains(&resources, "\"team\":\"eng\""), "{report}");
    for (stream, subject, payload) in every_message(&bus).await? {
        for text in [
            SEALED_TOKEN.to_string(),
            b64(SEALED_TOKEN),
            MANAGED_TOKEN.to_string(),
            b64(MANAGED_TOKEN),
        ] {
            assert!(
                !contains(&payload, &text),
                "{stream} {subject} carries {text:?}"
            );
        }
    }
    bus.close().await;
    Ok(())
}
