//! The `meta.k8s.io/v1` forms a client may ask for in its `Accept` header instead of the objects:
//! a Table, which kubectl asks for when printing (columns Name and Age), and the metadata only
//! (`PartialObjectMetadata`, `PartialObjectMetadataList`), which client-go's metadata client and
//! kube-rs's `Api<PartialObjectMeta<K>>` ask for.

use serde_json::{json, Value};

use crate::object::{meta_str, parse_time};

/// Whether the `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Which metadata-only form the `Accept` header asks for, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partial {
    /// `as=PartialObjectMetadata`: an object (a GET, a write's answer, a watch's events).
    Object,
    /// `as=PartialObjectMetadataList`: a list.
    List,
}

pub fn wants_partial(accept: &str) -> Option<Partial> {
    let first = accept.split(',').next()?;
    let param = |key: &str| {
        first
            .split(';')
            .skip(1)
            .find_map(|p| p.trim().strip_prefix(key)?.strip_prefix('='))
    };
    if param("g") != Some("meta.k8s.io") {
        return None;
    }
    match param("as")? {
        "PartialObjectMetadata" => Some(Partial::Object),
        "PartialObjectMetadataList" => Some(Partial::List),
        _ => None,
    }
}

/// The metadata-only form of an object.
pub fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// The metadata-only form of a list.
pub fn partial_list(objects: &[Value], list_meta: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "items": objects.iter().map(partial).collect::<Vec<_>>(),
    })
}

/// kube-apiserver's answer when the metadata-only form asked for is not the shape of the
/// answer (a list's form for an object, or the other way round).
pub fn partial_not_acceptable(asked: Partial) -> crate::error::ApiError {
    let message = match asked {
        Partial::Object => {
            "you requested PartialObjectMetadata, but the requested object is a list"
        }
        Partial::List => {
            "you requested PartialObjectMetadataList, but the requested object is not a list"
        }
    };
    crate::error::ApiError::new(406, "NotAcceptable", message)
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
        _ => r["object"] = partial(obj),
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
