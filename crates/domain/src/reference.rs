//! Object references as Sveltos's Go types write them: `corev1.ObjectReference` marks every
//! field `omitempty`, so a cluster-scoped object's reference has no `namespace` at all. Only
//! the JSON shape lives here; which objects are referenced is the callers' business.

use serde_json::{Map, Value};

/// The JSON of an `ObjectReference` with `apiVersion`, `kind`, `namespace` and `name`, leaving
/// out the fields that are empty.
pub fn object_reference(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
    let reference: Map<String, Value> = present(api_version, kind, namespace, name)
        .map(|(field, value)| (field.to_string(), Value::String(value.to_string())))
        .collect();
    Value::Object(reference)
}

/// The bytes [`object_reference`] of these fields takes as compact JSON, without building it
/// (a report measures thousands of them).
pub fn object_reference_len(api_version: &str, kind: &str, namespace: &str, name: &str) -> usize {
    let mut len = 2;
    let mut fields: usize = 0;
    for (field, value) in present(api_version, kind, namespace, name) {
        // "field":"value" with the value escaped as JSON escapes it.
        len += field.len() + 3 + crate::size::json_len(value);
        fields += 1;
    }
    len + fields.saturating_sub(1)
}

/// The fields of a reference that are not empty, with their JSON names.
fn present<'a>(
    api_version: &'a str,
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
) -> impl Iterator<Item = (&'static str, &'a str)> {
    [
        ("apiVersion", api_version),
        ("kind", kind),
        ("namespace", namespace),
        ("name", name),
    ]
    .into_iter()
    .filter(|(_, value)| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_references_length_is_that_of_its_json() {
        for (api_version, kind, namespace, name) in [
            ("v1", "Service", "default", "web"),
            ("v1", "Namespace", "", "team-a"),
            ("", "", "", ""),
            ("", "", "", "only"),
            ("apps/v1", "Deployment", "ns", "quote\"back\\slash\u{1}ü"),
        ] {
            let built = object_reference(api_version, kind, namespace, name);
            assert_eq!(
                object_reference_len(api_version, kind, namespace, name),
                crate::size::json_len(&built),
                "{built}"
            );
        }
    }

    #[test]
    fn empty_fields_are_omitted_as_go_omitempty_does() {
        let check = |(api_version, kind, namespace, name), expected: Value| {
            assert_eq!(
                object_reference(api_version, kind, namespace, name),
                expected
            );
        };
        check(
            ("v1", "Service", "default", "web"),
            json!({"apiVersion": "v1", "kind": "Service", "namespace": "default", "name": "web"}),
        );
        check(
            ("v1", "Namespace", "", "team-a"),
            json!({"apiVersion": "v1", "kind": "Namespace", "name": "team-a"}),
        );
        check(("", "", "", ""), json!({}));
    }
}
