//! Kubernetes API test server: many clusters in one process, for tests and demos only, never production.
