//! The borrowed-data fast paths of `Template::render_event` (lookups in the event's `Doc`,
//! remembered chains, printing a field chain, comparisons over borrowed scalars, the output
//! size guess) give what the general path gives, including its errors.

use serde_json::json;
use sluice_template::{event_data, MissingKey, Options, Template};

/// Renders `text` over `data` on the borrowed path and on the eagerly converted one; both must
/// agree, output or error text.
fn both(text: &str, data: serde_json::Value) -> Result<String, String> {
    let template = Template::parse(text, &Options::default()).map_err(|e| e.to_string())?;
    rendered_both_ways(&template, &data, &format!("template {text:?}"))
}

/// Renders a parsed template over `data` on both paths; they must agree (`what` names the case).
fn rendered_both_ways(
    template: &Template,
    data: &serde_json::Value,
    what: &str,
) -> Result<String, String> {
    let fast = template
        .render_event(&sluice_template::Doc::from(data))
        .map_err(|e| e.to_string());
    let general = template
        .render(&event_data(data))
        .map_err(|e| e.to_string());
    assert_eq!(fast, general, "{what}");
    fast
}

/// Each template renders `expected` over `data`, the same on both paths.
fn renders_as(data: &serde_json::Value, cases: &[(&str, &str)]) {
    for (text, expected) in cases {
        assert_eq!(both(text, data.clone()).as_deref(), Ok(*expected), "{text}");
    }
}

/// Each template fails while executing over `data`, with the same error on both paths.
fn fails_executing(data: &serde_json::Value, texts: &[&str]) {
    for text in texts {
        let error = both(text, data.clone()).expect_err(text);
        assert!(error.contains("executing"), "{text}: {error}");
    }
}

#[test]
fn same_key_of_different_objects_is_looked_up_per_object() {
    let data = json!({"Resources": [
        {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 443}, {"port": 80}]}},
        {"metadata": {"name": "b"}, "spec": {"ports": [{"port": 8443}]}},
    ], "Cluster": {"metadata": {"name": "c"}}});
    let text = "{{ range .Resources }}{{ .metadata.name }}{{ .metadata.name }}:\
        {{ range .spec.ports }}{{ if or (eq .port 443) (eq .port 8443) }}{{ .port }},{{ end }}{{ end }}\
        {{ end }}{{ .Cluster.metadata.name }}";
    assert_eq!(both(text, data).as_deref(), Ok("aa:443,bb:8443,c"));
}

/// One-name fields are read in place in conditions and prints (`.port`), at the top level too,
/// where event-manager's types apply; chains read bare lookups below the top level.
#[test]
fn one_name_fields_and_deep_chains_answer_as_the_general_path() {
    let data = json!({
        "Resource": null,
        "Cluster": {"metadata": {"labels": {"env": "fv"}}},
        "Resources": [null, {"port": 443, "a": {"b": {"c": [1, {"d": "deep"}]}}}],
        "MatchingResources": [{"Name": "x"}],
    });
    let ok = [
        ("{{ .Resource }}", "map[]"),
        ("{{ if .Resource }}y{{ else }}n{{ end }}", "n"),
        ("{{ if .Cluster }}y{{ end }}", "y"),
        (
            "{{ .Resources }}",
            "[map[] map[a:map[b:map[c:[1 map[d:deep]]]] port:443]]",
        ),
        (
            "{{ with index .Resources 1 }}{{ if eq .port 443 }}{{ .port }}{{ end }}{{ end }}",
            "443",
        ),
        (
            "{{ with index .Resources 1 }}{{ if .port }}y{{ end }}{{ end }}",
            "y",
        ),
        (
            "{{ range .MatchingResources }}{{ .Name }}{{ .Kind }}{{ end }}",
            "x",
        ),
        ("{{ .Cluster.metadata.labels.env }}", "fv"),
        ("{{ (index .Resources 1).a.b.c }}", "[1 map[d:deep]]"),
        (
            "{{ range (index .Resources 1).a.b.c }}{{ . }};{{ end }}",
            "1;map[d:deep];",
        ),
        (
            "{{ with index .Resources 1 }}{{ .a.b.c }}{{ end }}",
            "[1 map[d:deep]]",
        ),
    ];
    renders_as(&data, &ok);
    fails_executing(
        &data,
        &[
            "{{ .Missing }}",
            "{{ if eq .Missing 1 }}{{ end }}",
            "{{ range .Resources }}{{ .port }}{{ end }}",
            "{{ range .Resources }}{{ if eq .port 443 }}{{ end }}{{ end }}",
            "{{ .Resources.a }}",
            "{{ .Cluster.metadata.labels.env.x }}",
            "{{ .Cluster.metadata.missing.x }}",
        ],
    );
}

#[test]
fn comparisons_over_borrowed_scalars_keep_go_rules_and_errors() {
    let data = json!({"Resource": {"n": 3, "f": 1.5, "s": "x", "b": true, "z": null, "l": [1]}});
    let ok = [
        ("{{ eq .Resource.n 3 }}", "true"),
        ("{{ ne .Resource.s \"y\" }}", "true"),
        ("{{ lt .Resource.n 4 }}", "true"),
        ("{{ ge .Resource.f 1.5 }}", "true"),
        ("{{ gt .Resource.s \"w\" }}", "true"),
        ("{{ eq .Resource.b true }}", "true"),
        ("{{ eq .Resource.z nil }}", "true"),
        ("{{ or (eq .Resource.n 1) (eq .Resource.n 3) }}", "true"),
        ("{{ or .Resource.z .Resource.s }}", "x"),
        ("{{ and .Resource.n .Resource.z }}", "<no value>"),
        ("{{ and .Resource.n .Resource.s }}", "x"),
        ("{{ or .Resource.z .Resource.l }}", "[1]"),
    ];
    renders_as(&data, &ok);
    fails_executing(
        &data,
        &[
            "{{ eq .Resource.n 1.5 }}",
            "{{ lt .Resource.b true }}",
            "{{ lt .Resource.n \"a\" }}",
            "{{ eq .Resource.missing 1 }}",
            "{{ eq .Resource.l 1 }}",
            "{{ or .Resource.z .Resource.missing }}",
        ],
    );
}

#[test]
fn output_longer_than_the_first_guess_and_shorter_later_renders() {
    let template = Template::parse(
        "{{ range .Resources }}{{ .metadata.name }}\n{{ end }}",
        &Options::default(),
    )
    .expect("parses");
    let many: Vec<_> = (0..500)
        .map(|i| json!({"metadata": {"name": format!("service-{i}")}}))
        .collect();
    let long = template
        .render_event(&sluice_template::Doc::from(json!({ "Resources": many })))
        .expect("renders");
    assert_eq!(long.lines().count(), 500);
    assert!(long.starts_with("service-0\nservice-1\n"));
    let short = template
        .render_event(&sluice_template::Doc::from(
            json!({"Resources": [{"metadata": {"name": "one"}}]}),
        ))
        .expect("renders");
    assert_eq!(short, "one\n");
}

#[test]
fn quote_and_printf_copy_plain_text_and_escape_the_rest_as_go() {
    // Expected output from the Go oracle (`oracle template`) for the same template and data.
    let data = json!({"s": "a\"b\\c\nd\té\u{7f}x"});
    let text = r#"{{ quote .s }} {{ printf "%s|%d|%v|%5d|%-3s|" .s 42 -7 3 "x" }}"#;
    assert_eq!(
        both(text, data).as_deref(),
        Ok("\"a\\\"b\\\\c\\nd\\té\\x7fx\" a\"b\\c\nd\té\u{7f}x|42|-7|    3|x  |")
    );
}

#[test]
fn quote_and_q_escape_what_go_does_not_print() {
    // Expected output from the Go oracle (`oracle template`): a zero-width space (Cf), a
    // no-break space (Zs), a line separator (Zl) and a soft hyphen (Cf) are escaped; a
    // combining accent (Mn) is printed.
    let data = json!({"s": "a\u{200b}b\u{a0}c\u{2028}d\u{ad}e\u{301}f"});
    let text = r#"{{ quote .s }} {{ printf "%q" .s }}"#;
    let quoted = "\"a\\u200bb\\u00a0c\\u2028d\\u00ade\u{301}f\"";
    assert_eq!(
        both(text, data).as_deref(),
        Ok(format!("{quoted} {quoted}").as_str())
    );
}

/// `if` conditions made of `and`/`or`/`not`, comparisons, field chains, literals and `index`
/// with literal keys are decided in place (`Exec::test`); whatever they cannot decide (missing
/// keys, mismatched types, non-scalars, other functions) takes the general path, errors included.
#[test]
fn if_conditions_decided_in_place_match_the_general_path() {
    let data = json!({"Resource": {"n": 3, "s": "x", "e": "", "z": null, "l": [1, 2],
        "m": {"env": "production", "k": 0}},
        "Resources": [{"port": 443}, {"port": 80}, {"port": 8443}]});
    let ok = [
        ("{{ if or (eq .Resource.n 1) (eq .Resource.n 3) }}y{{ else }}n{{ end }}", "y"),
        ("{{ if and (eq .Resource.n 3) (ne .Resource.s \"x\") }}y{{ else }}n{{ end }}", "n"),
        ("{{ if not (lt .Resource.n 3) }}y{{ end }}", "y"),
        ("{{ if .Resource.e }}y{{ else }}n{{ end }}", "n"),
        ("{{ if or .Resource.z .Resource.s }}y{{ end }}", "y"),
        ("{{ if and .Resource.l .Resource.m.k }}y{{ else }}n{{ end }}", "n"),
        ("{{ if eq (index .Resource.m \"env\") \"production\" }}p{{ end }}", "p"),
        ("{{ if eq (index .Resource.m \"none\") nil }}nil{{ end }}", "nil"),
        ("{{ if eq (index .Resource.l 1) 2 }}two{{ end }}", "two"),
        ("{{ if true }}{{ $v := 1 }}{{ $v }}{{ end }}", "1"),
        ("{{ $v := 0 }}{{ if 1 }}{{ $v = 2 }}{{ end }}{{ $v }}", "2"),
        // `or` stops at the first true argument: the missing key after it is never read.
        ("{{ if or (eq .Resource.n 3) .Resource.missing }}y{{ end }}", "y"),
        (
            "{{ range .Resources }}{{ if or (eq .port 443) (eq .port 8443) }}{{ .port }},{{ end }}{{ end }}",
            "443,8443,",
        ),
        ("{{ if eq .Resource.s \"x\" \"y\" }}multi{{ end }}", "multi"),
        ("{{ if le .Resource.s \"x\" }}y{{ end }}", "y"),
        ("{{ if gt .Resource.n 2 }}y{{ end }}", "y"),
        ("{{ if ge .Resource.n 4 }}y{{ else }}n{{ end }}", "n"),
        ("{{ if not .Resource.z }}y{{ end }}", "y"),
        ("{{ if ne .Resource.z nil }}y{{ else }}n{{ end }}", "n"),
        (
            "{{ if or (and .Resource.n (eq .Resource.s \"y\")) (not .Resource.e) }}y{{ end }}",
            "y",
        ),
        ("{{ if eq .Resource.s (.Resource.s | upper) }}y{{ else }}n{{ end }}", "n"),
        // One field compared with several literals is read once; `or`/`and` still stop at
        // the first deciding comparison, before one Go would reject.
        ("{{ if and (ne .Resource.n 1) (lt .Resource.n 5) }}y{{ end }}", "y"),
        ("{{ if or (eq .Resource.s \"x\") (eq .Resource.s 3) }}y{{ end }}", "y"),
        ("{{ if and (eq .Resource.s \"y\") (eq .Resource.s 3) }}y{{ else }}n{{ end }}", "n"),
        ("{{ if or (eq .Resource.n 1) (eq .Resource.n 2) (gt .Resource.n 2) }}y{{ end }}", "y"),
        ("{{ if or (eq .Resource.m.env \"dev\") (eq .Resource.m.env \"production\") }}p{{ end }}", "p"),
    ];
    renders_as(&data, &ok);
    for text in [
        "{{ if eq .Resource.missing 1 }}y{{ end }}",
        "{{ if and (eq .Resource.n 3) .Resource.missing }}y{{ end }}",
        "{{ if eq .Resource.n \"3\" }}y{{ end }}",
        "{{ if lt .Resource.l 1 }}y{{ end }}",
        "{{ if eq (index .Resource.l 5) 1 }}y{{ end }}",
        "{{ if not }}y{{ end }}",
        "{{ if lt .Resource.z 1 }}y{{ end }}",
        "{{ if ne .Resource.n 1.5 }}y{{ end }}",
        "{{ if or .Resource.e (lt .Resource.s 1) }}y{{ end }}",
        "{{ if or (eq .Resource.s \"a\") (eq .Resource.s 3) }}y{{ end }}",
        "{{ if or (eq .Resource.missing 1) (eq .Resource.missing 2) }}y{{ end }}",
        "{{ if and (eq .Resource.l 1) (eq .Resource.l 2) }}y{{ end }}",
    ] {
        let error = both(text, data.clone()).expect_err(text);
        assert!(
            error.contains("executing") || error.contains("parse"),
            "{text}: {error}"
        );
    }
}

/// String functions of one string argument (`upper lower title trim quote squote`) run on the
/// borrowed text and print straight to the output; anything else about them (non-strings,
/// nil, missing keys, type errors) is the general call's.
#[test]
fn string_functions_on_borrowed_text_match_the_general_path() {
    let data = json!({"Resource": {"s": "svc-a", "u": "ÉTÉ ΣΑΣ", "t": "  pad \t", "n": 3,
        "z": null, "q": "a\"b\u{a0}", "m": {"k": "v", "x": "y"}}});
    let ok = [
        ("{{ .Resource.s | upper }}", "SVC-A"),
        ("{{ upper .Resource.s }}", "SVC-A"),
        ("{{ .Resource.u | lower }}", "été σασ"),
        ("{{ .Resource.u | upper }}", "ÉTÉ ΣΑΣ"),
        ("{{ .Resource.s | title }}", "Svc-A"),
        ("{{ .Resource.t | trim }}|", "pad|"),
        ("{{ .Resource.q | quote }}", "\"a\\\"b\\u00a0\""),
        ("{{ quote .Resource.s }}", "\"svc-a\""),
        ("{{ .Resource.s | squote }}", "'svc-a'"),
        ("{{ .Resource.n | quote }}", "\"3\""),
        ("{{ .Resource.z | quote }}", ""),
        ("{{ .Resource.m | quote }}", "\"map[k:v x:y]\""),
        ("{{ .Resource.s | quote | upper }}", "\"SVC-A\""),
        (
            "{{ printf \"%s-%d\" .Resource.s 1 | upper | quote }}",
            "\"SVC-A-1\"",
        ),
        (
            "{{ range $k, $v := .Resource.m }}{{ $k | upper }}{{ upper $v }}{{ end }}",
            "KVXY",
        ),
        ("{{ $x := .Resource.s | upper }}{{ $x }}", "SVC-A"),
        (
            "{{ if eq (.Resource.s | upper) \"SVC-A\" }}yes{{ end }}",
            "yes",
        ),
    ];
    renders_as(&data, &ok);
    fails_executing(
        &data,
        &[
            "{{ upper .Resource.n }}",
            "{{ .Resource.n | lower }}",
            "{{ .Resource.missing | upper }}",
            "{{ quote .Resource.missing }}",
            "{{ .Resource.s | upper 1 }}",
        ],
    );
}

/// `printf` with plain verbs over strings, integers and bools writes its text without values;
/// pipelines of several string functions pass text through reused buffers; `len` of borrowed
/// data. Everything else (other verbs, other types, missing or extra arguments, errors) is the
/// general path's.
#[test]
fn printf_and_string_pipelines_without_values_match_the_general_path() {
    let data = json!({"Resource": {"s": "svc-a", "u": "été", "n": 3, "f": 1.5, "b": true,
        "z": null, "l": [1, 2], "m": {"k": "v", "x": "y"}}});
    let ok = [
        ("{{ printf \"%s-%d\" .Resource.s 1 }}", "svc-a-1"),
        (
            "{{ printf \"%v/%v/%v\" .Resource.s .Resource.n .Resource.b }}",
            "svc-a/3/true",
        ),
        ("{{ printf \"%d%%\" .Resource.n }}", "3%"),
        ("{{ printf \"é%sé\" .Resource.u }}", "éétéé"),
        ("{{ printf \"plain\" }}", "plain"),
        ("{{ printf \"%s\" .Resource.n }}", "%!s(int64=3)"),
        ("{{ printf \"%d\" .Resource.s }}", "%!d(string=svc-a)"),
        ("{{ printf \"%d\" .Resource.f }}", "%!d(float64=1.5)"),
        ("{{ printf \"%v\" .Resource.f }}", "1.5"),
        ("{{ printf \"%s %s\" .Resource.s }}", "svc-a %!s(MISSING)"),
        ("{{ printf \"%s\" .Resource.s 1 }}", "svc-a%!(EXTRA int=1)"),
        (
            "{{ printf \"%5s|%-3d|%x\" .Resource.s .Resource.n .Resource.n }}",
            "svc-a|3  |3",
        ),
        ("{{ printf \"%v\" .Resource.z }}", "<nil>"),
        ("{{ printf \"%s\" .Resource.m }}", "map[k:v x:y]"),
        ("{{ printf \"%v\" .Resource.l }}", "[1 2]"),
        ("{{ printf \"100%\" }}", "100%!(NOVERB)"),
        ("{{ printf \"%s\" .Resource.s | quote }}", "\"svc-a\""),
        (
            "{{ printf \"%d\" .Resource.s | upper }}",
            "%!D(STRING=SVC-A)",
        ),
        ("{{ .Resource.s | upper | lower | quote }}", "\"svc-a\""),
        (
            "{{ .Resource.s | upper | lower | title | quote }}",
            "\"Svc-A\"",
        ),
        ("{{ .Resource.n | quote | upper }}", "\"3\""),
        (
            "{{ .Resource.m | quote | upper | squote }}",
            "'\"MAP[K:V X:Y]\"'",
        ),
        ("{{ quote .Resource.s | upper | squote }}", "'\"SVC-A\"'"),
        (
            "{{ len .Resource.s }}{{ len .Resource.m }}{{ len .Resource.l }}",
            "522",
        ),
        ("{{ len .Resource.u }}", "5"),
    ];
    renders_as(&data, &ok);
    fails_executing(
        &data,
        &[
            "{{ printf \"%s\" .Resource.missing }}",
            "{{ printf \"%s\" .Resource.missing | upper }}",
            "{{ printf 1 }}",
            "{{ .Resource.n | upper | quote }}",
            "{{ .Resource.s | upper | lower 1 | quote }}",
            "{{ len .Resource.n }}",
            "{{ len .Resource.z }}",
            "{{ len .Resource.missing }}",
        ],
    );
}

/// Whole field chains are remembered per object and per chain: equal chains on different
/// objects, chains that are prefixes of others and chains through variables each find their
/// own node.
#[test]
fn whole_chains_are_remembered_per_object_and_chain() {
    let data = json!({"Resource": {"a": {"b": {"c": "x"}, "d": "y"}},
        "Resources": [{"a": {"b": "1"}}, {"a": {"b": "2"}}, null],
        "MatchingResource": {"Kind": "Service", "Name": "svc"}});
    let text = "{{ .Resource.a.b.c }}{{ .Resource.a.d }}{{ .Resource.a.b.c }}|\
        {{ $r := .Resource }}{{ $r.a.d }}{{ $r.a.b.c }}|\
        {{ range .Resources }}{{ .a.b }}{{ .a.b }},{{ end }}|\
        {{ .MatchingResource.Name }}{{ .MatchingResource.Kind }}|{{ .Resource.a.b }}|\
        {{ with .Resource.a }}{{ .b.c }}{{ end }}";
    // A null entry of .Resources is an empty map: `.a` is then missing.
    let error = both(text, data.clone()).expect_err("null entry has no .a");
    assert!(error.contains("executing"), "{error}");
    let data = json!({"Resource": data["Resource"].clone(), "Resources": [
        {"a": {"b": "1"}}, {"a": {"b": "2"}}], "MatchingResource": data["MatchingResource"].clone()});
    assert_eq!(
        both(text, data).as_deref(),
        Ok("xyx|yx|11,22,|svcService|map[c:x]|x")
    );
}

/// `range` builds the key or index only when it binds two variables, and a lone borrowed
/// string or integer prints straight to the output: both as the general path, with one,
/// two and no variables, over lists, objects, nulls and converted values.
#[test]
fn range_bindings_and_lone_prints_match_the_general_path() {
    let data = json!({"Resource": {"l": ["a", 2, 1.5, null, true], "m": {"b": 1, "a": "x"},
        "n": -7, "s": "text", "e": []},
        "Resources": [{"k": 1}, null]});
    let cases = [
        (
            "{{ range .Resource.l }}{{ . }},{{ end }}",
            "a,2,1.5,<no value>,true,",
        ),
        (
            "{{ range $v := .Resource.l }}{{ $v }};{{ end }}",
            "a;2;1.5;<no value>;true;",
        ),
        (
            "{{ range $i, $v := .Resource.l }}{{ $i }}={{ $v }} {{ end }}",
            "0=a 1=2 2=1.5 3=<no value> 4=true ",
        ),
        (
            "{{ range $k, $v := .Resource.m }}{{ $k }}={{ $v }} {{ end }}",
            "a=x b=1 ",
        ),
        ("{{ range .Resource.m }}{{ . }} {{ end }}", "x 1 "),
        (
            "{{ range $i, $r := .Resources }}{{ $i }}:{{ $r }} {{ end }}",
            "0:map[k:1] 1:map[] ",
        ),
        (
            "{{ range $k, $v := (dict \"z\" 1 \"y\" 2) }}{{ $k }}{{ $v }}{{ end }}",
            "y2z1",
        ),
        (
            "{{ range $i, $v := (list 3 4) }}{{ $i }}{{ $v }}{{ end }}",
            "0314",
        ),
        ("{{ range .Resource.e }}x{{ else }}empty{{ end }}", "empty"),
        (
            "{{ .Resource.n }} {{ .Resource.s }} {{ .Resource.l }}",
            "-7 text [a 2 1.5 <nil> true]",
        ),
    ];
    renders_as(&data, &cases);
}

/// `range` over a lone field chain reads the chain over borrowed data without the general
/// command; a chain it does not find (missing keys, a step into a string or a number, a dot
/// that is not an object) and values that are not lists are left to the general path, with
/// every missingkey setting.
#[test]
fn range_over_a_field_chain_matches_the_general_path() {
    let data = json!({"Resource": {"spec": {"ports": [{"port": 1}, {"port": 2}], "s": "text",
        "n": 4, "z": null, "e": [], "m": {"b": 2, "a": 1}}, "list": [3, "x"]},
        "Resources": [null, {"spec": {"ports": [{"port": 5}]}}]});
    let texts = [
        "{{ range .Resource.spec.ports }}{{ .port }},{{ end }}",
        "{{ range $p := .Resource.spec.ports }}{{ $p.port }},{{ end }}",
        "{{ range .Resource.spec.e }}x{{ else }}empty{{ end }}",
        "{{ range .Resource.spec.z }}x{{ else }}null{{ end }}",
        "{{ range .Resource.spec.m }}{{ . }}{{ end }}",
        "{{ range .Resource.spec.missing }}x{{ else }}none{{ end }}",
        "{{ range .Resource.missing.ports }}x{{ end }}",
        "{{ range .Resource.spec.s }}x{{ end }}",
        "{{ range .Resource.spec.n }}x{{ end }}",
        "{{ range .Resource.spec.s.x }}x{{ end }}",
        "{{ range .Resource.list }}{{ range .x }}y{{ end }}{{ end }}",
        "{{ range .Resources }}{{ range .spec.ports }}{{ .port }}{{ end }};{{ end }}",
        "{{ range .Resource.spec.ports.x }}x{{ end }}",
        "{{ range .Resource.spec.ports }}{{ if eq .port 2 }}{{ break }}{{ end }}{{ .port }}{{ end }}",
        "{{ range .Resource.spec.ports }}{{ if eq .port 1 }}{{ continue }}{{ end }}{{ .port }}{{ end }}",
        "{{ range $p := .Resource.spec.ports }}{{ $q := $p.port }}{{ $q }}{{ end }}{{ $p := 0 }}{{ $p }}",
        "{{ range $i, $p := .Resource.spec.ports }}{{ $i }}{{ $p.port }}{{ end }}",
    ];
    for missing_key in [MissingKey::Error, MissingKey::Default, MissingKey::Zero] {
        let options = Options {
            missing_key,
            ..Options::default()
        };
        for text in texts {
            let template = Template::parse(text, &options).expect(text);
            // Output or error, as long as both paths agree.
            let _ = rendered_both_ways(&template, &data, &format!("{text} ({missing_key:?})"));
        }
    }
    assert_eq!(
        both(texts[0], data.clone()).as_deref(),
        Ok("1,2,"),
        "{}",
        texts[0]
    );
    let assigned =
        "{{ $p := 0 }}{{ range $p = .Resource.spec.ports }}{{ $p.port }}{{ end }}{{ $p }}";
    let _ = both(assigned, data.clone());
    assert_eq!(both(texts[13], data.clone()).as_deref(), Ok("1"));
    assert_eq!(both(texts[14], data.clone()).as_deref(), Ok("2"));
    // A null entry of `.Resources` is an empty map: `.spec` is missing there.
    let error = both(texts[11], data.clone()).expect_err(texts[11]);
    assert!(error.contains("no entry for key \"spec\""), "{error}");
    assert!(both(texts[6], data).is_err());
}

/// The list an `if` decided in place chose runs without ending its variables when it declares
/// none at its top; one that declares ends them, so an outer variable of the same name shows
/// again after the `if`.
#[test]
fn if_lists_with_and_without_declarations_match_the_general_path() {
    let data = json!({"Resource": {"n": 3, "l": [1, 2, 3]}});
    let cases = [
        (
            "{{ $x := 0 }}{{ if eq .Resource.n 3 }}{{ $x := 1 }}{{ $x }}{{ end }}{{ $x }}",
            "10",
        ),
        (
            "{{ $x := 0 }}{{ if eq .Resource.n 4 }}{{ else }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}",
            "20",
        ),
        (
            "{{ $x := 0 }}{{ if eq .Resource.n 3 }}{{ $x = 5 }}{{ end }}{{ $x }}",
            "5",
        ),
        (
            "{{ if eq .Resource.n 3 }}{{ range $v := .Resource.l }}{{ $v }}{{ end }}{{ end }}",
            "123",
        ),
        (
            "{{ if eq .Resource.n 4 }}a{{ else if eq .Resource.n 3 }}{{ $y := 7 }}{{ $y }}{{ end }}",
            "7",
        ),
        (
            "{{ range .Resource.l }}{{ if eq . 2 }}{{ break }}{{ end }}{{ . }}{{ end }}",
            "1",
        ),
        (
            "{{ range .Resource.l }}{{ if eq . 2 }}{{ continue }}{{ else }}{{ . }}{{ end }}{{ end }}",
            "13",
        ),
    ];
    renders_as(&data, &cases);
}

/// `or`/`and` of `eq` of one field with integer literals is decided by membership when the
/// field is an integer; any other field (a float, a string, null, a list, a missing key) is
/// decided literal by literal as before, errors included.
#[test]
fn integer_membership_conditions_match_the_general_path() {
    let data = json!({"Resource": {"i": 8443, "neg": -2, "f": 443.5, "s": "443", "z": null,
        "l": [443]}});
    for field in ["i", "neg", "f", "s", "z", "l", "missing"] {
        for (op, literals) in [
            ("or", "(eq .Resource.F 443) (eq .Resource.F 8443)"),
            (
                "or",
                "(eq .Resource.F 1) (eq .Resource.F -2) (eq .Resource.F 3)",
            ),
            ("and", "(eq .Resource.F 8443) (eq .Resource.F 8443)"),
            ("and", "(eq .Resource.F 8443) (eq .Resource.F 443)"),
            ("or", "(eq .Resource.F 1)"),
        ] {
            let text = format!(
                "{{{{ if {op} {} }}}}y{{{{ else }}}}n{{{{ end }}}}",
                literals.replace('F', field)
            );
            let _ = both(&text, data.clone());
        }
    }
    let yes = "{{ if or (eq .Resource.i 443) (eq .Resource.i 8443) }}y{{ end }}";
    assert_eq!(both(yes, data.clone()).as_deref(), Ok("y"));
    let all = "{{ if and (eq .Resource.i 8443) (eq .Resource.i 443) }}y{{ else }}n{{ end }}";
    assert_eq!(both(all, data).as_deref(), Ok("n"));
}
