//! The renderer's pure core: from one EventTrigger, one cluster and that cluster's match set,
//! the complete desired state (ClusterProfiles and instantiated ConfigMaps/Secrets), as
//! event-manager builds it (spec §6), with deterministic names; and what one CloudEvent creates
//! or deletes (spec §6.9). No IO.

mod instantiate;
mod profile;
mod render;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde_json::Value;
use sluice_domain::cluster::Cluster;
use sluice_domain::config::ConfigState;
use sluice_domain::eventtrigger::EventTrigger;
use sluice_domain::naming;
use sluice_proto::v1 as pb;
use sluice_template::{Doc, Engine, TemplateCache};

use render::Renderer;

/// Annotation on an EventTrigger or a referenced ConfigMap/Secret choosing the template syntax.
pub const ENGINE_ANNOTATION: &str = "sluice.io/template-engine";
/// The only Secret type Sveltos accepts as a policy source.
pub const CLUSTER_PROFILE_SECRET_TYPE: &str =
    sluice_domain::configdata::CLUSTER_PROFILE_SECRET_TYPE;

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

/// The whole desired state for (trigger, cluster), given the cluster's match set: the main
/// unit's objects followed by every resource unit's ([`main_unit`], [`resource_unit`]).
pub fn desired_state(
    ctx: &Context<'_>,
    trigger: &EventTrigger,
    cluster: &Cluster,
    report: &pb::MatchSet,
) -> Result<Vec<Desired>, RenderError> {
    let mut out = main_unit(ctx, trigger, cluster, report)?;
    if trigger.one_for_event {
        for (matching, resource) in members(trigger, report)? {
            out.extend(resource_unit(
                ctx,
                trigger,
                cluster,
                &report.event_source,
                &matching,
                resource,
            )?);
        }
    }
    Ok(distinct(out))
}

/// Each member of a match set: its reference and its resource as templates read it (`Null`
/// when the EventSource does not collect resources). A resource that does not decode fails
/// the (trigger, cluster): rendering without it would withdraw what it deployed, and the error
/// says where it is (the applier keeps what exists).
pub fn members(
    trigger: &EventTrigger,
    report: &pb::MatchSet,
) -> Result<Vec<(pb::ObjectRef, Doc)>, RenderError> {
    if report.resources.is_empty() {
        return Ok(report
            .matching
            .iter()
            .map(|m| (m.clone(), Doc::Null))
            .collect());
    }
    if report.resources.len() != report.matching.len() {
        return Err(RenderError(format!(
            "eventtrigger {}: match set of eventsource {}: {} resources for {} matching references",
            trigger.name,
            report.event_source,
            report.resources.len(),
            report.matching.len()
        )));
    }
    // The match set lists the references of its resources, in the same order. Decoded
    // straight into the templates' document (ADR 0015): no `serde_json::Value` between.
    report
        .matching
        .iter()
        .zip(&report.resources)
        .enumerate()
        .map(|(i, (m, r))| {
            let resource = serde_json::from_slice::<Doc>(r).map_err(|e| {
                RenderError(format!(
                    "eventtrigger {}: match set of eventsource {}: resources[{i}] is not valid JSON: {e}",
                    trigger.name, report.event_source
                ))
            })?;
            Ok((m.clone(), resource))
        })
        .collect()
}

/// What the main unit of (trigger, cluster) wants: with `oneForEvent: false` the one rendering
/// over every resource of the set (nothing while nothing matches); with `oneForEvent: true`
/// nothing, since each resource is its own unit (ADR 0018).
pub fn main_unit(
    ctx: &Context<'_>,
    trigger: &EventTrigger,
    cluster: &Cluster,
    report: &pb::MatchSet,
) -> Result<Vec<Desired>, RenderError> {
    if trigger.one_for_event || report.matching.is_empty() {
        return Ok(Vec::new());
    }
    let resources: Vec<Doc> = members(trigger, report)?
        .into_iter()
        .map(|(_, resource)| resource)
        .collect();
    let base = naming::base_labels(
        &trigger.name,
        &trigger.labels,
        &cluster.id,
        &report.event_source,
    );
    let renderer = Renderer::new(ctx, trigger, cluster);
    let data = Doc::object([
        (
            "MatchingResources",
            Doc::Array(report.matching.iter().map(object_reference).collect()),
        ),
        ("Resources", Doc::Array(resources.into_boxed_slice())),
        ("Cluster", Doc::from(&cluster.object)),
    ]);
    let mut out = renderer.generated(&base, &data)?;
    out.extend(renderer.profile(&base, &data)?);
    Ok(distinct(out))
}

/// What one matching resource's unit wants under a `oneForEvent: true` trigger: its
/// ClusterProfile, instantiated references and generator outputs, every one labelled with the
/// resource (ADR 0018: generator outputs too, so the unit owns them).
pub fn resource_unit(
    ctx: &Context<'_>,
    trigger: &EventTrigger,
    cluster: &Cluster,
    event_source: &str,
    matching: &pb::ObjectRef,
    resource: Doc,
) -> Result<Vec<Desired>, RenderError> {
    let mut labels = naming::base_labels(&trigger.name, &trigger.labels, &cluster.id, event_source);
    labels.extend(naming::resource_labels(&matching.namespace, &matching.name));
    let renderer = Renderer::new(ctx, trigger, cluster);
    let data = Doc::object([
        ("MatchingResource", object_reference(matching)),
        ("Resource", resource),
        ("Cluster", Doc::from(&cluster.object)),
    ]);
    let mut out = renderer.generated(&labels, &data)?;
    out.extend(renderer.profile(&labels, &data)?);
    Ok(distinct(out))
}

/// What `cloudEventAction` decided for one CloudEvent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloudEventAction {
    Create,
    Delete,
}

/// The unit one CloudEvent (by `source` and `subject`) creates for a trigger in a cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudEventOutcome {
    pub source: String,
    pub subject: String,
    pub action: CloudEventAction,
    /// The ClusterProfile, instantiated objects and generator outputs (empty for Delete).
    pub objects: Vec<Desired>,
}

/// Renders one matched CloudEvent (spec §6.9): `cloudEventAction` (a template, default
/// `Create`) must render to `Create` or `Delete`; anything else is an error for this trigger
/// and cluster. The data has `.CloudEvent` (and `.CloudEvents` with one element when the
/// trigger is not `oneForEvent`, ADR 0009), `.Cluster`, and empty resource fields.
pub fn cloud_event_state(
    ctx: &Context<'_>,
    trigger: &EventTrigger,
    cluster: &Cluster,
    event_source: &str,
    event: &Value,
) -> Result<CloudEventOutcome, RenderError> {
    let renderer = Renderer::new(ctx, trigger, cluster);
    let attribute = |name: &str| event.get(name).and_then(Value::as_str).unwrap_or("");
    let (source, subject) = (
        attribute("source").to_string(),
        attribute("subject").to_string(),
    );
    let (event, cluster_doc) = (Doc::from(event), Doc::from(&cluster.object));
    let data = if trigger.one_for_event {
        Doc::object([
            ("MatchingResource", Doc::object::<&str>([])),
            ("Resource", Doc::Null),
            ("CloudEvent", event),
            ("Cluster", cluster_doc),
        ])
    } else {
        let none = || Doc::Array(Box::default());
        Doc::object([
            ("MatchingResources", none()),
            ("Resources", none()),
            ("CloudEvents", Doc::Array(Box::new([event]))),
            ("Cluster", cluster_doc),
        ])
    };
    let action_text = trigger.cloud_event_action.as_deref().unwrap_or("Create");
    let action = match renderer
        .render(action_text, &data, Engine::Text, "spec.cloudEventAction")?
        .trim()
    {
        "Create" => CloudEventAction::Create,
        "Delete" => CloudEventAction::Delete,
        other => {
            return Err(renderer.error(
                "spec.cloudEventAction",
                &format!("rendered to {other:?}, must be Create or Delete"),
            ))
        }
    };
    let mut objects = Vec::new();
    if action == CloudEventAction::Create {
        let mut labels =
            naming::base_labels(&trigger.name, &trigger.labels, &cluster.id, event_source);
        labels.extend(naming::cloud_event_labels(&source, &subject));
        objects.extend(renderer.generated(&labels, &data)?);
        objects.extend(renderer.profile(&labels, &data)?);
    }
    Ok(CloudEventOutcome {
        source,
        subject,
        action,
        objects: distinct(objects),
    })
}

/// corev1.ObjectReference with Go field names, as templates see `.MatchingResource`.
fn object_reference(r: &pb::ObjectRef) -> Doc {
    let text = |s: &str| Doc::String(s.into());
    Doc::object([
        ("APIVersion", text(&r.api_version)),
        ("Kind", text(&r.kind)),
        ("Namespace", text(&r.namespace)),
        ("Name", text(&r.name)),
    ])
}

/// One object per (kind, namespace, name), the last rendering winning, in first-seen order
/// (the same instantiated source or generator output can be produced more than once).
fn distinct(objects: Vec<Desired>) -> Vec<Desired> {
    let mut position: HashMap<(String, String, String), usize> = HashMap::new();
    let mut out: Vec<Desired> = Vec::with_capacity(objects.len());
    for desired in objects {
        let r = sluice_wire::object_ref(&desired.object);
        match position.get(&(r.kind.clone(), r.namespace.clone(), r.name.clone())) {
            Some(&i) => out[i] = desired,
            None => {
                position.insert((r.kind, r.namespace, r.name), out.len());
                out.push(desired);
            }
        }
    }
    out
}
