//! Every cleanup cause of issue 7, on seed 000's NetworkPolicy example (its own YAML), plus the
//! EventTrigger status and finalizer: resource deleted (pipeline.rs), resource stops matching,
//! EventSource changed and deleted, EventTrigger deleted (finalizer released once all is
//! gone), cluster stops matching, cluster deleted, a broken template (status and report show
//! it, what exists stays), the applier restarted in the middle of a change, and a profile wanted
//! again while Sveltos's addon-controller still holds the old one with its finalizer. And the
//! other way round: what sluice wrote and someone else deletes or edits is written again.

use std::time::Duration;

use serde_json::{json, Value};
use sluice_bus::topology;
use sluice_cli::demo::{self, owned_by, wait_cleaned, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
const DEADLINE: Duration = Duration::from_secs(30);
const ADDON: (&str, &str) = ("lib.projectsveltos.io/v1alpha1", "EventBasedAddOn");
const CLUSTER: (&str, &str) = ("lib.projectsveltos.io/v1beta1", "SveltosCluster");
/// The applier's count of triggers it forgot once they were gone.
const FORGOTTEN: &str = "sluice_applier_triggers_forgotten_total";

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

/// Seed 000 with my-service in cluster-a; returns once its profile exists.
async fn running_seed() -> anyhow::Result<Stack> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    demo::apply_seed(&stack).await?;
    wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    Ok(stack)
}

async fn cleaned(stack: &Stack) -> anyhow::Result<()> {
    wait_cleaned(stack, TRIGGER, "cluster-a", DEADLINE)
        .await
        .map_err(|e| fail(stack, e))
}

async fn restored(stack: &Stack) -> anyhow::Result<Value> {
    wait_profile(stack, TRIGGER, "cluster-a", "my-service", DEADLINE)
        .await
        .map_err(|e| fail(stack, e))
}

async fn trigger_object(stack: &Stack) -> anyhow::Result<Option<Value>> {
    stack.get(MANAGEMENT, ADDON.0, ADDON.1, "", TRIGGER).await
}

/// The trigger once its first cluster's `clusterInfo` has `status`.
async fn wait_cluster_info(stack: &Stack, what: &str, status: &str) -> anyhow::Result<Value> {
    wait_for(what, DEADLINE, || async {
        trigger_object(stack)
            .await
            .ok()
            .flatten()
            .filter(|t| t["status"]["clusterInfo"][0]["status"] == status)
    })
    .await
    .map_err(|e| fail(stack, e))
}

fn cluster_a(labels: Value) -> Value {
    json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
           "metadata": {"name": "cluster-a", "namespace": "default", "labels": labels},
           "spec": {}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_that_stops_matching_is_withdrawn() -> anyhow::Result<()> {
    let stack = running_seed().await?;
    let relabelled = demo::SERVICE.replace("sveltos: fv", "sveltos: off");
    stack.apply_yaml("cluster-a", &relabelled).await?;
    cleaned(&stack).await?;
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    restored(&stack).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_source_changed_then_deleted_withdraws_everything() -> anyhow::Result<()> {
    let stack = running_seed().await?;
    let changed = demo::EVENT_SOURCE.replace("value: fv", "value: other");
    assert_ne!(changed, demo::EVENT_SOURCE);
    stack.apply_yaml(MANAGEMENT, &changed).await?;
    cleaned(&stack).await?;
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    restored(&stack).await?;
    stack
        .delete(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventSource",
            "",
            "sveltos-service",
        )
        .await?;
    cleaned(&stack).await?;
    // The trigger now names an EventSource that does not exist: its status says so.
    let trigger =
        wait_cluster_info(&stack, "the missing EventSource in the status", "Failed").await?;
    assert_eq!(
        trigger["status"]["clusterInfo"][0]["failureMessage"],
        "eventtrigger service-network-policy: spec.eventSourceName: eventsource \"sveltos-service\" does not exist"
    );
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    restored(&stack).await?;
    wait_cluster_info(&stack, "the status to recover", "Provisioned").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_that_stops_matching_or_is_deleted_is_cleaned_up() -> anyhow::Result<()> {
    let stack = running_seed().await?;
    stack
        .apply(MANAGEMENT, &cluster_a(json!({"env": "prod"})))
        .await?;
    cleaned(&stack).await?;
    stack
        .apply(MANAGEMENT, &cluster_a(json!({"env": "fv"})))
        .await?;
    restored(&stack).await?;
    delete_cluster_a(&stack).await?;
    cleaned(&stack).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_status_shows_clusters_and_failures_and_the_finalizer_waits_for_cleanup(
) -> anyhow::Result<()> {
    let stack = running_seed().await?;
    let trigger = wait_cluster_info(&stack, "trigger status", "Provisioned").await?;
    assert_eq!(
        trigger["status"]["matchingClusters"],
        json!([{"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                "namespace": "default", "name": "cluster-a"}])
    );
    assert_eq!(
        trigger["metadata"]["finalizers"],
        json!(["eventtrigger.finalizer.projectsveltos.io"])
    );

    // A broken template: the status and the EventReport say where; what exists stays.
    let broken = demo::EVENT_BASED_ADDON.replace(
        "front-{{ .Resource.metadata.name }}",
        "front-{{ .Resource.metadata.name | nosuchfunction }}",
    );
    assert_ne!(broken, demo::EVENT_BASED_ADDON);
    stack.apply_yaml(MANAGEMENT, &broken).await?;
    let failed = wait_cluster_info(&stack, "Failed cluster info", "Failed").await?;
    let message = failed["status"]["clusterInfo"][0]["failureMessage"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for part in [
        "service-network-policy",
        "network-policy",
        "networkpolicy.yaml",
        "nosuchfunction",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    assert_eq!(owned_by(&stack, TRIGGER, "cluster-a").await?.len(), 2);
    let report = || async { stack.event_report(REPORT_A).await.ok().flatten() };
    wait_for("the failure on the EventReport", DEADLINE, || async {
        report()
            .await
            .filter(|r| r["status"]["failureMessage"] == message.as_str())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;
    wait_for("the EventReport clear again", DEADLINE, || async {
        report()
            .await
            .filter(|r| r["status"]["failureMessage"].is_null())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    wait_cluster_info(&stack, "Provisioned again", "Provisioned").await?;

    // Deleting the trigger removes its objects, then the trigger itself.
    stack
        .delete(MANAGEMENT, ADDON.0, ADDON.1, "", TRIGGER)
        .await?;
    cleaned(&stack).await?;
    wait_for("trigger released by its finalizer", DEADLINE, || async {
        match trigger_object(&stack).await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    // And the applier keeps nothing of it.
    wait_for("the trigger forgotten", DEADLINE, || async {
        let forgotten = demo::counter(&stack, "sluice-applier", FORGOTTEN).await;
        (forgotten.ok()? == 1).then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applier_restarted_in_the_middle_of_a_change_converges() -> anyhow::Result<()> {
    let mut stack = running_seed().await?;
    stack.kill_service("sluice-applier");
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    let other = demo::SERVICE.replace("name: my-service", "name: other-service");
    stack.apply_yaml("cluster-a", &other).await?;
    stack.start_service("sluice-applier")?;
    wait_profile(&stack, TRIGGER, "cluster-a", "other-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    wait_for("my-service withdrawn", DEADLINE, || async {
        demo::profiles_for(&stack, TRIGGER, "cluster-a", "my-service")
            .await
            .ok()
            .filter(Vec::is_empty)
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    assert_eq!(owned_by(&stack, TRIGGER, "cluster-a").await?.len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_left_with_sveltos_finalizer_is_released_when_deleted() -> anyhow::Result<()> {
    // A trigger a Sveltos installation finalized, selecting no cluster under sluice.
    let stack = Stack::start(&["cluster-a"], None).await?;
    let trigger = json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
        "metadata": {"name": "inherited", "finalizers": ["eventtrigger.finalizer.projectsveltos.io"]},
        "spec": {"sourceClusterSelector": {"matchLabels": {"env": "nowhere"}},
                 "eventSourceName": "sveltos-service"}});
    stack.apply(MANAGEMENT, &trigger).await?;
    stack
        .delete(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventTrigger",
            "",
            "inherited",
        )
        .await?;
    wait_for("inherited trigger released", DEADLINE, || async {
        match stack
            .get(
                MANAGEMENT,
                "lib.projectsveltos.io/v1beta1",
                "EventTrigger",
                "",
                "inherited",
            )
            .await
        {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_trigger_is_told_in_a_warning_event() -> anyhow::Result<()> {
    let stack = running_seed().await?;
    // Valid for the CRD's schema (a selector operator is any string), unusable for sluice.
    let broken = json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
        "metadata": {"name": "broken-selector"},
        "spec": {"eventSourceName": "sveltos-service",
                 "sourceClusterSelector": {"matchExpressions": [{"key": "env", "operator": "Foo"}]}},
    });
    stack.apply(MANAGEMENT, &broken).await?;
    let event = wait_for(
        "a Warning Event on the unusable trigger",
        DEADLINE,
        || async {
            let events = stack.list(MANAGEMENT, "v1", "Event", &[]).await.ok()?;
            events
                .into_iter()
                .find(|e| e["involvedObject"]["name"] == "broken-selector")
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "InvalidSpec");
    assert_eq!(event["involvedObject"]["kind"], "EventTrigger");
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("eventtrigger broken-selector: ")
            && message.contains("sourceClusterSelector"),
        "{message}"
    );
    // The working trigger is unaffected.
    restored(&stack).await?;
    Ok(())
}

async fn cluster_profile(stack: &Stack, name: &str) -> anyhow::Result<Option<Value>> {
    let (api_version, kind) = demo::CLUSTER_PROFILE;
    stack.get(MANAGEMENT, api_version, kind, "", name).await
}

/// Sveltos's addon-controller puts its finalizer on every ClusterProfile and removes it only
/// once it has withdrawn the profile's add-ons. A resource deleted and created again within
/// that time wants its profile back under the same name (ADR 0004) while the old one is still
/// being deleted: applying to that one is not done, or the profile is gone for good once the
/// addon-controller lets go, while its event still stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_wanted_again_while_still_being_deleted_is_created_anew() -> anyhow::Result<()> {
    const ADDON_CONTROLLER: &str = "clusterprofilefinalizer.projectsveltos.io";
    let stack = running_seed().await?;
    let first = restored(&stack).await?;
    let name = first["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let client = stack.client(MANAGEMENT)?;
    let kind =
        sluice_kube::apply::resolve(client, demo::CLUSTER_PROFILE.0, demo::CLUSTER_PROFILE.1)
            .await?;
    sluice_kube::apply::set_finalizer(client, &kind, "", &name, ADDON_CONTROLLER, true).await?;

    // The event goes: sluice deletes the profile, which the finalizer holds.
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    wait_for("the profile marked for deletion", DEADLINE, || async {
        let profile = cluster_profile(&stack, &name).await.ok()??;
        profile["metadata"]["deletionTimestamp"]
            .is_string()
            .then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;

    // The event comes back: its instantiated ConfigMap (no finalizer) is created again, and the
    // profile, written after what it references, is applied to the one being deleted.
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    wait_for(
        "the instantiated ConfigMap created again",
        DEADLINE,
        || async {
            let owned = owned_by(&stack, TRIGGER, "cluster-a").await.ok()?;
            owned.iter().any(|o| o["kind"] == "ConfigMap").then_some(())
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = cluster_profile(&stack, &name).await?;
    assert!(
        held.is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string()),
        "the old profile is still held by the finalizer"
    );
    // The applier says why it waits, and what holds the profile.
    let waiting = format!(
        "ClusterProfile {name} is being deleted (finalizers: {ADDON_CONTROLLER}): it is written again once it is gone"
    );
    wait_for("the applier saying why it waits", DEADLINE, || async {
        stack
            .service_log("sluice-applier")
            .contains(&waiting)
            .then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    // ... and says it to the trigger's owner, in a Warning Event on the trigger
    // (`kubectl describe`).
    let event = wait_for("a Warning Event on the trigger", DEADLINE, || async {
        let events = stack.list(MANAGEMENT, "v1", "Event", &[]).await.ok()?;
        events
            .into_iter()
            .find(|e| e["reason"] == "WaitingForDeletion" && e["involvedObject"]["name"] == TRIGGER)
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    let trigger = trigger_object(&stack).await?.unwrap_or_default();
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["kind"], ADDON.1);
    assert_eq!(event["involvedObject"]["uid"], trigger["metadata"]["uid"]);
    assert_eq!(
        event["message"],
        format!("eventbasedaddon {TRIGGER}: {waiting}").as_str()
    );

    // The addon-controller is done with the old profile: it goes, and the event's profile is
    // created anew.
    sluice_kube::apply::set_finalizer(client, &kind, "", &name, ADDON_CONTROLLER, false).await?;
    let uid = first["metadata"]["uid"].clone();
    wait_for("the profile created anew", DEADLINE, || async {
        let profile = cluster_profile(&stack, &name).await.ok()??;
        (profile["metadata"]["uid"] != uid && profile["metadata"]["deletionTimestamp"].is_null())
            .then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}

/// The uids of the objects sluice owns for the seed's trigger in cluster-a, by kind.
async fn owned_uids(stack: &Stack) -> anyhow::Result<Vec<(String, String)>> {
    let mut owned: Vec<(String, String)> = owned_by(stack, TRIGGER, "cluster-a")
        .await?
        .iter()
        .map(|o| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (text(&o["kind"]), text(&o["metadata"]["uid"]))
        })
        .collect();
    owned.sort();
    Ok(owned)
}

/// Deletes every object sluice owns for the seed's trigger in cluster-a, as a user would with
/// kubectl, and waits until each is back (by a new uid).
async fn delete_by_hand_and_see_them_back(stack: &Stack) -> anyhow::Result<Vec<Value>> {
    let before = delete_by_hand(stack).await?;
    see_them_back(stack, &before).await
}

/// Deletes the profile and ConfigMap sluice owns for the seed's trigger in cluster-a; returns
/// their kinds and uids.
async fn delete_by_hand(stack: &Stack) -> anyhow::Result<Vec<(String, String)>> {
    let before = delete_all_by_hand(stack).await?;
    let kinds: Vec<&str> = before.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["ClusterProfile", "ConfigMap"]);
    Ok(before)
}

/// Deletes every object sluice owns for the seed's trigger in cluster-a, as `kubectl delete -l`
/// would; returns their kinds and uids.
async fn delete_all_by_hand(stack: &Stack) -> anyhow::Result<Vec<(String, String)>> {
    let before = owned_uids(stack).await?;
    for object in owned_by(stack, TRIGGER, "cluster-a").await? {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        stack
            .delete(
                MANAGEMENT,
                text("/apiVersion"),
                text("/kind"),
                text("/metadata/namespace"),
                text("/metadata/name"),
            )
            .await?;
    }
    assert!(owned_by(stack, TRIGGER, "cluster-a").await?.is_empty());
    Ok(before)
}

/// Waits until each object `before` names is back (same kind, new uid).
async fn see_them_back(stack: &Stack, before: &[(String, String)]) -> anyhow::Result<Vec<Value>> {
    wait_for(
        "the objects deleted by hand written again",
        DEADLINE,
        || async {
            let after = owned_uids(stack).await.ok()?;
            (after.len() == before.len()
                && after
                    .iter()
                    .zip(before)
                    .all(|(a, b)| a.0 == b.0 && a.1 != b.1))
            .then_some(())
        },
    )
    .await
    .map_err(|e| fail(stack, e))?;
    owned_by(stack, TRIGGER, "cluster-a").await
}

/// Waits until the (last started) applier has listed what it wrote of each of its three kinds:
/// from then on it sees every deletion.
async fn applier_watching(stack: &Stack) -> anyhow::Result<()> {
    wait_for("the applier watching what it wrote", DEADLINE, || async {
        (applier_lines(stack, "the objects sluice wrote of this kind are listed") == 3)
            .then_some(())
    })
    .await
    .map_err(|e| fail(stack, e))
}

/// The applier's watch of what it wrote falls behind while it writes and someone deletes it all
/// (`kubectl delete -l`): the API server ends the watch, and the version it would resume from
/// is compacted away, so it re-lists. Neither the writes nor the deletions were ever among its
/// events; what the applier told it it wrote (ADR 0039) makes the re-list find them missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_falls_behind_a_bulk_deletion_still_finds_what_went() -> anyhow::Result<()> {
    const LATE: usize = 5;
    let stack = running_seed().await?;
    applier_watching(&stack).await?;
    let faults = stack.server.faults(MANAGEMENT);
    faults.stall_watches(true);
    for i in 0..LATE {
        let service = demo::SERVICE.replace("name: my-service", &format!("name: late-{i}"));
        stack.apply_yaml("cluster-a", &service).await?;
    }
    let all = 2 * (LATE + 1);
    wait_for("every Service's objects written", DEADLINE, || async {
        (owned_by(&stack, TRIGGER, "cluster-a").await.ok()?.len() == all).then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    let before = delete_all_by_hand(&stack).await?;
    assert_eq!(before.len(), all);
    stack.server.compact(MANAGEMENT);
    faults.drop_watches();
    faults.stall_watches(false);
    see_them_back(&stack, &before).await?;
    assert_eq!(
        applier_lines(&stack, "deleted by someone else: it is written again"),
        all,
        "one repair per object deleted by hand"
    );
    Ok(())
}

/// A ClusterProfile or instantiated ConfigMap deleted by hand (`kubectl delete`) while its
/// event stands is written again from its unit's desired state, as Sveltos's event-manager
/// writes it again at its next collection; also by an applier restarted since, which knows
/// the unit from the object's annotation, and by one that was away while it was deleted. So is the EventReport, from the reporter's set. The
/// applier's own deletions (the event going) stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_sluice_wrote_and_someone_else_deletes_is_written_again() -> anyhow::Result<()> {
    const REPAIRING: &str = "deleted by someone else: it is written again";
    let mut stack = running_seed().await?;
    applier_watching(&stack).await?;
    let first = restored(&stack).await?;
    let subject = sluice_bus::topology::desired_resource_subject(
        TRIGGER,
        &sluice_bus::topology::cluster_tokens("sveltos", "default", "cluster-a"),
        "default",
        "my-service",
    );
    assert_eq!(
        first["metadata"]["annotations"]["sluice.io/desired-subject"],
        subject.as_str(),
        "the profile names the desired state it comes from"
    );

    let again = delete_by_hand_and_see_them_back(&stack).await?;
    for object in &again {
        assert_eq!(
            object["metadata"]["annotations"]["sluice.io/desired-subject"],
            subject.as_str()
        );
    }
    let profile = restored(&stack).await?;
    assert_eq!(profile["spec"], first["spec"]);
    assert_eq!(profile["metadata"]["name"], first["metadata"]["name"]);
    assert_eq!(
        applier_lines(&stack, REPAIRING),
        2,
        "one line per object deleted by hand"
    );
    assert_eq!(written_again(&stack).await?, 2);

    // The EventReport, a view the reporter keeps, likewise.
    let report = report_listing_the_service(&stack).await?;
    stack
        .delete(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventReport",
            "default",
            REPORT_A,
        )
        .await?;
    let again = demo::wait_report(&stack, REPORT_A, DEADLINE, |r| {
        r["metadata"]["uid"] != report["metadata"]["uid"]
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    assert_eq!(again["spec"], report["spec"]);
    assert!(stack
        .service_log("sluice-reporter")
        .contains("an EventReport was deleted by someone else: it is written again"));

    // What is deleted while the applier is away, it finds at its start from what its last
    // results say the units held.
    stack.stop_service("sluice-applier")?;
    let before = delete_by_hand(&stack).await?;
    stack.start_service("sluice-applier")?;
    see_them_back(&stack, &before).await?;
    assert_eq!(applier_lines(&stack, REPAIRING), 2);

    // A restarted applier knows nothing of the pair until it is deleted from: the
    // annotation names the unit.
    stack.stop_service("sluice-applier")?;
    stack.start_service("sluice-applier")?;
    applier_watching(&stack).await?;
    delete_by_hand_and_see_them_back(&stack).await?;

    // The event goes: what the applier deletes itself stays deleted, and is not taken for
    // someone else's deletion.
    let repairs = applier_lines(&stack, REPAIRING);
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    cleaned(&stack).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(owned_by(&stack, TRIGGER, "cluster-a").await?.is_empty());
    assert_eq!(applier_lines(&stack, REPAIRING), repairs);
    Ok(())
}

/// A field sluice wrote and someone else changes (`kubectl patch`, `kubectl edit`) is written
/// back from its unit's desired state, as a controller restores what it owns and as Sveltos's
/// event-manager rewrites its profiles at its next collection; what someone else adds of their
/// own (a label) stays, as server-side apply keeps what it does not own. The EventReport, a view
/// the reporter keeps, likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_sluice_wrote_and_someone_else_edits_is_written_back() -> anyhow::Result<()> {
    const EDITED: &str = "edited by someone else: it is written again";
    let mut stack = running_seed().await?;
    applier_watching(&stack).await?;
    let before = owned_by(&stack, TRIGGER, "cluster-a").await?;
    let of_kind = |objects: &[Value], kind: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no {kind} owned"))
    };
    let (profile, config_map) = (
        of_kind(&before, "ClusterProfile")?,
        of_kind(&before, "ConfigMap")?,
    );
    let text = |o: &Value, pointer: &str| {
        o.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let profile_name = text(&profile, "/metadata/name");
    let (map_name, map_namespace) = (
        text(&config_map, "/metadata/name"),
        text(&config_map, "/metadata/namespace"),
    );
    let key = config_map["data"]
        .as_object()
        .and_then(|data| data.keys().next().cloned())
        .ok_or_else(|| anyhow::anyhow!("the ConfigMap has no data: {config_map}"))?;

    // Someone else's label: a field of theirs, not an edit of sluice's.
    stack
        .kubectl(
            MANAGEMENT,
            &["label", "clusterprofile", &profile_name, "team=payments"],
        )
        .await?;
    // The profile's policies and the ConfigMap's policy edited.
    stack
        .kubectl(
            MANAGEMENT,
            &[
                "patch",
                "clusterprofile",
                &profile_name,
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"policyRefs":[]}}"#,
            ],
        )
        .await?;
    let edit = json!({"data": {key.as_str(): "edited"}}).to_string();
    patch_by_hand(&stack, "configmap", &map_name, &map_namespace, &edit).await?;

    let after = wait_for(
        "the fields edited by hand written back",
        DEADLINE,
        || async {
            let after = owned_by(&stack, TRIGGER, "cluster-a").await.ok()?;
            let profile_now = of_kind(&after, "ClusterProfile").ok()?;
            let map_now = of_kind(&after, "ConfigMap").ok()?;
            (profile_now["spec"] == profile["spec"]
                && map_now["data"] == config_map["data"]
                && profile_now["metadata"]["labels"]["team"] == "payments")
                .then_some(after)
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    // Written back in place, not created anew; sluice holds its fields again.
    assert_eq!(owned_uids(&stack).await?.len(), 2);
    for object in &after {
        let was = of_kind(&before, text(object, "/kind").as_str())?;
        assert_eq!(object["metadata"]["uid"], was["metadata"]["uid"]);
        let managers: Vec<String> = object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|entry| text(entry, "/manager"))
            .collect();
        assert!(
            !managers.iter().any(|m| m == "kubectl-patch"),
            "{managers:?}"
        );
    }
    assert_eq!(
        applier_lines(&stack, EDITED),
        2,
        "one repair per object edited"
    );
    assert_eq!(written_again(&stack).await?, 2);

    // The EventReport's list of what matches, emptied by hand.
    let report = report_listing_the_service(&stack).await?;
    patch_by_hand(&stack, "eventreport", REPORT_A, "default", EMPTY_REPORT).await?;
    let again = demo::wait_report(&stack, REPORT_A, DEADLINE, |r| {
        r["metadata"]["resourceVersion"] != report["metadata"]["resourceVersion"]
            && lists_the_service(r)
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    assert_eq!(again["metadata"]["uid"], report["metadata"]["uid"]);
    assert!(stack
        .service_log("sluice-reporter")
        .contains("an EventReport was edited by someone else: it is written again"));

    // Nothing more is written back once all is as sluice wrote it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(applier_lines(&stack, EDITED), 2);

    // Edited while the applier and the reporter are away: the applier finds the ConfigMap by
    // its watch's first list (someone else owns a field of its contents) and writes it back,
    // though it has not listed the pair yet; the reporter writes its reports at its start.
    stack.stop_service("sluice-applier")?;
    stack.stop_service("sluice-reporter")?;
    patch_by_hand(&stack, "configmap", &map_name, &map_namespace, &edit).await?;
    let report = report_listing_the_service(&stack).await?;
    patch_by_hand(&stack, "eventreport", REPORT_A, "default", EMPTY_REPORT).await?;
    stack.start_service("sluice-applier")?;
    stack.start_service("sluice-reporter")?;
    wait_for(
        "the ConfigMap edited while away written back",
        DEADLINE,
        || async {
            let after = owned_by(&stack, TRIGGER, "cluster-a").await.ok()?;
            (of_kind(&after, "ConfigMap").ok()?["data"] == config_map["data"]).then_some(())
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    demo::wait_report(&stack, REPORT_A, DEADLINE, |r| {
        r["metadata"]["resourceVersion"] != report["metadata"]["resourceVersion"]
            && lists_the_service(r)
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    // The profile, whose only other manager holds a label, is not taken for edited.
    assert_eq!(applier_lines(&stack, EDITED), 1);
    Ok(())
}

/// A trigger deleted while sluice still owned something for it (its finalizer taken off by
/// hand), whose configuration's deletion the applier never saw (away longer than it lives): the
/// pair's removal deletes what it held, and the status write that then finds the trigger gone
/// makes the applier forget it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_the_applier_finds_gone_is_forgotten() -> anyhow::Result<()> {
    let mut stack = running_seed().await?;
    stack.stop_service("sluice-applier")?;
    let resource = ADDON.1.to_lowercase();
    let unblock = r#"{"metadata":{"finalizers":null}}"#;
    stack
        .kubectl(
            MANAGEMENT,
            &[
                "patch", &resource, TRIGGER, "--type", "merge", "-p", unblock,
            ],
        )
        .await?;
    stack
        .kubectl(MANAGEMENT, &["delete", &resource, TRIGGER])
        .await?;
    assert!(trigger_object(&stack).await?.is_none(), "deleted at once");
    let config = topology::config_subject(ADDON.1, "", TRIGGER);
    expired_unseen(
        &stack,
        topology::CONFIG,
        &config,
        topology::CONFIG_TOMBSTONE_TTL,
    )
    .await?;
    held_while_away(&stack, "sluice-applier").await?;

    stack.start_service("sluice-applier")?;
    cleaned(&stack).await?;
    wait_for("the trigger forgotten", DEADLINE, || async {
        let forgotten = demo::counter(&stack, "sluice-applier", FORGOTTEN).await;
        (forgotten.ok()? == 1).then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}

/// The CustomResourceDefinition `name` of the management cluster, if it exists.
async fn crd(stack: &Stack, name: &str) -> anyhow::Result<Option<Value>> {
    let kind = "CustomResourceDefinition";
    stack
        .get(MANAGEMENT, "apiextensions.k8s.io/v1", kind, "", name)
        .await
}

/// A merge patch that empties an EventReport's list of what matches.
const EMPTY_REPORT: &str = r#"{"spec":{"matchingResources":[]}}"#;

/// Edits an object of the management cluster with `kubectl patch --type merge`.
async fn patch_by_hand(
    stack: &Stack,
    resource: &str,
    name: &str,
    namespace: &str,
    patch: &str,
) -> anyhow::Result<()> {
    let args = [
        "patch", resource, name, "-n", namespace, "--type", "merge", "-p", patch,
    ];
    stack.kubectl(MANAGEMENT, &args).await.map(drop)
}

/// The applier's count of objects it wrote again after someone else deleted or edited them.
const WRITTEN_AGAIN: &str = "sluice_applier_objects_written_again_total";

/// How many lines of the (last started) applier's log say `line`.
fn applier_lines(stack: &Stack, line: &str) -> usize {
    stack.service_log("sluice-applier").matches(line).count()
}

/// The applier's count of objects it wrote again.
async fn written_again(stack: &Stack) -> anyhow::Result<u64> {
    demo::counter(stack, "sluice-applier", WRITTEN_AGAIN).await
}

/// Whether cluster-a's EventReport lists the seed's Service.
fn lists_the_service(report: &Value) -> bool {
    report["spec"]["matchingResources"][0]["name"] == "my-service"
}

/// cluster-a's EventReport once it lists the seed's Service.
async fn report_listing_the_service(stack: &Stack) -> anyhow::Result<Value> {
    demo::wait_report(stack, REPORT_A, DEADLINE, lists_the_service)
        .await
        .map_err(|e| fail(stack, e))
}

/// cluster-a's EventReport of seed 000's EventSource.
const REPORT_A: &str = "sveltos--sveltos-service--cluster-a";

/// cluster-a's subject tokens on the bus.
fn tokens_a() -> String {
    topology::cluster_tokens("sveltos", "default", "cluster-a")
}

async fn delete_cluster_a(stack: &Stack) -> anyhow::Result<()> {
    stack
        .delete(MANAGEMENT, CLUSTER.0, CLUSTER.1, "default", "cluster-a")
        .await
}

/// Lets the tombstone on `subject` of `stream` expire unseen (it is purged once it carries its
/// time to live), checking that it lives `ttl`.
async fn expired_unseen(
    stack: &Stack,
    stream: topology::StreamSpec,
    subject: &str,
    ttl: Duration,
) -> anyhow::Result<()> {
    let lived = demo::expire_unseen(stack, stream, subject, DEADLINE)
        .await
        .map_err(|e| fail(stack, e))?;
    assert_eq!(lived, ttl.as_secs().to_string(), "{subject}");
    Ok(())
}

/// cluster-a's deletion on SLUICE_CONFIG expires unseen.
async fn cluster_a_deletion_expired(stack: &Stack) -> anyhow::Result<()> {
    let config = topology::config_subject(CLUSTER.1, "default", "cluster-a");
    expired_unseen(
        stack,
        topology::CONFIG,
        &config,
        topology::CONFIG_TOMBSTONE_TTL,
    )
    .await
}

/// The unit's two objects still stand while `service` is away.
async fn held_while_away(stack: &Stack, service: &str) -> anyhow::Result<()> {
    assert_eq!(
        owned_by(stack, TRIGGER, "cluster-a").await?.len(),
        2,
        "nothing removed while {service} is away"
    );
    Ok(())
}

/// Waits until the result of the unit whose desired state is on `desired` is a tombstone that
/// expires, as any removal's is.
async fn result_expires(stack: &Stack, desired: &str) -> anyhow::Result<()> {
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let results = js.get_stream(topology::APPLIED.name).await?;
    let applied = topology::applied_subject_for(desired).expect("a desired subject");
    demo::wait_expiring(&results, &applied, DEADLINE)
        .await
        .map_err(|e| fail(stack, e))?;
    Ok(())
}

/// Waits until `subject` of `stream` holds no message (purged).
async fn purged(
    stack: &Stack,
    stream: &async_nats::jetstream::stream::Stream,
    subject: &str,
) -> anyhow::Result<()> {
    wait_for(&format!("{subject} purged"), DEADLINE, || async {
        stream
            .get_last_raw_message_by_subject(subject)
            .await
            .is_err()
            .then_some(())
    })
    .await
    .map_err(|e| fail(stack, e))
}

/// Waits until the EventReport `name` is gone.
async fn report_deleted(stack: &Stack, name: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("the EventReport {name} deleted"),
        DEADLINE,
        || async { matches!(stack.event_report(name).await, Ok(None)).then_some(()) },
    )
    .await
    .map_err(|e| fail(stack, e))
}

/// A resource unit's removal expires from SLUICE_DESIRED after a day: an applier away longer
/// never gets it, and removes at start what the unit's last result held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_away_longer_than_a_removal_lives_removes_what_the_unit_held(
) -> anyhow::Result<()> {
    let mut stack = running_seed().await?;
    stack.stop_service("sluice-applier")?;
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    let desired = topology::desired_resource_subject(TRIGGER, &tokens_a(), "default", "my-service");
    // The removal is the one state of the unit with a time to live; it expires unseen.
    expired_unseen(&stack, topology::DESIRED, &desired, topology::TOMBSTONE_TTL).await?;
    held_while_away(&stack, "the applier").await?;
    stack.start_service("sluice-applier")?;
    cleaned(&stack).await?;
    result_expires(&stack, &desired).await
}

/// A pair's removal expires too: when the trigger no longer selects the cluster while the
/// applier is away for longer than the removal lives, the restarted applier removes everything
/// of the pair, and its other units' states, as the removal would have (ADR 0041).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_away_longer_than_a_pairs_removal_lives_removes_the_pair() -> anyhow::Result<()>
{
    let mut stack = running_seed().await?;
    stack.stop_service("sluice-applier")?;
    stack
        .apply(MANAGEMENT, &cluster_a(json!({"env": "prod"})))
        .await?;
    let main = topology::desired_subject(TRIGGER, &tokens_a());
    expired_unseen(&stack, topology::DESIRED, &main, topology::TOMBSTONE_TTL).await?;
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let desired = js.get_stream(topology::DESIRED.name).await?;
    // The resource unit's state stands: only the pair's removal takes it off the stream.
    let resource =
        topology::desired_resource_subject(TRIGGER, &tokens_a(), "default", "my-service");
    desired.get_last_raw_message_by_subject(&resource).await?;
    held_while_away(&stack, "the applier").await?;
    stack.start_service("sluice-applier")?;
    cleaned(&stack).await?;
    purged(&stack, &desired, &resource).await?;
    result_expires(&stack, &main).await
}

/// A set's end expires too: when a cluster is deleted while the reporter is away for longer
/// than the head that says its set went lives, the restarted reporter deletes the EventReport it
/// wrote for that set; a report someone else wrote stays (ADR 0041).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reporter_away_longer_than_a_sets_end_lives_deletes_its_report() -> anyhow::Result<()> {
    const OTHERS: &str = "sveltos--sveltos-service--cluster-z";
    let mut stack = running_seed().await?;
    demo::wait_report(&stack, REPORT_A, DEADLINE, |_| true)
        .await
        .map_err(|e| fail(&stack, e))?;
    let labels = sluice_domain::naming::event_report_labels(
        &sluice_domain::cluster::ClusterId::sveltos("default", "cluster-z"),
        "sveltos-service",
    );
    stack
        .apply(
            MANAGEMENT,
            &json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventReport",
                    "metadata": {"name": OTHERS, "namespace": "default", "labels": labels},
                    "spec": {"clusterNamespace": "default", "clusterName": "cluster-z",
                             "clusterType": "Sveltos", "eventSourceName": "sveltos-service"}}),
        )
        .await?;
    stack.stop_service("sluice-reporter")?;
    delete_cluster_a(&stack).await?;
    let head = topology::match_subject(&tokens_a(), "sveltos-service");
    expired_unseen(&stack, topology::MATCH, &head, topology::TOMBSTONE_TTL).await?;
    assert!(
        stack.event_report(REPORT_A).await?.is_some(),
        "the report stays while the reporter is away"
    );
    stack.start_service("sluice-reporter")?;
    report_deleted(&stack, REPORT_A).await?;
    assert!(
        stack.event_report(OTHERS).await?.is_some(),
        "a report someone else wrote stays"
    );
    Ok(())
}

/// The renderer needs no start-up check of its own: when a cluster is deleted while it is away
/// for longer than the cluster's deletion and the head that says its set went live, the
/// restarted renderer finds no such cluster in its configuration and removes the pair from what
/// SLUICE_DESIRED holds (ADR 0041).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renderer_away_longer_than_a_sets_end_lives_removes_the_pair() -> anyhow::Result<()> {
    let mut stack = running_seed().await?;
    stack.stop_service("sluice-renderer")?;
    delete_cluster_a(&stack).await?;
    // The set's end and the cluster's deletion both expire unseen.
    let head = topology::match_subject(&tokens_a(), "sveltos-service");
    expired_unseen(&stack, topology::MATCH, &head, topology::TOMBSTONE_TTL).await?;
    cluster_a_deletion_expired(&stack).await?;
    held_while_away(&stack, "the renderer").await?;
    stack.start_service("sluice-renderer")?;
    cleaned(&stack).await
}

/// An evaluator away while a cluster is deleted still ends the cluster's set when it starts:
/// it finds no such cluster in its configuration, whether or not the cluster's deletion is
/// still on SLUICE_CONFIG, and the set's EventReport goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluator_away_while_a_cluster_is_deleted_ends_its_set() -> anyhow::Result<()> {
    let mut stack = running_seed().await?;
    demo::wait_report(&stack, REPORT_A, DEADLINE, |_| true)
        .await
        .map_err(|e| fail(&stack, e))?;
    stack.stop_service("sluice-evaluator")?;
    delete_cluster_a(&stack).await?;
    cluster_a_deletion_expired(&stack).await?;
    stack.start_service("sluice-evaluator")?;
    cleaned(&stack).await?;
    let head = topology::match_subject(&tokens_a(), "sveltos-service");
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let matches = js.get_stream(topology::MATCH.name).await?;
    demo::wait_expiring(&matches, &head, DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    report_deleted(&stack, REPORT_A).await
}

/// A cluster deleted and registered again under the same name starts afresh: what was deleted
/// in it meanwhile does not come back from what the evaluator held of its first registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_registered_again_shows_only_what_it_holds_now() -> anyhow::Result<()> {
    let stack = running_seed().await?;
    let registered = stack
        .get(MANAGEMENT, CLUSTER.0, CLUSTER.1, "default", "cluster-a")
        .await?
        .expect("cluster-a is registered");
    delete_cluster_a(&stack).await?;
    cleaned(&stack).await?;
    // While the cluster is not registered, its Service goes and another comes.
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    let other = demo::SERVICE.replace("name: my-service", "name: other-service");
    stack.apply_yaml("cluster-a", &other).await?;
    let mut again = registered.clone();
    for field in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        again["metadata"]
            .as_object_mut()
            .map(|meta| meta.remove(field));
    }
    again.as_object_mut().map(|o| o.remove("status"));
    stack.apply(MANAGEMENT, &again).await?;
    if let Some(status) = registered.get("status") {
        let mut with_status = again.clone();
        with_status["status"] = status.clone();
        stack.apply_status(MANAGEMENT, &with_status).await?;
    }
    wait_profile(&stack, TRIGGER, "cluster-a", "other-service", DEADLINE)
        .await
        .map_err(|e| fail(&stack, e))?;
    // Everything after the other Service's profile has been taken: the one profile is its.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let profiles: Vec<String> = owned_by(&stack, TRIGGER, "cluster-a")
        .await?
        .iter()
        .filter(|o| o["kind"] == "ClusterProfile")
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(profiles.len(), 1, "{profiles:?}\n{}", stack.logs());
    Ok(())
}

/// A deleted trigger's rendering failure leaves the EventReport it showed on, which stays for
/// the trigger that still uses its EventSource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_triggers_failure_leaves_the_report_it_showed_on() -> anyhow::Result<()> {
    const BROKEN: &str = "broken-network-policy";
    let stack = running_seed().await?;
    let broken = demo::EVENT_BASED_ADDON
        .replace("name: service-network-policy", &format!("name: {BROKEN}"))
        .replace("name: network-policy", "name: broken-policy")
        .replace(
            "front-{{ .Resource.metadata.name }}",
            "front-{{ .Resource.metadata.name | nosuchfunction }}",
        );
    stack.apply_yaml(MANAGEMENT, &broken).await?;
    let failure = |report: Value| {
        report["status"]["failureMessage"]
            .as_str()
            .map(str::to_string)
    };
    wait_for(
        "the broken trigger's failure on the EventReport",
        DEADLINE,
        || async {
            let report = stack.event_report(REPORT_A).await.ok().flatten()?;
            failure(report).filter(|m| m.contains(BROKEN) && m.contains("nosuchfunction"))
        },
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    stack
        .delete(MANAGEMENT, ADDON.0, ADDON.1, "", BROKEN)
        .await?;
    wait_for("the EventReport clear again", DEADLINE, || async {
        let report = stack.event_report(REPORT_A).await.ok().flatten()?;
        failure(report).is_none().then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}

/// A watcher away while a cluster is deleted forgets what it published of the cluster when it
/// starts, as it does when it sees the deletion: nothing of the cluster stays on SLUICE_CHANGES
/// to come back if a cluster of that name is registered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_away_while_a_cluster_is_deleted_forgets_its_changes() -> anyhow::Result<()> {
    let mut stack = running_seed().await?;
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let changes = js.get_stream(topology::CHANGES.name).await?;
    let service = topology::change_subject(&tokens_a(), "", "Service", "default", "my-service");
    changes.get_last_raw_message_by_subject(&service).await?;
    stack.stop_service("sluice-watcher")?;
    delete_cluster_a(&stack).await?;
    stack.start_service("sluice-watcher")?;
    cleaned(&stack).await?;
    purged(&stack, &changes, &service).await?;
    Ok(())
}

/// The trigger's CRD deleted (as uninstalling event-manager's chart does, `docs/operating.md`)
/// while the applier is away: the CRD waits, terminating, while sluice's finalizer holds the
/// trigger; the applier back sees the trigger deleted, withdraws what it created and releases
/// it, and the CRD goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_trigger_crd_goes_once_the_applier_has_withdrawn_its_triggers(
) -> anyhow::Result<()> {
    const CRD: &str = "eventbasedaddons.lib.projectsveltos.io";
    let mut stack = running_seed().await?;
    stack.stop_service("sluice-applier")?;
    stack
        .kubectl(MANAGEMENT, &["delete", "crd", CRD, "--wait=false"])
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let terminating = crd(&stack, CRD)
        .await?
        .expect("the CRD waits for its objects");
    assert!(terminating["metadata"]["deletionTimestamp"].is_string());
    let held = trigger_object(&stack)
        .await?
        .expect("the finalizer holds the trigger");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(owned_by(&stack, TRIGGER, "cluster-a").await?.len(), 2);

    stack.start_service("sluice-applier")?;
    cleaned(&stack).await?;
    wait_for("the CRD gone after its last trigger", DEADLINE, || async {
        matches!(crd(&stack, CRD).await, Ok(None)).then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}
