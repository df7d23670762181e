//! The pipeline's decisions as a table: each row is a configuration and a sequence of events
//! (resource changes in managed clusters, configuration changes, CloudEvents), each followed by
//! the exact management cluster it must leave (one line per object, `Pipeline::summary`). The
//! names are the deterministic names of ADR 0004; a row fails on any missing, extra, renamed or
//! differently rendered object.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sluice_applier::plan::object_id as key;
use sluice_domain::cluster::{ClusterId, ClusterType};
use sluice_harness::Pipeline;

const V1BETA1: &str = "lib.projectsveltos.io/v1beta1";

/// One event fed to the pipeline.
enum Step {
    Configure(Value),
    Unconfigure(&'static str, &'static str, &'static str),
    Change(&'static str, Value),
    Delete(&'static str, Value),
    CloudEvent(&'static str, &'static str, Value),
}

struct Row {
    name: &'static str,
    config: Vec<Value>,
    /// Each event and the management cluster after it.
    steps: Vec<(Step, &'static [&'static str])>,
}

fn cluster_id(name: &str) -> ClusterId {
    ClusterId {
        cluster_type: ClusterType::Sveltos,
        namespace: "fleet".into(),
        name: name.into(),
    }
}

fn cluster(name: &str, env: &str) -> Value {
    json!({"apiVersion": V1BETA1, "kind": "SveltosCluster",
        "metadata": {"name": name, "namespace": "fleet", "labels": {"env": env, "dep": format!("dep-{name}")}},
        "status": {"ready": true}})
}

/// An EventSource selecting Services labelled `tier: <tier>`.
fn services(name: &str, tier: &str, collect: bool) -> Value {
    json!({"apiVersion": V1BETA1, "kind": "EventSource", "metadata": {"name": name},
        "spec": {"collectResources": collect, "resourceSelectors": [
            {"group": "", "version": "v1", "kind": "Service",
             "labelFilters": [{"key": "tier", "operation": "Equal", "value": tier}]}]}})
}

/// An EventTrigger from clusters labelled `env: prod`, instantiating ConfigMap `default/<template>`.
fn trigger(name: &str, event_source: &str, one_for_event: bool, template: &str) -> Value {
    json!({"apiVersion": V1BETA1, "kind": "EventTrigger", "metadata": {"name": name},
        "spec": {"sourceClusterSelector": {"matchLabels": {"env": "prod"}},
                 "eventSourceName": event_source, "oneForEvent": one_for_event,
                 "policyRefs": [{"kind": "ConfigMap", "namespace": "default", "name": template}]}})
}

/// A ConfigMap instantiated per rendering with `data.out` as its template.
fn template(name: &str, text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"projectsveltos.io/instantiate": "ok"}},
        "data": {"out": text}})
}

fn service(name: &str, tier: &str, port: u16) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "labels": {"tier": tier}},
        "spec": {"ports": [{"port": port}]}})
}

/// The usual configuration: clusters `a` (prod) and `b` (dev), EventSource `web` (Services of
/// tier `web`, collected), and what `extra` adds.
fn base(extra: Vec<Value>) -> Vec<Value> {
    let mut config = vec![
        cluster("a", "prod"),
        cluster("b", "dev"),
        services("web", "web", true),
    ];
    config.extend(extra);
    config
}

/// Feeds the row's steps, checking the management cluster after each. Then, unless the row
/// sent CloudEvents (their units keep what an event created, which no state re-derives), a
/// fresh pipeline given only the final configuration and managed objects must reach the same
/// management cluster: the outcome depends on the state reached, not on the path.
fn run(row: &Row) {
    let mut pipeline = Pipeline::new();
    let mut config = BTreeMap::new();
    let mut managed = BTreeMap::new();
    for object in &row.config {
        pipeline.configure(object).expect("configures");
        config.insert(key(object), object.clone());
    }
    let mut replayable = true;
    for (index, (step, expected)) in row.steps.iter().enumerate() {
        let done = match step {
            Step::Configure(object) => {
                config.insert(key(object), object.clone());
                pipeline.configure(object)
            }
            Step::Unconfigure(kind, namespace, name) => {
                config.remove(&(kind.to_string(), namespace.to_string(), name.to_string()));
                pipeline.unconfigure(kind, namespace, name)
            }
            Step::Change(cluster, object) => {
                managed.insert((*cluster, key(object)), object.clone());
                pipeline.change(&cluster_id(cluster), object)
            }
            Step::Delete(cluster, object) => {
                managed.remove(&(*cluster, key(object)));
                pipeline.delete(&cluster_id(cluster), object)
            }
            Step::CloudEvent(cluster, subject, event) => {
                replayable = false;
                pipeline.cloud_event(&cluster_id(cluster), subject, event)
            }
        };
        done.unwrap_or_else(|e| panic!("{} step {index}: {e}", row.name));
        assert_eq!(
            pipeline.summary(),
            expected.to_vec(),
            "{} after step {index}",
            row.name
        );
    }
    if !replayable {
        return;
    }
    let mut fresh = Pipeline::new();
    for object in config.values() {
        fresh.configure(object).expect("configures");
    }
    for ((cluster, _), object) in &managed {
        fresh.change(&cluster_id(cluster), object).expect("changes");
    }
    assert_eq!(
        fresh.summary(),
        pipeline.summary(),
        "{} from its final state",
        row.name
    );
}

#[test]
fn decisions() {
    let rows = vec![
        Row {
            name: "oneForEvent true: one unit per matching resource; cleanup when a resource is deleted or no longer matches",
            config: base(vec![
                template("per-service", "{{ .Resource.metadata.name }}:{{ (index .Resource.spec.ports 0).port }}"),
                trigger("per", "web", true, "per-service"),
            ]),
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front:80",
                ]),
                (Step::Change("a", service("api", "web", 81)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ClusterProfile sveltos-ml3y0r92lvdfvpdmeldl of per@a [default/api] -> clusters fleet/a refs projectsveltos/sveltos-ei9thqzp7hh2tt56dc05",
                    "ConfigMap projectsveltos/sveltos-ei9thqzp7hh2tt56dc05 of per@a [default/api]: out=api:81",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front:80",
                ]),
                (Step::Change("b", service("other", "web", 82)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ClusterProfile sveltos-ml3y0r92lvdfvpdmeldl of per@a [default/api] -> clusters fleet/a refs projectsveltos/sveltos-ei9thqzp7hh2tt56dc05",
                    "ConfigMap projectsveltos/sveltos-ei9thqzp7hh2tt56dc05 of per@a [default/api]: out=api:81",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front:80",
                ]),
                (Step::Change("a", service("front", "web", 90)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ClusterProfile sveltos-ml3y0r92lvdfvpdmeldl of per@a [default/api] -> clusters fleet/a refs projectsveltos/sveltos-ei9thqzp7hh2tt56dc05",
                    "ConfigMap projectsveltos/sveltos-ei9thqzp7hh2tt56dc05 of per@a [default/api]: out=api:81",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front:90",
                ]),
                (Step::Delete("a", service("front", "web", 90)), &[
                    "ClusterProfile sveltos-ml3y0r92lvdfvpdmeldl of per@a [default/api] -> clusters fleet/a refs projectsveltos/sveltos-ei9thqzp7hh2tt56dc05",
                    "ConfigMap projectsveltos/sveltos-ei9thqzp7hh2tt56dc05 of per@a [default/api]: out=api:81",
                ]),
                (Step::Change("a", service("api", "db", 81)), &[]),
            ],
        },
        Row {
            name: "a rendering failure keeps what exists; the fixed template renders again",
            config: base(vec![
                template("per-service", "{{ .Resource.metadata.name }}"),
                trigger("per", "web", true, "per-service"),
                template("all", "{{ range .Resources }}{{ .metadata.name }} {{ end }}"),
                trigger("all", "web", false, "all"),
            ]),
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Configure(template("per-service", "{{ .Resource.nothing.name }}")), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Configure(template("all", "{{ range .Resources }}{{ .nothing.name }} {{ end }}")), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Change("a", service("api", "web", 81)), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Delete("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Configure(template("per-service", "{{ .Resource.metadata.name }}!")), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-ml3y0r92lvdfvpdmeldl of per@a [default/api] -> clusters fleet/a refs projectsveltos/sveltos-ei9thqzp7hh2tt56dc05",
                    "ConfigMap projectsveltos/sveltos-ei9thqzp7hh2tt56dc05 of per@a [default/api]: out=api!",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Configure(template("all", "{{ range .Resources }}{{ .metadata.name }}! {{ end }}")), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-ml3y0r92lvdfvpdmeldl of per@a [default/api] -> clusters fleet/a refs projectsveltos/sveltos-ei9thqzp7hh2tt56dc05",
                    "ConfigMap projectsveltos/sveltos-ei9thqzp7hh2tt56dc05 of per@a [default/api]: out=api!",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=api!",
                ]),
            ],
        },
        Row {
            name: "oneForEvent false with collectResources: one unit over the whole set",
            config: base(vec![
                template("all", "{{ range .Resources }}{{ .metadata.name }} {{ end }}"),
                trigger("all", "web", false, "all"),
            ]),
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Change("a", service("api", "web", 81)), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=api front",
                ]),
                (Step::Change("a", service("front", "db", 80)), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=api",
                ]),
                (Step::Delete("a", service("api", "web", 81)), &[]),
            ],
        },
        Row {
            name: "oneForEvent false without collectResources: MatchingResources only",
            config: vec![
                cluster("a", "prod"),
                services("refs", "web", false),
                template("refs", "{{ range .MatchingResources }}{{ .Namespace }}/{{ .Name }} {{ end }}"),
                trigger("refs", "refs", false, "refs"),
            ],
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-gd3i0i36f51r99cdgtl1 of refs@a [main] -> clusters fleet/a refs projectsveltos/sveltos-y3vw7c95mn9fozb9lva3",
                    "ConfigMap projectsveltos/sveltos-y3vw7c95mn9fozb9lva3 of refs@a [main]: out=default/front",
                ]),
                (Step::Change("a", service("front", "web", 81)), &[
                    "ClusterProfile sveltos-gd3i0i36f51r99cdgtl1 of refs@a [main] -> clusters fleet/a refs projectsveltos/sveltos-y3vw7c95mn9fozb9lva3",
                    "ConfigMap projectsveltos/sveltos-y3vw7c95mn9fozb9lva3 of refs@a [main]: out=default/front",
                ]),
                (Step::Change("a", service("api", "web", 81)), &[
                    "ClusterProfile sveltos-gd3i0i36f51r99cdgtl1 of refs@a [main] -> clusters fleet/a refs projectsveltos/sveltos-y3vw7c95mn9fozb9lva3",
                    "ConfigMap projectsveltos/sveltos-y3vw7c95mn9fozb9lva3 of refs@a [main]: out=default/api default/front",
                ]),
            ],
        },
        Row {
            name: "EventSource changed, then deleted",
            config: base(vec![
                template("per-service", "{{ .Resource.metadata.name }}"),
                trigger("per", "web", true, "per-service"),
            ]),
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                ]),
                (Step::Change("a", service("db", "db", 80)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                ]),
                (Step::Configure(services("web", "db", true)), &[
                    "ClusterProfile sveltos-9k2b6nv0eejjr9xof0zn of per@a [default/db] -> clusters fleet/a refs projectsveltos/sveltos-nb5y23qx7vf36zlmr2tq",
                    "ConfigMap projectsveltos/sveltos-nb5y23qx7vf36zlmr2tq of per@a [default/db]: out=db",
                ]),
                (Step::Unconfigure("EventSource", "", "web"), &[]),
                (Step::Configure(services("web", "web", true)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                ]),
            ],
        },
        Row {
            name: "EventTrigger changed, then deleted",
            config: base(vec![
                services("db", "db", true),
                template("per-service", "{{ .Resource.metadata.name }}"),
                template("all", "{{ range .Resources }}{{ .metadata.name }} {{ end }}"),
                trigger("per", "web", true, "per-service"),
            ]),
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                ]),
                (Step::Change("a", service("store", "db", 80)), &[
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                ]),
                (Step::Configure(trigger("per", "db", true, "per-service")), &[
                    "ClusterProfile sveltos-79ea2vyqltpj1lka8haf of per@a [default/store] -> clusters fleet/a refs projectsveltos/sveltos-2ftexwhqcwihb01wc8q5",
                    "ConfigMap projectsveltos/sveltos-2ftexwhqcwihb01wc8q5 of per@a [default/store]: out=store",
                ]),
                (Step::Configure(trigger("per", "db", false, "all")), &[
                    "ClusterProfile sveltos-o6zioy9370js7tcg8fny of per@a [main] -> clusters fleet/a refs projectsveltos/sveltos-gqbpmi45qz3qohizll54",
                    "ConfigMap projectsveltos/sveltos-gqbpmi45qz3qohizll54 of per@a [main]: out=store",
                ]),
                (Step::Unconfigure("EventTrigger", "", "per"), &[]),
            ],
        },
        Row {
            name: "a collection's trigger selects other clusters, then its EventSource is deleted",
            config: base(vec![
                template("all", "{{ range .Resources }}{{ .metadata.name }} {{ end }}"),
                trigger("all", "web", false, "all"),
            ]),
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                        "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                        "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                    ]),
                (Step::Change("b", service("back", "web", 80)), &[
                        "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                        "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                    ]),
                (
                    Step::Configure({
                        let mut t = trigger("all", "web", false, "all");
                        t["spec"]["sourceClusterSelector"] = json!({"matchLabels": {"env": "dev"}});
                        t
                    }),
                    &[
                            "ClusterProfile sveltos-8vzadeckizvacopxh2ee of all@b [main] -> clusters fleet/b refs projectsveltos/sveltos-2ipx5zlypp96zt1qlnso",
                            "ConfigMap projectsveltos/sveltos-2ipx5zlypp96zt1qlnso of all@b [main]: out=back",
                    ],
                ),
                (Step::Configure(trigger("all", "web", false, "all")), &[
                        "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                        "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                    ]),
                (Step::Unconfigure("EventSource", "", "web"), &[]),
            ],
        },
        Row {
            name: "cluster no longer selected, selected again, gone",
            config: base(vec![
                template("per-service", "{{ .Resource.metadata.name }}"),
                trigger("per", "web", true, "per-service"),
                template("all", "{{ range .Resources }}{{ .metadata.name }} {{ end }}"),
                trigger("all", "web", false, "all"),
            ]),
            steps: vec![
                (Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Configure(cluster("a", "dev")), &[]),
                (Step::Configure(cluster("a", "prod")), &[
                    "ClusterProfile sveltos-95qea16tsirzq92t892m of all@a [main] -> clusters fleet/a refs projectsveltos/sveltos-jy76gtu4tje2d5qu49gq",
                    "ClusterProfile sveltos-gk45tr9e8xwhcvyts20u of per@a [default/front] -> clusters fleet/a refs projectsveltos/sveltos-fq1zvrdo97ow0pro1c46",
                    "ConfigMap projectsveltos/sveltos-fq1zvrdo97ow0pro1c46 of per@a [default/front]: out=front",
                    "ConfigMap projectsveltos/sveltos-jy76gtu4tje2d5qu49gq of all@a [main]: out=front",
                ]),
                (Step::Unconfigure("SveltosCluster", "fleet", "a"), &[]),
            ],
        },
        Row {
            name: "destinationClusterSelector targets the selected clusters, not the source",
            config: base(vec![
                template("per-service", "{{ .Resource.metadata.name }}"),
                {
                    let mut t = trigger("cross", "web", true, "per-service");
                    t["spec"]["destinationClusterSelector"] = json!({"matchLabels": {"dep": "dep-b"}});
                    t
                },
                template("all", "{{ range .Resources }}{{ .metadata.name }} {{ end }}"),
                trigger("home", "web", false, "all"),
            ]),
            steps: vec![(Step::Change("a", service("front", "web", 80)), &[
                    "ClusterProfile sveltos-9a3y8dznkhq9glz9mya3 of cross@a [default/front] -> selector {\"matchLabels\":{\"dep\":\"dep-b\"}} refs projectsveltos/sveltos-vri66hb5dxycw63hdnry",
                    "ClusterProfile sveltos-i5ru5g2zu2epsjcym4us of home@a [main] -> clusters fleet/a refs projectsveltos/sveltos-z122j56mtj56vm7i4juv",
                    "ConfigMap projectsveltos/sveltos-vri66hb5dxycw63hdnry of cross@a [default/front]: out=front",
                    "ConfigMap projectsveltos/sveltos-z122j56mtj56vm7i4juv of home@a [main]: out=front",
                ])],
        },
        Row {
            name: "CloudEvent Create and Delete",
            config: vec![
                cluster("a", "prod"),
                cluster("b", "dev"),
                json!({"apiVersion": V1BETA1, "kind": "EventSource", "metadata": {"name": "user-operation"},
                    "spec": {"messagingMatchCriteria": [{"subject": "user-operation", "cloudEventSource": "auth.example.com"}]}}),
                {
                    let mut t = trigger("ns", "user-operation", true, "namespace");
                    t["spec"]["cloudEventAction"] = json!("{{if eq .CloudEvent.type \"auth.example.com.logout\"}}Delete{{else}}Create{{end}}");
                    t
                },
                template("namespace", "{{ .CloudEvent.subject }}"),
            ],
            steps: vec![
                (Step::CloudEvent("a", "user-operation", login("alice")), &[
                    "ClusterProfile sveltos-jc5cl2znuhaw9a5pix2x of ns@a [auth.example.com/alice] -> clusters fleet/a refs projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy",
                    "ConfigMap projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy of ns@a [auth.example.com/alice]: out=alice",
                ]),
                (Step::CloudEvent("a", "user-operation", login("bob")), &[
                    "ClusterProfile sveltos-jc5cl2znuhaw9a5pix2x of ns@a [auth.example.com/alice] -> clusters fleet/a refs projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy",
                    "ClusterProfile sveltos-jtrmvdbpitc750vkxoaj of ns@a [auth.example.com/bob] -> clusters fleet/a refs projectsveltos/sveltos-xukw75mjrgfr10e6l5w0",
                    "ConfigMap projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy of ns@a [auth.example.com/alice]: out=alice",
                    "ConfigMap projectsveltos/sveltos-xukw75mjrgfr10e6l5w0 of ns@a [auth.example.com/bob]: out=bob",
                ]),
                (Step::CloudEvent("a", "other-subject", login("carol")), &[
                    "ClusterProfile sveltos-jc5cl2znuhaw9a5pix2x of ns@a [auth.example.com/alice] -> clusters fleet/a refs projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy",
                    "ClusterProfile sveltos-jtrmvdbpitc750vkxoaj of ns@a [auth.example.com/bob] -> clusters fleet/a refs projectsveltos/sveltos-xukw75mjrgfr10e6l5w0",
                    "ConfigMap projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy of ns@a [auth.example.com/alice]: out=alice",
                    "ConfigMap projectsveltos/sveltos-xukw75mjrgfr10e6l5w0 of ns@a [auth.example.com/bob]: out=bob",
                ]),
                (Step::CloudEvent("b", "user-operation", login("dave")), &[
                    "ClusterProfile sveltos-jc5cl2znuhaw9a5pix2x of ns@a [auth.example.com/alice] -> clusters fleet/a refs projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy",
                    "ClusterProfile sveltos-jtrmvdbpitc750vkxoaj of ns@a [auth.example.com/bob] -> clusters fleet/a refs projectsveltos/sveltos-xukw75mjrgfr10e6l5w0",
                    "ConfigMap projectsveltos/sveltos-2ef9r2tde0gp33xl4vwy of ns@a [auth.example.com/alice]: out=alice",
                    "ConfigMap projectsveltos/sveltos-xukw75mjrgfr10e6l5w0 of ns@a [auth.example.com/bob]: out=bob",
                ]),
                (Step::CloudEvent("a", "user-operation", logout("alice")), &[
                    "ClusterProfile sveltos-jtrmvdbpitc750vkxoaj of ns@a [auth.example.com/bob] -> clusters fleet/a refs projectsveltos/sveltos-xukw75mjrgfr10e6l5w0",
                    "ConfigMap projectsveltos/sveltos-xukw75mjrgfr10e6l5w0 of ns@a [auth.example.com/bob]: out=bob",
                ]),
                (Step::Configure(cluster("a", "dev")), &[]),
                (Step::Configure(cluster("a", "prod")), &[]),
                (Step::CloudEvent("a", "user-operation", login("bob")), &[
                    "ClusterProfile sveltos-jtrmvdbpitc750vkxoaj of ns@a [auth.example.com/bob] -> clusters fleet/a refs projectsveltos/sveltos-xukw75mjrgfr10e6l5w0",
                    "ConfigMap projectsveltos/sveltos-xukw75mjrgfr10e6l5w0 of ns@a [auth.example.com/bob]: out=bob",
                ]),
                (Step::Unconfigure("EventTrigger", "", "ns"), &[]),
            ],
        },
    ];
    for row in &rows {
        run(row);
    }
}

fn login(user: &str) -> Value {
    json!({"specversion": "1.0", "type": "auth.example.com.login", "source": "auth.example.com",
        "id": format!("login-{user}"), "subject": user, "data": {"message": format!("User {user} login")}})
}

fn logout(user: &str) -> Value {
    json!({"specversion": "1.0", "type": "auth.example.com.logout", "source": "auth.example.com",
        "id": format!("logout-{user}"), "subject": user, "data": {"message": format!("User {user} logout")}})
}

#[test]
fn a_message_that_is_not_a_cloud_event_is_rejected_and_changes_nothing() {
    let mut pipeline = Pipeline::new();
    for object in [
        cluster("a", "prod"),
        json!({"apiVersion": V1BETA1, "kind": "EventSource", "metadata": {"name": "user-operation"},
            "spec": {"messagingMatchCriteria": [{"subject": "user-operation"}]}}),
        trigger("ns", "user-operation", true, "namespace"),
        template("namespace", "{{ .CloudEvent.subject }}"),
    ] {
        pipeline.configure(&object).expect("configures");
    }
    let error = pipeline
        .cloud_event(
            &cluster_id("a"),
            "user-operation",
            &json!({"subject": "alice", "data": {}}),
        )
        .expect_err("no specversion, id, source or type");
    assert!(
        matches!(error, sluice_harness::Error::CloudEvent(_)),
        "{error}"
    );
    assert!(pipeline.summary().is_empty());
    pipeline
        .cloud_event(&cluster_id("a"), "user-operation", &login("alice"))
        .expect("a CloudEvent");
    assert_eq!(pipeline.summary().len(), 2, "{:?}", pipeline.summary());
}

/// A CloudEvent match delivered again after a newer one of the same unit (its input redelivered
/// after a crash or a lost publish) changes nothing: the logout stays the last word.
/// Seed 004's shape on cluster `a`: a login creates the user's Namespace, a logout removes it.
fn user_operation_pipeline() -> Pipeline {
    let mut pipeline = Pipeline::new();
    for object in [
        cluster("a", "prod"),
        json!({"apiVersion": V1BETA1, "kind": "EventSource", "metadata": {"name": "user-operation"},
            "spec": {"messagingMatchCriteria": [{"subject": "user-operation"}]}}),
        {
            let mut t = trigger("ns", "user-operation", true, "namespace");
            t["spec"]["cloudEventAction"] = json!(
                "{{if eq .CloudEvent.type \"auth.example.com.logout\"}}Delete{{else}}Create{{end}}"
            );
            t
        },
        template("namespace", "{{ .CloudEvent.subject }}"),
    ] {
        pipeline.configure(&object).expect("configures");
    }
    pipeline
}

#[test]
fn an_older_cloud_event_delivered_again_does_not_overwrite_a_newer_one() {
    let mut pipeline = user_operation_pipeline();
    let a = cluster_id("a");
    pipeline
        .cloud_event(&a, "user-operation", &login("alice"))
        .expect("a login");
    assert_eq!(pipeline.summary().len(), 2, "{:?}", pipeline.summary());
    pipeline
        .cloud_event(&a, "user-operation", &logout("alice"))
        .expect("a logout");
    assert!(pipeline.summary().is_empty(), "{:?}", pipeline.summary());
    pipeline
        .redeliver_cloud_event_match(0)
        .expect("the login again");
    assert!(
        pipeline.summary().is_empty(),
        "the older login came back: {:?}",
        pipeline.summary()
    );
    pipeline
        .publish_cloud_event_match_again(0)
        .expect("the login's match published again");
    assert!(
        pipeline.summary().is_empty(),
        "the older login's match, published again after the logout's, came back: {:?}",
        pipeline.summary()
    );
}

/// ADR 0049: a CloudEvent keeps its place in the managed stream it was stored in, however its
/// publishes are retried on the way.
#[test]
fn an_older_cloud_event_forwarded_again_after_a_newer_one_does_not_overwrite_it() {
    let mut pipeline = user_operation_pipeline();
    let a = cluster_id("a");
    let stream = "jetstream:USERS:1";
    for (position, event) in [(79, login("user-20")), (92, logout("user-20"))] {
        pipeline
            .cloud_event_stored(&a, "user-operation", &event, stream, position)
            .expect("stored in the managed stream");
    }
    assert!(pipeline.summary().is_empty(), "{:?}", pipeline.summary());
    pipeline
        .forward_cloud_event_again(0)
        .expect("the login forwarded again");
    assert!(
        pipeline.summary().is_empty(),
        "the login forwarded again after the logout came back: {:?}",
        pipeline.summary()
    );
    pipeline
        .publish_cloud_event_match_again(0)
        .expect("its match published again");
    assert!(pipeline.summary().is_empty(), "{:?}", pipeline.summary());
    pipeline
        .cloud_event_stored(&a, "user-operation", &login("user-20"), stream, 93)
        .expect("a later login");
    assert_eq!(pipeline.summary().len(), 2, "{:?}", pipeline.summary());
}
