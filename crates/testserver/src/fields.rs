//! Field ownership (`metadata.managedFields`) and server-side apply. Ownership is tracked per leaf
//! field path: objects are walked, lists and scalars are leaves (lists are atomic, as for CRDs
//! without list-type markers). An apply conflicts when another manager owns a field the applied
//! configuration sets to a different value; `force` takes the field over.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::cluster::Subresource;
use crate::object::{now, set_meta};

/// A field path: object keys from the root.
pub type Path = Vec<String>;

/// A field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub manager: String,
    pub path: Path,
}

impl Conflict {
    pub fn field(&self) -> String {
        self.path.iter().map(|p| format!(".{p}")).collect()
    }
}

#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    fields: BTreeSet<Path>,
}

fn sub_name(sub: Subresource) -> &'static str {
    match sub {
        Subresource::Main => "",
        Subresource::Status => "status",
    }
}

fn entries(obj: Option<&Value>) -> Vec<Entry> {
    let Some(list) = obj
        .and_then(|o| o.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let mut fields = BTreeSet::new();
            if let Some(f) = e.get("fieldsV1") {
                from_fields_v1(f, &mut Vec::new(), &mut fields);
            }
            Entry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                fields,
            }
        })
        .collect()
}

fn store_entries(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version, "time": e.time,
                "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if list.is_empty() {
        // `omitempty`: an object no manager owns a field of carries no managedFields at all.
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    } else {
        set_meta(obj, "managedFields", json!(list));
    }
}

fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for seg in path {
            let child = node.entry(format!("f:{seg}")).or_insert_with(|| json!({}));
            if !child.is_object() {
                *child = json!({});
            }
            node = child.as_object_mut().expect("made an object above");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let children: Vec<(&String, &Value)> = v
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
        .unwrap_or_default();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    }
    for (k, child) in children {
        prefix.push(k[2..].to_string());
        from_fields_v1(child, prefix, out);
        prefix.pop();
    }
}

/// Leaf paths of `obj` a manager can own for a write to `sub`.
pub fn leaf_paths(obj: &Value, status_kind: bool, sub: Subresource) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(map) = obj.as_object() else {
        return out;
    };
    for (k, v) in map {
        let wanted = match k.as_str() {
            "apiVersion" | "kind" => false,
            "status" if status_kind => sub == Subresource::Status,
            _ if status_kind && sub == Subresource::Status => false,
            _ => true,
        };
        if !wanted {
            continue;
        }
        if k == "metadata" {
            for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                if let Some(mv) = v.get(mk) {
                    walk(mv, &mut vec![k.clone(), mk.to_string()], &mut out);
                }
            }
        } else {
            walk(v, &mut vec![k.clone()], &mut out);
        }
    }
    out
}

fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(k.clone());
                walk(child, path, out);
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

fn value_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| cur.get(seg))
}

fn remove_at(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        match cur.get_mut(seg) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// Merges `patch` into `base`: objects merge key by key, `null` deletes, anything else replaces.
pub fn merge(base: &mut Value, patch: &Value) {
    match (base.as_object_mut(), patch.as_object()) {
        (Some(b), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(existing) =
                    b.get_mut(k).filter(|e| e.is_object() && v.is_object())
                {
                    merge(existing, v);
                } else {
                    let mut fresh = json!({});
                    if v.is_object() {
                        merge(&mut fresh, v);
                    } else {
                        fresh = v.clone();
                    }
                    b.insert(k.clone(), fresh);
                }
            }
        }
        _ => *base = patch.clone(),
    }
}

/// Records a create/update by `manager`: it takes the fields whose value it changed.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    status_kind: bool,
    sub: Subresource,
) {
    let new_paths = leaf_paths(new, status_kind, sub);
    let old_paths = old
        .map(|o| leaf_paths(o, status_kind, sub))
        .unwrap_or_default();
    let changed: BTreeSet<Path> = new_paths
        .iter()
        .filter(|p| old.and_then(|o| value_at(o, p)) != value_at(new, p))
        .cloned()
        .collect();
    let removed: BTreeSet<Path> = old_paths.difference(&new_paths).cloned().collect();
    let mut list = entries(old);
    if changed.is_empty() && removed.is_empty() {
        store_entries(new, list);
        return;
    }
    for e in &mut list {
        e.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let sub = sub_name(sub);
    let pos = list
        .iter()
        .position(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub);
    let entry = match pos {
        Some(i) => &mut list[i],
        None => {
            list.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: String::new(),
                time: String::new(),
                subresource: sub.to_string(),
                fields: BTreeSet::new(),
            });
            list.last_mut().expect("pushed above")
        }
    };
    entry.fields.extend(changed);
    entry.api_version = api_version.to_string();
    entry.time = now();
    store_entries(new, list);
}

/// Server-side apply of `config` by `manager` onto `live` (or onto nothing: create-on-apply).
/// Returns the merged object with updated `managedFields`, or the conflicts when not forced.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    status_kind: bool,
    sub: Subresource,
) -> Result<Value, Vec<Conflict>> {
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let config_paths = leaf_paths(config, status_kind, sub);
    let mut base = live.cloned().unwrap_or_else(|| {
        let mut skeleton = json!({"apiVersion": config.get("apiVersion"), "kind": config.get("kind"), "metadata": {}});
        for k in ["name", "namespace", "generateName"] {
            if let Some(v) = config.pointer(&format!("/metadata/{k}")) {
                set_meta(&mut skeleton, k, v.clone());
            }
        }
        skeleton
    });
    let subname = sub_name(sub);
    let mut list = entries(live);
    let mut conflicts = Vec::new();
    for e in list
        .iter()
        .filter(|e| e.manager != manager && e.subresource == subname)
    {
        for p in e.fields.intersection(&config_paths) {
            if value_at(&base, p) != value_at(config, p) {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    path: p.clone(),
                });
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for e in list
        .iter_mut()
        .filter(|e| e.manager != manager && e.subresource == subname)
    {
        e.fields.retain(|p| !conflicts.iter().any(|c| &c.path == p));
    }
    let mine = list
        .iter()
        .position(|e| e.manager == manager && e.operation == "Apply" && e.subresource == subname);
    let previous = mine.map(|i| list[i].fields.clone()).unwrap_or_default();
    for p in previous.difference(&config_paths) {
        let shared = list
            .iter()
            .any(|e| !(e.manager == manager && e.operation == "Apply") && e.fields.contains(p));
        if !shared {
            remove_at(&mut base, p);
        }
    }
    let mut cfg = config.clone();
    if let Some(m) = cfg.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    merge(&mut base, &cfg);
    let changed = previous != config_paths;
    match mine {
        Some(i) => {
            if changed {
                list[i].time = now();
            }
            list[i].fields = config_paths;
            list[i].api_version = api_version;
        }
        None => list.push(Entry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version,
            time: now(),
            subresource: subname.to_string(),
            fields: config_paths,
        }),
    }
    store_entries(&mut base, list);
    Ok(base)
}
