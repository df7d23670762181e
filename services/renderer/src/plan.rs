//! The renderer's pure core: from one EventTrigger, one cluster and that cluster's match set,
//! the complete desired state (ClusterProfiles and instantiated ConfigMaps/Secrets), as
//! event-manager builds it (spec §6), with deterministic names. No IO.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Map, Value};
use sluice_domain::cluster::Cluster;
use sluice_domain::config::{annotations_of, ConfigState};
use sluice_domain::eventtrigger::{EventTrigger, PolicyRef};
use sluice_domain::naming;
use sluice_proto::v1 as pb;
use sluice_template::{Engine, MissingKey, Options, Template, TemplateCache};

/// Annotation on an EventTrigger or a referenced ConfigMap/Secret choosing the template syntax.
pub const ENGINE_ANNOTATION: &str = "sluice.io/template-engine";
/// The only Secret type Sveltos accepts as a policy source.
pub const CLUSTER_PROFILE_SECRET_TYPE: &str = "addons.projectsveltos.io/cluster-profile";

/// One object the applier should make exist.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub object: Value,
}

/// Why rendering failed; says which trigger, which reference and key, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderError(pub String);

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the renderer needs besides the trigger: the configuration and shared caches.
pub struct Context<'a> {
    pub config: &'a ConfigState,
    pub templates: &'a TemplateCache,
    pub sveltos_namespace: &'a str,
}

/// The whole desired state for (trigger, cluster), given the cluster's match set.
pub fn desired_state(
    ctx: &Context<'_>,
    trigger: &EventTrigger,
    cluster: &Cluster,
    report: &pb::MatchSet,
) -> Result<Vec<Desired>, RenderError> {
    let base = naming::base_labels(
        &trigger.name,
        &trigger.labels,
        &cluster.id,
        &report.event_source,
    );
    let resources: Vec<Value> = report
        .resources
        .iter()
        .filter_map(|r| serde_json::from_slice(r).ok())
        .collect();
    let renderer = Renderer::new(ctx, trigger, cluster);
    let mut out = Vec::new();
    if trigger.one_for_event {
        let items: Vec<(pb::ObjectRef, Value)> = if resources.is_empty() {
            report
                .matching
                .iter()
                .map(|m| (m.clone(), Value::Null))
                .collect()
        } else {
            resources
                .iter()
                .map(|r| (sluice_wire::object_ref(r), r.clone()))
                .collect()
        };
        for (matching, resource) in items {
            let mut labels = base.clone();
            labels.extend(naming::resource_labels(&matching.namespace, &matching.name));
            let data = json!({
                "MatchingResource": object_reference(&matching),
                "Resource": resource,
                "Cluster": cluster.object,
            });
            out.extend(renderer.profile(&labels, &data)?);
        }
    } else if !report.matching.is_empty() {
        let data = json!({
            "MatchingResources": report.matching.iter().map(object_reference).collect::<Vec<_>>(),
            "Resources": resources,
            "Cluster": cluster.object,
        });
        out.extend(renderer.profile(&base, &data)?);
    }
    Ok(out)
}

/// corev1.ObjectReference with Go field names, as templates see `.MatchingResource`.
fn object_reference(r: &pb::ObjectRef) -> Value {
    json!({"APIVersion": r.api_version, "Kind": r.kind, "Namespace": r.namespace, "Name": r.name})
}

struct Renderer<'a> {
    ctx: &'a Context<'a>,
    trigger: &'a EventTrigger,
    cluster: &'a Cluster,
    template_name: String,
}

impl<'a> Renderer<'a> {
    fn new(ctx: &'a Context<'a>, trigger: &'a EventTrigger, cluster: &'a Cluster) -> Renderer<'a> {
        Renderer {
            ctx,
            trigger,
            cluster,
            template_name: format!(
                "{}-{}-{}",
                cluster.id.namespace, cluster.id.name, trigger.name
            ),
        }
    }

    fn engine_for(&self, annotations: &BTreeMap<String, String>) -> Engine {
        let chosen = annotations
            .get(ENGINE_ANNOTATION)
            .or_else(|| self.trigger.annotations.get(ENGINE_ANNOTATION));
        match chosen.map(String::as_str) {
            Some("tera") => Engine::Tera,
            _ => Engine::Text,
        }
    }

    fn template(
        &self,
        text: &str,
        engine: Engine,
        place: &str,
    ) -> Result<Arc<Template>, RenderError> {
        let options = Options {
            engine,
            missing_key: MissingKey::Error,
            name: self.template_name.clone(),
        };
        self.ctx
            .templates
            .get_or_parse(text, &options)
            .map_err(|e| self.error(place, &e.to_string()))
    }

    fn render(
        &self,
        text: &str,
        data: &Value,
        engine: Engine,
        place: &str,
    ) -> Result<String, RenderError> {
        if !text.contains("{{") && engine == Engine::Text {
            return Ok(text.to_string());
        }
        let template = self.template(text, engine, place)?;
        template
            .render(&sluice_template::event_data(data))
            .map_err(|e| self.error(place, &e.to_string()))
    }

    fn error(&self, place: &str, message: &str) -> RenderError {
        RenderError(format!(
            "eventtrigger {}: {place}: {message}",
            self.trigger.name
        ))
    }

    /// One ClusterProfile with everything it references that must be instantiated.
    fn profile(
        &self,
        labels: &BTreeMap<String, String>,
        data: &Value,
    ) -> Result<Vec<Desired>, RenderError> {
        let name = match &self.trigger.profile_name_format {
            Some(format) => self.render(format, data, Engine::Text, "spec.profileNameFormat")?,
            None => naming::generated_name(labels, &[]),
        };
        let mut out = Vec::new();
        let mut policy_refs = Vec::new();
        for (i, reference) in self.trigger.policy_refs.iter().enumerate() {
            if let Some((entry, instantiated)) = self.policy_ref(i, reference, labels, data)? {
                policy_refs.push(entry);
                out.extend(instantiated);
            }
        }
        let mut spec: Map<String, Value> = Map::new();
        spec.insert("syncMode".into(), json!("Continuous"));
        spec.insert("tier".into(), json!(100));
        spec.insert("stopMatchingBehavior".into(), json!("WithdrawPolicies"));
        spec.insert("continueOnConflict".into(), json!(false));
        spec.insert("reloader".into(), json!(false));
        for (k, v) in &self.trigger.copied_spec {
            spec.insert(k.clone(), v.clone());
        }
        self.destination(&mut spec, data)?;
        if !policy_refs.is_empty() {
            spec.insert("policyRefs".into(), Value::Array(policy_refs));
        }
        if !self.trigger.helm_charts.is_empty() {
            spec.insert(
                "helmCharts".into(),
                Value::Array(self.templated_list(
                    &self.trigger.helm_charts,
                    data,
                    "spec.helmCharts",
                )?),
            );
        }
        if !self.trigger.kustomization_refs.is_empty() {
            spec.insert(
                "kustomizationRefs".into(),
                Value::Array(self.templated_list(
                    &self.trigger.kustomization_refs,
                    data,
                    "spec.kustomizationRefs",
                )?),
            );
        }
        if !self.trigger.template_resource_refs.is_empty() {
            spec.insert(
                "templateResourceRefs".into(),
                Value::Array(self.templated_list(
                    &self.trigger.template_resource_refs,
                    data,
                    "spec.templateResourceRefs",
                )?),
            );
        }
        if !self.trigger.extra_labels.is_empty() {
            spec.insert("extraLabels".into(), json!(self.trigger.extra_labels));
        }
        if !self.trigger.extra_annotations.is_empty() {
            spec.insert(
                "extraAnnotations".into(),
                json!(self.trigger.extra_annotations),
            );
        }
        out.push(Desired {
            object: json!({
                "apiVersion": "config.projectsveltos.io/v1beta1",
                "kind": "ClusterProfile",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
            }),
        });
        Ok(out)
    }

    /// `clusterRefs` to the source cluster, or the destination selector/cluster (spec §6.7).
    fn destination(&self, spec: &mut Map<String, Value>, data: &Value) -> Result<(), RenderError> {
        if let Some(selector) = &self.trigger.destination_cluster_selector {
            spec.insert("clusterSelector".into(), json!(selector));
        }
        if let Some(dest) = &self.trigger.destination_cluster {
            let rendered = self.templated(dest, data, "spec.destinationCluster")?;
            spec.insert("clusterRefs".into(), json!([rendered]));
        } else if self.trigger.destination_cluster_selector.is_none() {
            let (api_version, kind) = self.cluster.id.cluster_type.api_version_kind();
            spec.insert(
                "clusterRefs".into(),
                json!([{"apiVersion": api_version, "kind": kind,
                        "namespace": self.cluster.id.namespace, "name": self.cluster.id.name}]),
            );
        }
        Ok(())
    }

    /// Resolves one policyRef: the entry for the ClusterProfile, and the instantiated copy of
    /// the referenced object when it must be rendered with event data.
    fn policy_ref(
        &self,
        index: usize,
        reference: &PolicyRef,
        labels: &BTreeMap<String, String>,
        data: &Value,
    ) -> Result<Option<(Value, Option<Desired>)>, RenderError> {
        let place = format!("spec.policyRefs[{index}]");
        let namespace = match reference.namespace.as_str() {
            "" => self.cluster.id.namespace.clone(),
            ns => self.render(ns, data, Engine::Text, &format!("{place}.namespace"))?,
        };
        let name = self.render(
            &reference.name,
            data,
            Engine::Text,
            &format!("{place}.name"),
        )?;
        let path = self.render(
            &reference.path,
            data,
            Engine::Text,
            &format!("{place}.path"),
        )?;
        let key = (namespace.clone(), name.clone());
        let source = match reference.kind.as_str() {
            "Secret" => self.ctx.config.secrets.get(&key),
            _ => self.ctx.config.config_maps.get(&key),
        };
        let Some(source) = source else {
            if reference.optional {
                return Ok(None);
            }
            return Err(self.error(
                &place,
                &format!("{} {namespace}/{name} not found", reference.kind),
            ));
        };
        let is_secret = reference.kind == "Secret";
        if is_secret
            && source.get("type").and_then(Value::as_str) != Some(CLUSTER_PROFILE_SECRET_TYPE)
        {
            return Err(self.error(
                &place,
                &format!("Secret {namespace}/{name} must have type {CLUSTER_PROFILE_SECRET_TYPE}"),
            ));
        }
        let annotations = annotations_of(source);
        let mut entry = json!({"kind": reference.kind, "namespace": namespace, "name": name,
                               "deploymentType": reference.deployment_type});
        if !path.is_empty() {
            entry["path"] = json!(path);
        }
        if !self.trigger.instantiates(&annotations) {
            return Ok(Some((entry, None)));
        }
        let instantiated =
            self.instantiate(&place, reference, source, &annotations, labels, data)?;
        entry["namespace"] = json!(self.ctx.sveltos_namespace);
        entry["name"] = instantiated.object["metadata"]["name"].clone();
        Ok(Some((entry, Some(instantiated))))
    }

    fn instantiate(
        &self,
        place: &str,
        reference: &PolicyRef,
        source: &Value,
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
        data: &Value,
    ) -> Result<Desired, RenderError> {
        let src_ns = source
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let src_name = source
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut labels = labels.clone();
        labels.insert(
            naming::LABEL_REF_NAMESPACE.into(),
            naming::label_value(src_ns),
        );
        labels.insert(naming::LABEL_REF_NAME.into(), naming::label_value(src_name));
        let name = naming::generated_name(&labels, &[&reference.kind, src_ns, src_name]);
        let engine = self.engine_for(annotations);
        let is_secret = reference.kind == "Secret";
        let mut rendered = Map::new();
        let empty = Map::new();
        let source_data = source
            .get("data")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        for (key, value) in source_data {
            let text = value.as_str().unwrap_or("");
            let where_ = format!("{place} {} {src_ns}/{src_name} key {key}", reference.kind);
            let text = if is_secret {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| self.error(&where_, &format!("value is not base64: {e}")))?;
                String::from_utf8(bytes).map_err(|_| self.error(&where_, "value is not UTF-8"))?
            } else {
                text.to_string()
            };
            let output = self.render(&text, data, engine, &where_)?;
            let output = if is_secret {
                base64::engine::general_purpose::STANDARD.encode(output)
            } else {
                output
            };
            rendered.insert(key.clone(), json!(output));
        }
        let mut object = json!({
            "apiVersion": "v1",
            "kind": reference.kind,
            "metadata": {"name": name, "namespace": self.ctx.sveltos_namespace,
                         "labels": labels, "annotations": annotations},
            "data": rendered,
        });
        if is_secret {
            object["type"] = json!(CLUSTER_PROFILE_SECRET_TYPE);
        }
        Ok(Desired { object })
    }

    fn templated_list(
        &self,
        items: &[Value],
        data: &Value,
        place: &str,
    ) -> Result<Vec<Value>, RenderError> {
        items
            .iter()
            .enumerate()
            .map(|(i, v)| self.templated(v, data, &format!("{place}[{i}]")))
            .collect()
    }

    /// Renders every string inside a value (each field is its own template, as event-manager
    /// instantiates field by field since PR #501).
    fn templated(&self, value: &Value, data: &Value, place: &str) -> Result<Value, RenderError> {
        Ok(match value {
            Value::String(s) => Value::String(self.render(s, data, Engine::Text, place)?),
            Value::Array(items) => Value::Array(self.templated_list(items, data, place)?),
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    out.insert(k.clone(), self.templated(v, data, &format!("{place}.{k}"))?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }
}
