//! The tape against `serde_json`: the same documents give the same values, the same bad
//! documents are refused, and lookups answer as `Value` lookups do.

use serde_json::{json, Value};

use super::*;

fn tape(text: &str) -> Tape {
    Tape::parse(text.as_bytes().to_vec()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// Every document here parses to what `serde_json` parses it to.
#[test]
fn documents_parse_to_what_serde_json_gives() {
    let documents = [
        r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"ports": [{"port": 443, "name": "https"}, {"port": 80}], "empty": {}, "none": []}}"#,
        r#"[1, -2, 3.5, -0.25e2, 1E3, 0, -0, 18446744073709551615, -9223372036854775808,
            18446744073709551616, 1.7976931348623157e308, 5e-324, true, false, null]"#,
        r#"{"esc": "a\"b\\c\/d\b\f\n\r\t", "uni": "\u00e9\u4e2d\ud83d\ude00 raw é中😀", "": ""}"#,
        r#"{"dup": 1, "other": 2, "dup": 3}"#,
        "  \n\t\"top-level string\"  ",
        "42",
        r#"{"deep": [[[[{"a": [{"b": {"c": [null]}}]}]]]]}"#,
    ];
    for text in documents {
        let want: Value = serde_json::from_str(text).expect("serde_json parses it");
        assert_eq!(tape(text).to_value(), want, "{text}");
    }
}

/// Documents `serde_json` refuses are refused, with the offset of the problem.
#[test]
fn bad_documents_are_refused_where_they_break() {
    let bad = [
        ("", 0),
        ("{", 1),
        ("[1,]", 3),
        ("{\"a\" 1}", 5),
        ("{\"a\": 1,}", 8),
        ("[01]", 2),
        ("[1.]", 3),
        ("[-]", 2),
        ("[1e]", 3),
        ("[1e400]", 1),
        ("[\"\\x\"]", 2),
        ("[\"\\ud800\"]", 8),
        ("[\"\\udc00\"]", 8),
        ("[\"a\nb\"]", 3),
        ("[tru]", 1),
        ("{} {}", 3),
        ("{1: 2}", 1),
    ];
    for (text, offset) in bad {
        assert!(
            serde_json::from_str::<Value>(text).is_err(),
            "serde_json accepts {text:?}"
        );
        let err = Tape::parse(text.as_bytes().to_vec()).expect_err(text);
        assert_eq!(err.offset, offset, "{text:?}: {err}");
    }
    let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
    assert!(serde_json::from_str::<Value>(&deep).is_err());
    assert_eq!(
        Tape::parse(deep.into_bytes()).expect_err("too deep").what,
        "nested too deeply"
    );
    let not_utf8 = b"[\"\xff\"]".to_vec();
    assert_eq!(Tape::parse(not_utf8).expect_err("not UTF-8").offset, 2);
}

#[test]
fn integers_read_as_serde_json_reads_them() {
    let t = tape("[0, -0, 42, -42, 9223372036854775807, -9223372036854775808, 9223372036854775808, 1.0, 1e2]");
    let got: Vec<Option<i64>> = t.root().items().map(|n| n.as_i64()).collect();
    let want: Vec<Option<i64>> = t
        .to_value()
        .as_array()
        .map_or(Vec::new(), |a| a.iter().map(Value::as_i64).collect());
    assert_eq!(got, want);
    assert_eq!(got[4], Some(i64::MAX));
}

#[test]
fn lookups_answer_as_value_lookups_do() {
    let text = r#"{"kind": "Service", "k\u0069nd2": "x", "dup": 1, "dup": 2,
        "spec": {"ports": [{"port": 443}, {"port": 80}], "type": "ClusterIP"}}"#;
    let t = tape(text);
    let v: Value = serde_json::from_str(text).expect("parses");
    let root = t.root();
    assert_eq!(root.kind(), Kind::Object);
    assert!(root.get("kind").is_some_and(|k| k.str_eq("Service")));
    assert!(
        root.get("kind2").is_some_and(|k| k.str_eq("x")),
        "escaped key"
    );
    assert_eq!(root.get("dup").map(|d| d.to_value()), Some(json!(2)));
    assert!(root.get("missing").is_none());
    // Keys that hash alike but differ, and a key repeated after others.
    let alike = tape(r#"{"axb": 1, "ayb": 2, "q": {"z": 1, "k": 2, "z": 3}}"#);
    assert_eq!(
        alike.root().get("axb").map(|n| n.to_value()),
        Some(json!(1))
    );
    assert_eq!(
        alike.root().get("ayb").map(|n| n.to_value()),
        Some(json!(2))
    );
    let q = alike.root().get("q").expect("q");
    assert_eq!(q.get("z").and_then(|n| n.as_i64()), Some(3));
    assert_eq!(q.to_value(), json!({"z": 3, "k": 2}));
    let ports = root
        .get("spec")
        .and_then(|s| s.get("ports"))
        .expect("ports");
    assert_eq!(ports.len(), 2);
    let got: Vec<Value> = ports
        .items()
        .filter_map(|p| p.get("port"))
        .map(|p| p.to_value())
        .collect();
    assert_eq!(got, [json!(443), json!(80)]);
    assert_eq!(
        root.get("spec").map(|s| s.to_value()),
        v.get("spec").cloned()
    );
    let keys: Vec<String> = root
        .entries()
        .filter_map(|(k, _)| k.as_str().map(Cow::into_owned))
        .collect();
    assert_eq!(keys, ["kind", "kind2", "dup", "dup", "spec"]);
    assert_eq!(t.bytes(), text.as_bytes());
}

/// The objects of the EventSource corpus, where there are any, parse alike too.
#[test]
fn conformance_objects_parse_alike() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/corpus/conformance/eventsources");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        panic!(
            "{} not found: the corpus is part of the repository (tests/corpus)",
            dir.display()
        );
    };
    let mut objects = 0;
    for entry in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(case) = serde_yaml::from_str::<Value>(&text) else {
            continue;
        };
        let mut found = Vec::new();
        collect_objects(&case, &mut found);
        for object in found {
            let bytes = serde_json::to_vec(object).expect("serializes");
            let t = Tape::parse(bytes).expect("parses");
            assert_eq!(&t.to_value(), object, "{}", entry.path().display());
            objects += 1;
        }
    }
    assert!(
        objects > 50,
        "only {objects} objects found in {}",
        dir.display()
    );
}

fn collect_objects<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            if m.contains_key("apiVersion") && m.contains_key("kind") {
                out.push(v);
            }
            m.values().for_each(|x| collect_objects(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_objects(x, out)),
        _ => {}
    }
}

#[test]
fn sorted_entries_visit_members_as_a_serde_json_map_does() {
    for text in [
        r#"{"b": 1, "a": 2, "b": 3, "c": {"y": 1, "x": 2}}"#,
        r#"{"a": 1, "b": 2, "c": 3}"#,
        r#"{"k\u0065y": 1, "a": 2}"#,
        r#"{}"#,
    ] {
        let t = tape(text);
        let want: Value = serde_json::from_str(text).expect("parses");
        let got: Vec<(String, Value)> = t
            .root()
            .sorted_entries()
            .map(|(k, v)| (k.as_str().expect("a key").into_owned(), v.to_value()))
            .collect();
        let want: Vec<(String, Value)> = want
            .as_object()
            .expect("an object")
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "{text}");
    }
    assert!(tape(r#"{"a": 1, "b": 2}"#).root().is_ordered_object());
    assert!(!tape(r#"{"b": 1, "a": 2}"#).root().is_ordered_object());
    assert!(!tape(r#"{"a": 1, "a": 2}"#).root().is_ordered_object());
    assert!(!tape(r#"[1, 2]"#).root().is_ordered_object());
    assert_eq!(tape("[1, 2]").root().sorted_entries().count(), 0);
}

/// A small deterministic generator of JSON texts: keys out of order, repeated and escaped;
/// integers near the i64/u64 edges, fractions, exponents and "-0"; strings with escapes and
/// non-ASCII text; nesting up to six levels.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[(self.next() % from.len() as u64) as usize]
    }

    fn value(&mut self, depth: usize, out: &mut String) {
        let kinds = if depth >= 6 { 4 } else { 6 };
        match self.next() % kinds {
            0 => out.push_str(self.pick(&["true", "false", "null"])),
            1 => out.push_str(self.pick(&[
                "0",
                "-0",
                "7",
                "-12",
                "443",
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775808",
                "18446744073709551615",
                "18446744073709551616",
                "1.5",
                "-0.0",
                "2.5e3",
                "1E-7",
                "0.1",
                "123456789012345678901234567890",
            ])),
            2 | 3 => {
                out.push('"');
                out.push_str(self.pick(&[
                    "",
                    "web",
                    "a\\\"b",
                    "\\u00e9t\\u00e9",
                    "é中😀",
                    "line\\nbreak",
                    "\\ud83d\\ude00",
                    "tab\\t",
                    "slash\\/",
                ]));
                out.push('"');
            }
            4 => {
                out.push('[');
                for i in 0..self.next() % 4 {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.value(depth + 1, out);
                }
                out.push(']');
            }
            _ => {
                out.push('{');
                for i in 0..self.next() % 6 {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push('"');
                    out.push_str(self.pick(&[
                        "a",
                        "b",
                        "name",
                        "port",
                        "ports",
                        "k\\u0065y",
                        "key",
                        "z",
                        "",
                        "é",
                    ]));
                    out.push_str("\": ");
                    self.value(depth + 1, out);
                }
                out.push('}');
            }
        }
    }
}

/// Walks a node and the `Value` serde_json made of the same text, comparing every answer the
/// evaluation relies on.
fn same(node: NodeRef<'_>, value: &Value, text: &str) {
    assert_eq!(node.to_value(), *value, "{text}");
    match value {
        Value::Object(map) => {
            let entries: Vec<(String, NodeRef<'_>)> = node
                .sorted_entries()
                .map(|(k, v)| (k.as_str().expect("a key").into_owned(), v))
                .collect();
            let keys: Vec<&String> = map.keys().collect();
            let got: Vec<&String> = entries.iter().map(|(k, _)| k).collect();
            assert_eq!(got, keys, "{text}");
            if node.is_ordered_object() {
                let in_place: Vec<String> = node
                    .entries()
                    .map(|(k, _)| k.as_str().expect("a key").into_owned())
                    .collect();
                assert_eq!(in_place.iter().collect::<Vec<_>>(), keys, "{text}");
            }
            for ((key, child), (_, want)) in entries.iter().zip(map) {
                assert_eq!(
                    node.get(key).map(|n| n.to_value()),
                    Some(want.clone()),
                    "{text}"
                );
                same(*child, want, text);
            }
            assert!(node.get("missing").is_none());
        }
        Value::Array(items) => {
            assert_eq!(node.len(), items.len());
            for (child, want) in node.items().zip(items) {
                same(child, want, text);
            }
        }
        Value::Number(n) => {
            assert_eq!(node.as_i64(), n.as_i64(), "{text}");
            assert_eq!(
                node.as_f64().map(f64::to_bits),
                n.as_f64().map(f64::to_bits),
                "{text}"
            );
        }
        Value::String(s) => {
            assert!(node.str_eq(s), "{text}");
            assert_eq!(node.as_str().as_deref(), Some(s.as_str()), "{text}");
        }
        Value::Bool(_) | Value::Null => {}
    }
}

#[test]
fn generated_documents_answer_as_serde_json_values_do() {
    let mut gen = Gen(0x5eed_1234_abcd_0001);
    let mut objects = 0;
    for _ in 0..3000 {
        let mut text = String::new();
        gen.value(0, &mut text);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        objects += usize::from(value.is_object());
        same(tape(&text).root(), &value, &text);
    }
    assert!(objects > 300, "the generator makes objects ({objects})");
}
