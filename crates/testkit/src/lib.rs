//! Test support: real nats-server processes, spawned workspace binaries, polling with deadlines,
//! a throwaway certificate authority, reading a process's metrics, an OTLP trace receiver.
//!
//! Everything here starts real processes; nothing is mocked. It deliberately holds no sluice
//! domain knowledge (streams, subjects, resources): tests build that on top.

mod metrics;
mod nats;
mod orphans;
mod otlp;
mod paths;
mod process;
mod tls;
mod wait;

pub use metrics::series;
pub use nats::{urls as nats_urls, NatsCluster, NatsServer, NATS_SERVER_ENV};
pub use orphans::die_with_parent;
pub use otlp::{OtlpReceiver, ReceivedSpan};
pub use paths::{bin_path, free_port, profile_dir, repo_root, try_bin_path};
pub use process::{send_signal, ServiceProcess, TERMINATE_GRACE};
pub use tls::{Issued, TestCa};
pub use wait::{wait_for, Probe};
