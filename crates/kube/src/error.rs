//! Errors of the Kubernetes adapter.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid kubeconfig")]
    Kubeconfig {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("failed to read kubeconfig {path}")]
    ReadKubeconfig {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kind {gvk} is not served")]
    UnknownKind {
        gvk: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("failed to {verb} {kind} {name}")]
    Request {
        verb: &'static str,
        kind: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("object has no {0}")]
    Malformed(&'static str),
    /// An apply reached an object that is being deleted: the write is stored, but the object
    /// goes once its finalizers are removed, so what was applied does not stay.
    #[error(
        "{kind} {name} is being deleted (finalizers: {}): it is written again once it is gone",
        finalizers.join(", ")
    )]
    Terminating {
        kind: String,
        name: String,
        finalizers: Vec<String>,
    },
}

impl Error {
    /// Whether the API server answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Request { source, .. }
            if matches!(source.as_ref(), kube::Error::Api(status) if status.code == 404))
    }

    /// Whether retrying the same request later can succeed: the server is busy or unreachable,
    /// a conflict, or something the operator fixes without changing the request (401 an
    /// expired token, 403 a missing RBAC grant, 404 a namespace or CRD not there yet), as a
    /// Kubernetes controller requeues them. What the request itself gets wrong (400, 422) and
    /// an object too large to store never succeed by waiting. An object being deleted is gone
    /// once its finalizers let it go, and can be written anew then.
    pub fn is_transient(&self) -> bool {
        if self.is_too_large() {
            return false;
        }
        match self {
            Error::Terminating { .. } => true,
            Error::Request { source, .. } | Error::UnknownKind { source, .. } => {
                match source.as_ref() {
                    kube::Error::Api(status) => {
                        matches!(status.code, 401 | 403 | 404 | 409 | 429) || status.code >= 500
                    }
                    _ => true,
                }
            }
            _ => false,
        }
    }

    /// Whether the API server refused the object for its size: 413 for a request body over
    /// its limit, or etcd's "request is too large" (passed on as a 500) for a stored object.
    pub fn is_too_large(&self) -> bool {
        matches!(self, Error::Request { source, .. }
            if matches!(source.as_ref(), kube::Error::Api(status)
                if status.code == 413 || status.message.contains("request is too large")))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
