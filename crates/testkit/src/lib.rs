//! Test support: starts real nats-server processes and the API test server for integration tests.
