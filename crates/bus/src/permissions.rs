//! The NATS server's authorization, generated from the identities of [`crate::topology`]: each
//! identity may publish to the streams it writes, use the JetStream API for exactly the streams
//! and consumers it declares, and receive replies on its own inbox prefix; nothing else. This
//! module renders the subjects and the `authorization { users = [...] }` block of a nats-server
//! configuration; it does not talk to NATS.

use std::fmt::Write as _;

use crate::partition;
use crate::topology::{self, Acks, ConsumerSpec, Identity};

/// JetStream's API prefix.
const JS_API: &str = "$JS.API";

/// What one identity may publish and subscribe to, as nats-server subject patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
    /// Exceptions to `publish` (nats-server applies a deny before an allow).
    pub deny_publish: Vec<String>,
    pub subscribe: Vec<String>,
}

/// Who a server user is: a pipeline identity with its permissions, or an administrator (the
/// operator's tools, tests) with no restriction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Service(Identity),
    Admin,
}

/// One user of the generated authorization: a role and its public nkey (`U...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub role: Role,
    pub nkey: String,
}

/// The prefix of the reply subjects an identity's client uses (`_INBOX_<name>`): each identity
/// receives only its own replies, so no service can read what another pulls from a stream.
pub fn inbox_prefix(name: &str) -> String {
    format!("_INBOX_{}", topology::encode_token(name))
}

/// The subjects `identity` needs and nothing more:
/// - publish: its streams' subjects and its own dead-letter subject;
/// - `$JS.API.INFO`, and `STREAM.INFO`/`CREATE`/`UPDATE` of each stream it uses (every service
///   creates the streams it touches, so the start order does not matter; ADR 0022);
///   `STREAM.PURGE` of the streams it purges; no identity may delete a stream;
/// - its durables: create (with or without a filter token), info, next, reset and the acks
///   (`$JS.ACK.<stream>.<durable>.>`), and delete only where the stage recreates its consumer
///   ([`Acks::Covering`]);
/// - its lease, if it [`Identity::leads`]: publishing to its own lease subject and reading the
///   last record of a lease subject;
/// - the streams it follows: ordered consumers, whose names the server or the client picks at
///   random, so a follower may manage any consumer of those streams by name (`<stream>.*`)
///   except the durables other identities declare on them, which are denied to it by name
///   ([`others_durables`]; ADR 0022); and reading one subject's last message
///   (`STREAM.MSG.GET`), which shows it nothing it could not follow;
/// - subscribe: its inbox prefix and its taps.
pub fn permissions(identity: &Identity) -> Permissions {
    let mut publish: Vec<String> = identity
        .publishes
        .iter()
        .map(|stream| stream.subjects.to_string())
        .collect();
    if identity.dead_letters {
        publish.push(topology::dead_subject(identity.name));
    }
    let streams = identity.streams();
    if !streams.is_empty() {
        publish.push(format!("{JS_API}.INFO"));
    }
    for stream in &streams {
        for action in ["INFO", "CREATE", "UPDATE"] {
            publish.push(format!("{JS_API}.STREAM.{action}.{}", stream.name));
        }
    }
    for stream in identity.purges {
        publish.push(format!("{JS_API}.STREAM.PURGE.{}", stream.name));
    }
    for (consumer, durable) in identity.consumes.iter().flat_map(durables) {
        let target = format!("{}.{durable}", consumer.stream.name);
        publish.push(format!("{JS_API}.CONSUMER.CREATE.{target}"));
        publish.push(format!("{JS_API}.CONSUMER.CREATE.{target}.>"));
        publish.push(format!("{JS_API}.CONSUMER.INFO.{target}"));
        publish.push(format!("{JS_API}.CONSUMER.MSG.NEXT.{target}"));
        // Deliveries an earlier process never settled come back at once (`Bus::durable`).
        publish.push(format!("{JS_API}.CONSUMER.RESET.{target}"));
        if consumer.acks == Acks::Covering {
            publish.push(format!("{JS_API}.CONSUMER.DELETE.{target}"));
        }
        publish.push(format!("$JS.ACK.{target}.>"));
    }
    for stream in identity.follows {
        let name = stream.name;
        publish.push(format!("{JS_API}.CONSUMER.CREATE.{name}"));
        // An ordered consumer recreates itself under a name of its own after a gap or a
        // reconnect: `CONSUMER.CREATE.<stream>.<name>.<filter>`.
        publish.push(format!("{JS_API}.CONSUMER.CREATE.{name}.*.>"));
        for action in ["INFO", "MSG.NEXT", "DELETE"] {
            publish.push(format!("{JS_API}.CONSUMER.{action}.{name}.*"));
        }
        // One subject's last message (`Bus::last_state`).
        publish.push(format!("{JS_API}.STREAM.MSG.GET.{name}"));
    }
    if identity.leads {
        // Its own leases only, the service's and its shards' (ADR 0050): no service can take
        // another's (ADR 0046).
        publish.push(topology::lease_subject(identity.name));
        publish.push(format!("{}.*", topology::lease_subject(identity.name)));
        publish.push(format!("{JS_API}.STREAM.MSG.GET.{}", topology::LEASES.name));
    }
    let mut deny_publish = others_durables(identity);
    let mut subscribe = vec![format!("{}.>", inbox_prefix(identity.name))];
    subscribe.extend(identity.taps.iter().map(|tap| tap.to_string()));
    dedup_in_order(&mut publish);
    dedup_in_order(&mut deny_publish);
    Permissions {
        publish,
        deny_publish,
        subscribe,
    }
}

/// The JetStream API subjects of the durables other identities declare on the streams
/// `identity` follows: creating (also re-configuring), reading from, acking for and deleting
/// them. Its ordered consumers' permissions (`<stream>.*`) would cover them otherwise.
fn others_durables(identity: &Identity) -> Vec<String> {
    let mut deny = Vec::new();
    let durables = topology::IDENTITIES.iter().flat_map(|other| other.consumes);
    for (consumer, durable) in durables.flat_map(self::durables) {
        let followed = identity.follows.contains(&consumer.stream);
        if !followed || identity.consumes.contains(consumer) {
            continue;
        }
        let target = format!("{}.{durable}", consumer.stream.name);
        for action in ["CREATE", "INFO", "MSG.NEXT", "DELETE", "RESET"] {
            deny.push(format!("{JS_API}.CONSUMER.{action}.{target}"));
        }
        deny.push(format!("{JS_API}.CONSUMER.CREATE.{target}.>"));
    }
    deny
}

/// The durables of `consumer`: its own, and for a stage that may be partitioned (ADR 0051) each
/// partition's.
fn durables(consumer: &ConsumerSpec) -> Vec<(&ConsumerSpec, String)> {
    let mut names = vec![(consumer, consumer.durable.to_string())];
    if partition::PARTITIONED.contains(consumer) {
        names.extend((0..partition::MAX_PARTITIONS).map(|index| {
            (
                consumer,
                partition::partition_durable(consumer.durable, index),
            )
        }));
    }
    names
}

/// The `authorization { users = [...] }` block of a nats-server configuration for `users`, one
/// entry per nkey; a configuration that includes it admits no other client.
pub fn authorization(users: &[User]) -> String {
    let mut out = String::from("authorization {\n  users = [\n");
    for user in users {
        // writing to a String cannot fail
        match user.role {
            Role::Admin => {
                let _ = writeln!(out, "    # admin: every subject");
                let _ = writeln!(out, "    {{ nkey: {} }}", quote(&user.nkey));
            }
            Role::Service(identity) => {
                let allowed = permissions(&identity);
                let _ = writeln!(out, "    # {}", identity.name);
                let _ = writeln!(out, "    {{");
                let _ = writeln!(out, "      nkey: {}", quote(&user.nkey));
                let _ = writeln!(out, "      permissions: {{");
                let _ = writeln!(
                    out,
                    "        publish: {}",
                    rule(&allowed.publish, &allowed.deny_publish)
                );
                let _ = writeln!(out, "        subscribe: {}", rule(&allowed.subscribe, &[]));
                let _ = writeln!(out, "      }}");
                let _ = writeln!(out, "    }}");
            }
        }
    }
    out.push_str("  ]\n}\n");
    out
}

/// An allow list and its exceptions, one subject per line; an empty allow list denies
/// everything (nats-server reads an empty allow list as no restriction).
fn rule(allow: &[String], deny: &[String]) -> String {
    if allow.is_empty() {
        return format!("{{ deny: [{}] }}", quote(">"));
    }
    let list = |subjects: &[String]| {
        let quoted: Vec<String> = subjects
            .iter()
            .map(|s| format!("          {}", quote(s)))
            .collect();
        format!("[\n{}\n        ]", quoted.join(",\n"))
    };
    if deny.is_empty() {
        return format!("{{ allow: {} }}", list(allow));
    }
    format!("{{ allow: {}, deny: {} }}", list(allow), list(deny))
}

/// A double-quoted string of the nats-server configuration (`$` would start a variable
/// outside quotes).
fn quote(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn dedup_in_order(items: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    items.retain(|item| seen.insert(item.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{APPLIER, EVALUATOR, IDENTITIES, RENDERER, REPORTER, TAP};

    #[test]
    fn the_evaluator_may_do_what_it_declares_and_nothing_else() {
        let allowed = permissions(&EVALUATOR);
        let expected = [
            "sluice.v1.match.>",
            "sluice.v1.cematch.>",
            "sluice.v1.dead.evaluator",
            "$JS.API.INFO",
            "$JS.API.STREAM.INFO.SLUICE_CONFIG",
            "$JS.API.STREAM.CREATE.SLUICE_CHANGES",
            "$JS.API.STREAM.UPDATE.SLUICE_DEAD",
            "$JS.API.CONSUMER.CREATE.SLUICE_CHANGES.evaluator.>",
            "$JS.API.CONSUMER.MSG.NEXT.SLUICE_CHANGES.evaluator",
            "$JS.API.CONSUMER.DELETE.SLUICE_CHANGES.evaluator",
            "$JS.ACK.SLUICE_CHANGES.evaluator.>",
            "$JS.ACK.SLUICE_CLOUDEVENTS.evaluator.>",
            "$JS.API.CONSUMER.CREATE.SLUICE_CONFIG",
            "$JS.API.CONSUMER.CREATE.SLUICE_CONFIG.*.>",
            "$JS.API.CONSUMER.MSG.NEXT.SLUICE_MATCH.*",
            "$JS.API.STREAM.MSG.GET.SLUICE_CONFIG",
        ];
        for subject in expected {
            assert!(allowed.publish.contains(&subject.to_string()), "{subject}");
        }
        for forbidden in [
            "sluice.v1.desired.>",
            "sluice.v1.dead.>",
            "$JS.API.STREAM.CREATE.SLUICE_DESIRED",
            "$JS.API.STREAM.PURGE.SLUICE_CHANGES",
            "$JS.API.STREAM.DELETE.SLUICE_MATCH",
            "$JS.API.CONSUMER.DELETE.SLUICE_CLOUDEVENTS.evaluator",
            "$JS.API.CONSUMER.CREATE.SLUICE_CLOUDEVENTS.*.>",
            "$JS.API.STREAM.MSG.GET.SLUICE_DESIRED",
            "$JS.API.STREAM.MSG.GET.SLUICE_APPLIED",
            ">",
        ] {
            assert!(
                !allowed.publish.contains(&forbidden.to_string()),
                "{forbidden}"
            );
        }
        assert_eq!(allowed.subscribe, ["_INBOX_evaluator.>"]);
    }

    #[test]
    fn a_partitioned_stage_may_use_its_partitions_durables_and_no_one_elses() {
        let evaluator = permissions(&EVALUATOR).publish;
        for subject in [
            "$JS.API.CONSUMER.CREATE.SLUICE_CHANGES.evaluator-p0.>",
            "$JS.API.CONSUMER.MSG.NEXT.SLUICE_CHANGES.evaluator-p15",
            "$JS.ACK.SLUICE_CHANGES.evaluator-p3.>",
            "$JS.API.CONSUMER.INFO.SLUICE_CLOUDEVENTS.evaluator-p1",
        ] {
            assert!(evaluator.contains(&subject.to_string()), "{subject}");
        }
        assert!(!evaluator.iter().any(|s| s.contains("evaluator-p16")));
        // The stages that are not partitioned have one durable each.
        let applier = permissions(&APPLIER).publish;
        assert!(applier.contains(&"$JS.ACK.SLUICE_DESIRED.applier.>".to_string()));
        assert!(
            !applier.iter().any(|s| s.contains("applier-p")),
            "{applier:?}"
        );
    }

    #[test]
    fn followers_are_denied_the_durables_of_others_on_what_they_follow() {
        let denied = |identity: &Identity| permissions(identity).deny_publish;
        let evaluator = denied(&EVALUATOR);
        for subject in [
            "$JS.API.CONSUMER.DELETE.SLUICE_MATCH.reporter",
            "$JS.API.CONSUMER.CREATE.SLUICE_MATCH.renderer",
            "$JS.API.CONSUMER.CREATE.SLUICE_MATCH.renderer.>",
            "$JS.API.CONSUMER.MSG.NEXT.SLUICE_MATCH.reporter",
            "$JS.API.CONSUMER.INFO.SLUICE_MATCH.reporter",
            // the durables of the renderer's partitions too (ADR 0051)
            "$JS.API.CONSUMER.CREATE.SLUICE_MATCH.renderer-p0.>",
            "$JS.API.CONSUMER.MSG.NEXT.SLUICE_MATCH.renderer-p15",
        ] {
            assert!(evaluator.contains(&subject.to_string()), "{subject}");
        }
        // Its own durables are not denied, though it follows SLUICE_CHANGES.
        assert!(evaluator.iter().all(|s| !s.contains(".evaluator")));
        // The renderer follows the applier's input and the set it consumes itself.
        let renderer = denied(&RENDERER);
        assert!(renderer.contains(&"$JS.API.CONSUMER.DELETE.SLUICE_DESIRED.applier".to_string()));
        assert!(renderer.contains(&"$JS.API.CONSUMER.DELETE.SLUICE_MATCH.reporter".to_string()));
        assert!(renderer.iter().all(|s| !s.contains(".renderer")));
        // Who follows nothing another consumes is denied nothing; the rendered block says both.
        assert!(denied(&APPLIER).is_empty());
        let config = authorization(&[User {
            role: Role::Service(EVALUATOR),
            nkey: "UEVAL".into(),
        }]);
        assert!(config.contains("], deny: [\n"), "{config}");
        assert!(
            config.contains("\"$JS.API.CONSUMER.DELETE.SLUICE_MATCH.reporter\""),
            "{config}"
        );
    }

    #[test]
    fn purges_are_granted_only_to_the_purging_identity() {
        let purges = |identity: &Identity| {
            permissions(identity)
                .publish
                .into_iter()
                .filter(|s| s.contains(".PURGE."))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            purges(&APPLIER),
            [
                "$JS.API.STREAM.PURGE.SLUICE_DESIRED",
                "$JS.API.STREAM.PURGE.SLUICE_APPLIED"
            ]
        );
        // The evaluator purges the members of a removed set (ADR 0018).
        assert_eq!(purges(&EVALUATOR), ["$JS.API.STREAM.PURGE.SLUICE_MATCH"]);
        assert!(purges(&REPORTER).is_empty());
    }

    #[test]
    fn each_service_may_write_its_own_lease_only() {
        for identity in IDENTITIES {
            let allowed = permissions(&identity).publish;
            for other in IDENTITIES {
                let own = identity.leads && other.name == identity.name;
                let lease = topology::lease_subject(other.name);
                assert_eq!(
                    allowed.contains(&lease),
                    own,
                    "{} writing {lease}",
                    identity.name
                );
                // And its shards' leases (ADR 0050), as a wildcard of one token.
                let shards = format!("{lease}.*");
                assert_eq!(
                    allowed.contains(&shards),
                    own,
                    "{} writing {shards}",
                    identity.name
                );
                let shard = topology::lease_subject(&topology::lease_name(other.name, "eu"));
                assert_eq!(shard, format!("{lease}.eu"));
            }
            assert!(!allowed.iter().any(|s| s == "sluice.v1.lease.>"));
        }
    }

    #[test]
    fn the_tap_only_subscribes() {
        let allowed = permissions(&TAP);
        assert!(allowed.publish.is_empty());
        assert_eq!(allowed.subscribe, ["_INBOX_tap.>", "sluice.v1.>"]);
        let config = authorization(&[User {
            role: Role::Service(TAP),
            nkey: "UTAP".into(),
        }]);
        assert!(config.contains(r#"publish: { deny: [">"] }"#), "{config}");
    }

    #[test]
    fn the_authorization_block_lists_every_user_with_quoted_subjects() {
        let mut users: Vec<User> = IDENTITIES
            .iter()
            .map(|identity| User {
                role: Role::Service(*identity),
                nkey: format!("U{}", identity.name.to_uppercase()),
            })
            .collect();
        users.push(User {
            role: Role::Admin,
            nkey: "UADMIN".into(),
        });
        let config = authorization(&users);
        assert!(
            config.starts_with("authorization {\n  users = [\n"),
            "{config}"
        );
        for identity in IDENTITIES {
            let nkey = format!("nkey: \"U{}\"", identity.name.to_uppercase());
            assert!(config.contains(&nkey), "{config}");
        }
        assert!(config.contains("{ nkey: \"UADMIN\" }"), "{config}");
        assert!(config.contains("\"$JS.API.INFO\""), "{config}");
        assert!(
            !config.contains(" $JS"),
            "unquoted $ starts a variable: {config}"
        );
    }
}
