//! The typed key of a desired-state unit at the wire edge (ADR 0009, ADR 0018): the
//! EventTrigger, the cluster, and which unit of that pair: its main unit, what one CloudEvent
//! created, or what one matching resource renders to. The unit's subject, owner labels and the
//! purge filters of its pair derive from it, instead of each reader checking which fields of a
//! `DesiredState` are empty.

use std::collections::BTreeMap;

use sluice_bus::topology::{self, StreamSpec};
use sluice_domain::cluster::ClusterId;
use sluice_domain::naming;
use sluice_proto::v1 as pb;

/// Which unit of a (trigger, cluster) a desired state describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    /// What the match set renders to as a whole (nothing of its own under `oneForEvent`).
    Main,
    /// What one CloudEvent (by `source` and `subject`) created.
    CloudEvent { source: String, subject: String },
    /// What one matching resource renders to under a `oneForEvent` trigger.
    Resource { namespace: String, name: String },
}

impl Unit {
    pub fn of(state: &pb::DesiredState) -> Unit {
        if !state.cloud_event_source.is_empty() || !state.cloud_event_subject.is_empty() {
            Unit::CloudEvent {
                source: state.cloud_event_source.clone(),
                subject: state.cloud_event_subject.clone(),
            }
        } else if !state.resource_name.is_empty() {
            Unit::Resource {
                namespace: state.resource_namespace.clone(),
                name: state.resource_name.clone(),
            }
        } else {
            Unit::Main
        }
    }

    /// The labels that, beside the owner labels of its pair, pick this unit's objects.
    pub fn labels(&self) -> BTreeMap<String, String> {
        match self {
            Unit::Main => BTreeMap::new(),
            Unit::CloudEvent { source, subject } => naming::cloud_event_labels(source, subject),
            Unit::Resource { namespace, name } => naming::resource_labels(namespace, name),
        }
    }
}

/// A desired-state unit: (EventTrigger, cluster, unit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitKey {
    pub event_trigger: String,
    pub cluster: ClusterId,
    pub unit: Unit,
}

impl UnitKey {
    /// The unit a desired state describes; an error when it names no valid cluster.
    pub fn of(state: &pb::DesiredState) -> crate::Result<UnitKey> {
        Ok(UnitKey {
            event_trigger: state.event_trigger.clone(),
            cluster: crate::cluster_id(state.cluster.as_ref(), "desired state")?,
            unit: Unit::of(state),
        })
    }

    /// The subject its desired states are published on.
    pub fn desired_subject(&self) -> String {
        let tokens = crate::cluster_tokens(&self.cluster);
        match &self.unit {
            Unit::Main => topology::desired_subject(&self.event_trigger, &tokens),
            Unit::CloudEvent { source, subject } => {
                topology::desired_cloudevent_subject(&self.event_trigger, &tokens, source, subject)
            }
            Unit::Resource { namespace, name } => {
                topology::desired_resource_subject(&self.event_trigger, &tokens, namespace, name)
            }
        }
    }

    /// The labels every management-cluster object of the unit carries: its pair's owner
    /// labels and the unit's own.
    pub fn owner_labels(&self) -> BTreeMap<String, String> {
        let mut labels = naming::owner_labels(&self.event_trigger, &self.cluster);
        labels.extend(self.unit.labels());
        labels
    }

    /// The filters, per stream, of every other unit of its pair (CloudEvent and resource
    /// units): what the removal of the pair's main unit takes off the streams.
    pub fn other_units_filters(&self) -> Vec<(StreamSpec, String)> {
        let tokens = crate::cluster_tokens(&self.cluster);
        vec![
            (
                topology::DESIRED,
                topology::desired_units_filter(&self.event_trigger, &tokens),
            ),
            (
                topology::APPLIED,
                topology::applied_units_filter(&self.event_trigger, &tokens),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_domain::cluster::ClusterType;

    #[test]
    fn the_unit_names_its_subject_and_labels() {
        let cluster = ClusterId {
            cluster_type: ClusterType::Sveltos,
            namespace: "fleet".into(),
            name: "a".into(),
        };
        let tokens = crate::cluster_tokens(&cluster);
        let state = |source: &str, namespace: &str, name: &str| pb::DesiredState {
            event_trigger: "t".into(),
            cluster: Some(crate::cluster_ref(&cluster)),
            cloud_event_source: source.into(),
            cloud_event_subject: if source.is_empty() { "" } else { "alice" }.into(),
            resource_namespace: namespace.into(),
            resource_name: name.into(),
            ..Default::default()
        };
        let main = UnitKey::of(&state("", "", "")).expect("valid");
        assert_eq!(main.unit, Unit::Main);
        assert_eq!(
            main.desired_subject(),
            topology::desired_subject("t", &tokens)
        );
        assert_eq!(main.owner_labels(), naming::owner_labels("t", &cluster));

        let event = UnitKey::of(&state("auth", "", "")).expect("valid");
        assert_eq!(
            event.desired_subject(),
            topology::desired_cloudevent_subject("t", &tokens, "auth", "alice")
        );
        let mut labels = naming::owner_labels("t", &cluster);
        labels.extend(naming::cloud_event_labels("auth", "alice"));
        assert_eq!(event.owner_labels(), labels);

        let resource = UnitKey::of(&state("", "default", "web")).expect("valid");
        assert_eq!(
            resource.desired_subject(),
            topology::desired_resource_subject("t", &tokens, "default", "web")
        );
        assert!(resource
            .other_units_filters()
            .iter()
            .all(|(_, filter)| filter.ends_with(".>")));

        let nowhere = pb::DesiredState {
            cluster: None,
            ..state("", "", "")
        };
        assert!(UnitKey::of(&nowhere).is_err(), "no valid cluster");
    }
}
