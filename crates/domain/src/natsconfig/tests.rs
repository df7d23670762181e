//! Tests of the `sveltos-nats` Secret: the seed 004 Secret as deployed, both JetStream forms,
//! every authorization kind, and errors that name the field.

use super::*;
use serde_json::json;

/// The `sveltos-nats` value of the Secret seed 004 deploys (base64 of its JSON, with tabs).
const SEED_SECRET_VALUE: &str = "ewogICJuYXRzIjoKICAgewogICAgICJjb25maWd1cmF0aW9uIjoKCXsKCSAgICAidXJsIjogIm5hdHM6Ly9uYXRzLm5hdHMuc3ZjLmNsdXN0ZXIubG9jYWw6NDIyMiIsCgkgICAgInN1YmplY3RzIjogWwoJCSJ1c2VyLW9wZXJhdGlvbiIKCSAgICBdLAoJICAgICJhdXRob3JpemF0aW9uIjogewoJCSJ1c2VyIjogewoJCSAgICAidXNlciI6ICJhZG1pbiIsCgkJICAgICJwYXNzd29yZCI6ICJteS1wYXNzd29yZCIKCQl9CgkgICAgfQoJfQogICB9Cn0K";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn seed_004_secret_as_deployed() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": NATS_SECRET_NAME, "namespace": NATS_SECRET_NAMESPACE},
        "data": {"sveltos-nats": SEED_SECRET_VALUE}});
    let settings = parse_nats_secret(&secret).expect("seed secret parses");
    assert_eq!(settings.jetstream, None);
    let nats = settings.nats.expect("nats section");
    assert_eq!(nats.url, "nats://nats.nats.svc.cluster.local:4222");
    assert_eq!(nats.subjects, ["user-operation"]);
    let user = nats.authorization.user.expect("user auth");
    assert_eq!(
        (user.user.as_str(), user.password.as_str()),
        ("admin", "my-password")
    );
    assert_eq!(nats.authorization.token, None);
}

#[test]
fn string_data_and_duplicate_subjects() {
    let secret = json!({"stringData": {"sveltos-nats":
        r#"{"nats": {"configuration": {"url": "nats://n:4222", "subjects": ["test", "foo", "test"]}}}"#}});
    let nats = parse_nats_secret(&secret)
        .expect("parses")
        .nats
        .expect("nats");
    assert_eq!(
        nats.subjects,
        ["test", "foo"],
        "each subject is subscribed at most once"
    );
    assert_eq!(nats.authorization, Authorization::default());
}

#[test]
fn jetstream_older_subjects_form_names_streams_like_subjects() {
    let settings = parse_nats_config(
        br#"{"jetstream": {"configuration": {"url": "nats://js:4222", "subjects": ["orders", "users"],
              "authorization": {"token": "t0k"}}}}"#,
    )
    .expect("parses");
    let js = settings.jetstream.expect("jetstream");
    assert_eq!(js.url, "nats://js:4222");
    assert_eq!(
        js.streams,
        [
            JetStreamSource {
                stream: "orders".into(),
                subjects: vec![]
            },
            JetStreamSource {
                stream: "users".into(),
                subjects: vec![]
            },
        ]
    );
    assert_eq!(js.authorization.token.as_deref(), Some("t0k"));
}

#[test]
fn jetstream_newer_streams_form_with_filters() {
    let settings = parse_nats_config(
        br#"{"nats": {"configuration": {"url": "nats://n:4222", "subjects": ["a"]}},
             "jetstream": {"configuration": {"url": "nats://js:4222",
               "streams": [{"name": "EVENTS", "subjects": ["user-operation", "user.>"]}, {"name": "ALL"}]}}}"#,
    )
    .expect("parses");
    assert!(settings.nats.is_some());
    let js = settings.jetstream.expect("jetstream");
    assert_eq!(
        js.streams,
        [
            JetStreamSource {
                stream: "EVENTS".into(),
                subjects: vec!["user-operation".into(), "user.>".into()]
            },
            JetStreamSource {
                stream: "ALL".into(),
                subjects: vec![]
            },
        ]
    );
}

#[test]
fn client_certificate_and_root_ca_are_base64_pem() {
    let json = json!({"nats": {"configuration": {"url": "tls://n:4222", "subjects": ["s"],
        "authorization": {"clientCert": {"certPem": b64(b"CERT PEM"), "keyPem": b64(b"KEY PEM")},
                          "rootCA": b64(b"CA PEM")}}}});
    let settings = parse_nats_config(json.to_string().as_bytes()).expect("parses");
    let auth = settings.nats.expect("nats").authorization;
    let cert = auth.client_cert.clone().expect("client cert");
    assert_eq!(cert.cert_pem, b"CERT PEM");
    assert_eq!(cert.key_pem, b"KEY PEM");
    assert_eq!(auth.root_ca.as_deref(), Some(&b"CA PEM"[..]));
    let debug = format!("{auth:?}");
    assert!(!debug.contains("KEY"), "keys are redacted in logs: {debug}");
}

#[test]
fn secrets_never_reach_debug_output() {
    let settings = parse_nats_config(
        br#"{"nats": {"configuration": {"url": "nats://n", "authorization": {"user": {"user": "admin", "password": "my-password"}, "token": "tok-secret"}}}}"#,
    )
    .expect("parses");
    let debug = format!("{settings:?}");
    assert!(debug.contains("admin"), "{debug}");
    assert!(
        !debug.contains("my-password") && !debug.contains("tok-secret"),
        "{debug}"
    );
}

#[test]
fn errors_name_the_field() {
    let cases: [(&[u8], &str); 10] = [
        (b"{", "configuration is not JSON: EOF while parsing an object at line 1 column 1"),
        (br#"[]"#, ".: expected an object"),
        (br#"{"nats": {}}"#, "nats.configuration: required field is missing or empty"),
        (br#"{"nats": {"configuration": {"subjects": ["a"]}}}"#, "nats.configuration.url: required field is missing or empty"),
        (br#"{"nats": {"configuration": {"url": "u", "subjects": "a"}}}"#, "nats.configuration.subjects: expected a list"),
        (br#"{"nats": {"configuration": {"url": "u", "subjects": ["a", 1]}}}"#, "nats.configuration.subjects[1]: expected a string"),
        (br#"{"jetstream": {"configuration": {"url": "u", "streams": [{"subjects": ["a"]}]}}}"#,
         "jetstream.configuration.streams[0].name: required field is missing or empty"),
        (br#"{"nats": {"configuration": {"url": "u", "authorization": {"user": {"user": 1}}}}}"#,
         "nats.configuration.authorization.user.user: expected a string"),
        (br#"{"nats": {"configuration": {"url": "u", "authorization": {"rootCA": "%%%"}}}}"#,
         "nats.configuration.authorization.rootCA: not valid base64"),
        (br#"{"nats": {"configuration": {"url": "u", "authorization": {"clientCert": {"certPem": "QQ=="}}}}}"#,
         "nats.configuration.authorization.clientCert.keyPem: required field is missing or empty"),
    ];
    for (input, want) in cases {
        let error = parse_nats_config(input).expect_err("must fail");
        assert_eq!(
            error.to_string(),
            want,
            "{}",
            String::from_utf8_lossy(input)
        );
    }
    let error = parse_nats_secret(&json!({"data": {"other": "eA=="}})).expect_err("no key");
    assert_eq!(error.to_string(), "secret has no data key sveltos-nats");
    let error = parse_nats_secret(&json!({"data": {"sveltos-nats": "!!"}})).expect_err("bad b64");
    assert_eq!(error.to_string(), "data.sveltos-nats: not valid base64");
}

#[test]
fn an_empty_configuration_connects_to_nothing() {
    assert_eq!(
        parse_nats_config(b"{}").expect("parses"),
        NatsSettings::default()
    );
}
