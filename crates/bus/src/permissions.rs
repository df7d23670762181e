//! The NATS server's authorization, generated from the identities of [`crate::topology`]: each
//! identity may publish to the streams it writes, use the JetStream API for exactly the streams
//! and consumers it declares, and receive replies on its own inbox prefix; nothing else. This
//! module renders the subjects and the `authorization { users = [...] }` block of a nats-server
//! configuration; it does not talk to NATS.

use std::fmt::Write as _;

use crate::topology::{self, Acks, Identity};

/// JetStream's API prefix.
const JS_API: &str = "$JS.API";

/// What one identity may publish and subscribe to, as nats-server subject patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
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
/// - its durables: create (with or without a filter token), info, next and the acks
///   (`$JS.ACK.<stream>.<durable>.>`), and delete only where the stage recreates its consumer
///   ([`Acks::Covering`]);
/// - the streams it follows: ordered consumers, whose names the server or the client picks at
///   random (so a follower may manage any consumer of the streams it follows; ADR 0022);
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
    for consumer in identity.consumes {
        let target = format!("{}.{}", consumer.stream.name, consumer.durable);
        publish.push(format!("{JS_API}.CONSUMER.CREATE.{target}"));
        publish.push(format!("{JS_API}.CONSUMER.CREATE.{target}.>"));
        publish.push(format!("{JS_API}.CONSUMER.INFO.{target}"));
        publish.push(format!("{JS_API}.CONSUMER.MSG.NEXT.{target}"));
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
    }
    let mut subscribe = vec![format!("{}.>", inbox_prefix(identity.name))];
    subscribe.extend(identity.taps.iter().map(|tap| tap.to_string()));
    dedup_in_order(&mut publish);
    Permissions { publish, subscribe }
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
                let _ = writeln!(out, "        publish: {}", rule(&allowed.publish));
                let _ = writeln!(out, "        subscribe: {}", rule(&allowed.subscribe));
                let _ = writeln!(out, "      }}");
                let _ = writeln!(out, "    }}");
            }
        }
    }
    out.push_str("  ]\n}\n");
    out
}

/// An allow list, one subject per line; an empty one denies everything (nats-server reads an
/// empty allow list as no restriction).
fn rule(subjects: &[String]) -> String {
    if subjects.is_empty() {
        return format!("{{ deny: [{}] }}", quote(">"));
    }
    let quoted: Vec<String> = subjects
        .iter()
        .map(|s| format!("          {}", quote(s)))
        .collect();
    format!("{{ allow: [\n{}\n        ] }}", quoted.join(",\n"))
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
    use crate::topology::{APPLIER, EVALUATOR, IDENTITIES, REPORTER, TAP};

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
