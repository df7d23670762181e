//! The Kubernetes adapter: clients from kubeconfigs, dynamic watches and server-side apply.
