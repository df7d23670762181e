//! Hostile input on every pipeline subject, published directly on the bus with the admin
//! identity while seed 000's trigger runs: protobuf garbage, a large garbage message and
//! well-formed messages with invalid contents land on the consuming stage's dead-letter subject
//! with the reason and the subject they came from; no service exits; and a Service still
//! becomes its ClusterProfile afterwards. EventSources and templates that cannot work (Lua
//! that does not compile, loops or allocates without end, selectors that do not parse, regular
//! expressions that do not compile, an object that is not JSON, a template that loops) each fail
//! in their own EventReport or EventTrigger status with the reason, while seed 000 goes on. An
//! unreadable configuration update stored while a service was down (or still starting) is
//! dead-lettered when it starts, as one it receives live is. (`rejections.rs` covers a desired state the applier can never apply and a change too large
//! for the bus.)

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use prost::Message as _;
use sluice_bus::topology;
use sluice_cli::demo::{self, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_proto::v1 as pb;
use sluice_testkit::wait_for;

const DEADLINE: Duration = Duration::from_secs(60);

fn fail(stack: &Stack, error: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{error}\n{}", stack.logs())
}

/// One dead letter: (stage, origin subject, reason, payload).
type Letter = (String, String, String, Bytes);

/// Every dead letter stored so far.
async fn dead_letters(js: &jetstream::Context) -> anyhow::Result<Vec<Letter>> {
    let mut stream = js.get_stream(topology::DEAD.name).await?;
    let state = stream.info().await?.state.clone();
    let mut letters = Vec::new();
    for sequence in state.first_sequence..=state.last_sequence {
        let Ok(message) = stream.get_raw_message(sequence).await else {
            continue;
        };
        let header = |name: &str| {
            message
                .headers
                .get(name)
                .map(|v| v.as_str().to_string())
                .unwrap_or_default()
        };
        let stage = message
            .subject
            .strip_prefix(&format!("{}.dead.", topology::PREFIX))
            .unwrap_or_default()
            .to_string();
        letters.push((
            stage,
            header(topology::ORIGIN_SUBJECT_HEADER),
            header(topology::ERROR_HEADER),
            message.payload,
        ));
    }
    Ok(letters)
}

/// A hostile message: where it goes, what it is, which stages must dead-letter it and what
/// their reason must contain.
struct Case {
    subject: String,
    payload: Bytes,
    stages: &'static [&'static str],
    reason: &'static str,
}

fn cases(cluster: &str) -> Vec<Case> {
    let garbage = Bytes::from_static(&[0xff, 0xff, 0xff]);
    // Large, and not protobuf either: a field of wire type 7.
    let large = Bytes::from(vec![0xff; 512 * 1024]);
    let cluster_ref = pb::ClusterRef {
        namespace: "default".into(),
        name: "cluster-a".into(),
        r#type: pb::ClusterType::Sveltos as i32,
    };
    let not_json_event = pb::CloudEventReceived {
        cluster: Some(cluster_ref.clone()),
        subject: "user-operation".into(),
        event_json: b"{not json".to_vec(),
        ..Default::default()
    };
    let not_a_cloud_event = pb::CloudEventReceived {
        cluster: Some(cluster_ref),
        subject: "user-operation".into(),
        event_json: br#"{"hello": "world"}"#.to_vec(),
        ..Default::default()
    };
    let not_json_config = pb::ConfigObject {
        kind: "EventSource".into(),
        name: "hostile-not-json".into(),
        object_json: b"[1, 2".to_vec(),
        ..Default::default()
    };
    let member = |name: &str| {
        topology::match_member_subject(cluster, "hostile", "", "ConfigMap", "default", name)
    };
    let change = |name: &str| topology::change_subject(cluster, "", "ConfigMap", "default", name);
    let undecodable = "decode";
    vec![
        Case {
            subject: change("garbage"),
            payload: garbage.clone(),
            stages: &["evaluator"],
            reason: undecodable,
        },
        Case {
            subject: change("large"),
            payload: large.clone(),
            stages: &["evaluator"],
            reason: undecodable,
        },
        Case {
            subject: topology::cloudevent_subject(cluster),
            payload: garbage.clone(),
            stages: &["evaluator"],
            reason: undecodable,
        },
        Case {
            subject: topology::cloudevent_subject(cluster),
            payload: large.clone(),
            stages: &["evaluator"],
            reason: undecodable,
        },
        Case {
            subject: topology::cloudevent_subject(cluster),
            payload: not_json_event.encode_to_vec().into(),
            stages: &["evaluator"],
            reason: "payload is not a JSON object",
        },
        Case {
            subject: topology::cloudevent_subject(cluster),
            payload: not_a_cloud_event.encode_to_vec().into(),
            stages: &["evaluator"],
            reason: "required attribute specversion is missing",
        },
        Case {
            subject: topology::match_subject(cluster, "hostile-head"),
            payload: garbage.clone(),
            stages: &["reporter", "renderer"],
            reason: undecodable,
        },
        Case {
            subject: member("garbage"),
            payload: garbage.clone(),
            stages: &["reporter", "renderer"],
            reason: undecodable,
        },
        Case {
            subject: member("large"),
            payload: large.clone(),
            stages: &["reporter", "renderer"],
            reason: undecodable,
        },
        Case {
            subject: topology::cloudevent_match_subject(cluster, "hostile"),
            payload: garbage.clone(),
            stages: &["renderer"],
            reason: undecodable,
        },
        Case {
            subject: topology::cloudevent_match_subject(cluster, "hostile"),
            payload: large.clone(),
            stages: &["renderer"],
            reason: undecodable,
        },
        Case {
            subject: topology::desired_subject("hostile-garbage", cluster),
            payload: garbage.clone(),
            stages: &["applier"],
            reason: undecodable,
        },
        Case {
            subject: topology::desired_subject("hostile-large", cluster),
            payload: large,
            stages: &["applier"],
            reason: undecodable,
        },
        Case {
            subject: topology::config_subject("EventSource", "", "hostile-garbage"),
            payload: garbage,
            stages: &["evaluator", "renderer"],
            reason: undecodable,
        },
        Case {
            subject: topology::config_subject("EventSource", "", "hostile-not-json"),
            payload: not_json_config.encode_to_vec().into(),
            stages: &["evaluator", "renderer"],
            reason: "invalid object_json",
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_messages_on_every_consumed_subject_are_dead_lettered_and_the_pipeline_goes_on(
) -> anyhow::Result<()> {
    let mut stack = Stack::start(&["cluster-a"], None).await?;
    demo::install_seed(&stack, "cluster-a").await?;
    let bus = sluice_bus::Bus::connect(stack.bus_options()).await?;
    let js = bus.jetstream().clone();
    let cluster = topology::cluster_tokens("sveltos", "default", "cluster-a");
    let cases = cases(&cluster);
    for case in &cases {
        js.publish(case.subject.clone(), case.payload.clone())
            .await?
            .await?;
    }
    // A normal event goes through while (and after) the hostile ones are handled.
    demo::seed_service_goes_through(&stack, "cluster-a", DEADLINE).await?;

    // Every case's stages dead-letter it: the same payload, its subject, a reason.
    let missing = |letters: &[Letter]| -> Vec<String> {
        let mut missing = Vec::new();
        for case in &cases {
            for stage in case.stages {
                let found = letters.iter().any(|(s, origin, reason, payload)| {
                    s == stage
                        && *origin == case.subject
                        && *payload == case.payload
                        && !reason.is_empty()
                        && reason.contains(case.reason)
                });
                if !found {
                    missing.push(format!(
                        "{stage} <- {} ({} bytes)",
                        case.subject,
                        case.payload.len()
                    ));
                }
            }
        }
        missing
    };
    let outcome = wait_for("every hostile message dead-lettered", DEADLINE, || async {
        let letters = dead_letters(&js).await.ok()?;
        missing(&letters).is_empty().then_some(letters)
    })
    .await;
    let letters = match outcome {
        Ok(letters) => letters,
        Err(e) => {
            let letters = dead_letters(&js).await?;
            let seen: BTreeSet<String> = letters
                .iter()
                .map(|(s, o, r, p)| format!("{s} <- {o} ({} bytes): {r}", p.len()))
                .collect();
            return Err(fail(
                &stack,
                anyhow::anyhow!(
                    "{e}\nmissing: {:#?}\ndead letters: {seen:#?}",
                    missing(&letters)
                ),
            ));
        }
    };
    for (stage, origin, reason, payload) in &letters {
        eprintln!("{stage} <- {origin} ({} bytes): {reason}", payload.len());
    }
    // The evaluator follows the configuration twice (changes, CloudEvents): one dead letter.
    let config = topology::config_subject("EventSource", "", "hostile-garbage");
    let copies = letters
        .iter()
        .filter(|(stage, origin, _, _)| stage == "evaluator" && *origin == config)
        .count();
    assert_eq!(copies, 1, "config dead-lettered once per stage");
    assert!(stack.exited_services().is_empty(), "{}", stack.logs());
    // And the pipeline still goes on: a second Service becomes its profile too.
    stack
        .apply_yaml(
            "cluster-a",
            &demo::SERVICE.replace("name: my-service", "name: after"),
        )
        .await?;
    wait_profile(
        &stack,
        "service-network-policy",
        "cluster-a",
        "after",
        DEADLINE,
    )
    .await
    .map_err(|e| fail(&stack, e))?;
    Ok(())
}

/// The stack starts its services and returns without waiting for them: a configuration update
/// published at once may be stored before a service follows the configuration, and then
/// arrives in its replay, not live. An unreadable one must be dead-lettered either way (it was
/// only logged from a replay, so the hostile test above failed when a service started slowly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_config_update_stored_while_a_service_was_down_is_dead_lettered_when_it_starts(
) -> anyhow::Result<()> {
    let mut stack = Stack::start(&["cluster-a"], None).await?;
    stack.stop_service("sluice-renderer")?;
    let bus = sluice_bus::Bus::connect(stack.bus_options()).await?;
    let js = bus.jetstream().clone();
    let subject = topology::config_subject("EventSource", "", "hostile-while-down");
    let garbage = Bytes::from_static(&[0xff, 0xff, 0xff]);
    js.publish(subject.clone(), garbage.clone()).await?.await?;
    stack.start_service("sluice-renderer")?;
    wait_for("the renderer's dead letter", DEADLINE, || async {
        let letters = dead_letters(&js).await.ok()?;
        letters
            .iter()
            .any(|(stage, origin, reason, payload)| {
                stage == "renderer"
                    && *origin == subject
                    && *payload == garbage
                    && reason.contains("decode")
            })
            .then_some(())
    })
    .await
    .map_err(|e| fail(&stack, e))?;
    assert!(stack.exited_services().is_empty(), "{}", stack.logs());
    Ok(())
}

/// An EventSource named `name` selecting ConfigMaps labelled `hostile: <name>` with `evaluate`,
/// and a trigger deploying it to the clusters labelled `env: fv` with the policy `policy`.
fn event_source(name: &str, selector: &str) -> String {
    format!(
        "apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: {name}
spec:
  collectResources: true
  resourceSelectors:
{selector}
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: {name}
spec:
  sourceClusterSelector:
    matchLabels:
      env: fv
  eventSourceName: {name}
  policyRefs:
  - name: {name}
    namespace: default
    kind: ConfigMap
"
    )
}

fn lua_selector(name: &str, script: &str) -> String {
    let indented: String = script.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "  - group: \"\"
    version: v1
    kind: ConfigMap
    labelFilters:
    - key: hostile
      operation: Equal
      value: {name}
    evaluate: |
{indented}"
    )
}

/// The policy ConfigMap of trigger `name`: a template of `template`.
fn policy(name: &str, template: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: default
  annotations:
    projectsveltos.io/instantiate: ok
data:
  policy.yaml: |
    {template}
"
    )
}

fn labelled_config_map(name: &str) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: default
  labels:
    hostile: {name}
data:
  a: b
"
    )
}

const HARMLESS: &str = "kind: ConfigMap\n    apiVersion: v1\n    metadata:\n      name: {{ .Resource.metadata.name }}-copy\n      namespace: default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_event_sources_and_templates_fail_where_the_user_looks_and_seed_000_goes_on(
) -> anyhow::Result<()> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    demo::install_seed(&stack, "cluster-a").await?;
    let matching = "function evaluate() return {matching = true} end";
    let huge = format!(
        "function evaluate() return {{matching = {}true{}}} end",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    // (EventSource, its resourceSelectors, its policy template, the failure that must show).
    let bad_filter = "  - group: \"\"\n    version: v1\n    kind: ConfigMap\n    labelFilters:\n    - key: hostile\n      operation: Sometimes\n      value: x\n";
    let bad_regex = "  - group: \"\"\n    version: v1\n    kind: ConfigMap\n  messagingMatchCriteria:\n  - subject: \"user-(\"\n";
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "lua-syntax",
            lua_selector("lua-syntax", "function evaluate("),
            HARMLESS,
            "lua syntax error",
        ),
        (
            "lua-loop",
            lua_selector("lua-loop", "function evaluate() while true do end end"),
            HARMLESS,
            "instruction budget of 10000000 exceeded",
        ),
        (
            "lua-memory",
            lua_selector(
                "lua-memory",
                "function evaluate() local s = string.rep('x', 2^30) return {matching = true} end",
            ),
            HARMLESS,
            "memory limit of 67108864 bytes exceeded",
        ),
        (
            "lua-huge",
            lua_selector("lua-huge", &huge),
            HARMLESS,
            "lua syntax error",
        ),
        (
            "bad-regex",
            bad_regex.to_string(),
            HARMLESS,
            "invalid regular expression",
        ),
        (
            "template-loop",
            lua_selector("template-loop", matching),
            "{{ range until 1000000 }}{{ range until 1000000 }}{{ end }}{{ end }}",
            "template exceeded its budget of steps",
        ),
        (
            "template-bomb",
            lua_selector("template-bomb", matching),
            "{{ $s := \"xxxxxxxx\" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}",
            "exceeds the template budget of 16777216",
        ),
    ];
    // The API server refuses a label filter operation its schema does not list.
    let refused = stack
        .apply_yaml(MANAGEMENT, &event_source("bad-filter", bad_filter))
        .await
        .expect_err("refused by the schema");
    eprintln!("{refused:#}");
    assert!(format!("{refused:#}").contains("Sometimes"), "{refused:#}");
    for (name, selector, template, _) in &cases {
        stack
            .apply_yaml(MANAGEMENT, &policy(name, template))
            .await?;
        stack
            .apply_yaml(MANAGEMENT, &event_source(name, selector))
            .await?;
        stack
            .apply_yaml("cluster-a", &labelled_config_map(name))
            .await?;
    }
    // Seed 000 goes on beside them.
    demo::seed_service_goes_through(&stack, "cluster-a", DEADLINE).await?;
    for (name, _, _, want) in &cases {
        let report = format!("sveltos--{name}--cluster-a");
        demo::wait_report(&stack, &report, DEADLINE, |r| {
            r["status"]["failureMessage"]
                .as_str()
                .is_some_and(|m| m.contains(want))
        })
        .await
        .map_err(|e| {
            let now = futures::executor::block_on(stack.event_report(&report));
            let trigger = futures::executor::block_on(stack.get(
                MANAGEMENT,
                "lib.projectsveltos.io/v1beta1",
                "EventTrigger",
                "",
                name,
            ));
            let status = |o: anyhow::Result<Option<serde_json::Value>>| {
                o.ok().flatten().map(|v| v["status"].to_string())
            };
            fail(
                &stack,
                anyhow::anyhow!(
                    "{e}: report {:?}, trigger {:?}",
                    status(now),
                    status(trigger)
                ),
            )
        })?;
    }
    object_that_is_not_json_is_its_event_sources_failure(&stack).await?;
    // A template's failure is the trigger's status for the cluster too.
    for name in ["template-loop", "template-bomb"] {
        let want = cases
            .iter()
            .find(|c| c.0 == name)
            .map(|c| c.3)
            .unwrap_or_default();
        wait_for(&format!("{name}'s status"), DEADLINE, || async {
            let trigger = stack
                .get(
                    MANAGEMENT,
                    "lib.projectsveltos.io/v1beta1",
                    "EventTrigger",
                    "",
                    name,
                )
                .await
                .ok()??;
            let failure = trigger["status"]["clusterInfo"][0]["failureMessage"].as_str()?;
            failure.contains(want).then_some(())
        })
        .await
        .map_err(|e| fail(&stack, e))?;
    }
    Ok(())
}

/// A change whose object is not JSON (only a hostile publisher can send one) is that object's
/// failure in the EventReport of every EventSource watching its kind, not its deletion.
async fn object_that_is_not_json_is_its_event_sources_failure(stack: &Stack) -> anyhow::Result<()> {
    let selector = "  - group: \"\"\n    version: v1\n    kind: Secret\n";
    stack
        .apply_yaml(MANAGEMENT, &policy("not-json", HARMLESS))
        .await?;
    stack
        .apply_yaml(MANAGEMENT, &event_source("not-json", selector))
        .await?;
    stack
        .apply_yaml(
            "cluster-a",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: real\n  namespace: default\n",
        )
        .await?;
    let report = "sveltos--not-json--cluster-a";
    // The Secret watch runs once the real Secret is reported.
    demo::wait_report(stack, report, DEADLINE, |r| {
        r["spec"]["matchingResources"][0]["name"] == "real"
    })
    .await
    .map_err(|e| fail(stack, e))?;
    let bus = sluice_bus::Bus::connect(stack.bus_options()).await?;
    let cluster = topology::cluster_tokens("sveltos", "default", "cluster-a");
    let change = pb::ResourceChange {
        cluster: Some(pb::ClusterRef {
            namespace: "default".into(),
            name: "cluster-a".into(),
            r#type: pb::ClusterType::Sveltos as i32,
        }),
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: "default".into(),
        name: "broken".into(),
        object_json: b"{\"metadata\": ".to_vec(),
        ..Default::default()
    };
    bus.jetstream()
        .publish(
            topology::change_subject(&cluster, "", "Secret", "default", "broken"),
            change.encode_to_vec().into(),
        )
        .await?
        .await?;
    demo::wait_report(stack, report, DEADLINE, |r| {
        r["status"]["failureMessage"]
            .as_str()
            .is_some_and(|m| m.contains("default/broken: the object is not a JSON document"))
    })
    .await
    .map_err(|e| fail(stack, e))?;
    Ok(())
}
