//! The Sveltos and CAPI CustomResourceDefinitions of `k8s/crds/`, compiled in so a test server can
//! preinstall them.

use serde_json::Value;

const SOURCES: [(&str, &str); 8] = [
    (
        "eventsources.yaml",
        include_str!("../../../k8s/crds/eventsources.yaml"),
    ),
    (
        "eventtriggers.yaml",
        include_str!("../../../k8s/crds/eventtriggers.yaml"),
    ),
    (
        "eventreports.yaml",
        include_str!("../../../k8s/crds/eventreports.yaml"),
    ),
    (
        "eventbasedaddons.yaml",
        include_str!("../../../k8s/crds/eventbasedaddons.yaml"),
    ),
    (
        "sveltosclusters.yaml",
        include_str!("../../../k8s/crds/sveltosclusters.yaml"),
    ),
    (
        "clustersets.yaml",
        include_str!("../../../k8s/crds/clustersets.yaml"),
    ),
    (
        "clusterprofiles.yaml",
        include_str!("../../../k8s/crds/clusterprofiles.yaml"),
    ),
    (
        "capi-clusters.yaml",
        include_str!("../../../k8s/crds/capi-clusters.yaml"),
    ),
];

/// The CRD objects (EventSource, EventTrigger, EventReport, EventBasedAddOn, SveltosCluster,
/// ClusterSet, ClusterProfile, CAPI Cluster) as JSON values.
pub fn sveltos_crds() -> Vec<Value> {
    SOURCES
        .iter()
        // The files are part of this repository and checked by the tests; a broken one is skipped, not fatal.
        .filter_map(|(_, text)| serde_yaml::from_str::<Value>(text).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_file_parses_and_defines_a_resource() {
        for (file, text) in SOURCES {
            let crd: Value = serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{file}: {e}"));
            let info = crate::resources::from_crd(&crd).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(!info.versions.is_empty(), "{file}");
        }
        assert_eq!(sveltos_crds().len(), SOURCES.len());
    }

    #[test]
    fn event_source_and_trigger_serve_both_versions() {
        for name in [
            "eventsources.lib.projectsveltos.io",
            "eventtriggers.lib.projectsveltos.io",
        ] {
            let crd = sveltos_crds()
                .into_iter()
                .find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(name));
            let info = crate::resources::from_crd(&crd.unwrap_or_default())
                .expect("crd defines a resource");
            assert_eq!(info.versions, vec!["v1beta1", "v1alpha1"], "{name}");
            assert!(!info.namespaced, "{name} is cluster-scoped");
        }
    }
}
