//! The Kubernetes adapter of sluice: clients built from kubeconfigs exactly as for a real API
//! server, level-based watches of any kind, and server-side apply. It holds no policy: what
//! to watch and what to write is decided by the services. `reachability` tells readiness
//! whether the API server answers.

pub mod apply;
pub mod client;
pub mod manifest;
pub mod reachability;
pub mod watch;

mod error;

pub use error::{Error, Result};
