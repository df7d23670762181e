//! The repository's examples (`examples/`), each the seed's own YAML, compiled in: the demo
//! applies seed 000's first, the CloudEvent measurement seed 004's, and the tests every one.

/// Seed 000, first example: one NetworkPolicy per Service labelled `sveltos: fv`.
pub mod seed_000_networkpolicy {
    pub const EVENT_SOURCE: &str =
        include_str!("../../examples/seed-000-networkpolicy/eventsource.yaml");
    pub const EVENT_BASED_ADDON: &str =
        include_str!("../../examples/seed-000-networkpolicy/eventbasedaddon.yaml");
    pub const SERVICE: &str = include_str!("../../examples/seed-000-networkpolicy/service.yaml");
}

/// Seed 000: one Ingress for all https Services in `eng` (`oneForEvent: false`).
pub mod seed_000_ingress {
    pub const EVENT_SOURCE: &str = include_str!("../../examples/seed-000-ingress/eventsource.yaml");
    pub const EVENT_BASED_ADDON: &str =
        include_str!("../../examples/seed-000-ingress/eventbasedaddon.yaml");
}

/// Seed 000: one HTTPRoute per Service.
pub mod seed_000_httproute {
    pub const EVENT_SOURCE: &str =
        include_str!("../../examples/seed-000-httproute/eventsource.yaml");
    pub const EVENT_BASED_ADDON: &str =
        include_str!("../../examples/seed-000-httproute/eventbasedaddon.yaml");
}

/// Seed 001: a ConfigMap generator and `templateResourceRefs` replicating credentials.
pub mod seed_001 {
    pub const EVENT_SOURCE: &str =
        include_str!("../../examples/seed-001-credentials/eventsource.yaml");
    pub const EVENT_TRIGGER: &str =
        include_str!("../../examples/seed-001-credentials/eventtrigger.yaml");
    pub const CONFIG_MAPS: &str =
        include_str!("../../examples/seed-001-credentials/configmaps.yaml");
}

/// Seed 003: a LoadBalancer Service becomes a Service and Endpoints in the `dep=eng` clusters.
pub mod seed_003 {
    pub const EVENT_SOURCE: &str =
        include_str!("../../examples/seed-003-cross-cluster/eventsource.yaml");
    pub const EVENT_TRIGGER: &str =
        include_str!("../../examples/seed-003-cross-cluster/eventtrigger.yaml");
    pub const WORKLOAD: &str = include_str!("../../examples/seed-003-cross-cluster/workload.yaml");
}

/// Seed 004: a CloudEvent over NATS/JetStream creates and deletes a Namespace.
pub mod seed_004 {
    /// The EventSource, the EventTrigger and the ConfigMap.
    pub const CONFIG: &str = include_str!("../../examples/seed-004-cloudevents/eventtrigger.yaml");
    pub const NATS_SECRET: &str =
        include_str!("../../examples/seed-004-cloudevents/sveltos-nats-secret.yaml");
    pub const LOGIN: &str = include_str!("../../examples/seed-004-cloudevents/login.json");
    pub const LOGOUT: &str = include_str!("../../examples/seed-004-cloudevents/logout.json");
}
