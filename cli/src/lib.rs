//! The library behind the `sluice` command: the local stack (NATS, the API test server and the
//! five services as separate processes), the pipeline tap, the demo and its measurements, and
//! the setup job of docker-compose.yml. The whole-stack tests drive the same [`stack::Stack`]
//! the demo runs. The watcher serves the CRD conversion webhook (`webhook`), so v1alpha1 objects
//! are converted as on a real cluster. The stack's bus runs with TLS and a NATS identity per
//! service, with the permissions generated from the topology (`natsauth`, `sluice nats-config`).

pub mod cloudevents;
pub mod demo;
pub mod dryrun;
pub mod examples;
pub mod fleet;
pub mod load;
pub mod natsauth;
pub mod setup;
pub mod stack;
pub mod tap;
pub mod webhook;
