//! The audit log of one cluster: method, path and query of the latest requests, oldest first,
//! as a real API server's audit log records them, so that tests can check which requests a
//! client made (for example that it never listed a kind cluster-wide), and the requests the
//! authorizer refused, with who made them and why.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// How many requests a cluster remembers.
const CAPACITY: usize = 20_000;

/// One request as the server received it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AuditEntry {
    pub method: String,
    /// The path below the cluster's base path, e.g. `/api/v1/namespaces/ns/secrets`.
    pub path: String,
    /// The raw query string, empty when there is none.
    pub query: String,
}

/// A request the authorizer refused, with the message its 403 carried.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Denial {
    pub user: String,
    pub method: String,
    pub path: String,
    pub message: String,
}

/// Handle to one cluster's audit log; cheap to clone.
#[derive(Clone, Default)]
pub struct Audit {
    entries: Arc<Mutex<VecDeque<AuditEntry>>>,
    denials: Arc<Mutex<VecDeque<Denial>>>,
}

impl Audit {
    pub(crate) fn record(&self, method: &str, path: &str, query: Option<&str>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() == CAPACITY {
            entries.pop_front();
        }
        entries.push_back(AuditEntry {
            method: method.to_string(),
            path: path.to_string(),
            query: query.unwrap_or("").to_string(),
        });
    }

    pub(crate) fn record_denial(&self, denial: Denial) {
        let mut denials = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        if denials.len() == CAPACITY {
            denials.pop_front();
        }
        denials.push_back(denial);
    }

    /// Every remembered 403, oldest first.
    pub fn denials(&self) -> Vec<Denial> {
        let denials = self.denials.lock().unwrap_or_else(|e| e.into_inner());
        denials.iter().cloned().collect()
    }

    /// Every remembered request, oldest first.
    pub fn entries(&self) -> Vec<AuditEntry> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.iter().cloned().collect()
    }
}
