//! Errors: `ApiError` is an HTTP failure rendered as a Kubernetes `Status` object; `Error` is this crate's startup error.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::field_error::{aggregate, go_quote, FieldError};
use crate::resources::ResourceInfo;

/// `Kind.group`, or `Kind` for the core group: how apiserver names a kind in messages.
fn qualified_kind(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// Failures starting or driving the test server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to bind {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to set up TLS for {addr}: {message}")]
    Tls {
        addr: std::net::SocketAddr,
        message: String,
    },
    #[error("failed to load manifests from {path}")]
    Load {
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to mint a token for ServiceAccount {service_account} in cluster {cluster}: {message}")]
    Token {
        cluster: String,
        service_account: String,
        message: String,
    },
    #[error("failed to load object {what} into cluster {cluster}: {message}")]
    Seed {
        cluster: String,
        what: String,
        message: String,
    },
    #[error("failed to start the test server's own runtime")]
    Runtime(#[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An API failure as the real server reports it: an HTTP code plus a `Status` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, info: &ResourceInfo, name: &str) -> ApiError {
        self.details = Some(json!({"name": name, "group": info.group, "kind": info.plural}));
        self
    }

    pub fn not_found(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", info.qualified()),
        )
        .with_details(info, name)
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", info.qualified()),
        )
        .with_details(info, name)
    }

    pub fn conflict(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                info.qualified()
            ),
        )
        .with_details(info, name)
    }

    /// `422 Invalid` with one cause; `detail` is the message after the field (`Invalid value: ...`).
    pub fn invalid(
        info: &ResourceInfo,
        name: &str,
        field: &str,
        detail: impl Into<String>,
    ) -> ApiError {
        let detail = detail.into();
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {field}: {detail}",
                qualified_kind(&info.group, &info.kind)
            ),
        );
        e.details = Some(json!({"name": name, "group": info.group, "kind": info.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}]}));
        e
    }

    /// `422 Invalid` listing every field error, as apiserver's `NewInvalid` builds it.
    pub fn invalid_fields(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> ApiError {
        let qualified = qualified_kind(group, kind);
        let message = if errors.is_empty() {
            format!("{qualified} {} is invalid", go_quote(name))
        } else {
            format!(
                "{qualified} {} is invalid: {}",
                go_quote(name),
                aggregate(errors)
            )
        };
        let mut details = serde_json::Map::new();
        if !name.is_empty() {
            details.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            details.insert("group".into(), json!(group));
        }
        if !kind.is_empty() {
            details.insert("kind".into(), json!(kind));
        }
        details.insert(
            "causes".into(),
            Value::Array(errors.iter().map(FieldError::cause).collect()),
        );
        let mut e = ApiError::new(422, "Invalid", message);
        e.details = Some(Value::Object(details));
        e
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn page_not_found() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // An error apiserver did not classify has no reason (`StatusReasonUnknown` is omitted).
        if self.reason.is_empty() {
            if let Value::Object(m) = &mut v {
                m.remove("reason");
            }
        }
        if let (Some(d), Value::Object(m)) = (&self.details, &mut v) {
            m.insert("details".into(), d.clone());
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        crate::api::json_response(code, &self.status())
    }
}
