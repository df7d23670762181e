//! Write requests: create, replace, the patch formats (JSON, merge, strategic merge, server-side
//! apply) and delete. Each runs under the cluster lock so read-modify-write is atomic.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::{json_response, respond_object, Call, Target};
use crate::admission::{self, Verb};
use crate::cluster::{Owner, State, Subresource};
use crate::error::ApiError;
use crate::field_error::FieldError;
use crate::fields;
use crate::object::{meta_str, remove_meta, set_meta};
use crate::patch;
use crate::query::Filter;
use crate::resources::ResourceInfo;

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
        "application/yaml" | "application/apply-patch+yaml" => yaml_body(&call.body),
        "" | "application/json" | "application/apply-patch+json" => {
            serde_json::from_slice(&call.body)
                .map_err(|e| ApiError::bad_request(format!("failed to decode JSON body: {e}")))
        }
        _ => Err(ApiError::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {ct:?})"))),
    }
}

/// A YAML body. Clients send JSON under YAML's media type (server-side apply's is YAML only),
/// and JSON is YAML: a body that is a JSON object is read by the JSON parser, several times
/// faster, and anything else (or what the JSON parser refuses) by the YAML parser.
fn yaml_body(body: &[u8]) -> Result<Value, ApiError> {
    if json_reads_as_yaml(body) {
        if let Ok(value) = serde_json::from_slice(body) {
            return Ok(value);
        }
    }
    serde_yaml::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("failed to decode YAML body: {e}")))
}

/// Whether the JSON parser reads `body` as the YAML parser does, if it reads it at all: a JSON
/// object without the number `-0` (an integer to YAML), surrogate pairs written as escapes and
/// tabs (which YAML refuses in places). So the JSON path accepts nothing the YAML parser would
/// refuse and reads nothing otherwise (tested).
fn json_reads_as_yaml(body: &[u8]) -> bool {
    let before = |b: u8| b":,[ \n\r".contains(&b);
    let after = |b: u8| b",]} \n\r".contains(&b);
    body.trim_ascii_start().starts_with(b"{")
        && !body.contains(&b'\t')
        && !body.windows(3).any(|w| w.eq_ignore_ascii_case(b"\\ud"))
        && !body
            .windows(4)
            .any(|w| before(w[0]) && w[1..3] == *b"-0" && after(w[3]))
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

/// `?dryRun=All`: the write is only tried. kube-apiserver accepts no other value; `options` is
/// the kind of the request's options (`CreateOptions`, `PatchOptions`, ...) for its error.
pub(super) fn dry_run(call: &Call, options: &str) -> Result<bool, ApiError> {
    match call.param("dryRun") {
        None => Ok(false),
        Some(value) => dry_run_values(&[value], options),
    }
}

/// Whether the `dryRun` values of a request ask for a dry run: none (no), `All` (yes), anything
/// else is refused as apiserver's options validation refuses it.
fn dry_run_values(values: &[&str], options: &str) -> Result<bool, ApiError> {
    match values {
        [] => Ok(false),
        ["All"] => Ok(true),
        other => Err(ApiError::invalid_fields(
            "meta.k8s.io",
            options,
            "",
            &[FieldError::not_supported(
                "dryRun",
                json!(other),
                &["All".to_string()],
            )],
        )),
    }
}

/// Runs a write on the locked state, or only tries it (`dry`): then the answer is what the write
/// would have stored, with the live object's resourceVersion (`live_rv`), or none for an object
/// that a dry run would have created, as kube-apiserver answers.
pub(super) fn commit(
    state: &mut State,
    dry: bool,
    live_rv: Option<&str>,
    write: impl FnOnce(&mut State) -> Result<Value, ApiError>,
) -> Result<Value, ApiError> {
    if !dry {
        return write(state);
    }
    let mut obj = state.dry_run(write)?;
    match live_rv {
        Some(rv) => set_meta(&mut obj, "resourceVersion", json!(rv)),
        None => {
            remove_meta(&mut obj, "resourceVersion");
        }
    }
    Ok(obj)
}

/// RBAC's escalation prevention on a write of an RBAC object: the writer must hold what it
/// grants, or may escalate or bind (`auth::escalation`).
fn confirm_rbac(call: &Call, state: &State, target: &Target, obj: &Value) -> Result<(), ApiError> {
    if target.info.group != crate::auth::RBAC_GROUP {
        return Ok(());
    }
    let previous = state.get(&target.info.gr(), target.ns(), meta_str(obj, "name"));
    crate::auth::confirm_rbac_write(
        &state.policy(),
        &call.user,
        &target.info.kind,
        &target.info.plural,
        target.ns(),
        obj,
        previous,
    )
}

pub fn create(call: &Call, target: &Target) -> Result<Response, ApiError> {
    if target.info.namespaced && target.namespace.is_none() {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "create namespaced objects under /namespaces/<namespace>/",
        ));
    }
    let dry = dry_run(call, "CreateOptions")?;
    let mut obj = body_json(call)?;
    check_type(target, &obj)?;
    let warnings = decode(call, target, &mut obj, Verb::Create)?;
    let obj = target.to_storage(obj)?;
    let mut state = call.cluster.lock();
    confirm_rbac(call, &state, target, &obj)?;
    let created = commit(&mut state, dry, None, |state| {
        state.create(
            &target.info,
            target.ns(),
            obj,
            &Owner::Update(call.manager()),
        )
    })?;
    drop(state);
    Ok(with_warnings(
        respond_object(call, StatusCode::CREATED, target, created),
        &warnings,
    ))
}

pub fn replace(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let dry = dry_run(call, "UpdateOptions")?;
    let mut obj = body_json(call)?;
    check_type(target, &obj)?;
    let warnings = decode(call, target, &mut obj, Verb::Update)?;
    let obj = target.to_storage(obj)?;
    let name = target.name.as_deref().unwrap_or("");
    let mut state = call.cluster.lock();
    let live_rv = state
        .get(&target.info.gr(), target.ns(), name)
        .map(|live| meta_str(live, "resourceVersion").to_string());
    if live_rv.is_some() && meta_str(&obj, "resourceVersion").is_empty() {
        unconditional_update(&target.info, name)?;
    }
    confirm_rbac(call, &state, target, &obj)?;
    let updated = commit(&mut state, dry, live_rv.as_deref(), |state| {
        state.update(
            &target.info,
            target.ns(),
            name,
            obj,
            subresource(target),
            &Owner::Update(call.manager()),
        )
    })?;
    drop(state);
    Ok(with_warnings(
        respond_object(call, StatusCode::OK, target, updated),
        &warnings,
    ))
}

/// Whether a replace that names no resourceVersion may overwrite what is stored: the
/// registries of custom resources and of CRDs refuse (`AllowUnconditionalUpdate` false), the
/// built-in ones take it; the refusal is the 422 the generic store words with the resource for
/// a kind.
fn unconditional_update(info: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    if info.crd.is_none() && !crate::cluster::is_crd(info) {
        return Ok(());
    }
    Err(ApiError::invalid_fields(
        &info.group,
        &info.plural,
        name,
        &[FieldError::invalid_shown(
            "metadata.resourceVersion",
            "0x0",
            "must be specified for an update",
        )],
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
    let dry = dry_run(call, "PatchOptions")?;
    if ct == "application/apply-patch+yaml" || ct == "application/apply-patch+json" {
        return apply(call, target, name, dry);
    }
    let body: Value = serde_json::from_slice(&call.body)
        .map_err(|e| ApiError::bad_request(format!("failed to decode patch body: {e}")))?;
    let mut state = call.cluster.lock();
    let live = state
        .get(&target.info.gr(), target.ns(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&target.info, name))?;
    let live_rv = meta_str(&live, "resourceVersion").to_string();
    let mut doc = target.present(live)?;
    match ct.as_str() {
        "application/json-patch+json" => patch::json_patch(&mut doc, &body).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("the server rejected our request due to an error in our request: {e}"),
            )
        })?,
        "application/merge-patch+json" => patch::merge_patch(&mut doc, &body),
        "application/strategic-merge-patch+json" => {
            let schema = crate::schema::builtin::schema(&target.info.group, &target.info.kind);
            patch::strategic_merge_patch(&mut doc, &body, schema)
                .map_err(|e| ApiError::new(e.code, e.reason(), e.message))?
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
    confirm_rbac(call, &state, target, &doc)?;
    let updated = commit(&mut state, dry, Some(&live_rv), |state| {
        state.update(
            &target.info,
            target.ns(),
            name,
            doc,
            sub,
            &Owner::Update(call.manager()),
        )
    })?;
    drop(state);
    Ok(with_warnings(
        respond_object(call, StatusCode::OK, target, updated),
        &warnings,
    ))
}

fn apply(call: &Call, target: &Target, name: &str, dry: bool) -> Result<Response, ApiError> {
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
    let live_rv = live
        .as_ref()
        .map(|l| meta_str(l, "resourceVersion").to_string());
    // A resourceVersion is a precondition on what exists; on an apply that creates, the
    // storage refuses it as on any create.
    let rv_in = meta_str(&config, "resourceVersion");
    if live
        .as_ref()
        .is_some_and(|l| !rv_in.is_empty() && meta_str(l, "resourceVersion") != rv_in)
    {
        return Err(ApiError::conflict(&target.info, name));
    }
    if live.is_none() && !dry {
        crate::cluster::no_resource_version_on_create(rv_in)?;
    }
    let live = live.map(|l| target.present(l)).transpose()?;
    let schema = fields::schema_of(&target.info, &target.version);
    let merged = fields::apply(live.as_ref(), &config, &manager, force, schema, target.info.status, sub).map_err(|conflicts| {
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
    confirm_rbac(call, &state, target, &merged)?;
    if live.is_none() {
        if sub == Subresource::Status {
            return Err(ApiError::not_found(&target.info, name));
        }
        let created = commit(&mut state, dry, None, |state| {
            state.create(&target.info, target.ns(), merged, &Owner::Applied)
        })?;
        drop(state);
        return Ok(respond_object(call, StatusCode::CREATED, target, created));
    }
    let updated = commit(&mut state, dry, live_rv.as_deref(), |state| {
        state.update(
            &target.info,
            target.ns(),
            name,
            merged,
            sub,
            &Owner::Applied,
        )
    })?;
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
    let options = crate::cluster::delete_options(&call.body)?;
    // kubectl sends the dry run in the DeleteOptions body, other clients in the query
    let in_body: Vec<&str> = options.dry_run.iter().map(String::as_str).collect();
    let dry = dry_run(call, "DeleteOptions")? || dry_run_values(&in_body, "DeleteOptions")?;
    let name = target.name.as_deref().unwrap_or("");
    let mut state = call.cluster.lock();
    let live_rv = state
        .get(&target.info.gr(), target.ns(), name)
        .map(|live| meta_str(live, "resourceVersion").to_string());
    let obj = commit(&mut state, dry, live_rv.as_deref(), |state| {
        state.delete(&target.info, target.ns(), name, &options)
    })?;
    drop(state);
    let answer = crate::cluster::delete_answer(&target.info.group, &target.info.plural, obj);
    if answer["kind"] == "Status" {
        return Ok(json_response(StatusCode::OK, &answer));
    }
    Ok(respond_object(call, StatusCode::OK, target, answer))
}

pub fn delete_collection(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let filter = Filter::new(
        &target.info,
        target.namespace.clone(),
        call.param("labelSelector"),
        call.param("fieldSelector"),
    )?;
    let options = crate::cluster::delete_options(&call.body)?;
    let in_body: Vec<&str> = options.dry_run.iter().map(String::as_str).collect();
    let dry = dry_run(call, "DeleteOptions")? || dry_run_values(&in_body, "DeleteOptions")?;
    let gr = target.info.gr();
    let mut state = call.cluster.lock();
    let keys: Vec<(String, String)> = state
        .list(&gr, target.namespace.as_deref(), None)
        .filter(|(_, o)| filter.matches(o))
        .map(|(k, _)| k.clone())
        .collect();
    // Each object is deleted as the options ask, but for preconditions, which name one object.
    let each = crate::cluster::DeleteOptions {
        resource_version: None,
        uid: None,
        ..options.clone()
    };
    let delete_all = |state: &mut State| -> Result<Vec<Value>, ApiError> {
        keys.iter()
            .map(|(ns, name)| state.delete(&target.info, ns, name, &each))
            .collect()
    };
    let items = if dry {
        state.dry_run(delete_all)?
    } else {
        delete_all(&mut state)?
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_body_under_yamls_media_type_reads_as_the_yaml_parser_reads_it() {
        let bodies: [&[u8]; 17] = [
            br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}}"#,
            br#"{"a": 1, "a": 2}"#,
            br#"{"n": [0, -0, 1.0, 1e3, -1.5E-3, 18446744073709551615, -9223372036854775808]}"#,
            br#"{"s": "\u00e9\/\"\\\n\t", "e": "", "z": null, "t": true, "f": false}"#,
            br#"{"s": "\ud83d\ude00"}"#,
            br#"{"s": "\/"}"#,
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"a: b\n- c"}}"#,
            br#"{"big": 1e400, "x": 1}"#,
            br##"{"k": "#not a comment", "n": 007}"##,
            b"\t{\"tab\":\t1}\n",
            br#"{"nested": {"list": [{"b": [[]]}, {}], "empty": {}}}"#,
            br#"{"a": 1,}"#,
            br#"{"a": 1} trailing"#,
            br#"{"a": 1} {"b": 2}"#,
            br#"{a: 1}"#,
            br#"{"a": 'x'}"#,
            b"{\"a\": \"\xff\"}",
        ];
        for body in bodies {
            let yaml = serde_yaml::from_slice::<Value>(body).ok();
            let read = yaml_body(body).ok();
            assert_eq!(read, yaml, "{}", String::from_utf8_lossy(body));
        }
        // and the JSON parser does read what clients send
        let applied = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"load-000001"},"data":{"n":"-0.5"}}"#;
        assert!(json_reads_as_yaml(applied));
        assert!(!json_reads_as_yaml(br#"{"n": [1, -0]}"#));
        assert!(!json_reads_as_yaml(br#"{"n":-0}"#));
    }
}
