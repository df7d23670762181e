//! Tests of CloudEvent parsing (both modes), validation errors and criteria matching, with the
//! seed 004 events and the regex cases of Sveltos's `isCloudEventAMatch` tests.

use super::*;
use crate::pattern::Pattern;
use serde_json::json;

/// Seed 004's login event, exactly as the product document publishes it.
const SEED_LOGIN: &str = r#"{
  "specversion": "1.0",
  "type": "auth.example.com.login",
  "source": "auth.example.com",
  "id": "10001",
  "subject": "mgianluc",
  "datacontenttype": "application/json",
  "data": {
    "message": "User mgianluc login"
  }
}"#;

fn criteria(
    subject: &str,
    source: &str,
    event_type: &str,
    ce_subject: &str,
) -> MessagingMatchCriteria {
    let p = |s: &str| Pattern::new(s).expect("test pattern compiles");
    MessagingMatchCriteria {
        subject: p(subject),
        cloud_event_source: p(source),
        cloud_event_type: p(event_type),
        cloud_event_subject: p(ce_subject),
    }
}

fn event(source: &str, event_type: &str, subject: &str) -> CloudEvent {
    CloudEvent::from_json(json!({"specversion": "1.0", "id": "1", "source": source,
                                 "type": event_type, "subject": subject}))
    .expect("valid test event")
}

#[test]
fn seed_login_event_parses_in_structured_mode() {
    let e = parse_structured(SEED_LOGIN.as_bytes()).expect("seed event is valid");
    assert_eq!(
        (e.id(), e.source(), e.event_type(), e.subject()),
        (
            "10001",
            "auth.example.com",
            "auth.example.com.login",
            "mgianluc"
        )
    );
    let expected: Value = serde_json::from_str(SEED_LOGIN).expect("json");
    assert_eq!(e.clone().into_json(), expected);
    let round: Value = serde_json::from_slice(&e.to_bytes()).expect("bytes are json");
    assert_eq!(round, expected);
}

#[test]
fn structured_mode_without_datacontenttype_is_json_data() {
    let e = parse_structured(
        br#"{"specversion":"1.0","id":"a","source":"s","type":"t","data":{"k":1}}"#,
    )
    .expect("absent datacontenttype means JSON data");
    assert_eq!(e.as_json()["data"], json!({"k": 1}));
    assert_eq!(e.subject(), "", "absent subject reads as empty");
    let e = parse_structured(
        br#"{"specversion":"1.0","id":"a","source":"s","type":"t","datacontenttype":"Application/JSON; charset=utf-8","seq":7}"#,
    )
    .expect("parameters and case do not matter; numeric extensions are fine");
    assert_eq!(e.as_json()["seq"], json!(7));
}

#[test]
fn invalid_events_say_what_is_wrong() {
    let cases: [(&[u8], &str); 9] = [
        (b"not json", "payload is not a JSON object: expected ident at line 1 column 2"),
        (b"[1]", "payload is not a JSON object: not an object"),
        (br#"{"id":"1","source":"s","type":"t"}"#, "required attribute specversion is missing or empty"),
        (br#"{"specversion":"1.0","source":"s","type":"t"}"#, "required attribute id is missing or empty"),
        (br#"{"specversion":"1.0","id":"1","type":"t"}"#, "required attribute source is missing or empty"),
        (br#"{"specversion":"1.0","id":"1","source":"s","type":""}"#, "required attribute type is missing or empty"),
        (br#"{"specversion":"1.0","id":1,"source":"s","type":"t"}"#, "attribute id must be a string"),
        (br#"{"specversion":"2.0","id":"1","source":"s","type":"t"}"#, "unsupported specversion \"2.0\" (expected 1.0 or 0.3)"),
        (br#"{"specversion":"1.0","id":"1","source":"s","type":"t","datacontenttype":"text/plain","data":"hi"}"#,
         "datacontenttype \"text/plain\" is not JSON (only application/json data is accepted)"),
    ];
    for (payload, want) in cases {
        let error = parse_structured(payload).expect_err("must be rejected");
        assert_eq!(
            error.to_string(),
            want,
            "{}",
            String::from_utf8_lossy(payload)
        );
    }
    let error =
        parse_structured(br#"{"specversion":"1.0","id":"1","source":"s","type":"t","subject":3}"#)
            .expect_err("subject must be a string");
    assert_eq!(error.to_string(), "attribute subject must be a string");
}

#[test]
fn binary_mode_normalises_to_the_structured_event() {
    let headers = [
        ("ce-specversion", "1.0"),
        ("Ce-Type", "auth.example.com.login"),
        ("ce-source", "auth.example.com"),
        ("ce-id", "10001"),
        ("ce-subject", "mgianluc"),
        ("content-type", "application/json"),
        ("ce-traceparent", "00-abc-def-01"),
        ("Nats-Msg-Id", "x"),
    ];
    assert!(is_binary_mode(headers.iter().copied()));
    let e = parse_message(
        headers.iter().copied(),
        br#"{"message":"User mgianluc login"}"#,
    )
    .expect("binary event is valid");
    assert_eq!(
        e.clone().into_json(),
        json!({"specversion": "1.0", "id": "10001", "source": "auth.example.com",
               "type": "auth.example.com.login", "subject": "mgianluc",
               "datacontenttype": "application/json", "traceparent": "00-abc-def-01",
               "data": {"message": "User mgianluc login"}})
    );
}

#[test]
fn binary_mode_errors() {
    let base = [
        ("ce-specversion", "1.0"),
        ("ce-id", "1"),
        ("ce-source", "s"),
    ];
    let error = parse_binary(base.iter().copied(), b"{}").expect_err("no type");
    assert_eq!(
        error.to_string(),
        "required attribute type is missing or empty"
    );
    let mut with_type = base.to_vec();
    with_type.push(("ce-type", "t"));
    let error = parse_binary(with_type.iter().copied(), b"plain text").expect_err("body not json");
    assert!(
        error
            .to_string()
            .starts_with("binary-mode body is not JSON"),
        "{error}"
    );
    let mut text = with_type.clone();
    text.push(("content-type", "text/plain"));
    let error = parse_binary(text.iter().copied(), b"hi").expect_err("not json content");
    assert_eq!(
        error,
        CloudEventError::NotJsonContent {
            content_type: "text/plain".into()
        }
    );
    let e = parse_binary(with_type.iter().copied(), b"").expect("empty body: no data");
    assert!(!e.as_json().contains_key("data"));
}

#[test]
fn structured_mode_is_chosen_without_a_specversion_header() {
    let headers = [("Nats-Msg-Id", "1"), ("ce-id", "ignored")];
    assert!(!is_binary_mode(headers.iter().copied()));
    let e = parse_message(headers.iter().copied(), SEED_LOGIN.as_bytes()).expect("structured");
    assert_eq!(e.id(), "10001");
}

#[test]
fn seed_004_criteria_select_login_and_logout_on_user_operation() {
    let c = criteria("user-operation", "auth.example.com", "", "");
    let login = parse_structured(SEED_LOGIN.as_bytes()).expect("login");
    let logout = event("auth.example.com", "auth.example.com.logout", "mgianluc");
    assert!(matches(&c, "user-operation", &login));
    assert!(matches(&c, "user-operation", &logout));
    assert!(!matches(&c, "user-login", &login), "other NATS subject");
    assert!(!matches(
        &c,
        "user-operation",
        &event("billing.example.com", "t", "s")
    ));
}

#[test]
fn every_field_is_an_unanchored_regex_and_all_must_match() {
    let e = event("prefix-source-suffix", "com.example.mid.created", "user-42");
    let cases = [
        (criteria("", "", "", ""), "any", true),
        (criteria("^prefix.*", "", "", ""), "prefix.orders", true),
        (criteria("^prefix.*", "", "", ""), "orders.prefix", false),
        (criteria(".*suffix$", "", "", ""), "orders.suffix", true),
        (criteria(".*suffix$", "", "", ""), "suffix.orders", false),
        (criteria(".*mid.*", "", "", ""), "a.mid.b", true),
        (criteria("", "^prefix.*", "", ""), "s", true),
        (criteria("", ".*suffix$", "", ""), "s", true),
        (criteria("", ".*mid.*", "", ""), "s", false),
        (criteria("", "", ".*mid.*", ""), "s", true),
        (criteria("", "", "^com\\.example\\.", ".*-42$"), "s", true),
        (criteria("", "", "", "^user-4$"), "s", false),
        (
            criteria("^s$", "^prefix.*", ".*created$", "user"),
            "s",
            true,
        ),
        (
            criteria("^s$", "^prefix.*", ".*deleted$", "user"),
            "s",
            false,
        ),
    ];
    for (c, nats_subject, want) in cases {
        assert_eq!(
            matches(&c, nats_subject, &e),
            want,
            "{c:?} on {nats_subject}"
        );
    }
}

#[test]
fn any_criterion_selects_and_none_selects_nothing() {
    let e = event("s", "t", "x");
    let hit = criteria("a", "", "", "");
    let miss = criteria("zzz", "", "", "");
    assert!(matches_any(&[miss.clone(), hit], "a", &e));
    assert!(!matches_any(&[miss], "a", &e));
    assert!(!matches_any(&[], "a", &e));
}
