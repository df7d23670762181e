//! The CRD schemas of `k8s/crds/` against the facts of Sveltos's CRDs
//! (`k8s/crds/facts/sveltos-crd-facts.json`): each v1beta1 schema is flattened into the same fact form
//! (path, type, required, default, enum, format, limits, x-kubernetes-* markers) and compared; any
//! difference not in [`DELIBERATE`] fails with a readable list. Also checks that every field of every
//! CRD version has a description.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

/// Differences kept on purpose, each recorded in the ADR it names:
/// (CRD name, version, field path or "" for the version itself, what differs, ADR).
const DELIBERATE: &[(&str, &str, &str, &str, &str)] = &[
    (
        "eventsources.lib.projectsveltos.io",
        "v1alpha1",
        "",
        "version served by sluice, not by Sveltos",
        "docs/adr/0017-crd-schemas.md",
    ),
    (
        "eventtriggers.lib.projectsveltos.io",
        "v1alpha1",
        "",
        "version served by sluice, not by Sveltos",
        "docs/adr/0017-crd-schemas.md",
    ),
];

/// Schema keywords that are structure or prose, not facts.
const NOT_FACTS: [&str; 5] = [
    "description",
    "properties",
    "items",
    "additionalProperties",
    "required",
];

/// One difference between our CRDs and the facts.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    pub crd: String,
    pub version: String,
    /// Field path; empty for a difference of the CRD or version itself.
    pub path: String,
    pub what: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            String::new()
        } else {
            format!(" {}", self.path)
        };
        write!(f, "{} {}{}: {}", self.crd, self.version, path, self.what)
    }
}

pub fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../k8s/crds")
}

/// Every CRD of `k8s/crds/*.yaml`, by name.
pub fn load_crds() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(crds_dir())
        .expect("k8s/crds is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("CRD file is readable");
        let crd: Value = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        out.insert(name, crd);
    }
    out
}

pub fn load_facts() -> Value {
    let text = std::fs::read_to_string(crds_dir().join("facts/sveltos-crd-facts.json"))
        .expect("facts file is readable");
    serde_json::from_str(&text).expect("facts file parses")
}

/// A schema as facts: field path -> the field's facts (keywords other than prose and structure, plus
/// `required`: whether its parent lists it as required).
pub fn flatten(schema: &Value) -> BTreeMap<String, Map<String, Value>> {
    let mut out = BTreeMap::new();
    walk(schema, ".", false, &mut out);
    out
}

fn walk(node: &Value, path: &str, required: bool, out: &mut BTreeMap<String, Map<String, Value>>) {
    let mut facts = Map::new();
    facts.insert("required".into(), Value::Bool(required));
    if let Some(object) = node.as_object() {
        for (key, value) in object {
            if !NOT_FACTS.contains(&key.as_str()) {
                facts.insert(key.clone(), value.clone());
            }
        }
    }
    out.insert(path.to_string(), facts);
    let child = |name: &str| {
        if path == "." {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    let required_list: Vec<&str> = node["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = node["properties"].as_object() {
        for (name, schema) in properties {
            walk(
                schema,
                &child(name),
                required_list.contains(&name.as_str()),
                out,
            );
        }
    }
    if node["items"].is_object() {
        walk(&node["items"], &format!("{path}[]"), false, out);
    }
    if node["additionalProperties"].is_object() {
        walk(
            &node["additionalProperties"],
            &format!("{path}{{}}"),
            false,
            out,
        );
    }
}

/// The facts of one fact-file version: path -> facts without the path.
fn fact_fields(version: &Value) -> BTreeMap<String, Map<String, Value>> {
    let mut out = BTreeMap::new();
    for field in version["fields"].as_array().into_iter().flatten() {
        let mut facts = field.as_object().cloned().unwrap_or_default();
        let path = facts
            .remove("path")
            .and_then(|p| p.as_str().map(str::to_string))
            .unwrap_or_default();
        out.insert(path, facts);
    }
    out
}

fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "absent".to_string(), Value::to_string)
}

/// Every difference between the CRDs and the facts, deliberate or not.
pub fn compare(crds: &BTreeMap<String, Value>, facts: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    for fact_crd in facts["crds"].as_array().into_iter().flatten() {
        let name = fact_crd["name"].as_str().unwrap_or_default();
        let diff = |version: &str, path: &str, what: String| Difference {
            crd: name.to_string(),
            version: version.to_string(),
            path: path.to_string(),
            what,
        };
        let Some(crd) = crds.get(name) else {
            out.push(diff("", "", "no CRD in k8s/crds".into()));
            continue;
        };
        let spec = &crd["spec"];
        for (ours, theirs, what) in [
            (&spec["group"], &fact_crd["group"], "group"),
            (&spec["names"]["kind"], &fact_crd["kind"], "kind"),
            (&spec["names"]["plural"], &fact_crd["plural"], "plural"),
            (&spec["scope"], &fact_crd["scope"], "scope"),
        ] {
            if ours != theirs {
                out.push(diff(
                    "",
                    "",
                    format!("{what}: ours {ours}, Sveltos {theirs}"),
                ));
            }
        }
        let our_versions: Vec<&Value> = spec["versions"].as_array().into_iter().flatten().collect();
        let fact_versions: Vec<&Value> = fact_crd["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        for v in &our_versions {
            let vname = v["name"].as_str().unwrap_or_default();
            if !fact_versions.iter().any(|f| f["name"] == v["name"]) {
                out.push(diff(
                    vname,
                    "",
                    "version served by sluice, not by Sveltos".into(),
                ));
            }
        }
        for fact_version in fact_versions {
            let vname = fact_version["name"].as_str().unwrap_or_default();
            let Some(version) = our_versions
                .iter()
                .find(|v| v["name"] == fact_version["name"])
            else {
                out.push(diff(vname, "", "version missing".into()));
                continue;
            };
            for key in ["served", "storage"] {
                if version[key] != fact_version[key] {
                    out.push(diff(
                        vname,
                        "",
                        format!(
                            "{key}: ours {}, Sveltos {}",
                            version[key], fact_version[key]
                        ),
                    ));
                }
            }
            let ours_status = version["subresources"]["status"].is_object();
            let theirs_status = fact_version["subresources"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| x == "status"));
            if ours_status != theirs_status {
                out.push(diff(
                    vname,
                    "",
                    format!("status subresource: ours {ours_status}, Sveltos {theirs_status}"),
                ));
            }
            let ours = flatten(&version["schema"]["openAPIV3Schema"]);
            let theirs = fact_fields(fact_version);
            for (path, their_facts) in &theirs {
                let Some(our_facts) = ours.get(path) else {
                    out.push(diff(vname, path, "field missing".into()));
                    continue;
                };
                let keys: std::collections::BTreeSet<&String> =
                    our_facts.keys().chain(their_facts.keys()).collect();
                for key in keys {
                    let (a, b) = (our_facts.get(key), their_facts.get(key));
                    if a != b {
                        out.push(diff(
                            vname,
                            path,
                            format!("{key}: ours {}, Sveltos {}", show(a), show(b)),
                        ));
                    }
                }
            }
            for path in ours.keys().filter(|p| !theirs.contains_key(*p)) {
                out.push(diff(vname, path, "field not in Sveltos's CRD".into()));
            }
        }
    }
    out
}

fn deliberate(d: &Difference) -> bool {
    DELIBERATE.iter().any(|(crd, version, path, what, _adr)| {
        d.crd == *crd && d.version == *version && d.path == *path && d.what == *what
    })
}

#[test]
fn crd_schemas_carry_every_fact_of_sveltos_crds() {
    let differences: Vec<String> = compare(&load_crds(), &load_facts())
        .iter()
        .filter(|d| !deliberate(d))
        .map(ToString::to_string)
        .collect();
    assert!(
        differences.is_empty(),
        "{} difference(s) between k8s/crds and k8s/crds/facts/sveltos-crd-facts.json \
         (regenerate with python3 scripts/gen-crds.py, or record a deliberate one in ADR 0017 and DELIBERATE):\n  {}",
        differences.len(),
        differences.join("\n  ")
    );
}

#[test]
fn every_deliberate_difference_still_exists_and_names_its_adr() {
    let differences = compare(&load_crds(), &load_facts());
    for (crd, version, path, what, adr) in DELIBERATE {
        assert!(
            differences.iter().any(|d| d.crd == *crd
                && d.version == *version
                && d.path == *path
                && d.what == *what),
            "allowlisted difference no longer exists: {crd} {version} {path} {what}"
        );
        let text = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(adr),
        )
        .unwrap_or_else(|e| panic!("{adr}: {e}"));
        assert!(
            text.contains(crd),
            "{adr} does not record the difference of {crd} {version}"
        );
    }
}

/// The comparison finds a changed fact on either side, and says where and what.
#[test]
fn a_changed_fact_is_reported_with_its_path() {
    let crds = load_crds();
    let facts = load_facts();
    let baseline: Vec<Difference> = compare(&crds, &facts)
        .into_iter()
        .filter(|d| !deliberate(d))
        .collect();
    assert_eq!(baseline, vec![]);

    // A default changed in the facts.
    let mut changed = facts.clone();
    let field = changed["crds"]
        .as_array_mut()
        .and_then(|crds| crds.iter_mut().find(|c| c["kind"] == "EventTrigger"))
        .and_then(|c| c["versions"][0]["fields"].as_array_mut())
        .and_then(|f| f.iter_mut().find(|f| f["path"] == "spec.syncMode"))
        .expect("EventTrigger spec.syncMode is a fact");
    field["default"] = Value::String("OneTime".into());
    let found: Vec<String> = compare(&crds, &changed)
        .iter()
        .filter(|d| !deliberate(d))
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        vec![
            r#"eventtriggers.lib.projectsveltos.io v1beta1 spec.syncMode: default: ours "Continuous", Sveltos "OneTime""#
        ]
    );

    // A required field and an enum value dropped from our schema, and a field added to it.
    let mut ours = crds.clone();
    let schema = ours
        .get_mut("eventsources.lib.projectsveltos.io")
        .map(|c| &mut c["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        .expect("EventSource CRD");
    let selector = &mut schema["properties"]["spec"]["properties"]["resourceSelectors"]["items"];
    selector["required"] = serde_json::json!(["group", "version"]);
    selector["properties"]["labelFilters"]["items"]["properties"]["operation"]["enum"] =
        serde_json::json!(["Equal", "Different", "Has"]);
    selector["properties"]["extra"] = serde_json::json!({"type": "string"});
    let found: Vec<String> = compare(&ours, &facts)
        .iter()
        .filter(|d| !deliberate(d))
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        vec![
            "eventsources.lib.projectsveltos.io v1beta1 spec.resourceSelectors[].kind: required: ours false, Sveltos true",
            r#"eventsources.lib.projectsveltos.io v1beta1 spec.resourceSelectors[].labelFilters[].operation: enum: ours ["Equal","Different","Has"], Sveltos ["Equal","Different","Has","DoesNotHave"]"#,
            "eventsources.lib.projectsveltos.io v1beta1 spec.resourceSelectors[].extra: field not in Sveltos's CRD",
        ]
    );

    // A CRD file missing altogether.
    let mut fewer = crds.clone();
    fewer.remove("clustersets.lib.projectsveltos.io");
    let found: Vec<String> = compare(&fewer, &facts)
        .iter()
        .filter(|d| !deliberate(d))
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        vec!["clustersets.lib.projectsveltos.io : no CRD in k8s/crds"]
    );
}

#[test]
fn every_field_of_every_crd_version_has_a_description() {
    let mut missing = Vec::new();
    for (name, crd) in load_crds() {
        for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let schema = &version["schema"]["openAPIV3Schema"];
            let mut nodes = Vec::new();
            collect_nodes(schema, ".", &mut nodes);
            for (path, node) in nodes {
                let text = node["description"].as_str().unwrap_or("");
                if text.trim().is_empty() {
                    missing.push(format!("{name} {} {path}", version["name"]));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "fields without a description:\n  {}",
        missing.join("\n  ")
    );
}

fn collect_nodes<'a>(node: &'a Value, path: &str, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.to_string(), node));
    if let Some(properties) = node["properties"].as_object() {
        for (name, child) in properties {
            let p = if path == "." {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            collect_nodes(child, &p, out);
        }
    }
    if node["items"].is_object() {
        collect_nodes(&node["items"], &format!("{path}[]"), out);
    }
    if node["additionalProperties"].is_object() {
        collect_nodes(&node["additionalProperties"], &format!("{path}{{}}"), out);
    }
}

/// The compiled-in CRDs the test server preinstalls are the files of `k8s/crds/`.
#[test]
fn the_test_server_preinstalls_the_files_of_k8s_crds() {
    let files = load_crds();
    let compiled: BTreeMap<String, Value> = sluice_testserver::sveltos_crds()
        .into_iter()
        .map(|c| {
            (
                c["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                c,
            )
        })
        .collect();
    assert_eq!(
        compiled.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>()
    );
    for (name, crd) in &files {
        assert_eq!(&compiled[name], crd, "{name}");
    }
}

/// The YAML files are what `scripts/gen-crds.py` makes of the facts and descriptions (nobody
/// edited a generated file by hand, and no input changed without regenerating).
#[test]
fn the_crd_files_are_what_the_generator_writes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new("python3")
        .arg(root.join("scripts/gen-crds.py"))
        .arg("--check")
        .output()
        .expect("python3 runs scripts/gen-crds.py");
    assert!(
        out.status.success(),
        "scripts/gen-crds.py --check failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
