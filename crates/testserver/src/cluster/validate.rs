//! Validation of incoming objects, as the real API server does before storing: identity matches the
//! URL, names are DNS names, labels and annotation keys are well formed.

use serde_json::Value;
use sluice_domain::selector;

use crate::error::ApiError;
use crate::object::meta_str;
use crate::resources::ResourceInfo;

/// Checks `apiVersion`/`kind` against the URL's resource and version.
pub fn check_type(info: &ResourceInfo, version: &str, obj: &Value) -> Result<(), ApiError> {
    let name = meta_str(obj, "name");
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() || api_version.is_empty() {
        return Err(ApiError::bad_request(
            "Object 'Kind' is missing in the request body (apiVersion and kind are required)",
        ));
    }
    if kind != info.kind {
        return Err(ApiError::invalid(
            info,
            name,
            "kind",
            format!("Invalid value: \"{kind}\": must be {}", info.kind),
        ));
    }
    let expected = info.api_version(version);
    if api_version != expected {
        return Err(ApiError::invalid(
            info,
            name,
            "apiVersion",
            format!("Invalid value: \"{api_version}\": must be {expected}"),
        ));
    }
    Ok(())
}

/// Checks name, labels and annotations of an object about to be stored.
pub fn check_object(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let name = meta_str(obj, "name");
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    if name.is_empty() {
        return Err(ApiError::invalid(
            info,
            name,
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    let dns_label = info.kind == "Namespace";
    // RBAC objects may be named like `system:discovery`: any valid path segment.
    let problem = if info.group == "rbac.authorization.k8s.io" {
        path_segment_problem(name)
    } else {
        name_problem(name, dns_label)
    };
    if let Some(problem) = problem {
        return Err(ApiError::invalid(
            info,
            name,
            "metadata.name",
            format!("Invalid value: \"{name}\": {problem}"),
        ));
    }
    if let Some(labels) = obj.pointer("/metadata/labels") {
        let map = labels.as_object().ok_or_else(|| {
            ApiError::invalid(info, name, "metadata.labels", "must be a map of strings")
        })?;
        for (k, v) in map {
            selector::validate_key(k, 0)
                .map_err(|e| ApiError::invalid(info, name, "metadata.labels", e.message))?;
            let v = v.as_str().ok_or_else(|| {
                ApiError::invalid(
                    info,
                    name,
                    "metadata.labels",
                    format!("value of {k} must be a string"),
                )
            })?;
            selector::validate_value(v, 0)
                .map_err(|e| ApiError::invalid(info, name, "metadata.labels", e.message))?;
        }
    }
    if let Some(annotations) = obj.pointer("/metadata/annotations") {
        let map = annotations.as_object().ok_or_else(|| {
            ApiError::invalid(
                info,
                name,
                "metadata.annotations",
                "must be a map of strings",
            )
        })?;
        for (k, v) in map {
            selector::validate_key(k, 0)
                .map_err(|e| ApiError::invalid(info, name, "metadata.annotations", e.message))?;
            if !v.is_string() {
                return Err(ApiError::invalid(
                    info,
                    name,
                    "metadata.annotations",
                    format!("value of {k} must be a string"),
                ));
            }
        }
    }
    if let Some(f) = obj.pointer("/metadata/finalizers") {
        if !f.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
            return Err(ApiError::invalid(
                info,
                name,
                "metadata.finalizers",
                "must be a list of strings",
            ));
        }
    }
    Ok(())
}

/// Why `name` is not a valid path segment (the rule for RBAC object names), if it is not.
fn path_segment_problem(name: &str) -> Option<&'static str> {
    if name == "." || name == ".." {
        Some("may not be '.' or '..'")
    } else if name.contains('/') || name.contains('%') {
        Some("may not contain '/' or '%'")
    } else {
        None
    }
}

/// Why `name` is not a valid DNS subdomain (or label, for namespaces), if it is not.
fn name_problem(name: &str, dns_label: bool) -> Option<&'static str> {
    let max = if dns_label { 63 } else { 253 };
    let ok_chars = name.bytes().all(|b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (b == b'.' && !dns_label)
    });
    let ends_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if name.len() > max {
        Some("must be no more than the maximum length")
    } else if !ok_chars || !ends_ok(name.as_bytes().first()) || !ends_ok(name.as_bytes().last()) {
        Some("a lowercase RFC 1123 name must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
    } else {
        None
    }
}
