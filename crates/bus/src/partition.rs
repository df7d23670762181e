//! Partitions of a stage's work by managed cluster (ADR 0051): a stage started as partition
//! `i` of `n` handles the subjects of the clusters whose key hashes to `i`, and only those.
//!
//! Every subject of the streams a partitioned stage reads or writes names its cluster in three
//! fixed tokens ([`cluster_key`]), so which partition owns a message is a function of its
//! subject alone: a process decides without decoding, and every process of a stage decides
//! alike. Each partition has its own durable consumer ([`Partition::consumer`]) and, with
//! `--leader-elect`, its own lease ([`Partition::lease_shard`]).

use sha2::{Digest, Sha256};

use crate::topology::{self, ConsumerSpec};

/// The most partitions a stage may have: the bus permissions name each partition's durable.
pub const MAX_PARTITIONS: u16 = 16;

/// One partition of a stage: `index` of `count`. The whole stage is partition 0 of 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    index: u16,
    count: u16,
}

impl Default for Partition {
    fn default() -> Self {
        Partition::WHOLE
    }
}

/// Why a partition given as `I/N` is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PartitionError {
    #[error("partition {0:?} is not INDEX/COUNT, e.g. 0/2")]
    Syntax(String),
    #[error("partition {index}/{count}: the index must be below the count, and the count between 1 and {MAX_PARTITIONS}")]
    Range { index: u16, count: u16 },
}

impl std::str::FromStr for Partition {
    type Err = PartitionError;

    fn from_str(text: &str) -> Result<Partition, PartitionError> {
        let syntax = || PartitionError::Syntax(text.to_string());
        let (index, count) = text.trim().split_once('/').ok_or_else(syntax)?;
        let index: u16 = index.trim().parse().map_err(|_| syntax())?;
        let count: u16 = count.trim().parse().map_err(|_| syntax())?;
        Partition::new(index, count)
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Partition {
    /// The whole stage, unpartitioned.
    pub const WHOLE: Partition = Partition { index: 0, count: 1 };

    pub fn new(index: u16, count: u16) -> Result<Partition, PartitionError> {
        if count == 0 || count > MAX_PARTITIONS || index >= count {
            return Err(PartitionError::Range { index, count });
        }
        Ok(Partition { index, count })
    }

    pub fn index(&self) -> u16 {
        self.index
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// Whether this partition handles the message or output on `subject` (for a purge, its
    /// filter): the whole stage handles everything; a subject that names no cluster belongs
    /// to partition 0.
    pub fn owns(&self, subject: &str) -> bool {
        if self.is_whole() {
            return true;
        }
        let index = cluster_key(subject).map_or(0, |key| index_of(key, self.count));
        index == self.index
    }

    /// The durable consumer of this partition for `spec`: the spec itself for the whole
    /// stage, else one named `<durable>-p<index>` (each partition acks for itself).
    pub fn consumer(&self, spec: ConsumerSpec) -> ConsumerSpec {
        if self.is_whole() {
            return spec;
        }
        ConsumerSpec {
            durable: durable_name(spec.durable, self.index),
            ..spec
        }
    }

    /// The shard its lease is taken in (`topology::lease_name(service, shard)`): none for the
    /// whole stage, `p<index>` for a partition.
    pub fn lease_shard(&self) -> String {
        if self.is_whole() {
            String::new()
        } else {
            format!("p{}", self.index)
        }
    }
}

/// The partition of `key` among `count`: the first eight bytes of its SHA-256, modulo the
/// count. The same in every process and every release.
pub fn index_of(key: &str, count: u16) -> u16 {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // The remainder is below `count`, a u16.
    (u64::from_be_bytes(first) % u64::from(count.max(1))) as u16
}

/// The cluster a pipeline subject names, as its three tokens `<type>.<namespace>.<name>`:
/// right after the kind of a change, CloudEvent, match or CloudEvent match
/// (`sluice.v1.match.<cluster>...`), after the EventTrigger of a desired state or an apply
/// result (`sluice.v1.desired.<trigger>.<cluster>...`). `None` for other subjects.
pub fn cluster_key(subject: &str) -> Option<&str> {
    let rest = subject.strip_prefix(topology::PREFIX)?.strip_prefix('.')?;
    let (kind, rest) = rest.split_once('.')?;
    let rest = match kind {
        "change" | "cloudevent" | "match" | "cematch" => rest,
        "desired" | "applied" => rest.split_once('.')?.1,
        _ => return None,
    };
    let mut tokens = rest.splitn(4, '.');
    let mut len = 0;
    for _ in 0..3 {
        let token = tokens.next()?;
        if token.is_empty() || token.contains(['*', '>']) {
            return None;
        }
        len += token.len() + 1;
    }
    Some(&rest[..len - 1])
}

/// The durable of partition `index` of `durable`; one string per (durable, index) for the
/// life of the process, as a consumer spec names its durable statically.
fn durable_name(durable: &'static str, index: u16) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<(&'static str, u16), &'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    names
        .entry((durable, index))
        .or_insert_with(|| Box::leak(partition_durable(durable, index).into_boxed_str()))
}

/// `<durable>-p<index>`: the name of a partition's durable consumer.
pub fn partition_durable(durable: &str, index: u16) -> String {
    format!("{durable}-p{index}")
}

/// The durable consumers that may be partitioned: the evaluator's and the renderer's.
pub const PARTITIONED: [ConsumerSpec; 4] = [
    topology::EVALUATOR_CHANGES,
    topology::EVALUATOR_CLOUDEVENTS,
    topology::RENDERER_MATCH,
    topology::RENDERER_CEMATCH,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_index_of_count_within_bounds() {
        assert_eq!("1/4".parse(), Partition::new(1, 4));
        assert_eq!(" 0 / 1 ".parse::<Partition>(), Ok(Partition::WHOLE));
        assert_eq!(
            "4/4".parse::<Partition>(),
            Err(PartitionError::Range { index: 4, count: 4 })
        );
        assert_eq!(
            "0/17".parse::<Partition>(),
            Err(PartitionError::Range {
                index: 0,
                count: 17
            })
        );
        assert_eq!(
            "2".parse::<Partition>(),
            Err(PartitionError::Syntax("2".into()))
        );
        assert_eq!(
            "a/2"
                .parse::<Partition>()
                .expect_err("not a number")
                .to_string(),
            "partition \"a/2\" is not INDEX/COUNT, e.g. 0/2"
        );
        assert_eq!(Partition::new(3, 8).expect("valid").to_string(), "3/8");
    }

    #[test]
    fn every_subject_of_a_cluster_names_the_same_key() {
        let cluster = "sveltos.default.cluster-a";
        let subjects = [
            topology::change_subject(cluster, "", "Service", "default", "web"),
            format!("sluice.v1.cloudevent.{cluster}"),
            topology::match_subject(cluster, "es"),
            topology::match_member_subject(cluster, "es", "", "Service", "default", "web"),
            topology::match_members_filter(cluster, "es"),
            format!("sluice.v1.cematch.{cluster}.es"),
            topology::desired_subject("t", cluster),
            format!("{}.r.default.web", topology::desired_subject("t", cluster)),
            format!("sluice.v1.applied.t.{cluster}"),
        ];
        for subject in &subjects {
            assert_eq!(cluster_key(subject), Some(cluster), "{subject}");
        }
        for other in [
            "sluice.v1.config.eventsource.x.y",
            "sluice.v1.match.sveltos.default",
            "sluice.v1.match.*.*.*.es",
            "sluice.v1.lease.renderer",
            "other.v1.match.a.b.c",
        ] {
            assert_eq!(cluster_key(other), None, "{other}");
        }
    }

    #[test]
    fn each_subject_has_exactly_one_owner_and_clusters_spread() {
        let count = 4;
        let partitions: Vec<Partition> = (0..count)
            .map(|i| Partition::new(i, count).expect("valid"))
            .collect();
        let mut per_partition = [0usize; 4];
        for n in 0..400 {
            let cluster = format!("sveltos.default.cluster-{n}");
            let member = topology::match_member_subject(&cluster, "es", "", "Service", "d", "w");
            let desired = topology::desired_subject("t", &cluster);
            let owners: Vec<u16> = partitions
                .iter()
                .filter(|p| p.owns(&member))
                .map(Partition::index)
                .collect();
            assert_eq!(owners.len(), 1, "{member}: {owners:?}");
            assert!(partitions[owners[0] as usize].owns(&desired));
            per_partition[owners[0] as usize] += 1;
        }
        // 400 keys over 4 partitions: each takes a share near 100.
        assert!(
            per_partition.iter().all(|n| (60..140).contains(n)),
            "{per_partition:?}"
        );
        // What names no cluster is partition 0's; the whole stage owns everything.
        assert!(partitions[0].owns("sluice.v1.config.eventsource.x.y"));
        assert!(!partitions[1].owns("sluice.v1.config.eventsource.x.y"));
        assert!(Partition::WHOLE.owns("anything"));
    }

    #[test]
    fn the_partition_of_a_key_never_changes() {
        // A change of the hash would move every cluster at an upgrade: pinned here.
        assert_eq!(index_of("sveltos.default.cluster-a", 16), 9);
        assert_eq!(index_of("sveltos.default.cluster-b", 16), 6);
        assert_eq!(index_of("sveltos.default.cluster-a", 2), 1);
        assert_eq!(index_of("sveltos.default.cluster-b", 2), 0);
        assert_eq!(index_of("capi.default.cluster-a", 2), 0);
    }

    #[test]
    fn a_partition_has_its_own_durable_and_lease() {
        let p = Partition::new(2, 4).expect("valid");
        assert_eq!(p.consumer(topology::RENDERER_MATCH).durable, "renderer-p2");
        assert_eq!(p.consumer(topology::RENDERER_MATCH).stream, topology::MATCH);
        assert_eq!(p.lease_shard(), "p2");
        assert_eq!(
            Partition::WHOLE.consumer(topology::RENDERER_MATCH),
            topology::RENDERER_MATCH
        );
        assert_eq!(Partition::WHOLE.lease_shard(), "");
    }
}
