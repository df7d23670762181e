//! What the bus benchmarks share: publishing one change per object of the workload with publish
//! acks in flight, and reading processes' CPU time from /proc.

use std::future::IntoFuture as _;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use prost::Message as _;
use sluice_bus::{message_id, topology, Bus, Outgoing};

use super::workload;

/// utime + stime of a process in seconds (clock ticks of 1/100 s on Linux).
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // after the name: state is field 0, utime 11, stime 12
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU time used by some processes since [`Cpu::start`].
pub struct Cpu {
    pids: Vec<(String, String)>,
    start: Vec<f64>,
}

impl Cpu {
    /// Starts counting for each (name, pid).
    pub fn start(processes: &[(&str, u32)]) -> Cpu {
        let pids: Vec<(String, String)> = processes
            .iter()
            .map(|(name, pid)| (name.to_string(), pid.to_string()))
            .collect();
        let start = pids.iter().map(|(_, pid)| cpu_seconds(pid)).collect();
        Cpu { pids, start }
    }

    /// CPU seconds and share of one core of each process over `secs` of wall time.
    pub fn report(&self, secs: f64) -> String {
        self.pids
            .iter()
            .zip(&self.start)
            .map(|((name, pid), start)| {
                let used = cpu_seconds(pid) - start;
                format!("{name} {used:.2} s ({:.0}%)", 100.0 * used / secs)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Publishes one change per object with `version`, keeping up to `inflight` acks outstanding.
pub async fn publish_changes(
    bus: &Bus,
    shape: (usize, usize, usize),
    flip: usize,
    inflight: usize,
    version: usize,
) -> anyhow::Result<usize> {
    let (clusters, kinds, objects) = shape;
    let mut acks = FuturesUnordered::new();
    let mut count = 0;
    for n in 0..objects {
        for k in 0..kinds {
            for c in 0..clusters {
                // One in `flip` changes of every (cluster, kind) flips: spread over all match
                // sets. (Every `flip`-th change in publishing order would flip only cluster 0's
                // sets whenever the clusters are a multiple of `flip`.)
                let flipped = version > 1 && flip > 0 && (n + k + c) % flip == 0;
                let change = workload::change(c, k, n, version, flipped);
                let subject = topology::change_subject(
                    &sluice_wire::cluster_tokens(&workload::cluster_id(c)),
                    "bench.sluice.io",
                    &change.kind,
                    &change.namespace,
                    &change.name,
                );
                let ack = bus
                    .publish(Outgoing {
                        ttl: None,
                        msg_id: message_id(&["bench", &subject, &version.to_string()]),
                        subject,
                        payload: change.encode_to_vec().into(),
                        traceparent: None,
                    })
                    .await?;
                acks.push(ack.into_future());
                count += 1;
                while acks.len() >= inflight {
                    if let Some(result) = acks.next().await {
                        result?;
                    }
                }
            }
        }
    }
    while let Some(result) = acks.next().await {
        result?;
    }
    Ok(count)
}
