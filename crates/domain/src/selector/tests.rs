//! Table tests for label selector parsing, printing and matching.

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Parses `input`; `Ok(canonical)` expects success and the canonical form, `Err(pos)` a failure at `pos`.
fn check(input: &str, expected: Result<&str, usize>) {
    match (Selector::parse(input), expected) {
        (Ok(sel), Ok(canonical)) => {
            assert_eq!(sel.to_string(), canonical, "canonical form of {input:?}");
            assert_eq!(
                Selector::parse(canonical).as_ref(),
                Ok(&sel),
                "reparse of {canonical:?}"
            );
        }
        (Err(e), Err(pos)) => assert_eq!(e.position, pos, "error position for {input:?}: {e}"),
        (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
    }
}

#[test]
fn parses_and_prints_canonically() {
    check("", Ok(""));
    check("  ", Ok(""));
    check("a=b", Ok("a=b"));
    check("a==b", Ok("a=b"));
    check("a!=b", Ok("a!=b"));
    check("a", Ok("a"));
    check("!a", Ok("!a"));
    check(" ! a ", Ok("!a"));
    check("a=", Ok("a="));
    check("b=1,a=2", Ok("a=2,b=1"));
    check("env in (prod, dev)", Ok("env in (dev,prod)"));
    check("env notin (qa)", Ok("env notin (qa)"));
    check("x in (a,a,b)", Ok("x in (a,b)"));
    check(
        "app.kubernetes.io/name=web,tier!=db,!legacy,zone",
        Ok("app.kubernetes.io/name=web,!legacy,tier!=db,zone"),
    );
    check("a in (x,),b", Ok("a in (,x),b"));
}

#[test]
fn rejects_with_position() {
    check("a=b=c", Err(3));
    check(",a", Err(0));
    check("a,", Err(2));
    check("a b", Err(2));
    check("a in ()", Err(6));
    check("a in (x", Err(7));
    check("a in x", Err(5));
    check("a=b c", Err(4));
    check("-a=b", Err(0));
    check("a=b-", Err(2));
    check("Foo.com/x=y", Err(0));
    check("a/b/c=1", Err(0));
    check("!", Err(1));
    check("a=(b)", Err(2));
    check(&format!("a={}", "v".repeat(64)), Err(2));
    check(&format!("{}=v", "k".repeat(64)), Err(0));
    check(&format!("{}/k=v", "p".repeat(64)), Err(0));
    check("example.com/k=v", Ok("example.com/k=v"));
}

#[test]
fn error_message_says_what() {
    let e = Selector::parse("env in (a")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        e,
        "invalid label selector at position 9: missing ')' to close the value set of 'in'"
    );
}

fn check_match(selector: &str, set: &[(&str, &str)], expected: bool) {
    let sel = Selector::parse(selector).expect("selector parses");
    assert_eq!(
        sel.matches(&labels(set)),
        expected,
        "{selector:?} against {set:?}"
    );
}

#[test]
fn matches_like_kubernetes() {
    check_match("", &[], true);
    check_match("a=b", &[("a", "b")], true);
    check_match("a=b", &[("a", "c")], false);
    check_match("a=b", &[], false);
    check_match("a!=b", &[], true);
    check_match("a!=b", &[("a", "b")], false);
    check_match("a in (x,y)", &[("a", "y")], true);
    check_match("a in (x,y)", &[], false);
    check_match("a notin (x,y)", &[], true);
    check_match("a notin (x,y)", &[("a", "x")], false);
    check_match("a", &[("a", "")], true);
    check_match("!a", &[("a", "")], false);
    check_match("!a", &[("b", "1")], true);
    check_match("a=", &[("a", "")], true);
    check_match("a=1,b in (2)", &[("a", "1"), ("b", "2")], true);
    check_match("a=1,b in (2)", &[("a", "1"), ("b", "3")], false);
}

fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

fn check_structured(sel: LabelSelector, expected: Result<&str, &str>) {
    match (Selector::from_label_selector(&sel), expected) {
        (Ok(s), Ok(canonical)) => assert_eq!(s.to_string(), canonical),
        (Err(e), Err(fragment)) => assert!(
            e.to_string().contains(fragment),
            "{e} should mention {fragment:?}"
        ),
        (got, want) => panic!("{sel:?}: got {got:?}, want {want:?}"),
    }
}

#[test]
fn converts_structured_selectors() {
    check_structured(LabelSelector::default(), Ok(""));
    check_structured(
        LabelSelector {
            match_labels: labels(&[("env", "prod")]),
            match_expressions: vec![
                expr("zone", "In", &["b", "a"]),
                expr("old", "DoesNotExist", &[]),
                expr("tier", "Exists", &[]),
            ],
        },
        Ok("env=prod,!old,tier,zone in (a,b)"),
    );
    check_structured(
        LabelSelector {
            match_expressions: vec![expr("a", "NotIn", &["x"])],
            ..Default::default()
        },
        Ok("a notin (x)"),
    );
    check_structured(
        LabelSelector {
            match_expressions: vec![expr("a", "In", &[])],
            ..Default::default()
        },
        Err("needs at least one value"),
    );
    check_structured(
        LabelSelector {
            match_expressions: vec![expr("a", "Exists", &["x"])],
            ..Default::default()
        },
        Err("takes no values"),
    );
    check_structured(
        LabelSelector {
            match_expressions: vec![expr("a", "Gt", &["1"])],
            ..Default::default()
        },
        Err("\"Gt\" is not a valid"),
    );
    check_structured(
        LabelSelector {
            match_labels: labels(&[("a", "bad value")]),
            ..Default::default()
        },
        Err("label value \"bad value\""),
    );
}

#[test]
fn label_selector_serde_is_camel_case_and_skips_empty() {
    let sel: LabelSelector = serde_json::from_str(
        r#"{"matchLabels":{"a":"b"},"matchExpressions":[{"key":"k","operator":"Exists"}]}"#,
    )
    .expect("deserializes");
    assert_eq!(sel.match_expressions[0].values, Vec::<String>::new());
    assert_eq!(
        serde_json::to_string(&LabelSelector::default()).expect("serializes"),
        "{}"
    );
}
