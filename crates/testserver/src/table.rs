//! The `meta.k8s.io/v1` forms a client may ask for in its `Accept` header instead of the objects:
//! a Table, which kubectl asks for when printing (the columns of [`crate::printers`]), and the metadata only
//! (`PartialObjectMetadata`, `PartialObjectMetadataList`), which client-go's metadata client and
//! kube-rs's `Api<PartialObjectMeta<K>>` ask for.

use serde_json::{json, Value};

use crate::printers;

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

/// A Table of `objects` of `group`'s `kind`, with the columns kube-apiserver prints for it
/// ([`crate::printers`]); `include` is the `includeObject` parameter (None, Metadata or Object).
pub fn table(group: &str, kind: &str, objects: &[Value], list_meta: Value, include: &str) -> Value {
    let now = time::OffsetDateTime::now_utc();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| row(printers::cells(group, kind, o, now), o, include))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": printers::definitions(&printers::columns(group, kind)),
        "rows": rows,
    })
}

fn row(cells: Vec<Value>, obj: &Value, include: &str) -> Value {
    let mut r = json!({ "cells": cells });
    match include {
        "None" => {}
        "Object" => r["object"] = obj.clone(),
        _ => r["object"] = partial(obj),
    }
    r
}
