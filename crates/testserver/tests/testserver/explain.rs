//! `kubectl explain` through the test server: the real kubectl reads the OpenAPI v3 documents and
//! describes CRD fields, their children and our descriptions, in both served versions, and the
//! core kinds that have a published schema.

use sluice_testserver::{Config, TestServer};
use tokio::process::Command;

use super::support::server_with;

/// Runs `kubectl explain ARGS` against the first cluster; returns stdout, failing with stderr.
async fn explain(server: &TestServer, args: &[&str]) -> String {
    let home = tempfile::tempdir().expect("tempdir");
    let kubeconfig = home.path().join("kubeconfig.yaml");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).expect("write kubeconfig");
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("explain")
        .args(args)
        .env("HOME", home.path())
        .kill_on_drop(true)
        .output()
        .await
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "kubectl explain {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

async fn server() -> TestServer {
    server_with(Config {
        clusters: vec!["mgmt".into()],
        sveltos_crds: true,
        ..Config::default()
    })
    .await
}

/// kubectl wraps descriptions at 80 columns: compare text with whitespace collapsed.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn kubectl_explain_describes_event_trigger_policy_refs_and_their_fields() {
    let server = server().await;
    let out = explain(&server, &["eventtrigger.spec.policyRefs"]).await;
    let text = flat(&out);
    for expected in [
        "GROUP: lib.projectsveltos.io",
        "KIND: EventTrigger",
        "VERSION: v1beta1",
        "FIELD: policyRefs <[]Object>",
        "ConfigMaps, Secrets and Flux sources whose resources are deployed to the matching clusters.",
        "deploymentType <string> enum: Local, Remote",
        "Remote deploys to the managed cluster; Local deploys to the management cluster.",
        "kind <string> enum: GitRepository, OCIRepository, Bucket, ConfigMap, ....",
        "remoteURL <Object>",
        "tier <integer>",
        "Priority when two profiles deploy the same object: the lower tier wins.",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{out}");
    }
    for field in [
        "force",
        "name",
        "namespace",
        "optional",
        "path",
        "skipNamespaceCreation",
    ] {
        assert!(
            out.contains(&format!("\n  {field}\t<")),
            "field {field} not listed:\n{out}"
        );
    }

    // A leaf, and the legacy version where the selector is a string.
    let out = explain(
        &server,
        &["eventtrigger.spec.sourceClusterSelector.matchLabels"],
    )
    .await;
    assert!(
        flat(&out).contains("FIELD: matchLabels <map[string]string>"),
        "{out}"
    );
    let out = explain(
        &server,
        &[
            "eventtrigger.spec.sourceClusterSelector",
            "--api-version",
            "lib.projectsveltos.io/v1alpha1",
        ],
    )
    .await;
    let text = flat(&out);
    assert!(text.contains("VERSION: v1alpha1"), "{out}");
    assert!(
        text.contains("FIELD: sourceClusterSelector <string>"),
        "{out}"
    );
    assert!(
        text.contains("as a label selector string (for example env=fv)"),
        "{out}"
    );
}

#[tokio::test]
async fn kubectl_explain_lists_event_source_spec_fields_in_both_versions() {
    let server = server().await;
    let out = explain(&server, &["eventsources.spec"]).await;
    let text = flat(&out);
    assert!(text.contains("KIND: EventSource"), "{out}");
    assert!(text.contains("VERSION: v1beta1"), "{out}");
    for (field, kind, description) in [
        (
            "aggregatedSelection",
            "string",
            "Lua source defining evaluate(); it receives every selected object at once",
        ),
        (
            "collectResources",
            "boolean",
            "When true, the matching objects are copied in full into the EventReport.",
        ),
        (
            "messagingMatchCriteria",
            "[]Object",
            "CloudEvents that are events",
        ),
        (
            "resourceSelectors",
            "[]Object",
            "Selects the objects that are events; the union of all selectors.",
        ),
    ] {
        assert!(
            out.contains(&format!("\n  {field}\t<{kind}>")),
            "{field} <{kind}> not listed:\n{out}"
        );
        assert!(
            text.contains(description),
            "description of {field} missing:\n{out}"
        );
    }
    assert!(
        !out.contains("script\t"),
        "the v1beta1 spec has no flat script field:\n{out}"
    );

    let out = explain(
        &server,
        &[
            "eventsources.spec",
            "--api-version",
            "lib.projectsveltos.io/v1alpha1",
        ],
    )
    .await;
    let text = flat(&out);
    assert!(text.contains("VERSION: v1alpha1"), "{out}");
    for field in [
        "group",
        "version",
        "kind",
        "namespace",
        "labelFilters",
        "labelsFilters",
        "script",
        "resourceSelectors",
    ] {
        assert!(
            out.contains(&format!("\n  {field}\t<")),
            "v1alpha1 field {field} not listed:\n{out}"
        );
    }
    assert!(
        text.contains("Flat form: Lua source defining evaluate(obj)"),
        "{out}"
    );

    // The metadata reference resolves to the ObjectMeta schema.
    let out = explain(&server, &["eventsources.metadata.labels"]).await;
    assert!(
        flat(&out).contains("Key/value pairs used to select objects."),
        "{out}"
    );
}

#[tokio::test]
async fn kubectl_explain_describes_capi_cluster_and_sveltos_cluster() {
    let server = server().await;
    let out = explain(
        &server,
        &["clusters.cluster.x-k8s.io.spec.controlPlaneEndpoint"],
    )
    .await;
    let text = flat(&out);
    assert!(text.contains("GROUP: cluster.x-k8s.io"), "{out}");
    assert!(out.contains("\n  host\t<string> -required-"), "{out}");
    assert!(out.contains("\n  port\t<integer> -required-"), "{out}");
    let out = explain(&server, &["sveltoscluster.spec.paused"]).await;
    assert!(
        flat(&out).contains("When true, nothing is deployed to the cluster"),
        "{out}"
    );
}

#[tokio::test]
async fn kubectl_explain_describes_every_built_in_kind() {
    let server = server().await;
    let out = explain(&server, &["service.spec.ports"]).await;
    let text = flat(&out);
    assert!(text.contains("KIND: Service"), "{out}");
    assert!(out.contains("\n  port\t<integer> -required-"), "{out}");
    assert!(
        text.contains("Number or name of the port to access on the pods targeted by the service."),
        "{out}"
    );
    let out = explain(&server, &["configmap"]).await;
    assert!(out.contains("\n  binaryData\t<map[string]string>"), "{out}");
    let out = explain(&server, &["deployment.spec.strategy"]).await;
    let text = flat(&out);
    assert!(text.contains("GROUP: apps"), "{out}");
    assert!(
        out.contains("\n  rollingUpdate\t<RollingUpdateDeployment>"),
        "{out}"
    );
    let out = explain(
        &server,
        &["cronjob.spec.jobTemplate.spec.template.spec.containers.image"],
    )
    .await;
    assert!(flat(&out).contains("FIELD: image <string>"), "{out}");
}
