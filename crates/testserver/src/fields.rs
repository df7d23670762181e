//! Field ownership (`metadata.managedFields`) and server-side apply. Ownership is tracked per leaf
//! field path, as `fieldsV1` writes it: objects are walked field by field (`f:<name>`); a list
//! whose schema says `x-kubernetes-list-type: map` is walked item by item, each item named by
//! its key fields (`k:{...}`), and one that says `set` value by value (`v:<value>`), each item or
//! value itself owned too (`.`); every other list is atomic, a leaf, as for CRDs without
//! list-type markers. Built-in kinds' lists follow their list map keys where their Go types
//! have `+listMapKey` markers (a Service's ports by `port` and `protocol`, a key field left out
//! named by its default) and else their strategic merge keys (containers by `name`, ...), and
//! every kind's `metadata.finalizers` is a set and `ownerReferences` a map by `uid`, as
//! kube-apiserver's schemas say. An apply conflicts when another manager owns a field
//! the applied configuration sets to a different value; `force` takes the field over. An apply
//! merges a map list item by item and a set value by value, and drops the items and values its
//! manager stops applying that no other manager owns.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::cluster::Subresource;
use crate::object::{now, set_meta};
use crate::resources::ResourceInfo;

/// A field path: the `fieldsV1` step to each level from the root (`f:spec`, `k:{"name":"a"}`,
/// `v:"x"`).
pub type Path = Vec<String>;

/// A field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub manager: String,
    pub path: Path,
}

impl Conflict {
    /// The field as kube-apiserver names it in a conflict: `.spec.containers[name="app"].image`.
    pub fn field(&self) -> String {
        self.path
            .iter()
            .map(|step| match step.split_at(2.min(step.len())) {
                ("f:", name) => format!(".{name}"),
                ("k:", key) => {
                    let key: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                    let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("[{}]", parts.join(","))
                }
                ("v:", value) => format!("[={value}]"),
                _ => format!(".{step}"),
            })
            .collect()
    }
}

/// The schema of `info`'s objects at `api_version` that says how their lists merge: a CRD
/// version's `openAPIV3Schema`, or a built-in kind's.
pub fn schema_of<'a>(info: &'a ResourceInfo, api_version: &str) -> Option<&'a Value> {
    if info.crd.is_some() {
        let version = api_version.rsplit('/').next().unwrap_or(api_version);
        return info
            .schemas
            .iter()
            .find(|s| s.version == version)
            .map(|s| &*s.schema);
    }
    crate::schema::builtin::schema(&info.group, &info.kind)
}

/// How a list merges and is owned.
#[derive(Clone, Debug, PartialEq)]
enum ListKind {
    Atomic,
    /// Items are told apart by these fields.
    Map(Vec<Key>),
    Set,
}

/// A key field of a map list, with the default its schema gives it: an item that leaves the
/// field out is named by the default (a port without `protocol` is the TCP one).
#[derive(Clone, Debug, PartialEq)]
struct Key {
    field: String,
    default: Option<Value>,
}

impl ListKind {
    /// Whether a list step `named` names `item` of a list of this kind.
    fn names(&self, named: &Named, item: &Value) -> bool {
        match (named, self) {
            (Named::Key(key), ListKind::Map(keys)) => key.iter().all(|(field, v)| {
                let default = keys
                    .iter()
                    .find(|k| &k.field == field)
                    .and_then(|k| k.default.as_ref());
                item.get(field).or(default) == Some(v)
            }),
            (Named::Key(key), _) => key.iter().all(|(k, v)| item.get(k) == Some(v)),
            (Named::Value(value), _) => value == item,
        }
    }
}

fn list_kind(schema: Option<&Value>) -> ListKind {
    let Some(schema) = schema else {
        return ListKind::Atomic;
    };
    let text = |k: &str| schema.get(k).and_then(Value::as_str);
    match text("x-kubernetes-list-type") {
        Some("map") => {
            let keys: Vec<Key> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(|field| key(schema, field))
                        .collect()
                })
                .unwrap_or_default();
            return if keys.is_empty() {
                ListKind::Atomic
            } else {
                ListKind::Map(keys)
            };
        }
        Some("set") => return ListKind::Set,
        Some(_) => return ListKind::Atomic,
        None => {}
    }
    match (
        text("x-kubernetes-patch-merge-key"),
        text("x-kubernetes-patch-strategy"),
    ) {
        (Some(field), _) => ListKind::Map(vec![key(schema, field)]),
        (None, Some(strategy)) if strategy.split(',').any(|s| s == "merge") => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// Key field `field` of the items of a map list of `schema`.
fn key(schema: &Value, field: &str) -> Key {
    Key {
        field: field.to_string(),
        default: field_schema(items_schema(Some(schema)), field)
            .and_then(|f| f.get("default"))
            .cloned(),
    }
}

/// The schema of field `name` of an object of `schema`: a declared property, or the schema of
/// every value of a map.
fn field_schema<'a>(schema: Option<&'a Value>, name: &str) -> Option<&'a Value> {
    let schema = schema?;
    schema
        .get("properties")
        .and_then(|p| p.get(name))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

fn items_schema(schema: Option<&Value>) -> Option<&Value> {
    schema?.get("items")
}

/// The schema of the field at `path` of an object of `schema`.
fn schema_at<'a>(schema: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    let mut steps = path.iter();
    let mut current = match steps.next().map(String::as_str) {
        Some("f:metadata") => Some(metadata_schema()),
        Some(step) => field_schema(schema, step.strip_prefix("f:")?),
        None => return schema,
    };
    for step in steps {
        current = match step.strip_prefix("f:") {
            Some(name) => field_schema(current, name),
            None => items_schema(current),
        };
    }
    current
}

/// `metadata`'s lists, the same for every kind (a CRD's schema declares no `metadata`).
fn metadata_schema() -> &'static Value {
    static META: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    META.get_or_init(|| {
        json!({"properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "x-kubernetes-list-type": "set"},
            "ownerReferences": {"type": "array", "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["uid"]},
        }})
    })
}

/// The step that names `item` of a list of `kind`, if it can be named (a map item with every
/// key field, a scalar set value).
fn item_step(kind: &ListKind, item: &Value) -> Option<String> {
    match kind {
        ListKind::Atomic => None,
        ListKind::Map(keys) => {
            let mut key = Map::new();
            for k in keys {
                let value = item.get(&k.field).or(k.default.as_ref())?;
                key.insert(k.field.clone(), value.clone());
            }
            Some(format!("k:{}", Value::Object(key)))
        }
        ListKind::Set => (!item.is_object() && !item.is_array()).then(|| format!("v:{item}")),
    }
}

/// The list's kind, unless one of its items cannot be named by it, or two items have one name
/// (then it is atomic, as structured-merge-diff treats a list holding duplicates): owned
/// whole, neither is lost.
fn kind_of_list(schema: Option<&Value>, items: &[Value]) -> ListKind {
    let kind = list_kind(schema);
    let mut steps = BTreeSet::new();
    for item in items {
        let Some(step) = item_step(&kind, item) else {
            return ListKind::Atomic;
        };
        if !steps.insert(step) {
            return ListKind::Atomic;
        }
    }
    kind
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
        for step in path {
            let child = node.entry(step.clone()).or_insert_with(|| json!({}));
            node = child.as_object_mut().expect("every node is an object");
        }
        // Marked as owned itself; the mark stays only where the node has fields of its own.
        node.insert(".".into(), json!({}));
    }
    unmark_leaves(&mut root);
    Value::Object(root)
}

fn unmark_leaves(node: &mut Map<String, Value>) {
    if node.len() == 1 && node.contains_key(".") {
        node.clear();
        return;
    }
    for (step, child) in node.iter_mut() {
        if step != "." {
            if let Some(child) = child.as_object_mut() {
                unmark_leaves(child);
            }
        }
    }
}

fn from_fields_v1(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(node) = v.as_object() else {
        return;
    };
    if (node.is_empty() || node.contains_key(".")) && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
    for (step, child) in node {
        if step == "." {
            continue;
        }
        prefix.push(step.clone());
        from_fields_v1(child, prefix, out);
        prefix.pop();
    }
}

/// Leaf paths of `obj` a manager can own for a write to `sub`; `schema` (the kind's, see
/// [`schema_of`]) says how its lists are owned.
pub fn leaf_paths(
    obj: &Value,
    schema: Option<&Value>,
    status_kind: bool,
    sub: Subresource,
) -> BTreeSet<Path> {
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
            let meta = Some(metadata_schema());
            for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                if let Some(mv) = v.get(mk) {
                    let mut path = vec![format!("f:{k}"), format!("f:{mk}")];
                    walk(mv, field_schema(meta, mk), &mut path, &mut out);
                }
            }
        } else {
            walk(
                v,
                field_schema(schema, k),
                &mut vec![format!("f:{k}")],
                &mut out,
            );
        }
    }
    out
}

fn walk(v: &Value, schema: Option<&Value>, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(format!("f:{k}"));
                walk(child, field_schema(schema, k), path, out);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let kind = kind_of_list(schema, items);
            if kind == ListKind::Atomic {
                out.insert(path.clone());
                return;
            }
            for item in items {
                let Some(step) = item_step(&kind, item) else {
                    continue;
                };
                path.push(step);
                out.insert(path.clone());
                if let Value::Object(fields) = item {
                    for (k, child) in fields {
                        path.push(format!("f:{k}"));
                        walk(child, field_schema(items_schema(schema), k), path, out);
                        path.pop();
                    }
                }
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// What a list step names, read once: a map item's key fields, or a set value.
enum Named {
    Key(Map<String, Value>),
    Value(Value),
}

impl Named {
    fn parse(step: &str) -> Option<Named> {
        match step.split_at(2.min(step.len())) {
            ("k:", key) => serde_json::from_str(key).ok().map(Named::Key),
            ("v:", value) => serde_json::from_str(value).ok().map(Named::Value),
            _ => None,
        }
    }
}

fn is_item(step: &str) -> bool {
    step.starts_with("k:") || step.starts_with("v:")
}

/// The value at `path` of `v`, an object of `schema` (whose lists' key defaults name items).
fn value_at<'a>(v: &'a Value, path: &[String], schema: Option<&Value>) -> Option<&'a Value> {
    let mut cur = v;
    let mut schema = schema;
    for (i, step) in path.iter().enumerate() {
        match step.strip_prefix("f:") {
            Some(name) => {
                cur = cur.get(name)?;
                schema = step_schema(schema, i, name);
            }
            None => {
                let named = Named::parse(step)?;
                let kind = list_kind(schema);
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|item| kind.names(&named, item))?;
                schema = items_schema(schema);
            }
        }
    }
    Some(cur)
}

/// The schema of field `name` at depth `depth` below `schema` (`metadata` is every kind's).
fn step_schema<'a>(schema: Option<&'a Value>, depth: usize, name: &str) -> Option<&'a Value> {
    if depth == 0 && name == "metadata" {
        Some(metadata_schema())
    } else {
        field_schema(schema, name)
    }
}

fn remove_at(v: &mut Value, path: &[String], schema: Option<&Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    let mut schema = schema;
    for (i, step) in parents.iter().enumerate() {
        let next = match step.strip_prefix("f:") {
            Some(name) => {
                schema = step_schema(schema, i, name);
                cur.get_mut(name)
            }
            None => Named::parse(step).and_then(|named| {
                let kind = list_kind(schema);
                schema = items_schema(schema);
                cur.as_array_mut()
                    .and_then(|items| items.iter_mut().find(|item| kind.names(&named, item)))
            }),
        };
        match next {
            Some(next) => cur = next,
            None => return,
        }
    }
    match last.strip_prefix("f:") {
        Some(name) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(name);
            }
        }
        None => {
            if let Some(items) = cur.as_array_mut() {
                if let Some(named) = Named::parse(last) {
                    let kind = list_kind(schema);
                    items.retain(|item| !kind.names(&named, item));
                }
            }
        }
    }
}

/// Merges an applied configuration into `base` as server-side apply does: objects field by
/// field, `null` deletes, a map list item by item (by its keys) and a set value by value, every
/// other list and scalar replaced.
fn merge_applied(base: &mut Value, config: &Value, schema: Option<&Value>) {
    match (base, config) {
        (Value::Object(b), Value::Object(c)) => {
            for (k, v) in c {
                if v.is_null() {
                    b.remove(k);
                    continue;
                }
                let child = field_schema(schema, k);
                match b.get_mut(k) {
                    Some(existing) => merge_applied(existing, v, child),
                    None => {
                        let mut fresh = if v.is_object() {
                            json!({})
                        } else {
                            Value::Null
                        };
                        merge_applied(&mut fresh, v, child);
                        b.insert(k.clone(), fresh);
                    }
                }
            }
        }
        (Value::Array(b), Value::Array(c)) => {
            let kind = kind_of_list(schema, c);
            if kind == ListKind::Atomic || kind_of_list(schema, b) == ListKind::Atomic {
                *b = c.clone();
                return;
            }
            // Every item of both has a name, each once (`kind_of_list`).
            let mut at: std::collections::HashMap<String, usize> = b
                .iter()
                .enumerate()
                .filter_map(|(i, existing)| Some((item_step(&kind, existing)?, i)))
                .collect();
            for item in c {
                let Some(step) = item_step(&kind, item) else {
                    continue;
                };
                match at.get(&step) {
                    Some(&i) if kind != ListKind::Set => {
                        merge_applied(&mut b[i], item, items_schema(schema));
                    }
                    Some(_) => {}
                    None => {
                        at.insert(step, b.len());
                        b.push(item.clone());
                    }
                }
            }
        }
        (base, config) => {
            if config.is_object() {
                *base = json!({});
                merge_applied(base, config, schema);
            } else {
                *base = config.clone();
            }
        }
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
/// A list item or set value counts as changed only when it is added; its fields count
/// themselves.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    schema: Option<&Value>,
    status_kind: bool,
    sub: Subresource,
) {
    let new_paths = leaf_paths(new, schema, status_kind, sub);
    let old_paths = old
        .map(|o| leaf_paths(o, schema, status_kind, sub))
        .unwrap_or_default();
    let changed: BTreeSet<Path> = new_paths
        .iter()
        .filter(|p| {
            let before = old.and_then(|o| value_at(o, p, schema));
            if p.last().is_some_and(|step| is_item(step)) {
                before.is_none()
            } else {
                before != value_at(new, p, schema)
            }
        })
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
    schema: Option<&Value>,
    status_kind: bool,
    sub: Subresource,
) -> Result<Value, Vec<Conflict>> {
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let config_paths = leaf_paths(config, schema, status_kind, sub);
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
            // An item both set is shared, whatever its fields: those conflict themselves; so is
            // a merged list applied empty, whose items do.
            if p.last().is_some_and(|step| is_item(step))
                || value_at(config, p, schema)
                    .is_some_and(|v| v.as_array().is_some_and(Vec::is_empty))
                    && list_kind(schema_at(schema, p)) != ListKind::Atomic
            {
                continue;
            }
            if value_at(&base, p, schema) != value_at(config, p, schema) {
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
        // Kept while another manager owns it or anything within it (an item's field).
        let shared = list.iter().any(|e| {
            !(e.manager == manager && e.operation == "Apply")
                && e.fields.iter().any(|q| q.starts_with(p))
        });
        if !shared {
            remove_at(&mut base, p, schema);
        }
    }
    let mut cfg = config.clone();
    if let Some(m) = cfg.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    merge_applied(&mut base, &cfg, schema);
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
