//! The event's data as templates read it (ADR 0015): a JSON document whose objects are arrays of
//! entries sorted by key, each carrying the first eight bytes of its key inline. Kubernetes
//! keys are short, so a key lookup compares one word and one length per entry passed, without
//! following a pointer to the key's text; `serde_json`'s map searches a B-tree and compares key
//! text through a pointer at every entry. Iteration is in byte order of the keys, Go's order
//! for maps and `serde_json`'s (ADR 0011). Decoded straight from JSON text (`Deserialize`) or
//! converted from `serde_json::Value`; never modified after it is built.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;

/// A JSON value.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Doc {
    #[default]
    Null,
    Bool(bool),
    Number(Number),
    String(Box<str>),
    Array(Box<[Doc]>),
    Object(DocMap),
}

/// A JSON object: entries sorted by key bytes, keys unique.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DocMap {
    entries: Box<[Entry]>,
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    /// The key's first eight bytes as a big-endian word, zero-padded: ordered as the keys are
    /// in their first eight bytes.
    head: u64,
    key: Box<str>,
    value: Doc,
}

impl Entry {
    fn new(key: Box<str>, value: Doc) -> Entry {
        Entry {
            head: head(key.as_bytes()),
            key,
            value,
        }
    }
}

/// Objects with more entries than this are searched by halving instead of in order.
const SCAN: usize = 24;

/// The first eight bytes of `key`, zero-padded, as a big-endian word.
#[inline]
fn head(key: &[u8]) -> u64 {
    let n = key.len();
    if let Some(word) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*word);
    }
    if let (Some(first), Some(last)) = (key.first_chunk::<4>(), key.last_chunk::<4>()) {
        // Four to seven bytes: two overlapping words, the second shifted to its place.
        let (first, last) = (u32::from_be_bytes(*first), u32::from_be_bytes(*last));
        return u64::from(first) << 32 | u64::from(last) << (8 * (8 - n));
    }
    let mut word = 0u64;
    for (i, b) in key.iter().enumerate() {
        word |= u64::from(*b) << (56 - 8 * i);
    }
    word
}

impl DocMap {
    /// An object from entries in any order; of equal keys the last one wins, as in
    /// `serde_json` and Go's `encoding/json`.
    pub fn from_entries(entries: Vec<(Box<str>, Doc)>) -> DocMap {
        DocMap::from_unsorted(
            entries
                .into_iter()
                .map(|(key, value)| Entry::new(key, value))
                .collect(),
        )
    }

    /// [`DocMap::from_entries`] of built entries; sorted and unique ones, the usual case for
    /// JSON that Go or sluice wrote, keep their allocation.
    fn from_unsorted(mut entries: Vec<Entry>) -> DocMap {
        if !entries.windows(2).all(|w| w[0].key < w[1].key) {
            // Stable, so that equal keys keep their order and the last of each run can win.
            entries.sort_by(|a, b| a.key.cmp(&b.key));
            let mut unique: Vec<Entry> = Vec::with_capacity(entries.len());
            for entry in entries {
                match unique.last_mut() {
                    Some(last) if last.key == entry.key => *last = entry,
                    _ => unique.push(entry),
                }
            }
            entries = unique;
        }
        DocMap {
            entries: entries.into_boxed_slice(),
        }
    }

    /// The value of `key`.
    #[inline(always)]
    pub fn get(&self, key: &str) -> Option<&Doc> {
        if self.entries.len() > SCAN {
            let i = self
                .entries
                .binary_search_by(|e| e.key.as_ref().cmp(key))
                .ok()?;
            return Some(&self.entries[i].value);
        }
        let head = head(key.as_bytes());
        for e in self.entries.iter() {
            if e.head == head {
                // Equal heads: equal keys when the lengths and any bytes past eight agree.
                if e.key.len() == key.len()
                    && (key.len() <= 8 || e.key.as_bytes()[8..] == key.as_bytes()[8..])
                {
                    return Some(&e.value);
                }
            } else if e.head > head {
                // Sorted: every later key is greater too.
                return None;
            }
        }
        None
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.entries.iter().map(|e| e.key.as_ref())
    }
}

/// The entries of a [`DocMap`] in key order.
pub struct Iter<'m>(std::slice::Iter<'m, Entry>);

impl<'m> Iterator for Iter<'m> {
    type Item = (&'m str, &'m Doc);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|e| (e.key.as_ref(), &e.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'m> IntoIterator for &'m DocMap {
    type Item = (&'m str, &'m Doc);
    type IntoIter = Iter<'m>;

    fn into_iter(self) -> Iter<'m> {
        self.iter()
    }
}

impl Doc {
    pub fn is_null(&self) -> bool {
        matches!(self, Doc::Null)
    }

    pub fn is_object(&self) -> bool {
        matches!(self, Doc::Object(_))
    }

    pub fn is_array(&self) -> bool {
        matches!(self, Doc::Array(_))
    }

    pub fn as_object(&self) -> Option<&DocMap> {
        match self {
            Doc::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Doc]> {
        match self {
            Doc::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Doc::String(s) => Some(s),
            _ => None,
        }
    }

    /// The entry `key` of an object; `None` for anything else.
    pub fn get(&self, key: &str) -> Option<&Doc> {
        self.as_object()?.get(key)
    }

    /// The same document as a `serde_json::Value`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Doc::Null => serde_json::Value::Null,
            Doc::Bool(b) => serde_json::Value::Bool(*b),
            Doc::Number(n) => serde_json::Value::Number(n.clone()),
            Doc::String(s) => serde_json::Value::String(s.to_string()),
            Doc::Array(items) => serde_json::Value::Array(items.iter().map(Doc::to_json).collect()),
            Doc::Object(m) => serde_json::Value::Object(
                m.iter()
                    .map(|(k, v)| (k.to_string(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// An object of the given entries (any order; of equal keys the last wins).
    pub fn object<K: Into<Box<str>>>(entries: impl IntoIterator<Item = (K, Doc)>) -> Doc {
        Doc::Object(DocMap::from_entries(
            entries.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        ))
    }
}

impl From<&serde_json::Value> for Doc {
    fn from(json: &serde_json::Value) -> Doc {
        match json {
            serde_json::Value::Null => Doc::Null,
            serde_json::Value::Bool(b) => Doc::Bool(*b),
            serde_json::Value::Number(n) => Doc::Number(n.clone()),
            serde_json::Value::String(s) => Doc::String(s.as_str().into()),
            serde_json::Value::Array(items) => Doc::Array(items.iter().map(Doc::from).collect()),
            // Already sorted and unique (a `serde_json` map is a B-tree map).
            serde_json::Value::Object(entries) => Doc::Object(DocMap {
                entries: entries
                    .iter()
                    .map(|(k, v)| Entry::new(k.as_str().into(), Doc::from(v)))
                    .collect(),
            }),
        }
    }
}

impl From<serde_json::Value> for Doc {
    fn from(json: serde_json::Value) -> Doc {
        Doc::from(&json)
    }
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Doc, D::Error> {
        deserializer.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Doc, E> {
        Ok(Doc::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Doc, E> {
        Ok(Doc::Number(i.into()))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Doc, E> {
        Ok(Doc::Number(u.into()))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Doc, E> {
        // As `serde_json::Value`: a number JSON cannot hold is null.
        Ok(Number::from_f64(f).map_or(Doc::Null, Doc::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Doc, E> {
        Ok(Doc::String(s.into()))
    }

    fn visit_string<E>(self, s: String) -> Result<Doc, E> {
        Ok(Doc::String(s.into_boxed_str()))
    }

    fn visit_none<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_unit<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        Doc::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Doc::Array(items.into_boxed_slice()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(key) = map.next_key::<KeyText>()? {
            entries.push(Entry::new(key.0, map.next_value()?));
        }
        Ok(Doc::Object(DocMap::from_unsorted(entries)))
    }
}

/// An object key, decoded without an intermediate `String` when the input lends it.
struct KeyText(Box<str>);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeyText, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeyText, E> {
                Ok(KeyText(s.into()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<KeyText, E> {
                Ok(KeyText(s.into_boxed_str()))
            }
        }
        deserializer.deserialize_str(V)
    }
}

impl Serialize for Doc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Doc::Null => s.serialize_unit(),
            Doc::Bool(b) => s.serialize_bool(*b),
            Doc::Number(n) => n.serialize(s),
            Doc::String(text) => s.serialize_str(text),
            Doc::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items.iter() {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Doc::Object(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_answer_as_serde_json_does() {
        let keys = [
            "",
            "a",
            "ab",
            "ab\0",
            "name",
            "namespace",
            "metadata",
            "metadatb",
            "metadata2",
            "creationTimestamp",
            "creationTimestamq",
            "spec",
            "status",
            "é",
            "zzzzzzzzz",
        ];
        let json: serde_json::Value = serde_json::Value::Object(
            keys.iter()
                .enumerate()
                .filter(|(i, _)| i % 3 != 1)
                .map(|(i, k)| (k.to_string(), serde_json::json!(i)))
                .collect(),
        );
        let doc = Doc::from(&json);
        for probe in keys
            .iter()
            .chain(&["ab\0\0", "metadat", "creationTimestampX", "zz"])
        {
            assert_eq!(
                doc.get(probe).map(Doc::to_json),
                json.get(*probe).cloned(),
                "key {probe:?}"
            );
        }
        assert_eq!(doc.to_json(), json);
        assert!(doc.as_object().expect("an object").keys().eq(json
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)));
    }

    #[test]
    fn a_head_is_the_first_eight_bytes_zero_padded() {
        for key in [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            "abcdef",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
        ] {
            let mut word = [0u8; 8];
            let n = key.len().min(8);
            word[..n].copy_from_slice(&key.as_bytes()[..n]);
            assert_eq!(head(key.as_bytes()), u64::from_be_bytes(word), "{key:?}");
        }
    }

    #[test]
    fn large_objects_are_searched_by_halving_with_the_same_answers() {
        let json: serde_json::Value = serde_json::Value::Object(
            (0..100)
                .map(|i| (format!("key-{:03}", i * 2), serde_json::json!(i)))
                .collect(),
        );
        let doc = Doc::from(&json);
        for i in 0..200 {
            let key = format!("key-{i:03}");
            assert_eq!(
                doc.get(&key).map(Doc::to_json),
                json.get(&key).cloned(),
                "{key}"
            );
        }
    }

    #[test]
    fn decoding_sorts_keys_and_the_last_of_equal_keys_wins() {
        let text =
            r#"{"b":1,"a":{"y":[1,2.5,"x",null,true],"x":-3},"b":2,"c":18446744073709551615}"#;
        let doc: Doc = serde_json::from_str(text).expect("valid JSON");
        let json: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
        assert_eq!(doc.to_json(), json);
        assert_eq!(
            serde_json::to_string(&doc).expect("serializable"),
            json.to_string()
        );
        assert!(doc
            .as_object()
            .expect("an object")
            .keys()
            .eq(["a", "b", "c"]));
        assert_eq!(doc.get("b"), Some(&Doc::Number(2.into())));
    }
}
