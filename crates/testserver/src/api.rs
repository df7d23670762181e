//! The Kubernetes API under `/clusters/<name>/`: fault gate, authentication and authorization
//! (`auth`), discovery, and resource requests (get, list, watch, create, replace, patch, apply,
//! delete) dispatched to one cluster's state.

mod scale;
mod write;

pub(crate) use scale::scales;
pub(crate) use write::body_json;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::cluster::Cluster;
use crate::error::ApiError;
use crate::query::{ContinueToken, Filter};
use crate::resources::{GroupResource, ResourceInfo};
use crate::server::Shared;
use crate::{openapi, table, watch};

/// The largest request body apiserver reads (`--max-request-bytes` of the generic server, 3 MiB).
pub const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

fn request_too_large() -> ApiError {
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {MAX_REQUEST_BYTES}"),
    )
}

/// A JSON response with the given status.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [("content-type", "application/json")], bytes).into_response()
}

/// One parsed API request.
pub(crate) struct Call {
    pub cluster: Arc<Cluster>,
    pub method: Method,
    pub query: HashMap<String, String>,
    pub headers: HeaderMap,
    pub body: axum::body::Bytes,
    /// The path the cluster's API is under for this client: `/clusters/<name>`, or empty on the
    /// cluster's own port.
    pub base: String,
    /// Who is asking, as the authenticator established it.
    pub user: crate::auth::UserInfo,
}

/// Marks a request that arrived on a cluster's own port (`Config::port_per_cluster`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AtRoot;

impl Call {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.param(key), Some("true" | "1"))
    }

    pub fn header(&self, key: &str) -> &str {
        self.headers
            .get(key)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The field manager of a write: `fieldManager`, else the client's user-agent name.
    pub fn manager(&self) -> String {
        if let Some(m) = self.param("fieldManager") {
            return m.to_string();
        }
        let ua = self
            .header("user-agent")
            .split('/')
            .next()
            .unwrap_or("")
            .trim();
        if ua.is_empty() {
            "unknown".into()
        } else {
            ua.to_string()
        }
    }
}

/// What a resource URL names.
pub(crate) struct Target {
    pub info: ResourceInfo,
    pub version: String,
    /// The URL's namespace; `None` for cluster-scoped kinds and all-namespace lists.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub status: bool,
    /// The URL names the `scale` subresource.
    pub scale: bool,
    /// Where conversion webhook Services are reached.
    pub services: crate::conversion::ServiceUrls,
}

impl Target {
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    /// The stored object as returned for this URL's version (converted by the CRD's conversion
    /// strategy), defaulted by that version's schema.
    pub fn present(&self, obj: Value) -> Result<Value, ApiError> {
        Ok(self.present_all(vec![obj])?.pop().unwrap_or_default())
    }

    /// [`Target::present`] for many objects, converted in one review.
    pub fn present_all(&self, objects: Vec<Value>) -> Result<Vec<Value>, ApiError> {
        let mut objects =
            crate::conversion::convert(&self.info, &self.services, objects, &self.version)?;
        for obj in objects.iter_mut().filter(|o| o.is_object()) {
            obj["apiVersion"] = json!(self.info.api_version(&self.version));
            obj["kind"] = json!(self.info.kind);
            crate::schema::default_on_read(&self.info.schemas, &self.version, obj);
        }
        Ok(objects)
    }

    /// A written object (decoded in the URL's version) as it is stored: with a conversion
    /// webhook, validated against the written version's schema, converted to the storage
    /// version, then pruned and defaulted by the storage version's schema (which validates it
    /// when it is stored). Other kinds are stored as written.
    pub fn to_storage(&self, obj: Value) -> Result<Value, ApiError> {
        let storage = &self.info.storage_version;
        if !matches!(
            self.info.conversion,
            crate::conversion::Strategy::Webhook(_)
        ) || &self.version == storage
        {
            return Ok(obj);
        }
        if let Some(schema) = self.info.schema(&self.version) {
            let errors = crate::schema::validate(schema, &obj, None);
            if !errors.is_empty() {
                return Err(ApiError::invalid_fields(
                    &self.info.group,
                    &self.info.kind,
                    crate::object::meta_str(&obj, "name"),
                    &errors,
                ));
            }
        }
        let mut stored =
            crate::conversion::convert(&self.info, &self.services, vec![obj], storage)?
                .pop()
                .unwrap_or_default();
        crate::admission::decode(
            &self.info,
            storage,
            &mut stored,
            Vec::new(),
            crate::admission::Directive::Ignore,
            crate::admission::Verb::Update,
        )?;
        Ok(stored)
    }
}

/// Entry point for every `/clusters/...` request.
pub async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let Some(rest) = path.strip_prefix("/clusters/") else {
        return ApiError::page_not_found().into_response();
    };
    let (name, sub) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(cluster) = shared.cluster(name) else {
        return ApiError::new(
            404,
            "NotFound",
            format!("cluster {name:?} is not served by this test server"),
        )
        .into_response();
    };
    cluster
        .audit
        .record(req.method().as_str(), &format!("/{sub}"), req.uri().query());
    let faults = cluster.faults.clone();
    if faults.unreachable() {
        return ApiError::new(
            503,
            "ServiceUnavailable",
            format!("cluster {name} is unreachable (injected fault)"),
        )
        .into_response();
    }
    if let Some(latency) = faults.latency() {
        tokio::time::sleep(latency).await;
    }
    if let Some(code) = faults.injected_error() {
        let reason = match code {
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            _ => "InternalError",
        };
        let mut resp = ApiError::new(code, reason, format!("injected fault on cluster {name}"))
            .into_response();
        if code == 429 {
            resp.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        return resp;
    }
    let query = Query::<HashMap<String, String>>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let user = match crate::auth::admit(&cluster, req.method().as_str(), sub, &query, req.headers())
    {
        Ok(user) => user,
        Err(e) => return e.into_response(),
    };
    let method = req.method().clone();
    let headers = req.headers().clone();
    let base = if req.extensions().get::<AtRoot>().is_some() {
        String::new()
    } else {
        format!("/clusters/{name}")
    };
    let too_large = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_REQUEST_BYTES);
    if too_large {
        return request_too_large().into_response();
    }
    let body = match axum::body::to_bytes(req.into_body(), MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            // A body that outgrows the limit without a Content-Length ends up here as well.
            if std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("length limit"))
            {
                return request_too_large().into_response();
            }
            return ApiError::bad_request(format!("failed to read request body: {e}"))
                .into_response();
        }
    };
    let call = Call {
        cluster,
        method,
        query,
        headers,
        body,
        base,
        user,
    };
    let sub = sub.trim_end_matches('/').to_string();
    if let Some(answer) = crate::auth::serve(&call, &sub, &call.user) {
        return answer.unwrap_or_else(|e| e.into_response());
    }
    match route(&call, &sub) {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

fn route(call: &Call, path: &str) -> Result<Response, ApiError> {
    let mut segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // OpenAPI index URLs carry the cluster prefix; tolerate clients that join it onto the base path again.
    if segs.len() >= 2 && segs[0] == "clusters" && segs[1] == call.cluster.name {
        segs.drain(..2);
    }
    let ok = |v: Value| Ok(json_response(StatusCode::OK, &v));
    match segs.as_slice() {
        ["version"] => ok(json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-sluice-testserver", "gitCommit": "", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "n/a", "compiler": "rustc", "platform": "linux/amd64",
        })),
        ["healthz" | "livez" | "readyz"] => Ok((StatusCode::OK, "ok").into_response()),
        ["api"] => ok(call.cluster.lock().registry.core_versions()),
        ["apis"] => ok(call.cluster.lock().registry.group_list()),
        ["api", "v1"] => call
            .cluster
            .lock()
            .registry
            .resource_list("", "v1")
            .map(|v| json_response(StatusCode::OK, &v))
            .ok_or_else(ApiError::page_not_found),
        ["apis", g] => call
            .cluster
            .lock()
            .registry
            .group(g)
            .map(|v| json_response(StatusCode::OK, &v))
            .ok_or_else(ApiError::page_not_found),
        ["apis", g, v] => call
            .cluster
            .lock()
            .registry
            .resource_list(g, v)
            .map(|v| json_response(StatusCode::OK, &v))
            .ok_or_else(ApiError::page_not_found),
        ["openapi", "v3"] => {
            let state = call.cluster.lock();
            ok(openapi::root(
                &call.base,
                &state.registry,
                state.resource_version(),
            ))
        }
        ["openapi", "v3", "api", v] => openapi_group_version(call, "", v),
        ["openapi", "v3", "apis", g, v] => openapi_group_version(call, g, v),
        ["api", "v1", rest @ ..] => resource(call, "", "v1", rest),
        ["apis", g, v, rest @ ..] => resource(call, g, v, rest),
        _ => Err(ApiError::page_not_found()),
    }
}

/// `GET /openapi/v3/<gv>`, with the schemas of the CRDs stored in this cluster.
fn openapi_group_version(call: &Call, group: &str, version: &str) -> Result<Response, ApiError> {
    let state = call.cluster.lock();
    let crds: GroupResource = (
        "apiextensions.k8s.io".into(),
        "customresourcedefinitions".into(),
    );
    openapi::group_version(
        &state.registry,
        |name| state.get(&crds, "", name),
        group,
        version,
    )
    .map(|v| json_response(StatusCode::OK, &v))
    .ok_or_else(ApiError::page_not_found)
}

fn resolve(call: &Call, group: &str, version: &str, segs: &[&str]) -> Result<Target, ApiError> {
    let namespaced_form = segs.len() >= 3
        && segs[0] == "namespaces"
        && !(segs.len() == 3 && matches!(segs[2], "status" | "finalize"));
    let (namespace, rest) = if namespaced_form {
        (Some(segs[1].to_string()), &segs[2..])
    } else {
        (None, segs)
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(n.to_string()), None),
        [p, n, s] => (*p, Some(n.to_string()), Some(*s)),
        _ => return Err(ApiError::page_not_found()),
    };
    let info = call
        .cluster
        .lock()
        .registry
        .lookup(group, version, plural)
        .cloned()
        .ok_or_else(ApiError::page_not_found)?;
    if namespace.is_some() && !info.namespaced {
        return Err(ApiError::page_not_found());
    }
    if info.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::page_not_found());
    }
    let (status, scale) = match sub {
        None => (false, false),
        Some("status") if info.status => (true, false),
        Some("scale") if info.crd.is_none() && scale::scales(&info.group, &info.kind) => {
            (false, true)
        }
        Some("finalize") if info.kind == "Namespace" => (false, false),
        Some(_) => return Err(ApiError::page_not_found()),
    };
    Ok(Target {
        info,
        version: version.to_string(),
        namespace,
        name,
        status,
        scale,
        services: call.cluster.webhook_services.clone(),
    })
}

fn resource(call: &Call, group: &str, version: &str, segs: &[&str]) -> Result<Response, ApiError> {
    let target = resolve(call, group, version, segs)?;
    if target.scale {
        return scale::serve(call, &target);
    }
    let m = &call.method;
    match (&target.name, m) {
        (None, &Method::GET) if call.flag("watch") => watch_call(call, target),
        (None, &Method::GET) => list(call, &target),
        (Some(_), &Method::GET) => get(call, &target),
        (None, &Method::POST) => write::create(call, &target),
        (Some(_), &Method::PUT) => write::replace(call, &target),
        (Some(_), &Method::PATCH) => write::patch(call, &target),
        (Some(_), &Method::DELETE) => write::delete(call, &target),
        (None, &Method::DELETE) => write::delete_collection(call, &target),
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {m}"),
        )),
    }
}

pub(crate) fn respond_object(
    call: &Call,
    code: StatusCode,
    target: &Target,
    obj: Value,
) -> Response {
    let accept = call.header("accept");
    let obj = match target.present(obj) {
        Ok(obj) => obj,
        Err(e) => return e.into_response(),
    };
    if table::wants_table(accept) {
        let t = table::table(
            &target.info.group,
            &target.info.kind,
            &[obj],
            json!({}),
            call.param("includeObject").unwrap_or("Metadata"),
        );
        return json_response(code, &t);
    }
    match table::wants_partial(accept) {
        Some(table::Partial::Object) => json_response(code, &table::partial(&obj)),
        Some(asked) => table::partial_not_acceptable(asked).into_response(),
        None => json_response(code, &obj),
    }
}

fn get(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let name = target.name.as_deref().unwrap_or("");
    let obj = call
        .cluster
        .lock()
        .get(&target.info.gr(), target.ns(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&target.info, name))?;
    Ok(respond_object(call, StatusCode::OK, target, obj))
}

fn list(call: &Call, target: &Target) -> Result<Response, ApiError> {
    let filter = Filter::new(
        &target.info,
        target.namespace.clone(),
        call.param("labelSelector"),
        call.param("fieldSelector"),
    )?;
    let limit: usize = match call.param("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        None => 0,
    };
    let token = call
        .param("continue")
        .map(ContinueToken::decode)
        .transpose()?;
    let after = token.as_ref().map(ContinueToken::key);
    let state = call.cluster.lock();
    let rv = token
        .as_ref()
        .map(|t| t.rv)
        .unwrap_or_else(|| state.resource_version());
    let mut items = Vec::new();
    let mut more = false;
    // Later pages show the objects as they were when the first one was served.
    state
        .visit_at(
            &target.info.gr(),
            target.namespace.as_deref(),
            after.as_ref(),
            rv,
            |obj| {
                if !filter.matches(obj) {
                    return true;
                }
                if limit > 0 && items.len() == limit {
                    more = true;
                    return false;
                }
                items.push(obj.clone());
                true
            },
        )
        .map_err(|_| ApiError::gone(EXPIRED_CONTINUE))?;
    drop(state);
    let items = target.present_all(items)?;
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if more {
        if let Some(last) = items.last() {
            let namespace = last
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let name = last
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            meta["continue"] = json!(ContinueToken {
                rv,
                namespace,
                name
            }
            .encode());
        }
    }
    if table::wants_table(call.header("accept")) {
        return Ok(json_response(
            StatusCode::OK,
            &table::table(
                &target.info.group,
                &target.info.kind,
                &items,
                meta,
                call.param("includeObject").unwrap_or("Metadata"),
            ),
        ));
    }
    match table::wants_partial(call.header("accept")) {
        Some(table::Partial::List) => {
            return Ok(json_response(
                StatusCode::OK,
                &table::partial_list(&items, meta),
            ))
        }
        Some(asked) => return Err(table::partial_not_acceptable(asked)),
        None => {}
    }
    let body = json!({
        "kind": format!("{}List", target.info.kind),
        "apiVersion": target.info.api_version(&target.version),
        "metadata": meta,
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// kube-apiserver's answer to a `continue` token whose snapshot is no longer retained.
const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.";

fn watch_call(call: &Call, target: Target) -> Result<Response, ApiError> {
    let filter = Filter::new(
        &target.info,
        target.namespace.clone(),
        call.param("labelSelector"),
        call.param("fieldSelector"),
    )?;
    let timeout = match call.param("timeoutSeconds") {
        Some(t) => Some(std::time::Duration::from_secs(t.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
        })?)),
        None => None,
    };
    let params = watch::WatchParams {
        resource_version: call.param("resourceVersion").map(str::to_string),
        bookmarks: call.flag("allowWatchBookmarks"),
        send_initial_events: call.flag("sendInitialEvents"),
        timeout,
        table: table::wants_table(call.header("accept")).then(|| {
            call.param("includeObject")
                .unwrap_or("Metadata")
                .to_string()
        }),
        partial: match table::wants_partial(call.header("accept")) {
            Some(table::Partial::Object) => true,
            Some(asked) => return Err(table::partial_not_acceptable(asked)),
            None => false,
        },
    };
    watch::serve(call.cluster.clone(), target, filter, params)
}
