//! sprig's case functions (`upper lower title untitle camelcase snakecase kebabcase swapcase
//! initials`) over awkward inputs (connectors, numbers, acronyms, non-ASCII letters, title-case
//! digraphs, U+FFFD), its URL functions (`urlParse`, `urlJoin`: escaping, user info, opaque
//! URLs) and its dates (fractional seconds, offsets, `time.Time` methods), and `printf` over
//! every kind of value with most verbs and flags, give what the Go oracle gave: `tests/data/sprig_cases.json`, written by `tests/data/make_sprig_cases.py` from
//! `shared/oracle`. Where both fail, both texts are errors (error texts are not compared word
//! for word, ADR 0003).

use serde_json::Value;

#[test]
fn sprig_functions_and_printf_answer_as_the_oracle_did() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sprig_cases.json");
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).expect("sprig_cases.json"))
            .expect("json");
    assert!(cases.len() >= 400, "{} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let got = sluice_template::oracle::answer(case);
            let want = &case["expected"];
            let both_fail = got.get("error").is_some() && want.get("error").is_some();
            (got != *want && !both_fail).then(|| {
                format!(
                    "{} over {}: got {got}, Go gave {want}",
                    case["template"], case["data"]
                )
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `camelcase` as Sveltos links it (xstrings v1.5.0, through sprig v3.3.0): letters after the
/// first keep their case, which the oracle's older xstrings lower-cased (the cases above leave
/// such inputs out). Samples from xstrings 1.5.0's documentation, plus mixed-case words.
#[test]
fn camelcase_keeps_the_case_inside_words_as_sveltos_does() {
    for (input, want) in [
        ("some_words", "SomeWords"),
        ("http_server", "HttpServer"),
        ("no_https", "NoHttps"),
        ("_complex__case_", "_Complex_Case_"),
        ("some words", "SomeWords"),
        ("fooBar", "FooBar"),
        ("HTTPServer", "HTTPServer"),
        ("FOO_BAR", "FOOBAR"),
        ("x-Y", "XY"),
        ("ÉTÉ", "ÉTÉ"),
    ] {
        let request = serde_json::json!({"template": "{{ .s | camelcase }}", "data": {"s": input}});
        assert_eq!(
            sluice_template::oracle::answer(&request),
            serde_json::json!({ "output": want }),
            "{input}"
        );
    }
}
