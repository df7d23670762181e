//! The garbage collector through the real kubectl: `kubectl delete --cascade=background|
//! foreground|orphan` on owners with dependents, dependents with another owner, a foreground
//! owner held by a dependent's finalizer, and objects whose owners never existed.

use serde_json::Value;

use super::kubectl::Kubectl;
use super::support::{http, server};

fn config_map(name: &str, owners: &[(&str, &str, bool)], finalizer: Option<&str>) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n");
    if let Some(f) = finalizer {
        yaml.push_str(&format!("  finalizers: [{f}]\n"));
    }
    if !owners.is_empty() {
        yaml.push_str("  ownerReferences:\n");
        for (owner, uid, block) in owners {
            yaml.push_str(&format!(
                "  - {{apiVersion: v1, kind: ConfigMap, name: {owner}, uid: {uid}, blockOwnerDeletion: {block}}}\n"
            ));
        }
    }
    yaml
}

async fn create(k: &Kubectl, name: &str, owners: &[(&str, &str, bool)], finalizer: Option<&str>) {
    k.run(
        &["create", "-f", "-"],
        Some(&config_map(name, owners, finalizer)),
    )
    .await;
}

async fn uid(k: &Kubectl, name: &str) -> String {
    let obj = k.get(&["cm", name]).await;
    obj["metadata"]["uid"].as_str().expect("uid").to_string()
}

/// The names of the ConfigMaps in `default` (the root CA left out).
async fn names(k: &Kubectl) -> Vec<String> {
    let list = k.get(&["cm"]).await;
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .filter(|n| *n != "kube-root-ca.crt")
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn kubectl_delete_cascades_to_dependents_as_the_garbage_collector_does() {
    let server = server(&["mgmt"]).await;
    let k = Kubectl::new(&server);

    // Background (kubectl's default): the owner and what depends only on it go; a dependent
    // with another owner stays and loses its reference to the one gone.
    create(&k, "owner", &[], None).await;
    create(&k, "keeper", &[], None).await;
    let (owner, keeper) = (uid(&k, "owner").await, uid(&k, "keeper").await);
    create(&k, "only-owned", &[("owner", &owner, true)], None).await;
    create(
        &k,
        "shared",
        &[("owner", &owner, false), ("keeper", &keeper, false)],
        None,
    )
    .await;
    k.run(&["delete", "cm", "owner"], None).await;
    assert_eq!(names(&k).await, ["keeper", "shared"]);
    let shared = k.get(&["cm", "shared"]).await;
    let refs = shared["metadata"]["ownerReferences"]
        .as_array()
        .expect("refs");
    assert_eq!(refs.len(), 1, "{shared}");
    assert_eq!(refs[0]["uid"], keeper.as_str());

    // Orphan: the dependent stays without its reference.
    create(&k, "parent", &[], None).await;
    let parent = uid(&k, "parent").await;
    create(&k, "orphaned", &[("parent", &parent, true)], None).await;
    k.run(&["delete", "cm", "parent", "--cascade=orphan"], None)
        .await;
    assert_eq!(names(&k).await, ["keeper", "orphaned", "shared"]);
    let orphaned = k.get(&["cm", "orphaned"]).await;
    assert_eq!(
        orphaned["metadata"].get("ownerReferences"),
        None,
        "{orphaned}"
    );

    // Foreground: the owner waits, marked, while a blocking dependent is held by a finalizer;
    // the others are gone at once; it goes when the blocking one does.
    create(&k, "fg", &[], None).await;
    let fg = uid(&k, "fg").await;
    create(&k, "held", &[("fg", &fg, true)], Some("example.com/hold")).await;
    create(&k, "free", &[("fg", &fg, true)], None).await;
    k.run(
        &["delete", "cm", "fg", "--cascade=foreground", "--wait=false"],
        None,
    )
    .await;
    let waiting = k.get(&["cm", "fg"]).await;
    assert_eq!(
        waiting["metadata"]["finalizers"],
        serde_json::json!(["foregroundDeletion"]),
        "{waiting}"
    );
    assert!(waiting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        names(&k).await,
        ["fg", "held", "keeper", "orphaned", "shared"]
    );
    let held = k.get(&["cm", "held"]).await;
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    k.run(
        &[
            "patch",
            "cm",
            "held",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
        None,
    )
    .await;
    assert_eq!(names(&k).await, ["keeper", "orphaned", "shared"]);

    // An object whose owners never existed is collected.
    let (ok, _, _) = k
        .try_run(
            &["create", "-f", "-"],
            Some(&config_map(
                "stray",
                &[("ghost", "00000000-0000-0000-0000-000000000000", false)],
                None,
            )),
        )
        .await;
    assert!(ok);
    assert_eq!(names(&k).await, ["keeper", "orphaned", "shared"]);
}

#[tokio::test]
async fn delete_options_are_validated() {
    let server = server(&["mgmt"]).await;
    let k = Kubectl::new(&server);
    create(&k, "x", &[], None).await;
    let path = "/clusters/mgmt/api/v1/namespaces/default/configmaps/x";
    let (code, body) = http(&server, "DELETE", path, "{not json").await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = http(
        &server,
        "DELETE",
        path,
        r#"{"propagationPolicy":"Eventually"}"#,
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let status: Value = serde_json::from_str(&body).expect("json");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains(r#"propagationPolicy: Unsupported value: "Eventually""#)),
        "{body}"
    );
    assert_eq!(names(&k).await, ["x"]);
}

#[tokio::test]
async fn a_delete_answers_with_a_status_or_the_object_as_kube_apiserver_does() {
    let server = server(&["mgmt"]).await;
    let k = Kubectl::new(&server);
    create(&k, "plain", &[], None).await;
    create(&k, "held", &[], Some("example.com/hold")).await;
    k.run(
        &["create", "service", "clusterip", "web", "--tcp=80:8080"],
        None,
    )
    .await;
    let delete = |path: &str| {
        let path = format!("/clusters/mgmt/api/v1/namespaces/default/{path}");
        let server = &server;
        async move {
            let (code, body) = http(server, "DELETE", &path, "").await;
            assert_eq!(code, 200, "{body}");
            serde_json::from_str::<Value>(&body).expect("json")
        }
    };
    // Deleted at once: a Status naming it (kube-rs's `Either::Right`).
    let answer = delete("configmaps/plain").await;
    assert_eq!(answer["kind"], "Status", "{answer}");
    assert_eq!(answer["status"], "Success");
    assert_eq!(answer["details"]["name"], "plain");
    assert_eq!(answer["details"]["kind"], "configmaps");
    // Held by a finalizer: the object, marked.
    let answer = delete("configmaps/held").await;
    assert_eq!(answer["kind"], "ConfigMap", "{answer}");
    assert!(answer["metadata"]["deletionTimestamp"].is_string());
    // A Service's registry returns what it deleted.
    let answer = delete("services/web").await;
    assert_eq!(answer["kind"], "Service", "{answer}");
    // An object with a generation held by a finalizer: marked, its generation one higher.
    k.run(
        &[
            "create",
            "deployment",
            "api",
            "--image=busybox",
            "--replicas=0",
        ],
        None,
    )
    .await;
    k.run(
        &[
            "patch",
            "deployment",
            "api",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ],
        None,
    )
    .await;
    let before = k.get(&["deployment", "api"]).await["metadata"]["generation"].clone();
    assert_eq!(before, 1);
    let path = "/clusters/mgmt/apis/apps/v1/namespaces/default/deployments/api";
    let (code, body) = http(&server, "DELETE", path, "").await;
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert!(
        answer["metadata"]["deletionTimestamp"].is_string(),
        "{answer}"
    );
    assert_eq!(answer["metadata"]["generation"], 2, "{answer}");
    // Deleted again while it is held: no further bump.
    let (_, body) = http(&server, "DELETE", path, "").await;
    let again: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(again["metadata"]["generation"], 2, "{again}");
}
