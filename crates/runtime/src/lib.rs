//! Process kit shared by the services: telemetry, shutdown, health endpoint.
