//! Integration tests of the Kubernetes API test server, driven by kube-rs and the real kubectl binary.

mod testserver {
    pub mod auth;
    pub mod client;
    pub mod conversion;
    pub mod crd;
    pub mod crd_examples;
    pub mod crd_facts;
    pub mod explain;
    pub mod faults;
    pub mod gc;
    pub mod http2;
    pub mod kubectl;
    pub mod kubectl_typed;
    pub mod patch;
    pub mod rollout;
    pub mod ssa;
    pub mod strategies;
    pub mod support;
    pub mod validation;
    pub mod watch;
}
