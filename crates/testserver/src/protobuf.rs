//! Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! decoded into the JSON the JSON path would have received, so one write path serves both.
//!
//! The wire format is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message whose
//! `typeMeta` names the kind and whose `raw` holds the object. The messages are k8s-pb's, generated
//! from Kubernetes' `generated.proto` files. Only the kinds typed kubectl commands create are
//! decoded (Secret, ConfigMap, Namespace, ServiceAccount); any other kind is refused with 415 naming
//! it. Responses are never protobuf: clients that offer JSON in `Accept` get JSON.
//!
//! Go's protobuf encoder writes every non-pointer field, empty strings and zero numbers included,
//! while its JSON encoder omits them (`omitempty`); so empty strings, zero numbers, empty maps and
//! lists and zero timestamps are left out of the JSON here as well.

use base64::Engine;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::object::format_time;

/// The prefix of every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf request body into the object's JSON form, `apiVersion` and `kind` included.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request(
            "failed to decode protobuf body: it does not start with the magic bytes \"k8s\\x00\"",
        )
    })?;
    let unknown = Unknown::decode(envelope).map_err(|e| {
        ApiError::bad_request(format!(
            "failed to decode protobuf body: invalid runtime.Unknown envelope: {e}"
        ))
    })?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request(
            "failed to decode protobuf body: the envelope's typeMeta has no apiVersion or kind",
        ));
    }
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(unsupported(format!(
            "protobuf body of {api_version} {kind} has content encoding {encoding:?}; only unencoded bodies are supported"
        )));
    }
    let raw = unknown.raw.unwrap_or_default();
    let invalid = |e: prost::DecodeError| {
        ApiError::bad_request(format!(
            "failed to decode protobuf body of {api_version} {kind}: {e}"
        ))
    };
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => secret(core::Secret::decode(raw.as_slice()).map_err(invalid)?),
        ("v1", "ConfigMap") => config_map(core::ConfigMap::decode(raw.as_slice()).map_err(invalid)?),
        ("v1", "Namespace") => namespace(core::Namespace::decode(raw.as_slice()).map_err(invalid)?),
        ("v1", "ServiceAccount") => {
            service_account(core::ServiceAccount::decode(raw.as_slice()).map_err(invalid)?)
        }
        _ => {
            return Err(unsupported(format!(
                "protobuf bodies of {api_version} {kind} are not supported by this test server (supported: v1 Secret, ConfigMap, Namespace, ServiceAccount); send application/json"
            )))
        }
    };
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

fn unsupported(message: String) -> ApiError {
    ApiError::new(415, "UnsupportedMediaType", message)
}

/// A JSON object under construction that leaves out what Go's `omitempty` leaves out.
#[derive(Default)]
struct Obj(Map<String, Value>);

impl Obj {
    fn string(mut self, key: &str, value: Option<String>) -> Self {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            self.0.insert(key.into(), json!(v));
        }
        self
    }

    fn int(mut self, key: &str, value: Option<i64>) -> Self {
        if let Some(v) = value.filter(|v| *v != 0) {
            self.0.insert(key.into(), json!(v));
        }
        self
    }

    /// A `*bool` field: present whenever it was sent, `false` included.
    fn bool(mut self, key: &str, value: Option<bool>) -> Self {
        if let Some(v) = value {
            self.0.insert(key.into(), json!(v));
        }
        self
    }

    fn value(mut self, key: &str, value: Value) -> Self {
        let empty = match &value {
            Value::Null => true,
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        };
        if !empty {
            self.0.insert(key.into(), value);
        }
        self
    }

    fn strings<I: IntoIterator<Item = (String, String)>>(self, key: &str, map: I) -> Self {
        let map: Map<String, Value> = map.into_iter().map(|(k, v)| (k, json!(v))).collect();
        self.value(key, Value::Object(map))
    }

    fn bytes<I: IntoIterator<Item = (String, Vec<u8>)>>(self, key: &str, map: I) -> Self {
        let b64 = base64::engine::general_purpose::STANDARD;
        let map: Map<String, Value> = map
            .into_iter()
            .map(|(k, v)| (k, json!(b64.encode(v))))
            .collect();
        self.value(key, Value::Object(map))
    }

    fn list<T>(self, key: &str, items: Vec<T>, f: impl Fn(T) -> Value) -> Self {
        self.value(key, Value::Array(items.into_iter().map(f).collect()))
    }

    fn time(self, key: &str, t: Option<meta::Time>) -> Self {
        let formatted = t.and_then(|t| {
            let seconds = t.seconds.unwrap_or(0);
            // The zero time.Time is sent as an empty message (or seconds = -62135596800, year 1).
            (seconds > 0)
                .then(|| time::OffsetDateTime::from_unix_timestamp(seconds).ok())
                .flatten()
                .map(format_time)
        });
        self.string(key, formatted)
    }

    fn done(self) -> Value {
        Value::Object(self.0)
    }
}

fn object_meta(m: Option<meta::ObjectMeta>) -> Value {
    let m = m.unwrap_or_default();
    Obj::default()
        .string("name", m.name)
        .string("generateName", m.generate_name)
        .string("namespace", m.namespace)
        .string("selfLink", m.self_link)
        .string("uid", m.uid)
        .string("resourceVersion", m.resource_version)
        .int("generation", m.generation)
        .time("creationTimestamp", m.creation_timestamp)
        .time("deletionTimestamp", m.deletion_timestamp)
        .int(
            "deletionGracePeriodSeconds",
            m.deletion_grace_period_seconds,
        )
        .strings("labels", m.labels)
        .strings("annotations", m.annotations)
        .list("ownerReferences", m.owner_references, owner_reference)
        .list("finalizers", m.finalizers, Value::from)
        .list("managedFields", m.managed_fields, managed_fields_entry)
        .done()
}

fn owner_reference(r: meta::OwnerReference) -> Value {
    // apiVersion, kind, name and uid are required fields in JSON: no omitempty.
    let mut out = Obj::default()
        .bool("controller", r.controller)
        .bool("blockOwnerDeletion", r.block_owner_deletion);
    for (key, value) in [
        ("apiVersion", r.api_version),
        ("kind", r.kind),
        ("name", r.name),
        ("uid", r.uid),
    ] {
        out.0.insert(key.into(), json!(value.unwrap_or_default()));
    }
    out.done()
}

fn managed_fields_entry(e: meta::ManagedFieldsEntry) -> Value {
    let fields = e
        .fields_v1
        .and_then(|f| f.raw)
        .and_then(|raw| serde_json::from_slice::<Value>(&raw).ok())
        .unwrap_or(Value::Null);
    Obj::default()
        .string("manager", e.manager)
        .string("operation", e.operation)
        .string("apiVersion", e.api_version)
        .time("time", e.time)
        .string("fieldsType", e.fields_type)
        .value("fieldsV1", fields)
        .string("subresource", e.subresource)
        .done()
}

fn with_meta(m: Option<meta::ObjectMeta>) -> Obj {
    // metadata has no omitempty: `"metadata": {}` is always there.
    let mut obj = Obj::default();
    obj.0.insert("metadata".into(), object_meta(m));
    obj
}

fn into_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn secret(s: core::Secret) -> Map<String, Value> {
    into_map(
        with_meta(s.metadata)
            .bool("immutable", s.immutable)
            .bytes("data", s.data)
            .strings("stringData", s.string_data)
            .string("type", s.r#type)
            .done(),
    )
}

fn config_map(c: core::ConfigMap) -> Map<String, Value> {
    into_map(
        with_meta(c.metadata)
            .bool("immutable", c.immutable)
            .strings("data", c.data)
            .bytes("binaryData", c.binary_data)
            .done(),
    )
}

fn namespace(n: core::Namespace) -> Map<String, Value> {
    let spec = n
        .spec
        .map(|s| {
            Obj::default()
                .list("finalizers", s.finalizers, Value::from)
                .done()
        })
        .unwrap_or_else(|| json!({}));
    let status = n
        .status
        .map(|s| {
            Obj::default()
                .string("phase", s.phase)
                .list("conditions", s.conditions, |c| {
                    Obj::default()
                        .string("type", c.r#type)
                        .string("status", c.status)
                        .time("lastTransitionTime", c.last_transition_time)
                        .string("reason", c.reason)
                        .string("message", c.message)
                        .done()
                })
                .done()
        })
        .unwrap_or_else(|| json!({}));
    // spec and status are structs in Go without omitempty: always present, possibly empty.
    let mut obj = with_meta(n.metadata);
    obj.0.insert("spec".into(), spec);
    obj.0.insert("status".into(), status);
    into_map(obj.done())
}

fn service_account(a: core::ServiceAccount) -> Map<String, Value> {
    into_map(
        with_meta(a.metadata)
            .list("secrets", a.secrets, |r| {
                Obj::default()
                    .string("kind", r.kind)
                    .string("namespace", r.namespace)
                    .string("name", r.name)
                    .string("uid", r.uid)
                    .string("apiVersion", r.api_version)
                    .string("resourceVersion", r.resource_version)
                    .string("fieldPath", r.field_path)
                    .done()
            })
            .list("imagePullSecrets", a.image_pull_secrets, |r| {
                Obj::default().string("name", r.name).done()
            })
            .bool(
                "automountServiceAccountToken",
                a.automount_service_account_token,
            )
            .done(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wraps an encoded object in the envelope the Go client writes.
    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(unknown.encode_to_vec());
        out
    }

    fn check(body: &[u8], expected: Value) {
        assert_eq!(decode(body).expect("decodes"), expected);
    }

    /// Metadata as Go encodes it for a new object: every string present and empty.
    fn go_meta(name: &str) -> meta::ObjectMeta {
        meta::ObjectMeta {
            name: Some(name.into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            self_link: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }
    }

    /// The exact bytes kubectl 1.32 sends for `kubectl create secret generic s1 --from-file=kubeconfig=f`
    /// where f holds `apiVersion: v1\n` (captured with `-v=9`).
    const KUBECTL_SECRET: &[u8] = b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Secret\x12\x35\x0a\x12\x0a\x02s1\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x1d\x0a\x0akubeconfig\x12\x0fapiVersion: v1\x0a\x1a\x00\x1a\x00\x22\x00";

    #[test]
    fn kubectl_secret_bytes_decode_to_the_json_kubectl_would_send() {
        check(
            KUBECTL_SECRET,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
                "data": {"kubeconfig": "YXBpVmVyc2lvbjogdjEK"}}),
        );
    }

    #[test]
    fn secret_fields() {
        let s = core::Secret {
            metadata: Some(meta::ObjectMeta {
                namespace: Some("ns".into()),
                labels: [("a".to_string(), "1".to_string())].into(),
                annotations: [("n".to_string(), String::new())].into(),
                finalizers: vec!["f/x".into()],
                owner_references: vec![meta::OwnerReference {
                    api_version: Some("v1".into()),
                    kind: Some("ConfigMap".into()),
                    name: Some("o".into()),
                    uid: Some("u-1".into()),
                    controller: Some(true),
                    block_owner_deletion: None,
                }],
                ..go_meta("s")
            }),
            immutable: Some(false),
            data: [("bin".to_string(), vec![0u8, 255])].into(),
            string_data: [("plain".to_string(), "text".to_string())].into(),
            r#type: Some("kubernetes.io/dockerconfigjson".into()),
        };
        check(
            &envelope("v1", "Secret", s.encode_to_vec()),
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "ns", "labels": {"a": "1"}, "annotations": {"n": ""},
                    "finalizers": ["f/x"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1", "controller": true}]},
                "immutable": false, "data": {"bin": "AP8="}, "stringData": {"plain": "text"},
                "type": "kubernetes.io/dockerconfigjson"}),
        );
    }

    #[test]
    fn config_map_keeps_empty_values_and_encodes_binary_data() {
        let c = core::ConfigMap {
            metadata: Some(meta::ObjectMeta {
                generate_name: Some("cm-".into()),
                ..go_meta("")
            }),
            immutable: Some(true),
            data: [
                ("a".to_string(), "b".to_string()),
                ("empty".to_string(), String::new()),
            ]
            .into(),
            binary_data: [("z".to_string(), b"hi".to_vec())].into(),
        };
        check(
            &envelope("v1", "ConfigMap", c.encode_to_vec()),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"},
                "immutable": true, "data": {"a": "b", "empty": ""}, "binaryData": {"z": "aGk="}}),
        );
    }

    #[test]
    fn namespace_has_spec_finalizers_and_empty_status() {
        let n = core::Namespace {
            metadata: Some(go_meta("team-a")),
            spec: Some(core::NamespaceSpec {
                finalizers: vec!["kubernetes".into()],
            }),
            status: Some(core::NamespaceStatus {
                phase: Some(String::new()),
                conditions: vec![],
            }),
        };
        check(
            &envelope("v1", "Namespace", n.encode_to_vec()),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"},
                "spec": {"finalizers": ["kubernetes"]}, "status": {}}),
        );
    }

    #[test]
    fn service_account_references_and_automount() {
        let a = core::ServiceAccount {
            metadata: Some(go_meta("sa")),
            secrets: vec![core::ObjectReference {
                name: Some("tok".into()),
                ..Default::default()
            }],
            image_pull_secrets: vec![core::LocalObjectReference {
                name: Some("pull".into()),
            }],
            automount_service_account_token: Some(false),
        };
        check(
            &envelope("v1", "ServiceAccount", a.encode_to_vec()),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"},
                "secrets": [{"name": "tok"}], "imagePullSecrets": [{"name": "pull"}],
                "automountServiceAccountToken": false}),
        );
    }

    #[test]
    fn timestamps_and_managed_fields_are_decoded() {
        let m = meta::ObjectMeta {
            creation_timestamp: Some(meta::Time {
                seconds: Some(1_700_000_000),
                nanos: Some(0),
            }),
            generation: Some(3),
            resource_version: Some("42".into()),
            managed_fields: vec![meta::ManagedFieldsEntry {
                manager: Some("kubectl".into()),
                operation: Some("Update".into()),
                api_version: Some("v1".into()),
                time: None,
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(meta::FieldsV1 {
                    raw: Some(br#"{"f:data":{}}"#.to_vec()),
                }),
                subresource: Some(String::new()),
            }],
            ..go_meta("x")
        };
        assert_eq!(
            object_meta(Some(m)),
            json!({"name": "x", "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2023-11-14T22:13:20Z",
                "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]})
        );
    }

    #[test]
    fn other_kinds_are_refused_with_415_naming_the_kind() {
        let e = decode(&envelope("apps/v1", "Deployment", vec![])).expect_err("refused");
        assert_eq!(e.code, 415);
        assert!(e.message.contains("apps/v1 Deployment"), "{}", e.message);
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        for body in [
            &b"{\"kind\":\"Secret\"}"[..],
            b"k8s\x00\xff\xff",
            &envelope("", "", vec![]),
            &envelope("v1", "Secret", vec![0x0a, 0x05, 0x0a]),
        ] {
            let e = decode(body).expect_err("refused");
            assert_eq!(e.code, 400, "{}", e.message);
        }
    }
}
