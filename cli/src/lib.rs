//! The library behind the `sluice` command: the local stack (NATS, the API test server and the
//! five services as separate processes), the pipeline tap, the demo, and the setup job of docker-compose.yml. The whole-stack tests
//! drive the same [`stack::Stack`] the demo runs.

pub mod cloudevents;
pub mod demo;
pub mod fleet;
pub mod load;
pub mod setup;
pub mod stack;
pub mod tap;
