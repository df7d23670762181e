//! What kube-apiserver's decoder does to a written object before it is validated and stored:
//! the typed decoding rules of the built-in kinds sluice writes (ConfigMap data are strings,
//! Secret data are base64, `stringData` merges into `data`), pruning of unknown fields with the
//! `fieldValidation` directive (`Strict` rejects, `Warn` warns, `Ignore` drops silently),
//! duplicate JSON fields, and schema defaulting. Pure functions; the HTTP layer calls them and
//! attaches the warnings. Validation itself happens where objects are stored (`cluster::validate`).

use base64::Engine;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::field_error::{go_quote, FieldError};
use crate::resources::ResourceInfo;
use crate::schema::OBJECT_META_FIELDS;

/// How unknown and duplicate fields are treated (`?fieldValidation=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directive {
    Strict,
    Warn,
    Ignore,
}

/// The write that carries the object; it decides the wording of decoding errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    Update,
    Patch,
}

impl Verb {
    fn options_kind(self) -> &'static str {
        match self {
            Verb::Create => "CreateOptions",
            Verb::Update => "UpdateOptions",
            Verb::Patch => "PatchOptions",
        }
    }
}

/// The `fieldValidation` parameter; absent means `Warn`, as on a real server.
pub fn directive(param: Option<&str>, verb: Verb) -> Result<Directive, ApiError> {
    match param.unwrap_or("") {
        "" | "Warn" => Ok(Directive::Warn),
        "Strict" => Ok(Directive::Strict),
        "Ignore" => Ok(Directive::Ignore),
        other => Err(ApiError::invalid_fields(
            "meta.k8s.io",
            verb.options_kind(),
            "",
            &[FieldError::not_supported(
                "fieldValidation",
                Value::from(other),
                &["".into(), "Ignore".into(), "Strict".into(), "Warn".into()],
            )],
        )),
    }
}

/// Decodes a written object in place: built-in decoding rules, pruning, defaulting. `duplicates`
/// are the duplicate JSON fields of the request body. Returns the warnings to send.
pub fn decode(
    info: &ResourceInfo,
    version: &str,
    obj: &mut Value,
    duplicates: Vec<String>,
    directive: Directive,
    verb: Verb,
) -> Result<Vec<String>, ApiError> {
    if info.group.is_empty() {
        match info.kind.as_str() {
            "ConfigMap" => config_map(obj).map_err(|e| cannot_handle(info, version, &e))?,
            "Secret" => secret(obj).map_err(|e| cannot_handle(info, version, &e))?,
            _ => {}
        }
    }
    let schema = info.schema(version).cloned();
    let unknown = match &schema {
        Some(schema) => crate::schema::prune(schema, obj),
        None => prune_builtin(info, obj),
    };
    let mut problems: Vec<String> = duplicates
        .iter()
        .map(|d| format!("duplicate field {}", go_quote(d)))
        .collect();
    problems.extend(
        unknown
            .iter()
            .map(|u| format!("unknown field {}", go_quote(u))),
    );
    let mut warnings = Vec::new();
    if !problems.is_empty() {
        match directive {
            Directive::Strict => {
                let strict = format!("strict decoding error: {}", problems.join(", "));
                return Err(match verb {
                    Verb::Patch => ApiError::bad_request(strict),
                    Verb::Create | Verb::Update => cannot_handle(info, version, &strict),
                });
            }
            Directive::Warn => warnings = problems,
            Directive::Ignore => {}
        }
    }
    if let Some(schema) = &schema {
        crate::schema::default(schema, obj);
    }
    Ok(warnings)
}

/// Server-side apply converts the applied configuration with the kind's schema first: an
/// undeclared field or a value of the wrong kind fails the request whatever `fieldValidation`
/// says, with a 500 (apiserver does not classify this error).
pub fn check_apply_fields(
    info: &ResourceInfo,
    version: &str,
    namespace: &str,
    name: &str,
    config: &Value,
) -> Result<(), ApiError> {
    let lines: Vec<String> = match info.schema(version) {
        Some(schema) => crate::schema::apply_errors(schema, config),
        None => prune_builtin(info, &mut config.clone())
            .iter()
            .map(|u| format!(".{u}: field not declared in schema"))
            .collect(),
    };
    if lines.is_empty() {
        return Ok(());
    }
    let detail = if lines.len() == 1 {
        lines[0].clone()
    } else {
        format!("errors:\n  {}", lines.join("\n  "))
    };
    Err(ApiError::new(
        500,
        "",
        format!(
            "failed to create typed patch object ({namespace}/{name}; {}, Kind={}): {detail}",
            if info.group.is_empty() {
                format!("/{version}")
            } else {
                format!("{}/{version}", info.group)
            },
            info.kind
        ),
    ))
}

/// `400` for a body the typed decoder cannot read, worded as apiserver's decoder words it.
fn cannot_handle(info: &ResourceInfo, version: &str, error: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version {} cannot be handled as a {kind}: {error}",
        go_quote(version),
        kind = info.kind
    ))
}

/// Removes the fields a built-in kind does not declare and returns their paths, sorted: every
/// field the kind's schema lacks (`crate::schema::builtin`); a CustomResourceDefinition's by its
/// typed decoding; and of any other kind, the unknown fields of its `metadata`.
fn prune_builtin(info: &ResourceInfo, obj: &mut Value) -> Vec<String> {
    if let Some(schema) = crate::schema::builtin::schema(&info.group, &info.kind) {
        return crate::schema::prune(schema, obj);
    }
    let mut unknown = if crate::cluster::is_crd(info) {
        crate::schema::builtin::prune_typed::<CustomResourceDefinition>(obj)
    } else {
        Vec::new()
    };
    let Some(map) = obj.as_object_mut() else {
        return unknown;
    };
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        let extra: Vec<String> = meta
            .keys()
            .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        for k in extra {
            meta.remove(&k);
            unknown.push(format!("metadata.{k}"));
        }
    }
    unknown.sort();
    unknown
}

/// Go's name for a JSON value's type in `json: cannot unmarshal` errors.
pub(crate) fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn string_map(obj: &mut Value, field: &str, kind: &str) -> Result<(), String> {
    match obj.get_mut(field) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(map)) => {
            for v in map.values_mut() {
                match v {
                    Value::String(_) => {}
                    // Go decodes a JSON null into a map[string]string entry as "".
                    Value::Null => *v = Value::from(""),
                    other => {
                        return Err(format!(
                            "json: cannot unmarshal {} into Go struct field {kind}.{field} of type string",
                            go_json_type(other)
                        ))
                    }
                }
            }
            Ok(())
        }
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go struct field {kind}.{field} of type map[string]string",
            go_json_type(other)
        )),
    }
}

fn base64_map(obj: &Value, field: &str, kind: &str) -> Result<(), String> {
    let Some(map) = obj.get(field).and_then(Value::as_object) else {
        return match obj.get(field) {
            None | Some(Value::Null) => Ok(()),
            Some(other) => Err(format!(
                "json: cannot unmarshal {} into Go struct field {kind}.{field} of type map[string][]uint8",
                go_json_type(other)
            )),
        };
    };
    for v in map.values() {
        let Some(s) = v.as_str() else {
            if v.is_null() {
                continue;
            }
            return Err(format!(
                "json: cannot unmarshal {} into Go struct field {kind}.{field} of type []uint8",
                go_json_type(v)
            ));
        };
        if let Err(e) = base64::engine::general_purpose::STANDARD.decode(s) {
            let at = match e {
                base64::DecodeError::InvalidByte(i, _)
                | base64::DecodeError::InvalidLastSymbol(i, _) => i,
                _ => s.len() / 4 * 4,
            };
            return Err(format!("illegal base64 data at input byte {at}"));
        }
    }
    Ok(())
}

fn config_map(obj: &mut Value) -> Result<(), String> {
    string_map(obj, "data", "ConfigMap")?;
    base64_map(obj, "binaryData", "ConfigMap")
}

/// Secret data must be base64; `stringData` is write-only: merged into `data` (it wins) and dropped.
fn secret(obj: &mut Value) -> Result<(), String> {
    base64_map(obj, "data", "Secret")?;
    string_map(obj, "stringData", "Secret")?;
    let Some(map) = obj.as_object_mut() else {
        return Ok(());
    };
    if let Some(Value::Object(plain)) = map.remove("stringData") {
        let data = map
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if !data.is_object() {
            *data = Value::Object(Map::new());
        }
        if let Value::Object(data) = data {
            for (k, v) in plain {
                let text = v.as_str().unwrap_or("");
                data.insert(
                    k,
                    Value::from(base64::engine::general_purpose::STANDARD.encode(text)),
                );
            }
        }
    }
    match map.get("type") {
        Some(Value::String(t)) if !t.is_empty() => {}
        _ => {
            map.insert("type".into(), Value::from("Opaque"));
        }
    }
    Ok(())
}

/// The paths of fields a JSON body repeats within one object (`spec.a`, `spec.list[0].b`).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

    struct Walk<'a> {
        path: String,
        found: &'a std::cell::RefCell<Vec<String>>,
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq
                .next_element_seed(Walk {
                    path: format!("{}[{i}]", self.path),
                    found: self.found,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = if self.path.is_empty() {
                    key.clone()
                } else {
                    format!("{}.{key}", self.path)
                };
                if !seen.insert(key) {
                    self.found.borrow_mut().push(path.clone());
                }
                map.next_value_seed(Walk {
                    path,
                    found: self.found,
                })?;
            }
            Ok(())
        }
    }

    let found = std::cell::RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(body);
    // A body that is not JSON fails decoding elsewhere, with its own error.
    let _ = Walk {
        path: String::new(),
        found: &found,
    }
    .deserialize(&mut de);
    found.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_kind as builtin;
    use serde_json::json;

    #[test]
    fn the_directive_defaults_to_warn_and_rejects_unknown_values() {
        assert_eq!(directive(None, Verb::Create), Ok(Directive::Warn));
        assert_eq!(
            directive(Some("Strict"), Verb::Patch),
            Ok(Directive::Strict)
        );
        let e = directive(Some("strict"), Verb::Create).expect_err("lowercase is not a directive");
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
        );
    }

    #[test]
    fn unknown_built_in_fields_are_rejected_warned_or_dropped() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "nam": "x"}, "data": {"a": "1"}, "dta": {}});
        let info = builtin("ConfigMap");
        let mut obj = cm.clone();
        let e = decode(
            &info,
            "v1",
            &mut obj,
            vec![],
            Directive::Strict,
            Verb::Create,
        )
        .expect_err("strict");
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert_eq!(
            e.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dta\", unknown field \"metadata.nam\""
        );
        let mut obj = cm.clone();
        let e = decode(
            &info,
            "v1",
            &mut obj,
            vec!["data.a".into()],
            Directive::Strict,
            Verb::Patch,
        )
        .expect_err("strict");
        assert_eq!(
            e.message,
            "strict decoding error: duplicate field \"data.a\", unknown field \"dta\", unknown field \"metadata.nam\""
        );
        let mut obj = cm.clone();
        let warnings =
            decode(&info, "v1", &mut obj, vec![], Directive::Warn, Verb::Create).expect("warn");
        assert_eq!(
            warnings,
            ["unknown field \"dta\"", "unknown field \"metadata.nam\""]
        );
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}})
        );
        let mut obj = cm;
        assert_eq!(
            decode(
                &info,
                "v1",
                &mut obj,
                vec![],
                Directive::Ignore,
                Verb::Update
            ),
            Ok(vec![])
        );
    }

    #[test]
    fn built_in_data_follows_the_typed_decoder() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"n": 1}});
        let e = decode(
            &builtin("ConfigMap"),
            "v1",
            &mut cm,
            vec![],
            Directive::Warn,
            Verb::Create,
        )
        .expect_err("number");
        assert_eq!(
            e.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        );
        let mut bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "abc!"}});
        let e = decode(
            &builtin("Secret"),
            "v1",
            &mut bad,
            vec![],
            Directive::Warn,
            Verb::Create,
        )
        .expect_err("base64");
        assert_eq!(
            e.message,
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3"
        );
        let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "YQ==", "b": "Yg=="}, "stringData": {"b": "B", "c": "C"}});
        decode(
            &builtin("Secret"),
            "v1",
            &mut secret,
            vec![],
            Directive::Strict,
            Verb::Create,
        )
        .expect("valid");
        assert_eq!(
            secret,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque",
                "data": {"a": "YQ==", "b": "Qg==", "c": "Qw=="}})
        );
    }

    #[test]
    fn duplicate_fields_are_found_at_any_depth() {
        let body = br#"{"spec": {"a": 1, "list": [{"b": 1, "b": 2}], "a": 2}, "kind": "X"}"#;
        assert_eq!(duplicate_fields(body), ["spec.list[0].b", "spec.a"]);
        assert!(duplicate_fields(br#"{"a": {"a": 1}}"#).is_empty());
    }

    #[test]
    fn apply_of_an_undeclared_field_fails_like_the_typed_converter() {
        let e = check_apply_fields(
            &builtin("ConfigMap"),
            "v1",
            "default",
            "c",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dat": {}}),
        )
        .expect_err("undeclared");
        assert_eq!((e.code, e.reason), (500, ""));
        assert_eq!(
            e.message,
            "failed to create typed patch object (default/c; /v1, Kind=ConfigMap): .dat: field not declared in schema"
        );
    }
}
