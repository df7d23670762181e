//! Admin endpoints under `/admin`: list, add and remove clusters, read and set faults, kubeconfigs.

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
        shared.kubeconfig(&shared.names()),
    )
        .into_response()
}
