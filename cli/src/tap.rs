//! `sluice tap`: subscribes to any pipeline subject and prints each message decoded from
//! protobuf, as JSON lines or YAML documents. Embedded Kubernetes objects and CloudEvents are
//! shown as JSON, not bytes.

use futures::StreamExt;
use prost::Message as _;
use serde_json::{json, Value};
use sluice_proto::v1 as pb;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Yaml,
}

fn embedded(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(bytes)))
}

/// An object that may travel sealed (ADR 0023): tap has no key, so it says so.
fn maybe_sealed(json: &[u8], sealed: &[u8]) -> Value {
    if sealed.is_empty() {
        embedded(json)
    } else {
        json!({"sealed": format!("{} bytes", sealed.len())})
    }
}

fn cluster(c: &Option<pb::ClusterRef>) -> Value {
    c.as_ref().map_or(Value::Null, |c| {
        let t = pb::ClusterType::try_from(c.r#type)
            .map(|t| t.as_str_name())
            .unwrap_or("?");
        json!({"type": t, "namespace": c.namespace, "name": c.name})
    })
}

fn refs(items: &[pb::ObjectRef]) -> Value {
    items
        .iter()
        .map(|r| json!({"apiVersion": r.api_version, "kind": r.kind, "namespace": r.namespace, "name": r.name}))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes a pipeline message by the family its subject names.
pub fn decode(subject: &str, payload: &[u8]) -> Result<Value, prost::DecodeError> {
    let family = subject.split('.').nth(2).unwrap_or("");
    Ok(match family {
        "config" => {
            let m = pb::ConfigObject::decode(payload)?;
            json!({"kind": m.kind, "namespace": m.namespace, "name": m.name, "deleted": m.deleted,
                   "resourceVersion": m.resource_version,
                   "object": maybe_sealed(&m.object_json, &m.sealed_object_json)})
        }
        "change" => {
            let m = pb::ResourceChange::decode(payload)?;
            json!({"cluster": cluster(&m.cluster), "apiVersion": m.api_version, "kind": m.kind,
                   "namespace": m.namespace, "name": m.name, "deleted": m.deleted,
                   "resourceVersion": m.resource_version, "object": embedded(&m.object_json)})
        }
        "cloudevent" => {
            let m = pb::CloudEventReceived::decode(payload)?;
            json!({"cluster": cluster(&m.cluster), "subject": m.subject, "event": embedded(&m.event_json),
                   "origin": m.origin, "originPosition": m.origin_position})
        }
        "cematch" => {
            let m = pb::CloudEventMatch::decode(payload)?;
            json!({"cluster": cluster(&m.cluster), "eventSource": m.event_source,
                   "natsSubject": m.nats_subject, "event": embedded(&m.event_json),
                   "origin": m.origin, "originPosition": m.origin_position,
                   "sourceSequence": m.source_sequence})
        }
        "match" => match pb::MatchUnit::decode(payload)?.unit {
            Some(pb::match_unit::Unit::Head(m)) => {
                json!({"head": {"cluster": cluster(&m.cluster), "eventSource": m.event_source,
                       "members": m.members, "digest": hex(&m.digest),
                       "failureMessage": m.failure_message, "removed": m.removed,
                       "sourceSequence": m.source_sequence}})
            }
            Some(pb::match_unit::Unit::Member(m)) => {
                json!({"member": {"cluster": cluster(&m.cluster), "eventSource": m.event_source,
                       "object": refs(m.object.as_slice()).get(0).cloned().unwrap_or(Value::Null),
                       "resource": embedded(&m.resource), "present": m.present, "order": m.order,
                       "failureMessage": m.failure_message, "sourceSequence": m.source_sequence}})
            }
            None => json!({"unit": null}),
        },
        "desired" => {
            let m = pb::DesiredState::decode(payload)?;
            let mut v = json!({"eventTrigger": m.event_trigger, "cluster": cluster(&m.cluster), "eventSource": m.event_source,
                   "objects": m.objects.iter().map(|o| maybe_sealed(&o.object_json, &o.sealed_object_json)).collect::<Vec<_>>(),
                   "failureMessage": m.failure_message, "removed": m.removed,
                   "sourceSequence": m.source_sequence});
            // A CloudEvent unit: which event's, and where that event stands in its origin.
            if !m.cloud_event_source.is_empty() || !m.cloud_event_subject.is_empty() {
                v["cloudEvent"] = json!({"source": m.cloud_event_source, "subject": m.cloud_event_subject,
                                         "origin": m.cloud_event_origin, "position": m.cloud_event_position});
            }
            v
        }
        "applied" => {
            let m = pb::ApplyResult::decode(payload)?;
            json!({"eventTrigger": m.event_trigger, "cluster": cluster(&m.cluster),
                   "applied": refs(&m.applied), "deleted": refs(&m.deleted), "held": refs(&m.held),
                   "error": m.error, "failureMessage": m.failure_message,
                   "sourceSequence": m.source_sequence})
        }
        "lease" => {
            let m = pb::Lease::decode(payload)?;
            json!({"holder": m.holder, "leaseDurationMs": m.lease_duration_ms,
                   "acquireTimeUnixMs": m.acquire_time_unix_ms,
                   "renewTimeUnixMs": m.renew_time_unix_ms, "released": m.released})
        }
        _ => json!({"raw": String::from_utf8_lossy(payload)}),
    })
}

/// One message as `sluice tap` prints it. A dead letter (`sluice.v1.dead.<stage>`) shows why it
/// was rejected, where it came from, and its payload decoded as a message of that origin.
pub fn record(
    subject: &str,
    payload: &[u8],
    reason: Option<String>,
    origin: Option<String>,
) -> Value {
    let decoded = |subject: &str| match decode(subject, payload) {
        Ok(v) => v,
        Err(e) => json!({"undecodable": e.to_string()}),
    };
    match (subject.split('.').nth(2), reason, origin) {
        (Some("dead"), reason, Some(origin)) => json!({
            "subject": subject, "reason": reason.unwrap_or_default(),
            "origin": origin, "message": decoded(&origin),
        }),
        _ => json!({"subject": subject, "message": decoded(subject)}),
    }
}

/// Prints messages on `filter` until `limit` messages were shown (forever when `None`). A bus
/// with authorization admits the tap as the `tap` identity (or an administrator).
pub async fn run(
    bus: &sluice_bus::BusOptions,
    filter: &str,
    format: Format,
    limit: Option<usize>,
) -> anyhow::Result<()> {
    let client = bus.connect_client().await?;
    let mut subscription = client.subscribe(filter.to_string()).await?;
    let mut shown = 0;
    while let Some(message) = subscription.next().await {
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_string())
        };
        let record = record(
            &message.subject,
            &message.payload,
            header(sluice_bus::topology::ERROR_HEADER),
            header(sluice_bus::topology::ORIGIN_SUBJECT_HEADER),
        );
        match format {
            Format::Json => println!("{}", serde_json::to_string(&record)?),
            Format::Yaml => print!("---\n{}", serde_yaml::to_string(&record)?),
        }
        shown += 1;
        if limit.is_some_and(|l| shown >= l) {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_family_by_subject() {
        let member = pb::MatchUnit {
            unit: Some(pb::match_unit::Unit::Member(pb::MatchMember {
                event_source: "es".into(),
                object: Some(pb::ObjectRef {
                    api_version: "v1".into(),
                    kind: "Service".into(),
                    namespace: "default".into(),
                    name: "my-service".into(),
                }),
                resource: br#"{"kind":"Service"}"#.to_vec(),
                present: true,
                ..Default::default()
            })),
        };
        let v = decode(
            "sluice.v1.match.sveltos.default.a.es.m.core.Service.default.my-service",
            &member.encode_to_vec(),
        )
        .expect("decode");
        assert_eq!(v["member"]["object"]["name"], "my-service");
        assert_eq!(v["member"]["resource"]["kind"], "Service");
        let head = pb::MatchUnit {
            unit: Some(pb::match_unit::Unit::Head(pb::MatchHead {
                event_source: "es".into(),
                members: 1,
                digest: vec![0xab, 0x01],
                ..Default::default()
            })),
        };
        let v = decode(
            "sluice.v1.match.sveltos.default.a.es",
            &head.encode_to_vec(),
        )
        .expect("decode");
        assert_eq!(v["head"]["members"], 1);
        assert_eq!(v["head"]["digest"], "ab01");
        assert!(decode("sluice.v1.desired.t.x", b"\xff\xff").is_err());
        let unit = pb::DesiredState {
            event_trigger: "t".into(),
            cloud_event_source: "auth.example.com".into(),
            cloud_event_subject: "user-20".into(),
            cloud_event_origin: "jetstream:USERS:1".into(),
            cloud_event_position: 92,
            removed: true,
            ..Default::default()
        };
        let v = decode(
            "sluice.v1.desired.t.sveltos.default.a.ce.auth_example_com.user-20",
            &unit.encode_to_vec(),
        )
        .expect("decode");
        assert_eq!(
            v["cloudEvent"],
            json!({"source": "auth.example.com", "subject": "user-20",
                   "origin": "jetstream:USERS:1", "position": 92})
        );
        let lease = pb::Lease {
            holder: "renderer-7d9f_1a2b".into(),
            lease_duration_ms: 15_000,
            acquire_time_unix_ms: 1,
            renew_time_unix_ms: 2,
            released: false,
        };
        let v =
            decode("sluice.v1.lease.renderer", &lease.encode_to_vec()).expect("a lease decodes");
        assert_eq!(v["holder"], "renderer-7d9f_1a2b");
        assert_eq!(v["leaseDurationMs"], 15_000);
    }

    #[test]
    fn dead_letters_show_the_reason_origin_and_rejected_message() {
        let v = record(
            "sluice.v1.dead.renderer",
            b"\xff\xff",
            Some("failed to decode MatchUnit".into()),
            Some("sluice.v1.match.sveltos.default.a.es".into()),
        );
        assert_eq!(v["reason"], "failed to decode MatchUnit");
        assert_eq!(v["origin"], "sluice.v1.match.sveltos.default.a.es");
        assert!(v["message"]["undecodable"].is_string(), "{v}");
        let change = pb::ResourceChange {
            name: "x".into(),
            object_json: b"{not json".to_vec(),
            ..Default::default()
        };
        let v = record(
            "sluice.v1.dead.evaluator",
            &change.encode_to_vec(),
            Some("object".into()),
            Some("sluice.v1.change.sveltos.default.a.core.ConfigMap.default.x".into()),
        );
        assert_eq!(v["message"]["name"], "x");
        assert_eq!(
            record("sluice.v1.desired.t.x", b"", None, None)["subject"],
            "sluice.v1.desired.t.x"
        );
    }

    #[test]
    fn sealed_objects_show_as_sealed() {
        let config = pb::ConfigObject {
            kind: "Secret".into(),
            name: "s".into(),
            sealed_object_json: vec![7; 60],
            ..Default::default()
        };
        let v = decode("sluice.v1.config.Secret.ns.s", &config.encode_to_vec()).expect("decode");
        assert_eq!(v["object"], json!({"sealed": "60 bytes"}));
    }
}
