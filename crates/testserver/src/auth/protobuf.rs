//! Just enough of Kubernetes' protobuf encoding to read a SelfSubjectAccessReview, which kubectl's
//! typed client (`kubectl auth can-i`) sends as protobuf: the `k8s\0` envelope (`runtime.Unknown`)
//! and the string fields of the review's spec. Everything else in the message is skipped.

use serde_json::{json, Map, Value};

/// The envelope's magic prefix.
const MAGIC: &[u8] = b"k8s\0";

/// Reads the length-delimited and string fields of one message: (field number, bytes).
/// Varint and fixed-size fields are skipped.
fn fields(mut bytes: &[u8]) -> Result<Vec<(u64, &[u8])>, String> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let (number, wire_type) = (key >> 3, key & 7);
        match wire_type {
            0 => {
                varint(&mut bytes)?;
            }
            1 => bytes = bytes.get(8..).ok_or("truncated fixed64 field")?,
            5 => bytes = bytes.get(4..).ok_or("truncated fixed32 field")?,
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).map_err(|_| "field too long")?;
                let value = bytes.get(..len).ok_or("truncated length-delimited field")?;
                out.push((number, value));
                bytes = &bytes[len..];
            }
            other => return Err(format!("unsupported wire type {other}")),
        }
    }
    Ok(out)
}

fn varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or("truncated varint")?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long".into())
}

/// The named string fields of a message as a JSON object.
fn strings(bytes: &[u8], names: &[(u64, &str)]) -> Result<Value, String> {
    let mut object = Map::new();
    for (number, value) in fields(bytes)? {
        if let Some((_, name)) = names.iter().find(|(n, _)| *n == number) {
            let text = std::str::from_utf8(value).map_err(|_| format!("{name} is not UTF-8"))?;
            object.insert((*name).to_string(), json!(text));
        }
    }
    Ok(Value::Object(object))
}

/// A protobuf SelfSubjectAccessReview as its JSON form (`{"spec": {...}}`, the attributes only).
pub fn self_subject_access_review(body: &[u8]) -> Result<Value, String> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or("missing the k8s protobuf envelope")?;
    let raw = fields(envelope)?
        .into_iter()
        .find(|(n, _)| *n == 2)
        .map(|(_, raw)| raw)
        .ok_or("the envelope has no object")?;
    let spec = fields(raw)?
        .into_iter()
        .find(|(n, _)| *n == 2)
        .map(|(_, spec)| spec)
        .unwrap_or_default();
    let mut out = Map::new();
    for (number, value) in fields(spec)? {
        match number {
            1 => {
                out.insert(
                    "resourceAttributes".into(),
                    strings(
                        value,
                        &[
                            (1, "namespace"),
                            (2, "verb"),
                            (3, "group"),
                            (4, "version"),
                            (5, "resource"),
                            (6, "subresource"),
                            (7, "name"),
                        ],
                    )?,
                );
            }
            2 => {
                out.insert(
                    "nonResourceAttributes".into(),
                    strings(value, &[(1, "path"), (2, "verb")])?,
                );
            }
            _ => {}
        }
    }
    Ok(json!({"spec": out}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Length-delimited field `number` holding `value`.
    fn field(number: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(value.len()).expect("short")];
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn reads_the_attributes_of_a_protobuf_review() {
        let attributes = [
            field(1, b"team"),
            field(2, b"create"),
            field(5, b"configmaps"),
            vec![8 << 3, 1], // a varint field (a later addition) is skipped
        ]
        .concat();
        let spec = field(1, &attributes);
        let review = [field(1, &field(1, b"ignored-meta")), field(2, &spec)].concat();
        let type_meta = [
            field(1, b"authorization.k8s.io/v1"),
            field(2, b"SelfSubjectAccessReview"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &review)].concat();
        assert_eq!(
            self_subject_access_review(&body),
            Ok(
                json!({"spec": {"resourceAttributes": {"namespace": "team", "verb": "create", "resource": "configmaps"}}})
            )
        );
        let non_resource = [
            MAGIC.to_vec(),
            field(
                2,
                &field(
                    2,
                    &field(2, &[field(1, b"/version"), field(2, b"get")].concat()),
                ),
            ),
        ]
        .concat();
        assert_eq!(
            self_subject_access_review(&non_resource),
            Ok(json!({"spec": {"nonResourceAttributes": {"path": "/version", "verb": "get"}}}))
        );
        assert!(self_subject_access_review(b"{}").is_err());
        assert!(self_subject_access_review(&[MAGIC, &[2 << 3 | 2, 9, 1]].concat()).is_err());
    }
}
