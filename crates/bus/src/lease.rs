//! A service's lease (ADR 0046): of the processes of one service, the one holding the service's
//! lease does its work, and the others stand by until the lease is free. The lease is the last
//! record on `sluice.v1.lease.<service>` ([`topology::LEASES`]):
//!
//! - A record is written only with the sequence its writer read as the subject's last
//!   (`Nats-Expected-Last-Subject-Sequence`; 0 when there is none), so of two contenders that
//!   read the same record only one writes the next.
//! - A record expires ([`Timing::duration`], its `Nats-TTL`) unless its holder renews it, which
//!   it does every [`Timing::retry_period`]; a standby reads the record as often and takes the
//!   lease once the record is gone or released.
//! - A holder that has not renewed for [`Timing::renew_deadline`] (shorter than the duration,
//!   measured from before it sent its last successful renewal) counts the lease as lost: its
//!   process must stop acting before any other can take it over.
//!
//! - Every write of the holder's process asks its fence ([`Bus::fence`]), whose deadline is the
//!   same renew deadline: a holder paused past it and woken writes nothing, whichever of its
//!   tasks runs first.
//!
//! The decisions are the pure [`claim`] and [`holds`]; [`Bus::acquire_lease`] and the renewal
//! task are their IO.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use prost::Message as _;
use sluice_proto::v1 as pb;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::topology::{self, LEASES};
use crate::Bus;

/// How long a lease lasts and how often it is renewed (the `--leader-elect-*` flags).
pub use sluice_runtime::LeaseTiming as Timing;

/// The last record of a lease as read: its stream sequence and content.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub sequence: u64,
    pub lease: pb::Lease,
}

/// What a contender does about the last record of a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Write a record of its own, expecting `expect` as the subject's last sequence (0: none);
    /// `acquired` is when it took the lease, if the record was already its own (Unix ms).
    Take { expect: u64, acquired: Option<i64> },
    /// Another process holds it.
    Wait { holder: String },
}

/// What `me` does about `last`: take a lease that has no record or a released one, or one
/// whose record is its own (a write whose ack was lost); wait for any other holder.
pub fn claim(me: &str, last: Option<&Record>) -> Claim {
    match last {
        None => Claim::Take {
            expect: 0,
            acquired: None,
        },
        Some(record) if record.lease.released => Claim::Take {
            expect: record.sequence,
            acquired: None,
        },
        Some(record) if record.lease.holder == me => Claim::Take {
            expect: record.sequence,
            acquired: Some(record.lease.acquire_time_unix_ms),
        },
        Some(record) => Claim::Wait {
            holder: record.lease.holder.clone(),
        },
    }
}

/// Whether a holder whose last successful renewal was sent at `renewed` still holds the lease
/// at `now`.
pub fn holds(renewed: Instant, now: Instant, timing: &Timing) -> bool {
    now.saturating_duration_since(renewed) < timing.renew_deadline
}

/// A process's name as a contender: `<hostname>_<random>`, as Kubernetes controllers name
/// theirs, new at every start.
pub fn holder_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| {
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned()
        });
    format!("{host}_{}", uuid::Uuid::new_v4().simple())
}

/// Why a record was not written.
enum WriteError {
    /// The subject's last sequence was not the one expected: someone wrote in between.
    Conflict,
    Other(String),
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Bus {
    /// The last record of `service`'s lease; `None` when it has none (never taken, or expired).
    pub async fn lease_record(&self, service: &str) -> crate::Result<Option<Record>> {
        let subject = topology::lease_subject(service);
        let Some(last) = self.last_state(LEASES, &subject).await? else {
            return Ok(None);
        };
        // An unreadable record holds nobody: it is overwritten as if there were none.
        let lease = pb::Lease::decode(last.payload).unwrap_or_default();
        Ok(Some(Record {
            sequence: last.sequence,
            lease,
        }))
    }

    async fn write_lease(
        &self,
        service: &str,
        lease: &pb::Lease,
        expect: u64,
    ) -> Result<u64, WriteError> {
        let subject = topology::lease_subject(service);
        let ttl = Duration::from_millis(lease.lease_duration_ms);
        let publish = PublishMessage::build()
            .payload(lease.encode_to_vec().into())
            .expected_last_subject_sequence(expect)
            .ttl(ttl);
        let sent = self
            .js
            .send_publish(subject, publish)
            .await
            .map_err(|error| WriteError::Other(error.to_string()))?;
        match sent.await {
            Ok(ack) => Ok(ack.sequence),
            Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {
                Err(WriteError::Conflict)
            }
            Err(error) => Err(WriteError::Other(error.to_string())),
        }
    }

    /// Waits until this process, as `holder`, holds `service`'s lease, and renews it from then
    /// on ([`Leadership`]); `None` if `token` is cancelled first. Failures to reach the server
    /// are logged and retried every [`Timing::retry_period`].
    pub async fn acquire_lease(
        &self,
        service: &str,
        holder: &str,
        timing: Timing,
        token: &CancellationToken,
    ) -> Option<Leadership> {
        let mut waiting_for: Option<String> = None;
        let pause = |token: &CancellationToken| {
            let token = token.clone();
            async move {
                tokio::select! {
                    () = tokio::time::sleep(timing.retry_period) => false,
                    () = token.cancelled() => true,
                }
            }
        };
        loop {
            if token.is_cancelled() {
                return None;
            }
            let last = match self.lease_record(service).await {
                Ok(last) => last,
                Err(error) => {
                    tracing::warn!(service, error = %error, "failed to read the lease");
                    if pause(token).await {
                        return None;
                    }
                    continue;
                }
            };
            match claim(holder, last.as_ref()) {
                Claim::Take { expect, acquired } => {
                    let now = unix_ms();
                    let lease = pb::Lease {
                        holder: holder.to_string(),
                        lease_duration_ms: u64::try_from(timing.duration.as_millis())
                            .unwrap_or(u64::MAX),
                        acquire_time_unix_ms: acquired.unwrap_or(now),
                        renew_time_unix_ms: now,
                        released: false,
                    };
                    let sent = Instant::now();
                    match self.write_lease(service, &lease, expect).await {
                        Ok(sequence) => {
                            tracing::info!(
                                service,
                                holder,
                                "took the lease: this process does the service's work"
                            );
                            return Some(Leadership::start(
                                self.clone(),
                                service,
                                lease,
                                sequence,
                                sent,
                                timing,
                            ));
                        }
                        // Another contender wrote first: read again.
                        Err(WriteError::Conflict) => continue,
                        Err(WriteError::Other(error)) => {
                            tracing::warn!(service, error = %error, "failed to write the lease");
                            if pause(token).await {
                                return None;
                            }
                        }
                    }
                }
                Claim::Wait { holder: other } => {
                    if waiting_for.as_deref() != Some(other.as_str()) {
                        tracing::info!(service, holder = %other, "standing by: another process holds the lease");
                        waiting_for = Some(other);
                    }
                    if pause(token).await {
                        return None;
                    }
                }
            }
        }
    }
}

/// What the renewal task hands back when it stops: the record it last wrote and its sequence,
/// for the release; `None` once the lease is lost.
type Held = Option<(pb::Lease, u64)>;

/// This process holds its service's lease: a task renews it until [`Leadership::release`], or
/// until it is lost ([`Leadership::lost`]). Dropped without a release, the task stops and the
/// record expires, as when the process dies.
pub struct Leadership {
    service: String,
    bus: Bus,
    stop: CancellationToken,
    task: Option<JoinHandle<Held>>,
    lost: watch::Receiver<bool>,
}

impl Leadership {
    fn start(
        bus: Bus,
        service: &str,
        lease: pb::Lease,
        sequence: u64,
        sent: Instant,
        timing: Timing,
    ) -> Leadership {
        let stop = CancellationToken::new();
        let (lost_tx, lost) = watch::channel(false);
        bus.fence().hold_until(sent + timing.renew_deadline);
        let task = tokio::spawn(renew(
            bus.clone(),
            service.to_string(),
            lease,
            sequence,
            sent,
            timing,
            stop.clone(),
            lost_tx,
        ));
        Leadership {
            service: service.to_string(),
            bus,
            stop,
            task: Some(task),
            lost,
        }
    }

    /// Resolves once the lease is lost: the process must stop acting at once, since another
    /// may take it over.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut lost = self.lost.clone();
        async move {
            // An error means the task ended without a loss (released): never resolves then.
            if lost.wait_for(|lost| *lost).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops renewing and marks the record released, so that a standby takes over at its next
    /// look instead of after the lease's duration.
    pub async fn release(mut self) {
        self.stop.cancel();
        // Nothing this process writes after this may count as the holder's.
        self.bus.fence().close();
        let Some(task) = self.task.take() else {
            return;
        };
        let Ok(Some((mut lease, sequence))) = task.await else {
            return;
        };
        lease.released = true;
        lease.renew_time_unix_ms = unix_ms();
        match self.bus.write_lease(&self.service, &lease, sequence).await {
            Ok(_) => tracing::info!(service = %self.service, "released the lease"),
            Err(WriteError::Conflict) => {}
            Err(WriteError::Other(error)) => {
                tracing::warn!(service = %self.service, error = %error, "failed to release the lease; it expires");
            }
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Renews every retry period until `stop` (handing back the last record) or until the lease is
/// lost: the renew deadline passed without a renewal, or another record stands.
#[allow(clippy::too_many_arguments)]
async fn renew(
    bus: Bus,
    service: String,
    mut lease: pb::Lease,
    mut sequence: u64,
    mut renewed: Instant,
    timing: Timing,
    stop: CancellationToken,
    lost: watch::Sender<bool>,
) -> Held {
    let give_up = |why: String| {
        tracing::error!(service = %service, reason = %why, "lost the lease");
        bus.fence().close();
        let _ = lost.send(true);
        None
    };
    loop {
        // The next renewal, or the deadline if that comes first: a holder gives up on time.
        let next = (Instant::now() + timing.retry_period).min(renewed + timing.renew_deadline);
        tokio::select! {
            () = stop.cancelled() => return Some((lease, sequence)),
            () = tokio::time::sleep_until(next.into()) => {}
        }
        let sent = Instant::now();
        if !holds(renewed, sent, &timing) {
            return give_up(format!("not renewed for {:?}", timing.renew_deadline));
        }
        let left = timing
            .renew_deadline
            .saturating_sub(sent.duration_since(renewed));
        let mut next = lease.clone();
        next.renew_time_unix_ms = unix_ms();
        match tokio::time::timeout(left, bus.write_lease(&service, &next, sequence)).await {
            Ok(Ok(written)) => {
                lease = next;
                sequence = written;
                renewed = sent;
                bus.fence().hold_until(renewed + timing.renew_deadline);
            }
            Ok(Err(WriteError::Conflict)) => match bus.lease_record(&service).await {
                // A renewal stored whose ack was lost: carry on from it.
                Ok(Some(record))
                    if record.lease.holder == lease.holder && !record.lease.released =>
                {
                    sequence = record.sequence;
                }
                Ok(Some(record)) => {
                    return give_up(format!("{} holds it", record.lease.holder));
                }
                Ok(None) => return give_up("its record expired".to_string()),
                Err(error) => {
                    tracing::warn!(service = %service, error = %error, "failed to read the lease")
                }
            },
            Ok(Err(WriteError::Other(error))) => {
                tracing::warn!(service = %service, error = %error, "failed to renew the lease");
            }
            Err(_) => return give_up(format!("not renewed for {:?}", timing.renew_deadline)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sequence: u64, holder: &str, released: bool) -> Record {
        Record {
            sequence,
            lease: pb::Lease {
                holder: holder.into(),
                lease_duration_ms: 15_000,
                acquire_time_unix_ms: 7,
                renew_time_unix_ms: 9,
                released,
            },
        }
    }

    #[test]
    fn a_lease_without_a_record_or_released_is_taken_and_anothers_is_waited_for() {
        assert_eq!(
            claim("me", None),
            Claim::Take {
                expect: 0,
                acquired: None
            }
        );
        assert_eq!(
            claim("me", Some(&record(4, "other", true))),
            Claim::Take {
                expect: 4,
                acquired: None
            }
        );
        assert_eq!(
            claim("me", Some(&record(4, "other", false))),
            Claim::Wait {
                holder: "other".into()
            }
        );
        // Its own record (a write whose ack was lost) keeps its acquire time.
        assert_eq!(
            claim("me", Some(&record(5, "me", false))),
            Claim::Take {
                expect: 5,
                acquired: Some(7)
            }
        );
    }

    #[test]
    fn a_holder_holds_until_the_renew_deadline_after_its_last_renewal() {
        let timing = Timing::DEFAULT;
        let renewed = Instant::now();
        assert!(holds(
            renewed,
            renewed + Duration::from_millis(9_999),
            &timing
        ));
        assert!(!holds(renewed, renewed + Duration::from_secs(10), &timing));
    }

    #[test]
    fn holder_names_differ_at_every_start() {
        assert_ne!(holder_name(), holder_name());
        assert!(holder_name().contains('_'));
    }
}
