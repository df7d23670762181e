//! The bus's authorization against a real nats-server 2.15 that requires TLS with client
//! certificates and admits only the nkeys of the generated configuration (`SecureNats`, as the
//! local stack runs it): strangers are refused, each identity can do everything its topology
//! declaration says and is refused, with an error naming it and the subject, outside it.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use sluice_bus::topology::{self, Identity, StreamSpec, IDENTITIES};
use sluice_bus::{Bus, Error, Outgoing};
use sluice_cli::natsauth::SecureNats;
use sluice_testkit::{wait_for, ServiceProcess};

const DEADLINE: Duration = Duration::from_secs(30);

/// A subject inside `stream`'s filter.
fn subject_in(stream: StreamSpec, token: &str) -> String {
    stream.subjects.replace('>', &format!("test.{token}"))
}

fn outgoing(subject: String, id: &str) -> Outgoing {
    Outgoing {
        ttl: None,
        subject,
        msg_id: id.to_string(),
        payload: Bytes::from_static(b"payload"),
        traceparent: None,
    }
}

async fn refused_plain(
    nats: &SecureNats,
    options: async_nats::ConnectOptions,
) -> anyhow::Result<String> {
    match options.connect(nats.server.url()).await {
        Ok(_) => anyhow::bail!("the server admitted a client it must refuse"),
        Err(error) => Ok(error.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_a_known_nkey_or_without_tls_are_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let nats = SecureNats::start(dir.path(), "").await?;
    let files = nats.credentials.auth("evaluator");
    let ca = files.nats_ca_file.clone().expect("a CA file");
    let cert = files.nats_cert_file.clone().expect("a certificate");
    let key = files.nats_key_file.clone().expect("a key");

    // TLS and a valid client certificate, but no nkey.
    let anonymous = async_nats::ConnectOptions::new()
        .add_root_certificates(ca.clone())
        .add_client_certificate(cert.clone(), key.clone());
    let error = refused_plain(&nats, anonymous).await?;
    assert!(error.contains("authorization violation"), "{error}");

    // An nkey the configuration does not list.
    let stranger = nkeys::KeyPair::new_user().seed()?;
    let unknown = async_nats::ConnectOptions::new()
        .nkey(stranger)
        .add_root_certificates(ca.clone())
        .add_client_certificate(cert, key);
    let error = refused_plain(&nats, unknown).await?;
    assert!(error.contains("authorization violation"), "{error}");

    // A known nkey without a client certificate: the server verifies clients.
    let seed = std::fs::read_to_string(files.nats_nkey_file.expect("a seed"))?;
    let no_certificate = async_nats::ConnectOptions::new()
        .nkey(seed.trim().to_string())
        .add_root_certificates(ca);
    refused_plain(&nats, no_certificate).await?;

    // No TLS at all.
    let plain = async_nats::ConnectOptions::new().nkey(seed.trim().to_string());
    refused_plain(&nats, plain).await?;

    // The same identity with every file connects.
    let bus = Bus::connect(nats.bus_options(Some(topology::EVALUATOR))).await?;
    assert!(bus.is_connected());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_is_refused_outside_its_permissions_with_an_error_naming_both(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let nats = SecureNats::start(dir.path(), "").await?;
    Bus::connect(nats.bus_options(None)).await?; // the administrator creates every stream
    let reporter = Bus::connect(nats.bus_options(Some(topology::REPORTER))).await?;

    // A desired state would make the applier change the fleet: only the renderer may write one.
    let desired = topology::desired_subject("trigger", "sveltos.default.cluster-a");
    let forged = reporter.publish_durably(outgoing(desired.clone(), "forged"));
    // Nor may the reporter read what it does not consume or follow.
    let peek = reporter.replay_state(topology::DESIRED, topology::DESIRED.subjects);
    let (forged, peek) = tokio::join!(forged, peek);

    match forged {
        Err(error @ Error::Refused { .. }) => {
            let message = error.to_string();
            assert!(message.contains("identity reporter"), "{message}");
            assert!(message.contains(&desired), "{message}");
            assert!(message.contains("Permissions Violation"), "{message}");
        }
        other => panic!("the reporter published a desired state: {other:?}"),
    }
    assert!(peek.is_err(), "the reporter read SLUICE_DESIRED");

    // Its own output (the reporter writes only its dead letters on the bus) is stored.
    reporter
        .publish_durably(outgoing(topology::dead_subject("reporter"), "own"))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_service_says_so_in_its_log() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let nats = SecureNats::start(dir.path(), "").await?;
    // The reporter's binary started with the tap's identity, which may not set up streams.
    let env: Vec<(String, String)> = [
        ("SLUICE_NATS_URL".to_string(), nats.server.url()),
        (
            "SLUICE_HEALTH_ADDR".to_string(),
            format!("127.0.0.1:{}", sluice_testkit::free_port()),
        ),
    ]
    .into_iter()
    .chain(nats.credentials.env("tap"))
    .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut reporter = ServiceProcess::spawn("sluice-reporter", &[], &env)?;
    let logged = wait_for("the reporter to log the refusal", DEADLINE, || {
        let log = reporter.log();
        async move {
            log.lines()
                .find(|line| {
                    line.contains("Permissions Violation")
                        && line.contains("identity=\"reporter\"")
                        && line.contains("$JS.API.STREAM.")
                })
                .map(str::to_owned)
        }
    })
    .await;
    reporter.kill();
    logged?;
    Ok(())
}

/// Everything `identity` declares, done for real: set up its streams, publish to each stream it
/// writes and its dead letters, read and ack through each durable, replay each followed stream,
/// purge what it purges, tap what it taps.
async fn exercise(nats: &SecureNats, admin: &Bus, identity: Identity) -> anyhow::Result<()> {
    let name = identity.name;
    let options = nats.bus_options(Some(identity));
    let client = options.connect_client().await?;
    let mut taps = Vec::new();
    for tap in identity.taps {
        taps.push(client.subscribe(tap.to_string()).await?);
    }
    client.flush().await?;
    // Core NATS delivers at most once: the message is published again each second until
    // every tap has read one, so the test judges the permission, not one delivery.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    for tap in &mut taps {
        loop {
            admin
                .client()
                .publish(subject_in(topology::MATCH, name), "tapped".into())
                .await?;
            admin.client().flush().await?;
            match tokio::time::timeout(Duration::from_secs(1), tap.next()).await {
                Ok(Some(_)) => break,
                Ok(None) => anyhow::bail!("{name}: tap ended"),
                Err(_) if tokio::time::Instant::now() < deadline => continue,
                Err(elapsed) => return Err(elapsed.into()),
            }
        }
    }
    if identity.streams().is_empty() {
        return Ok(());
    }
    let bus = Bus::connect(options).await?;
    for stream in identity.publishes {
        let subject = subject_in(*stream, name);
        bus.publish_durably(outgoing(subject, &format!("{name}-out")))
            .await?;
    }
    if identity.dead_letters {
        bus.dead_letter(name, "origin", Bytes::new(), "unreadable", &[])
            .await?
            .await?;
    }
    for stream in identity.follows {
        bus.replay_state(*stream, stream.subjects).await?;
        let (_initial, _live) = bus.follow_state(*stream, stream.subjects).await?;
    }
    for consumer in identity.consumes {
        admin
            .publish_durably(outgoing(
                subject_in(consumer.stream, &format!("for-{name}")),
                &format!("for-{name}-{}", consumer.stream.name),
            ))
            .await?;
        let mut messages = bus.durable(*consumer, None).await?;
        let message = tokio::time::timeout(DEADLINE, messages.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("{name}: consumer ended"))??;
        // An ack the server refused would leave the message pending; `double_ack` waits for
        // the server's confirmation.
        message
            .double_ack()
            .await
            .map_err(|e| anyhow::anyhow!("{name}: ack on {}: {e}", consumer.stream.name))?;
    }
    for stream in identity.purges {
        bus.purge(*stream, &subject_in(*stream, name)).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_identity_can_do_all_its_declaration_says() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let nats = SecureNats::start(dir.path(), "").await?;
    let admin = Bus::connect(nats.bus_options(None)).await?;
    for identity in IDENTITIES {
        tokio::time::timeout(Duration::from_secs(60), exercise(&nats, &admin, identity))
            .await
            .map_err(|_| anyhow::anyhow!("{} timed out: refused somewhere", identity.name))?
            .map_err(|error| error.context(format!("identity {}", identity.name)))?;
    }
    Ok(())
}

/// A follower's ordered consumers have random names, so it may manage consumers of the streams
/// it follows by any name, except the durables other identities declare there: the evaluator,
/// which follows `SLUICE_MATCH`, can neither delete, re-create nor read from the reporter's
/// durable on it, by the current or the legacy create subject, and still follows the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cannot_touch_another_identitys_durable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let nats = SecureNats::start(dir.path(), "").await?;
    let admin = Bus::connect(nats.bus_options(None)).await?;
    let reporter = Bus::connect(nats.bus_options(Some(topology::REPORTER))).await?;
    let _durable = reporter.durable(topology::REPORTER_MATCH, None).await?;
    let evaluator = Bus::connect(nats.bus_options(Some(topology::EVALUATOR))).await?;
    let stream = topology::MATCH.name;
    let durable = topology::REPORTER_MATCH.durable;

    let deleted = evaluator
        .jetstream()
        .delete_consumer_from_stream(durable, stream)
        .await;
    assert!(
        deleted.is_err(),
        "the evaluator deleted the reporter's durable"
    );
    // Re-creating it under its name with another configuration (no acks), by the subject that
    // names the consumer and by the legacy one that names only the stream.
    let hijack = serde_json::json!({"stream_name": stream, "config": {
        "name": durable, "durable_name": durable, "ack_policy": "none", "deliver_policy": "new"}});
    for subject in [
        format!("$JS.API.CONSUMER.CREATE.{stream}.{durable}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.{durable}.sluice.v1.match.>"),
        format!("$JS.API.CONSUMER.CREATE.{stream}"),
    ] {
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            evaluator
                .client()
                .request(subject.clone(), hijack.to_string().into()),
        )
        .await;
        if let Ok(Ok(reply)) = reply {
            let text = String::from_utf8_lossy(&reply.payload).to_string();
            assert!(text.contains("\"error\""), "{subject}: {text}");
        }
    }
    let next = format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}");
    let pulled = tokio::time::timeout(
        Duration::from_secs(2),
        evaluator.client().request(next, "1".into()),
    )
    .await;
    assert!(
        !matches!(pulled, Ok(Ok(_))),
        "the evaluator pulled from the reporter's durable"
    );

    // The durable is as the reporter made it, and the evaluator still follows the stream.
    let info = admin
        .jetstream()
        .get_stream(stream)
        .await?
        .consumer_info(durable)
        .await?
        .clone();
    assert_eq!(
        info.config.ack_policy,
        async_nats::jetstream::consumer::AckPolicy::All,
        "the reporter's covering acks (ADR 0035), not the hijacker's none"
    );
    evaluator
        .replay_state(topology::MATCH, topology::MATCH.subjects)
        .await?;
    Ok(())
}
