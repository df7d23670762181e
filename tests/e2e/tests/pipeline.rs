//! Whole-stack tests of the pipeline spine: a real nats-server, the API test server with a
//! management cluster and two managed clusters, and the five services as separate processes.
//! Seed 000's first example, written with the seed's own YAML: a Service labelled `sveltos: fv`
//! becomes an EventReport, an instantiated ConfigMap with the NetworkPolicy and a ClusterProfile;
//! deleting it removes them. Nothing is mocked.

use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_bus::topology;
use sluice_cli::demo::{self, wait_cleaned, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_domain::naming;
use sluice_testkit::wait_for;

const TRIGGER: &str = "service-network-policy";
const DEADLINE: Duration = Duration::from_secs(30);

async fn stack_with_seed() -> anyhow::Result<Stack> {
    let stack = Stack::start(&["cluster-a", "cluster-b"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    stack
        .register_cluster("cluster-b", &[("env", "prod")])
        .await?;
    stack.apply_yaml(MANAGEMENT, demo::EVENT_SOURCE).await?;
    stack
        .apply_yaml(MANAGEMENT, demo::EVENT_BASED_ADDON)
        .await?;
    Ok(stack)
}

/// The instantiated ConfigMap the profile references, with its rendered NetworkPolicy.
async fn referenced_config_map(stack: &Stack, profile: &Value) -> anyhow::Result<Value> {
    let reference = &profile["spec"]["policyRefs"][0];
    assert_eq!(reference["kind"], "ConfigMap");
    assert_eq!(reference["namespace"], "projectsveltos");
    let name = reference["name"].as_str().unwrap_or_default();
    stack
        .get(MANAGEMENT, "v1", "ConfigMap", "projectsveltos", name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("instantiated ConfigMap {name} missing"))
}

fn assert_seed_network_policy(config_map: &Value) {
    let text = config_map["data"]["networkpolicy.yaml"]
        .as_str()
        .expect("networkpolicy.yaml");
    let policy: Value = serde_yaml::from_str(text).expect("rendered NetworkPolicy is YAML");
    assert_eq!(policy["kind"], "NetworkPolicy");
    assert_eq!(policy["metadata"]["name"], "front-my-service");
    assert_eq!(policy["metadata"]["namespace"], "default");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "MyApp"
    );
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], 80);
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app"],
        "internal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_event_becomes_cluster_profile_and_is_cleaned_up() -> anyhow::Result<()> {
    let stack = stack_with_seed().await?;
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    // Same Service in the cluster that no trigger selects: must produce nothing.
    stack.apply_yaml("cluster-b", demo::SERVICE).await?;

    let profile = match wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE).await {
        Ok(p) => p,
        Err(e) => anyhow::bail!("{e}\n{}", stack.logs()),
    };
    assert_eq!(profile["spec"]["clusterRefs"][0]["kind"], "SveltosCluster");
    assert_eq!(profile["spec"]["clusterRefs"][0]["namespace"], "default");
    assert_eq!(profile["spec"]["clusterRefs"][0]["name"], "cluster-a");
    assert_eq!(profile["spec"]["syncMode"], "Continuous");
    let labels = &profile["metadata"]["labels"];
    assert_eq!(labels[naming::LABEL_CLUSTER_TYPE], "Sveltos");
    assert_eq!(labels[naming::LABEL_EVENT_SOURCE], "sveltos-service");
    assert_eq!(labels[naming::LABEL_RESOURCE_NAMESPACE], "default");
    let name = profile["metadata"]["name"].as_str().unwrap_or_default();
    assert!(name.starts_with("sveltos-") && name.len() == 28, "{name}");

    let config_map = referenced_config_map(&stack, &profile).await?;
    assert_seed_network_policy(&config_map);
    assert_eq!(
        config_map["metadata"]["labels"][naming::LABEL_REF_NAME],
        "network-policy"
    );

    let report = demo::wait_report(
        &stack,
        "sveltos--sveltos-service--cluster-a",
        DEADLINE,
        |r| r["spec"]["matchingResources"][0]["name"] == "my-service",
    )
    .await?;
    assert_eq!(report["spec"]["clusterType"], "Sveltos");
    assert_eq!(report["spec"]["matchingResources"][0]["name"], "my-service");
    assert_eq!(
        report["metadata"]["labels"][naming::REPORT_LABEL_CLUSTER_TYPE],
        "sveltos"
    );
    assert!(report["spec"]["resources"]
        .as_str()
        .is_some_and(|r| !r.is_empty()));

    // Only cluster-a's objects exist: exactly one profile and one ConfigMap.
    assert_eq!(demo::owned_by(&stack, TRIGGER, "cluster-a").await?.len(), 2);
    assert!(demo::owned_by(&stack, TRIGGER, "cluster-b")
        .await?
        .is_empty());

    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    if let Err(e) = wait_cleaned(&stack, TRIGGER, "cluster-a", DEADLINE).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    // The report stays (the EventSource is still deployed) and now lists nothing.
    let report = wait_for("empty EventReport", DEADLINE, || async {
        let r = stack
            .event_report("sveltos--sveltos-service--cluster-a")
            .await
            .ok()
            .flatten()?;
        let empty = r["spec"]["matchingResources"]
            .as_array()
            .is_none_or(|a| a.is_empty());
        empty.then_some(r)
    })
    .await?;
    assert_eq!(report["spec"]["eventSourceName"], "sveltos-service");

    // What the deletion left on the bus expires: the Service's change and its unit's result
    // are tombstones with a time to live, so the streams do not keep every subject that ever
    // existed.
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let tokens = topology::cluster_tokens("sveltos", "default", "cluster-a");
    let desired = topology::desired_resource_subject(TRIGGER, &tokens, "default", "my-service");
    let applied = topology::applied_subject_for(&desired).expect("a desired subject");
    for (stream, subject) in [
        (
            topology::CHANGES,
            topology::change_subject(&tokens, "", "Service", "default", "my-service"),
        ),
        (topology::APPLIED, applied),
    ] {
        let last = js
            .get_stream(stream.name)
            .await?
            .get_last_raw_message_by_subject(&subject)
            .await?;
        let ttl = last.headers.get("Nats-TTL").map(|v| v.as_str().to_string());
        assert_eq!(
            ttl,
            Some(topology::TOMBSTONE_TTL.as_secs().to_string()),
            "{subject}: the tombstone's time to live"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_services_converge_on_the_right_end_state() -> anyhow::Result<()> {
    let mut stack = stack_with_seed().await?;
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    // Crash the renderer and stop the watcher; change the world while they are down.
    stack.kill_service("sluice-renderer");
    stack.stop_service("sluice-watcher")?;
    stack
        .delete("cluster-a", "v1", "Service", "default", "my-service")
        .await?;
    let other = demo::SERVICE.replace("name: my-service", "name: other-service");
    stack.apply_yaml("cluster-a", &other).await?;
    stack.start_service("sluice-watcher")?;
    stack.start_service("sluice-renderer")?;
    // The deletion that happened while nobody watched is found; the new Service is picked up.
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "other-service", DEADLINE).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    wait_for("my-service profile withdrawn", DEADLINE, || async {
        demo::profiles_for(&stack, TRIGGER, "cluster-a", "my-service")
            .await
            .ok()
            .filter(Vec::is_empty)
    })
    .await?;
    // Exactly one profile and its ConfigMap remain.
    let owned = demo::owned_by(&stack, TRIGGER, "cluster-a").await?;
    assert_eq!(owned.len(), 2, "{owned:#?}");
    Ok(())
}

/// Of the event ages with `labels` in `metrics`, how many fall in the first bucket that holds
/// `seconds` (so at most that bucket's bound old).
fn ages_within(
    metrics: &std::collections::HashMap<String, f64>,
    labels: &str,
    seconds: f64,
) -> Option<f64> {
    let bound = sluice_runtime::Buckets::Seconds
        .bounds()
        .iter()
        .find(|b| **b >= seconds)
        .map_or("+Inf".to_string(), |b| b.to_string());
    metrics
        .get(&format!(
            "sluice_event_age_seconds_bucket{{{labels},le=\"{bound}\"}}"
        ))
        .copied()
}

/// Every stage's runner measures its batches (size, each input's wait in its stream, the
/// handling), and how old each event is once handled: from the watcher's sight of the change,
/// which the trace id carries. At the applier that is the event's whole way to its objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stage_measures_its_batches_and_the_age_of_its_events() -> anyhow::Result<()> {
    let started = Instant::now();
    let stack = stack_with_seed().await?;
    let created = Instant::now();
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    let seen = created.elapsed();
    let since_start = started.elapsed().as_secs_f64();

    for (service, consumer, stream) in [
        ("sluice-evaluator", "evaluator", "SLUICE_CHANGES"),
        ("sluice-reporter", "reporter", "SLUICE_MATCH"),
        ("sluice-renderer", "renderer", "SLUICE_MATCH"),
        ("sluice-applier", "applier", "SLUICE_DESIRED"),
    ] {
        let all = demo::metrics(&stack, service).await?;
        let labels = format!("consumer=\"{consumer}\",stream=\"{stream}\"");
        let get = |name: &str| all.get(&format!("{name}{{{labels}}}")).copied();
        let batches = get("sluice_stage_batch_seconds_count").unwrap_or(0.0);
        assert!(batches >= 1.0, "{service}: no batch measured: {all:#?}");
        assert_eq!(
            get("sluice_stage_batch_inputs_count"),
            Some(batches),
            "{service}: a size per batch"
        );
        let inputs = get("sluice_stage_batch_inputs_sum").unwrap_or(0.0);
        assert!(
            inputs >= batches,
            "{service}: {inputs} inputs in {batches} batches"
        );
        assert_eq!(
            get("sluice_stage_input_wait_seconds_count"),
            Some(inputs),
            "{service}: a wait per input"
        );
        // The trace of every input began once the stack was up: no age is older than it.
        let aged = get("sluice_event_age_seconds_count").unwrap_or(0.0);
        assert!(aged >= 1.0, "{service}: no event's age measured: {all:#?}");
        let within = ages_within(&all, &labels, since_start);
        assert_eq!(within, Some(aged), "{service}: an age over {since_start} s");
        assert!(get("sluice_event_age_seconds_sum").unwrap_or(0.0) > 0.0);
    }
    // The watcher measures how old each change is once stored: the first link of the age.
    let watcher = demo::metrics(&stack, "sluice-watcher").await?;
    let labels = "consumer=\"watcher\",stream=\"SLUICE_CHANGES\"";
    let stored = watcher
        .get(&format!("sluice_event_age_seconds_count{{{labels}}}"))
        .copied()
        .unwrap_or(0.0);
    assert!(
        stored >= 1.0,
        "the watcher measured no change stored: {watcher:#?}"
    );
    let stored_within = ages_within(&watcher, labels, since_start);
    assert_eq!(stored_within, Some(stored), "a change older than the stack");
    // The Service's own event reached the applier no later than the profile was seen.
    let applier = demo::metrics(&stack, "sluice-applier").await?;
    let labels = "consumer=\"applier\",stream=\"SLUICE_DESIRED\"";
    let young = ages_within(&applier, labels, seen.as_secs_f64()).unwrap_or(0.0);
    assert!(
        young >= 1.0,
        "no age within {seen:?} at the applier: {applier:#?}"
    );

    Ok(())
}

/// The monitoring component's alerts (k8s/components/monitoring) name metrics the services
/// serve once an event has passed: every plain name a series of some service, every name
/// pattern the name of one. The services run as `k8s/base` runs them, with `--leader-elect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitoring_alerts_name_metrics_the_services_serve() -> anyhow::Result<()> {
    let mut stack = stack_with_seed().await?;
    for service in sluice_cli::stack::SERVICES {
        stack.restart_service_with(service, &[("SLUICE_LEADER_ELECT", "true")])?;
    }
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    if let Err(e) = wait_profile(&stack, TRIGGER, "cluster-a", "my-service", DEADLINE).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    let mut names = std::collections::BTreeSet::new();
    for service in sluice_cli::stack::SERVICES {
        for series in demo::metrics(&stack, service).await?.keys() {
            names.insert(series.split('{').next().unwrap_or_default().to_string());
        }
    }
    let rules = std::fs::read_to_string(
        sluice_testkit::repo_root().join("k8s/components/monitoring/prometheusrule.yaml"),
    )?;
    let rules: Value = serde_yaml::from_str(&rules)?;
    let exprs: Vec<&str> = rules["spec"]["groups"][0]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|rule| rule["expr"].as_str())
        .collect();
    assert!(!exprs.is_empty());
    let pattern = regex::Regex::new(r#"__name__=~"([^"]+)""#)?;
    let plain = regex::Regex::new(r"\bsluice_[a-z0-9_]+\b")?;
    for expr in exprs {
        for named in pattern.captures_iter(expr) {
            let names_it = regex::Regex::new(&format!("^(?:{})$", &named[1]))?;
            assert!(
                names.iter().any(|n| names_it.is_match(n)),
                "{} names no metric the services serve: {names:#?}",
                &named[1]
            );
        }
        let without_patterns = pattern.replace_all(expr, "");
        for name in plain.find_iter(&without_patterns) {
            assert!(
                names.contains(name.as_str()),
                "{} in {expr} is no metric the services serve: {names:#?}",
                name.as_str()
            );
        }
    }
    Ok(())
}

/// Restarts `service` exporting its spans to `endpoint`, every 100 ms rather than every 5 s.
fn export_spans(stack: &mut Stack, service: &'static str, endpoint: &str) -> anyhow::Result<()> {
    stack.restart_service_with(
        service,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
}

/// Seed 000's Service in cluster-a, and its ClusterProfile.
async fn seed_service_profile(stack: &Stack) -> anyhow::Result<()> {
    stack.apply_yaml("cluster-a", demo::SERVICE).await?;
    if let Err(e) = wait_profile(stack, TRIGGER, "cluster-a", "my-service", DEADLINE).await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    Ok(())
}

/// With an OTLP endpoint set (ADR 0045), a Service's event is one trace across the services:
/// the watcher's span of the change is its root, the evaluator's span is under it, the
/// renderer's and the reporter's under the evaluator's, and the applier's under the
/// renderer's, with its API requests under it; each a span of its own service, in time order.
/// The reporter's writes of the EventReport, paced and so made after its span ended, are under
/// the span of the input that changed the set. What no event asked for (a repair, the watcher's
/// list of a cluster's kind) is a trace of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_events_spans_form_one_trace_across_the_services() -> anyhow::Result<()> {
    let receiver = sluice_testkit::OtlpReceiver::start().await?;
    let mut stack = stack_with_seed().await?;
    let endpoint = receiver.endpoint();
    for service in sluice_cli::stack::SERVICES {
        export_spans(&mut stack, service, &endpoint)?;
    }
    seed_service_profile(&stack).await?;
    let chain = [
        ("sluice-watcher", "send SLUICE_CHANGES", 4),
        ("sluice-evaluator", "process SLUICE_CHANGES", 5),
        ("sluice-renderer", "process SLUICE_MATCH", 5),
        ("sluice-applier", "process SLUICE_DESIRED", 5),
    ];
    let found = wait_for("the Service's spans in every service", DEADLINE, || async {
        let spans = receiver.spans();
        // The trace of the Service's change: its root names the Service in its subject.
        let root = spans.iter().find(|span| {
            span.service == "sluice-watcher"
                && span
                    .attributes
                    .get("messaging.destination.name")
                    .is_some_and(|d| d.ends_with(".my-service") && d.contains(".cluster-a."))
        })?;
        let trace: Vec<_> = spans
            .iter()
            .filter(|span| span.trace_id == root.trace_id)
            .cloned()
            .collect();
        let reporter = trace.iter().any(|span| span.service == "sluice-reporter");
        // Every span named, not only one per service: the applier's requests are exported
        // before the span of its unit, which ends after them.
        let complete = chain.iter().all(|(service, name, _)| {
            trace
                .iter()
                .any(|span| span.service == *service && span.name == *name)
        }) && [
            "PATCH ConfigMap",
            "PATCH ClusterProfile",
            "PATCH EventReport",
            "PATCH EventReport/status",
        ]
        .iter()
        .all(|name| trace.iter().any(|span| span.name == *name));
        (complete && reporter).then_some(trace)
    })
    .await;
    let trace = match found {
        Ok(trace) => trace,
        Err(e) => anyhow::bail!("{e}: {:#?}\n{}", receiver.spans(), stack.logs()),
    };
    // From the applier's span up, each link's parent is a span of the service before it (the
    // renderer's of the set's head; the evaluator's, whose outputs both the renderer and the
    // reporter read), up to the watcher's root span.
    let mut child = None::<&sluice_testkit::ReceivedSpan>;
    for (service, name, kind) in chain.iter().rev() {
        let span = trace
            .iter()
            .find(|span| {
                span.service == *service
                    && span.name == *name
                    && child.is_none_or(|child| child.parent_span_id == span.span_id)
            })
            .unwrap_or_else(|| panic!("no span of {service} above {child:?}: {trace:#?}"));
        assert_eq!(span.name, *name);
        assert_eq!(span.kind, *kind, "{span:?}");
        assert_eq!(span.error, None, "{span:?}");
        assert!(span.start_unix_nanos <= span.end_unix_nanos, "{span:?}");
        if let Some(child) = child {
            assert!(
                child.end_unix_nanos >= span.start_unix_nanos,
                "{child:?} ended before {span:?} began"
            );
        }
        child = Some(span);
    }
    // The applier's API requests are client spans under its span: the instantiated ConfigMap
    // written before the ClusterProfile that references it.
    let applier = trace
        .iter()
        .find(|span| span.service == "sluice-applier" && span.kind == 5)
        .expect("the applier's span");
    let request = |kind: &str| {
        trace
            .iter()
            .find(|span| {
                span.parent_span_id == applier.span_id && span.name == format!("PATCH {kind}")
            })
            .unwrap_or_else(|| panic!("no PATCH {kind} under the applier's span: {trace:#?}"))
    };
    let (config_map, profile) = (request("ConfigMap"), request("ClusterProfile"));
    for span in [config_map, profile] {
        assert_eq!(span.kind, 3, "a client span: {span:?}");
        assert_eq!(span.service, "sluice-applier");
        assert_eq!(span.error, None, "{span:?}");
        assert!(
            applier.start_unix_nanos <= span.start_unix_nanos
                && span.end_unix_nanos <= applier.end_unix_nanos,
            "{span:?} not within {applier:?}"
        );
    }
    assert_eq!(
        config_map.attributes["k8s.namespace.name"],
        "projectsveltos"
    );
    assert!(
        config_map.end_unix_nanos <= profile.start_unix_nanos,
        "the ClusterProfile was written before its ConfigMap: {config_map:?} {profile:?}"
    );
    let root = child.expect("the watcher's span");
    assert_eq!(root.parent_span_id, "", "the watcher's span is the root");
    let evaluator = trace
        .iter()
        .find(|span| span.service == "sluice-evaluator")
        .expect("the evaluator's span");
    let reporter = trace
        .iter()
        .find(|span| span.service == "sluice-reporter")
        .expect("the reporter's span");
    assert_eq!(reporter.parent_span_id, evaluator.span_id, "{trace:#?}");
    assert_eq!(reporter.name, "process SLUICE_MATCH");
    // The report's writes: client spans under a span of the reporter's inputs (the set's
    // head's), each after it, the report before its status.
    let report_writes: Vec<_> = ["PATCH EventReport", "PATCH EventReport/status"]
        .iter()
        .map(|name| {
            let write = trace
                .iter()
                .find(|span| span.service == "sluice-reporter" && span.name == *name)
                .expect("the report's write");
            let input = trace
                .iter()
                .find(|span| {
                    span.service == "sluice-reporter" && span.span_id == write.parent_span_id
                })
                .unwrap_or_else(|| {
                    panic!("{write:?} not under a span of the reporter: {trace:#?}")
                });
            assert_eq!(input.name, "process SLUICE_MATCH", "{input:?}");
            assert_eq!(input.parent_span_id, evaluator.span_id, "{input:?}");
            assert_eq!(write.kind, 3, "a client span: {write:?}");
            assert_eq!(write.error, None, "{write:?}");
            assert_eq!(
                write.attributes["k8s.namespace.name"], "default",
                "{write:?}"
            );
            assert!(
                input.start_unix_nanos <= write.start_unix_nanos,
                "{write:?} began before {input:?}"
            );
            write
        })
        .collect();
    assert!(
        report_writes[0].end_unix_nanos <= report_writes[1].start_unix_nanos,
        "the status before the report: {report_writes:?}"
    );
    // Each service counts what it recorded and what its exporter sent, on /metrics.
    for service in sluice_cli::stack::SERVICES {
        let received = receiver
            .spans()
            .iter()
            .filter(|span| span.service == service)
            .count() as f64;
        let metrics = demo::metrics(&stack, service).await?;
        let count = |name: &str| metrics.get(name).copied().unwrap_or(0.0);
        let counted: Vec<(&String, &f64)> = metrics
            .iter()
            .filter(|(name, _)| name.starts_with("sluice_spans_"))
            .collect();
        assert!(
            count("sluice_spans_exported_total") >= received.min(1.0),
            "{service}: {received} spans received, {counted:?}"
        );
        assert!(count("sluice_spans_recorded_total") >= count("sluice_spans_exported_total"));
        assert_eq!(count("sluice_spans_export_failed_total"), 0.0, "{service}");
    }

    // A ClusterProfile deleted by hand is written again (ADR 0039): the repair, which no input
    // asked for, is the root span of a trace of its own, its write under it.
    let profiles = demo::profiles_for(&stack, TRIGGER, "cluster-a", "my-service").await?;
    let name = profiles[0]["metadata"]["name"].as_str().expect("a name");
    stack
        .delete(
            MANAGEMENT,
            "config.projectsveltos.io/v1beta1",
            "ClusterProfile",
            "",
            name,
        )
        .await?;
    let (repair, write) = own_trace(
        &receiver,
        &stack,
        "sluice-applier",
        "repair SLUICE_DESIRED",
        "PATCH ClusterProfile",
    )
    .await?;
    assert_eq!(
        repair.parent_span_id, "",
        "a repair begins its own trace: {repair:?}"
    );
    assert_ne!(repair.trace_id, trace[0].trace_id);
    assert_eq!(repair.error, None, "{repair:?}");
    assert_eq!(write.attributes["k8s.object.name"], name, "{write:?}");
    assert_eq!(write.trace_id, repair.trace_id);
    // The repair's result carries its trace on the bus.
    let js = async_nats::jetstream::new(stack.bus_options().connect_client().await?);
    let tokens = topology::cluster_tokens("sveltos", "default", "cluster-a");
    let desired = topology::desired_resource_subject(TRIGGER, &tokens, "default", "my-service");
    assert_eq!(repair.attributes["sluice.unit"], desired);
    let applied = topology::applied_subject_for(&desired).expect("a desired subject");
    let result = js
        .get_stream(topology::APPLIED.name)
        .await?
        .get_last_raw_message_by_subject(&applied)
        .await?;
    let traceparent = result
        .headers
        .get("traceparent")
        .map(|v| v.as_str().to_string());
    assert_eq!(
        traceparent,
        Some(format!("00-{}-{}-01", repair.trace_id, repair.span_id)),
        "the repair's result on {applied}"
    );
    assert!(
        repair.start_unix_nanos <= write.start_unix_nanos
            && write.end_unix_nanos <= repair.end_unix_nanos,
        "{write:?} not within {repair:?}"
    );
    // So is writing again an EventReport someone deleted: its PATCH under the repair.
    let report = report_writes[0].attributes["k8s.object.name"].clone();
    stack
        .delete(
            MANAGEMENT,
            "lib.projectsveltos.io/v1beta1",
            "EventReport",
            "default",
            &report,
        )
        .await?;
    let (report_repair, report_write) = own_trace(
        &receiver,
        &stack,
        "sluice-reporter",
        "repair EventReport",
        "PATCH EventReport",
    )
    .await?;
    assert_eq!(report_repair.parent_span_id, "", "{report_repair:?}");
    assert_eq!(report_repair.error, None, "{report_repair:?}");
    assert!(report_repair.attributes["sluice.cluster"].ends_with("/cluster-a"));
    assert_eq!(report_write.attributes["k8s.object.name"], report);
    assert_eq!(report_write.trace_id, report_repair.trace_id);
    assert!(
        report_repair.start_unix_nanos <= report_write.start_unix_nanos
            && report_write.end_unix_nanos <= report_repair.end_unix_nanos,
        "{report_write:?} not within {report_repair:?}"
    );
    // The watcher's list of cluster-a's Services when it started is a trace of its own too.
    let spans = receiver.spans();
    let list = spans
        .iter()
        .find(|span| {
            span.service == "sluice-watcher"
                && span.name == "LIST Service"
                && span
                    .attributes
                    .get("sluice.cluster")
                    .is_some_and(|c| c.ends_with("/cluster-a"))
        })
        .unwrap_or_else(|| panic!("no LIST span of cluster-a's Services: {spans:#?}"));
    assert_eq!(
        (list.kind, list.parent_span_id.as_str()),
        (3, ""),
        "{list:?}"
    );
    assert_eq!(list.attributes["k8s.resource.api_version"], "v1");
    assert!(
        list.attributes["k8s.list.objects"].parse::<u64>().is_ok(),
        "{list:?}"
    );
    assert!(list.start_unix_nanos <= list.end_unix_nanos);

    // A change of the management cluster's configuration is the root of a trace of its own:
    // the watcher's send of it to SLUICE_CONFIG, naming the object.
    let label = ["label", "eventsource", "sveltos-service", "traced=yes"];
    stack.kubectl(MANAGEMENT, &label).await?;
    let sent = wait_for("the EventSource change's span", DEADLINE, || async {
        receiver.spans().into_iter().find(|span| {
            span.service == "sluice-watcher"
                && span.name == "send SLUICE_CONFIG"
                && span.attributes.get("sluice.name").map(String::as_str) == Some("sveltos-service")
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}: {:#?}", receiver.spans()))?;
    assert_eq!(
        (sent.kind, sent.parent_span_id.as_str()),
        (4, ""),
        "{sent:?}"
    );
    assert_eq!(sent.attributes["sluice.kind"], "EventSource");
    assert_eq!(
        sent.attributes["messaging.destination.name"],
        topology::config_subject("EventSource", "", "sveltos-service")
    );
    assert!(sent.start_unix_nanos <= sent.end_unix_nanos);
    // The evaluator's handling of it is a span under it.
    let evaluated = wait_for("the evaluator's span of the change", DEADLINE, || async {
        receiver
            .spans()
            .into_iter()
            .find(|span| span.service == "sluice-evaluator" && span.parent_span_id == sent.span_id)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}: {:#?}", receiver.spans()))?;
    assert_eq!(evaluated.name, "process SLUICE_CONFIG", "{evaluated:?}");
    assert_eq!(evaluated.kind, 5, "{evaluated:?}");
    assert_eq!(evaluated.trace_id, sent.trace_id);
    assert_eq!(
        evaluated.attributes["messaging.destination.name"],
        sent.attributes["messaging.destination.name"]
    );

    // A change of a template the trigger references renders the profile's ConfigMap again:
    // the watcher's send, the renderer's handling, the applier's unit and its write are one
    // trace.
    let template = serde_json::json!({"data": {"marker.yaml":
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: marker-{{ .Resource.metadata.name }}\n  namespace: default\n"}});
    let patch = [
        "patch",
        "configmap",
        "network-policy",
        "-n",
        "default",
        "--type",
        "merge",
        "-p",
        &template.to_string(),
    ];
    stack.kubectl(MANAGEMENT, &patch).await?;
    let chain = wait_for("the template change's trace", DEADLINE, || async {
        let spans = receiver.spans();
        let sent = spans.iter().find(|span| {
            span.service == "sluice-watcher"
                && span.name == "send SLUICE_CONFIG"
                && span.attributes.get("sluice.name").map(String::as_str) == Some("network-policy")
        })?;
        let under = |parent: &sluice_testkit::ReceivedSpan, service: &str, name: &str| {
            spans
                .iter()
                .find(|span| {
                    span.service == service
                        && span.name == name
                        && span.parent_span_id == parent.span_id
                })
                .cloned()
        };
        let rendered = under(sent, "sluice-renderer", "process SLUICE_CONFIG")?;
        let applied = under(&rendered, "sluice-applier", "process SLUICE_DESIRED")?;
        let write = under(&applied, "sluice-applier", "PATCH ConfigMap")?;
        Some((sent.clone(), rendered, applied, write))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}: {:#?}", receiver.spans()))?;
    let (sent, rendered, applied, write) = chain;
    assert_eq!(sent.attributes["sluice.kind"], "ConfigMap");
    assert_eq!(sent.parent_span_id, "", "{sent:?}");
    for span in [&rendered, &applied, &write] {
        assert_eq!(span.trace_id, sent.trace_id, "{span:?}");
        assert_eq!(span.error, None, "{span:?}");
    }
    assert_eq!(
        rendered.attributes["messaging.destination.name"],
        topology::config_subject("ConfigMap", "default", "network-policy")
    );
    assert_eq!(applied.attributes["messaging.destination.name"], desired);
    assert_eq!(
        write.attributes["k8s.object.name"],
        profiles[0]["spec"]["policyRefs"][0]["name"]
            .as_str()
            .expect("the profile's ConfigMap")
    );
    let rendered_again = referenced_config_map(&stack, &profiles[0]).await?;
    assert!(
        rendered_again["data"]
            .as_object()
            .is_some_and(|data| data.keys().any(|key| key.contains("marker"))),
        "the ConfigMap rendered from the changed template: {rendered_again}"
    );

    // The trigger (seed 000's EventBasedAddOn) deleted: the release of sluice's finalizer, once
    // its objects are withdrawn, is a request under the applier's span of the trigger's
    // configuration message, in the trace of the watcher's send of it.
    let delete = ["delete", "eventbasedaddon", TRIGGER, "--wait=false"];
    stack.kubectl(MANAGEMENT, &delete).await?;
    let released = wait_for(
        "the finalizer's release in the deletion's trace",
        DEADLINE,
        || async {
            let spans = receiver.spans();
            let by_id = |id: &str| spans.iter().find(|span| span.span_id == id).cloned();
            let write = spans.iter().find(|span| {
                span.service == "sluice-applier" && span.name == "PATCH EventBasedAddOn"
            })?;
            let handled = by_id(&write.parent_span_id)?;
            let sent = by_id(&handled.parent_span_id)?;
            Some((sent, handled, write.clone()))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}: {:#?}\n{}", receiver.spans(), stack.logs()))?;
    let (sent, handled, write) = released;
    assert_eq!(
        (
            handled.service.as_str(),
            handled.name.as_str(),
            handled.kind
        ),
        ("sluice-applier", "process SLUICE_CONFIG", 5),
        "{handled:?}"
    );
    assert_eq!(
        (
            sent.service.as_str(),
            sent.name.as_str(),
            sent.parent_span_id.as_str()
        ),
        ("sluice-watcher", "send SLUICE_CONFIG", ""),
        "{sent:?}"
    );
    assert_eq!(sent.attributes["sluice.kind"], "EventBasedAddOn");
    assert_eq!(sent.attributes["sluice.name"], TRIGGER);
    assert_eq!(
        handled.attributes["messaging.destination.name"],
        topology::config_subject("EventBasedAddOn", "", TRIGGER)
    );
    assert_eq!((write.kind, write.error.as_deref()), (3, None), "{write:?}");
    assert_eq!(write.attributes["k8s.object.name"], TRIGGER);
    for span in [&handled, &write] {
        assert_eq!(span.trace_id, sent.trace_id, "{span:?}");
    }
    let gone = wait_for("the trigger gone", DEADLINE, || async {
        let get = [
            "get",
            "eventtrigger",
            TRIGGER,
            "--ignore-not-found",
            "-o",
            "name",
        ];
        let out = stack.kubectl(MANAGEMENT, &get).await.ok()?;
        out.trim().is_empty().then_some(())
    })
    .await;
    gone.map_err(|e| anyhow::anyhow!("{e}\n{}", stack.logs()))?;
    Ok(())
}

/// The span `root` of `service` and the span `child` under it, once both arrived.
async fn own_trace(
    receiver: &sluice_testkit::OtlpReceiver,
    stack: &Stack,
    service: &str,
    root: &str,
    child: &str,
) -> anyhow::Result<(sluice_testkit::ReceivedSpan, sluice_testkit::ReceivedSpan)> {
    let found = wait_for(&format!("{root} and its {child}"), DEADLINE, || async {
        let spans = receiver.spans();
        let parent = spans
            .iter()
            .find(|span| span.service == service && span.name == root)?
            .clone();
        let under = spans
            .iter()
            .find(|span| span.parent_span_id == parent.span_id && span.name == child)?
            .clone();
        Some((parent, under))
    })
    .await;
    match found {
        Ok(found) => Ok(found),
        Err(e) => anyhow::bail!("{e}: {:#?}\n{}", receiver.spans(), stack.logs()),
    }
}

/// Spans a receiver does not take are counted as failed on `/metrics`, beside those recorded,
/// so that a trace backend that is down shows there, not only as missing traces.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spans_no_receiver_takes_are_counted_as_failed() -> anyhow::Result<()> {
    let mut stack = stack_with_seed().await?;
    // A port nothing listens on.
    let endpoint = format!("http://127.0.0.1:{}", sluice_testkit::free_port());
    export_spans(&mut stack, "sluice-watcher", &endpoint)?;
    seed_service_profile(&stack).await?;
    let counted = wait_for("the watcher's failed spans counted", DEADLINE, || async {
        let metrics = demo::metrics(&stack, "sluice-watcher").await.ok()?;
        let count = |name: &str| metrics.get(name).copied().unwrap_or(0.0);
        (count("sluice_spans_export_failed_total") >= 1.0).then_some(metrics)
    })
    .await;
    let metrics = match counted {
        Ok(metrics) => metrics,
        Err(e) => anyhow::bail!("{e}\n{}", stack.logs()),
    };
    let count = |name: &str| metrics.get(name).copied().unwrap_or(0.0);
    assert!(count("sluice_spans_recorded_total") >= count("sluice_spans_export_failed_total"));
    assert_eq!(count("sluice_spans_exported_total"), 0.0);
    Ok(())
}
