//! The library behind the `sluice` command: the local stack (NATS, the API test server and the
//! five services as separate processes), the pipeline tap, and the demo. The whole-stack tests
//! drive the same [`stack::Stack`] the demo runs. The watcher serves the CRD conversion webhook
//! (`webhook`), so v1alpha1 objects are converted as on a real cluster.

pub mod cloudevents;
pub mod demo;
pub mod fleet;
pub mod load;
pub mod stack;
pub mod tap;
pub mod webhook;
