//! Schema enforcement as kube-apiserver does it, seen through the real kubectl and raw HTTP:
//! strict field validation, 422 `Invalid` with every cause, pruning with warnings, defaults on
//! writes and reads, list-map keys, ConfigMap/Secret decoding and the size limits. The CRD is
//! defined here (an EventTrigger-like kind in a test group) so the tests stand on their own.

use serde_json::{json, Value};
use sluice_testserver::{Config, TestServer};

use super::kubectl::Kubectl;
use super::support::{http_with, server_with};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: eventtriggers.test.sluice.dev
spec:
  group: test.sluice.dev
  names: {kind: EventTrigger, listKind: EventTriggerList, plural: eventtriggers, singular: eventtrigger}
  scope: Cluster
  versions:
    - name: v1beta1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              required: [sourceClusterSelector, eventSourceName]
              properties:
                sourceClusterSelector:
                  type: object
                  properties:
                    matchLabels: {type: object, additionalProperties: {type: string}}
                eventSourceName: {type: string, minLength: 1}
                oneForEvent: {type: boolean}
                syncMode:
                  type: string
                  enum: [OneTime, Continuous, ContinuousWithDriftDetection, DryRun]
                  default: Continuous
                payload: {type: string}
                policyRefs:
                  type: array
                  x-kubernetes-list-type: map
                  x-kubernetes-list-map-keys: [kind, namespace, name]
                  items:
                    type: object
                    required: [kind, name]
                    properties:
                      kind: {type: string, enum: [ConfigMap, Secret]}
                      namespace: {type: string, default: ""}
                      name: {type: string}
                      deploymentType: {type: string, default: Remote}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
"#;

const TRIGGER: &str = r#"
apiVersion: test.sluice.dev/v1beta1
kind: EventTrigger
metadata: {name: services}
spec:
  sourceClusterSelector: {matchLabels: {env: prod}}
  eventSourceName: svc
  oneForEvent: true
  policyRefs:
    - {kind: ConfigMap, name: ingress}
"#;

const BASE: &str = "/clusters/mgmt/apis/test.sluice.dev/v1beta1/eventtriggers";

async fn started() -> (TestServer, Kubectl) {
    let crd: Value = serde_yaml::from_str(CRD).expect("crd yaml");
    let server = server_with(Config {
        objects: vec![crd],
        ..Config::default()
    })
    .await;
    let k = Kubectl::new(&server);
    (server, k)
}

/// Runs kubectl expecting failure; returns stderr.
async fn fails(k: &Kubectl, args: &[&str], stdin: &str) -> String {
    let (ok, out, err) = k.try_run(args, Some(stdin)).await;
    assert!(!ok, "kubectl {args:?} should fail: {out}");
    err
}

#[tokio::test]
async fn kubectl_apply_strict_rejects_a_typo_with_the_real_message() {
    let (server, k) = started().await;
    let typo = TRIGGER.replace("sourceClusterSelector", "sourceClusterSelectr");
    let err = fails(&k, &["apply", "--validate=strict", "-f", "-"], &typo).await;
    assert_eq!(
        err.trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": EventTrigger in version \"v1beta1\" cannot be handled as a EventTrigger: strict decoding error: unknown field \"spec.sourceClusterSelectr\""
    );
    // kubectl validates strictly by default too.
    let err = fails(&k, &["apply", "-f", "-"], &typo).await;
    assert!(
        err.contains("unknown field \"spec.sourceClusterSelectr\""),
        "{err}"
    );
    let (ok, _, err) = k.try_run(&["get", "eventtriggers", "services"], None).await;
    assert!(
        !ok && err.contains("NotFound"),
        "nothing was created: {err}"
    );

    // An update (kubectl apply on an existing object sends a merge patch) is checked the same way.
    k.run(&["apply", "-f", "-"], Some(TRIGGER)).await;
    let extra = TRIGGER.replace("oneForEvent: true", "oneForEvent: true\n  bogus: 1");
    let err = fails(&k, &["apply", "--validate=strict", "-f", "-"], &extra).await;
    assert!(
        err.contains("strict decoding error: unknown field \"spec.bogus\""),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_are_warned_about_or_dropped_silently() {
    let (server, k) = started().await;
    let extra = TRIGGER.replace(
        "oneForEvent: true",
        "oneForEvent: true\n  bogus: 1\n  policyRefs2: []",
    );
    let (ok, out, err) = k
        .try_run(&["apply", "--validate=warn", "-f", "-"], Some(&extra))
        .await;
    assert!(ok, "{err}");
    assert!(out.contains("created"), "{out}");
    assert!(
        err.contains("Warning: unknown field \"spec.bogus\"")
            && err.contains("Warning: unknown field \"spec.policyRefs2\""),
        "{err}"
    );
    let stored = k.get(&["eventtriggers", "services"]).await;
    assert!(stored["spec"].get("bogus").is_none(), "pruned: {stored}");
    assert!(
        stored["spec"].get("policyRefs2").is_none(),
        "pruned: {stored}"
    );

    let other = extra.replace("name: services", "name: other");
    let (ok, _, err) = k
        .try_run(&["apply", "--validate=false", "-f", "-"], Some(&other))
        .await;
    assert!(ok && !err.contains("Warning"), "ignored silently: {err}");

    // Without fieldValidation (kube-rs, client-go) the server warns: a Warning header.
    let body = json!({"apiVersion": "test.sluice.dev/v1beta1", "kind": "EventTrigger",
        "metadata": {"name": "raw", "nonsense": 1},
        "spec": {"sourceClusterSelector": {}, "eventSourceName": "x", "typo": true}});
    let (code, head, _) =
        http_with(&server, "POST", BASE, "application/json", &body.to_string()).await;
    assert_eq!(code, 201);
    let warnings: Vec<&str> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("warning:"))
        .collect();
    assert_eq!(
        warnings,
        [
            "warning: 299 - \"unknown field \\\"metadata.nonsense\\\"\"",
            "warning: 299 - \"unknown field \\\"spec.typo\\\"\""
        ]
    );
    server.shutdown().await;
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicass: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx
          portz: 80
          resources: {limits: {cpu: 1, memory: 1Gi}}
"#;

#[tokio::test]
async fn a_typo_in_a_built_in_kind_is_found_at_any_depth() {
    let (server, k) = started().await;
    let err = fails(&k, &["apply", "-f", "-"], DEPLOYMENT).await;
    assert_eq!(
        err.trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replicass\", unknown field \"spec.template.spec.containers[0].portz\""
    );

    // Warned about, then stored without them.
    let (ok, _, err) = k
        .try_run(&["apply", "--validate=warn", "-f", "-"], Some(DEPLOYMENT))
        .await;
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: unknown field \"spec.replicass\"")
            && err.contains("Warning: unknown field \"spec.template.spec.containers[0].portz\""),
        "{err}"
    );
    let stored = k.get(&["deployment", "web"]).await;
    assert!(
        stored["spec"].get("replicass").is_none(),
        "pruned: {stored}"
    );
    let container = &stored["spec"]["template"]["spec"]["containers"][0];
    assert!(container.get("portz").is_none(), "pruned: {container}");
    assert_eq!(
        container["resources"]["limits"],
        json!({"cpu": 1, "memory": "1Gi"})
    );

    // kube-rs and client-go send no fieldValidation: the server warns and prunes.
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetport": 8080}]}});
    let (code, head, body) = http_with(
        &server,
        "POST",
        "/clusters/mgmt/api/v1/namespaces/default/services",
        "application/json",
        &service.to_string(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let warnings: Vec<&str> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("warning:"))
        .collect();
    assert_eq!(
        warnings,
        ["warning: 299 - \"unknown field \\\"spec.ports[0].targetport\\\"\""]
    );
    let created: Value = serde_json::from_str(&body).expect("json");
    assert!(
        created["spec"]["ports"][0].get("targetport").is_none(),
        "{created}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_deployment_written_bare_reads_back_with_the_api_servers_defaults() {
    let (server, k) = started().await;
    let bare = DEPLOYMENT
        .replace("  replicass: 2\n", "")
        .replace("          portz: 80\n", "");
    k.run(&["apply", "-f", "-"], Some(&bare)).await;
    let stored = k.get(&["deployment", "web"]).await;
    let spec = &stored["spec"];
    assert_eq!(spec["replicas"], 1, "{spec}");
    assert_eq!(spec["strategy"]["type"], "RollingUpdate", "{spec}");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always", "{pod}");
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always", "{pod}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_typo_in_a_crd_is_a_strict_decoding_error() {
    let (server, k) = started().await;
    let typo = CRD
        .replace("name: eventtriggers.test.sluice.dev", "name: others.test.sluice.dev")
        .replace("kind: EventTrigger, listKind: EventTriggerList, plural: eventtriggers, singular: eventtrigger",
                 "kind: Other, listKind: OtherList, plural: others, singular: other")
        .replace("served: true", "servd: true");
    let err = fails(&k, &["apply", "-f", "-"], &typo).await;
    assert_eq!(
        err.trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": CustomResourceDefinition in version \"v1\" cannot be handled as a CustomResourceDefinition: strict decoding error: unknown field \"spec.versions[0].servd\""
    );
    server.shutdown().await;
}

#[tokio::test]
async fn invalid_values_get_422_with_every_cause() {
    let (server, k) = started().await;
    let bad = TRIGGER
        .replace(
            "oneForEvent: true",
            "oneForEvent: \"yes\"\n  syncMode: Sometimes",
        )
        .replace("eventSourceName: svc", "eventSourceName: \"\"");
    let err = fails(&k, &["apply", "-f", "-"], &bad).await;
    for needle in [
        "The EventTrigger \"services\" is invalid:",
        "spec.oneForEvent: Invalid value: \"string\": spec.oneForEvent in body must be of type boolean: \"string\"",
        "spec.syncMode: Unsupported value: \"Sometimes\": supported values: \"OneTime\", \"Continuous\", \"ContinuousWithDriftDetection\", \"DryRun\"",
        "spec.eventSourceName: Invalid value: \"\": spec.eventSourceName in body should be at least 1 chars long",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in {err}");
    }

    let body = json!({"apiVersion": "test.sluice.dev/v1beta1", "kind": "EventTrigger",
        "metadata": {"name": "t"}, "spec": {"eventSourceName": "x", "oneForEvent": "yes"}});
    let (code, _, text) =
        http_with(&server, "POST", BASE, "application/json", &body.to_string()).await;
    assert_eq!(code, 422);
    let status: Value = serde_json::from_str(&text).expect("status json");
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "EventTrigger.test.sluice.dev \"t\" is invalid: [spec.oneForEvent: Invalid value: \"string\": spec.oneForEvent in body must be of type boolean: \"string\", spec.sourceClusterSelector: Required value]",
            "reason": "Invalid",
            "details": {"name": "t", "group": "test.sluice.dev", "kind": "EventTrigger", "causes": [
                {"reason": "FieldValueTypeInvalid", "message": "Invalid value: \"string\": spec.oneForEvent in body must be of type boolean: \"string\"", "field": "spec.oneForEvent"},
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.sourceClusterSelector"}]},
            "code": 422})
    );
    server.shutdown().await;
}

#[tokio::test]
async fn list_map_keys_must_be_unique() {
    let (server, k) = started().await;
    let dup = TRIGGER.replace(
        "- {kind: ConfigMap, name: ingress}",
        "- {kind: ConfigMap, name: ingress}\n    - {kind: ConfigMap, name: ingress, deploymentType: Local}",
    );
    let err = fails(&k, &["apply", "-f", "-"], &dup).await;
    assert!(
        err.contains("spec.policyRefs[1]: Duplicate value: {\"kind\":\"ConfigMap\",\"name\":\"ingress\",\"namespace\":\"\"}"),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn defaults_appear_on_writes_and_on_reads() {
    let (server, k) = started().await;
    k.run(&["apply", "-f", "-"], Some(TRIGGER)).await;
    let yaml = k
        .run(&["get", "eventtriggers", "services", "-o", "yaml"], None)
        .await;
    let obj: Value = serde_yaml::from_str(&yaml).expect("yaml");
    assert_eq!(obj["spec"]["syncMode"], "Continuous", "{yaml}");
    assert_eq!(
        obj["spec"]["policyRefs"],
        json!([{"kind": "ConfigMap", "name": "ingress", "namespace": "", "deploymentType": "Remote"}]),
        "{yaml}"
    );

    // A default added to the schema later shows on reads of objects stored before.
    let mut crd: Value = serde_yaml::from_str(CRD).expect("crd yaml");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["stopMatchingBehavior"] = json!({"type": "string", "default": "WithdrawPolicies"});
    k.run(&["apply", "-f", "-"], Some(&crd.to_string())).await;
    let got = k
        .run(
            &[
                "get",
                "eventtriggers",
                "services",
                "-o",
                "jsonpath={.spec.stopMatchingBehavior}",
            ],
            None,
        )
        .await;
    assert_eq!(got, "WithdrawPolicies");
    server.shutdown().await;
}

#[tokio::test]
async fn patches_are_pruned_and_validated_like_writes() {
    let (server, k) = started().await;
    k.run(&["apply", "-f", "-"], Some(TRIGGER)).await;
    let url = format!("{BASE}/services");
    let (code, _, text) = http_with(
        &server,
        "PATCH",
        &format!("{url}?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"spec": {"bogus": 1}}"#,
    )
    .await;
    assert_eq!(code, 400, "{text}");
    let status: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        status["message"],
        "strict decoding error: unknown field \"spec.bogus\""
    );
    let (code, _, text) = http_with(
        &server,
        "PATCH",
        &url,
        "application/json-patch+json",
        r#"[{"op": "replace", "path": "/spec/oneForEvent", "value": 1}]"#,
    )
    .await;
    assert_eq!(code, 422, "{text}");
    assert!(
        text.contains("spec.oneForEvent in body must be of type boolean: \\\"integer\\\""),
        "{text}"
    );
    let (code, _, text) = http_with(
        &server,
        "PATCH",
        &format!("{url}?fieldValidation=strict"),
        "application/merge-patch+json",
        "{}",
    )
    .await;
    assert_eq!(code, 422, "{text}");
    assert!(text.contains("PatchOptions.meta.k8s.io"), "{text}");

    // Custom resources take no strategic merge patch (kubectl patch's default type).
    let err = fails(
        &k,
        &[
            "patch",
            "eventtriggers",
            "services",
            "-p",
            r#"{"spec":{"oneForEvent":false}}"#,
        ],
        "",
    )
    .await;
    assert!(
        err.contains("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"),
        "{err}"
    );

    // Server-side apply converts the configuration with the schema: an undeclared field or a
    // value of the wrong kind is a 500.
    let (code, _, text) = http_with(
        &server,
        "PATCH",
        &format!("{url}?fieldManager=ops"),
        "application/apply-patch+yaml",
        &TRIGGER.replace("oneForEvent: true", "oneForEvent: true\n  bogus: 1"),
    )
    .await;
    assert_eq!(code, 500, "{text}");
    let status: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        status["message"],
        "failed to create typed patch object (/services; test.sluice.dev/v1beta1, Kind=EventTrigger): .spec.bogus: field not declared in schema"
    );
    assert!(status.get("reason").is_none(), "{status}");
    let (code, _, text) = http_with(
        &server,
        "PATCH",
        &format!("{url}?fieldManager=ops"),
        "application/apply-patch+yaml",
        &TRIGGER.replace("oneForEvent: true", "oneForEvent: \"yes\""),
    )
    .await;
    assert_eq!(code, 500, "{text}");
    let status: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        status["message"],
        "failed to create typed patch object (/services; test.sluice.dev/v1beta1, Kind=EventTrigger): .spec.oneForEvent: expected boolean, got &{yes}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn duplicate_json_fields_are_strict_errors() {
    let (server, _k) = started().await;
    let body = r#"{"apiVersion": "test.sluice.dev/v1beta1", "kind": "EventTrigger", "metadata": {"name": "d"},
        "spec": {"sourceClusterSelector": {}, "eventSourceName": "a", "eventSourceName": "b"}}"#;
    let (code, _, text) = http_with(
        &server,
        "POST",
        &format!("{BASE}?fieldValidation=Strict"),
        "application/json",
        body,
    )
    .await;
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("strict decoding error: duplicate field \\\"spec.eventSourceName\\\""),
        "{text}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn size_limits_match_the_api_server_and_etcd() {
    let (server, _k) = started().await;
    let huge = "x".repeat(3 * 1024 * 1024 + 1);
    let (code, _, text) = http_with(&server, "POST", BASE, "application/json", &huge).await;
    assert_eq!(code, 413, "{text}");
    let status: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        status["message"],
        "Request entity too large: limit is 3145728"
    );
    assert_eq!(status["reason"], "RequestEntityTooLarge");

    let body = json!({"apiVersion": "test.sluice.dev/v1beta1", "kind": "EventTrigger",
        "metadata": {"name": "big"},
        "spec": {"sourceClusterSelector": {}, "eventSourceName": "a", "payload": "y".repeat(1600 * 1024)}});
    let (code, _, text) =
        http_with(&server, "POST", BASE, "application/json", &body.to_string()).await;
    assert_eq!(code, 500, "{text}");
    let status: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "etcdserver: request is too large", "code": 500})
    );
    server.shutdown().await;
}

#[tokio::test]
async fn config_maps_and_secrets_decode_like_the_typed_server() {
    let (server, k) = started().await;
    let cm = "/clusters/mgmt/api/v1/namespaces/default/configmaps";
    let (code, _, text) = http_with(
        &server,
        "POST",
        cm,
        "application/json",
        r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"}, "data": {"count": 3}}"#,
    )
    .await;
    assert_eq!(code, 400, "{text}");
    assert!(
        text.contains("ConfigMap in version \\\"v1\\\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string"),
        "{text}"
    );
    let err = fails(
        &k,
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keys}\ndata: {\"bad key\": x}\n",
    )
    .await;
    assert!(err.contains("data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters"), "{err}");

    k.run(
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {token: abc}\n"),
    )
    .await;
    let secret: Value =
        serde_json::from_str(&k.run(&["get", "secret", "s", "-o", "json"], None).await)
            .expect("json");
    assert_eq!(secret["data"], json!({"token": "YWJj"}));
    assert_eq!(secret["type"], "Opaque");
    assert!(secret.get("stringData").is_none(), "{secret}");
    let err = fails(
        &k,
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/basic-auth\ndata: {token: YWJj}\n",
    )
    .await;
    assert!(
        err.contains("type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable"),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_tightened_schema_ratchets_values_an_update_leaves_alone() {
    let (server, k) = started().await;
    k.run(&["apply", "-f", "-"], Some(TRIGGER)).await;
    let mut crd: Value = serde_yaml::from_str(CRD).expect("crd yaml");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["eventSourceName"]["maxLength"] = json!(2);
    k.run(&["apply", "-f", "-"], Some(&crd.to_string())).await;
    // "svc" is now too long, but a label change leaves it alone.
    k.run(&["label", "eventtriggers", "services", "team=a"], None)
        .await;
    let err = fails(
        &k,
        &[
            "patch",
            "eventtriggers",
            "services",
            "--type=merge",
            "-p",
            r#"{"spec":{"eventSourceName":"abcd"}}"#,
        ],
        "",
    )
    .await;
    assert!(
        err.contains("spec.eventSourceName: Too long: may not be more than 2 bytes"),
        "{err}"
    );
    server.shutdown().await;
}
