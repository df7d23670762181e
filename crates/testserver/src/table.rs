//! `meta.k8s.io/v1` Table output, which kubectl asks for when printing: columns Name and Age.

use serde_json::{json, Value};

use crate::object::{meta_str, parse_time};

/// Whether the `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// A Table of `objects`; `include` is the `includeObject` parameter (None, Metadata or Object).
pub fn table(objects: &[Value], list_meta: Value, include: &str) -> Value {
    let rows: Vec<Value> = objects.iter().map(|o| row(o, include)).collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "Time since the object was created.", "priority": 0},
        ],
        "rows": rows,
    })
}

fn row(obj: &Value, include: &str) -> Value {
    let mut r = json!({"cells": [meta_str(obj, "name"), age(meta_str(obj, "creationTimestamp"))]});
    match include {
        "None" => {}
        "Object" => r["object"] = obj.clone(),
        _ => {
            r["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
            })
        }
    }
    r
}

/// Age as kubectl prints it: `45s`, `12m`, `5h`, `3d`.
fn age(created: &str) -> String {
    let Some(t) = parse_time(created) else {
        return "<unknown>".into();
    };
    let secs = (time::OffsetDateTime::now_utc() - t).whole_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
