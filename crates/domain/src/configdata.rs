//! The management cluster's ConfigMaps and Secrets on the bus: which of them a stage needs
//! (only those an EventTrigger makes the renderer read), and the form each one travels in (a
//! Secret's contents sealed, a Secret the renderer cannot use reduced to its metadata). It
//! decides; the watcher publishes and `sluice_wire` seals and opens.
//!
//! The renderer reads a ConfigMap or Secret for `policyRefs`, the `valuesFrom` of
//! `helmCharts` and `kustomizationRefs`, and `configMapGenerator`/`secretGenerator`. It never
//! reads what `templateResourceRefs` name (addon-controller does, at deploy time), nor a
//! cluster's kubeconfig Secret (only the watcher does, from its own watch), so neither travels.
//!
//! Names and namespaces may be templates rendered per event (`{{ .Cluster.metadata.name }}`,
//! `{{ .Resource.metadata.name }}`); the watcher has no event, so a template is read as a
//! pattern in which every `{{ }}` action may render to any text (`"{{ .X }}-values"` admits
//! every name ending in `-values`). That admits a superset of what any rendering can name,
//! never less. An empty namespace is the source cluster's, as the renderer resolves it, so it
//! stands for every cluster's namespace.

use std::collections::{BTreeSet, HashSet};

use serde_json::{json, Map, Value};

use crate::config::ConfigState;
use crate::eventtrigger::EventTrigger;

/// The only Secret type Sveltos accepts as a policy source; only such a Secret's contents are
/// ever needed, so only they travel (sealed).
pub const CLUSTER_PROFILE_SECRET_TYPE: &str = "addons.projectsveltos.io/cluster-profile";

/// Field of a Secret stand-in whose contents a stage cannot have; its value says why. Not a
/// field a Kubernetes object can carry, so it never collides with a real one.
pub const WITHHELD_FIELD: &str = "sluice.io/withheld";

/// ConfigMap or Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DataKind {
    ConfigMap,
    Secret,
}

impl DataKind {
    /// The kind a reference names: the renderer reads `Secret` as a Secret and anything
    /// else as a ConfigMap.
    pub fn of_reference(kind: &str) -> DataKind {
        match kind {
            "Secret" => DataKind::Secret,
            _ => DataKind::ConfigMap,
        }
    }

    /// The kind of a config subject, if it is one of these two.
    pub fn of_config_kind(kind: &str) -> Option<DataKind> {
        match kind {
            "ConfigMap" => Some(DataKind::ConfigMap),
            "Secret" => Some(DataKind::Secret),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DataKind::ConfigMap => "ConfigMap",
            DataKind::Secret => "Secret",
        }
    }
}

/// A name or namespace as a trigger writes it: literal text, or a template read as a pattern
/// whose actions stand for any text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NamePattern {
    Exact(String),
    /// Literal pieces in order; any text may come before the first piece is matched only when
    /// `pieces[0]` is empty, and likewise after the last.
    Wildcard(Vec<String>),
}

impl NamePattern {
    /// Reads `text` as the renderer will render it: without `{{` it is used as it is.
    pub fn parse(text: &str) -> NamePattern {
        if !text.contains("{{") {
            return NamePattern::Exact(text.to_string());
        }
        NamePattern::Wildcard(template_pieces(text))
    }

    pub fn matches(&self, text: &str) -> bool {
        match self {
            NamePattern::Exact(exact) => exact == text,
            NamePattern::Wildcard(pieces) => glob_match(pieces, text),
        }
    }
}

/// One ConfigMap/Secret reference of a trigger, as a pattern.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reference {
    pub kind: DataKind,
    pub namespace: NamePattern,
    pub name: NamePattern,
}

/// Every ConfigMap/Secret some valid trigger makes the renderer read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct References {
    exact: HashSet<(DataKind, String, String)>,
    patterns: BTreeSet<Reference>,
}

impl References {
    /// The references of every valid trigger of `state`. An empty namespace stands for the
    /// namespace of every known cluster, not only of those the trigger selects now: a cluster
    /// that starts matching must find what it needs already on the bus (the renderer renders
    /// it as soon as its label changes), and a cluster that stops matching for a moment must
    /// not have it withdrawn and sent again.
    pub fn of(state: &ConfigState) -> References {
        let namespaces: BTreeSet<&str> = state
            .clusters
            .keys()
            .map(|id| id.namespace.as_str())
            .collect();
        let mut out = References::default();
        for trigger in state.valid_event_triggers() {
            for (kind, namespace, name) in written_references(trigger) {
                let name = NamePattern::parse(name);
                if namespace.is_empty() {
                    for cluster_namespace in &namespaces {
                        out.insert(Reference {
                            kind,
                            namespace: NamePattern::Exact(cluster_namespace.to_string()),
                            name: name.clone(),
                        });
                    }
                } else {
                    out.insert(Reference {
                        kind,
                        namespace: NamePattern::parse(namespace),
                        name: name.clone(),
                    });
                }
            }
        }
        out
    }

    fn insert(&mut self, reference: Reference) {
        match (&reference.namespace, &reference.name) {
            (NamePattern::Exact(namespace), NamePattern::Exact(name)) => {
                self.exact
                    .insert((reference.kind, namespace.clone(), name.clone()));
            }
            _ => {
                self.patterns.insert(reference);
            }
        }
    }

    /// Whether the object `namespace`/`name` of `kind` is referenced.
    pub fn needs(&self, kind: DataKind, namespace: &str, name: &str) -> bool {
        self.exact
            .contains(&(kind, namespace.to_string(), name.to_string()))
            || self
                .patterns
                .iter()
                .any(|r| r.kind == kind && r.namespace.matches(namespace) && r.name.matches(name))
    }
}

/// (kind, namespace, name) of every ConfigMap/Secret reference a trigger writes, unrendered.
fn written_references(trigger: &EventTrigger) -> Vec<(DataKind, &str, &str)> {
    let mut out = Vec::new();
    for reference in &trigger.policy_refs {
        out.push((
            DataKind::of_reference(&reference.kind),
            reference.namespace.as_str(),
            reference.name.as_str(),
        ));
    }
    for item in trigger
        .helm_charts
        .iter()
        .chain(&trigger.kustomization_refs)
    {
        let entries = item.get("valuesFrom").and_then(Value::as_array);
        for entry in entries.into_iter().flatten() {
            let field = |name: &str| entry.get(name).and_then(Value::as_str).unwrap_or("");
            out.push((
                DataKind::of_reference(field("kind")),
                field("namespace"),
                field("name"),
            ));
        }
    }
    let generators = [
        (DataKind::ConfigMap, &trigger.config_map_generator),
        (DataKind::Secret, &trigger.secret_generator),
    ];
    for (kind, entries) in generators {
        for generator in entries {
            out.push((kind, generator.namespace.as_str(), generator.name.as_str()));
        }
    }
    out
}

/// How a referenced object travels.
#[derive(Clone, Debug, PartialEq)]
pub enum BusForm {
    /// As it is: a ConfigMap, or a Secret reduced to what the renderer reads of a Secret it
    /// cannot use (metadata and type, never its data).
    Plain(Value),
    /// A Secret whose contents the renderer reads: they must be sealed before they travel.
    Sealed(Value),
}

/// The form `object` travels in.
pub fn bus_form(kind: DataKind, object: &Value) -> BusForm {
    match kind {
        DataKind::ConfigMap => BusForm::Plain(object.clone()),
        DataKind::Secret
            if object.get("type").and_then(Value::as_str) == Some(CLUSTER_PROFILE_SECRET_TYPE) =>
        {
            BusForm::Sealed(object.clone())
        }
        DataKind::Secret => BusForm::Plain(secret_metadata(object, None)),
    }
}

/// A stand-in for a Secret whose contents a stage cannot have, saying why.
pub fn withheld(object_or_key: &Value, reason: &str) -> Value {
    secret_metadata(object_or_key, Some(reason))
}

/// Why a Secret's contents are withheld, if they are.
pub fn withheld_reason(object: &Value) -> Option<&str> {
    object.get(WITHHELD_FIELD).and_then(Value::as_str)
}

/// A Secret with only its kind, name, namespace, resourceVersion and type.
fn secret_metadata(object: &Value, withheld: Option<&str>) -> Value {
    let mut metadata = Map::new();
    for field in ["namespace", "name", "resourceVersion"] {
        if let Some(value) = object.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.to_string(), value.clone());
        }
    }
    let mut out = json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata});
    if let Some(kind) = object.get("type") {
        out["type"] = kind.clone();
    }
    if let Some(reason) = withheld {
        out[WITHHELD_FIELD] = json!(reason);
    }
    out
}

/// The literal pieces of a Go template, with one piece between every two actions: the text
/// around the first and last action becomes the first and last piece (empty when the template
/// starts or ends with an action). Trim markers (`{{- `, ` -}}`) drop the adjacent white space
/// as the engine does. An action left open stands for any text up to the end.
fn template_pieces(text: &str) -> Vec<String> {
    let mut pieces = vec![String::new()];
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let last = pieces.last_mut().expect("pieces start non-empty");
        last.push_str(&rest[..start]);
        let action = &rest[start + 2..];
        if trim_marker_after_open(action) {
            let trimmed = last.trim_end().len();
            last.truncate(trimmed);
        }
        match action_end(action) {
            Some((end, trim_after)) => {
                rest = &action[end..];
                if trim_after {
                    rest = rest.trim_start();
                }
                pieces.push(String::new());
            }
            None => {
                pieces.push(String::new());
                return pieces;
            }
        }
    }
    pieces
        .last_mut()
        .expect("pieces start non-empty")
        .push_str(rest);
    pieces
}

/// `{{- ` trims: a dash followed by white space right after the delimiter (`{{-3}}` is a number).
fn trim_marker_after_open(action: &str) -> bool {
    let mut chars = action.chars();
    chars.next() == Some('-') && chars.next().is_some_and(char::is_whitespace)
}

/// Where the action that `action` opens ends (just past `}}`), and whether it trims what
/// follows. Quoted strings, raw strings, characters and comments may hold `}}`.
fn action_end(action: &str) -> Option<(usize, bool)> {
    let bytes = action.as_bytes();
    let body = action.trim_start_matches('-').trim_start();
    if body.starts_with("/*") {
        let comment_start = action.len() - body.len();
        let close = action[comment_start + 2..].find("*/")? + comment_start + 4;
        let end = action[close..].find("}}")? + close;
        let trim = action[close..end].trim() == "-";
        return Some((end + 2, trim));
    }
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' | b'\'' => {
                let quote = bytes[i];
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'`' => {
                i += 1 + action[i + 1..].find('`')? + 1;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                let trim = i >= 2 && bytes[i - 1] == b'-' && bytes[i - 2].is_ascii_whitespace();
                return Some((i + 2, trim));
            }
            _ => i += 1,
        }
    }
    None
}

/// `*`-glob matching over literal pieces with "anything" between consecutive pieces.
fn glob_match(pieces: &[String], text: &str) -> bool {
    let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
        return true;
    };
    if pieces.len() == 1 {
        return first == text;
    }
    if text.len() < first.len() + last.len()
        || !text.starts_with(first.as_str())
        || !text.ends_with(last.as_str())
    {
        return false;
    }
    let mut middle = &text[first.len()..text.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match middle.find(piece.as_str()) {
            Some(at) => middle = &middle[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_read_as_patterns_admit_every_rendering() {
        let check = |template: &str, admitted: &[&str], refused: &[&str]| {
            let pattern = NamePattern::parse(template);
            for name in admitted {
                assert!(pattern.matches(name), "{template} should admit {name}");
            }
            for name in refused {
                assert!(!pattern.matches(name), "{template} should refuse {name}");
            }
        };
        check("plain", &["plain"], &["plain-x", "xplain", ""]);
        check(
            "{{ .Cluster.metadata.name }}-values",
            &["a-values", "-values", "x-y-values"],
            &["values", "a-value", "a-values-x"],
        );
        check(
            "pre-{{ .A }}-mid-{{ .B }}",
            &["pre--mid-", "pre-x-mid-y", "pre-mid-mid-mid-"],
            &["pre-x-mi-y", "x-pre-a-mid-b"],
        );
        check("{{ .A }}", &["", "anything"], &[]);
        check("{{ .A }}{{ .B }}", &["", "ab"], &[]);
        // Trim markers eat the white space next to them, as the engine does.
        check("a {{- .X -}} b", &["ab", "axb", "a b"], &["ba", "a"]);
        // `}}` inside a string, a raw string, a character or a comment does not end the action.
        check(r#"{{ printf "}}" }}-x"#, &["}}-x", "q-x"], &["q-y"]);
        check("{{ `}}` }}-x", &["q-x"], &["q-y"]);
        check("{{/* }} */}}-x", &["-x"], &["-y"]);
        check("{{- /* c */ -}} x", &["x"], &[" x-y"]);
        // `{{-3}}` is a number, not a trim marker.
        check("a {{-3}}", &["a -3", "a x"], &["a-3"]);
        // An action left open is a rendering error; admitting anything after it is safe.
        check("a-{{ .X", &["a-", "a-bc"], &["b-"]);
    }

    fn state(trigger: Value) -> ConfigState {
        let mut s = ConfigState::default();
        for (ns, name, env) in [("team-a", "c1", "prod"), ("team-b", "c2", "prod")] {
            s.apply(
                "SveltosCluster",
                ns,
                name,
                Some(&json!({"kind": "SveltosCluster",
                    "metadata": {"name": name, "namespace": ns, "labels": {"env": env}},
                    "status": {"ready": true}})),
            );
        }
        s.apply("EventTrigger", "", "t", Some(&trigger));
        s
    }

    fn trigger(spec: Value) -> Value {
        let mut spec = spec;
        spec["eventSourceName"] = json!("es");
        if spec.get("sourceClusterSelector").is_none() {
            spec["sourceClusterSelector"] = json!({"matchLabels": {"env": "prod"}});
        }
        json!({"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "EventTrigger",
               "metadata": {"name": "t"}, "spec": spec})
    }

    /// Which of a fixed set of objects a trigger's spec makes needed.
    fn needed(spec: Value) -> Vec<String> {
        let refs = References::of(&state(trigger(spec)));
        let objects = [
            (DataKind::ConfigMap, "default", "policy"),
            (DataKind::Secret, "default", "policy"),
            (DataKind::ConfigMap, "team-a", "values"),
            (DataKind::ConfigMap, "team-b", "values"),
            (DataKind::ConfigMap, "team-c", "values"),
            (DataKind::Secret, "default", "c1-values"),
            (DataKind::Secret, "default", "c2-values"),
            (DataKind::Secret, "default", "credentials"),
            (DataKind::Secret, "team-a", "c1-kubeconfig"),
            (DataKind::ConfigMap, "default", "generator-source"),
            (DataKind::Secret, "default", "generator-source"),
        ];
        objects
            .iter()
            .filter(|(kind, ns, name)| refs.needs(*kind, ns, name))
            .map(|(kind, ns, name)| format!("{}:{ns}/{name}", kind.as_str()))
            .collect()
    }

    #[test]
    fn references_are_what_the_renderer_reads() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "a policyRef of either kind, literal",
                json!({"policyRefs": [{"kind": "ConfigMap", "namespace": "default", "name": "policy"},
                                      {"kind": "Secret", "namespace": "default", "name": "policy"}]}),
                vec!["ConfigMap:default/policy", "Secret:default/policy"],
            ),
            (
                "an empty namespace is each cluster's",
                json!({"policyRefs": [{"kind": "ConfigMap", "name": "values"}]}),
                vec!["ConfigMap:team-a/values", "ConfigMap:team-b/values"],
            ),
            (
                "helm valuesFrom with a templated name",
                json!({"helmCharts": [{"chartName": "x", "valuesFrom": [
                    {"kind": "Secret", "namespace": "default", "name": "{{ .Cluster.metadata.name }}-values"}]}]}),
                vec!["Secret:default/c1-values", "Secret:default/c2-values"],
            ),
            (
                "kustomization valuesFrom, a templated namespace",
                json!({"kustomizationRefs": [{"kind": "GitRepository", "valuesFrom": [
                    {"kind": "ConfigMap", "namespace": "{{ .Cluster.metadata.namespace }}", "name": "values"}]}]}),
                vec![
                    "ConfigMap:team-a/values",
                    "ConfigMap:team-b/values",
                    "ConfigMap:team-c/values",
                ],
            ),
            (
                "generators name their sources",
                json!({"configMapGenerator": [{"namespace": "default", "name": "generator-source", "nameFormat": "x"}],
                       "secretGenerator": [{"namespace": "default", "name": "generator-source", "nameFormat": "y"}]}),
                vec![
                    "ConfigMap:default/generator-source",
                    "Secret:default/generator-source",
                ],
            ),
            (
                "templateResourceRefs are read by addon-controller, not by sluice",
                json!({"templateResourceRefs": [{"identifier": "Credentials", "resource":
                    {"apiVersion": "v1", "kind": "Secret", "namespace": "default", "name": "credentials"}}]}),
                vec![],
            ),
            (
                "a trigger that selects no cluster now still needs what it names",
                json!({"sourceClusterSelector": {"matchLabels": {"env": "none"}},
                       "policyRefs": [{"kind": "ConfigMap", "namespace": "default", "name": "policy"},
                                      {"kind": "ConfigMap", "name": "values"}]}),
                vec![
                    "ConfigMap:default/policy",
                    "ConfigMap:team-a/values",
                    "ConfigMap:team-b/values",
                ],
            ),
        ];
        for (what, spec, expected) in cases {
            assert_eq!(needed(spec), expected, "{what}");
        }
    }

    #[test]
    fn broken_and_deleted_triggers_need_nothing() {
        let mut s = state(trigger(json!({"policyRefs": [
            {"kind": "ConfigMap", "namespace": "default", "name": "policy"}]})));
        assert!(References::of(&s).needs(DataKind::ConfigMap, "default", "policy"));
        s.apply("EventTrigger", "", "t", None);
        assert!(!References::of(&s).needs(DataKind::ConfigMap, "default", "policy"));
        s.apply(
            "EventTrigger",
            "",
            "t",
            Some(&json!({"kind": "EventTrigger", "metadata": {"name": "t"},
                "spec": {"policyRefs": [{"kind": "ConfigMap", "namespace": "default", "name": "policy"}]}})),
        );
        assert!(!References::of(&s).needs(DataKind::ConfigMap, "default", "policy"));
    }

    #[test]
    fn only_cluster_profile_secrets_travel_with_contents_and_those_sealed() {
        let config_map =
            json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        assert_eq!(
            bus_form(DataKind::ConfigMap, &config_map),
            BusForm::Plain(config_map.clone())
        );
        let usable = json!({"kind": "Secret", "type": CLUSTER_PROFILE_SECRET_TYPE,
            "metadata": {"namespace": "default", "name": "s"}, "data": {"k": "c2VjcmV0"}});
        assert_eq!(
            bus_form(DataKind::Secret, &usable),
            BusForm::Sealed(usable.clone())
        );
        let kubeconfig = json!({"kind": "Secret", "type": "Opaque",
            "metadata": {"namespace": "default", "name": "k", "resourceVersion": "7",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{}}"}},
            "data": {"value": "c2VjcmV0"}, "stringData": {"x": "secret"}});
        assert_eq!(
            bus_form(DataKind::Secret, &kubeconfig),
            BusForm::Plain(
                json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"namespace": "default", "name": "k", "resourceVersion": "7"}})
            )
        );
        let stand_in = withheld(&usable, "no key");
        assert_eq!(withheld_reason(&stand_in), Some("no key"));
        assert_eq!(stand_in.get("data"), None);
        assert_eq!(withheld_reason(&usable), None);
    }
}
