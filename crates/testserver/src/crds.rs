//! The Sveltos and CAPI CustomResourceDefinitions of `k8s/crds/` (`sluice_domain::crds`), as a
//! test server preinstalls them.

use serde_json::Value;

/// The CRD objects of `k8s/crds/` as JSON values ([`sluice_domain::crds::sveltos_crds`]).
pub fn sveltos_crds() -> Vec<Value> {
    sluice_domain::crds::sveltos_crds()
}

/// The CRDs with their conversion webhooks pointed at `webhook` (`clientConfig.url` and the PEM
/// CA bundle), or, without one, with strategy `None`: a test server has no Services to reach.
pub fn with_conversion(mut crds: Vec<Value>, webhook: Option<&(String, Vec<u8>)>) -> Vec<Value> {
    use base64::Engine as _;
    for crd in &mut crds {
        let Some(conversion) = crd.pointer_mut("/spec/conversion") else {
            continue;
        };
        if conversion.get("strategy").and_then(Value::as_str) != Some("Webhook") {
            continue;
        }
        match webhook {
            Some((url, ca)) => {
                conversion["webhook"]["clientConfig"] = serde_json::json!({
                    "url": url,
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
                });
            }
            None => *conversion = serde_json::json!({"strategy": "None"}),
        }
    }
    crds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_file_parses_and_defines_a_resource() {
        for (file, text) in sluice_domain::crds::SOURCES {
            let crd: Value = serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{file}: {e}"));
            let info = crate::resources::from_crd(&crd).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(!info.versions.is_empty(), "{file}");
        }
        assert_eq!(sveltos_crds().len(), sluice_domain::crds::SOURCES.len());
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
