//! Admin endpoints under `/admin`: list, add and remove clusters, read and set faults, kubeconfigs
//! (administrator of every cluster, or a ServiceAccount of one). They are the test harness's and
//! need no token.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use super::Shared;
use crate::error::ApiError;
use crate::faults::FaultRequest;

pub fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/admin/clusters", get(list).post(add))
        .route("/admin/clusters/{name}", axum::routing::delete(remove))
        .route(
            "/admin/clusters/{name}/faults",
            post(set_faults).get(get_faults),
        )
        .route("/admin/kubeconfig", get(kubeconfig_all))
        .route(
            "/admin/clusters/{name}/serviceaccounts/{namespace}/{account}/kubeconfig",
            post(service_account_kubeconfig),
        )
        .route("/healthz", get(|| async { "ok" }))
}

#[derive(serde::Deserialize)]
struct AddCluster {
    name: String,
}

async fn list(State(shared): State<Arc<Shared>>) -> Response {
    Json(json!({"clusters": shared.names()})).into_response()
}

async fn add(State(shared): State<Arc<Shared>>, Json(req): Json<AddCluster>) -> Response {
    match shared.add(&req.name) {
        Ok(()) => (StatusCode::CREATED, Json(json!({"name": req.name}))).into_response(),
        Err(e) => ApiError::new(500, "InternalError", e.to_string()).into_response(),
    }
}

async fn remove(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    if shared.cluster(&name).is_none() {
        return ApiError::new(404, "NotFound", format!("cluster {name:?} not found"))
            .into_response();
    }
    shared.remove(&name);
    Json(json!({"removed": name})).into_response()
}

async fn set_faults(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Json(req): Json<FaultRequest>,
) -> Response {
    match shared.cluster(&name) {
        Some(c) => {
            // Before the drop the same request may ask for: watches then resume from before it.
            if req.compact {
                c.lock().compact();
            }
            c.faults.apply(&req);
            Json(c.faults.settings()).into_response()
        }
        None => {
            ApiError::new(404, "NotFound", format!("cluster {name:?} not found")).into_response()
        }
    }
}

async fn get_faults(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    match shared.cluster(&name) {
        Some(c) => Json(c.faults.settings()).into_response(),
        None => {
            ApiError::new(404, "NotFound", format!("cluster {name:?} not found")).into_response()
        }
    }
}

async fn kubeconfig_all(State(shared): State<Arc<Shared>>) -> Response {
    (
        [("content-type", "application/yaml")],
        shared.kubeconfig(&shared.admin_credentials(&shared.names())),
    )
        .into_response()
}

/// Mints a token for an existing ServiceAccount and answers a kubeconfig that uses it.
async fn service_account_kubeconfig(
    State(shared): State<Arc<Shared>>,
    Path((name, namespace, account)): Path<(String, String, String)>,
) -> Response {
    if shared.cluster(&name).is_none() {
        return ApiError::new(404, "NotFound", format!("cluster {name:?} not found"))
            .into_response();
    }
    match shared.service_account_kubeconfig(&name, &namespace, &account) {
        Ok(yaml) => (
            StatusCode::CREATED,
            [("content-type", "application/yaml")],
            yaml,
        )
            .into_response(),
        Err(e) => ApiError::new(404, "NotFound", e.to_string()).into_response(),
    }
}
