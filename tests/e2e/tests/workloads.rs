//! An EventSource over workload status, on a managed cluster whose controllers run its
//! workloads: the "degraded Deployment" Lua script of Sveltos's agent tests (a Deployment
//! matches while `status.availableReplicas` differs from `spec.replicas`). A Deployment whose
//! Pods run is no event once its status says so; one whose Pods cannot be created stays one
//! until they can. Nothing is mocked: the API test server's controllers write the statuses.

use std::time::Duration;

use sluice_cli::demo::{profiles_for, wait_profile};
use sluice_cli::stack::{Stack, MANAGEMENT};
use sluice_testkit::wait_for;

const TRIGGER: &str = "degraded-deployments";
const DEADLINE: Duration = Duration::from_secs(30);

const EVENT_SOURCE: &str = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventSource
metadata:
  name: degraded-deployments
spec:
  collectResources: false
  resourceSelectors:
  - group: apps
    version: v1
    kind: Deployment
    evaluate: |
      function evaluate()
        hs = {}
        hs.matching = false
        if obj.status ~= nil then
          if obj.status.availableReplicas ~= obj.spec.replicas then
            hs.matching = true
          end
        end
        return hs
      end
"#;

const TRIGGER_YAML: &str = r#"
apiVersion: lib.projectsveltos.io/v1beta1
kind: EventTrigger
metadata:
  name: degraded-deployments
spec:
  sourceClusterSelector:
    matchLabels:
      env: fv
  eventSourceName: degraded-deployments
  oneForEvent: true
  policyRefs:
  - name: degraded-alert
    namespace: default
    kind: ConfigMap
"#;

const ALERT: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: degraded-alert
  namespace: default
data:
  alert.yaml: "a Deployment is degraded"
"#;

fn deployment(name: &str, account: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      serviceAccountName: {account}
      containers: [{{name: app, image: nginx:1.27}}]
"
    )
}

/// Waits until no ClusterProfile of the trigger exists for `resource` and the Deployment is
/// available in cluster-a.
async fn wait_no_event(stack: &Stack, resource: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("{resource} available and no ClusterProfile for it"),
        DEADLINE,
        || async {
            let deployment = stack
                .get("cluster-a", "apps/v1", "Deployment", "default", resource)
                .await
                .ok()??;
            let available = deployment["status"]["availableReplicas"] == 2;
            let profiles = profiles_for(stack, TRIGGER, "cluster-a", resource)
                .await
                .ok()?;
            (available && profiles.is_empty()).then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_deployment_is_an_event_until_its_pods_run() -> anyhow::Result<()> {
    let stack = Stack::start(&["cluster-a"], None).await?;
    stack
        .register_cluster("cluster-a", &[("env", "fv")])
        .await?;
    stack.apply_yaml(MANAGEMENT, ALERT).await?;
    stack.apply_yaml(MANAGEMENT, EVENT_SOURCE).await?;
    stack.apply_yaml(MANAGEMENT, TRIGGER_YAML).await?;

    // Runs as `default`: its Pods start, it becomes available and is no event.
    stack
        .apply_yaml("cluster-a", &deployment("web", "default"))
        .await?;
    if let Err(e) = wait_no_event(&stack, "web").await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }

    // Runs as a ServiceAccount that does not exist: no Pod is admitted, it is an event.
    stack
        .apply_yaml("cluster-a", &deployment("bot", "robot"))
        .await?;
    let profile = match wait_profile(&stack, TRIGGER, "cluster-a", "bot", DEADLINE).await {
        Ok(p) => p,
        Err(e) => anyhow::bail!("{e}\n{}", stack.logs()),
    };
    assert_eq!(profile["spec"]["policyRefs"][0]["name"], "degraded-alert");
    // The pipeline has read web's changes (they came before bot's on the same watch), and
    // whatever its statuses matched on the way has gone with them.
    if let Err(e) = wait_no_event(&stack, "web").await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }

    // Once the ServiceAccount exists, its Pods start and the event is over.
    stack
        .apply_yaml(
            "cluster-a",
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: robot, namespace: default}\n",
        )
        .await?;
    if let Err(e) = wait_no_event(&stack, "bot").await {
        anyhow::bail!("{e}\n{}", stack.logs());
    }
    Ok(())
}
