//! One ClusterProfile (spec §6.2, §6.7): name, copied fields, destination, and the references
//! it carries (`policyRefs`, `helmCharts`, `kustomizationRefs` with `valuesFrom`,
//! `templateResourceRefs`), with what must be instantiated for them.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use sluice_domain::eventtrigger::PolicyRef;
use sluice_domain::naming;
use sluice_domain::reference::object_reference;
use sluice_template::{Doc, Engine};

use super::render::Renderer;
use super::{Desired, RenderError};

impl<'a> Renderer<'a> {
    /// One ClusterProfile with everything it references that must be instantiated.
    pub(super) fn profile(
        &self,
        labels: &BTreeMap<String, String>,
        data: &Doc,
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
        let with_values_from = [
            ("helmCharts", &self.trigger.helm_charts),
            ("kustomizationRefs", &self.trigger.kustomization_refs),
        ];
        for (field, items) in with_values_from {
            if items.is_empty() {
                continue;
            }
            let mut rendered = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let place = format!("spec.{field}[{i}]");
                rendered.push(self.with_values_from(item, labels, data, &place, &mut out)?);
            }
            spec.insert(field.into(), Value::Array(rendered));
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
    fn destination(&self, spec: &mut Map<String, Value>, data: &Doc) -> Result<(), RenderError> {
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
                json!([object_reference(
                    api_version,
                    kind,
                    &self.cluster.id.namespace,
                    &self.cluster.id.name
                )]),
            );
        }
        Ok(())
    }

    /// Resolves one policyRef: the entry for the ClusterProfile, and the instantiated copy of
    /// the referenced object when it must be rendered with event data.
    fn policy_ref(
        &self,
        index: usize,
        reference: &'a PolicyRef,
        labels: &BTreeMap<String, String>,
        data: &Doc,
    ) -> Result<Option<(Value, Option<Desired>)>, RenderError> {
        let place = format!("spec.policyRefs[{index}]");
        let namespace =
            self.namespace(&reference.namespace, data, &format!("{place}.namespace"))?;
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
        let Some(source) = self.source(&reference.kind, &namespace, &name, &place)? else {
            if reference.optional {
                return Ok(None);
            }
            return Err(self.error(
                &place,
                &format!("{} {namespace}/{name} not found", reference.kind),
            ));
        };
        let mut entry = json!({"kind": reference.kind, "namespace": namespace, "name": name,
                               "deploymentType": reference.deployment_type});
        if !path.is_empty() {
            entry["path"] = json!(path);
        }
        if !self.trigger.instantiates(source.object) {
            return Ok(Some((entry, None)));
        }
        let instantiated = self.instantiate(&place, &source, labels, data, None)?;
        entry["namespace"] = json!(self.ctx.sveltos_namespace);
        entry["name"] = instantiated.object["metadata"]["name"].clone();
        Ok(Some((entry, Some(instantiated))))
    }

    /// A helm chart or kustomization ref: every string field rendered, and each `valuesFrom`
    /// entry resolved like a policyRef (instantiated when the source asks for it). A
    /// `valuesFrom` source that does not exist stays exactly as written (event-manager does so;
    /// addon-controller then reports it, or skips it when `optional`).
    fn with_values_from(
        &self,
        item: &Value,
        labels: &BTreeMap<String, String>,
        data: &Doc,
        place: &str,
        instantiated: &mut Vec<Desired>,
    ) -> Result<Value, RenderError> {
        let Some(map) = item.as_object() else {
            return self.templated(item, data, place);
        };
        let mut out = Map::new();
        for (key, value) in map {
            if key != "valuesFrom" {
                out.insert(
                    key.clone(),
                    self.templated(value, data, &format!("{place}.{key}"))?,
                );
                continue;
            }
            let entries = value.as_array().map_or(&[][..], Vec::as_slice);
            let mut resolved = Vec::with_capacity(entries.len());
            for (i, entry) in entries.iter().enumerate() {
                let here = format!("{place}.valuesFrom[{i}]");
                resolved.push(self.values_from(entry, labels, data, &here, instantiated)?);
            }
            out.insert(key.clone(), Value::Array(resolved));
        }
        Ok(Value::Object(out))
    }

    fn values_from(
        &self,
        entry: &Value,
        labels: &BTreeMap<String, String>,
        data: &Doc,
        place: &str,
        instantiated: &mut Vec<Desired>,
    ) -> Result<Value, RenderError> {
        let field = |name: &str| entry.get(name).and_then(Value::as_str).unwrap_or("");
        let kind = match field("kind") {
            "Secret" => "Secret",
            _ => "ConfigMap",
        };
        let namespace = self.namespace(field("namespace"), data, &format!("{place}.namespace"))?;
        let name = self.render(field("name"), data, Engine::Text, &format!("{place}.name"))?;
        let Some(source) = self.source(kind, &namespace, &name, place)? else {
            return Ok(entry.clone());
        };
        let mut out = entry.clone();
        if self.trigger.instantiates(source.object) {
            let copy = self.instantiate(place, &source, labels, data, None)?;
            out["namespace"] = json!(self.ctx.sveltos_namespace);
            out["name"] = copy.object["metadata"]["name"].clone();
            instantiated.push(copy);
        } else {
            out["namespace"] = json!(namespace);
            out["name"] = json!(name);
        }
        Ok(out)
    }
}
