//! Validation of objects about to be stored, as the real API server does it: identity matches the
//! URL, `ObjectMeta` rules (names, generateName, labels, annotations, finalizers), the rules of the
//! built-in kinds sluice writes (ConfigMap and Secret keys, sizes, immutability) and, for CRD
//! kinds, the version's structural schema. Every error is collected into one `422 Invalid`.

use serde_json::Value;

use crate::error::ApiError;
use crate::field_error::FieldError;
use crate::object::meta_str;
use crate::resources::ResourceInfo;

/// The largest ConfigMap or Secret payload the API server accepts (`core.MaxSecretSize`).
pub const MAX_DATA_SIZE: usize = 1024 * 1024;

const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const CONFIG_KEY_MESSAGE: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

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

/// Checks an object about to be stored; `old` is the stored object on updates.
pub fn check_object(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let errors = object_errors(info, obj, old);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields(
            &info.group,
            &info.kind,
            meta_str(obj, "name"),
            &errors,
        ))
    }
}

/// Every validation error of `obj`: metadata first, then the kind's own rules, then its schema.
pub fn object_errors(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = meta_errors(info, obj);
    errors.extend(deleting_errors(obj, old));
    if info.group.is_empty() {
        match info.kind.as_str() {
            "ConfigMap" => errors.extend(config_map_errors(obj, old)),
            "Secret" => errors.extend(secret_errors(obj, old)),
            _ => {}
        }
    }
    if (info.group.as_str(), info.kind.as_str()) == ("discovery.k8s.io", "EndpointSlice") {
        errors.extend(endpoint_slice_errors(obj, old));
    }
    errors.extend(super::workloads::errors(info, obj));
    let version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.rsplit('/').next())
        .unwrap_or("");
    if let Some(schema) = info.schema(version) {
        errors.extend(crate::schema::validate(schema, obj, old));
    }
    errors
}

/// An object being deleted takes no new finalizer (apimachinery's `ValidateNoNewFinalizers`):
/// what holds it may only let go.
fn deleting_errors(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let Some(old) = old.filter(|old| crate::object::is_deleting(old)) else {
        return Vec::new();
    };
    let before = crate::object::finalizers(old);
    let added: std::collections::BTreeSet<String> = crate::object::finalizers(obj)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    let new: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
    if new.is_empty() {
        return Vec::new();
    }
    vec![FieldError::forbidden(
        "metadata.finalizers",
        format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            new.join(", ")
        ),
    )]
}

/// Why `name` (or a generateName `prefix`) does not fit the kind's name rule: RBAC objects take
/// any path segment, namespaces a DNS label, everything else a DNS subdomain.
fn object_name_problems(info: &ResourceInfo, name: &str, prefix: bool) -> Vec<String> {
    if info.group == "rbac.authorization.k8s.io" {
        path_segment_problems(name, prefix)
    } else {
        name_problems(
            name,
            info.kind == "Namespace" && info.group.is_empty(),
            prefix,
        )
    }
}

fn meta_errors(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = meta_str(obj, "name");
    if name.is_empty() {
        errors.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for problem in object_name_problems(info, name, false) {
            errors.push(FieldError::invalid(
                "metadata.name",
                Value::from(name),
                problem,
            ));
        }
    }
    let generate_name = meta_str(obj, "generateName");
    if !generate_name.is_empty() {
        for problem in object_name_problems(info, generate_name, true) {
            errors.push(FieldError::invalid(
                "metadata.generateName",
                Value::from(generate_name),
                problem,
            ));
        }
    }
    if let Some(labels) = obj.pointer("/metadata/labels") {
        match labels.as_object() {
            None => errors.push(FieldError::invalid(
                "metadata.labels",
                labels.clone(),
                "must be a map of strings",
            )),
            Some(map) => {
                for (k, v) in map {
                    for problem in qualified_name_problems(k) {
                        errors.push(FieldError::invalid(
                            "metadata.labels",
                            Value::from(k.as_str()),
                            problem,
                        ));
                    }
                    match v.as_str() {
                        None => errors.push(FieldError::invalid(
                            "metadata.labels",
                            v.clone(),
                            format!("value of {k} must be a string"),
                        )),
                        Some(s) => {
                            for problem in label_value_problems(s) {
                                errors.push(FieldError::invalid(
                                    "metadata.labels",
                                    Value::from(s),
                                    problem,
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(annotations) = obj.pointer("/metadata/annotations") {
        match annotations.as_object() {
            None => errors.push(FieldError::invalid(
                "metadata.annotations",
                annotations.clone(),
                "must be a map of strings",
            )),
            Some(map) => {
                let mut size = 0;
                for (k, v) in map {
                    for problem in qualified_name_problems(&k.to_lowercase()) {
                        errors.push(FieldError::invalid(
                            "metadata.annotations",
                            Value::from(k.as_str()),
                            problem,
                        ));
                    }
                    match v.as_str() {
                        None => errors.push(FieldError::invalid(
                            "metadata.annotations",
                            v.clone(),
                            format!("value of {k} must be a string"),
                        )),
                        Some(s) => size += k.len() + s.len(),
                    }
                }
                // apimachinery's TotalAnnotationSizeLimitB.
                if size > 256 * 1024 {
                    errors.push(FieldError::too_long("metadata.annotations", 256 * 1024));
                }
            }
        }
    }
    if let Some(f) = obj.pointer("/metadata/finalizers") {
        if !f.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
            errors.push(FieldError::invalid(
                "metadata.finalizers",
                f.clone(),
                "must be a list of strings",
            ));
        }
    }
    errors
}

/// Why `name` is not a valid path segment (apimachinery `IsValidPathSegmentName`), the rule for
/// RBAC object names such as `system:discovery`. A `prefix` (generateName) may be `.` or `..`.
fn path_segment_problems(name: &str, prefix: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !prefix && (name == "." || name == "..") {
        out.push(format!("may not be '{name}'"));
    }
    for illegal in ["/", "%"] {
        if name.contains(illegal) {
            out.push(format!("may not contain '{illegal}'"));
        }
    }
    out
}

/// Why `name` is not a valid DNS subdomain (or label, for namespaces). A `prefix` (generateName)
/// may end with `-`.
pub fn name_problems(name: &str, dns_label: bool, prefix: bool) -> Vec<String> {
    let masked;
    let name = if prefix && name.ends_with('-') {
        masked = format!("{}a", &name[..name.len() - 1]);
        masked.as_str()
    } else {
        name
    };
    let max = if dns_label { 63 } else { 253 };
    let mut out = Vec::new();
    if name.len() > max {
        out.push(format!("must be no more than {max} characters"));
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = if dns_label {
        name.bytes().all(|b| alnum(b) || b == b'-')
            && name.bytes().next().is_some_and(alnum)
            && name.bytes().last().is_some_and(alnum)
    } else {
        name.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| alnum(b) || b == b'-')
                && part.bytes().next().is_some_and(alnum)
                && part.bytes().last().is_some_and(alnum)
        })
    };
    if !ok {
        out.push(
            if dns_label {
                LABEL_MESSAGE
            } else {
                SUBDOMAIN_MESSAGE
            }
            .to_string(),
        );
    }
    out
}

const QUALIFIED_NAME_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the name part of label and annotation keys.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Why a label or annotation key is not a qualified name (apimachinery `IsQualifiedName`).
fn qualified_name_problems(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    name_problems(prefix, false, false)
                        .into_iter()
                        .map(|p| format!("prefix part {p}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!("a qualified name {QUALIFIED_NAME_MESSAGE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")];
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        out.push(format!("name part {QUALIFIED_NAME_MESSAGE}"));
    }
    out
}

/// Why a label value is invalid (apimachinery `IsValidLabelValue`).
fn label_value_problems(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    if value.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        out.push(LABEL_VALUE_MESSAGE.to_string());
    }
    out
}

/// Why `key` is not a valid ConfigMap or Secret key.
fn config_key_problems(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if key.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        out.push(CONFIG_KEY_MESSAGE.to_string());
    }
    match key {
        "." => out.push("must not be '.'".to_string()),
        ".." => out.push("must not be '..'".to_string()),
        k if k.starts_with("..") => out.push("must not start with '..'".to_string()),
        _ => {}
    }
    out
}

fn key_errors(obj: &Value, field: &str, errors: &mut Vec<FieldError>) -> usize {
    let mut size = 0;
    if let Some(map) = obj.get(field).and_then(Value::as_object) {
        for (k, v) in map {
            for problem in config_key_problems(k) {
                errors.push(FieldError::invalid(
                    format!("{field}[{k}]"),
                    Value::from(k.as_str()),
                    problem,
                ));
            }
            size += v.as_str().map_or(0, str::len);
        }
    }
    size
}

fn immutable_errors(obj: &Value, old: Option<&Value>, fields: &[&str]) -> Vec<FieldError> {
    let Some(old) = old else {
        return Vec::new();
    };
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return Vec::new();
    }
    let mut errors = Vec::new();
    for field in fields {
        if obj.get(*field) != old.get(*field) {
            errors.push(FieldError::forbidden(
                *field,
                "field is immutable when `immutable` is set",
            ));
        }
    }
    if obj.get("immutable") != Some(&Value::Bool(true)) {
        errors.push(FieldError::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    errors
}

/// An EndpointSlice's own rules (`ValidateEndpointSlice`): an address type of the three, which
/// never changes, at most 1,000 endpoints of 1 to 100 addresses each, and at most 100 ports.
fn endpoint_slice_errors(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    const TYPES: [&str; 3] = ["IPv4", "IPv6", "FQDN"];
    let mut errors = Vec::new();
    match obj.get("addressType") {
        None | Some(Value::Null) => errors.push(FieldError::required("addressType", "")),
        Some(kind) if !TYPES.iter().any(|t| kind == *t) => errors.push(FieldError::not_supported(
            "addressType",
            kind.clone(),
            &TYPES.map(str::to_string),
        )),
        Some(kind) => {
            if old.is_some_and(|old| old.get("addressType") != Some(kind)) {
                errors.push(FieldError::invalid(
                    "addressType",
                    kind.clone(),
                    "field is immutable",
                ));
            }
        }
    }
    let count = |field: &str| obj.get(field).and_then(Value::as_array).map_or(0, Vec::len);
    let count = |field: &str| i64::try_from(count(field)).unwrap_or(i64::MAX);
    if count("endpoints") > 1_000 {
        errors.push(FieldError::too_many("endpoints", count("endpoints"), 1_000));
    }
    if count("ports") > 100 {
        errors.push(FieldError::too_many("ports", count("ports"), 100));
    }
    let endpoints = obj.get("endpoints").and_then(Value::as_array);
    for (i, endpoint) in endpoints.into_iter().flatten().enumerate() {
        let addresses = endpoint
            .get("addresses")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let field = format!("endpoints[{i}].addresses");
        if addresses == 0 {
            errors.push(FieldError::required(
                field,
                "must contain at least 1 address",
            ));
        } else if addresses > 100 {
            let actual = i64::try_from(addresses).unwrap_or(i64::MAX);
            errors.push(FieldError::too_many(field, actual, 100));
        }
    }
    errors
}

fn config_map_errors(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut size = key_errors(obj, "data", &mut errors);
    // binaryData values are base64 in JSON; their size is the decoded size.
    if let Some(map) = obj.get("binaryData").and_then(Value::as_object) {
        for (k, v) in map {
            for problem in config_key_problems(k) {
                errors.push(FieldError::invalid(
                    format!("binaryData[{k}]"),
                    Value::from(k.as_str()),
                    problem,
                ));
            }
            if obj
                .pointer(&format!(
                    "/data/{}",
                    k.replace('~', "~0").replace('/', "~1")
                ))
                .is_some()
            {
                errors.push(FieldError::invalid(
                    format!("binaryData[{k}]"),
                    Value::from(k.as_str()),
                    "duplicate of key present in data",
                ));
            }
            size += v.as_str().map_or(0, |s| s.len() / 4 * 3);
        }
    }
    if size > MAX_DATA_SIZE {
        errors.push(FieldError::too_long("", MAX_DATA_SIZE as i64));
    }
    errors.extend(immutable_errors(obj, old, &["data", "binaryData"]));
    errors
}

fn secret_errors(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut size = 0;
    if let Some(map) = obj.get("data").and_then(Value::as_object) {
        for (k, v) in map {
            for problem in config_key_problems(k) {
                errors.push(FieldError::invalid(
                    format!("data[{k}]"),
                    Value::from(k.as_str()),
                    problem,
                ));
            }
            size += v.as_str().map_or(0, |s| s.len() / 4 * 3);
        }
    }
    if size > MAX_DATA_SIZE {
        errors.push(FieldError::too_long("data", MAX_DATA_SIZE as i64));
    }
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("Opaque");
    let required: &[&str] = match ty {
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        _ => &[],
    };
    for key in required {
        if obj.pointer(&format!("/data/{key}")).is_none() {
            errors.push(FieldError::required(format!("data[{key}]"), ""));
        }
    }
    if let Some(old) = old {
        let old_ty = old.get("type").and_then(Value::as_str).unwrap_or("Opaque");
        if old_ty != ty {
            errors.push(FieldError::invalid(
                "type",
                Value::from(ty),
                "field is immutable",
            ));
        }
    }
    errors.extend(immutable_errors(obj, old, &["data"]));
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_kind as builtin;
    use serde_json::json;

    fn check(kind: &str, obj: Value, old: Option<Value>, want: &[&str]) {
        let got: Vec<String> = object_errors(&builtin(kind), &obj, old.as_ref())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, want, "{obj}");
    }

    #[test]
    fn names_follow_the_dns_rules() {
        check(
            "ConfigMap",
            json!({"metadata": {"name": "a.b-c"}}),
            None,
            &[],
        );
        check(
            "ConfigMap",
            json!({"metadata": {"name": "Upper"}}),
            None,
            &[&format!(
                "metadata.name: Invalid value: \"Upper\": {SUBDOMAIN_MESSAGE}"
            )],
        );
        check(
            "Namespace",
            json!({"metadata": {"name": "a.b"}}),
            None,
            &[&format!(
                "metadata.name: Invalid value: \"a.b\": {LABEL_MESSAGE}"
            )],
        );
        check(
            "ConfigMap",
            json!({"metadata": {}}),
            None,
            &["metadata.name: Required value: name or generateName is required"],
        );
        check(
            "ConfigMap",
            json!({"metadata": {"name": "x-abcde", "generateName": "x-"}}),
            None,
            &[],
        );
        check(
            "ConfigMap",
            json!({"metadata": {"name": "a", "generateName": "X-"}}),
            None,
            &[&format!(
                "metadata.generateName: Invalid value: \"X-\": {SUBDOMAIN_MESSAGE}"
            )],
        );
    }

    #[test]
    fn labels_and_annotations_have_apimachinery_messages() {
        check(
            "ConfigMap",
            json!({"metadata": {"name": "c", "labels": {"example.com/ok": "v", "bad key": "bad value", "Ex.com/x": ""}}}),
            None,
            &[
                &format!("metadata.labels: Invalid value: \"Ex.com/x\": prefix part {SUBDOMAIN_MESSAGE}"),
                &format!("metadata.labels: Invalid value: \"bad key\": name part {QUALIFIED_NAME_MESSAGE}"),
                &format!("metadata.labels: Invalid value: \"bad value\": {LABEL_VALUE_MESSAGE}"),
            ],
        );
        check(
            "ConfigMap",
            json!({"metadata": {"name": "c", "annotations": {"a/b/c": "x", "Fine/Key": "any value"}}}),
            None,
            &[&format!("metadata.annotations: Invalid value: \"a/b/c\": a qualified name {QUALIFIED_NAME_MESSAGE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")],
        );
    }

    #[test]
    fn config_map_keys_and_size_are_checked() {
        check(
            "ConfigMap",
            json!({"metadata": {"name": "c"}, "data": {"ok.key_1": "v", "bad key": "v", "..x": "v"}}),
            None,
            &[
                "data[..x]: Invalid value: \"..x\": must not start with '..'",
                &format!("data[bad key]: Invalid value: \"bad key\": {CONFIG_KEY_MESSAGE}"),
            ],
        );
        let big = "x".repeat(MAX_DATA_SIZE + 1);
        check(
            "ConfigMap",
            json!({"metadata": {"name": "c"}, "data": {"k": big}}),
            None,
            &[": Too long: may not be more than 1048576 bytes"],
        );
        check(
            "ConfigMap",
            json!({"metadata": {"name": "c"}, "immutable": true, "data": {"k": "2"}}),
            Some(json!({"metadata": {"name": "c"}, "immutable": true, "data": {"k": "1"}})),
            &["data: Forbidden: field is immutable when `immutable` is set"],
        );
    }

    #[test]
    fn an_object_being_deleted_takes_no_new_finalizer() {
        let deleting = json!({"metadata": {"name": "c", "finalizers": ["a"],
                                            "deletionTimestamp": "2026-11-26T20:00:00Z"}});
        let mut more = deleting.clone();
        more["metadata"]["finalizers"] = json!(["a", "z", "b"]);
        check(
            "ConfigMap",
            more.clone(),
            Some(deleting.clone()),
            &["metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"b\", \"z\"}"],
        );
        let mut fewer = deleting.clone();
        fewer["metadata"]["finalizers"] = json!([]);
        check("ConfigMap", fewer, Some(deleting), &[]);
        // Live, it takes any.
        let live = json!({"metadata": {"name": "c", "finalizers": ["a"]}});
        check("ConfigMap", more, Some(live), &[]);
    }

    #[test]
    fn secret_type_is_immutable_and_typed_secrets_need_their_keys() {
        check(
            "Secret",
            json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "YQ=="}}),
            Some(json!({"metadata": {"name": "s"}, "type": "Opaque"})),
            &[
                "data[tls.key]: Required value",
                "type: Invalid value: \"kubernetes.io/tls\": field is immutable",
            ],
        );
    }
}
