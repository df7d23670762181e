//! The renderer's pure core on the seeds' own YAML: generators with templateResourceRefs
//! (seed 001), cross-cluster instantiation for a v1alpha1 EventTrigger (seed 003), the
//! CloudEvent actions (seed 004), `valuesFrom`, and errors that say where.

use serde_json::{json, Value};
use sluice_domain::cluster::Cluster;
use sluice_domain::config::{labels_of, ConfigState};
use sluice_domain::naming;
use sluice_proto::v1 as pb;
use sluice_template::TemplateCache;

use super::*;

const SEED_001_TRIGGER: &str =
    include_str!("../../../../examples/seed-001-credentials/eventtrigger.yaml");
const SEED_001_CONFIGMAPS: &str =
    include_str!("../../../../examples/seed-001-credentials/configmaps.yaml");
const SEED_003_TRIGGER: &str =
    include_str!("../../../../examples/seed-003-cross-cluster/eventtrigger.yaml");
const SEED_004: &str = include_str!("../../../../examples/seed-004-cloudevents/eventtrigger.yaml");
const SEED_004_LOGIN: &str = include_str!("../../../../examples/seed-004-cloudevents/login.json");
const SEED_004_LOGOUT: &str = include_str!("../../../../examples/seed-004-cloudevents/logout.json");

fn config(yaml: &[&str]) -> ConfigState {
    let mut state = ConfigState::default();
    for text in yaml {
        for doc in serde_yaml::Deserializer::from_str(text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("seed YAML parses");
            if value.is_null() {
                continue;
            }
            let kind = value["kind"].as_str().unwrap_or_default().to_string();
            let ns = value["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            state.apply(&kind, &ns, &name, Some(&value));
        }
    }
    state
}

fn cluster(name: &str, labels: Value) -> Cluster {
    Cluster::from_object(&json!({
        "apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "status": {"ready": true}
    }))
    .expect("a SveltosCluster")
}

fn trigger<'s>(state: &'s ConfigState, name: &str) -> &'s EventTrigger {
    state.event_triggers[name].as_ref().expect("trigger parses")
}

fn match_set(event_source: &str, resources: &[Value]) -> pb::MatchSet {
    pb::MatchSet {
        event_source: event_source.into(),
        matching: resources.iter().map(sluice_wire::object_ref).collect(),
        resources: resources
            .iter()
            .map(|r| serde_json::to_vec(r).expect("json"))
            .collect(),
        ..Default::default()
    }
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": {"secret": "required"}}})
}

fn render(
    state: &ConfigState,
    trigger_name: &str,
    cluster: &Cluster,
    set: &pb::MatchSet,
) -> Result<Vec<Desired>, RenderError> {
    let templates = TemplateCache::new(64);
    let ctx = Context {
        config: state,
        templates: &templates,
        sveltos_namespace: "projectsveltos",
    };
    desired_state(&ctx, trigger(state, trigger_name), cluster, set)
}

fn find<'d>(objects: &'d [Desired], kind: &str, name: &str) -> &'d Value {
    &objects
        .iter()
        .find(|d| d.object["kind"] == kind && d.object["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} not rendered: {objects:#?}"))
        .object
}

#[test]
fn seed_001_generator_output_is_named_by_name_format_and_fetched_by_template_resource_refs() {
    let state = config(&[SEED_001_TRIGGER, SEED_001_CONFIGMAPS]);
    let workload = cluster("workload", json!({"env": "production"}));
    let set = match_set(
        "requiring-credentials",
        &[namespace("eng"), namespace("hr")],
    );
    let objects = render(&state, "distribute-credentials", &workload, &set).expect("renders");
    assert_eq!(objects.len(), 2, "{objects:#?}");

    let generated = find(&objects, "ConfigMap", "default-workload-namespaces");
    assert_eq!(generated["metadata"]["namespace"], "projectsveltos");
    let labels = labels_of(generated);
    assert_eq!(labels[naming::LABEL_FROM_GENERATOR], "ok");
    assert_eq!(labels[naming::LABEL_REF_NAME], "namespaces");
    assert_eq!(
        labels[naming::LABEL_EVENT_TRIGGER],
        "distribute-credentials"
    );
    let namespaces: Value =
        serde_yaml::from_str(generated["data"]["namespaces"].as_str().expect("key")).expect("YAML");
    assert_eq!(namespaces, json!({"eng": "ok", "hr": "ok"}));

    let profile = objects
        .iter()
        .find(|d| d.object["kind"] == "ClusterProfile")
        .expect("profile");
    let spec = &profile.object["spec"];
    // `info` carries only projectsveltos.io/template: referenced as it is, for addon-controller.
    assert_eq!(
        spec["policyRefs"],
        json!([{"kind": "ConfigMap", "namespace": "default", "name": "info", "deploymentType": "Remote"}])
    );
    assert_eq!(
        spec["templateResourceRefs"][1]["resource"]["name"],
        "default-workload-namespaces"
    );
    assert_eq!(spec["templateResourceRefs"][0]["identifier"], "Credentials");
    assert!(spec.get("configMapGenerator").is_none());
}

#[test]
fn seed_001_missing_generator_source_fails_only_with_where() {
    let state = config(&[SEED_001_TRIGGER]);
    let workload = cluster("workload", json!({"env": "production"}));
    let set = match_set("requiring-credentials", &[namespace("eng")]);
    let err = render(&state, "distribute-credentials", &workload, &set).expect_err("no source");
    assert_eq!(
        err.to_string(),
        "eventtrigger distribute-credentials: spec.configMapGenerator[0]: ConfigMap default/namespaces not found"
    );
}

#[test]
fn a_resource_that_does_not_decode_fails_the_trigger_with_where_instead_of_being_dropped() {
    let state = config(&[SEED_001_TRIGGER]);
    let workload = cluster("workload", json!({"env": "production"}));
    let mut set = match_set(
        "requiring-credentials",
        &[namespace("eng"), namespace("ops")],
    );
    set.resources[1] = b"{\"metadata\": ".to_vec();
    let err = render(&state, "distribute-credentials", &workload, &set).expect_err("undecodable");
    assert_eq!(
        err.to_string(),
        "eventtrigger distribute-credentials: match set of eventsource requiring-credentials: \
         resources[1] is not valid JSON: EOF while parsing a value at line 1 column 13"
    );
}

#[test]
fn resources_are_paired_with_the_match_sets_references_and_a_mismatch_says_where() {
    let state = config(&[SEED_003_TRIGGER]);
    let gke = cluster("gke", json!({"env": "production"}));
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "my-lb-service", "namespace": "test"}});
    let mut set = match_set("load-balancer-service", &[service]);
    set.matching.clear();
    let err = render(&state, "service-policy", &gke, &set).expect_err("unpaired");
    assert_eq!(
        err.to_string(),
        "eventtrigger service-policy: match set of eventsource load-balancer-service: \
         1 resources for 0 matching references"
    );
}

#[test]
fn seed_003_template_reading_event_data_is_instantiated_for_the_destination_selector() {
    let state = config(&[SEED_003_TRIGGER]);
    let gke = cluster("gke", json!({"env": "production"}));
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "my-lb-service", "namespace": "test"},
        "spec": {"type": "LoadBalancer", "ports": [{"protocol": "TCP", "port": 60000, "targetPort": 50001}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "34.172.32.172"}]}}});
    let objects = render(
        &state,
        "service-policy",
        &gke,
        &match_set("load-balancer-service", &[service]),
    )
    .expect("renders");
    let profile = &objects.last().expect("profile").object;
    assert_eq!(profile["kind"], "ClusterProfile");
    assert_eq!(
        profile["spec"]["clusterSelector"],
        json!({"matchLabels": {"dep": "eng"}})
    );
    assert!(profile["spec"].get("clusterRefs").is_none());
    let copy_name = profile["spec"]["policyRefs"][0]["name"]
        .as_str()
        .expect("name");
    assert_eq!(
        profile["spec"]["policyRefs"][0]["namespace"],
        "projectsveltos"
    );
    let copy = find(&objects, "ConfigMap", copy_name);
    let service: Value =
        serde_yaml::from_str(copy["data"]["service.yaml"].as_str().expect("key")).expect("YAML");
    assert_eq!(service["metadata"]["name"], "external-my-lb-service");
    assert_eq!(
        service["spec"]["ports"],
        json!([{"port": 60000, "protocol": "TCP", "targetPort": 50001}])
    );
    let endpoints: Value =
        serde_yaml::from_str(copy["data"]["endpoint.yaml"].as_str().expect("key")).expect("YAML");
    assert_eq!(
        endpoints["subsets"][0]["addresses"][0]["ip"],
        "34.172.32.172"
    );
    assert_eq!(endpoints["subsets"][0]["ports"], json!([{"port": 60000}]));
}

fn cloud_event(state: &ConfigState, event: &str) -> Result<CloudEventOutcome, RenderError> {
    let templates = TemplateCache::new(64);
    let ctx = Context {
        config: state,
        templates: &templates,
        sveltos_namespace: "projectsveltos",
    };
    let production = cluster("workload", json!({"env": "production"}));
    let event: Value = serde_json::from_str(event).expect("CloudEvent JSON");
    cloud_event_state(
        &ctx,
        trigger(state, "manage-namespace"),
        &production,
        "user-operation",
        &event,
    )
}

#[test]
fn seed_004_login_creates_the_namespace_profile_and_logout_deletes_it() {
    let state = config(&[SEED_004]);
    let login = cloud_event(&state, SEED_004_LOGIN).expect("login renders");
    assert_eq!(login.action, CloudEventAction::Create);
    assert_eq!(
        (login.source.as_str(), login.subject.as_str()),
        ("auth.example.com", "mgianluc")
    );
    let profile = login
        .objects
        .iter()
        .find(|d| d.object["kind"] == "ClusterProfile")
        .expect("profile");
    let labels = labels_of(&profile.object);
    assert_eq!(labels[naming::LABEL_CE_SOURCE], "auth.example.com");
    assert_eq!(labels[naming::LABEL_CE_SUBJECT], "mgianluc");
    assert_eq!(
        profile.object["spec"]["syncMode"],
        "ContinuousWithDriftDetection"
    );
    let copy_name = profile.object["spec"]["policyRefs"][0]["name"]
        .as_str()
        .expect("name");
    let copy = find(&login.objects, "ConfigMap", copy_name);
    let ns: Value =
        serde_yaml::from_str(copy["data"]["namespace.yaml"].as_str().expect("key")).expect("YAML");
    assert_eq!(
        ns,
        json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "mgianluc"}})
    );

    let logout = cloud_event(&state, SEED_004_LOGOUT).expect("logout renders");
    assert_eq!(logout.action, CloudEventAction::Delete);
    assert!(logout.objects.is_empty());
    assert_eq!(
        (logout.source, logout.subject),
        (login.source, login.subject)
    );
}

#[test]
fn cloud_event_action_that_is_neither_create_nor_delete_is_an_error() {
    let text = SEED_004.replace(
        r#"cloudEventAction: '{{if eq .CloudEvent.type "auth.example.com.logout"}}Delete{{else}}Create{{end}}'"#,
        "cloudEventAction: '{{ .CloudEvent.type }}'",
    );
    let state = config(&[&text]);
    let err = cloud_event(&state, SEED_004_LOGIN).expect_err("invalid action");
    assert_eq!(
        err.to_string(),
        "eventtrigger manage-namespace: spec.cloudEventAction: rendered to \"auth.example.com.login\", must be Create or Delete"
    );
}

const HELM_TRIGGER: &str = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: helm
spec:
  sourceClusterSelector: {matchLabels: {env: fv}}
  eventSourceName: es
  oneForEvent: true
  helmCharts:
  - repositoryURL: https://charts.example
    repositoryName: example
    chartName: example/app
    chartVersion: "1.0.0"
    releaseName: "app-{{ .Resource.metadata.name }}"
    releaseNamespace: "{{ .Resource.metadata.namespace }}"
    helmChartAction: Install
    valuesFrom:
    - kind: ConfigMap
      namespace: default
      name: values
    - kind: ConfigMap
      name: "{{ .Cluster.metadata.name }}-plain"
    - kind: Secret
      namespace: default
      name: "missing-{{ .Resource.metadata.name }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: values
  namespace: default
  annotations: {projectsveltos.io/instantiate: ok}
data:
  values.yaml: "replicas: {{ len .Resource.spec.ports }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cluster-a-plain
  namespace: default
data:
  values.yaml: "{{ not rendered here }}"
"#;

#[test]
fn values_from_is_instantiated_resolved_or_left_as_written() {
    let state = config(&[HELM_TRIGGER]);
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": [{"port": 80}, {"port": 443}]}});
    let objects = render(
        &state,
        "helm",
        &cluster("cluster-a", json!({"env": "fv"})),
        &match_set("es", &[service]),
    )
    .expect("renders");
    let profile = &objects.last().expect("profile").object;
    let chart = &profile["spec"]["helmCharts"][0];
    assert_eq!(chart["releaseName"], "app-web");
    assert_eq!(chart["releaseNamespace"], "shop");
    assert_eq!(chart["helmChartAction"], "Install");
    let from = &chart["valuesFrom"];
    assert_eq!(from[0]["namespace"], "projectsveltos");
    let copy = find(
        &objects,
        "ConfigMap",
        from[0]["name"].as_str().expect("name"),
    );
    assert_eq!(copy["data"]["values.yaml"], "replicas: 2");
    assert_eq!(
        from[1],
        json!({"kind": "ConfigMap", "namespace": "default", "name": "cluster-a-plain"})
    );
    assert_eq!(
        from[2],
        json!({"kind": "Secret", "namespace": "default", "name": "missing-{{ .Resource.metadata.name }}"})
    );
}

#[test]
fn a_secret_whose_contents_are_withheld_fails_the_trigger_and_says_why() {
    let mut state = config(&[r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: sealed
spec:
  sourceClusterSelector: {matchLabels: {env: fv}}
  eventSourceName: es
  policyRefs:
  - kind: Secret
    namespace: default
    name: credentials
"#]);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "type": CLUSTER_PROFILE_SECRET_TYPE,
        "metadata": {"namespace": "default", "name": "credentials"}});
    let stand_in = sluice_domain::configdata::withheld(&secret, sluice_wire::NO_KEY);
    state.apply("Secret", "default", "credentials", Some(&stand_in));
    let err = render(
        &state,
        "sealed",
        &cluster("cluster-a", json!({"env": "fv"})),
        &match_set("es", &[namespace("a")]),
    )
    .expect_err("contents withheld");
    assert_eq!(
        err.to_string(),
        format!(
            "eventtrigger sealed: spec.policyRefs[0]: Secret default/credentials: {}",
            sluice_wire::NO_KEY
        )
    );
    // With the contents, the same reference renders.
    state.apply("Secret", "default", "credentials", Some(&secret));
    render(
        &state,
        "sealed",
        &cluster("cluster-a", json!({"env": "fv"})),
        &match_set("es", &[namespace("a")]),
    )
    .expect("renders");
}
