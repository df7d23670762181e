//! Integration tests of the Kubernetes API test server, driven by kube-rs and the real kubectl binary.

mod testserver {
    pub mod auth;
    pub mod client;
    pub mod crd;
    pub mod faults;
    pub mod kubectl;
    pub mod ssa;
    pub mod support;
    pub mod watch;
}
