//! Patch formats: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch
//! (`strategic`). Server-side apply lives in `fields`.

mod strategic;

use serde_json::Value;

use crate::fields::merge;

pub use strategic::strategic_merge_patch;

/// Applies a JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    merge(target, patch);
}

/// Applies a JSON patch; on error the target is left unchanged and the message names the failing op.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op).map_err(|e| format!("JSON patch operation {i}: {e}"))?;
    }
    *target = doc;
    Ok(())
}

fn apply_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let kind = op
        .get("op")
        .and_then(Value::as_str)
        .ok_or("missing \"op\"")?;
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or("missing \"path\"")?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| format!("{kind} needs a \"value\""))
    };
    let from = || {
        op.get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{kind} needs \"from\""))
    };
    match kind {
        "add" => add(doc, path, value()?),
        "remove" => remove(doc, path).map(drop),
        "replace" => {
            let slot = doc
                .pointer_mut(&escape_check(path)?)
                .ok_or_else(|| format!("path {path} does not exist"))?;
            *slot = value()?;
            Ok(())
        }
        "move" => {
            let v = remove(doc, from()?)?;
            add(doc, path, v)
        }
        "copy" => {
            let src = from()?;
            let v = doc
                .pointer(&escape_check(src)?)
                .cloned()
                .ok_or_else(|| format!("path {src} does not exist"))?;
            add(doc, path, v)
        }
        "test" => {
            let got = doc.pointer(&escape_check(path)?);
            if got == Some(&value()?) {
                Ok(())
            } else {
                Err(format!("test failed at {path}"))
            }
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

fn escape_check(path: &str) -> Result<String, String> {
    if path.is_empty() || path.starts_with('/') {
        Ok(path.to_string())
    } else {
        Err(format!("path {path:?} must start with '/'"))
    }
}

fn split(path: &str) -> Result<(String, String), String> {
    let path = escape_check(path)?;
    let idx = path
        .rfind('/')
        .ok_or_else(|| format!("path {path:?} has no parent"))?;
    let last = path[idx + 1..].replace("~1", "/").replace("~0", "~");
    Ok((path[..idx].to_string(), last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    let target = doc
        .pointer_mut(&parent)
        .ok_or_else(|| format!("parent of {path} does not exist"))?;
    match target {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("bad array index in {path}"))?
            };
            if i > a.len() {
                return Err(format!("array index out of range in {path}"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!("parent of {path} is not a container")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path)?;
    let target = doc
        .pointer_mut(&parent)
        .ok_or_else(|| format!("parent of {path} does not exist"))?;
    match target {
        Value::Object(m) => m
            .remove(&last)
            .ok_or_else(|| format!("path {path} does not exist")),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .map_err(|_| format!("bad array index in {path}"))?;
            if i >= a.len() {
                return Err(format!("array index out of range in {path}"));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("parent of {path} is not a container")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(doc: Value, patch: Value, expected: Result<Value, &str>) {
        let mut d = doc.clone();
        match (json_patch(&mut d, &patch), expected) {
            (Ok(()), Ok(want)) => assert_eq!(d, want),
            (Err(e), Err(fragment)) => {
                assert!(e.contains(fragment), "{e} should contain {fragment}");
                assert_eq!(d, doc, "failed patch must not change the document");
            }
            (got, want) => panic!("got {got:?} ({d}), want {want:?}"),
        }
    }

    #[test]
    fn json_patch_ops() {
        check(
            json!({"a": 1}),
            json!([{"op": "add", "path": "/b", "value": 2}]),
            Ok(json!({"a": 1, "b": 2})),
        );
        check(
            json!({"a": [1, 3]}),
            json!([{"op": "add", "path": "/a/1", "value": 2}]),
            Ok(json!({"a": [1, 2, 3]})),
        );
        check(
            json!({"a": [1]}),
            json!([{"op": "add", "path": "/a/-", "value": 2}]),
            Ok(json!({"a": [1, 2]})),
        );
        check(
            json!({"a": 1, "b": 2}),
            json!([{"op": "remove", "path": "/a"}]),
            Ok(json!({"b": 2})),
        );
        check(
            json!({"a": 1}),
            json!([{"op": "replace", "path": "/a", "value": 5}]),
            Ok(json!({"a": 5})),
        );
        check(
            json!({"a": {"x/y": 1}}),
            json!([{"op": "move", "from": "/a/x~1y", "path": "/b"}]),
            Ok(json!({"a": {}, "b": 1})),
        );
        check(
            json!({"a": 1}),
            json!([{"op": "copy", "from": "/a", "path": "/b"}]),
            Ok(json!({"a": 1, "b": 1})),
        );
        check(
            json!({"a": 1}),
            json!([{"op": "test", "path": "/a", "value": 1}, {"op": "remove", "path": "/a"}]),
            Ok(json!({})),
        );
        check(
            json!({"a": 1}),
            json!([{"op": "remove", "path": "/a"}, {"op": "test", "path": "/a", "value": 1}]),
            Err("operation 1: test failed"),
        );
        check(
            json!({"a": 1}),
            json!([{"op": "replace", "path": "/zz", "value": 1}]),
            Err("does not exist"),
        );
        check(json!({}), json!({"op": "add"}), Err("must be an array"));
    }

    #[test]
    fn merge_patch_deletes_nulls_and_merges_objects() {
        let mut d = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "list": [1, 2]});
        merge_patch(
            &mut d,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "list": [3]}),
        );
        assert_eq!(
            d,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "list": [3]})
        );
    }
}
