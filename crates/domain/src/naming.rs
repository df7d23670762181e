//! Names and labels of everything sluice creates in the management cluster, as Sveltos names
//! them (spec §3.2, §6.3, §6.4), except that generated names are deterministic: derived from the
//! identity labels, so a restart or a second replica never creates a duplicate (ADR 0004).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::cluster::{ClusterId, ClusterType};

pub const LABEL_EVENT_TRIGGER: &str = "eventtrigger.lib.projectsveltos.io/eventtriggername";
pub const LABEL_CLUSTER_NAMESPACE: &str = "eventtrigger.lib.projectsveltos.io/clusterNamespace";
pub const LABEL_CLUSTER_NAME: &str = "eventtrigger.lib.projectsveltos.io/clustername";
pub const LABEL_CLUSTER_TYPE: &str = "eventtrigger.lib.projectsveltos.io/clustertype";
pub const LABEL_EVENT_REPORT: &str = "eventtrigger.lib.projectsveltos.io/eventreportname";
pub const LABEL_EVENT_SOURCE: &str = "eventtrigger.lib.projectsveltos.io/eventsourcename";
pub const LABEL_RESOURCE_NAME: &str = "eventtrigger.lib.projectsveltos.io/resourcename";
pub const LABEL_RESOURCE_NAMESPACE: &str = "eventtrigger.lib.projectsveltos.io/resourcenamespace";
pub const LABEL_CE_SOURCE: &str = "eventtrigger.lib.projectsveltos.io/cesource";
pub const LABEL_CE_SUBJECT: &str = "eventtrigger.lib.projectsveltos.io/cesubject";
pub const LABEL_REF_NAMESPACE: &str = "eventtrigger.lib.projectsveltos.io/refnamespace";
pub const LABEL_REF_NAME: &str = "eventtrigger.lib.projectsveltos.io/refname";
pub const LABEL_FROM_GENERATOR: &str = "eventtrigger.lib.projectsveltos.io/fromgenerator";
pub const LABEL_SA_NAME: &str = "projectsveltos.io/serviceaccount-name";
pub const LABEL_SA_NAMESPACE: &str = "projectsveltos.io/serviceaccount-namespace";

pub const REPORT_LABEL_EVENT_SOURCE: &str = "projectsveltos.io/eventsource-name";
pub const REPORT_LABEL_CLUSTER_NAME: &str = "eventreport.projectsveltos.io/cluster-name";
pub const REPORT_LABEL_CLUSTER_TYPE: &str = "eventreport.projectsveltos.io/cluster-type";

/// Name of the management-cluster EventReport: `<type>--<eventsource>--<cluster>`.
pub fn event_report_name(cluster: &ClusterId, event_source: &str) -> String {
    format!(
        "{}--{}--{}",
        cluster.cluster_type.lower(),
        event_source,
        cluster.name
    )
}

/// Every (cluster, EventSource) whose management-cluster EventReport is `namespace`/`name`
/// ([`event_report_name`] read backwards): a name and an EventSource may both hold `--`, so
/// each place the two could split is one reading.
pub fn event_report_keys(namespace: &str, name: &str) -> Vec<(ClusterId, String)> {
    let Some((cluster_type, rest)) = name.split_once("--") else {
        return Vec::new();
    };
    let Some(cluster_type) =
        ClusterType::parse(cluster_type).filter(|parsed| parsed.lower() == cluster_type)
    else {
        return Vec::new();
    };
    (0..rest.len())
        .filter(|&at| rest.as_bytes()[at..].starts_with(b"--"))
        .map(|at| {
            let cluster = ClusterId {
                cluster_type,
                namespace: namespace.to_string(),
                name: rest[at + 2..].to_string(),
            };
            (cluster, rest[..at].to_string())
        })
        .filter(|(cluster, event_source)| !cluster.name.is_empty() && !event_source.is_empty())
        .collect()
}

/// Labels of the management-cluster EventReport.
pub fn event_report_labels(cluster: &ClusterId, event_source: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            REPORT_LABEL_EVENT_SOURCE.to_string(),
            label_value(event_source),
        ),
        (
            REPORT_LABEL_CLUSTER_NAME.to_string(),
            label_value(&cluster.name),
        ),
        (
            REPORT_LABEL_CLUSTER_TYPE.to_string(),
            cluster.cluster_type.lower().to_string(),
        ),
    ])
}

/// The labels every object generated for (EventTrigger, cluster, EventSource) carries.
/// Cleanup selects on these minus the legacy `eventreportname`.
pub fn base_labels(
    event_trigger: &str,
    trigger_labels: &BTreeMap<String, String>,
    cluster: &ClusterId,
    event_source: &str,
) -> BTreeMap<String, String> {
    let mut labels = owner_labels(event_trigger, cluster);
    labels.insert(LABEL_EVENT_REPORT.to_string(), label_value(event_source));
    labels.insert(LABEL_EVENT_SOURCE.to_string(), label_value(event_source));
    for key in [LABEL_SA_NAME, LABEL_SA_NAMESPACE] {
        if let Some(v) = trigger_labels.get(key) {
            labels.insert(key.to_string(), label_value(v));
        }
    }
    labels
}

/// The keys of [`owner_labels`]: what every object sluice writes for a (trigger, cluster)
/// carries, and what a LIST of the pair selects by.
pub const OWNER_LABEL_KEYS: [&str; 4] = [
    LABEL_EVENT_TRIGGER,
    LABEL_CLUSTER_NAMESPACE,
    LABEL_CLUSTER_NAME,
    LABEL_CLUSTER_TYPE,
];

/// The labels that say "owned by this EventTrigger for this cluster": the cleanup selector.
pub fn owner_labels(event_trigger: &str, cluster: &ClusterId) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_EVENT_TRIGGER.to_string(), label_value(event_trigger)),
        (
            LABEL_CLUSTER_NAMESPACE.to_string(),
            label_value(&cluster.namespace),
        ),
        (LABEL_CLUSTER_NAME.to_string(), label_value(&cluster.name)),
        (
            LABEL_CLUSTER_TYPE.to_string(),
            cluster.cluster_type.as_str().to_string(),
        ),
    ])
}

/// Labels that key a per-resource ClusterProfile (oneForEvent: true).
pub fn resource_labels(namespace: &str, name: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([(LABEL_RESOURCE_NAME.to_string(), label_value(name))]);
    if !namespace.is_empty() {
        labels.insert(LABEL_RESOURCE_NAMESPACE.to_string(), label_value(namespace));
    }
    labels
}

/// Labels that key a per-CloudEvent ClusterProfile: source and subject, made valid.
pub fn cloud_event_labels(source: &str, subject: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            LABEL_CE_SOURCE.to_string(),
            label_value(&source.replace('/', "-")),
        ),
        (
            LABEL_CE_SUBJECT.to_string(),
            label_value(&subject.replace('/', "-")),
        ),
    ])
}

/// Deterministic `sveltos-` + 20 characters of `[0-9a-z]`, derived from the identity labels and
/// any extra discriminators (for instantiated objects: the referenced kind/namespace/name).
pub fn generated_name(identity: &BTreeMap<String, String>, extra: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for (k, v) in identity {
        hasher.update(k.as_bytes());
        hasher.update([b'=']);
        hasher.update(v.as_bytes());
        hasher.update([0]);
    }
    for part in extra {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let suffix: String = digest
        .iter()
        .take(20)
        .map(|b| ALPHABET[(*b as usize) % 36] as char)
        .collect();
    format!("sveltos-{suffix}")
}

/// Makes a string a valid label value. Valid values pass unchanged. Otherwise invalid
/// characters become `-`, and the value is cut to fit 63 characters with a hash suffix, so
/// that two different inputs never collide on one label value (ADR 0004). Sveltos applies
/// such values as they are and the API server rejects the ClusterProfile.
pub fn label_value(raw: &str) -> String {
    if is_valid_label_value(raw) {
        return raw.to_string();
    }
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let digest = Sha256::digest(raw.as_bytes());
    let hash: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
    let keep: String = mapped.chars().take(63 - 11).collect();
    let trimmed = keep.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        hash
    } else {
        format!("{trimmed}-{hash}")
    }
}

/// Kubernetes label value rule: at most 63 characters, empty or alphanumeric at both ends with
/// `-`, `_`, `.` allowed inside.
pub fn is_valid_label_value(value: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    let bytes = value.as_bytes();
    value.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_owner_label_keys_are_the_owner_labels() {
        let cluster = super::ClusterId {
            namespace: "ns".into(),
            name: "c".into(),
            cluster_type: super::ClusterType::Sveltos,
        };
        let keys: Vec<String> = super::owner_labels("t", &cluster).into_keys().collect();
        let mut expected: Vec<String> = super::OWNER_LABEL_KEYS
            .iter()
            .map(|k| k.to_string())
            .collect();
        expected.sort();
        assert_eq!(keys, expected);
    }

    #[test]
    fn a_report_name_is_read_back_into_every_cluster_and_event_source_it_can_be() {
        use crate::cluster::{ClusterId, ClusterType};
        let cluster = |name: &str| ClusterId {
            cluster_type: ClusterType::Capi,
            namespace: "fleet".into(),
            name: name.into(),
        };
        let key = (cluster("prod-1"), "sveltos-service".to_string());
        let name = super::event_report_name(&key.0, &key.1);
        assert_eq!(super::event_report_keys("fleet", &name), [key]);
        assert_eq!(
            super::event_report_keys("fleet", "capi--a--b--c"),
            [
                (cluster("b--c"), "a".to_string()),
                (cluster("c"), "a--b".to_string())
            ]
        );
        assert_eq!(
            super::event_report_keys("fleet", "capi--a---b"),
            [
                (cluster("-b"), "a".to_string()),
                (cluster("b"), "a-".to_string())
            ]
        );
        for foreign in ["capi--a", "Capi--a--b", "other--a--b", "capi----b", "plain"] {
            assert!(
                super::event_report_keys("fleet", foreign).is_empty(),
                "{foreign}"
            );
        }
    }

    use super::*;
    use crate::cluster::ClusterType;

    fn cluster() -> ClusterId {
        ClusterId {
            cluster_type: ClusterType::Capi,
            namespace: "default".to_string(),
            name: "sveltos-management-workload".to_string(),
        }
    }

    #[test]
    fn report_name_and_labels_follow_sveltos() {
        assert_eq!(
            event_report_name(&cluster(), "sveltos-service"),
            "capi--sveltos-service--sveltos-management-workload"
        );
        let labels = event_report_labels(&cluster(), "sveltos-service");
        assert_eq!(labels[REPORT_LABEL_CLUSTER_TYPE], "capi");
        assert_eq!(labels[REPORT_LABEL_EVENT_SOURCE], "sveltos-service");
    }

    #[test]
    fn base_labels_carry_cluster_type_spelled_like_sveltos() {
        let labels = base_labels("t", &BTreeMap::new(), &cluster(), "es");
        assert_eq!(labels[LABEL_CLUSTER_TYPE], "Capi");
        assert_eq!(labels[LABEL_CLUSTER_NAMESPACE], "default");
        assert_eq!(labels[LABEL_EVENT_SOURCE], "es");
        assert_eq!(labels[LABEL_EVENT_REPORT], "es");
    }

    #[test]
    fn generated_names_are_deterministic_and_distinct() {
        let a = base_labels("t", &BTreeMap::new(), &cluster(), "es");
        let mut b = a.clone();
        b.extend(resource_labels("default", "my-service"));
        let name = generated_name(&a, &[]);
        assert_eq!(name, generated_name(&a, &[]));
        assert_ne!(name, generated_name(&b, &[]));
        assert_ne!(name, generated_name(&a, &["ConfigMap", "default", "x"]));
        assert_eq!(name.len(), "sveltos-".len() + 20);
        assert!(name[8..]
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()));
    }

    #[test]
    fn label_values_are_made_valid_without_collisions() {
        for (raw, keep) in [("fine", true), ("a.b-c_d", true), ("", true)] {
            assert_eq!(label_value(raw) == raw, keep);
        }
        let long = "x".repeat(80);
        let fixed = label_value(&long);
        assert!(is_valid_label_value(&fixed) && fixed.len() <= 63, "{fixed}");
        assert_ne!(label_value(&long), label_value(&"x".repeat(81)));
        let colon = label_value("urn:auth:example.com");
        assert!(is_valid_label_value(&colon), "{colon}");
        assert_ne!(colon, label_value("urn-auth-example.com"));
        assert!(is_valid_label_value(&label_value("/leading")));
        let ce = cloud_event_labels("auth.example.com/user-login", "mgianluc");
        assert_eq!(ce[LABEL_CE_SOURCE], "auth.example.com-user-login");
    }
}
