//! Authentication and RBAC as clients see them: 401 without a valid token, a ServiceAccount
//! getting exactly what its Roles grant (kube-rs and the real kubectl), 403 Status messages as
//! kube-apiserver writes them, server-side apply that creates needing `create`, TokenRequest
//! and SelfSubjectAccessReview.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};
use sluice_testserver::TestServer;

use super::support::{client, http_raw, server};

/// A kube-rs client from kubeconfig text.
async fn client_from(kubeconfig: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    Client::try_from(config).expect("client builds")
}

/// The Status of a failed kube-rs call: (code, reason, message).
fn denial<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason, status.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn forbidden(message: &str) -> (u16, String, String) {
    (403, "Forbidden".into(), message.into())
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("object parses");
    api.create(&PostParams::default(), &object)
        .await
        .expect("admin creates");
}

/// Namespace `team` with ServiceAccount `robot`, as the administrator.
async fn team_with_robot(server: &TestServer) -> Client {
    let admin = client(server, "mgmt").await;
    create(
        &Api::<Namespace>::all(admin.clone()),
        json!({"metadata": {"name": "team"}}),
    )
    .await;
    create(
        &Api::<ServiceAccount>::namespaced(admin.clone(), "team"),
        json!({"metadata": {"name": "robot"}}),
    )
    .await;
    admin
}

#[tokio::test]
async fn requests_without_a_valid_token_get_401() {
    let server = server(&["mgmt", "c1"]).await;
    let path = "/clusters/mgmt/api/v1/namespaces";
    for headers in [
        String::new(),
        "Authorization: Bearer not-a-token\r\n".to_string(),
        // a cluster's token is not valid in another cluster
        format!(
            "Authorization: Bearer {}\r\n",
            server.admin_token("c1").expect("c1")
        ),
        format!(
            "Authorization: Basic {}\r\n",
            server.admin_token("mgmt").expect("mgmt")
        ),
    ] {
        let (code, _, body) = http_raw(&server, "GET", path, &headers, "").await;
        let status: Value = serde_json::from_str(&body).expect("a Status");
        assert_eq!(code, 401, "{headers:?}: {body}");
        assert_eq!(
            status,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }
    let admin = format!(
        "Authorization: Bearer {}\r\n",
        server.admin_token("mgmt").expect("mgmt")
    );
    assert_eq!(http_raw(&server, "GET", path, &admin, "").await.0, 200);
    // the test harness's endpoints need no token
    assert_eq!(
        http_raw(&server, "GET", "/admin/clusters", "", "").await.0,
        200
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_service_account_gets_exactly_what_its_bindings_grant() {
    let server = server(&["mgmt"]).await;
    let admin = team_with_robot(&server).await;
    let robot = client_from(
        &server
            .service_account_kubeconfig("mgmt", "team", "robot")
            .expect("robot exists"),
    )
    .await;
    let user = "system:serviceaccount:team:robot";
    let team_cms = Api::<ConfigMap>::namespaced(robot.clone(), "team");
    let default_cms = Api::<ConfigMap>::namespaced(robot.clone(), "default");

    // discovery and version: every authenticated user (bootstrap system:discovery)
    robot.apiserver_version().await.expect("version");
    robot
        .list_api_groups()
        .await
        .expect("discovery of API groups");
    // nothing else
    assert_eq!(
        denial(team_cms.list(&Default::default()).await),
        forbidden(&format!("configmaps is forbidden: User \"{user}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\"")),
    );
    assert_eq!(
        denial(Api::<Namespace>::all(robot.clone()).list(&Default::default()).await),
        forbidden(&format!("namespaces is forbidden: User \"{user}\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope")),
    );

    // a ClusterRole bound by a RoleBinding grants it in that namespace only
    let rbac = "rbac.authorization.k8s.io/v1";
    for object in [
        json!({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "cm-editor"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]}]}),
        json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "robot-cm", "namespace": "team"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cm-editor"},
               "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}]}),
        // apply may patch Secrets, but not create them
        json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "secret-patcher", "namespace": "team"},
               "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["patch"]}]}),
        json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "secret-patcher", "namespace": "team"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secret-patcher"},
               "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}]}),
    ] {
        let kind = object["kind"].as_str().expect("kind").to_string();
        let api_resource = kube::discovery::ApiResource::from_gvk(
            &kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", &kind),
        );
        let api: Api<kube::api::DynamicObject> = match object.pointer("/metadata/namespace") {
            Some(ns) => {
                Api::namespaced_with(admin.clone(), ns.as_str().expect("ns"), &api_resource)
            }
            None => Api::all_with(admin.clone(), &api_resource),
        };
        create(&api, object).await;
    }
    // The namespace holds only the root CA the cluster puts in every namespace.
    let listed: Vec<String> = team_cms
        .list(&Default::default())
        .await
        .expect("list in team")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(listed, ["kube-root-ca.crt"]);
    create(&team_cms, json!({"metadata": {"name": "made-by-robot"}})).await;
    assert_eq!(
        denial(default_cms.list(&Default::default()).await),
        forbidden(&format!("configmaps is forbidden: User \"{user}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"")),
    );
    assert_eq!(
        denial(team_cms.delete("made-by-robot", &DeleteParams::default()).await),
        forbidden(&format!("configmaps \"made-by-robot\" is forbidden: User \"{user}\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"team\"")),
    );

    // server-side apply that would create the object also needs create
    let secrets = Api::<Secret>::namespaced(robot.clone(), "team");
    let apply = PatchParams::apply("robot");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}, "stringData": {"a": "1"}});
    assert_eq!(
        denial(secrets.patch("s1", &apply, &Patch::Apply(&secret)).await),
        forbidden(&format!("secrets \"s1\" is forbidden: User \"{user}\" cannot create resource \"secrets\" in API group \"\" in the namespace \"team\"")),
    );
    create(
        &Api::<Secret>::namespaced(admin.clone(), "team"),
        json!({"metadata": {"name": "s1"}}),
    )
    .await;
    secrets
        .patch("s1", &apply, &Patch::Apply(&secret))
        .await
        .expect("apply to an existing secret is a patch");

    // the audit log keeps every denial
    let denials = server.denials("mgmt");
    assert_eq!(denials.len(), 5, "{denials:#?}");
    assert_eq!(
        (
            denials[4].user.as_str(),
            denials[4].method.as_str(),
            denials[4].path.as_str()
        ),
        (user, "PATCH", "/api/v1/namespaces/team/secrets/s1")
    );
    assert!(denials[4]
        .message
        .contains("cannot create resource \"secrets\""));

    // SelfSubjectAccessReview (every authenticated user may ask about themselves)
    let can = |verb: &str, namespace: &str| SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some("configmaps".into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews = Api::<SelfSubjectAccessReview>::all(robot.clone());
    for (verb, namespace, allowed) in [
        ("create", "team", true),
        ("delete", "team", false),
        ("list", "default", false),
    ] {
        let review = reviews
            .create(&PostParams::default(), &can(verb, namespace))
            .await
            .expect("review");
        assert_eq!(
            review.status.map(|s| s.allowed),
            Some(allowed),
            "{verb} configmaps in {namespace}"
        );
    }

    // a token lives as long as its ServiceAccount
    Api::<ServiceAccount>::namespaced(admin.clone(), "team")
        .delete("robot", &DeleteParams::default())
        .await
        .expect("delete robot");
    assert_eq!(
        denial(team_cms.list(&Default::default()).await),
        (401, "Unauthorized".into(), "Unauthorized".into())
    );
    assert!(server
        .service_account_kubeconfig("mgmt", "team", "robot")
        .is_err());
    server.shutdown().await;
}

/// Runs kubectl; (success, stdout, stderr).
async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", kubeconfig.parent().expect("dir"))
        .output()
        .await
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

#[tokio::test]
async fn kubectl_creates_a_token_and_is_forbidden_with_it() {
    let server = server(&["mgmt"]).await;
    team_with_robot(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("admin.yaml");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).expect("write kubeconfig");

    let (ok, token, err) = kubectl(&kubeconfig, &["create", "token", "robot", "-n", "team"]).await;
    assert!(ok && !token.is_empty(), "kubectl create token: {err}");
    let (ok, _, err) = kubectl(
        &kubeconfig,
        &["get", "configmaps", "-n", "team", "--token", &token],
    )
    .await;
    assert!(!ok);
    assert_eq!(
        err,
        "Error from server (Forbidden): configmaps is forbidden: User \"system:serviceaccount:team:robot\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
    );
    // kubectl auth can-i sends a protobuf SelfSubjectAccessReview; exit code 1 means no
    for (args, answer) in [
        (
            vec!["auth", "can-i", "list", "configmaps", "-n", "team"],
            "no",
        ),
        (vec!["auth", "can-i", "get", "/version"], "yes"),
        (vec!["auth", "can-i", "get", "/metrics"], "no"),
    ] {
        let args = [args.as_slice(), &["--token", &token]].concat();
        let (ok, out, err) = kubectl(&kubeconfig, &args).await;
        assert_eq!(
            (ok, out.as_str()),
            (answer == "yes", answer),
            "{args:?}: {err}"
        );
    }
    let (ok, out, err) = kubectl(&kubeconfig, &["auth", "can-i", "delete", "clusterroles"]).await;
    assert!(ok && out == "yes", "the administrator may: {err}");
    // The identity endpoints only create: anything else is 405, as kube-apiserver's router says.
    for args in [
        &["get", "selfsubjectaccessreviews"][..],
        // (`--raw` drops the server URL's path: the cluster's prefix goes into the path)
        &[
            "get",
            "--raw",
            "/clusters/mgmt/api/v1/namespaces/team/serviceaccounts/robot/token",
        ],
    ] {
        let (ok, _, err) = kubectl(&kubeconfig, args).await;
        assert!(!ok);
        assert_eq!(
            err,
            "Error from server (MethodNotAllowed): the server does not allow this method on the requested resource",
            "{args:?}"
        );
    }
    let (ok, _, err) = kubectl(&kubeconfig, &["create", "token", "nobody", "-n", "team"]).await;
    assert!(!ok);
    assert!(
        err.contains("serviceaccounts \"nobody\" not found"),
        "{err}"
    );
    // with the admin kubeconfig as before
    let (ok, out, err) = kubectl(
        &kubeconfig,
        &[
            "get",
            "clusterrolebinding",
            "cluster-admin",
            "-o",
            "jsonpath={.subjects[0].name}",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "system:masters");
    server.shutdown().await;
}

/// A GET over plain HTTP to `addr` with the given header lines; returns the status code.
async fn plain_get(addr: &str, path: &str, headers: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("writes");
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.expect("reads");
    String::from_utf8_lossy(&out)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn per_cluster_ports_serve_tls_and_enforce_authentication_and_rbac() {
    let server = super::support::server_with(sluice_testserver::Config {
        clusters: vec!["mgmt".into(), "c1".into()],
        port_per_cluster: true,
        ..Default::default()
    })
    .await;
    let url = server.cluster_url("mgmt");
    let addr = url
        .strip_prefix("https://127.0.0.1:")
        .map(|port| format!("127.0.0.1:{port}"))
        .unwrap_or_else(|| panic!("{url} is not https://127.0.0.1:<port>"));
    assert_ne!(addr, server.addr().to_string());

    // admin and ServiceAccount kubeconfigs point at the port, with the authority and a token
    let admin = team_with_robot(&server).await;
    let kubeconfig = server
        .service_account_kubeconfig("mgmt", "team", "robot")
        .expect("robot exists");
    let parsed: Value = serde_yaml::from_str(&kubeconfig).expect("kubeconfig is YAML");
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(server.ca_pem());
    assert_eq!(
        parsed["clusters"][0]["cluster"],
        json!({"server": url, "certificate-authority-data": ca})
    );
    assert!(parsed["users"][0]["user"]["token"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    let robot = client_from(&kubeconfig).await;
    let user = "system:serviceaccount:team:robot";
    let team_cms = Api::<ConfigMap>::namespaced(robot.clone(), "team");
    assert_eq!(
        denial(team_cms.list(&Default::default()).await),
        forbidden(&format!("configmaps is forbidden: User \"{user}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\"")),
    );
    let rbac = "rbac.authorization.k8s.io/v1";
    for object in [
        json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "cm-reader", "namespace": "team"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
        json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "robot-cm", "namespace": "team"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}]}),
    ] {
        let kind = object["kind"].as_str().expect("kind").to_string();
        let api_resource = kube::discovery::ApiResource::from_gvk(
            &kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", &kind),
        );
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(admin.clone(), "team", &api_resource);
        create(&api, object).await;
    }
    team_cms
        .list(&Default::default())
        .await
        .expect("the Role granted list in team");
    assert_eq!(server.denials("mgmt").len(), 1);

    // plain HTTP on the port: no token or another cluster's token is 401, the admin token works
    let path = "/api/v1/namespaces";
    assert_eq!(plain_get(&addr, path, "").await, 401);
    let c1_token = format!(
        "Authorization: Bearer {}\r\n",
        server.admin_token("c1").expect("c1")
    );
    assert_eq!(plain_get(&addr, path, &c1_token).await, 401);
    let mgmt_token = format!(
        "Authorization: Bearer {}\r\n",
        server.admin_token("mgmt").expect("mgmt")
    );
    assert_eq!(plain_get(&addr, path, &mgmt_token).await, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_create_role_binding_and_token_send_protobuf_the_server_reads() {
    let server = server(&["mgmt"]).await;
    team_with_robot(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("admin.yaml");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).expect("write kubeconfig");
    let run = |args: &'static [&'static str]| {
        let kubeconfig = kubeconfig.clone();
        async move {
            let (ok, out, err) = kubectl(&kubeconfig, args).await;
            assert!(ok, "kubectl {args:?}: {err}");
            out
        }
    };

    // TokenRequest: the requested duration and audience are honoured
    let request: Value = serde_json::from_str(
        &run(&[
            "create",
            "token",
            "robot",
            "-n",
            "team",
            "--duration",
            "10m",
            "--audience",
            "sluice",
            "-o",
            "json",
        ])
        .await,
    )
    .expect("kubectl prints the TokenRequest");
    // (kubectl prints the typed object: Go writes the absent boundObjectRef as null)
    assert_eq!(
        request["spec"],
        json!({"audiences": ["sluice"], "boundObjectRef": null, "expirationSeconds": 600})
    );
    let token = request["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();

    // typed create of RBAC objects (protobuf bodies): the robot may list secrets in team, and
    // read what `view` (aggregated by the controller) grants everywhere
    assert_eq!(
        run(&[
            "create",
            "role",
            "secret-lister",
            "-n",
            "team",
            "--verb=list",
            "--resource=secrets"
        ])
        .await,
        "role.rbac.authorization.k8s.io/secret-lister created"
    );
    assert_eq!(
        run(&[
            "create",
            "rolebinding",
            "robot-secrets",
            "-n",
            "team",
            "--role=secret-lister",
            "--serviceaccount=team:robot"
        ])
        .await,
        "rolebinding.rbac.authorization.k8s.io/robot-secrets created"
    );
    assert_eq!(
        run(&[
            "create",
            "clusterrolebinding",
            "robot-view",
            "--clusterrole=view",
            "--serviceaccount=team:robot"
        ])
        .await,
        "clusterrolebinding.rbac.authorization.k8s.io/robot-view created"
    );
    let binding: Value = serde_json::from_str(
        &run(&[
            "get",
            "rolebinding",
            "robot-secrets",
            "-n",
            "team",
            "-o",
            "json",
        ])
        .await,
    )
    .expect("json");
    assert_eq!(
        (&binding["roleRef"], &binding["subjects"]),
        (
            &json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secret-lister"}),
            &json!([{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}])
        )
    );
    for (verb, resource, namespace, answer) in [
        ("list", "secrets", "team", "yes"),
        ("list", "secrets", "default", "no"),
        ("delete", "secrets", "team", "no"),
        ("list", "configmaps", "default", "yes"),
        ("watch", "deployments.apps", "default", "yes"),
        ("delete", "configmaps", "team", "no"),
    ] {
        let (ok, out, err) = kubectl(
            &kubeconfig,
            &[
                "auth", "can-i", verb, resource, "-n", namespace, "--token", &token,
            ],
        )
        .await;
        assert_eq!(
            (ok, out.as_str()),
            (answer == "yes", answer),
            "{verb} {resource} in {namespace}: {err}"
        );
    }
    let (ok, out, err) = kubectl(
        &kubeconfig,
        &[
            "get",
            "configmaps",
            "-n",
            "team",
            "--token",
            &token,
            "-o",
            "name",
        ],
    )
    .await;
    // Only the root CA the cluster puts in every namespace.
    assert!(
        ok && out.trim() == "configmap/kube-root-ca.crt",
        "{out} {err}"
    );

    // `auth whoami` (a SelfSubjectReview): the ServiceAccount, its uid and its groups.
    let uid = run(&[
        "get",
        "serviceaccount",
        "robot",
        "-n",
        "team",
        "-o",
        "jsonpath={.metadata.uid}",
    ])
    .await;
    let (ok, out, err) = kubectl(
        &kubeconfig,
        &["auth", "whoami", "-o", "json", "--token", &token],
    )
    .await;
    assert!(ok, "kubectl auth whoami: {err}");
    let review: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (&review["apiVersion"], &review["kind"]),
        (
            &json!("authentication.k8s.io/v1"),
            &json!("SelfSubjectReview")
        )
    );
    assert_eq!(
        review["status"]["userInfo"],
        json!({
            "username": "system:serviceaccount:team:robot",
            "uid": uid,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"],
        })
    );
    // Discovery lists the identity endpoints as kube-apiserver does.
    let listed = run(&["api-resources", "-o", "name"]).await;
    assert_eq!(
        listed
            .lines()
            .filter(|name| name.contains("review"))
            .collect::<Vec<_>>(),
        [
            "selfsubjectreviews.authentication.k8s.io",
            "selfsubjectaccessreviews.authorization.k8s.io",
            "selfsubjectrulesreviews.authorization.k8s.io",
        ]
    );
    let (ok, out, err) = kubectl(&kubeconfig, &["auth", "whoami"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        out.lines()
            .map(str::split_whitespace)
            .map(Iterator::collect::<Vec<_>>)
            .collect::<Vec<_>>(),
        [
            vec!["ATTRIBUTE", "VALUE"],
            vec!["Username", "kubernetes-admin"],
            vec!["Groups", "[system:masters", "system:authenticated]"],
        ],
        "{out}"
    );

    // `auth can-i --list` (a SelfSubjectRulesReview): the Role bound in team is listed there
    // and not in another namespace; `view`, bound cluster-wide, and what every authenticated
    // user may, everywhere; URLs apart.
    let rules = |namespace: &'static str| {
        let kubeconfig = kubeconfig.clone();
        let token = token.clone();
        async move {
            let (ok, out, err) = kubectl(
                &kubeconfig,
                &[
                    "auth", "can-i", "--list", "-n", namespace, "--token", &token,
                ],
            )
            .await;
            assert!(ok, "kubectl auth can-i --list: {err}");
            out.lines()
                .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
        }
    };
    let in_team = rules("team").await;
    let elsewhere = rules("default").await;
    for rows in [&in_team, &elsewhere] {
        for row in [
            "Resources Non-Resource URLs Resource Names Verbs",
            "selfsubjectreviews.authentication.k8s.io [] [] [create]",
            "configmaps [] [] [get list watch]",
            "endpointslices.discovery.k8s.io [] [] [get list watch]",
            "[/version] [] [get]",
        ] {
            assert!(rows.iter().any(|r| r == row), "{row:?} not in {rows:#?}");
        }
    }
    assert!(
        in_team.iter().any(|r| r == "secrets [] [] [list]"),
        "{in_team:#?}"
    );
    assert!(
        !elsewhere.iter().any(|r| r.starts_with("secrets ")),
        "{elsewhere:#?}"
    );
    server.shutdown().await;
}

/// kube-controller-manager's ClusterRole aggregation, as a CRD's installer uses it: a
/// ClusterRole labelled `aggregate-to-view` extends `view`, and through it `edit` and `admin`
/// (which aggregate `view` and `edit` in turn); deleting it takes its rules away again, and
/// what is written into an aggregated role's rules is replaced.
#[tokio::test]
async fn labelled_cluster_roles_are_aggregated_into_view_edit_and_admin() {
    let server = server(&["mgmt"]).await;
    team_with_robot(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("admin.yaml");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).expect("write kubeconfig");
    let run = |args: Vec<&'static str>| {
        let kubeconfig = kubeconfig.clone();
        async move {
            let (ok, out, err) = kubectl(&kubeconfig, &args).await;
            assert!(ok, "kubectl {args:?}: {err}");
            out
        }
    };
    let rules_of = |role: &'static str| async move {
        let role: Value =
            serde_json::from_str(&run(vec!["get", "clusterrole", role, "-o", "json"]).await)
                .expect("json");
        role["rules"].as_array().cloned().unwrap_or_default()
    };
    let lease_rule = json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]});
    let (view, edit, admin) = (
        rules_of("view").await,
        rules_of("edit").await,
        rules_of("admin").await,
    );
    let pods_read = json!({"apiGroups": [""], "resources": ["configmaps", "endpoints",
        "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers",
        "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"],
        "verbs": ["get", "list", "watch"]});
    assert_eq!(view.first(), Some(&pods_read), "{view:#?}");
    assert!(
        view.iter().all(|rule| edit.contains(rule)),
        "edit holds view"
    );
    assert!(
        edit.iter().all(|rule| admin.contains(rule)),
        "admin holds edit"
    );
    assert!(edit.len() > view.len() && admin.len() > edit.len());
    assert!(!view.contains(&lease_rule));

    run(vec![
        "create",
        "clusterrole",
        "lease-reader",
        "--verb=get,list,watch",
        "--resource=leases.coordination.k8s.io",
    ])
    .await;
    run(vec![
        "label",
        "clusterrole",
        "lease-reader",
        "rbac.authorization.k8s.io/aggregate-to-view=true",
    ])
    .await;
    run(vec![
        "create",
        "rolebinding",
        "robot-view",
        "-n",
        "team",
        "--clusterrole=view",
        "--serviceaccount=team:robot",
    ])
    .await;
    let token = run(vec!["create", "token", "robot", "-n", "team"]).await;
    let can_list_leases = || {
        let kubeconfig = kubeconfig.clone();
        let token = token.clone();
        async move {
            let (_, out, _) = kubectl(
                &kubeconfig,
                &[
                    "auth",
                    "can-i",
                    "list",
                    "leases.coordination.k8s.io",
                    "-n",
                    "team",
                    "--token",
                    &token,
                ],
            )
            .await;
            out
        }
    };
    assert!(rules_of("view").await.contains(&lease_rule));
    assert!(
        rules_of("admin").await.contains(&lease_rule),
        "through edit"
    );
    assert_eq!(can_list_leases().await, "yes");

    // What is written into an aggregated role is the controller's to replace.
    run(vec![
        "patch",
        "clusterrole",
        "view",
        "--type=merge",
        "-p",
        r#"{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}"#,
    ])
    .await;
    let view = rules_of("view").await;
    assert!(
        view.contains(&lease_rule) && !view.iter().any(|rule| rule["verbs"] == json!(["*"])),
        "{view:#?}"
    );
    // The controller applies the rules, forcing them from whoever wrote them.
    let view: Value = serde_json::from_str(
        &run(vec![
            "get",
            "clusterrole",
            "view",
            "--show-managed-fields",
            "-o",
            "json",
        ])
        .await,
    )
    .expect("json");
    let managers = view["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let owns_rules = |entry: &&Value| entry["fieldsV1"].get("f:rules").is_some();
    let owners: Vec<(&str, &str)> = managers
        .iter()
        .filter(owns_rules)
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or(""),
                e["operation"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        owners,
        vec![("clusterrole-aggregation-controller", "Apply")],
        "{managers:#?}"
    );

    run(vec!["delete", "clusterrole", "lease-reader"]).await;
    assert!(!rules_of("view").await.contains(&lease_rule));
    assert!(!rules_of("admin").await.contains(&lease_rule));
    assert_eq!(can_list_leases().await, "no");
    server.shutdown().await;
}

/// RBAC's escalation prevention through kubectl: a ServiceAccount allowed to write Roles and
/// RoleBindings in its namespace grants there only what it holds itself; kube-apiserver's
/// message lists what it lacks.
#[tokio::test]
async fn a_user_grants_only_what_it_holds() {
    let server = server(&["mgmt"]).await;
    team_with_robot(&server).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("admin.yaml");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).expect("write kubeconfig");
    for args in [
        &[
            "create",
            "role",
            "rbac-writer",
            "-n",
            "team",
            "--verb=create,get",
            "--resource=roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io,configmaps",
        ][..],
        &[
            "create",
            "rolebinding",
            "robot-rbac",
            "-n",
            "team",
            "--role=rbac-writer",
            "--serviceaccount=team:robot",
        ],
    ] {
        let (ok, _, err) = kubectl(&kubeconfig, args).await;
        assert!(ok, "{args:?}: {err}");
    }
    let (ok, token, err) = kubectl(&kubeconfig, &["create", "token", "robot", "-n", "team"]).await;
    assert!(ok, "{err}");
    let as_robot = |args: &[&str]| {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["-n".into(), "team".into(), "--token".into(), token.clone()]);
        let kubeconfig = kubeconfig.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(&kubeconfig, &args).await
        }
    };

    let (ok, out, err) = as_robot(&[
        "create",
        "role",
        "cm-reader",
        "--verb=get",
        "--resource=configmaps",
    ])
    .await;
    assert!(ok, "held: {err}");
    assert_eq!(out, "role.rbac.authorization.k8s.io/cm-reader created");
    let (ok, _, err) = as_robot(&[
        "create",
        "role",
        "secret-reader",
        "--verb=get,list",
        "--resource=secrets,configmaps",
    ])
    .await;
    assert!(!ok);
    assert!(
        err.ends_with(
            "roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: user \
             \"system:serviceaccount:team:robot\" (groups=[\"system:serviceaccounts\" \
             \"system:serviceaccounts:team\" \"system:authenticated\"]) is attempting to grant \
             RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"list\"]}\n\
             {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
        ),
        "{err}"
    );
    let (ok, _, err) = as_robot(&[
        "create",
        "rolebinding",
        "bob-reads",
        "--role=cm-reader",
        "--user=bob",
    ])
    .await;
    assert!(ok, "a role within what it holds: {err}");
    let (ok, _, err) = as_robot(&[
        "create",
        "rolebinding",
        "bob-admin",
        "--clusterrole=admin",
        "--user=bob",
    ])
    .await;
    assert!(!ok);
    assert!(
        err.contains("rolebindings.rbac.authorization.k8s.io \"bob-admin\" is forbidden: user \"system:serviceaccount:team:robot\"")
            && err.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"bindings\"], Verbs:[\"get\" \"list\" \"watch\"]}\n")
            && err.contains("\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\" \"deletecollection\" \"patch\" \"update\" \"list\" \"watch\"]}\n"),
        "{err}"
    );
    let (ok, _, err) = as_robot(&[
        "create",
        "rolebinding",
        "bob-nothing",
        "--clusterrole=absent",
        "--user=bob",
    ])
    .await;
    assert!(!ok);
    assert!(
        err.ends_with("clusterroles.rbac.authorization.k8s.io \"absent\" not found"),
        "{err}"
    );
    // The administrator (system:masters) grants anything, a role that does not exist too.
    let (ok, _, err) = kubectl(
        &kubeconfig,
        &[
            "create",
            "rolebinding",
            "bob-admin",
            "-n",
            "team",
            "--clusterrole=admin",
            "--user=bob",
        ],
    )
    .await;
    assert!(ok, "{err}");
    server.shutdown().await;
}
