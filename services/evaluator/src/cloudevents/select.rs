//! The pure CloudEvent stage: for one received CloudEvent, which EventSources deployed to its
//! cluster select it (their `messagingMatchCriteria`), as one `CloudEventMatch` each. No IO.

use std::collections::BTreeMap;

use sluice_domain::cloudevent::{self, CloudEvent, CloudEventError};
use sluice_domain::cluster::ClusterId;
use sluice_domain::config::ConfigState;
use sluice_domain::eventsource::EventSource;
use sluice_proto::v1 as pb;
use sluice_wire::ConfigUpdate;

/// Why a received message cannot be matched. Permanent: the message is rejected.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("cloudevent has no valid cluster")]
    Cluster(#[source] sluice_wire::Error),
    #[error("cloudevent from {cluster} is invalid")]
    Event {
        cluster: ClusterId,
        #[source]
        source: CloudEventError,
    },
}

/// The origin of a received event without one (from a watcher that does not place events):
/// `SLUICE_CLOUDEVENTS`, followed by `:<created>` once the selector knows when that stream was
/// made ([`CloudEventSelector::set_stream_created`]).
pub const CLOUDEVENTS_ORIGIN: &str = "sluice:cloudevents";

/// The configuration, and per cluster the EventSources with messaging criteria deployed there.
#[derive(Debug)]
pub struct CloudEventSelector {
    config: ConfigState,
    deployed: BTreeMap<ClusterId, Vec<String>>,
    /// The origin of the events that carry none ([`CLOUDEVENTS_ORIGIN`]).
    stream_origin: String,
}

impl Default for CloudEventSelector {
    fn default() -> CloudEventSelector {
        CloudEventSelector::new(ConfigState::default())
    }
}

impl CloudEventSelector {
    pub fn new(config: ConfigState) -> CloudEventSelector {
        let mut selector = CloudEventSelector {
            config,
            deployed: BTreeMap::new(),
            stream_origin: CLOUDEVENTS_ORIGIN.to_string(),
        };
        selector.reindex();
        selector
    }

    /// Names `SLUICE_CLOUDEVENTS`, the origin of events without one, with when it was made
    /// (Unix nanoseconds), so that the order of a stream made again is another.
    pub fn set_stream_created(&mut self, created: u64) {
        self.stream_origin = format!("{CLOUDEVENTS_ORIGIN}:{created}");
    }

    /// Where a received event's order is defined, and its place there (ADR 0049): the place
    /// the watcher gave it (a managed stream's sequence, a core subscription's order); one
    /// without is ordered as `SLUICE_CLOUDEVENTS` holds it, by `sequence`.
    fn origin(&self, received: &pb::CloudEventReceived, sequence: u64) -> (String, u64) {
        if received.origin.is_empty() {
            (self.stream_origin.clone(), sequence)
        } else {
            (received.origin.clone(), received.origin_position)
        }
    }

    /// Applies one configuration update.
    pub fn on_config(&mut self, update: &ConfigUpdate) {
        if update.apply_to(&mut self.config) {
            self.reindex();
        }
    }

    /// EventSources (by name) with messaging criteria that some EventTrigger deploys to `cluster`.
    pub fn deployed_to(&self, cluster: &ClusterId) -> &[String] {
        self.deployed.get(cluster).map_or(&[], Vec::as_slice)
    }

    /// One match per deployed EventSource whose criteria select the event; `sequence` is the
    /// stream sequence of the received message.
    pub fn select(
        &self,
        received: &pb::CloudEventReceived,
        sequence: u64,
    ) -> Result<Vec<pb::CloudEventMatch>, SelectError> {
        let cluster = sluice_wire::cluster_id(received.cluster.as_ref(), "cloudevent")
            .map_err(SelectError::Cluster)?;
        let event = cloudevent::parse_structured(&received.event_json).map_err(|source| {
            SelectError::Event {
                cluster: cluster.clone(),
                source,
            }
        })?;
        let (origin, origin_position) = self.origin(received, sequence);
        Ok(self
            .deployed_to(&cluster)
            .iter()
            .filter(|name| self.selects(name, &received.subject, &event))
            .map(|name| pb::CloudEventMatch {
                cluster: received.cluster.clone(),
                event_source: name.clone(),
                nats_subject: received.subject.clone(),
                event_json: received.event_json.clone(),
                source_sequence: sequence,
                origin: origin.clone(),
                origin_position,
            })
            .collect())
    }

    fn selects(&self, name: &str, nats_subject: &str, event: &CloudEvent) -> bool {
        self.event_source(name).is_some_and(|es| {
            cloudevent::matches_any(&es.spec.messaging_match_criteria, nats_subject, event)
        })
    }

    fn event_source(&self, name: &str) -> Option<&EventSource> {
        self.config.event_sources.get(name)?.as_ref().ok()
    }

    /// Deployments change only with the configuration, so they are indexed once per update
    /// rather than derived for every event.
    fn reindex(&mut self) {
        let mut deployed: BTreeMap<ClusterId, Vec<String>> = BTreeMap::new();
        let deployments = sluice_wire::names::deployments(&self.config);
        for (cluster, name) in deployments.into_keys() {
            let listens = self
                .event_source(&name)
                .is_some_and(|es| !es.spec.messaging_match_criteria.is_empty());
            if listens {
                deployed.entry(cluster).or_default().push(name);
            }
        }
        self.deployed = deployed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use sluice_domain::cluster::ClusterType;

    fn update(kind: &str, namespace: &str, name: &str, object: Value) -> ConfigUpdate {
        ConfigUpdate {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            object: Some(object),
            sequence: 1,
            ..ConfigUpdate::default()
        }
    }

    fn cluster(name: &str) -> ClusterId {
        ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "default".into(),
            name: name.into(),
        }
    }

    /// Seed 004's configuration on clusters `prod` (env: production) and `dev`, plus an
    /// EventSource listening on another subject and one with only resource selectors.
    fn selector() -> CloudEventSelector {
        let mut s = CloudEventSelector::default();
        for (name, env) in [("prod", "production"), ("dev", "dev")] {
            s.on_config(&update(
                "SveltosCluster",
                "default",
                name,
                json!({
                "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                "metadata": {"name": name, "namespace": "default", "labels": {"env": env}},
                "status": {"ready": true}}),
            ));
        }
        let sources = [
            (
                "user-operation",
                json!([{"subject": "user-operation", "cloudEventSource": "auth.example.com"}]),
            ),
            (
                "user-login",
                json!([{"subject": "user-login", "cloudEventSource": "auth.example.com/user-login"}]),
            ),
            ("logins-only", json!([{"cloudEventType": "\\.login$"}])),
        ];
        for (name, criteria) in sources {
            s.on_config(&update(
                "EventSource",
                "",
                name,
                json!({
                "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
                "metadata": {"name": name}, "spec": {"messagingMatchCriteria": criteria}}),
            ));
        }
        s.on_config(&update(
            "EventSource",
            "",
            "services",
            json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventSource",
            "metadata": {"name": "services"},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Service"}]}}),
        ));
        for (trigger, source) in [
            ("manage-namespace", "user-operation"),
            ("login", "user-login"),
            ("logins", "logins-only"),
            ("svc", "services"),
        ] {
            s.on_config(&update("EventTrigger", "", trigger, json!({
                "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
                "metadata": {"name": trigger},
                "spec": {"sourceClusterSelector": {"matchLabels": {"env": "production"}},
                         "eventSourceName": source, "oneForEvent": true,
                         "policyRefs": [{"name": "namespace", "namespace": "default", "kind": "ConfigMap"}]}})));
        }
        s
    }

    fn received(cluster_name: &str, subject: &str, event: Value) -> pb::CloudEventReceived {
        pb::CloudEventReceived {
            cluster: Some(sluice_wire::cluster_ref(&cluster(cluster_name))),
            subject: subject.into(),
            event_json: serde_json::to_vec(&event).expect("json"),
            ..Default::default()
        }
    }

    fn seed_event(event_type: &str) -> Value {
        json!({"specversion": "1.0", "type": event_type, "source": "auth.example.com",
               "id": "10001", "subject": "mgianluc", "datacontenttype": "application/json",
               "data": {"message": "User mgianluc login"}})
    }

    fn names(matches: &[pb::CloudEventMatch]) -> Vec<&str> {
        matches.iter().map(|m| m.event_source.as_str()).collect()
    }

    #[test]
    fn only_listening_event_sources_deployed_to_the_cluster_are_indexed() {
        let s = selector();
        assert_eq!(
            s.deployed_to(&cluster("prod")),
            ["logins-only", "user-login", "user-operation"]
        );
        assert!(s.deployed_to(&cluster("dev")).is_empty());
    }

    #[test]
    fn seed_004_login_and_logout_select_user_operation() {
        let s = selector();
        let login = received(
            "prod",
            "user-operation",
            seed_event("auth.example.com.login"),
        );
        let out = s.select(&login, 42).expect("valid");
        assert_eq!(names(&out), ["logins-only", "user-operation"]);
        let m = &out[1];
        assert_eq!(m.cluster, login.cluster);
        assert_eq!(m.nats_subject, "user-operation");
        assert_eq!(
            m.event_json, login.event_json,
            "the event passes through unchanged"
        );
        assert_eq!(m.source_sequence, 42);
        assert_eq!(
            (m.origin.as_str(), m.origin_position),
            (CLOUDEVENTS_ORIGIN, 42),
            "an event without an origin is ordered as the bus holds it"
        );
        let mut named = selector();
        named.set_stream_created(1_700_000_000_000_000_000);
        assert_eq!(
            named.select(&login, 42).expect("valid")[1].origin,
            "sluice:cloudevents:1700000000000000000",
            "with when that stream was made"
        );
        let from_stream = pb::CloudEventReceived {
            origin: "jetstream:USERS:1".into(),
            origin_position: 7,
            ..login.clone()
        };
        let m = &s.select(&from_stream, 44).expect("valid")[1];
        assert_eq!(
            (m.origin.as_str(), m.origin_position, m.source_sequence),
            ("jetstream:USERS:1", 7, 44),
            "one from a managed stream keeps its place there"
        );

        let logout = received(
            "prod",
            "user-operation",
            seed_event("auth.example.com.logout"),
        );
        assert_eq!(
            names(&s.select(&logout, 43).expect("valid")),
            ["user-operation"]
        );
    }

    #[test]
    fn other_clusters_and_non_matching_events_select_nothing() {
        let s = selector();
        let dev = received(
            "dev",
            "user-operation",
            seed_event("auth.example.com.login"),
        );
        assert!(
            s.select(&dev, 1).expect("valid").is_empty(),
            "no trigger selects dev"
        );
        let other = received(
            "prod",
            "billing",
            json!({"specversion": "1.0", "id": "1",
            "source": "billing.example.com", "type": "invoice.paid"}),
        );
        assert!(s.select(&other, 2).expect("valid").is_empty());
    }

    #[test]
    fn configuration_changes_apply_to_the_next_event() {
        let mut s = selector();
        s.on_config(&ConfigUpdate {
            kind: "EventTrigger".into(),
            namespace: String::new(),
            name: "manage-namespace".into(),
            object: None,
            sequence: 9,
            ..ConfigUpdate::default()
        });
        let login = received(
            "prod",
            "user-operation",
            seed_event("auth.example.com.login"),
        );
        assert_eq!(names(&s.select(&login, 1).expect("valid")), ["logins-only"]);
    }

    #[test]
    fn invalid_input_is_an_error_not_a_match() {
        let s = selector();
        let mut bad = received("prod", "user-operation", json!({"id": "1"}));
        let error = s.select(&bad, 1).expect_err("invalid event");
        assert!(matches!(error, SelectError::Event { .. }), "{error:?}");
        bad.cluster = None;
        assert!(matches!(s.select(&bad, 1), Err(SelectError::Cluster(_))));
    }
}
