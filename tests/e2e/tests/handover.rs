//! The hand-over from Sveltos's event-manager (docs/operating.md, "Hand over"): on the API test
//! server, seed 000's objects exist as event-manager and sveltos-agent leave them — the
//! EventReport the agent wrote, the ClusterProfile and the instantiated ConfigMap under
//! event-manager's own random `sveltos-…` names with its labels and field manager, the
//! EventTrigger holding event-manager's finalizer — and then sluice starts. It adopts them
//! without churn: nothing deleted, nothing created under another name, no spec or data
//! changed, and from then on it owns them (a deleted Service removes them).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use sluice_cli::demo::{self, owned_by, wait_cleaned, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_domain::naming;
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
const REPORT: &str = "sveltos--sveltos-service--cluster-a";
const ADDON: (&str, &str) = ("lib.projectsveltos.io/v1alpha1", "EventBasedAddOn");
const REPORT_KIND: (&str, &str) = ("lib.projectsveltos.io/v1beta1", "EventReport");
const DEADLINE: Duration = Duration::from_secs(30);
/// event-manager's names: `sveltos-` and 20 random characters of [0-9a-z] (spec §6.3).
const MANAGER_PROFILE: &str = "sveltos-q8w2e7r1t9y3u6i4o0p5";
const MANAGER_CONFIG_MAP: &str = "sveltos-m3n8b1v6c4x9z2l7k5j0";
/// event-manager's field manager for everything it applies (spec §6.4).
const MANAGER_FIELDS: &str = "application/apply-patch";
const FINALIZER: &str = "eventtrigger.finalizer.projectsveltos.io";
const PIPELINE: [&str; 4] = [
    "sluice-evaluator",
    "sluice-reporter",
    "sluice-renderer",
    "sluice-applier",
];

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

/// An object as a controller would write it: no server-set metadata, no status.
fn as_written(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    object
}

/// Seed 000's outputs for my-service in cluster-a: what Sveltos produces for it (sluice's
/// rendering is conformance-tested against Sveltos's), taken from a first run of sluice:
/// (ClusterProfile, instantiated ConfigMap, EventReport).
async fn seed_outputs() -> anyhow::Result<(Value, Value, Value)> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    demo::apply_seed(&stack).await?;
    let profile = wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    let config_map = owned_by(&stack, TRIGGER, "cluster-a")
        .await?
        .into_iter()
        .find(|o| o["kind"] == "ConfigMap")
        .ok_or_else(|| anyhow::anyhow!("no instantiated ConfigMap"))?;
    let report = wait_for("the EventReport with my-service", DEADLINE, || async {
        stack
            .event_report(REPORT)
            .await
            .ok()
            .flatten()
            .filter(|r| r["spec"]["matchingResources"][0]["name"] == "my-service")
    })
    .await?;
    Ok((profile, config_map, report))
}

/// The same three objects as event-manager and the agent leave them.
fn as_sveltos_left_them(profile: &Value, config_map: &Value, report: &Value) -> [Value; 3] {
    let mut config_map = as_written(config_map);
    let sluice_config_map = config_map["metadata"]["name"].clone();
    config_map["metadata"]["name"] = json!(MANAGER_CONFIG_MAP);
    let mut profile = as_written(profile);
    profile["metadata"]["name"] = json!(MANAGER_PROFILE);
    // event-manager shares one label map between the profile and the instantiated objects
    // (spec §6.4): its profile carries the reference labels of the ConfigMap too
    for key in [naming::LABEL_REF_NAMESPACE, naming::LABEL_REF_NAME] {
        profile["metadata"]["labels"][key] = config_map["metadata"]["labels"][key].clone();
    }
    let refs = profile["spec"]["policyRefs"].as_array_mut();
    for reference in refs.into_iter().flatten() {
        if reference["name"] == sluice_config_map {
            reference["name"] = json!(MANAGER_CONFIG_MAP);
        }
    }
    [profile, config_map, as_written(report)]
}

/// An object of the management cluster that must exist.
async fn get(
    stack: &Stack,
    kind: (&str, &str),
    namespace: &str,
    name: &str,
) -> anyhow::Result<Value> {
    stack
        .get(MANAGEMENT, kind.0, kind.1, namespace, name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{} {name} is gone", kind.1))
}

fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or("")
}

fn managers(object: &Value) -> BTreeSet<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["manager"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_adopts_what_event_manager_left_without_churn() -> anyhow::Result<()> {
    let (profile, config_map, report) = seed_outputs().await?;
    assert_ne!(profile["metadata"]["name"], MANAGER_PROFILE);
    let [profile, config_map, report] = as_sveltos_left_them(&profile, &config_map, &report);

    // The management cluster as Sveltos left it. Only the watcher runs (it serves the CRDs'
    // conversion webhook); the rest of sluice starts once everything is in place.
    let mut stack = Stack::start(&["cluster-a"], None).await?;
    for service in PIPELINE {
        stack.stop_service(service)?;
    }
    demo::apply_seed(&stack).await?;
    let mgmt = stack.client(MANAGEMENT)?;
    let addon = sluice_kube::apply::resolve(mgmt, ADDON.0, ADDON.1).await?;
    sluice_kube::apply::set_finalizer(mgmt, &addon, "", TRIGGER, FINALIZER, true).await?;
    sluice_kube::manifest::apply_documents(mgmt, std::slice::from_ref(&report), "sveltos-agent")
        .await?;
    sluice_kube::manifest::apply_documents(mgmt, &[config_map, profile], MANAGER_FIELDS).await?;

    let before_profile = get(&stack, demo::CLUSTER_PROFILE, "", MANAGER_PROFILE).await?;
    let before_config_map = get(
        &stack,
        ("v1", "ConfigMap"),
        "projectsveltos",
        MANAGER_CONFIG_MAP,
    )
    .await?;
    let before_report = get(&stack, REPORT_KIND, "default", REPORT).await?;
    let before_trigger = get(&stack, ADDON, "", TRIGGER).await?;
    let audit_mark = stack.server.audit(MANAGEMENT).len();

    for service in PIPELINE {
        stack.start_service(service)?;
    }
    // sluice has applied its desired state once its field manager co-owns both objects
    let adopted = wait_for(
        "sluice to apply to event-manager's objects",
        DEADLINE,
        || async {
            let profile = get(&stack, demo::CLUSTER_PROFILE, "", MANAGER_PROFILE)
                .await
                .ok()?;
            let config_map = get(
                &stack,
                ("v1", "ConfigMap"),
                "projectsveltos",
                MANAGER_CONFIG_MAP,
            )
            .await
            .ok()?;
            (managers(&profile).contains("sluice-applier")
                && managers(&config_map).contains("sluice-applier"))
            .then_some((profile, config_map))
        },
    )
    .await
    .map_err(|e| fail(&stack, e));
    let (after_profile, after_config_map) = adopted?;

    // nothing else: no second profile or ConfigMap under sluice's own names
    let owned: BTreeSet<String> = owned_by(&stack, TRIGGER, "cluster-a")
        .await?
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        owned,
        BTreeSet::from([MANAGER_PROFILE.to_owned(), MANAGER_CONFIG_MAP.to_owned()])
    );
    // the same objects, unchanged where it matters to addon-controller (the profile still
    // points at event-manager's ConfigMap)
    assert_eq!(
        after_profile["spec"]["policyRefs"][0]["name"],
        MANAGER_CONFIG_MAP
    );
    assert_eq!(uid(&after_profile), uid(&before_profile));
    assert_eq!(after_profile["spec"], before_profile["spec"]);
    assert_eq!(
        after_profile["metadata"]["generation"],
        before_profile["metadata"]["generation"]
    );
    assert_eq!(uid(&after_config_map), uid(&before_config_map));
    assert_eq!(after_config_map["data"], before_config_map["data"]);
    // the EventReport is the agent's object, updated in place; the trigger keeps its finalizer
    let after_report = get(&stack, REPORT_KIND, "default", REPORT).await?;
    assert_eq!(uid(&after_report), uid(&before_report));
    let after_trigger = get(&stack, ADDON, "", TRIGGER).await?;
    assert_eq!(uid(&after_trigger), uid(&before_trigger));
    assert_eq!(after_trigger["metadata"]["finalizers"], json!([FINALIZER]));
    // and the audit log shows no delete and no create of any of them
    let churn: Vec<String> = stack.server.audit(MANAGEMENT)[audit_mark..]
        .iter()
        .filter(|e| matches!(e.method.as_str(), "DELETE" | "POST"))
        .filter(|e| {
            [
                "/clusterprofiles",
                "/configmaps",
                "/eventreports",
                "/eventbasedaddons",
            ]
            .iter()
            .any(|kind| e.path.contains(kind))
        })
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert!(churn.is_empty(), "churn during the hand-over: {churn:?}");

    // from now on sluice owns them: the Service goes, so do they
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    wait_cleaned(&stack, TRIGGER, "cluster-a", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(())
}
