//! The services' client against the API test server, which offers HTTP/2 by ALPN as
//! kube-apiserver does: the client takes it, and watches that nobody reads never hold up the
//! other requests that share their connection.

mod support;

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchParams};
use kube::core::ObjectMeta;
use sluice_testserver::{Config, TestServer};

async fn server() -> TestServer {
    TestServer::start(Config {
        clusters: vec!["mgmt".into()],
        ..Config::default()
    })
    .await
    .expect("test server starts")
}

#[tokio::test]
async fn the_client_speaks_http2_to_a_server_that_offers_it() {
    let server = server().await;
    let client = support::client(&server, "mgmt").await;
    let request = http::Request::get("/version")
        .body(Vec::new())
        .expect("request builds");
    let response = client
        .send(request.map(Into::into))
        .await
        .expect("GET /version");
    assert_eq!(response.status(), http::StatusCode::OK);
    assert_eq!(response.version(), http::Version::HTTP_2);
}

/// Each unread watch holds what the server sent it up to its stream's window. Under hyper's
/// default windows (2 MiB a stream, 5 MiB a connection) three such watches take the whole
/// connection's window, and every later answer on the connection waits for them to be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_watches_never_hold_up_the_requests_beside_them() {
    const WATCHES: usize = 4;
    const CREATED: usize = 1_200;
    let server = server().await;
    let client = support::client(&server, "mgmt").await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut unread = Vec::new();
    for _ in 0..WATCHES {
        unread.push(
            api.watch(&WatchParams::default(), "0")
                .await
                .expect("a watch starts"),
        );
    }
    // 1,200 ConfigMaps of 8 kB each: 9.6 MB sent to each watch, more than any window.
    let data = std::collections::BTreeMap::from([("padding".to_string(), "x".repeat(8_000))]);
    let created = tokio::time::timeout(Duration::from_secs(30), async {
        for chunk in (0..CREATED).collect::<Vec<_>>().chunks(16) {
            let creates = chunk.iter().map(|i| {
                let object = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("padded-{i}")),
                        ..ObjectMeta::default()
                    },
                    data: Some(data.clone()),
                    ..ConfigMap::default()
                };
                let api = api.clone();
                async move { api.create(&PostParams::default(), &object).await }
            });
            for result in join_all(creates).await {
                result.expect("a create is answered");
            }
        }
    })
    .await;
    assert!(
        created.is_ok(),
        "the creates stalled behind {WATCHES} unread watches"
    );
    drop(unread);
}

/// A TCP proxy to `upstream` that forwards until told to go silent: then it forwards nothing
/// more either way and keeps every connection open, as a network that drops packets does.
struct SilentProxy {
    port: u16,
    silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SilentProxy {
    async fn start(upstream: std::net::SocketAddr) -> SilentProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy binds");
        let port = listener.local_addr().expect("proxy address").port();
        let silent = std::sync::Arc::new(AtomicBool::new(false));
        let quiet = silent.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                for (mut from, mut to) in [(client_read, server_write), (server_read, client_write)]
                {
                    let quiet = quiet.clone();
                    tokio::spawn(async move {
                        let mut buffer = vec![0; 64 * 1024];
                        while let Ok(read) = from.read(&mut buffer).await {
                            if quiet.load(Ordering::SeqCst) {
                                // Hold both ends open and answer nothing, ever.
                                std::future::pending::<()>().await;
                            }
                            if read == 0 || to.write_all(&buffer[..read]).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            }
        });
        SilentProxy { port, silent }
    }

    fn go_silent(&self) {
        self.silent.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An API server that stops answering without closing the connection (a partition, a dead
/// node) is told by the connection's health check: its watch ends within the check's interval
/// and timeout instead of waiting for events forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_on_a_connection_that_stops_answering_ends_after_the_health_check() {
    use futures::StreamExt as _;
    let server = server().await;
    let mut config = support::config(&server, "mgmt").await;
    let host = config.cluster_url.host().expect("a host").to_string();
    let port = config.cluster_url.port_u16().expect("a port");
    let upstream = tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("the server resolves")
        .next()
        .expect("an address");
    let proxy = SilentProxy::start(upstream).await;
    let mut url = config.cluster_url.clone().into_parts();
    url.authority = Some(
        format!(
            "{}:{}",
            config.cluster_url.host().expect("a host"),
            proxy.port
        )
        .parse()
        .expect("authority"),
    );
    config.cluster_url = http::Uri::from_parts(url).expect("url");
    let check = sluice_kube::client::HealthCheck {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    };
    let client = sluice_kube::client::client_with(config, check).expect("client builds");
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("a watch starts")
        .boxed();
    api.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("seen".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        },
    )
    .await
    .expect("create through the proxy");
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let Ok(kube::api::WatchEvent::Added(object)) = event {
                if object.metadata.name.as_deref() == Some("seen") {
                    return true;
                }
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the watch tells the creation");

    proxy.go_silent();
    let silent_since = std::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match events.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    let after = silent_since.elapsed();
    assert!(
        ended.is_ok(),
        "the watch still waits {after:?} after the server went silent"
    );
    // A ping goes out once a second passes without a frame and has a second to be answered.
    assert!(
        after < Duration::from_secs(5),
        "the watch ended only after {after:?}"
    );
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// Whether `error` or any error under it is a refusal by the fence.
fn is_fenced(error: &kube::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = next {
        if error.downcast_ref::<sluice_runtime::Fenced>().is_some() {
            return true;
        }
        next = error.source();
    }
    false
}

/// A service's client asks the process's fence before each write (ADR 0046): once the fence
/// is closed (the lease lost) creates, patches and deletes fail without reaching the API
/// server, while reads and watches go on.
#[tokio::test]
async fn a_closed_fence_refuses_the_clients_writes_and_lets_its_reads_through() {
    use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
    let server = server().await;
    let fence = sluice_runtime::Fence::open();
    let client = sluice_kube::client::fenced(support::config(&server, "mgmt").await, fence.clone())
        .expect("client builds");
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &config_map("admitted"))
        .await
        .expect("an open fence admits a create");

    fence.close();
    let create = api
        .create(&PostParams::default(), &config_map("refused"))
        .await
        .expect_err("a closed fence admitted a create");
    assert!(is_fenced(&create), "not the fence's refusal: {create:?}");
    let patch = api
        .patch(
            "admitted",
            &PatchParams::apply("test"),
            &Patch::Apply(
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}}),
            ),
        )
        .await
        .expect_err("a closed fence admitted a patch");
    assert!(is_fenced(&patch), "not the fence's refusal: {patch:?}");
    let delete = api
        .delete("admitted", &DeleteParams::default())
        .await
        .expect_err("a closed fence admitted a delete");
    assert!(is_fenced(&delete), "not the fence's refusal: {delete:?}");

    let listed = api
        .list(&ListParams::default())
        .await
        .expect("a read goes on");
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|cm| cm.metadata.name.clone())
        .filter(|name| name != "kube-root-ca.crt")
        .collect();
    assert_eq!(names, ["admitted"]);
    let unfenced: Api<ConfigMap> =
        Api::namespaced(support::client(&server, "mgmt").await, "default");
    let admitted = unfenced.get("admitted").await.expect("still there");
    assert_eq!(admitted.data, None, "the refused patch reached the server");
    assert!(unfenced.get_opt("refused").await.expect("get").is_none());
}
