//! The `scale` subresource of Deployments, ReplicaSets and StatefulSets: an `autoscaling/v1`
//! `Scale` read from and written to the object's `spec.replicas`, as `kubectl scale` and
//! HorizontalPodAutoscalers use it.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::{json_response, Call, Target};
use crate::cluster::{Owner, Subresource};
use crate::error::ApiError;
use crate::field_error::FieldError;
use crate::object::{meta_str, set_meta};
use crate::patch;

/// Whether `kind` of `group` has a `scale` subresource.
pub fn scales(group: &str, kind: &str) -> bool {
    group == "apps" && matches!(kind, "Deployment" | "ReplicaSet" | "StatefulSet")
}

/// `GET`, `PUT` or `PATCH` of `<plural>/<name>/scale`.
pub fn serve(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let name = target.name.as_deref().unwrap_or("");
    let gr = target.info.gr();
    let mut state = call.cluster.lock();
    let live = state
        .get(&gr, target.ns(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&target.info, name))?;
    let current = scale_of(&live);
    let live_rv = meta_str(&live, "resourceVersion").to_string();
    let wanted = match call.method {
        Method::GET => return Ok(json_response(StatusCode::OK, &current)),
        Method::PUT => super::write::body_json(call)?,
        Method::PATCH => patched(call, current)?,
        ref m => {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("the server does not allow this method on the requested resource: {m}"),
            ))
        }
    };
    let replicas = replicas(&wanted, name)?;
    let mut doc = live;
    doc["spec"]["replicas"] = json!(replicas);
    let rv_in = meta_str(&wanted, "resourceVersion");
    if !rv_in.is_empty() {
        set_meta(&mut doc, "resourceVersion", json!(rv_in));
    }
    let options = if call.method == Method::PUT {
        "UpdateOptions"
    } else {
        "PatchOptions"
    };
    let dry = super::write::dry_run(call, options)?;
    let updated = super::write::commit(&mut state, dry, Some(&live_rv), |state| {
        state.update(
            &target.info,
            target.ns(),
            name,
            doc,
            Subresource::Main,
            &Owner::Update(call.manager()),
        )
    })?;
    Ok(json_response(StatusCode::OK, &scale_of(&updated)))
}

/// A patch of the `Scale` (JSON, merge or strategic merge; a `Scale` has no lists to merge).
fn patched(call: &Call, mut scale: Value) -> Result<Value, ApiError> {
    let body: Value = serde_json::from_slice(&call.body)
        .map_err(|e| ApiError::bad_request(format!("failed to decode patch body: {e}")))?;
    let content_type = call.header("content-type");
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/json-patch+json" => patch::json_patch(&mut scale, &body)
            .map_err(|e| ApiError::new(422, "Invalid", e))?,
        "application/merge-patch+json" => patch::merge_patch(&mut scale, &body),
        "application/strategic-merge-patch+json" => {
            patch::strategic_merge_patch(&mut scale, &body, None)
                .map_err(|e| ApiError::new(e.code, e.reason(), e.message))?
        }
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})"),
            ))
        }
    }
    Ok(scale)
}

/// `spec.replicas` of a written `Scale`: a whole number, at least 0.
fn replicas(scale: &Value, name: &str) -> Result<i64, ApiError> {
    let invalid =
        |detail: FieldError| ApiError::invalid_fields("autoscaling", "Scale", name, &[detail]);
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(r) if (0..=i64::from(i32::MAX)).contains(&r) => Ok(r),
            Some(r) if r < 0 => Err(invalid(FieldError::invalid(
                "spec.replicas",
                json!(r),
                "must be greater than or equal to 0",
            ))),
            _ => Err(ApiError::bad_request(format!(
                "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal number {n} into Go struct field ScaleSpec.spec.replicas of type int32"
            ))),
        },
        Some(other) => Err(ApiError::bad_request(format!(
            "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal {} into Go struct field ScaleSpec.spec.replicas of type int32",
            crate::admission::go_json_type(other)
        ))),
    }
}

/// The `Scale` of a Deployment, ReplicaSet or StatefulSet.
pub fn scale_of(obj: &Value) -> Value {
    let meta = |field: &str| obj.pointer(&format!("/metadata/{field}")).cloned();
    let mut metadata = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta(field) {
            metadata.insert(field.into(), v);
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": obj.pointer("/spec/selector").map(selector_string).unwrap_or_default(),
        },
    })
}

/// A label selector in its string form (`app=web,tier in (a,b)`), requirements sorted by key, as
/// `metav1.LabelSelectorAsSelector(...).String()` writes it.
fn selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            requirements.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    if let Some(expressions) = selector.get("matchExpressions").and_then(Value::as_array) {
        for e in expressions {
            let key = e["key"].as_str().unwrap_or("");
            let mut values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            values.sort_unstable();
            let text = match e["operator"].as_str().unwrap_or("") {
                "In" => format!("{key} in ({})", values.join(",")),
                "NotIn" => format!("{key} notin ({})", values.join(",")),
                "Exists" => key.to_string(),
                "DoesNotExist" => format!("!{key}"),
                _ => continue,
            };
            requirements.push((key.to_string(), text));
        }
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_shows_the_replicas_and_the_selector_as_a_string() {
        let deployment = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u", "resourceVersion": "7",
                         "labels": {"x": "y"}},
            "spec": {"replicas": 2, "selector": {
                "matchLabels": {"tier": "front", "app": "web"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                     {"key": "legacy", "operator": "DoesNotExist"}]}},
            "status": {"replicas": 1}
        });
        assert_eq!(
            scale_of(&deployment),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
                   "metadata": {"name": "web", "namespace": "default", "uid": "u",
                                "resourceVersion": "7"},
                   "spec": {"replicas": 2},
                   "status": {"replicas": 1,
                              "selector": "app=web,env in (dev,prod),!legacy,tier=front"}})
        );
    }

    #[test]
    fn written_replicas_must_be_a_count() {
        assert_eq!(replicas(&json!({"spec": {"replicas": 3}}), "web"), Ok(3));
        assert_eq!(replicas(&json!({"spec": {}}), "web"), Ok(0));
        let negative = replicas(&json!({"spec": {"replicas": -1}}), "web").expect_err("refused");
        assert_eq!(negative.code, 422);
        assert!(
            negative
                .message
                .contains("spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
            "{}",
            negative.message
        );
        assert_eq!(
            replicas(&json!({"spec": {"replicas": "3"}}), "web").map_err(|e| e.code),
            Err(400)
        );
    }
}
