//! Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! decoded into the JSON the JSON path would have received, so one write path serves both.
//!
//! The wire format is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message whose
//! `typeMeta` names the kind and whose `raw` holds the object. The messages are k8s-pb's, generated
//! from Kubernetes' `generated.proto` files. Only the kinds typed kubectl commands create are
//! decoded: field by field those small enough (v1 Secret, ConfigMap, Namespace, ServiceAccount;
//! rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding, ClusterRoleBinding), the fields
//! kubectl's workload generators set for the others (`workloads`: Service, Deployment, Job,
//! CronJob, HorizontalPodAutoscaler, PodDisruptionBudget, Ingress), and the two identity requests kubectl
//! sends as protobuf
//! (authorization.k8s.io/v1 SelfSubjectAccessReview and SelfSubjectRulesReview for `auth can-i`
//! and `auth can-i --list`, authentication.k8s.io/v1 TokenRequest for `create token` and
//! SelfSubjectReview for `auth whoami`); any other kind is refused with 415 naming it. Responses are never protobuf: clients that offer JSON in `Accept` get JSON.
//!
//! Go's protobuf encoder writes every non-pointer field, empty strings and zero numbers included,
//! while its JSON encoder omits them (`omitempty`); so empty strings, zero numbers, empty maps and
//! lists and zero timestamps are left out of the JSON here as well.

use base64::Engine;
use k8s_pb::api::authentication::v1 as authentication;
use k8s_pb::api::authorization::v1 as authorization;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::object::format_time;

mod workloads;

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
        (RBAC, "Role") => {
            let r = rbac::Role::decode(raw.as_slice()).map_err(invalid)?;
            into_map(with_meta(r.metadata).nullable_list("rules", r.rules, policy_rule).done())
        }
        (RBAC, "ClusterRole") => {
            let r = rbac::ClusterRole::decode(raw.as_slice()).map_err(invalid)?;
            let aggregation = r.aggregation_rule.map(|a| {
                Obj::default()
                    .list("clusterRoleSelectors", a.cluster_role_selectors, label_selector)
                    .done()
            });
            into_map(
                with_meta(r.metadata)
                    .nullable_list("rules", r.rules, policy_rule)
                    .present("aggregationRule", aggregation)
                    .done(),
            )
        }
        (RBAC, "RoleBinding") => {
            let b = rbac::RoleBinding::decode(raw.as_slice()).map_err(invalid)?;
            binding(b.metadata, b.subjects, b.role_ref)
        }
        (RBAC, "ClusterRoleBinding") => {
            let b = rbac::ClusterRoleBinding::decode(raw.as_slice()).map_err(invalid)?;
            binding(b.metadata, b.subjects, b.role_ref)
        }
        (AUTHORIZATION, "SelfSubjectAccessReview") => {
            let r = authorization::SelfSubjectAccessReview::decode(raw.as_slice()).map_err(invalid)?;
            self_subject_access_review(r)
        }
        (AUTHORIZATION, "SelfSubjectRulesReview") => {
            let r = authorization::SelfSubjectRulesReview::decode(raw.as_slice()).map_err(invalid)?;
            let spec = Obj::default()
                .string("namespace", r.spec.unwrap_or_default().namespace)
                .done();
            let mut obj = with_meta(r.metadata);
            obj.0.insert("spec".into(), spec);
            into_map(obj.done())
        }
        (AUTHENTICATION, "SelfSubjectReview") => {
            let r = authentication::SelfSubjectReview::decode(raw.as_slice()).map_err(invalid)?;
            into_map(with_meta(r.metadata).done())
        }
        ("apps/v1", "Deployment") => workloads::deployment(&raw, invalid)?,
        ("batch/v1", "Job") => workloads::job(&raw, invalid)?,
        ("batch/v1", "CronJob") => workloads::cron_job(&raw, invalid)?,
        ("v1", "Service") => workloads::service(&raw, invalid)?,
        ("autoscaling/v2", "HorizontalPodAutoscaler") => workloads::autoscaler(&raw, invalid)?,
        ("policy/v1", "PodDisruptionBudget") => workloads::disruption_budget(&raw, invalid)?,
        ("networking.k8s.io/v1", "Ingress") => workloads::ingress(&raw, invalid)?,
        (AUTHENTICATION, "TokenRequest") => {
            let r = authentication::TokenRequest::decode(raw.as_slice()).map_err(invalid)?;
            token_request(r)
        }
        _ => {
            return Err(unsupported(format!(
                "protobuf bodies of {api_version} {kind} are not supported by this test server (supported: v1 Secret, ConfigMap, Namespace, ServiceAccount, Service; apps/v1 Deployment; batch/v1 Job, CronJob; autoscaling/v2 HorizontalPodAutoscaler; policy/v1 PodDisruptionBudget; networking.k8s.io/v1 Ingress; {RBAC} Role, ClusterRole, RoleBinding, ClusterRoleBinding; {AUTHORIZATION} SelfSubjectAccessReview, SelfSubjectRulesReview; {AUTHENTICATION} TokenRequest, SelfSubjectReview); send application/json"
            )))
        }
    };
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

const RBAC: &str = "rbac.authorization.k8s.io/v1";
const AUTHORIZATION: &str = "authorization.k8s.io/v1";
const AUTHENTICATION: &str = "authentication.k8s.io/v1";

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

    /// A slice without `omitempty`: Go writes an empty (nil) one as `null`.
    fn nullable_list<T>(mut self, key: &str, items: Vec<T>, f: impl Fn(T) -> Value) -> Self {
        let value = if items.is_empty() {
            Value::Null
        } else {
            Value::Array(items.into_iter().map(f).collect())
        };
        self.0.insert(key.into(), value);
        self
    }

    /// A string without `omitempty`: present even when empty.
    fn required(mut self, key: &str, value: Option<String>) -> Self {
        self.0.insert(key.into(), json!(value.unwrap_or_default()));
        self
    }

    /// A pointer field: present whenever it was sent, even if empty.
    fn present(mut self, key: &str, value: Option<Value>) -> Self {
        if let Some(v) = value {
            self.0.insert(key.into(), v);
        }
        self
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

fn policy_rule(r: rbac::PolicyRule) -> Value {
    Obj::default()
        .nullable_list("verbs", r.verbs, Value::from)
        .list("apiGroups", r.api_groups, Value::from)
        .list("resources", r.resources, Value::from)
        .list("resourceNames", r.resource_names, Value::from)
        .list("nonResourceURLs", r.non_resource_ur_ls, Value::from)
        .done()
}

fn label_selector(s: meta::LabelSelector) -> Value {
    Obj::default()
        .strings("matchLabels", s.match_labels)
        .list("matchExpressions", s.match_expressions, |e| {
            Obj::default()
                .required("key", e.key)
                .required("operator", e.operator)
                .list("values", e.values, Value::from)
                .done()
        })
        .done()
}

fn self_subject_access_review(r: authorization::SelfSubjectAccessReview) -> Map<String, Value> {
    let spec = r.spec.unwrap_or_default();
    let resource = spec.resource_attributes.map(|a| {
        Obj::default()
            .string("namespace", a.namespace)
            .string("verb", a.verb)
            .string("group", a.group)
            .string("version", a.version)
            .string("resource", a.resource)
            .string("subresource", a.subresource)
            .string("name", a.name)
            .done()
    });
    let non_resource = spec.non_resource_attributes.map(|a| {
        Obj::default()
            .string("path", a.path)
            .string("verb", a.verb)
            .done()
    });
    let spec = Obj::default()
        .present("resourceAttributes", resource)
        .present("nonResourceAttributes", non_resource)
        .done();
    let mut obj = with_meta(r.metadata);
    obj.0.insert("spec".into(), spec);
    into_map(obj.done())
}

fn token_request(r: authentication::TokenRequest) -> Map<String, Value> {
    let spec = r.spec.unwrap_or_default();
    let bound = spec.bound_object_ref.map(|b| {
        Obj::default()
            .string("kind", b.kind)
            .string("apiVersion", b.api_version)
            .string("name", b.name)
            .string("uid", b.u_id)
            .done()
    });
    let spec = Obj::default()
        .nullable_list("audiences", spec.audiences, Value::from)
        .present(
            "expirationSeconds",
            spec.expiration_seconds.map(Value::from),
        )
        .present("boundObjectRef", bound)
        .done();
    let mut obj = with_meta(r.metadata);
    obj.0.insert("spec".into(), spec);
    into_map(obj.done())
}

fn binding(
    metadata: Option<meta::ObjectMeta>,
    subjects: Vec<rbac::Subject>,
    role_ref: Option<rbac::RoleRef>,
) -> Map<String, Value> {
    let role_ref = role_ref.unwrap_or_default();
    let role_ref = Obj::default()
        .required("apiGroup", role_ref.api_group)
        .required("kind", role_ref.kind)
        .required("name", role_ref.name)
        .done();
    let mut obj = with_meta(metadata).list("subjects", subjects, |s| {
        Obj::default()
            .required("kind", s.kind)
            .string("apiGroup", s.api_group)
            .required("name", s.name)
            .string("namespace", s.namespace)
            .done()
    });
    obj.0.insert("roleRef".into(), role_ref);
    into_map(obj.done())
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

    /// The bytes kubectl 1.32 sends for
    /// `kubectl create clusterrolebinding crb --clusterrole=view --user=alice --serviceaccount=ops:robot`.
    const KUBECTL_CLUSTER_ROLE_BINDING: &[u8] = b"k8s\x00\x0a2\x0a\x1crbac.authorization.k8s.io/v1\x12\x12ClusterRoleBinding\x12\x91\x01\x0a\x13\x0a\x03crb\x12\x00\x1a\x00\x22\x00*\x002\x008\x00B\x00\x12*\x0a\x04User\x12\x19rbac.authorization.k8s.io\x1a\x05alice\x22\x00\x12\x1e\x0a\x0eServiceAccount\x12\x00\x1a\x05robot\x22\x03ops\x1a.\x0a\x19rbac.authorization.k8s.io\x12\x0bClusterRole\x1a\x04view\x1a\x00\x22\x00";

    #[test]
    fn kubectl_cluster_role_binding_bytes_decode() {
        check(
            KUBECTL_CLUSTER_ROLE_BINDING,
            json!({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": "crb"},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                    {"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}}),
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
    fn rbac_roles_and_bindings() {
        let rule = rbac::PolicyRule {
            verbs: vec!["get".into(), "list".into()],
            api_groups: vec![String::new()],
            resources: vec!["secrets".into()],
            resource_names: vec![],
            non_resource_ur_ls: vec![],
        };
        let role = rbac::Role {
            metadata: Some(go_meta("reader")),
            rules: vec![rule.clone()],
        };
        check(
            &envelope(RBAC, "Role", role.encode_to_vec()),
            json!({"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "reader"},
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["secrets"]}]}),
        );
        let aggregated = rbac::ClusterRole {
            metadata: Some(go_meta("agg")),
            rules: vec![],
            aggregation_rule: Some(rbac::AggregationRule {
                cluster_role_selectors: vec![meta::LabelSelector {
                    match_labels: [("x".to_string(), "y".to_string())].into(),
                    match_expressions: vec![meta::LabelSelectorRequirement {
                        key: Some("k".into()),
                        operator: Some("Exists".into()),
                        values: vec![],
                    }],
                }],
            }),
        };
        check(
            &envelope(RBAC, "ClusterRole", aggregated.encode_to_vec()),
            json!({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "agg"}, "rules": null,
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"},
                    "matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}),
        );
        let binding = rbac::ClusterRoleBinding {
            metadata: Some(go_meta("b")),
            subjects: vec![
                rbac::Subject {
                    kind: Some("ServiceAccount".into()),
                    api_group: Some(String::new()),
                    name: Some("robot".into()),
                    namespace: Some("ops".into()),
                },
                rbac::Subject {
                    kind: Some("User".into()),
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    name: Some("alice".into()),
                    namespace: Some(String::new()),
                },
            ],
            role_ref: Some(rbac::RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: Some("ClusterRole".into()),
                name: Some("view".into()),
            }),
        };
        check(
            &envelope(RBAC, "ClusterRoleBinding", binding.encode_to_vec()),
            json!({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"},
                    {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}}),
        );
    }

    #[test]
    fn identity_requests_keep_what_was_asked() {
        let review = authorization::SelfSubjectAccessReview {
            metadata: Some(go_meta("")),
            spec: Some(authorization::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authorization::ResourceAttributes {
                    namespace: Some("team".into()),
                    verb: Some("list".into()),
                    group: Some(String::new()),
                    version: Some(String::new()),
                    resource: Some("configmaps".into()),
                    subresource: Some(String::new()),
                    name: Some(String::new()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            }),
            status: Some(Default::default()),
        };
        check(
            &envelope(
                AUTHORIZATION,
                "SelfSubjectAccessReview",
                review.encode_to_vec(),
            ),
            json!({"apiVersion": AUTHORIZATION, "kind": "SelfSubjectAccessReview", "metadata": {},
                "spec": {"resourceAttributes": {"namespace": "team", "verb": "list", "resource": "configmaps"}}}),
        );
        let non_resource = authorization::SelfSubjectAccessReview {
            spec: Some(authorization::SelfSubjectAccessReviewSpec {
                resource_attributes: None,
                non_resource_attributes: Some(authorization::NonResourceAttributes {
                    path: Some("/version".into()),
                    verb: Some("get".into()),
                }),
            }),
            ..Default::default()
        };
        check(
            &envelope(
                AUTHORIZATION,
                "SelfSubjectAccessReview",
                non_resource.encode_to_vec(),
            ),
            json!({"apiVersion": AUTHORIZATION, "kind": "SelfSubjectAccessReview", "metadata": {},
                "spec": {"nonResourceAttributes": {"path": "/version", "verb": "get"}}}),
        );
        let request = authentication::TokenRequest {
            metadata: Some(go_meta("robot")),
            spec: Some(authentication::TokenRequestSpec {
                audiences: vec!["sluice".into()],
                expiration_seconds: Some(600),
                bound_object_ref: None,
            }),
            status: Some(Default::default()),
        };
        check(
            &envelope(AUTHENTICATION, "TokenRequest", request.encode_to_vec()),
            json!({"apiVersion": AUTHENTICATION, "kind": "TokenRequest", "metadata": {"name": "robot"},
                "spec": {"audiences": ["sluice"], "expirationSeconds": 600}}),
        );
    }

    #[test]
    fn other_kinds_are_refused_with_415_naming_the_kind() {
        let e = decode(&envelope("networking.k8s.io/v1", "NetworkPolicy", vec![]))
            .expect_err("refused");
        assert_eq!(e.code, 415);
        assert!(
            e.message.contains("networking.k8s.io/v1 NetworkPolicy"),
            "{}",
            e.message
        );
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
