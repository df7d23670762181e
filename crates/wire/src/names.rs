//! A trigger's `eventSourceName` for one cluster: a template over cluster data only, rendered
//! as libsveltos does (spec §7.3: `html/template`, `missingkey=error`, data `.Cluster`,
//! `.ClusterNamespace`, `.ClusterName`). Every service that needs to know which EventSource a
//! trigger deploys to a cluster asks here, so they all agree.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use sluice_domain::cluster::{Cluster, ClusterId};
use sluice_domain::config::ConfigState;
use sluice_domain::eventtrigger::EventTrigger;
use sluice_template::{Engine, MissingKey, Options, TemplateCache};

/// The EventSource name the trigger deploys to `cluster`; the error says which trigger and why.
/// `templates` keeps the parsed templates (the caller's cache).
pub fn event_source_name(
    trigger: &EventTrigger,
    cluster: &Cluster,
    templates: &TemplateCache,
) -> Result<String, String> {
    let text = &trigger.event_source_name;
    if !text.contains("{{") {
        return Ok(text.clone());
    }
    let options = Options {
        engine: Engine::Html,
        missing_key: MissingKey::Error,
        name: format!(
            "{}-{}-{}",
            cluster.id.namespace, cluster.id.name, trigger.name
        ),
    };
    let fail = |e: sluice_template::Error| {
        format!("eventtrigger {}: spec.eventSourceName: {e}", trigger.name)
    };
    let template = templates.get_or_parse(text, &options).map_err(fail)?;
    let data = json!({
        "Cluster": cluster.object,
        "ClusterNamespace": cluster.id.namespace,
        "ClusterName": cluster.id.name,
    });
    let name = template
        .render_event(&sluice_template::Doc::from(&data))
        .map_err(fail)?;
    Ok(match name.as_str() {
        // libsveltos returns the cluster namespace for an empty result.
        "" => cluster.id.namespace.clone(),
        _ => name,
    })
}

/// Every (cluster, EventSource) some trigger deploys, with the triggers, eventSourceName
/// rendered per cluster. A name that fails to render deploys nothing (the renderer reports the
/// failure on the trigger's status).
pub fn deployments(state: &ConfigState) -> BTreeMap<(ClusterId, String), BTreeSet<String>> {
    let templates = TemplateCache::new(64);
    state.deployments(|trigger, cluster| event_source_name(trigger, cluster, &templates).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(name_template: &str) -> EventTrigger {
        EventTrigger::from_object(&json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
            "metadata": {"name": "t"}, "spec": {"eventSourceName": name_template}
        }))
        .expect("trigger")
    }

    fn cluster() -> Cluster {
        Cluster::from_object(&json!({
            "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
            "metadata": {"name": "prod-eu", "namespace": "fleet", "labels": {"tier": "gold"}},
            "status": {"ready": true}
        }))
        .expect("cluster")
    }

    #[test]
    fn templated_names_use_cluster_data_only() {
        let c = cluster();
        let cache = TemplateCache::new(8);
        let event_source_name =
            |t: &EventTrigger, c: &Cluster| super::event_source_name(t, c, &cache);
        assert_eq!(
            event_source_name(&trigger("plain"), &c),
            Ok("plain".to_string())
        );
        assert_eq!(
            event_source_name(
                &trigger("{{ .ClusterName }}-{{ .Cluster.metadata.labels.tier }}"),
                &c
            ),
            Ok("prod-eu-gold".to_string())
        );
        assert_eq!(
            event_source_name(&trigger("es-{{ .ClusterNamespace }}"), &c),
            Ok("es-fleet".to_string())
        );
        let err = event_source_name(&trigger("{{ .Resource.metadata.name }}"), &c)
            .expect_err("no event data here");
        assert!(
            err.starts_with("eventtrigger t: spec.eventSourceName: "),
            "{err}"
        );
    }
}
