//! Instantiated ConfigMaps/Secrets (spec §6.5): a referenced object rendered key by key with
//! event data into a new object in the Sveltos namespace, for `policyRefs` and `valuesFrom`
//! carrying the instantiate annotation, and for `configMapGenerator`/`secretGenerator`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{json, Map, Value};
use sluice_domain::config::annotations_of;
use sluice_domain::naming;
use sluice_template::Doc;

use super::render::Renderer;
use super::{Desired, RenderError, CLUSTER_PROFILE_SECRET_TYPE};

/// A referenced ConfigMap/Secret found in the configuration.
pub(super) struct Source<'v> {
    pub(super) kind: &'v str,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) object: &'v Value,
    pub(super) annotations: BTreeMap<String, String>,
}

impl<'a> Renderer<'a> {
    /// Looks a referenced ConfigMap/Secret up; `Ok(None)` when it does not exist. A Secret of
    /// another type than Sveltos accepts is an error.
    pub(super) fn source(
        &self,
        kind: &'a str,
        namespace: &str,
        name: &str,
        place: &str,
    ) -> Result<Option<Source<'a>>, RenderError> {
        let key = (namespace.to_string(), name.to_string());
        let object = match kind {
            "Secret" => self.ctx.config.secrets.get(&key),
            _ => self.ctx.config.config_maps.get(&key),
        };
        let Some(object) = object else {
            return Ok(None);
        };
        if let Some(reason) = sluice_domain::configdata::withheld_reason(object) {
            return Err(self.error(place, &format!("Secret {namespace}/{name}: {reason}")));
        }
        if kind == "Secret"
            && object.get("type").and_then(Value::as_str) != Some(CLUSTER_PROFILE_SECRET_TYPE)
        {
            return Err(self.error(
                place,
                &format!("Secret {namespace}/{name} must have type {CLUSTER_PROFILE_SECRET_TYPE}"),
            ));
        }
        Ok(Some(Source {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            object,
            annotations: annotations_of(object),
        }))
    }

    /// The instantiated copy of `source`: every data key rendered with `data`, all source
    /// annotations copied, owner labels plus the reference labels. The name is deterministic
    /// (derived from the labels and the source) unless a generator's `nameFormat` gives it.
    pub(super) fn instantiate(
        &self,
        place: &str,
        source: &Source<'_>,
        labels: &BTreeMap<String, String>,
        data: &Doc,
        name: Option<String>,
    ) -> Result<Desired, RenderError> {
        let mut labels = labels.clone();
        labels.insert(
            naming::LABEL_REF_NAMESPACE.into(),
            naming::label_value(&source.namespace),
        );
        labels.insert(
            naming::LABEL_REF_NAME.into(),
            naming::label_value(&source.name),
        );
        let name = name.unwrap_or_else(|| {
            naming::generated_name(&labels, &[source.kind, &source.namespace, &source.name])
        });
        let engine = self.engine_for(&source.annotations);
        let is_secret = source.kind == "Secret";
        let mut rendered = Map::new();
        let empty = Map::new();
        let source_data = source
            .object
            .get("data")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        for (key, value) in source_data {
            let text = value.as_str().unwrap_or("");
            let where_ = format!(
                "{place} {} {}/{} key {key}",
                source.kind, source.namespace, source.name
            );
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
            "kind": source.kind,
            "metadata": {"name": name, "namespace": self.ctx.sveltos_namespace,
                         "labels": labels, "annotations": source.annotations},
            "data": rendered,
        });
        if is_secret {
            object["type"] = json!(CLUSTER_PROFILE_SECRET_TYPE);
        }
        Ok(Desired { object })
    }

    /// `configMapGenerator` and `secretGenerator` outputs: named by the rendered `nameFormat`,
    /// labelled `fromgenerator: ok`, not referenced by the ClusterProfile (users reference them,
    /// typically through `templateResourceRefs`). A missing source is an error unless the
    /// entry is `optional` (Sveltos ignores `optional` here; we honour it, ADR 0009).
    pub(super) fn generated(
        &self,
        labels: &BTreeMap<String, String>,
        data: &Doc,
    ) -> Result<Vec<Desired>, RenderError> {
        let generators = [
            (
                "ConfigMap",
                "spec.configMapGenerator",
                &self.trigger.config_map_generator,
            ),
            (
                "Secret",
                "spec.secretGenerator",
                &self.trigger.secret_generator,
            ),
        ];
        let mut labels = labels.clone();
        labels.insert(naming::LABEL_FROM_GENERATOR.into(), "ok".into());
        let mut out = Vec::new();
        for (kind, field, entries) in generators {
            for (i, generator) in entries.iter().enumerate() {
                let place = format!("{field}[{i}]");
                let namespace =
                    self.namespace(&generator.namespace, data, &format!("{place}.namespace"))?;
                let name = self.render(
                    &generator.name,
                    data,
                    sluice_template::Engine::Text,
                    &format!("{place}.name"),
                )?;
                let Some(source) = self.source(kind, &namespace, &name, &place)? else {
                    if generator.optional {
                        continue;
                    }
                    return Err(self.error(&place, &format!("{kind} {namespace}/{name} not found")));
                };
                let output_name = self.render(
                    &generator.name_format,
                    data,
                    sluice_template::Engine::Text,
                    &format!("{place}.nameFormat"),
                )?;
                out.push(self.instantiate(&place, &source, &labels, data, Some(output_name))?);
            }
        }
        Ok(out)
    }
}
