//! Test support: real nats-server processes, spawned workspace binaries, polling with deadlines.
//!
//! Everything here starts real processes; nothing is mocked. It deliberately holds no sluice
//! domain knowledge (streams, subjects, resources): tests build that on top.

mod nats;
mod paths;
mod process;
mod wait;

pub use nats::NatsServer;
pub use paths::{bin_path, free_port, repo_root, try_bin_path};
pub use process::ServiceProcess;
pub use wait::{wait_for, Probe};
