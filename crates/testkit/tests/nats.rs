//! Integration tests of the testkit against a real nats-server and real child processes.
#![allow(clippy::unwrap_used)] // tests fail by panicking

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use async_nats::jetstream;
use sluice_testkit::{wait_for, NatsServer, ServiceProcess};

async fn connect(server: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    jetstream::new(client)
}

#[tokio::test]
async fn starts_a_server_with_jetstream_enabled() {
    let server = NatsServer::start().await.unwrap();
    assert!(server.url().starts_with("nats://127.0.0.1:"));
    assert!(server.pid() > 0);
    assert!(server.store_dir().is_dir());
    let js = connect(&server).await;
    // the account info request is answered only when JetStream is enabled
    let account = js.query_account().await.unwrap();
    assert_eq!(account.streams, 0);
}

#[tokio::test]
async fn restart_keeps_streams_and_messages_on_the_same_port() {
    let mut server = NatsServer::start().await.unwrap();
    let url = server.url();
    let first_pid = server.pid();
    let js = connect(&server).await;
    js.create_stream(jetstream::stream::Config {
        name: "KEEP".to_owned(),
        subjects: vec!["keep.>".to_owned()],
        ..Default::default()
    })
    .await
    .unwrap();
    for n in 0..3 {
        js.publish("keep.it", format!("m{n}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    server.restart().await.unwrap();
    assert_eq!(server.url(), url);
    assert_ne!(server.pid(), first_pid);

    let js = connect(&server).await;
    let mut stream = js.get_stream("KEEP").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 3);
    let last = stream
        .get_last_raw_message_by_subject("keep.it")
        .await
        .unwrap();
    assert_eq!(&last.payload[..], b"m2");
}

#[tokio::test]
async fn drop_kills_the_server_and_removes_its_store() {
    let server = NatsServer::start().await.unwrap();
    let pid = server.pid();
    let store = server.store_dir().to_path_buf();
    drop(server);
    assert!(!store.exists());
    // the child was reaped on drop, so /proc no longer lists it (unless the pid was reused by
    // an unrelated process, which would not be a nats-server)
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(!cmdline.contains("nats-server"), "{cmdline}");
}

#[tokio::test]
async fn stopped_server_refuses_clients_until_started_again() {
    let mut server = NatsServer::start().await.unwrap();
    server.stop();
    assert_eq!(server.pid(), 0);
    assert!(async_nats::connect(server.url()).await.is_err());
    server.start_again().await.unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    wait_for("client to connect", Duration::from_secs(5), || {
        let state = client.connection_state();
        async move { (state == async_nats::connection::State::Connected).then_some(()) }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn service_process_captures_output_and_terminates_with_sigterm() {
    let mut process = ServiceProcess::spawn(
        "/bin/sh",
        &["-c", "echo started $GREETING; exec sleep 30"],
        &[("GREETING", "hello")],
    )
    .unwrap();
    let pid = process.pid();
    assert!(pid > 0);
    wait_for(
        "the greeting in the log",
        Duration::from_secs(10),
        || async { process.log().contains("started hello").then_some(()) },
    )
    .await
    .unwrap();
    let status = process.terminate().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert!(process.log_path().is_file());
}

#[tokio::test]
async fn service_process_does_not_inherit_sluice_variables() {
    // SAFETY: set_var is unsound only with concurrent readers of the environment; this test
    // binary reads no SLUICE_ variable anywhere else.
    unsafe { std::env::set_var("SLUICE_FROM_SHELL", "leaked") };
    let mut process = ServiceProcess::spawn(
        "/bin/sh",
        &[
            "-c",
            "echo shell=${SLUICE_FROM_SHELL:-unset} given=$SLUICE_GIVEN",
        ],
        &[("SLUICE_GIVEN", "yes")],
    )
    .unwrap();
    let status = process.wait_exit(Duration::from_secs(10)).unwrap();
    assert!(status.success());
    assert_eq!(process.log(), "shell=unset given=yes\n");
}

#[tokio::test]
async fn terminate_escalates_to_sigkill_when_sigterm_is_ignored() {
    let mut process = ServiceProcess::spawn(
        "/bin/sh",
        &[
            "-c",
            "trap '' TERM; echo ignoring; while :; do sleep 1; done",
        ],
        &[],
    )
    .unwrap();
    wait_for(
        "the child to install its trap",
        Duration::from_secs(10),
        || async { process.log().contains("ignoring").then_some(()) },
    )
    .await
    .unwrap();
    let status = process
        .terminate_within(Duration::from_millis(300))
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn missing_workspace_binary_is_a_clear_error() {
    let error = ServiceProcess::spawn("sluice-no-such-binary", &[], &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("binary sluice-no-such-binary not found"),
        "{error}"
    );
    assert!(error.contains("cargo build"), "{error}");
}

/// Three nodes form one JetStream cluster: a stream of three replicas keeps taking messages
/// while any one node is down, and the node that comes back catches up.
#[tokio::test]
async fn a_cluster_of_three_keeps_a_replicated_stream_through_a_node_loss() {
    let mut cluster = sluice_testkit::NatsCluster::start(3, &[]).await.unwrap();
    let urls = cluster.urls();
    assert_eq!(urls.split(',').count(), 3, "{urls}");
    // Connected to the node that goes down: the client moves to another.
    let client = async_nats::connect(cluster.nodes[0].url()).await.unwrap();
    let js = jetstream::new(client);
    js.create_stream(jetstream::stream::Config {
        name: "R3".into(),
        subjects: vec!["r3.>".into()],
        num_replicas: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    for n in 0..10 {
        js.publish(format!("r3.{n}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    cluster.nodes[0].stop();
    let stored = wait_for(
        "publishes with a node down",
        Duration::from_secs(30),
        || {
            let js = js.clone();
            async move {
                let ack = js
                    .publish("r3.more", "y".into())
                    .await
                    .map_err(|e| e.to_string())?;
                ack.await.map_err(|e| e.to_string())
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(stored.sequence, 11);
    cluster.nodes[0].start_again().await.unwrap();
    cluster.wait_healthy().await.unwrap();
    let mut stream = js.get_stream("R3").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 11);
}
