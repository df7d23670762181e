//! Rendering one trigger's fields and referenced data: template choice, caching, and errors that
//! say which trigger, which field or reference, and where in the template.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};
use sluice_domain::cluster::Cluster;
use sluice_domain::eventtrigger::EventTrigger;
use sluice_template::{Doc, Engine, MissingKey, Options, Template};

use super::{Context, RenderError, ENGINE_ANNOTATION};

/// Renders the templates of one (EventTrigger, cluster).
pub(super) struct Renderer<'a> {
    pub(super) ctx: &'a Context<'a>,
    pub(super) trigger: &'a EventTrigger,
    pub(super) cluster: &'a Cluster,
    template_name: String,
}

impl<'a> Renderer<'a> {
    pub(super) fn new(
        ctx: &'a Context<'a>,
        trigger: &'a EventTrigger,
        cluster: &'a Cluster,
    ) -> Renderer<'a> {
        Renderer {
            ctx,
            trigger,
            cluster,
            // event-manager's template name: <clusterNs>-<clusterName>-<eventTrigger>.
            template_name: format!(
                "{}-{}-{}",
                cluster.id.namespace, cluster.id.name, trigger.name
            ),
        }
    }

    /// The syntax of a referenced object's data: its own annotation wins over the trigger's.
    pub(super) fn engine_for(&self, annotations: &BTreeMap<String, String>) -> Engine {
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

    /// Renders one text; text without template markers is used as it is.
    pub(super) fn render(
        &self,
        text: &str,
        data: &Doc,
        engine: Engine,
        place: &str,
    ) -> Result<String, RenderError> {
        if !text.contains("{{") && engine == Engine::Text {
            return Ok(text.to_string());
        }
        let template = self.template(text, engine, place)?;
        template
            .render_event(data)
            .map_err(|e| self.error(place, &e.to_string()))
    }

    /// Renders a templated namespace; empty means the cluster's namespace.
    pub(super) fn namespace(
        &self,
        text: &str,
        data: &Doc,
        place: &str,
    ) -> Result<String, RenderError> {
        match text {
            "" => Ok(self.cluster.id.namespace.clone()),
            ns => self.render(ns, data, Engine::Text, place),
        }
    }

    pub(super) fn error(&self, place: &str, message: &str) -> RenderError {
        RenderError(format!(
            "eventtrigger {}: {place}: {message}",
            self.trigger.name
        ))
    }

    pub(super) fn templated_list(
        &self,
        items: &[Value],
        data: &Doc,
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
    pub(super) fn templated(
        &self,
        value: &Value,
        data: &Doc,
        place: &str,
    ) -> Result<Value, RenderError> {
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
