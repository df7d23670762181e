//! sluice's own template tests: the deliberate differences from Go (single-quoted strings,
//! int64 numbers, no environment), errors with positions, the cache, `sluice render`, Tera.

use std::sync::Arc;

use serde_json::json;
use sluice_template::{
    event_data, oracle, Engine, ErrorKind, MissingKey, Options, Template, TemplateCache, Value,
};

fn render(text: &str, data: serde_json::Value) -> Result<String, sluice_template::Error> {
    Template::parse(text, &Options::default())?.render(&event_data(&data))
}

fn check(text: &str, data: serde_json::Value, expected: &str) {
    match render(text, data) {
        Ok(out) => assert_eq!(out, expected, "template {text:?}"),
        Err(e) => panic!("template {text:?} failed: {e}"),
    }
}

#[test]
fn seed_004_single_quoted_cloud_event_action() {
    // Go rejects 'auth.example.com.logout' (a multi-character char literal); sluice reads a string.
    let text =
        "{{ if eq .CloudEvent.type 'auth.example.com.logout' }}Delete{{ else }}Create{{ end }}";
    check(
        text,
        json!({"CloudEvent": {"type": "auth.example.com.logout"}}),
        "Delete",
    );
    check(
        text,
        json!({"CloudEvent": {"type": "auth.example.com.login"}}),
        "Create",
    );
}

#[test]
fn single_character_single_quotes_stay_go_runes() {
    check(
        "{{ 'a' }} {{ printf \"%T\" 'a' }} {{ 'ab' }} {{ printf \"%T\" 'ab' }}",
        json!({}),
        "97 int ab string",
    );
}

#[test]
fn seed_000_ingress_port_comparison_works_with_int64_ports() {
    let text = "{{ range .Resources }}{{ range .spec.ports }}{{ if or (eq .port 443 ) (eq .port 8443 ) }}{{ .port }};{{ end }}{{ end }}{{ end }}";
    let data = json!({"Resources": [{"spec": {"ports": [{"port": 80}, {"port": 443}]}}, {"spec": {"ports": [{"port": 8443}]}}]});
    check(text, data, "443;8443;");
}

#[test]
fn integral_json_numbers_are_int64_and_others_float64() {
    check(
        "{{ kindOf .a }} {{ kindOf .b }} {{ kindOf .c }} {{ .b }} {{ .c }}",
        json!({"a": 3, "b": 3.0, "c": 18446744073709551615u64}),
        "int64 float64 float64 3 1.8446744073709552e+19",
    );
    assert!(
        render("{{ eq .p 443 }}", json!({"p": 443.0})).is_err(),
        "float data against an int literal is an error"
    );
}

#[test]
fn templates_see_an_empty_environment() {
    std::env::set_var("SLUICE_TEMPLATE_TEST_SECRET", "leak");
    check(
        "[{{ env \"SLUICE_TEMPLATE_TEST_SECRET\" }}][{{ expandenv \"a${SLUICE_TEMPLATE_TEST_SECRET}b$HOME\" }}][{{ getHostByName \"localhost\" }}]",
        json!({}),
        "[][ab][]",
    );
}

#[test]
fn parse_errors_carry_name_line_and_column() {
    let options = Options {
        name: "et/cm/key".into(),
        ..Options::default()
    };
    let err =
        Template::parse("line one\n  {{ nosuch 1 }}", &options).expect_err("undefined function");
    assert_eq!(err.kind(), ErrorKind::Parse);
    assert_eq!((err.line(), err.column()), (2, 5));
    assert_eq!(
        err.to_string(),
        "template: et/cm/key:2:5: function \"nosuch\" not defined"
    );
}

#[test]
fn exec_errors_say_where_and_what() {
    let err =
        render("a\nb {{ .Resource.missing }}", json!({"Resource": {}})).expect_err("missing key");
    assert_eq!(err.kind(), ErrorKind::Exec);
    assert_eq!(err.line(), 2);
    assert_eq!(
        err.to_string(),
        "template: sluice:2:5: executing \"sluice\" at <.Resource.missing>: map has no entry for key \"missing\""
    );
}

#[test]
fn missing_key_modes() {
    for (mode, expected) in [
        (MissingKey::Default, Ok("<no value>")),
        (MissingKey::Zero, Ok("<no value>")),
        (MissingKey::Error, Err(())),
    ] {
        let options = Options {
            missing_key: mode,
            ..Options::default()
        };
        let out = Template::parse("{{ .absent }}", &options)
            .expect("parses")
            .render(&event_data(&json!({})));
        assert_eq!(out.as_deref().map_err(|_| ()), expected, "{mode:?}");
    }
}

#[test]
fn html_engine_escapes_action_output_only() {
    let options = Options {
        engine: Engine::Html,
        ..Options::default()
    };
    let t = Template::parse("<b>{{ .team }}</b>{{ index .m \"x\" }}", &options).expect("parses");
    assert_eq!(
        t.render(&event_data(&json!({"team": "r&d <ops>", "m": {}})))
            .expect("renders"),
        "<b>r&amp;d &lt;ops&gt;</b>"
    );
    assert!(
        Template::parse("{{ getResource . }}", &options).is_err(),
        "event-manager extras are text-engine only"
    );
}

#[test]
fn cache_parses_each_distinct_template_once() {
    let cache = TemplateCache::new(2);
    let text = "{{ .a }}";
    let first = cache
        .get_or_parse(text, &Options::default())
        .expect("parses");
    let again = cache
        .get_or_parse(text, &Options::default())
        .expect("parses");
    assert!(Arc::ptr_eq(&first, &again));
    let html = Options {
        engine: Engine::Html,
        ..Options::default()
    };
    let other = cache.get_or_parse(text, &html).expect("parses");
    assert!(!Arc::ptr_eq(&first, &other), "options are part of the key");
    cache
        .get_or_parse("{{ .b }}", &Options::default())
        .expect("parses");
    assert_eq!(cache.len(), 2, "capacity bounds the cache");
    assert!(cache
        .get_or_parse("{{ end }}", &Options::default())
        .is_err());
}

#[test]
fn templates_are_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Template>();
    assert_send_sync::<Value>();
    let t = Arc::new(Template::parse("{{ .n }}", &Options::default()).expect("parses"));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || t.render(&event_data(&json!({"n": i}))).expect("renders"))
        })
        .collect();
    let outputs: Vec<String> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    assert_eq!(outputs, ["0", "1", "2", "3"]);
}

#[test]
fn render_command_answers_single_and_batch_requests() {
    let one = oracle::run(r#"{"template": "{{ .x | upper }}", "data": {"x": "a"}}"#);
    assert_eq!(one, r#"{"output":"A"}"#);
    let batch: serde_json::Value = serde_json::from_str(&oracle::run(
        r#"[{"template": "{{ .x }}", "data": {"x": 1}}, {"template": "{{ .y }}"}, {"template": "{{ .y }}", "missingkey": "default"}]"#,
    ))
    .expect("JSON answer");
    assert_eq!(batch[0], json!({"output": "1"}));
    assert!(batch[1]["error"]
        .as_str()
        .expect("error text")
        .contains("map has no entry for key \"y\""));
    assert_eq!(batch[2], json!({"output": "<no value>"}));
    assert!(oracle::run("not json").contains("\"error\""));
}

#[test]
fn tera_syntax_with_sveltos_functions() {
    let options = Options {
        engine: Engine::Tera,
        ..Options::default()
    };
    let text = "name: {{ Resource.metadata.name | upper }}\n{{ Resource.spec | toYaml }}\nns: {{ getField(obj=Resource, path=\"metadata.namespace\") }}";
    let t = Template::parse(text, &options).expect("tera parses");
    let data = event_data(
        &json!({"Resource": {"metadata": {"name": "web", "namespace": "eng"}, "spec": {"b": [1], "a": "x"}}}),
    );
    assert_eq!(
        t.render(&data).expect("renders"),
        "name: WEB\na: x\nb:\n- 1\nns: eng"
    );
    assert_eq!(
        Template::parse("{{ unclosed", &options)
            .expect_err("bad tera")
            .kind(),
        ErrorKind::Parse
    );
}

#[test]
fn sprig_set_mutates_data_and_deep_copy_does_not() {
    check("{{ $_ := set .m \"k\" 1 }}{{ $c := deepCopy .m }}{{ $_ := set $c \"k\" 2 }}{{ .m.k }}{{ $c.k }}", json!({"m": {}}), "12");
}

#[test]
fn crypto_helpers_round_trip() {
    check(
        "{{ encryptAES \"pw\" \"secret\" | decryptAES \"pw\" }}",
        json!({}),
        "secret",
    );
    check(
        "{{ htpasswd \"user\" \"pw\" | substr 0 9 }}",
        json!({}),
        "user:$2a$",
    );
}

/// Every name of sprig 3.2's function map (`genericMap`), as the oracle links it.
const SPRIG_FUNCTIONS: &[&str] = &[
    "abbrev",
    "abbrevboth",
    "add",
    "add1",
    "add1f",
    "addf",
    "adler32sum",
    "ago",
    "all",
    "any",
    "append",
    "atoi",
    "b32dec",
    "b32enc",
    "b64dec",
    "b64enc",
    "base",
    "bcrypt",
    "biggest",
    "buildCustomCert",
    "camelcase",
    "cat",
    "ceil",
    "chunk",
    "clean",
    "coalesce",
    "compact",
    "concat",
    "contains",
    "date",
    "dateInZone",
    "dateModify",
    "date_in_zone",
    "date_modify",
    "decryptAES",
    "deepCopy",
    "deepEqual",
    "default",
    "derivePassword",
    "dict",
    "dig",
    "dir",
    "div",
    "divf",
    "duration",
    "durationRound",
    "empty",
    "encryptAES",
    "env",
    "expandenv",
    "ext",
    "fail",
    "first",
    "float64",
    "floor",
    "fromJson",
    "genCA",
    "genCAWithKey",
    "genPrivateKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "get",
    "getHostByName",
    "has",
    "hasKey",
    "hasPrefix",
    "hasSuffix",
    "hello",
    "htmlDate",
    "htmlDateInZone",
    "htpasswd",
    "indent",
    "initial",
    "initials",
    "int",
    "int64",
    "isAbs",
    "join",
    "kebabcase",
    "keys",
    "kindIs",
    "kindOf",
    "last",
    "list",
    "lower",
    "max",
    "maxf",
    "merge",
    "mergeOverwrite",
    "min",
    "minf",
    "mod",
    "mul",
    "mulf",
    "mustAppend",
    "mustChunk",
    "mustCompact",
    "mustDateModify",
    "mustDeepCopy",
    "mustFirst",
    "mustFromJson",
    "mustHas",
    "mustInitial",
    "mustLast",
    "mustMerge",
    "mustMergeOverwrite",
    "mustPrepend",
    "mustRegexFind",
    "mustRegexFindAll",
    "mustRegexMatch",
    "mustRegexReplaceAll",
    "mustRegexReplaceAllLiteral",
    "mustRegexSplit",
    "mustRest",
    "mustReverse",
    "mustSlice",
    "mustToDate",
    "mustToJson",
    "mustToPrettyJson",
    "mustToRawJson",
    "mustUniq",
    "mustWithout",
    "must_date_modify",
    "nindent",
    "nospace",
    "now",
    "omit",
    "osBase",
    "osClean",
    "osDir",
    "osExt",
    "osIsAbs",
    "pick",
    "pluck",
    "plural",
    "prepend",
    "quote",
    "randAlpha",
    "randAlphaNum",
    "randAscii",
    "randBytes",
    "randInt",
    "randNumeric",
    "regexFind",
    "regexFindAll",
    "regexMatch",
    "regexQuoteMeta",
    "regexReplaceAll",
    "regexReplaceAllLiteral",
    "regexSplit",
    "repeat",
    "replace",
    "rest",
    "reverse",
    "round",
    "semver",
    "semverCompare",
    "seq",
    "set",
    "sha1sum",
    "sha256sum",
    "shuffle",
    "slice",
    "snakecase",
    "sortAlpha",
    "split",
    "splitList",
    "splitn",
    "squote",
    "sub",
    "subf",
    "substr",
    "swapcase",
    "ternary",
    "title",
    "toDate",
    "toDecimal",
    "toJson",
    "toPrettyJson",
    "toRawJson",
    "toString",
    "toStrings",
    "trim",
    "trimAll",
    "trimPrefix",
    "trimSuffix",
    "trimall",
    "trunc",
    "tuple",
    "typeIs",
    "typeIsLike",
    "typeOf",
    "uniq",
    "unixEpoch",
    "unset",
    "until",
    "untilStep",
    "untitle",
    "upper",
    "urlJoin",
    "urlParse",
    "uuidv4",
    "values",
    "without",
    "wrap",
    "wrapWith",
];

const SVELTOS_FUNCTIONS: &[&str] = &[
    "toYaml",
    "fromYaml",
    "fromYamlArray",
    "toJson",
    "fromJson",
    "fromJsonArray",
    "toToml",
    "fromToml",
    "getResource",
    "copy",
    "getField",
    "setField",
    "removeField",
    "chainSetField",
    "chainRemoveField",
];

#[test]
fn every_sprig_and_sveltos_function_is_defined() {
    let known = sluice_template::function_names();
    let missing: Vec<&str> = SPRIG_FUNCTIONS
        .iter()
        .chain(SVELTOS_FUNCTIONS)
        .copied()
        .filter(|n| !known.contains(n))
        .collect();
    assert!(missing.is_empty(), "undefined: {missing:?}");
    // A call to each parses in the text engine (Go checks function names at parse time).
    for name in SPRIG_FUNCTIONS.iter().chain(SVELTOS_FUNCTIONS) {
        Template::parse(
            &format!("{{{{ if false }}}}{{{{ {name} }}}}{{{{ end }}}}"),
            &Options::default(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn unbounded_template_recursion_is_an_error_not_a_stack_overflow() {
    // Render threads (spawn_blocking) have 2 MiB stacks.
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| render("{{ define \"r\" }}{{ if true }}{{ range .l }}{{ template \"r\" $ }}{{ end }}{{ end }}{{ end }}{{ template \"r\" . }}", json!({"l": [1]})))
        .expect("spawn");
    let err = handle
        .join()
        .expect("no stack overflow")
        .expect_err("depth limit");
    assert!(
        err.message().contains("exceeded maximum template depth"),
        "{err}"
    );
}

#[test]
fn deep_nesting_is_a_parse_error_not_a_stack_overflow() {
    let parens = format!("{{{{ {}1{} }}}}", "(".repeat(10_000), ")".repeat(10_000));
    let ifs = format!(
        "{}x{}",
        "{{ if true }}".repeat(10_000),
        "{{ end }}".repeat(10_000)
    );
    for text in [parens, ifs] {
        let handle = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || render(&text, json!({})))
            .expect("spawn");
        let err = handle
            .join()
            .expect("no stack overflow")
            .expect_err("nesting limit");
        assert_eq!(err.kind(), ErrorKind::Parse);
    }
}

#[test]
fn nesting_and_recursion_at_their_limits_fit_a_render_thread() {
    // 47 nested ifs inside a template that recurses to the depth limit, on a 2 MiB stack.
    let body = format!(
        "{}{{{{ template \"r\" . }}}}{}",
        "{{ if true }}".repeat(46),
        "{{ end }}".repeat(46)
    );
    let text = format!("{{{{ define \"r\" }}}}{body}{{{{ end }}}}{{{{ template \"r\" . }}}}");
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || render(&text, json!({})))
        .expect("spawn");
    let err = handle
        .join()
        .expect("no stack overflow")
        .expect_err("depth limit");
    assert!(
        err.message().contains("exceeded maximum template depth"),
        "{err}"
    );
}

#[test]
fn renders_are_budgeted() {
    for text in [
        "{{ repeat 1000000000 \"xx\" }}",
        "{{ until 1000000000 }}",
        "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}",
        "{{ randAlphaNum 1000000000 }}",
        "{{ range until 100000 }}{{ printf \"%60000d\" 1 }}{{ end }}",
    ] {
        let err = render(text, json!({})).expect_err(text);
        assert_eq!(err.kind(), ErrorKind::Exec, "{text}: {err}");
    }
}

#[test]
fn borrowed_data_ranges_over_sorted_keys_and_keeps_event_types() {
    // Document order is not Go's order: range must sort, on every data path.
    let data = json!({
        "Resource": {"spec": {"selector": {"tier": "web", "app": "a", "zone": "z", "b": 1}}},
        "Resources": [null, {"metadata": {"name": "x"}}],
        "MatchingResource": {"Name": "svc"},
    });
    let text = "{{ range $k, $v := .Resource.spec.selector }}{{ $k }}={{ $v }};{{ end }}\
                {{ len (index .Resources 0) }}|{{ (index .Resources 1).metadata.name }}|\
                {{ .MatchingResource.Name }}/{{ .MatchingResource.Kind }}|{{ index .Resources 0 }}";
    let expected = "app=a;b=1;tier=web;zone=z;0|x|svc/|map[]";
    let template = Template::parse(text, &Options::default()).expect("parses");
    assert_eq!(
        template
            .render_event(&sluice_template::Doc::from(&data))
            .expect("borrowed"),
        expected
    );
    let shared = sluice_template::event_data_shared(Arc::new(sluice_template::Doc::from(&data)));
    assert_eq!(template.render(&shared).expect("shared"), expected);
    assert_eq!(
        template.render(&event_data(&data)).expect("eager"),
        expected
    );
}
