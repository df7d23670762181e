//! Load benchmark: CLUSTERS x OBJECTS ConfigMaps created through kube-rs while one watch per cluster
//! counts the events it receives; prints creates/s, watch events/s and resident memory per stored
//! object. Run: `cargo bench -p sluice-testserver --bench load` (env CLUSTERS, OBJECTS, CONCURRENCY).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::{Client, Config};
use sluice_testserver::{Config as ServerConfig, TestServer};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident set size of this process in bytes, from /proc/self/statm.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

fn cm(i: usize) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
        "data": {"key": format!("value-{i}"), "other": "some configuration text of moderate size"},
    }))
    .expect("configmap")
}

#[tokio::main]
async fn main() {
    let clusters = env("CLUSTERS", 100);
    let objects = env("OBJECTS", 1000);
    let concurrency = env("CONCURRENCY", 64);
    let history = env("WATCH_HISTORY", 10_000);
    let names: Vec<String> = (0..clusters).map(|i| format!("c{i}")).collect();
    let rss_before = rss();
    let server = TestServer::start(ServerConfig {
        clusters: names.clone(),
        watch_history: history,
        ..ServerConfig::default()
    })
    .await
    .expect("server starts");
    let rss_empty = rss();

    let mut apis = Vec::new();
    for name in &names {
        // Plain HTTP with the admin token, so that the rates measure the server, not TLS.
        let url = format!("http://{}/clusters/{name}", server.addr());
        let mut config = Config::new(url.parse().expect("url"));
        config.auth_info.token = server.admin_token(name).map(Into::into);
        config.default_retry = false;
        let client = Client::try_from(config).expect("client");
        apis.push(Api::<ConfigMap>::namespaced(client, "default"));
    }

    let delivered = Arc::new(AtomicU64::new(0));
    let mut watches = Vec::new();
    for api in &apis {
        let rv = api
            .list(&Default::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("rv");
        let stream = api
            .watch(&WatchParams::default().timeout(290), &rv)
            .await
            .expect("watch")
            .boxed();
        let delivered = delivered.clone();
        watches.push(tokio::spawn(async move {
            let mut stream = stream;
            while let Ok(Some(ev)) = stream.try_next().await {
                if matches!(ev, WatchEvent::Added(_)) {
                    delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    let total = clusters * objects;
    let start = Instant::now();
    futures::stream::iter((0..total).map(|n| {
        let api = apis[n % clusters].clone();
        async move {
            api.create(&PostParams::default(), &cm(n / clusters))
                .await
                .expect("create")
        }
    }))
    .buffer_unordered(concurrency)
    .for_each(|_| async {})
    .await;
    let create_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(120);
    while delivered.load(Ordering::Relaxed) < total as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let watch_secs = start.elapsed().as_secs_f64();
    let got = delivered.load(Ordering::Relaxed);
    let rss_full = rss();
    let stored: usize = names.iter().map(|n| server.object_count(n)).sum();

    println!("clusters={clusters} objects/cluster={objects} concurrency={concurrency} watch_history={history}");
    println!("created {total} objects in {create_secs:.2}s: {:.0} creates/s (kube-rs over HTTP/1.1, {concurrency} in flight)", total as f64 / create_secs);
    println!("watch events delivered: {got}/{total} in {watch_secs:.2}s: {:.0} events/s across {clusters} watches", got as f64 / watch_secs);
    println!(
        "memory: rss before start {} MiB, empty clusters {} MiB, full {} MiB; {:.0} bytes per stored object ({stored} objects incl. built-in namespaces and retained watch history)",
        rss_before >> 20,
        rss_empty >> 20,
        rss_full >> 20,
        (rss_full.saturating_sub(rss_empty)) as f64 / total as f64
    );
    for w in watches {
        w.abort();
    }
    server.shutdown().await;
}
