//! Write requests: create, replace, the patch formats (JSON, merge, strategic-as-merge, server-side
//! apply) and delete. Each runs under the cluster lock so read-modify-write is atomic.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::{json_response, respond_object, Call, Target};
use crate::admission::{self, Verb};
use crate::cluster::{Owner, Subresource};
use crate::error::ApiError;
use crate::fields;
use crate::object::meta_str;
use crate::patch;
use crate::query::Filter;

fn subresource(target: &Target) -> Subresource {
    if target.status {
        Subresource::Status
    } else {
        Subresource::Main
    }
}

/// The request body as JSON, by its media type; no Content-Type means JSON, as on the real server.
pub(crate) fn body_json(call: &Call) -> Result<Value, ApiError> {
    let ct = call.header("content-type");
    match ct.split(';').next().unwrap_or("").trim() {
        "application/vnd.kubernetes.protobuf" => crate::protobuf::decode(&call.body),
        "application/yaml" | "application/apply-patch+yaml" => serde_yaml::from_slice(&call.body)
            .map_err(|e| ApiError::bad_request(format!("failed to decode YAML body: {e}"))),
        "" | "application/json" | "application/apply-patch+json" => {
            serde_json::from_slice(&call.body)
                .map_err(|e| ApiError::bad_request(format!("failed to decode JSON body: {e}")))
        }
        _ => Err(ApiError::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {ct:?})"))),
    }
}

fn check_type(target: &Target, obj: &Value) -> Result<(), ApiError> {
    crate::cluster::check_type(&target.info, &target.version, obj)
}

/// Decodes a written object as apiserver does (pruning, `fieldValidation`, defaulting); returns
/// the warnings for the response.
fn decode(
    call: &Call,
    target: &Target,
    obj: &mut Value,
    verb: Verb,
) -> Result<Vec<String>, ApiError> {
    let directive = admission::directive(call.param("fieldValidation"), verb)?;
    let duplicates = if verb != Verb::Patch
        && directive != admission::Directive::Ignore
        && !call.header("content-type").contains("yaml")
    {
        admission::duplicate_fields(&call.body)
    } else {
        Vec::new()
    };
    admission::decode(
        &target.info,
        &target.version,
        obj,
        duplicates,
        directive,
        verb,
    )
}

/// Adds one `Warning: 299 - "<text>"` header per warning, as apiserver does.
fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = axum::http::HeaderValue::from_str(&format!("299 - \"{quoted}\"")) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

pub fn create(call: &Call, target: &Target) -> Result<Response, ApiError> {
    if target.info.namespaced && target.namespace.is_none() {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "create namespaced objects under /namespaces/<namespace>/",
        ));
    }
    let mut obj = body_json(call)?;
    check_type(target, &obj)?;
    let warnings = decode(call, target, &mut obj, Verb::Create)?;
    let obj = target.to_storage(obj)?;
    let created = call.cluster.lock().create(
        &target.info,
        target.ns(),
        obj,
        &Owner::Update(call.manager()),
    )?;
    Ok(with_warnings(
        respond_object(call, StatusCode::CREATED, target, created),
        &warnings,
    ))
}

pub fn replace(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let mut obj = body_json(call)?;
    check_type(target, &obj)?;
    let warnings = decode(call, target, &mut obj, Verb::Update)?;
    let obj = target.to_storage(obj)?;
    let name = target.name.as_deref().unwrap_or("");
    let updated = call.cluster.lock().update(
        &target.info,
        target.ns(),
        name,
        obj,
        subresource(target),
        &Owner::Update(call.manager()),
    )?;
    Ok(with_warnings(
        respond_object(call, StatusCode::OK, target, updated),
        &warnings,
    ))
}

pub fn patch(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let ct = call
        .header("content-type")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    // Custom resources have no strategic merge patch: apiserver lists what it accepts instead.
    let accepted: &[&str] = if target.info.crd.is_some() {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
    } else {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ]
    };
    if !accepted.contains(&ct.as_str()) && ct != "application/apply-patch+json" {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        ));
    }
    let name = target.name.as_deref().unwrap_or("");
    let sub = subresource(target);
    if ct == "application/apply-patch+yaml" || ct == "application/apply-patch+json" {
        return apply(call, target, name);
    }
    let body: Value = serde_json::from_slice(&call.body)
        .map_err(|e| ApiError::bad_request(format!("failed to decode patch body: {e}")))?;
    let mut state = call.cluster.lock();
    let live = state
        .get(&target.info.gr(), target.ns(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&target.info, name))?;
    let mut doc = target.present(live)?;
    match ct.as_str() {
        "application/json-patch+json" => patch::json_patch(&mut doc, &body).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("the server rejected our request due to an error in our request: {e}"),
            )
        })?,
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            patch::merge_patch(&mut doc, &body)
        }
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format: {other}"),
            ))
        }
    }
    check_type(target, &doc)?;
    let warnings = decode(call, target, &mut doc, Verb::Patch)?;
    let doc = target.to_storage(doc)?;
    let updated = state.update(
        &target.info,
        target.ns(),
        name,
        doc,
        sub,
        &Owner::Update(call.manager()),
    )?;
    drop(state);
    Ok(with_warnings(
        respond_object(call, StatusCode::OK, target, updated),
        &warnings,
    ))
}

fn apply(call: &Call, target: &Target, name: &str) -> Result<Response, ApiError> {
    let config = body_json(call)?;
    check_type(target, &config)?;
    let manager = call
        .param("fieldManager")
        .ok_or_else(|| {
            ApiError::bad_request(
                "PATCH with application/apply-patch+yaml requires the fieldManager parameter",
            )
        })?
        .to_string();
    let body_name = meta_str(&config, "name");
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    admission::check_apply_fields(&target.info, &target.version, target.ns(), name, &config)?;
    let force = call.param("force") == Some("true");
    let sub = subresource(target);
    let mut state = call.cluster.lock();
    let live = state.get(&target.info.gr(), target.ns(), name).cloned();
    let rv_in = meta_str(&config, "resourceVersion");
    if !rv_in.is_empty()
        && live
            .as_ref()
            .is_none_or(|l| meta_str(l, "resourceVersion") != rv_in)
    {
        return Err(ApiError::conflict(&target.info, name));
    }
    let live = live.map(|l| target.present(l)).transpose()?;
    let merged = fields::apply(live.as_ref(), &config, &manager, force, target.info.status, sub).map_err(|conflicts| {
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|c| json!({"type": "FieldManagerConflict", "message": format!("conflict with {:?}", c.manager), "field": c.field()}))
            .collect();
        let list: Vec<String> = conflicts.iter().map(|c| format!("conflict with {:?}: {}", c.manager, c.field())).collect();
        let mut e = ApiError::new(409, "Conflict", format!("Apply failed with {} conflict(s): {}", conflicts.len(), list.join(", ")));
        e.details = Some(json!({"name": name, "group": target.info.group, "kind": target.info.plural, "causes": causes}));
        e
    })?;
    let mut merged = merged;
    // The applied configuration was checked above; decoding the merged object defaults it.
    admission::decode(
        &target.info,
        &target.version,
        &mut merged,
        Vec::new(),
        admission::Directive::Ignore,
        Verb::Patch,
    )?;
    let merged = target.to_storage(merged)?;
    if live.is_none() {
        if sub == Subresource::Status {
            return Err(ApiError::not_found(&target.info, name));
        }
        let created = state.create(&target.info, target.ns(), merged, &Owner::Applied)?;
        drop(state);
        return Ok(respond_object(call, StatusCode::CREATED, target, created));
    }
    let updated = state.update(
        &target.info,
        target.ns(),
        name,
        merged,
        sub,
        &Owner::Applied,
    )?;
    drop(state);
    Ok(respond_object(call, StatusCode::OK, target, updated))
}

pub fn delete(call: &Call, target: &Target) -> Result<Response, ApiError> {
    if target.status {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "delete is not allowed on the status subresource",
        ));
    }
    let options: Value = if call.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&call.body).unwrap_or(json!({}))
    };
    let rv = options
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str);
    let uid = options
        .pointer("/preconditions/uid")
        .and_then(Value::as_str);
    let name = target.name.as_deref().unwrap_or("");
    let obj = call
        .cluster
        .lock()
        .delete(&target.info, target.ns(), name, rv, uid)?;
    Ok(respond_object(call, StatusCode::OK, target, obj))
}

pub fn delete_collection(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let filter = Filter::new(
        target.namespace.clone(),
        call.param("labelSelector"),
        call.param("fieldSelector"),
    )?;
    let gr = target.info.gr();
    let mut state = call.cluster.lock();
    let keys: Vec<(String, String)> = state
        .list(&gr, target.namespace.as_deref(), None)
        .filter(|(_, o)| filter.matches(o))
        .map(|(k, _)| k.clone())
        .collect();
    let mut items = Vec::new();
    for (ns, name) in keys {
        items.push(state.delete(&target.info, &ns, &name, None, None)?);
    }
    let items = target.present_all(items)?;
    let rv = state.resource_version();
    drop(state);
    let body = json!({
        "kind": format!("{}List", target.info.kind),
        "apiVersion": target.info.api_version(&target.version),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &body))
}
