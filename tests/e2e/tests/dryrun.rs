//! `sluice dry-run` against the pipeline itself: the documents a user applies, given to the
//! running stack and to the dry run, give the same objects in the management cluster, field for
//! field. The dry run reads the cluster's SveltosCluster and Services as the API server holds
//! them (what the watcher sees); the EventSources and triggers are the seeds' own files, in
//! v1alpha1, so the dry run converts them as the webhook does.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use sluice_cli::demo::{self, owned_by};
use sluice_cli::dryrun::{self, Document, Options};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_testkit::wait_for;

const DEADLINE: Duration = Duration::from_secs(30);

use sluice_cli::examples::seed_000_ingress as ingress;
use sluice_cli::examples::seed_000_networkpolicy as policy;
use sluice_cli::examples::{seed_001, seed_003};

fn https_service(name: &str, port: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "eng"},
           "spec": {"selector": {"app": name}, "ports": [{"port": 80}, {"port": port}]}})
}

/// (kind, namespace, name) -> the fields sluice decides of an object: its labels, annotations
/// and everything but metadata and status.
fn decided(objects: impl IntoIterator<Item = Value>) -> BTreeMap<(String, String, String), Value> {
    objects
        .into_iter()
        .map(|mut object| {
            let text = |o: &Value, p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let key = (
                text(&object, "/kind"),
                text(&object, "/metadata/namespace"),
                text(&object, "/metadata/name"),
            );
            let metadata = json!({
                "labels": object["metadata"]["labels"].clone(),
                "annotations": object["metadata"]["annotations"].clone(),
            });
            let fields = object.as_object_mut().expect("an object");
            fields.remove("status");
            fields.insert("metadata".into(), metadata);
            (key, object)
        })
        .collect()
}

/// `object` as the management cluster would store it: created with `kubectl create
/// --dry-run=server` under a name of its own, its name then given back.
async fn defaulted(stack: &Stack, mut object: Value) -> anyhow::Result<Value> {
    let name = object["metadata"]["name"].clone();
    object["metadata"]["name"] = json!(format!("{}-dry", name.as_str().unwrap_or_default()));
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), serde_json::to_vec(&object)?)?;
    let path = file.path().to_str().expect("a UTF-8 path");
    let out = stack
        .kubectl(
            MANAGEMENT,
            &["create", "--dry-run=server", "-o", "json", "-f", path],
        )
        .await?;
    let mut stored: Value = serde_json::from_str(&out)?;
    stored["metadata"]["name"] = name;
    Ok(stored)
}

/// Runs the dry run over `management` (the files' texts) and `objects` of the management
/// cluster, the SveltosClusters and the `kinds` of `cluster` as the API server holds them, and
/// asserts that it writes exactly the `live` objects (each given the API server's defaults) and
/// reports what the reporter wrote.
async fn compare(
    stack: &Stack,
    management: &[&str],
    objects: &[Value],
    (cluster, kinds): (&str, &[(&str, &str)]),
    live: Vec<Value>,
) -> anyhow::Result<dryrun::Outcome> {
    let mut documents = Vec::new();
    for (i, text) in management.iter().enumerate() {
        dryrun::parse_documents(&format!("management {i}"), text, false, &mut documents)?;
    }
    let clusters = stack
        .list(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "SveltosCluster",
            &[],
        )
        .await?;
    for object in objects.iter().cloned().chain(clusters) {
        documents.push(Document {
            origin: "the management cluster".into(),
            object,
            managed_only: false,
        });
    }
    for (api_version, kind) in kinds {
        for object in stack.list(cluster, api_version, kind, &[]).await? {
            documents.push(Document {
                origin: cluster.into(),
                object,
                managed_only: true,
            });
        }
    }
    let outcome = dryrun::dry_run(
        &documents,
        &Options {
            cluster: Some(format!("default/{cluster}")),
            ..Options::default()
        },
    )?;
    assert_eq!(outcome.problems, Vec::<String>::new());
    assert_eq!(outcome.cluster, format!("sveltos:default/{cluster}"));

    // The dry run prints what the applier sends; the API server adds its defaults as it stores
    // it. Each is created under another name with `--dry-run=server`, so it meets the same
    // defaults without being merged into the object the pipeline wrote.
    // Held against what the pipeline wrote, nothing is to create, change or delete.
    let (differences, unchanged) = dryrun::compare(&outcome, &live);
    assert_eq!(differences, Vec::new());
    assert_eq!(unchanged, live.len());
    let mut dry = Vec::new();
    for written in &outcome.objects {
        dry.push(defaulted(stack, written.object.clone()).await?);
    }
    let live = decided(live);
    let dry = decided(dry);
    assert_eq!(
        live.keys().collect::<Vec<_>>(),
        dry.keys().collect::<Vec<_>>(),
        "the same objects by kind, namespace and name"
    );
    for (key, object) in &live {
        assert_eq!(object, &dry[key], "{key:?}");
    }
    // And the EventReports the reporter wrote list what the dry run's list.
    for report in &outcome.reports {
        let name = report["metadata"]["name"].as_str().unwrap_or_default();
        let written = demo::wait_report(stack, name, DEADLINE, |r| {
            r["spec"]["matchingResources"] == report["spec"]["matchingResources"]
        })
        .await;
        assert!(written.is_ok(), "EventReport {name}: {written:?}");
    }
    Ok(outcome)
}

/// Every object the `triggers` wrote for `cluster` once `done` says they are complete.
async fn wait_live(
    stack: &Stack,
    triggers: &[&str],
    cluster: &str,
    done: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    wait_for("the triggers' objects", DEADLINE, || async {
        let mut all = Vec::new();
        for trigger in triggers {
            all.extend(owned_by(stack, trigger, cluster).await.ok()?);
        }
        done(&all).then_some(all)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_writes_what_the_pipeline_writes() -> anyhow::Result<()> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    let management = [
        policy::EVENT_SOURCE,
        policy::EVENT_BASED_ADDON,
        ingress::EVENT_SOURCE,
        ingress::EVENT_BASED_ADDON,
    ];
    for text in management {
        stack.apply_yaml(MANAGEMENT, text).await?;
    }
    stack.apply_yaml("cluster-a", policy::SERVICE).await?;
    stack
        .apply(
            "cluster-a",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "eng"}}),
        )
        .await?;
    for service in [https_service("api", 443), https_service("admin", 8443)] {
        stack.apply("cluster-a", &service).await?;
    }

    // One NetworkPolicy profile for the labelled Service; one Ingress over both https ones.
    let triggers = ["service-network-policy", "ingress-configuration"];
    let live = wait_live(&stack, &triggers, "cluster-a", |all| {
        let ingress_over_both = all.iter().any(|o| {
            o["data"]["ingress.yaml"]
                .as_str()
                .is_some_and(|t| t.contains("/api") && t.contains("/admin"))
        });
        all.len() == 4 && ingress_over_both
    })
    .await?;

    let outcome = compare(
        &stack,
        &management,
        &[],
        ("cluster-a", &[("v1", "Service")]),
        live,
    )
    .await?;
    assert_eq!(outcome.reports.len(), 2);
    Ok(())
}

/// Seed 001 (a generator over the cluster's Namespaces, named from the cluster, and
/// `templateResourceRefs`) and seed 003 (a Lua script over a Service's status, a destination
/// selector) in one production cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_writes_what_the_pipeline_writes_for_generators_and_destinations(
) -> anyhow::Result<()> {
    let stack = Stack::start(&["workload", "eng"], None).await?;
    stack
        .register_cluster("workload", &[("env", "production")])
        .await?;
    stack.register_cluster("eng", &[("dep", "eng")]).await?;
    let management = [
        seed_001::EVENT_SOURCE,
        seed_001::EVENT_TRIGGER,
        seed_001::CONFIG_MAPS,
        seed_003::EVENT_SOURCE,
        seed_003::EVENT_TRIGGER,
    ];
    for text in management {
        stack.apply_yaml(MANAGEMENT, text).await?;
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "login-credentials", "namespace": "default"},
        "data": {"user": "YWRtaW4=", "password": "c2VjcmV0"}});
    stack.apply(MANAGEMENT, &secret).await?;
    for (name, labels) in [
        ("eng", json!({"secret": "required"})),
        ("hr", json!({"secret": "required"})),
        ("ops", json!({"team": "ops"})),
        ("test", json!({})),
    ] {
        stack
            .apply(
                "workload",
                &json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": name, "labels": labels}}),
            )
            .await?;
    }
    let mut workload = Vec::new();
    dryrun::parse_documents("workload", seed_003::WORKLOAD, false, &mut workload)?;
    for document in workload {
        let mut object = document.object;
        object["metadata"]["namespace"] = json!("test");
        stack.apply("workload", &object).await?;
    }
    stack
        .apply_status(
            "workload",
            &json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "my-lb-service", "namespace": "test"},
                    "status": {"loadBalancer": {"ingress": [{"ip": "34.172.32.172"}]}}}),
        )
        .await?;

    let triggers = ["distribute-credentials", "service-policy"];
    let live = wait_live(&stack, &triggers, "workload", |all| {
        let generated = all.iter().any(|o| {
            o["data"]["namespaces"]
                .as_str()
                .is_some_and(|t| t.contains("eng") && t.contains("hr"))
        });
        let endpoints = all.iter().any(|o| {
            o["data"]["endpoint.yaml"]
                .as_str()
                .is_some_and(|t| t.contains("34.172.32.172"))
        });
        all.len() == 4 && generated && endpoints
    })
    .await?;
    let outcome = compare(
        &stack,
        &management,
        &[secret],
        (
            "workload",
            &[
                ("v1", "Namespace"),
                ("v1", "Service"),
                ("apps/v1", "Deployment"),
            ],
        ),
        live,
    )
    .await?;
    assert_eq!(outcome.reports.len(), 2);
    Ok(())
}

/// `kubectl get <args> -o yaml` in `cluster`, written to `dir/name`.
async fn export(
    stack: &Stack,
    dir: &std::path::Path,
    name: &str,
    cluster: &str,
    args: &[&str],
) -> anyhow::Result<std::path::PathBuf> {
    let mut all = vec!["get"];
    all.extend(args);
    all.extend(["-o", "yaml"]);
    let path = dir.join(name);
    std::fs::write(&path, stack.kubectl(cluster, &all).await?)?;
    Ok(path)
}

/// `docs/operating.md`'s recipe with `kubectl`'s own exports: over them the dry run finds
/// nothing to change; with the trigger's selector changed it says both objects would be
/// deleted, and the pipeline, given that change, deletes exactly those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exports_predict_what_a_trigger_change_deletes() -> anyhow::Result<()> {
    const TRIGGER: &str = "service-network-policy";
    let stack = Stack::start(&["cluster-a"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    for text in [policy::EVENT_SOURCE, policy::EVENT_BASED_ADDON] {
        stack.apply_yaml(MANAGEMENT, text).await?;
    }
    stack.apply_yaml("cluster-a", policy::SERVICE).await?;
    let live = wait_live(&stack, &[TRIGGER], "cluster-a", |all| all.len() == 2).await?;

    let dir = tempfile::tempdir()?;
    let triggers = export(
        &stack,
        dir.path(),
        "triggers.yaml",
        MANAGEMENT,
        &["eventsources,eventbasedaddons"],
    )
    .await?;
    let cluster = export(
        &stack,
        dir.path(),
        "cluster.yaml",
        MANAGEMENT,
        &["sveltoscluster", "-n", "default", "cluster-a"],
    )
    .await?;
    let referenced = export(
        &stack,
        dir.path(),
        "referenced.yaml",
        MANAGEMENT,
        &["configmap", "-n", "default", "network-policy"],
    )
    .await?;
    let services = export(
        &stack,
        dir.path(),
        "services.yaml",
        "cluster-a",
        &["services", "-A"],
    )
    .await?;
    let written = export(
        &stack,
        dir.path(),
        "written.yaml",
        MANAGEMENT,
        &[
            "clusterprofiles,configmaps,secrets",
            "-A",
            "-l",
            sluice_domain::naming::LABEL_EVENT_TRIGGER,
        ],
    )
    .await?;
    let existing: Vec<Value> = dryrun::read_documents(&written, false)?
        .into_iter()
        .map(|d| d.object)
        .collect();
    assert_eq!(
        existing.len(),
        2,
        "the export holds what the pipeline wrote"
    );
    let run = |triggers: &std::path::Path| -> anyhow::Result<dryrun::Outcome> {
        let mut documents = Vec::new();
        for path in [triggers, &cluster, &referenced] {
            documents.extend(dryrun::read_documents(path, false)?);
        }
        documents.extend(dryrun::read_documents(&services, true)?);
        dryrun::dry_run(
            &documents,
            &Options {
                cluster: Some("default/cluster-a".into()),
                ..Options::default()
            },
        )
    };

    let outcome = run(&triggers)?;
    assert_eq!(outcome.problems, Vec::<String>::new());
    assert_eq!(dryrun::compare(&outcome, &existing), (Vec::new(), 2));

    // The trigger's selector changed so that it no longer selects the cluster.
    let changed = dir.path().join("changed.yaml");
    let text = std::fs::read_to_string(&triggers)?;
    assert!(text.contains("clusterSelector: env=fv"), "{text}");
    std::fs::write(&changed, text.replace("env=fv", "env=other"))?;
    let (differences, unchanged) = dryrun::compare(&run(&changed)?, &existing);
    assert_eq!(unchanged, 0);
    let mut predicted: Vec<(String, String)> = differences
        .iter()
        .map(|d| {
            assert_eq!(d.action, dryrun::Action::Delete, "{d:?}");
            (d.kind.clone(), d.name.clone())
        })
        .collect();
    let mut wrote: Vec<(String, String)> = live
        .iter()
        .map(|o| {
            let text = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (text("/kind"), text("/metadata/name"))
        })
        .collect();
    predicted.sort();
    wrote.sort();
    assert_eq!(predicted, wrote);

    stack
        .kubectl(
            MANAGEMENT,
            &[
                "patch",
                "eventbasedaddon",
                TRIGGER,
                "--type=merge",
                "-p",
                r#"{"spec":{"clusterSelector":"env=other"}}"#,
            ],
        )
        .await?;
    demo::wait_cleaned(&stack, TRIGGER, "cluster-a", DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    Ok(())
}
