//! A service's lease on a real nats-server (ADR 0046): one holder at a time among contenders
//! that race for it; a release hands it over at the standby's next look; a holder that dies is
//! followed once its record expires; a holder cut off from the server gives the lease up
//! before its record expires, so no other can hold it while it still acts.

use std::time::{Duration, Instant};

use sluice_bus::lease::{holder_name, Timing};
use sluice_bus::{topology, Bus, Outgoing};
use sluice_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

const SERVICE: &str = "renderer";

/// Short enough for a test, with the same proportions as the defaults.
const TIMING: Timing = Timing {
    duration: Duration::from_secs(2),
    renew_deadline: Duration::from_millis(1_400),
    retry_period: Duration::from_millis(200),
};

async fn holder_of(bus: &Bus) -> anyhow::Result<Option<String>> {
    Ok(bus
        .lease_record(SERVICE)
        .await?
        .filter(|r| !r.lease.released)
        .map(|r| r.lease.holder))
}

/// A bus on `nats` whose process, "first", holds the lease.
async fn held_by_first(
    nats: &NatsServer,
    token: &CancellationToken,
) -> anyhow::Result<(Bus, sluice_bus::lease::Leadership)> {
    let bus = Bus::connect(&nats.url()).await?;
    let leadership = bus
        .acquire_lease(SERVICE, "first", TIMING, token)
        .await
        .expect("the lease is free");
    Ok((bus, leadership))
}

/// Contenders that all read an empty lease at once and write: only one write is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_contenders_racing_for_a_free_lease_exactly_one_takes_it() -> anyhow::Result<()> {
    const ROUNDS: usize = 10;
    const CONTENDERS: usize = 5;
    let nats = NatsServer::start().await?;
    let mut buses = Vec::new();
    for _ in 0..CONTENDERS {
        buses.push(Bus::connect(&nats.url()).await?);
    }
    let token = CancellationToken::new();
    for round in 0..ROUNDS {
        let service = format!("race-{round}");
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(CONTENDERS));
        let (won_tx, mut won) = tokio::sync::mpsc::unbounded_channel();
        for bus in &buses {
            let (bus, token, won_tx, start, service) = (
                bus.clone(),
                token.clone(),
                won_tx.clone(),
                start.clone(),
                service.clone(),
            );
            tokio::spawn(async move {
                start.wait().await;
                let name = holder_name();
                if let Some(held) = bus.acquire_lease(&service, &name, TIMING, &token).await {
                    let _ = won_tx.send((name, held));
                }
            });
        }
        let (winner, _held) = tokio::time::timeout(Duration::from_secs(5), won.recv())
            .await?
            .expect("a contender takes the lease");
        let second = tokio::time::timeout(TIMING.retry_period * 3, won.recv()).await;
        assert!(
            second.is_err(),
            "round {round}: a second contender took the lease beside {winner}"
        );
        let record = buses[0].lease_record(&service).await?.expect("a record");
        assert_eq!(record.lease.holder, winner);
    }
    token.cancel();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_renews_while_others_wait_and_a_release_hands_over_at_the_next_look(
) -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let token = CancellationToken::new();
    let (first_bus, leadership) = held_by_first(&nats, &token).await?;
    let (won_tx, mut won) = tokio::sync::mpsc::unbounded_channel();
    for name in ["second", "third"] {
        let bus = Bus::connect(&nats.url()).await?;
        let (token, won_tx) = (token.clone(), won_tx.clone());
        tokio::spawn(async move {
            if let Some(held) = bus.acquire_lease(SERVICE, name, TIMING, &token).await {
                let _ = won_tx.send((name, held, Instant::now()));
            }
        });
    }
    // Three lease durations with the holder renewing: nobody else takes it.
    let others = tokio::time::timeout(TIMING.duration * 3, won.recv()).await;
    assert!(others.is_err(), "a second holder while the first renews");
    assert_eq!(holder_of(&first_bus).await?.as_deref(), Some("first"));

    let released = Instant::now();
    leadership.release().await;
    let (next, _held, at) = tokio::time::timeout(Duration::from_secs(5), won.recv())
        .await?
        .expect("a standby takes the released lease");
    let handover = at.duration_since(released);
    assert!(
        handover < TIMING.retry_period * 3,
        "a release is taken at the standby's next look, not after the lease expires: {handover:?}"
    );
    assert_eq!(holder_of(&first_bus).await?.as_deref(), Some(next));
    let more = tokio::time::timeout(TIMING.retry_period * 3, won.recv()).await;
    assert!(more.is_err(), "both standbys took the released lease");
    token.cancel();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_dies_is_followed_once_its_record_expires() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let token = CancellationToken::new();
    let (_first, leadership) = held_by_first(&nats, &token).await?;
    let second = Bus::connect(&nats.url()).await?;
    let standby = {
        let (second, token) = (second.clone(), token.clone());
        tokio::spawn(async move {
            let leadership = second
                .acquire_lease(SERVICE, "second", TIMING, &token)
                .await;
            (leadership, Instant::now())
        })
    };
    tokio::time::sleep(TIMING.duration * 2).await;
    assert!(!standby.is_finished(), "the holder renews");
    // Dropped without a release, as when its process dies: it renews no more.
    drop(leadership);
    let died = Instant::now();
    let (taken, at) = tokio::time::timeout(Duration::from_secs(10), standby).await??;
    assert!(taken.is_some());
    let after = at.duration_since(died);
    // The last renewal was at most a retry period before; the record stands a duration after it.
    assert!(
        after >= TIMING.duration - TIMING.retry_period,
        "taken before the dead holder's record expired: {after:?}"
    );
    assert!(
        after < TIMING.duration + Duration::from_secs(3),
        "taken long after the record expired: {after:?}"
    );
    assert_eq!(holder_of(&second).await?.as_deref(), Some("second"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_from_the_server_gives_up_before_anyone_else_can_take_over(
) -> anyhow::Result<()> {
    let mut nats = NatsServer::start().await?;
    let token = CancellationToken::new();
    let (_first, leadership) = held_by_first(&nats, &token).await?;
    let lost = leadership.lost();
    tokio::time::sleep(TIMING.retry_period * 3).await;
    nats.stop();
    let stopped = Instant::now();
    tokio::time::timeout(TIMING.duration, lost)
        .await
        .map_err(|_| anyhow::anyhow!("still holding a lease it cannot renew"))?;
    let lost_at = Instant::now();
    assert!(
        lost_at.duration_since(stopped) <= TIMING.renew_deadline,
        "gave up {:?} after the server went, later than the renew deadline",
        lost_at.duration_since(stopped)
    );
    nats.start_again().await?;
    let second = Bus::connect(&nats.url()).await?;
    let taken = tokio::time::timeout(
        Duration::from_secs(10),
        second.acquire_lease(SERVICE, "second", TIMING, &token),
    )
    .await?;
    assert!(taken.is_some());
    assert!(
        Instant::now() > lost_at,
        "the second took the lease while the first still held it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_stops_waiting_when_its_process_stops() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let token = CancellationToken::new();
    let (bus, _held) = held_by_first(&nats, &token).await?;
    let standby_token = CancellationToken::new();
    let standby = {
        let (bus, token) = (bus.clone(), standby_token.clone());
        tokio::spawn(async move { bus.acquire_lease(SERVICE, "second", TIMING, &token).await })
    };
    tokio::time::sleep(TIMING.retry_period * 2).await;
    standby_token.cancel();
    let waited = tokio::time::timeout(Duration::from_secs(1), standby).await??;
    assert!(waited.is_none());
    Ok(())
}

fn output(subject: &str, id: &str) -> Outgoing {
    Outgoing {
        subject: subject.to_string(),
        msg_id: id.to_string(),
        payload: bytes::Bytes::from(id.to_string()),
        traceparent: None,
        ttl: None,
    }
}

/// A holder whose process stalls past its renew deadline (here the runtime's one thread
/// blocked, as under SIGSTOP) wakes with its tasks in any order. Its first write after the
/// stall runs before its renewal task could notice the loss: the fence refuses it, and nothing
/// reaches the stream. The renewal task then finds the lease lost.
#[tokio::test]
async fn a_holder_woken_past_its_renew_deadline_publishes_nothing() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let token = CancellationToken::new();
    let (bus, leadership) = held_by_first(&nats, &token).await?;
    let lost = leadership.lost();
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let before = topology::match_subject(&cluster, "before-the-stall");
    let after = topology::match_subject(&cluster, "after-the-stall");
    bus.publish_durably(output(&before, "1")).await?;

    std::thread::sleep(TIMING.renew_deadline + Duration::from_millis(200));
    let refused = bus.publish(output(&after, "2")).await;
    assert!(
        matches!(refused, Err(sluice_bus::Error::Fenced { .. })),
        "a publish after the stall went out: {:?}",
        refused.map(|_| ())
    );
    assert!(bus.fence().check().is_err());

    tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .map_err(|_| anyhow::anyhow!("the renewal task did not find the lease lost"))?;
    let reader = Bus::connect(&nats.url()).await?;
    assert!(reader.last_state(topology::MATCH, &before).await?.is_some());
    assert!(reader.last_state(topology::MATCH, &after).await?.is_none());
    Ok(())
}

/// Each stored renewal moves the fence's deadline: a holder that keeps renewing keeps
/// publishing long past its first renew deadline, and its fence closes when it releases.
#[tokio::test]
async fn a_renewing_holder_keeps_publishing_and_a_release_closes_its_fence() -> anyhow::Result<()> {
    let nats = NatsServer::start().await?;
    let token = CancellationToken::new();
    let (bus, leadership) = held_by_first(&nats, &token).await?;
    let fence = bus.fence().clone();
    let cluster = topology::cluster_tokens("sveltos", "default", "a");
    let subject = topology::match_subject(&cluster, "renewing");
    tokio::time::sleep(TIMING.renew_deadline * 2).await;
    bus.publish_durably(output(&subject, "1")).await?;
    assert!(fence.check().is_ok());
    bus.hold_lease(leadership);
    bus.close().await;
    assert!(
        fence.check().is_err(),
        "a released lease's fence still admits writes"
    );
    Ok(())
}
