//! The watcher's shutdown, nothing mocked: while resource changes and CloudEvents keep coming,
//! a first SIGTERM makes it drain (its watches and listeners stop reading and store what they
//! hold, the CloudEvent runner settles its window) and exit cleanly within its drain deadline.
//! Across that restart nothing is lost: every ConfigMap's last state is on the bus (a change
//! the drain did not store is listed again at the next start) and every CloudEvent is stored
//! exactly once (what was not acked comes back from the managed JetStream).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_bus::topology;
use sluice_proto::v1 as pb;
use sluice_testkit::wait_for;

#[path = "cloudevents/fixture.rs"]
#[allow(dead_code)] // shared with tests/cloudevents.rs, which uses all of it
mod fixture;

use fixture::*;

/// An EventSource selecting the ConfigMaps of namespace `drain`, deployed to the cluster.
const CONFIGMAPS: &str = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: drain-configmaps
spec:
  resourceSelectors:
  - group: ""
    version: v1
    kind: ConfigMap
    namespace: drain
---
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: drain-configmaps
spec:
  sourceClusterSelector:
    matchLabels:
      env: production
  eventSourceName: drain-configmaps
  policyRefs:
  - name: namespace
    namespace: default
    kind: ConfigMap
"#;

/// Events and ConfigMaps written in all; SIGTERM after `TERM_AT`, started again after
/// `START_AT` (or once it has exited, if later).
const TOTAL: usize = 300;
const TERM_AT: usize = 100;
const START_AT: usize = 200;
/// How much later than its drain deadline the process may be gone (start-up of the signal
/// handling, closing the connections).
const SLACK: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_drains_within_the_deadline_and_loses_nothing_across_the_restart(
) -> anyhow::Result<()> {
    let mut fx = Fixture::start().await?;
    let js = fx.jetstream_users().await?;
    fx.apply(
        MANAGEMENT,
        &sluice_kube::manifest::parse_documents(CONFIGMAPS)?,
    )
    .await?;
    fx.apply(
        CLUSTER,
        &[json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "drain"}})],
    )
    .await?;
    fx.start_watcher()?;

    let event = |i: usize| SEED_LOGIN.replace("User mgianluc login", &format!("event-{i}"));
    let configmap = |i: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("cm-{i}"), "namespace": "drain"},
               "data": {"i": i.to_string()}})
    };
    let mut terminated = None;
    let mut drain_took = None;
    for i in 0..TOTAL {
        js.publish("user-operation", event(i).into()).await?.await?;
        fx.apply(CLUSTER, &[configmap(i)]).await?;
        if i == TERM_AT {
            // Sent from another thread, so that events keep coming while it drains.
            let mut watcher = fx
                .watcher
                .take()
                .ok_or_else(|| anyhow::anyhow!("watcher not running"))?;
            terminated = Some(tokio::task::spawn_blocking(move || {
                let sent = Instant::now();
                let status = watcher.terminate_within(sluice_watcher::DRAIN_DEADLINE * 3);
                (status, sent.elapsed(), watcher.log())
            }));
        }
        if i == START_AT {
            let handle = terminated
                .take()
                .ok_or_else(|| anyhow::anyhow!("the watcher was not terminated"))?;
            let (status, took, log) = handle.await?;
            let status = status?;
            assert!(
                status.success(),
                "the watcher did not exit cleanly on SIGTERM ({status}):\n{log}"
            );
            assert!(
                took <= sluice_watcher::DRAIN_DEADLINE + SLACK,
                "the watcher took {took:?} to exit on SIGTERM:\n{log}"
            );
            assert!(
                log.contains("watcher drained"),
                "the drain did not finish:\n{log}"
            );
            drain_took = Some(took);
            fx.start_watcher()?;
        }
    }

    // Every CloudEvent is on the bus, once.
    let messages = |received: &[pb::CloudEventReceived]| -> Vec<String> {
        received
            .iter()
            .filter_map(|r| serde_json::from_slice::<Value>(&r.event_json).ok())
            .filter_map(|e| e["data"]["message"].as_str().map(str::to_string))
            .collect()
    };
    wait_for("every event on the bus", DEADLINE, || async {
        let received = fx.received().await.ok()?;
        let distinct: std::collections::BTreeSet<String> =
            messages(&received).into_iter().collect();
        (distinct.len() >= TOTAL).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    let stream = js.get_stream("USERS").await?;
    let consumer_name = format!(
        "sluice-{}",
        topology::encode_token("sveltos.default.production")
    );
    wait_for("managed consumer settled", DEADLINE, || async {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer =
            stream.get_consumer(&consumer_name).await.ok()?;
        let info = consumer.info().await.ok()?;
        (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
    })
    .await?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for message in messages(&fx.received().await?) {
        *counts.entry(message).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "published more than once: {twice:?}");
    assert_eq!(counts.len(), TOTAL, "no event lost");

    // Every ConfigMap's last state is on the bus.
    let client = fx.client(CLUSTER).await?;
    let kind = sluice_kube::apply::resolve(&client, "v1", "ConfigMap").await?;
    // Every ConfigMap of the namespace: the test's and the root CA the cluster puts in each.
    let mut live = BTreeMap::new();
    for object in
        sluice_kube::apply::list_labelled_in(&client, &kind, Some("drain"), &BTreeMap::new())
            .await?
    {
        let field = |f: &str| {
            object["metadata"][f]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        live.insert(field("name"), field("resourceVersion"));
    }
    for i in 0..TOTAL {
        let name = format!("cm-{i}");
        anyhow::ensure!(live.contains_key(&name), "{name} is not in the cluster");
    }
    anyhow::ensure!(
        live.contains_key("kube-root-ca.crt"),
        "no root CA: {live:?}"
    );
    let filter = topology::change_kind_filter("sveltos.default.production", "", "ConfigMap");
    let published = wait_for("every ConfigMap's state on the bus", DEADLINE, || async {
        let mut published = BTreeMap::new();
        for delivered in fx.bus.replay_state(topology::CHANGES, &filter).await.ok()? {
            let change: pb::ResourceChange =
                sluice_wire::decode("ResourceChange", &delivered).ok()?;
            if change.namespace == "drain" && !change.deleted {
                published.insert(change.name, change.resource_version);
            }
        }
        (published == live).then_some(published)
    })
    .await;
    published.map_err(|e| anyhow::anyhow!("{e}\nwatcher log:\n{}", fx.log()))?;
    eprintln!(
        "SIGTERM after {TERM_AT} of {TOTAL} events and ConfigMaps: exited in {:?}; after the \
         restart all {TOTAL} CloudEvents stored once and all {TOTAL} ConfigMaps' states present (and the root CA's)",
        drain_took.unwrap_or_default()
    );
    Ok(())
}
