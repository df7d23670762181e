//! `sluice dry-run`: what sluice would write in the management cluster for a set of
//! EventSources, EventTriggers and the resources of one managed cluster, computed offline by
//! the services' own stages: the evaluator's (`sluice_evaluator::Evaluator`), the renderer's
//! (`sluice_renderer::Stage`), the reporter's EventReport and the applier's objects as it
//! writes them (`sluice_applier::plan::desired_objects`). Nothing is read from or written to a
//! cluster or the bus; every failure says which object and where, and affects only its object.
//! An object of Sveltos's kinds the API server would refuse (`sluice_domain::crds::check`) is
//! reported and left out.
//!
//! [`dry_run`] is the pure part (documents in, [`Outcome`] out), [`compare`] holds an outcome
//! against the objects sluice already wrote; [`run`] reads the files and prints.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use sluice_domain::config::ConfigState;
use sluice_domain::conversion;
use sluice_evaluator::cloudevents::CloudEventSelector;
use sluice_evaluator::{Evaluator, MatchOutput};
use sluice_proto::v1 as pb;
use sluice_wire::match_units::Unit;

/// The kinds of the management cluster sluice reads, besides ConfigMaps and Secrets.
const MANAGEMENT_KINDS: [&str; 5] = [
    "EventSource",
    "EventTrigger",
    "EventBasedAddOn",
    "SveltosCluster",
    "ClusterSet",
];

/// Built-in kinds that are not namespaced: a document of another kind without a namespace is
/// put in `--namespace`, as `kubectl apply` puts it in its context's namespace.
const CLUSTER_SCOPED: [&str; 17] = [
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "StorageClass",
    "CustomResourceDefinition",
    "APIService",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "CertificateSigningRequest",
];

/// The most one bus message carries by default (nats-server's `max_payload`).
pub const DEFAULT_MAX_PAYLOAD: usize = 1_048_576;

/// `sluice dry-run`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct DryRunArgs {
    /// Files or directories (their `.yaml`, `.yml` and `.json` files) of YAML or JSON
    /// documents; `-` reads stdin. EventSources, EventTriggers, EventBasedAddOns,
    /// SveltosClusters, CAPI Clusters, ClusterSets, ConfigMaps and Secrets are the management
    /// cluster's; every other document is a resource of the managed cluster.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Files or directories of resources of the managed cluster only (ConfigMaps and Secrets
    /// there are the managed cluster's).
    #[arg(long)]
    pub managed: Vec<PathBuf>,
    /// The managed cluster the resources are in, `[NAMESPACE/]NAME` of a SveltosCluster (or
    /// a CAPI Cluster) in the files; without one in the files, a ready SveltosCluster of that
    /// name is assumed. Default: the one cluster of the files, or `default/dry-run`.
    #[arg(long)]
    pub cluster: Option<String>,
    /// A label of that cluster, `KEY=VALUE`, added to (or replacing one of) its labels; the
    /// triggers' cluster selectors read them.
    #[arg(long = "cluster-label", value_parser = parse_label)]
    pub cluster_labels: Vec<(String, String)>,
    /// The namespace of a namespaced document that names none.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// The namespace Sveltos runs in (`SLUICE_SVELTOS_NAMESPACE` of the services).
    #[arg(
        long,
        env = "SLUICE_SVELTOS_NAMESPACE",
        default_value = "projectsveltos"
    )]
    pub sveltos_namespace: String,
    /// The most one bus message may carry (nats-server's `max_payload`): a match or desired
    /// state larger than this fails, as it does in the pipeline.
    #[arg(long, default_value_t = DEFAULT_MAX_PAYLOAD)]
    pub max_payload: usize,
    /// A CloudEvent (structured JSON) arriving on the cluster's NATS subject SUBJECT, after the
    /// resources; repeat it for a sequence of events, e.g.
    /// `--cloud-event user-operation=login.json --cloud-event user-operation=logout.json`.
    #[arg(long = "cloud-event", value_name = "SUBJECT=FILE", value_parser = parse_cloud_event)]
    pub cloud_events: Vec<(String, PathBuf)>,
    /// Files or directories of the objects sluice wrote in the management cluster (e.g.
    /// `kubectl get clusterprofiles,configmaps,secrets -A -l
    /// eventtrigger.lib.projectsveltos.io/eventtriggername -o yaml`): stderr then also says
    /// which of them the result would create, change or delete, for the triggers of the run.
    #[arg(long)]
    pub against: Vec<PathBuf>,
    /// Also print the EventReports the reporter would write.
    #[arg(long)]
    pub reports: bool,
    #[arg(short = 'o', long, value_enum, default_value = "yaml")]
    pub output: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A stream of YAML documents, each after a comment naming its trigger and unit.
    Yaml,
    /// One `v1` `List` of the objects.
    Json,
}

fn parse_cloud_event(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((subject, file)) if !subject.is_empty() && !file.is_empty() => {
            Ok((subject.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("{text:?}: expected SUBJECT=FILE")),
    }
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?}: expected KEY=VALUE")),
    }
}

/// One document read, with where it came from (`file`, document number from 1).
#[derive(Clone, Debug)]
pub struct Document {
    pub origin: String,
    pub object: Value,
    /// Read from `--managed`: a resource of the managed cluster whatever its kind.
    pub managed_only: bool,
}

/// What the dry run is asked about besides the documents.
#[derive(Clone, Debug)]
pub struct Options {
    pub cluster: Option<String>,
    pub cluster_labels: Vec<(String, String)>,
    pub namespace: String,
    pub sveltos_namespace: String,
    pub max_payload: usize,
    /// CloudEvents received on the cluster's NATS after its resources were listed, in order.
    pub cloud_events: Vec<CloudEventInput>,
}

/// One CloudEvent given to the dry run.
#[derive(Clone, Debug)]
pub struct CloudEventInput {
    /// Where it was read, for messages.
    pub origin: String,
    /// The NATS subject it arrives on.
    pub subject: String,
    /// The CloudEvent in structured JSON.
    pub json: Vec<u8>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            cluster: None,
            cluster_labels: Vec::new(),
            namespace: "default".into(),
            sveltos_namespace: "projectsveltos".into(),
            max_payload: DEFAULT_MAX_PAYLOAD,
            cloud_events: Vec::new(),
        }
    }
}

/// One object the applier would write, with the unit it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub event_trigger: String,
    pub cluster: String,
    /// `resource <namespace>/<name>` for a resource's unit, `CloudEvent source <source> subject
    /// <subject>` for a CloudEvent's, empty for the trigger's main unit.
    pub unit: String,
    pub object: Value,
}

/// What the dry run found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The cluster the resources were evaluated in.
    pub cluster: String,
    pub objects: Vec<Written>,
    /// The EventReport of each (cluster, EventSource) evaluated.
    pub reports: Vec<Value>,
    /// What fails, each saying which object and where: what the trigger's status, an
    /// EventReport or the service's log would show.
    pub problems: Vec<String>,
    /// What may explain an empty or unexpected result: a trigger that selects no cluster,
    /// resources not read from a cluster, a CloudEvent nothing selects, a unit deleted.
    pub notes: Vec<String>,
    /// The owner labels of every (trigger, cluster) the run evaluated: what of the existing
    /// objects [`compare`] holds the run's result against.
    pub pairs: Vec<BTreeMap<String, String>>,
}

/// What applying a dry run's result would do to one existing object, or make anew.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Create,
    Change,
    Delete,
}

/// One object [`compare`] finds created, changed or deleted.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Difference {
    pub action: Action,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The trigger (or, for a deletion, its owner label) and unit it belongs to.
    pub owner: String,
}

/// What writing `outcome` would do to `existing` (the management cluster's objects sluice
/// wrote, e.g. `kubectl get clusterprofiles,configmaps,secrets -A -l
/// eventtrigger.lib.projectsveltos.io/eventtriggername -o yaml`), for the (trigger, cluster)
/// pairs the run evaluated, by kind, namespace and name: an object the run writes and none
/// exists is created; one whose fields the run sets differ from the existing object's (labels,
/// annotations, everything outside metadata and status; the fields the API server or others
/// added are not compared) is changed; an existing object of an evaluated pair the run does not
/// write is deleted. Also the number of objects left as they are.
pub fn compare(outcome: &Outcome, existing: &[Value]) -> (Vec<Difference>, usize) {
    let id = |o: &Value| {
        (
            text(o, "/kind").to_string(),
            text(o, "/metadata/namespace").to_string(),
            text(o, "/metadata/name").to_string(),
        )
    };
    let in_scope = |o: &Value| {
        let labels = o.pointer("/metadata/labels");
        outcome.pairs.iter().any(|pair| {
            pair.iter().all(|(key, value)| {
                labels.and_then(|l| l.get(key)).and_then(Value::as_str) == Some(value.as_str())
            })
        })
    };
    let existing: BTreeMap<_, &Value> = existing
        .iter()
        .filter(|o| in_scope(o))
        .map(|o| (id(o), o))
        .collect();
    let mut differences = Vec::new();
    let mut unchanged = 0;
    let mut written = std::collections::BTreeSet::new();
    for w in &outcome.objects {
        let key = id(&w.object);
        let owner = if w.unit.is_empty() {
            format!("eventtrigger {}", w.event_trigger)
        } else {
            format!("eventtrigger {}, {}", w.event_trigger, w.unit)
        };
        let action = match existing.get(&key) {
            None => Some(Action::Create),
            Some(old) if !sets_the_same(&w.object, old) => Some(Action::Change),
            Some(_) => None,
        };
        match action {
            Some(action) => differences.push(Difference {
                action,
                kind: key.0.clone(),
                namespace: key.1.clone(),
                name: key.2.clone(),
                owner,
            }),
            None => unchanged += 1,
        }
        written.insert(key);
    }
    for (key, old) in &existing {
        if !written.contains(key) {
            let trigger = old
                .pointer("/metadata/labels")
                .and_then(|l| l.get(sluice_domain::naming::LABEL_EVENT_TRIGGER))
                .and_then(Value::as_str)
                .unwrap_or_default();
            differences.push(Difference {
                action: Action::Delete,
                kind: key.0.clone(),
                namespace: key.1.clone(),
                name: key.2.clone(),
                owner: format!("eventtrigger {trigger}"),
            });
        }
    }
    differences.sort();
    (differences, unchanged)
}

/// Whether `existing` holds every field `desired` sets, with the same value (a server-side
/// apply of `desired` would change nothing it owns).
fn sets_the_same(desired: &Value, existing: &Value) -> bool {
    let Some(fields) = desired.as_object() else {
        return desired == existing;
    };
    fields.iter().all(|(key, value)| {
        let held = existing.get(key);
        if key != "metadata" {
            return held.is_some_and(|held| contains(value, held));
        }
        // Of the metadata, sluice sets only the labels and annotations besides the name.
        ["labels", "annotations"].iter().all(|part| {
            value.get(part).is_none_or(|want| {
                held.and_then(|h| h.get(part))
                    .is_some_and(|have| contains(want, have))
            })
        })
    })
}

fn contains(desired: &Value, existing: &Value) -> bool {
    match (desired, existing) {
        (Value::Object(want), Value::Object(have)) => want
            .iter()
            .all(|(key, value)| have.get(key).is_some_and(|held| contains(value, held))),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| contains(w, h))
        }
        _ => desired == existing,
    }
}

/// Evaluates, renders and lays out what sluice would write for `documents`.
pub fn dry_run(documents: &[Document], options: &Options) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    let mut management = Vec::new();
    let mut managed = Vec::new();
    for document in documents {
        let mut object = document.object.clone();
        // What no API server takes is that document's problem alone, as `kubectl apply` says it
        // and goes on with the others.
        if let Err(error) = check_shape(&object) {
            outcome
                .problems
                .push(format!("{}: {error}", document.origin));
            continue;
        }
        let kind = text(&object, "/kind").to_string();
        let is_management = !document.managed_only && is_management_kind(&object);
        if !is_namespaced(&kind, is_management) {
            // The API server drops the namespace a cluster-scoped object names.
            if let Some(metadata) = object["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
        } else if text(&object, "/metadata/namespace").is_empty() {
            object["metadata"]["namespace"] = json!(options.namespace);
        }
        if is_management {
            management.push((document.origin.clone(), object));
        } else {
            managed.push(object);
        }
    }

    let unread = managed
        .iter()
        .filter(|o| text(o, "/metadata/uid").is_empty())
        .count();
    if unread > 0 {
        outcome.notes.push(format!(
            "{unread} resources of the managed cluster have no metadata.uid: they were not read \
             from a cluster, so what the API server adds (defaults, a Service's \
             status.loadBalancer) is missing from them, and a script or template reading it sees \
             nothing there; `kubectl get -o yaml` gives them as the watcher sees them"
        ));
    }

    let mut config = ConfigState::default();
    let mut clusters: Vec<(String, Value)> = Vec::new();
    for (origin, object) in management {
        // What the API server refuses never reaches sluice.
        let refused = sluice_domain::crds::check(&object);
        if !refused.is_empty() {
            for problem in refused {
                outcome.problems.push(format!(
                    "{origin}: {} {}: the API server refuses it: {problem}",
                    text(&object, "/kind"),
                    text(&object, "/metadata/name")
                ));
            }
            continue;
        }
        let object = match text(&object, "/kind") {
            // What the watcher reads: the storage version, converted as the webhook converts.
            "EventSource" | "EventTrigger" => {
                match conversion::convert(&object, conversion::V1BETA1) {
                    Ok(converted) => converted,
                    Err(error) => {
                        outcome.problems.push(format!(
                            "{origin}: {} {}: the conversion webhook refuses it: {error}",
                            text(&object, "/kind"),
                            text(&object, "/metadata/name")
                        ));
                        continue;
                    }
                }
            }
            "SveltosCluster" | "Cluster" => {
                clusters.push((origin, object));
                continue;
            }
            _ => object,
        };
        apply(&mut config, &object);
    }

    let cluster = choose_cluster(&mut clusters, options, &mut outcome.notes)?;
    for (_, object) in &clusters {
        apply(&mut config, object);
    }
    let Some(cluster_id) = config.clusters.keys().find(|id| {
        id.namespace == text(&cluster, "/metadata/namespace")
            && id.name == text(&cluster, "/metadata/name")
            && id.cluster_type.api_version_kind().1 == text(&cluster, "/kind")
    }) else {
        bail!("the cluster {} did not load", describe_cluster(&cluster));
    };
    let cluster_id = cluster_id.clone();
    outcome.cluster = cluster_id.to_string();

    for (name, loaded) in &config.event_sources {
        if let Err(error) = loaded {
            outcome
                .problems
                .push(format!("eventsource {name}: {error}"));
        }
    }
    for (name, loaded) in &config.event_triggers {
        if let Err(error) = loaded {
            outcome
                .problems
                .push(format!("eventtrigger {name}: {error}"));
        }
    }
    for trigger in config.valid_event_triggers() {
        outcome.pairs.push(sluice_domain::naming::owner_labels(
            &trigger.name,
            &cluster_id,
        ));
        if !config.is_source_cluster(trigger, &cluster_id) {
            outcome.notes.push(format!(
                "eventtrigger {}: its sourceClusterSelector and clusterSetRefs do not select \
                 cluster {cluster_id} (labels {}): nothing of it is evaluated there",
                trigger.name,
                labels_text(&cluster)
            ));
        }
    }

    // The evaluator: its sets at start, then every resource of the cluster as one batch of
    // changes, as the watcher's first list publishes them.
    let mut evaluator = Evaluator::new(config.clone()).with_payload_limit(options.max_payload);
    let mut outputs = evaluator.recompute_all(1);
    let cluster_ref = sluice_wire::cluster_ref(&cluster_id);
    let changes: Vec<(pb::ResourceChange, u64)> = managed
        .iter()
        .enumerate()
        .map(|(i, object)| {
            let reference = sluice_wire::object_ref(object);
            let change = pb::ResourceChange {
                cluster: Some(cluster_ref.clone()),
                api_version: reference.api_version,
                kind: reference.kind,
                namespace: reference.namespace,
                name: reference.name,
                object_json: serde_json::to_vec(object).unwrap_or_default(),
                ..Default::default()
            };
            (change, i as u64 + 2)
        })
        .collect();
    outputs.extend(evaluator.on_changes(&changes));

    // The renderer reads the match units as they come, then renders every unit.
    let mut renderer = sluice_renderer::Stage::new(config, &options.sveltos_namespace);
    let mut sequence = 0;
    for output in outputs {
        let unit = match output {
            MatchOutput::Member(member) => Unit::Member(member),
            MatchOutput::Head(head) => Unit::Head(head),
            MatchOutput::Purge { .. } => continue,
        };
        sequence += 1;
        renderer.apply(unit, sequence);
    }
    // A failed evaluation is said once, for its set, not again for each trigger rendering it.
    let mut set_failures = std::collections::HashSet::new();
    let keys: Vec<_> = renderer.sets.keys().cloned().collect();
    for key in &keys {
        let Some(set) = renderer.sets.assemble(key) else {
            continue;
        };
        if !set.failure_message.is_empty() {
            set_failures.insert(set.failure_message.clone());
            outcome.problems.push(format!(
                "eventsource {} in cluster {}: {}",
                key.1, key.0, set.failure_message
            ));
        }
        let (report, too_large) = sluice_reporter::bounded_event_report(
            &key.0,
            &set,
            sluice_reporter::EVENT_REPORT_LIMIT,
        );
        if let Some(too_large) = too_large {
            outcome.problems.push(too_large);
        }
        outcome.reports.push(report);
    }
    sequence += 1;
    let mut states = renderer.recompute(None, sequence);
    // Where each unit's state is in `states`, so that a CloudEvent's replaces its unit's.
    let mut placed: std::collections::HashMap<Option<String>, usize> = states
        .iter()
        .enumerate()
        .map(|(i, state)| (unit_subject(state), i))
        .collect();

    // CloudEvents, in the order given, as received on the cluster's NATS: what each matches and
    // renders; a later event of a unit replaces what an earlier one did.
    let selector = CloudEventSelector::new(renderer.config.clone());
    for (i, event) in options.cloud_events.iter().enumerate() {
        sequence += 1;
        let received = pb::CloudEventReceived {
            cluster: Some(cluster_ref.clone()),
            subject: event.subject.clone(),
            event_json: event.json.clone(),
            origin: "dry-run".into(),
            origin_position: i as u64 + 1,
        };
        let matches = match selector.select(&received, sequence) {
            Ok(matches) => matches,
            Err(error) => {
                outcome.problems.push(format!(
                    "{} (subject {}): {error}",
                    event.origin, event.subject
                ));
                continue;
            }
        };
        if matches.is_empty() {
            outcome.notes.push(format!(
                "{} (subject {}): no EventSource deployed to cluster {cluster_id} selects it",
                event.origin, event.subject
            ));
        }
        for matched in matches {
            for state in renderer.cloud_event(&matched, sequence) {
                match placed.get(&unit_subject(&state)) {
                    Some(&earlier) => states[earlier] = state,
                    None => {
                        placed.insert(unit_subject(&state), states.len());
                        states.push(state);
                    }
                }
            }
        }
    }

    for state in states {
        lay_out(state, options, &set_failures, &mut outcome);
    }
    Ok(outcome)
}

/// The subject of a desired state's unit, which names it.
fn unit_subject(state: &pb::DesiredState) -> Option<String> {
    sluice_wire::unit::UnitKey::of(state)
        .ok()
        .map(|unit| unit.desired_subject())
}

/// One unit's desired state as the objects the applier writes, or what fails, or what goes.
fn lay_out(
    state: pb::DesiredState,
    options: &Options,
    set_failures: &std::collections::HashSet<String>,
    outcome: &mut Outcome,
) {
    let state = sluice_renderer::bounded(state, options.max_payload);
    let cluster = sluice_wire::cluster_id(state.cluster.as_ref(), "desired state")
        .map_or_else(|_| String::new(), |id| id.to_string());
    for message in [&state.failure_message, &state.status_message] {
        if !message.is_empty() && !set_failures.contains(message) {
            outcome.problems.push(message.clone());
        }
    }
    let unit = if !state.resource_name.is_empty() {
        format!(
            "resource {}/{}",
            state.resource_namespace, state.resource_name
        )
    } else if !state.cloud_event_source.is_empty() || !state.cloud_event_subject.is_empty() {
        format!(
            "CloudEvent source {} subject {}",
            state.cloud_event_source, state.cloud_event_subject
        )
    } else {
        String::new()
    };
    if state.removed {
        if !unit.is_empty() {
            outcome.notes.push(format!(
                "eventtrigger {}, cluster {cluster}, {unit}: deleted, with everything it wrote",
                state.event_trigger
            ));
        }
        return;
    }
    match sluice_applier::plan::desired_objects(&state) {
        Ok(objects) => {
            for object in objects {
                let size = sluice_domain::size::json_len(&object);
                if size > API_OBJECT_LIMIT {
                    outcome.problems.push(format!(
                        "eventtrigger {}: {} {}/{} takes {size} bytes, over the {API_OBJECT_LIMIT} \
                         bytes the API server stores in one object",
                        state.event_trigger,
                        text(&object, "/kind"),
                        text(&object, "/metadata/namespace"),
                        text(&object, "/metadata/name"),
                    ));
                }
                outcome.objects.push(Written {
                    event_trigger: state.event_trigger.clone(),
                    cluster: cluster.clone(),
                    unit: unit.clone(),
                    object,
                });
            }
        }
        Err(error) => outcome.problems.push(error),
    }
}

/// The most one object may take in the API server (etcd's default request limit).
pub const API_OBJECT_LIMIT: usize = 1_572_864;

fn apply(config: &mut ConfigState, object: &Value) {
    config.apply(
        text(object, "/kind"),
        text(object, "/metadata/namespace"),
        text(object, "/metadata/name"),
        Some(object),
    );
}

fn text<'v>(object: &'v Value, pointer: &str) -> &'v str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A document must name its apiVersion, kind and name, as the API server requires.
fn check_shape(object: &Value) -> anyhow::Result<()> {
    if !object.is_object() {
        bail!("a document must be an object, not {object}");
    }
    for field in ["apiVersion", "kind"] {
        if text(object, &format!("/{field}")).is_empty() {
            bail!("{field}: Required value");
        }
    }
    if text(object, "/metadata/name").is_empty() {
        bail!(
            "{} metadata.name: Required value (a name is needed; generateName is not supported)",
            text(object, "/kind")
        );
    }
    Ok(())
}

fn is_management_kind(object: &Value) -> bool {
    let kind = text(object, "/kind");
    MANAGEMENT_KINDS.contains(&kind)
        || matches!(kind, "ConfigMap" | "Secret")
        || (kind == "Cluster" && text(object, "/apiVersion").starts_with("cluster.x-k8s.io/"))
}

fn is_namespaced(kind: &str, management: bool) -> bool {
    if management {
        return !matches!(
            kind,
            "EventSource" | "EventTrigger" | "EventBasedAddOn" | "ClusterSet"
        );
    }
    !CLUSTER_SCOPED.contains(&kind)
}

/// The cluster the resources are in: named by `--cluster`, else the one cluster of the files,
/// else a SveltosCluster assumed; `--cluster-label` labels it. A cluster read from the files
/// without a status is taken as ready (a dry run shows what would be written once it is).
fn choose_cluster(
    clusters: &mut Vec<(String, Value)>,
    options: &Options,
    notes: &mut Vec<String>,
) -> anyhow::Result<Value> {
    let wanted = options
        .cluster
        .as_deref()
        .map(|name| match name.split_once('/') {
            Some((namespace, name)) => (namespace.to_string(), name.to_string()),
            None => (options.namespace.clone(), name.to_string()),
        });
    let index = match &wanted {
        Some((namespace, name)) => clusters.iter().position(|(_, c)| {
            text(c, "/metadata/namespace") == namespace && text(c, "/metadata/name") == name
        }),
        None if clusters.len() == 1 => Some(0),
        None if clusters.is_empty() => None,
        None => bail!(
            "the files define {} clusters ({}): name the one the resources are in with --cluster",
            clusters.len(),
            clusters
                .iter()
                .map(|(_, c)| describe_cluster(c))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let index = match index {
        Some(index) => index,
        None => {
            let (namespace, name) =
                wanted.unwrap_or_else(|| ("default".to_string(), "dry-run".to_string()));
            clusters.push((
                "--cluster".to_string(),
                json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
                    "metadata": {"name": name, "namespace": namespace}}),
            ));
            clusters.len() - 1
        }
    };
    for (origin, cluster) in clusters.iter_mut() {
        if cluster.get("status").is_none() {
            let ready = if text(cluster, "/kind") == "Cluster" {
                json!({"controlPlaneReady": true})
            } else {
                json!({"ready": true})
            };
            cluster["status"] = ready;
            if origin != "--cluster" {
                notes.push(format!(
                    "{origin}: {} has no status; taken as ready",
                    describe_cluster(cluster)
                ));
            }
        }
    }
    let cluster = &mut clusters[index].1;
    for (key, value) in &options.cluster_labels {
        cluster["metadata"]["labels"][key] = json!(value);
    }
    Ok(cluster.clone())
}

fn describe_cluster(cluster: &Value) -> String {
    format!(
        "{} {}/{}",
        text(cluster, "/kind"),
        text(cluster, "/metadata/namespace"),
        text(cluster, "/metadata/name")
    )
}

fn labels_text(cluster: &Value) -> String {
    let labels: BTreeMap<&str, &str> = cluster
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if labels.is_empty() {
        return "none; add some with --cluster-label KEY=VALUE".to_string();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every document of `path` (a file, a directory's `.yaml`/`.yml`/`.json` files in name order,
/// or `-` for stdin); a `List` stands for its items.
pub fn read_documents(path: &Path, managed_only: bool) -> anyhow::Result<Vec<Document>> {
    let mut out = Vec::new();
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("failed to read stdin")?;
        parse_documents("<stdin>", &text, managed_only, &mut out)?;
        return Ok(out);
    }
    let files = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("failed to read directory {}", path.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            })
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("failed to read {}", file.display()))?;
        parse_documents(&file.display().to_string(), &text, managed_only, &mut out)?;
    }
    Ok(out)
}

/// The documents of one file's text (YAML, of which JSON is a part).
pub fn parse_documents(
    name: &str,
    contents: &str,
    managed_only: bool,
    out: &mut Vec<Document>,
) -> anyhow::Result<()> {
    for (i, document) in serde_yaml::Deserializer::from_str(contents).enumerate() {
        let origin = format!("{name}, document {}", i + 1);
        let value: Value = serde::Deserialize::deserialize(document)
            .map_err(|e| anyhow::anyhow!("{origin}: not YAML: {e}"))?;
        if value.is_null() {
            continue;
        }
        let is_list = text(&value, "/kind").ends_with("List") && value.get("items").is_some();
        if is_list {
            let items = value["items"]
                .as_array()
                .with_context(|| format!("{origin}: items must be a list"))?;
            for (j, item) in items.iter().enumerate() {
                out.push(Document {
                    origin: format!("{origin}, items[{j}]"),
                    object: item.clone(),
                    managed_only,
                });
            }
        } else {
            out.push(Document {
                origin,
                object: value,
                managed_only,
            });
        }
    }
    Ok(())
}

/// Runs `sluice dry-run`: the objects on `out`, notes and problems on `err`. Returns whether
/// nothing failed.
pub fn run(args: &DryRunArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<bool> {
    let mut documents = Vec::new();
    for path in &args.files {
        documents.extend(read_documents(path, false)?);
    }
    for path in &args.managed {
        documents.extend(read_documents(path, true)?);
    }
    let options = Options {
        cluster: args.cluster.clone(),
        cluster_labels: args.cluster_labels.clone(),
        namespace: args.namespace.clone(),
        sveltos_namespace: args.sveltos_namespace.clone(),
        max_payload: args.max_payload,
        cloud_events: args
            .cloud_events
            .iter()
            .map(|(subject, file)| {
                let json = std::fs::read(file)
                    .with_context(|| format!("failed to read {}", file.display()))?;
                Ok(CloudEventInput {
                    origin: file.display().to_string(),
                    subject: subject.clone(),
                    json,
                })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let outcome = dry_run(&documents, &options)?;
    print(&outcome, args.output, args.reports, out)?;
    if !args.against.is_empty() {
        let mut existing = Vec::new();
        for path in &args.against {
            existing.extend(read_documents(path, false)?.into_iter().map(|d| d.object));
        }
        let (differences, unchanged) = compare(&outcome, &existing);
        for d in &differences {
            let action = match d.action {
                Action::Create => "create",
                Action::Change => "change",
                Action::Delete => "delete",
            };
            let place = if d.namespace.is_empty() {
                d.name.clone()
            } else {
                format!("{}/{}", d.namespace, d.name)
            };
            writeln!(err, "{action} {} {place} ({})", d.kind, d.owner)?;
        }
        let count = |action: Action| differences.iter().filter(|d| d.action == action).count();
        writeln!(
            err,
            "against the existing objects: {} to create, {} to change, {} to delete, {unchanged} unchanged",
            count(Action::Create),
            count(Action::Change),
            count(Action::Delete)
        )?;
    }
    for note in &outcome.notes {
        writeln!(err, "note: {note}")?;
    }
    for problem in &outcome.problems {
        writeln!(err, "error: {problem}")?;
    }
    writeln!(
        err,
        "{} objects for cluster {}, {} problems",
        outcome.objects.len(),
        outcome.cluster,
        outcome.problems.len()
    )?;
    Ok(outcome.problems.is_empty())
}

fn print(
    outcome: &Outcome,
    format: Format,
    reports: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let reports: &[Value] = if reports { &outcome.reports } else { &[] };
    match format {
        Format::Json => {
            let items: Vec<&Value> = reports
                .iter()
                .chain(outcome.objects.iter().map(|w| &w.object))
                .collect();
            let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
            writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        }
        Format::Yaml => {
            for report in reports {
                writeln!(out, "---\n# the EventReport")?;
                write!(out, "{}", serde_yaml::to_string(report)?)?;
            }
            for written in &outcome.objects {
                let unit = if written.unit.is_empty() {
                    String::new()
                } else {
                    format!(", {}", written.unit)
                };
                writeln!(
                    out,
                    "---\n# eventtrigger {}, cluster {}{unit}",
                    written.event_trigger, written.cluster
                )?;
                write!(out, "{}", serde_yaml::to_string(&written.object)?)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
