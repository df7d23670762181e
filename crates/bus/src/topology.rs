//! The whole message topology of sluice in one place: subjects, streams, consumers, retention and
//! the dedupe window. Read this file to draw the pipeline; nothing else names a subject.
//!
//! ```text
//! management cluster ──watch──► watcher ──ConfigObject──────► sluice.v1.config.>    (CONFIG)
//! managed clusters   ──watch──► watcher ──ResourceChange────► sluice.v1.change.>    (CHANGES)
//! managed NATS       ─subscribe► watcher ──CloudEventReceived► sluice.v1.cloudevent.> (CLOUDEVENTS)
//! CHANGES + CONFIG ──► evaluator ──MatchUnit (members, heads)──► sluice.v1.match.> (MATCH)
//! CLOUDEVENTS + CONFIG ──► evaluator ──CloudEventMatch──► sluice.v1.cematch.>       (CEMATCH)
//! MATCH + APPLIED ──► reporter (EventReport objects)
//! MATCH + CEMATCH + CONFIG ──► renderer ──DesiredState──► sluice.v1.desired.>      (DESIRED)
//! DESIRED ──► applier (ClusterProfiles, ConfigMaps, Secrets) ──ApplyResult──► sluice.v1.applied.> (APPLIED)
//! each service's replicas ──Lease──► sluice.v1.lease.<service>                      (LEASES)
//! ```
//!
//! Every state stream keeps only the last message per subject: a subject is a key (one object,
//! one match set, one desired state), and the stream is the current state a restarted service
//! rebuilds from. Only CloudEvents (and their matches) form plain logs, because each one is an
//! event, not a state; what a CloudEvent created is again state: its own desired-state subject.

use std::time::Duration;

/// Every subject starts with this prefix; the version lets a v2 pipeline run beside v1.
pub const PREFIX: &str = "sluice.v1";

/// Every pipeline subject, for tapping.
pub const ALL: &str = "sluice.v1.>";

/// Bytes of a message's `max_payload` kept for its headers (`Nats-Msg-Id`, `traceparent`,
/// a dead letter's reason): [`crate::Bus::payload_limit`] is what remains for the payload.
pub const HEADER_ROOM: usize = 4096;

/// How long JetStream remembers a `Nats-Msg-Id` to drop a duplicate publish.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(120);

/// Publish acks a stage keeps in flight (see notes/nats-limits.md: a stage that awaits each ack
/// caps near 4k/s; about 256 in flight is the measured sweet spot).
pub const PUBLISH_WINDOW: usize = 256;

/// Unresolved publish acks one [`crate::AckWindow`] may hold. A stage whose input fans out to
/// thousands of outputs (a listed cluster with many EventSources, a configuration change that
/// re-renders a fleet) settles older acks before it publishes more.
pub const ACKS_IN_FLIGHT: usize = 4_096;

/// Replays (`Bus::replay_state`) one connection reads at once. Each is a consumer on its stream
/// while it reads, and nats-server 2.15 allows a stream 1,000 consumers unless it says
/// otherwise: a watcher starting on a fleet of thousands of clusters replays per cluster and
/// kind, and would otherwise be refused (`maximum consumers limit reached`) until consumers
/// expire.
pub const REPLAYS_AT_ONCE: usize = 64;

/// How long a deletion stays on `SLUICE_CONFIG` (its `Nats-TTL`): a deleted object's (a
/// SveltosCluster, an EventTrigger), or a withdrawn ConfigMap's or Secret's. Long enough for
/// every follower to read it, after which the subject is gone: a follower that starts later
/// finds no message, which reads as an object that does not exist.
pub const CONFIG_TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long a deleted object's change stays on `SLUICE_CHANGES`, a removed set's head on
/// `SLUICE_MATCH`, a unit's removal on `SLUICE_DESIRED` and a removed unit's result on
/// `SLUICE_APPLIED` (their `Nats-TTL`, ADR 0041). A replay that finds no message for a subject
/// reads it as gone, which is what the tombstone said; the readers that act on a removal do at
/// start what it would have done: the applier removes a unit whose last result stands when its
/// desired state is gone, the reporter deletes a report it wrote whose set is gone. So once readers have had a day to
/// take a tombstone the subject is dropped: objects that come and go under new names do not
/// grow the streams without end.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 3600);

/// A JetStream stream of the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: &'static str,
    /// Subject filter the stream captures.
    pub subjects: &'static str,
    /// `Some(1)` for state streams (last value per key), `None` for logs.
    pub max_per_subject: Option<i64>,
    /// Age limit for logs; state streams keep their values until overwritten.
    pub max_age: Option<Duration>,
    /// Whether a message may carry its own time to live (`Nats-TTL`), as a tombstone does.
    pub message_ttl: bool,
}

pub const CONFIG: StreamSpec = StreamSpec {
    name: "SLUICE_CONFIG",
    subjects: "sluice.v1.config.>",
    max_per_subject: Some(1),
    max_age: None,
    // A deleted object's deletion expires, and so does a ConfigMap's or Secret's that is no
    // longer referenced (ADR 0023, 0041).
    message_ttl: true,
};
pub const CHANGES: StreamSpec = StreamSpec {
    name: "SLUICE_CHANGES",
    subjects: "sluice.v1.change.>",
    max_per_subject: Some(1),
    max_age: None,
    // A deleted object's change expires ([`TOMBSTONE_TTL`]).
    message_ttl: true,
};
pub const CLOUDEVENTS: StreamSpec = StreamSpec {
    name: "SLUICE_CLOUDEVENTS",
    subjects: "sluice.v1.cloudevent.>",
    max_per_subject: None,
    max_age: Some(Duration::from_secs(24 * 3600)),
    message_ttl: false,
};
pub const CEMATCH: StreamSpec = StreamSpec {
    name: "SLUICE_CEMATCH",
    subjects: "sluice.v1.cematch.>",
    max_per_subject: None,
    max_age: Some(Duration::from_secs(24 * 3600)),
    message_ttl: false,
};
pub const MATCH: StreamSpec = StreamSpec {
    name: "SLUICE_MATCH",
    subjects: "sluice.v1.match.>",
    max_per_subject: Some(1),
    max_age: None,
    // A member's tombstone ([`MEMBER_TOMBSTONE_TTL`]) and a removed set's head
    // ([`TOMBSTONE_TTL`]) expire.
    message_ttl: true,
};
pub const DESIRED: StreamSpec = StreamSpec {
    name: "SLUICE_DESIRED",
    subjects: "sluice.v1.desired.>",
    max_per_subject: Some(1),
    max_age: None,
    // A unit's removal expires ([`TOMBSTONE_TTL`]).
    message_ttl: true,
};
pub const APPLIED: StreamSpec = StreamSpec {
    name: "SLUICE_APPLIED",
    subjects: "sluice.v1.applied.>",
    max_per_subject: Some(1),
    max_age: None,
    // A removed unit's result expires ([`TOMBSTONE_TTL`]).
    message_ttl: true,
};
/// Each service's lease: which of its processes does its work (ADR 0046). The last record per
/// subject, expiring ([`crate::lease`]) unless its holder renews it.
pub const LEASES: StreamSpec = StreamSpec {
    name: "SLUICE_LEASES",
    subjects: "sluice.v1.lease.>",
    max_per_subject: Some(1),
    max_age: None,
    message_ttl: true,
};
/// Messages a stage rejected for good, with the reason in the `Sluice-Error` header.
pub const DEAD: StreamSpec = StreamSpec {
    name: "SLUICE_DEAD",
    subjects: "sluice.v1.dead.>",
    max_per_subject: None,
    max_age: Some(Duration::from_secs(7 * 24 * 3600)),
    message_ttl: false,
};

pub const ALL_STREAMS: [StreamSpec; 9] = [
    CONFIG,
    CHANGES,
    CLOUDEVENTS,
    CEMATCH,
    MATCH,
    DESIRED,
    APPLIED,
    DEAD,
    LEASES,
];

/// A durable consumer: which stage reads which stream, and how it acks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerSpec {
    pub stream: StreamSpec,
    pub durable: &'static str,
    pub acks: Acks,
}

/// How a stage acks what its durable consumer delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// Each message on its own, once its outputs are stored (JetStream `AckPolicy::Explicit`).
    Each,
    /// One ack covers every earlier delivery (`AckPolicy::All`): a batch costs one ack. Only
    /// for a stage that rebuilds its whole state from its own stream when it starts, and that
    /// stops when an output is not stored (ADR 0013): an ack that covers an input still being
    /// worked on then loses nothing.
    Covering,
}

/// The evaluator rebuilds its objects from CHANGES on start (`replay_state`), so its acks cover.
pub const EVALUATOR_CHANGES: ConsumerSpec = ConsumerSpec {
    stream: CHANGES,
    durable: "evaluator",
    acks: Acks::Covering,
};
pub const EVALUATOR_CLOUDEVENTS: ConsumerSpec = ConsumerSpec {
    stream: CLOUDEVENTS,
    durable: "evaluator",
    acks: Acks::Each,
};
/// The reporter rebuilds every set from MATCH on start and writes every report once from them,
/// so its acks cover (ADR 0035).
pub const REPORTER_MATCH: ConsumerSpec = ConsumerSpec {
    stream: MATCH,
    durable: "reporter",
    acks: Acks::Covering,
};
/// The renderer rebuilds every set from MATCH on start and publishes what differs from
/// DESIRED, so its acks cover (ADR 0035).
pub const RENDERER_MATCH: ConsumerSpec = ConsumerSpec {
    stream: MATCH,
    durable: "renderer",
    acks: Acks::Covering,
};
pub const RENDERER_CEMATCH: ConsumerSpec = ConsumerSpec {
    stream: CEMATCH,
    durable: "renderer",
    acks: Acks::Each,
};
pub const APPLIER_DESIRED: ConsumerSpec = ConsumerSpec {
    stream: DESIRED,
    durable: "applier",
    acks: Acks::Each,
};

/// A NATS identity: what one service (or the `sluice` CLI) does on the bus. The server's
/// permissions are generated from these declarations ([`crate::permissions`]), so the topology
/// above and who may use it are written down once. Streams and consumers are named through
/// their specs, so a subject added to a stream's filter needs no edit here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The service's name: its NATS user, its inbox prefix and its dead-letter stage.
    pub name: &'static str,
    /// Streams it publishes to (any subject of the stream's filter).
    pub publishes: &'static [StreamSpec],
    /// Whether it parks unreadable input on `sluice.v1.dead.<name>`.
    pub dead_letters: bool,
    /// Its durable consumers.
    pub consumes: &'static [ConsumerSpec],
    /// Streams it replays or follows with ordered (ephemeral, unacked) consumers.
    pub follows: &'static [StreamSpec],
    /// Streams whose subjects it purges (a deleted cluster, a withdrawn unit).
    pub purges: &'static [StreamSpec],
    /// Core NATS subscriptions outside JetStream (`sluice tap`).
    pub taps: &'static [&'static str],
    /// Whether its processes take its lease (`sluice.v1.lease.<name>`, ADR 0046) and may read
    /// who holds it; it may write no other service's lease.
    pub leads: bool,
}

impl Identity {
    /// Every stream it uses, each once, in [`ALL_STREAMS`] order: the streams it creates or
    /// updates to its configuration when it connects.
    pub fn streams(&self) -> Vec<StreamSpec> {
        ALL_STREAMS
            .into_iter()
            .filter(|spec| {
                self.publishes.contains(spec)
                    || (self.dead_letters && *spec == DEAD)
                    || self.consumes.iter().any(|c| c.stream == *spec)
                    || self.follows.contains(spec)
                    || self.purges.contains(spec)
                    || (self.leads && *spec == LEASES)
            })
            .collect()
    }
}

/// Watches the clusters, publishes configuration, changes and CloudEvents; replays what it
/// published; purges a deleted cluster's changes.
pub const WATCHER: Identity = Identity {
    name: "watcher",
    publishes: &[CONFIG, CHANGES, CLOUDEVENTS],
    dead_letters: true,
    consumes: &[],
    follows: &[CONFIG, CHANGES],
    purges: &[CHANGES],
    taps: &[],
    leads: true,
};
pub const EVALUATOR: Identity = Identity {
    name: "evaluator",
    publishes: &[MATCH, CEMATCH],
    dead_letters: true,
    consumes: &[EVALUATOR_CHANGES, EVALUATOR_CLOUDEVENTS],
    follows: &[CONFIG, CHANGES, MATCH],
    // the members of a removed set (ADR 0018)
    purges: &[MATCH],
    taps: &[],
    leads: true,
};
pub const REPORTER: Identity = Identity {
    name: "reporter",
    publishes: &[],
    dead_letters: true,
    consumes: &[REPORTER_MATCH],
    // MATCH: the sets rebuilt from their members at start and when a head disagrees
    follows: &[MATCH, APPLIED],
    purges: &[],
    taps: &[],
    leads: true,
};
pub const RENDERER: Identity = Identity {
    name: "renderer",
    publishes: &[DESIRED],
    dead_letters: true,
    consumes: &[RENDERER_MATCH, RENDERER_CEMATCH],
    follows: &[CONFIG, MATCH, DESIRED],
    purges: &[],
    taps: &[],
    leads: true,
};
/// Applies desired states and records the results; purges the units it withdrew.
pub const APPLIER: Identity = Identity {
    name: "applier",
    publishes: &[APPLIED],
    dead_letters: true,
    consumes: &[APPLIER_DESIRED],
    follows: &[CONFIG, DESIRED, APPLIED],
    purges: &[DESIRED, APPLIED],
    taps: &[],
    leads: true,
};
/// `sluice tap`: reads every pipeline subject as it is published, writes nothing.
pub const TAP: Identity = Identity {
    name: "tap",
    publishes: &[],
    dead_letters: false,
    consumes: &[],
    follows: &[],
    purges: &[],
    taps: &[ALL],
    leads: false,
};

/// Every identity of the pipeline: the five services and the CLI's tap.
pub const IDENTITIES: [Identity; 6] = [WATCHER, EVALUATOR, REPORTER, RENDERER, APPLIER, TAP];

/// Header carrying W3C trace context, so one event is one trace across the services.
pub const TRACEPARENT: &str = "traceparent";
/// Header on dead letters: why the message was rejected.
pub const ERROR_HEADER: &str = "Sluice-Error";
/// Header on dead letters: the subject the message was read from.
pub const ORIGIN_SUBJECT_HEADER: &str = "Sluice-Subject";

/// The cluster part of a subject: `<type>.<namespace>.<name>`.
pub fn cluster_tokens(cluster_type: &str, namespace: &str, name: &str) -> String {
    format!(
        "{}.{}.{}",
        encode_token(cluster_type),
        encode_token(namespace),
        encode_token(name)
    )
}

pub fn config_subject(kind: &str, namespace: &str, name: &str) -> String {
    format!(
        "{PREFIX}.config.{}.{}.{}",
        encode_token(kind),
        encode_token(namespace),
        encode_token(name)
    )
}

/// Every config object of one kind.
pub fn config_kind_filter(kind: &str) -> String {
    format!("{PREFIX}.config.{}.>", encode_token(kind))
}

/// `group` is empty for the core group; it is encoded as `core`.
pub fn change_subject(
    cluster: &str,
    group: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> String {
    format!(
        "{PREFIX}.change.{cluster}.{}",
        object_tokens(group, kind, namespace, name)
    )
}

/// An object's part of a subject: `<group>.<kind>.<namespace>.<name>`, the core group (empty)
/// as `core`.
fn object_tokens(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!(
        "{}.{}.{}.{}",
        encode_token(group),
        encode_token(kind),
        encode_token(namespace),
        encode_token(name)
    )
}

/// All objects of one kind in one cluster (a watch's published state).
pub fn change_kind_filter(cluster: &str, group: &str, kind: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!(
        "{PREFIX}.change.{cluster}.{}.{}.*.*",
        encode_token(group),
        encode_token(kind)
    )
}

/// All changes of one cluster, for purging or tapping.
pub fn change_cluster_filter(cluster: &str) -> String {
    format!("{PREFIX}.change.{cluster}.>")
}

pub fn cloudevent_subject(cluster: &str) -> String {
    format!("{PREFIX}.cloudevent.{cluster}")
}

pub fn cloudevent_match_subject(cluster: &str, event_source: &str) -> String {
    format!("{PREFIX}.cematch.{cluster}.{}", encode_token(event_source))
}

/// The head of an (EventSource, cluster) match set: its member count, digest, failure and
/// removal, published after the members of each burst (ADR 0018).
pub fn match_subject(cluster: &str, event_source: &str) -> String {
    format!("{PREFIX}.match.{cluster}.{}", encode_token(event_source))
}

/// One member of a match set: one matching object (or its tombstone). `group` is empty for the
/// core group; it is encoded as `core`.
pub fn match_member_subject(
    cluster: &str,
    event_source: &str,
    group: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> String {
    format!(
        "{}.m.{}",
        match_subject(cluster, event_source),
        object_tokens(group, kind, namespace, name)
    )
}

/// Every member of one match set (to purge a removed set, or to re-read it when a reader's
/// view differs from its head).
pub fn match_members_filter(cluster: &str, event_source: &str) -> String {
    format!("{}.m.>", match_subject(cluster, event_source))
}

/// How long a member's tombstone stays in SLUICE_MATCH. A reader that was away longer misses
/// it and finds out from the head's count and digest (it then re-reads the set's members).
pub const MEMBER_TOMBSTONE_TTL: Duration = Duration::from_secs(3600);

pub fn desired_subject(event_trigger: &str, cluster: &str) -> String {
    format!("{PREFIX}.desired.{}.{cluster}", encode_token(event_trigger))
}

/// The unit of what one CloudEvent (by CloudEvent `source` and `subject`) created for a trigger
/// in a cluster: survives re-rendering, removed by `cloudEventAction: Delete` or with the trigger.
pub fn desired_cloudevent_subject(
    event_trigger: &str,
    cluster: &str,
    ce_source: &str,
    ce_subject: &str,
) -> String {
    format!(
        "{}.ce.{}.{}",
        desired_subject(event_trigger, cluster),
        encode_token(ce_source),
        encode_token(ce_subject)
    )
}

/// The unit of what one matching resource renders to under a `oneForEvent` trigger
/// (ADR 0018): an event changes this unit only, whatever else matches.
pub fn desired_resource_subject(
    event_trigger: &str,
    cluster: &str,
    namespace: &str,
    name: &str,
) -> String {
    format!(
        "{}.r.{}.{}",
        desired_subject(event_trigger, cluster),
        encode_token(namespace),
        encode_token(name)
    )
}

/// Whether `subject` belongs to a stream that keeps the last message per subject (a state
/// stream, `max_per_subject: Some(1)`), where a newer message replaces an older one.
pub fn is_last_value_subject(subject: &str) -> bool {
    ALL_STREAMS.iter().any(|spec| {
        spec.max_per_subject == Some(1)
            && spec
                .subjects
                .strip_suffix('>')
                .is_some_and(|prefix| subject.starts_with(prefix))
    })
}

/// Whether `subject` is the subject of one desired-state unit, as the three functions above
/// make it: a trigger's main unit, a CloudEvent's or a resource's; each token as
/// [`encode_token`] writes them (so no wildcard).
pub fn is_desired_unit_subject(subject: &str) -> bool {
    let Some(rest) = subject.strip_prefix(&format!("{PREFIX}.desired.")) else {
        return false;
    };
    let tokens: Vec<&str> = rest.split('.').collect();
    let encoded = |token: &&str| {
        !token.is_empty()
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    tokens.iter().all(encoded)
        && match tokens.len() {
            4 => true,
            7 => matches!(tokens[4], "ce" | "r"),
            _ => false,
        }
}

/// Every unit of a trigger in a cluster besides its main unit (CloudEvent and resource units).
pub fn desired_units_filter(event_trigger: &str, cluster: &str) -> String {
    format!("{}.>", desired_subject(event_trigger, cluster))
}

pub fn applied_subject(event_trigger: &str, cluster: &str) -> String {
    format!("{PREFIX}.applied.{}.{cluster}", encode_token(event_trigger))
}

/// The results of every unit of a trigger in a cluster besides its main unit.
pub fn applied_units_filter(event_trigger: &str, cluster: &str) -> String {
    format!("{}.>", applied_subject(event_trigger, cluster))
}

/// The ApplyResult subject for a desired-state subject (main or CloudEvent unit): the same
/// tokens under `applied`.
pub fn applied_subject_for(desired_subject: &str) -> Option<String> {
    let rest = desired_subject.strip_prefix(&format!("{PREFIX}.desired."))?;
    Some(format!("{PREFIX}.applied.{rest}"))
}

/// The desired-state subject an ApplyResult subject is the result of: the same tokens under
/// `desired`.
pub fn desired_subject_for(applied_subject: &str) -> Option<String> {
    let rest = applied_subject.strip_prefix(&format!("{PREFIX}.applied."))?;
    Some(format!("{PREFIX}.desired.{rest}"))
}

/// The subject of a lease (ADR 0046): `sluice.v1.lease.<service>` for a service's, and
/// `sluice.v1.lease.<service>.<shard>` for the lease of its processes in one shard (a
/// [`lease_name`] `<service>/<shard>`, ADR 0050).
pub fn lease_subject(lease: &str) -> String {
    match lease.split_once('/') {
        Some((service, shard)) => format!(
            "{PREFIX}.lease.{}.{}",
            encode_token(service),
            encode_token(shard)
        ),
        None => format!("{PREFIX}.lease.{}", encode_token(lease)),
    }
}

/// The name of the lease that `service`'s processes of `shard` share: the service's own for the
/// default shard (`""`), `<service>/<shard>` for another.
pub fn lease_name(service: &str, shard: &str) -> String {
    if shard.is_empty() {
        service.to_string()
    } else {
        format!("{service}/{shard}")
    }
}

pub fn dead_subject(stage: &str) -> String {
    format!("{PREFIX}.dead.{}", encode_token(stage))
}

/// Encodes a Kubernetes name (or any string) into one subject token, injectively:
/// ASCII letters, digits and `-` stay; every other byte becomes `_XX` (hex). An empty string
/// becomes `_` so that it still fills its token.
pub fn encode_token(raw: &str) -> String {
    if raw.is_empty() {
        return "_".to_string();
    }
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("_{byte:02X}"));
        }
    }
    out
}

/// Inverse of [`encode_token`]; `None` when the token was not produced by it.
pub fn decode_token(token: &str) -> Option<String> {
    if token == "_" {
        return Some(String::new());
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'_' {
            let hex = token.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_units_desired_subject_is_a_desired_unit_subject() {
        let cluster = cluster_tokens("sveltos", "default", "cluster.a");
        let main = desired_subject("trigger.x", &cluster);
        for subject in [
            main.clone(),
            desired_cloudevent_subject("trigger.x", &cluster, "auth/svc", "user*"),
            desired_resource_subject("trigger.x", &cluster, "", "web>"),
        ] {
            assert!(is_desired_unit_subject(&subject), "{subject}");
        }
        let resource = desired_resource_subject("trigger.x", &cluster, "", "web>");
        let applied = applied_subject_for(&resource).unwrap_or_default();
        assert_eq!(desired_subject_for(&applied), Some(resource));
        assert_eq!(desired_subject_for(&main), None);
        for subject in [
            desired_units_filter("trigger.x", &cluster),
            format!("{main}.*.a.b"),
            format!("{main}.x.a.b"),
            format!("{main}.r.a"),
            format!("{main}.r..b"),
            applied_subject("trigger.x", &cluster),
            "sluice.v1.desired.a.b".to_string(),
            String::new(),
        ] {
            assert!(!is_desired_unit_subject(&subject), "{subject}");
        }
    }

    #[test]
    fn tokens_round_trip_and_never_contain_separators() {
        for raw in [
            "",
            "a",
            "my-service",
            "sveltos.io",
            "_x_",
            "a.b.c",
            "ns/name",
            "*",
            ">",
            "é",
        ] {
            let token = encode_token(raw);
            assert!(!token.contains('.') && !token.contains('*') && !token.contains('>'));
            assert!(!token.is_empty());
            assert_eq!(decode_token(&token).as_deref(), Some(raw), "{raw}");
        }
    }

    #[test]
    fn encoding_is_injective_on_lookalikes() {
        assert_ne!(encode_token("a.b"), encode_token("a_b"));
        assert_ne!(encode_token("a_2Eb"), encode_token("a.b"));
    }

    #[test]
    fn applied_subject_mirrors_the_desired_subject() {
        let c = cluster_tokens("sveltos", "default", "cluster-a");
        assert_eq!(
            applied_subject_for(&desired_subject("t", &c)),
            Some(applied_subject("t", &c))
        );
        let unit = desired_cloudevent_subject("t", &c, "auth.example.com", "mgianluc");
        let applied = applied_subject_for(&unit).expect("a desired subject");
        assert!(applied.starts_with(&applied_subject("t", &c)), "{applied}");
        assert!(
            applied.ends_with(".ce.auth_2Eexample_2Ecom.mgianluc"),
            "{applied}"
        );
        assert_eq!(applied_subject_for("sluice.v1.match.x"), None);
        let unit = desired_resource_subject("t", &c, "", "team-a");
        assert_eq!(
            applied_subject_for(&unit),
            Some(format!("{}.r._.team-a", applied_subject("t", &c)))
        );
    }

    #[test]
    fn the_units_filter_covers_every_unit_of_its_pair_only() {
        let c = cluster_tokens("sveltos", "default", "cluster-a");
        let filter = desired_units_filter("t", &c);
        let covered = |subject: &str| {
            let prefix = filter.trim_end_matches('>');
            subject.starts_with(prefix)
        };
        assert!(covered(&desired_cloudevent_subject("t", &c, "s", "x")));
        assert!(covered(&desired_resource_subject(
            "t", &c, "default", "web"
        )));
        assert!(!covered(&desired_subject("t", &c)), "the main unit stays");
        assert!(!covered(&desired_resource_subject(
            "t2", &c, "default", "web"
        )));
    }

    #[test]
    fn every_stream_has_one_writer_and_every_consumer_one_owner() {
        for stream in ALL_STREAMS {
            let writers: Vec<&str> = IDENTITIES
                .iter()
                .filter(|i| i.publishes.contains(&stream))
                .map(|i| i.name)
                .collect();
            if stream == DEAD {
                assert!(
                    writers.is_empty(),
                    "each stage writes only its own dead letters"
                );
            } else if stream == LEASES {
                assert!(writers.is_empty(), "each service writes only its own lease");
            } else {
                assert_eq!(writers.len(), 1, "{}: {writers:?}", stream.name);
            }
        }
        let consumers = [
            EVALUATOR_CHANGES,
            EVALUATOR_CLOUDEVENTS,
            REPORTER_MATCH,
            RENDERER_MATCH,
            RENDERER_CEMATCH,
            APPLIER_DESIRED,
        ];
        for consumer in consumers {
            let owners: Vec<&str> = IDENTITIES
                .iter()
                .filter(|i| i.consumes.contains(&consumer))
                .map(|i| i.name)
                .collect();
            assert_eq!(owners.len(), 1, "{consumer:?}: {owners:?}");
            assert_eq!(
                owners[0], consumer.durable,
                "a durable is named after its stage"
            );
        }
        assert_eq!(
            APPLIER.streams(),
            [CONFIG, DESIRED, APPLIED, DEAD, LEASES],
            "each stream once, in topology order"
        );
        assert!(TAP.streams().is_empty());
    }

    #[test]
    fn the_members_filter_covers_its_sets_members_only() {
        let c = cluster_tokens("sveltos", "default", "cluster-a");
        let filter = match_members_filter(&c, "es");
        let covered = |subject: &str| subject.starts_with(filter.trim_end_matches('>'));
        let member = match_member_subject(&c, "es", "", "Service", "default", "web.x");
        assert!(
            member.ends_with(".m.core.Service.default.web_2Ex"),
            "{member}"
        );
        assert!(covered(&member));
        assert!(covered(&match_member_subject(
            &c,
            "es",
            "apps",
            "Deployment",
            "",
            "d"
        )));
        assert!(!covered(&match_subject(&c, "es")), "the head stays");
        assert!(!covered(&match_member_subject(
            &c, "es2", "", "Service", "default", "web"
        )));
    }

    #[test]
    fn every_subject_falls_in_its_stream() {
        let c = cluster_tokens("sveltos", "default", "cluster-a");
        let cases = [
            (config_subject("EventSource", "", "es"), CONFIG),
            (
                change_subject(&c, "", "Service", "default", "my-service"),
                CHANGES,
            ),
            (cloudevent_subject(&c), CLOUDEVENTS),
            (match_subject(&c, "sveltos-service"), MATCH),
            (cloudevent_match_subject(&c, "user-operation"), CEMATCH),
            (
                desired_cloudevent_subject("trigger", &c, "auth.example.com", "mgianluc"),
                DESIRED,
            ),
            (
                match_member_subject(&c, "sveltos-service", "", "Service", "default", "web"),
                MATCH,
            ),
            (desired_subject("trigger", &c), DESIRED),
            (
                desired_resource_subject("trigger", &c, "default", "web"),
                DESIRED,
            ),
            (applied_subject("trigger", &c), APPLIED),
            (dead_subject("renderer"), DEAD),
        ];
        for (subject, stream) in cases {
            let prefix = stream.subjects.trim_end_matches('>');
            assert!(
                subject.starts_with(prefix),
                "{subject} not in {}",
                stream.name
            );
        }
    }
}
