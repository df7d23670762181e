//! Strategic merge patch, as kube-apiserver applies it to the built-in kinds: a JSON merge patch
//! whose lists are merged by the field's `x-kubernetes-patch-strategy` and
//! `x-kubernetes-patch-merge-key` (containers by `name`, Service ports by `port`, finalizers as a
//! set), with the directives clients send: `$patch` (`merge`, `replace`, `delete`),
//! `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`. Fields without
//! a strategy, and every field of a kind without a schema, are replaced as a merge patch replaces
//! them. Directives are never stored.

use serde_json::{Map, Value};

use crate::schema::{additional, items, property};

/// Why a strategic merge patch could not be applied, with the status apiserver answers.
#[derive(Debug, PartialEq)]
pub struct PatchError {
    /// 400 for a malformed patch, 422 for a list of lists, 500 for a list item without its merge
    /// key (apiserver passes that error through unclassified).
    pub code: u16,
    pub message: String,
}

impl PatchError {
    /// The `reason` of the `Status` apiserver answers with (none for an unclassified error).
    pub fn reason(&self) -> &'static str {
        match self.code {
            400 => "BadRequest",
            422 => "Invalid",
            _ => "",
        }
    }

    fn bad(message: impl Into<String>) -> Self {
        Self {
            code: 400,
            message: message.into(),
        }
    }
}

type Result<T> = std::result::Result<T, PatchError>;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies `patch` to `doc` (both JSON objects) by the strategies of `schema`, the schema of the
/// whole object (`None`: every list is replaced).
pub fn strategic_merge_patch(doc: &mut Value, patch: &Value, schema: Option<&Value>) -> Result<()> {
    let (Value::Object(target), Value::Object(patch)) = (&mut *doc, patch) else {
        return Err(PatchError::bad(
            "couldn't get version/kind; json parse error: a strategic merge patch must be a JSON object",
        ));
    };
    let mut merged = target.clone();
    if merge_map(&mut merged, patch, schema)? == Outcome::Delete {
        merged.clear();
    }
    *target = merged;
    Ok(())
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Keep,
    /// The map carried `$patch: delete`: it goes away.
    Delete,
}

fn merge_map(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    schema: Option<&Value>,
) -> Result<Outcome> {
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(d)) if d == "merge" => {}
        Some(Value::String(d)) if d == "replace" => {
            *target = Map::new();
            let without: Map<String, Value> = patch
                .iter()
                .filter(|(k, _)| *k != PATCH)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            merge_map(target, &without, schema)?;
            return Ok(Outcome::Keep);
        }
        Some(Value::String(d)) if d == "delete" => return Ok(Outcome::Delete),
        Some(other) => {
            return Err(PatchError::bad(format!(
                "unknown patch type: {other} in map: {}",
                Value::Object(patch.clone())
            )))
        }
    }
    if let Some(keep) = patch.get(RETAIN_KEYS) {
        let keep = keep
            .as_array()
            .filter(|k| k.iter().all(Value::is_string))
            .ok_or_else(|| {
                PatchError::bad("invalid patch: $retainKeys must be a list of field names")
            })?;
        // A field set to null is being cleared, which $retainKeys need not name.
        for (key, _) in patch
            .iter()
            .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        {
            if !keep.iter().any(|k| k == key.as_str()) {
                return Err(PatchError {
                    code: 422,
                    message: "the patch has field(s) that are not listed in $retainKeys".into(),
                });
            }
        }
        target.retain(|key, _| keep.iter().any(|k| k == key.as_str()));
    }
    for (key, values) in patch {
        let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else {
            continue;
        };
        let values = values
            .as_array()
            .ok_or_else(|| PatchError::bad(format!("invalid patch: {key} must be a list")))?;
        if let Some(Value::Array(list)) = target.get_mut(field) {
            list.retain(|v| !values.contains(v));
        }
    }
    for (key, value) in patch.iter().filter(|(k, _)| !k.starts_with('$')) {
        let field = schema.and_then(|s| field_schema(s, key));
        if value.is_null() {
            target.remove(key);
            continue;
        }
        let replaces = field.is_some_and(|f| strategies(f).contains(&"replace"));
        let keep = match (target.get_mut(key), value) {
            (Some(Value::Object(current)), Value::Object(patch)) if !replaces => {
                merge_map(current, patch, field)? == Outcome::Keep
            }
            (Some(Value::Array(current)), Value::Array(patch)) => {
                merge_list(current, patch, field, key)?;
                true
            }
            (_, value) => match fresh(value, field, key)? {
                Some(v) => {
                    target.insert(key.clone(), v);
                    true
                }
                None => false,
            },
        };
        if !keep {
            target.remove(key);
        }
    }
    for (key, order) in patch {
        let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) else {
            continue;
        };
        let order = order
            .as_array()
            .ok_or_else(|| PatchError::bad(format!("invalid patch: {key} must be a list")))?;
        let merge_key = schema
            .and_then(|s| field_schema(s, field))
            .and_then(merge_key);
        if let Some(Value::Array(list)) = target.get_mut(field) {
            reorder(list, order, merge_key);
        }
    }
    Ok(Outcome::Keep)
}

/// A patch value with nothing to merge into: its directives applied to an empty value.
fn fresh(value: &Value, schema: Option<&Value>, key: &str) -> Result<Option<Value>> {
    Ok(match value {
        Value::Object(patch) => {
            let mut map = Map::new();
            match merge_map(&mut map, patch, schema)? {
                Outcome::Keep => Some(Value::Object(map)),
                Outcome::Delete => None,
            }
        }
        Value::Array(patch) => {
            let mut list = Vec::new();
            merge_list(&mut list, patch, schema, key)?;
            Some(Value::Array(list))
        }
        other => Some(other.clone()),
    })
}

fn merge_list(
    target: &mut Vec<Value>,
    patch: &[Value],
    schema: Option<&Value>,
    field: &str,
) -> Result<()> {
    let item = schema.and_then(items);
    if !schema.is_some_and(|s| strategies(s).contains(&"merge")) {
        // Replaced whole, directives applied to each item.
        let mut list = Vec::with_capacity(patch.len());
        for value in patch {
            if value.is_array() {
                return Err(list_of_lists(field));
            }
            list.extend(fresh(value, item, field)?);
        }
        *target = list;
        return Ok(());
    }
    if patch.iter().any(Value::is_array) {
        return Err(list_of_lists(field));
    }
    if !patch.iter().any(Value::is_object) {
        // A set of primitives: the patch's values are added.
        for value in patch {
            if !target.contains(value) {
                target.push(value.clone());
            }
        }
        return Ok(());
    }
    if patch
        .iter()
        .any(|p| p.get(PATCH).and_then(Value::as_str) == Some("replace"))
    {
        let mut list = Vec::with_capacity(patch.len());
        for value in patch
            .iter()
            .filter(|p| p.get(PATCH).and_then(Value::as_str) != Some("replace"))
        {
            list.extend(fresh(value, item, field)?);
        }
        *target = list;
        return Ok(());
    }
    let Some(key) = schema.and_then(merge_key) else {
        return Err(PatchError::bad(format!(
            "the list {field} has patch strategy merge but no merge key"
        )));
    };
    for value in patch {
        let Value::Object(p) = value else {
            return Err(PatchError::bad(format!(
                "invalid patch: the list {field} holds objects, and {value} is not one"
            )));
        };
        let Some(id) = p.get(key) else {
            return Err(PatchError {
                code: 500,
                message: format!("map: {value} does not contain declared merge key: {key}"),
            });
        };
        let at = target.iter().position(|t| t.get(key) == Some(id));
        match p.get(PATCH).and_then(Value::as_str) {
            Some("delete") => target.retain(|t| t.get(key) != Some(id)),
            _ => match at {
                Some(i) => {
                    if let Value::Object(current) = &mut target[i] {
                        if merge_map(current, p, item)? == Outcome::Delete {
                            target.remove(i);
                        }
                    } else {
                        target[i] = fresh(value, item, field)?.unwrap_or(Value::Null);
                    }
                }
                None => target.extend(fresh(value, item, field)?),
            },
        }
    }
    Ok(())
}

/// Puts the items `order` names in its order, in the places such items hold; items it does not
/// name (added by another writer) keep their places.
fn reorder(list: &mut [Value], order: &[Value], merge_key: Option<&str>) {
    let identity = |v: &Value| match (merge_key, v) {
        (Some(key), Value::Object(m)) => m.get(key).cloned(),
        (None, v) if !v.is_object() => Some(v.clone()),
        _ => None,
    };
    let rank = |v: &Value| {
        let id = identity(v)?;
        order.iter().position(|o| identity(o).as_ref() == Some(&id))
    };
    let slots: Vec<usize> = (0..list.len())
        .filter(|&i| rank(&list[i]).is_some())
        .collect();
    let mut ordered: Vec<Value> = slots.iter().map(|&i| list[i].clone()).collect();
    ordered.sort_by_key(|v| rank(v));
    for (slot, value) in slots.into_iter().zip(ordered) {
        list[slot] = value;
    }
}

fn field_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    property(schema, key).or_else(|| additional(schema).filter(|a| a.is_object()))
}

fn strategies(schema: &Value) -> Vec<&str> {
    schema
        .get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)
        .map(|s| s.split(',').collect())
        .unwrap_or_default()
}

fn merge_key(schema: &Value) -> Option<&str> {
    schema
        .get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str)
}

fn list_of_lists(field: &str) -> PatchError {
    PatchError {
        code: 422,
        message: format!("lists of lists are not supported (in {field})"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::builtin::schema;

    fn patched(kind: (&str, &str), doc: Value, patch: Value) -> Value {
        let mut doc = doc;
        strategic_merge_patch(&mut doc, &patch, schema(kind.0, kind.1)).expect("patch applies");
        doc
    }

    const SERVICE: (&str, &str) = ("", "Service");
    const DEPLOYMENT: (&str, &str) = ("apps", "Deployment");

    fn deployment() -> Value {
        json!({"metadata": {"name": "web", "finalizers": ["a", "b"]},
               "spec": {"replicas": 1,
                        "strategy": {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                        "template": {"spec": {
                            "containers": [
                                {"name": "web", "image": "nginx:1.25", "args": ["-a", "-b"],
                                 "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                 "env": [{"name": "A", "value": "1"}]},
                                {"name": "side", "image": "busybox:1.36"}
                            ],
                            "tolerations": [{"key": "x", "operator": "Exists"}]}}}})
    }

    #[test]
    fn kubectl_applying_an_edited_service_merges_its_ports_by_port_in_the_new_order() {
        let service = json!({"spec": {"ports": [
            {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
            {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}});
        // What kubectl apply sends after port 80 became 82 in the manifest.
        let patch = json!({"spec": {
            "$setElementOrder/ports": [{"port": 82}, {"port": 443}],
            "ports": [{"name": "http", "port": 82, "targetPort": 8080}, {"$patch": "delete", "port": 80}]}});
        assert_eq!(
            patched(SERVICE, service, patch),
            json!({"spec": {"ports": [
                {"name": "http", "port": 82, "targetPort": 8080},
                {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}})
        );
    }

    #[test]
    fn a_container_patched_by_name_keeps_the_other_containers_and_its_own_other_fields() {
        // `kubectl set image deployment/web web=nginx:1.27` and `kubectl set env ... B=2`.
        let doc = patched(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
        );
        let doc = patched(
            DEPLOYMENT,
            doc,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "env": [{"name": "B", "value": "2"}]}]}}}}),
        );
        let mut expected = deployment();
        let web = &mut expected["spec"]["template"]["spec"]["containers"][0];
        web["image"] = json!("nginx:1.27");
        web["env"] = json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
        assert_eq!(doc, expected);
    }

    #[test]
    fn lists_without_a_strategy_are_replaced_whole() {
        let doc = patched(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"template": {"spec": {
                "tolerations": [{"key": "y", "operator": "Exists"}],
                "containers": [{"name": "web", "args": ["-c"]}]}}}}),
        );
        let spec = &doc["spec"]["template"]["spec"];
        assert_eq!(
            spec["tolerations"],
            json!([{"key": "y", "operator": "Exists"}])
        );
        assert_eq!(spec["containers"][0]["args"], json!(["-c"]));
        assert_eq!(spec["containers"][1]["name"], "side");
    }

    #[test]
    fn finalizers_are_a_set_that_directives_remove_from() {
        let doc = patched(
            DEPLOYMENT,
            deployment(),
            json!({"metadata": {"finalizers": ["b", "c"], "$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(doc["metadata"]["finalizers"], json!(["b", "c"]));
    }

    #[test]
    fn retain_keys_clears_the_fields_a_switched_strategy_no_longer_has() {
        // What kubectl apply sends when the manifest's strategy becomes Recreate.
        let doc = patched(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}}),
        );
        assert_eq!(doc["spec"]["strategy"], json!({"type": "Recreate"}));

        let mut doc = deployment();
        let err = strategic_merge_patch(
            &mut doc,
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "x": 1}}}),
            schema("apps", "Deployment"),
        )
        .expect_err("refused");
        assert_eq!(err.code, 422);
        assert_eq!(doc, deployment(), "a failed patch changes nothing");
    }

    #[test]
    fn replace_and_delete_directives_on_lists_and_maps() {
        let replaced = patched(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"$patch": "replace"}, {"name": "only", "image": "x"}]}}}}),
        );
        assert_eq!(
            replaced["spec"]["template"]["spec"]["containers"],
            json!([{"name": "only", "image": "x"}])
        );
        let deleted = patched(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"strategy": {"$patch": "delete"},
                            "template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}}),
        );
        assert!(deleted["spec"].get("strategy").is_none(), "{deleted}");
        assert_eq!(
            deleted["spec"]["template"]["spec"]["containers"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        let map_replaced = patched(
            DEPLOYMENT,
            deployment(),
            json!({"spec": {"strategy": {"$patch": "replace", "type": "Recreate"}}}),
        );
        assert_eq!(
            map_replaced["spec"]["strategy"],
            json!({"type": "Recreate"})
        );
    }

    #[test]
    fn an_item_without_its_merge_key_is_refused_as_apiserver_refuses_it() {
        let mut doc = deployment();
        let err = strategic_merge_patch(
            &mut doc,
            &json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
            schema("apps", "Deployment"),
        )
        .expect_err("refused");
        assert_eq!(
            err,
            PatchError {
                code: 500,
                message: r#"map: {"image":"x"} does not contain declared merge key: name"#.into()
            }
        );
        assert_eq!(err.reason(), "");
        assert_eq!(doc, deployment());
    }

    #[test]
    fn without_a_schema_lists_are_replaced_and_no_directive_is_stored() {
        let mut doc = json!({"spec": {"list": [1, 2], "m": {"a": 1}}});
        strategic_merge_patch(
            &mut doc,
            &json!({"spec": {"list": [3], "$setElementOrder/list": [3],
                             "m": {"$patch": "replace", "b": 2}}}),
            None,
        )
        .expect("applies");
        assert_eq!(doc, json!({"spec": {"list": [3], "m": {"b": 2}}}));
    }
}
