//! Validation of the workload and policy kinds an installation's manifests use (Deployment,
//! StatefulSet, DaemonSet, Job, CronJob, HorizontalPodAutoscaler, PodDisruptionBudget,
//! NetworkPolicy), as kube-apiserver's validation of those
//! kinds rejects them: the rules a manifest can break, with apiserver's field paths and details.
//! Not every rule of the real server is here: what is checked is listed per kind below.

use serde_json::Value;

use crate::field_error::FieldError;
use crate::resources::ResourceInfo;

/// The errors of one object of a kind this module knows; none for other kinds.
pub fn errors(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    match (info.group.as_str(), info.kind.as_str()) {
        ("apps", "Deployment") => workload_errors(obj, &[]),
        ("apps", "StatefulSet") => stateful_set_errors(obj),
        ("apps", "DaemonSet") => workload_errors(obj, &[]),
        ("batch", "Job") => job_errors(obj),
        ("batch", "CronJob") => cron_job_errors(obj),
        ("autoscaling", "HorizontalPodAutoscaler") => autoscaler_errors(obj),
        ("policy", "PodDisruptionBudget") => pdb_errors(obj),
        ("networking.k8s.io", "NetworkPolicy") => network_policy_errors(obj),
        _ => Vec::new(),
    }
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> Option<&'a str> {
    obj.pointer(pointer).and_then(Value::as_str)
}

fn array_at<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Whether a label selector (`matchLabels` and `matchExpressions`) selects `labels`.
pub(super) fn selects(selector: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    let match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions = array_at(selector, "/matchExpressions").iter().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values = e.get("values").and_then(Value::as_array);
        let has = |v: &Value| values.is_some_and(|vs| vs.contains(v));
        match (e.get("operator").and_then(Value::as_str), labels.get(key)) {
            (Some("In"), Some(v)) => has(v),
            (Some("NotIn"), Some(v)) => !has(v),
            (Some("NotIn"), None) | (Some("DoesNotExist"), None) | (Some("Exists"), Some(_)) => {
                true
            }
            _ => false,
        }
    });
    match_labels && expressions
}

fn selector_is_empty(selector: &Value) -> bool {
    let labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.is_empty());
    labels && array_at(selector, "/matchExpressions").is_empty()
}

/// Deployment and StatefulSet (apps/v1): `spec.replicas` not negative, a non-empty
/// `spec.selector` that selects the template's labels, and the pod template's spec.
/// `claim_names` are volumes the workload adds (a StatefulSet's volumeClaimTemplates).
fn workload_errors(obj: &Value, claim_names: &[String]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(replicas) = obj.pointer("/spec/replicas").and_then(Value::as_i64) {
        if replicas < 0 {
            errors.push(FieldError::invalid(
                "spec.replicas",
                Value::from(replicas),
                "must be greater than or equal to 0",
            ));
        }
    }
    match obj.pointer("/spec/selector") {
        None | Some(Value::Null) => errors.push(FieldError::required("spec.selector", "")),
        Some(selector) if selector_is_empty(selector) => errors.push(FieldError::invalid(
            "spec.selector",
            selector.clone(),
            "empty selector is invalid for deployment",
        )),
        Some(selector) => errors.extend(unselected_template(obj, selector)),
    }
    let pod = obj.pointer("/spec/template/spec").unwrap_or(&Value::Null);
    errors.extend(pod_spec_errors(pod, "spec.template.spec", claim_names));
    errors
}

/// StatefulSet: the workload rules, `podManagementPolicy` and `updateStrategy.type` from their
/// enums, and each volumeClaimTemplate with a name, an access mode and a storage request.
fn stateful_set_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut claims = Vec::new();
    for (i, claim) in array_at(obj, "/spec/volumeClaimTemplates")
        .iter()
        .enumerate()
    {
        let path = format!("spec.volumeClaimTemplates[{i}]");
        match str_at(claim, "/metadata/name") {
            Some(name) if !name.is_empty() => claims.push(name.to_string()),
            _ => errors.push(FieldError::required(
                format!("{path}.metadata.name"),
                "name or generateName is required",
            )),
        }
        if array_at(claim, "/spec/accessModes").is_empty() {
            errors.push(FieldError::required(
                format!("{path}.spec.accessModes"),
                "at least 1 access mode is required",
            ));
        }
        if claim.pointer("/spec/resources/requests/storage").is_none() {
            errors.push(FieldError::required(
                format!("{path}.spec.resources[storage]"),
                "",
            ));
        }
    }
    errors.extend(workload_errors(obj, &claims));
    for (field, pointer, supported) in [
        (
            "spec.podManagementPolicy",
            "/spec/podManagementPolicy",
            &["OrderedReady", "Parallel"][..],
        ),
        (
            "spec.updateStrategy.type",
            "/spec/updateStrategy/type",
            &["OnDelete", "RollingUpdate"][..],
        ),
    ] {
        if let Some(value) = str_at(obj, pointer) {
            if !supported.contains(&value) {
                errors.push(not_supported(field, value, supported));
            }
        }
    }
    errors
}

/// apiserver's error for a `selector` that does not select the pod template's labels.
fn unselected_template(obj: &Value, selector: &Value) -> Option<FieldError> {
    let empty = serde_json::Map::new();
    let labels = obj
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    (!selects(selector, labels)).then(|| {
        FieldError::invalid(
            "spec.template.metadata.labels",
            Value::Object(labels.clone()),
            "`selector` does not match template `labels`",
        )
    })
}

/// Job: Pods that restart `OnFailure` or `Never`, a selector (generated unless `manualSelector`)
/// that selects the template's labels, and the pod template's spec.
fn job_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = job_pod_errors(obj.pointer("/spec/template"), "spec.template");
    match obj.pointer("/spec/selector") {
        None | Some(Value::Null) => errors.push(FieldError::required("spec.selector", "")),
        Some(selector) => errors.extend(unselected_template(obj, selector)),
    }
    errors
}

/// The pod template of a Job or a CronJob's job template.
fn job_pod_errors(template: Option<&Value>, path: &str) -> Vec<FieldError> {
    let pod = template.and_then(|t| t.get("spec")).unwrap_or(&Value::Null);
    let mut errors = Vec::new();
    let policy = str_at(pod, "/restartPolicy").unwrap_or("");
    if !matches!(policy, "OnFailure" | "Never") {
        errors.push(not_supported(
            &format!("{path}.spec.restartPolicy"),
            policy,
            &["OnFailure", "Never"],
        ));
    }
    errors.extend(pod_spec_errors(pod, &format!("{path}.spec"), &[]));
    errors
}

/// CronJob: a schedule, a concurrency policy from its enum, and the job template's Pods.
fn cron_job_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if str_at(obj, "/spec/schedule").is_none_or(str::is_empty) {
        errors.push(FieldError::required("spec.schedule", ""));
    }
    if let Some(policy) = str_at(obj, "/spec/concurrencyPolicy") {
        let supported = ["Allow", "Forbid", "Replace"];
        if !supported.contains(&policy) {
            errors.push(not_supported("spec.concurrencyPolicy", policy, &supported));
        }
    }
    errors.extend(job_pod_errors(
        obj.pointer("/spec/jobTemplate/spec/template"),
        "spec.jobTemplate.spec.template",
    ));
    errors
}

/// HorizontalPodAutoscaler: a target's kind and name, `maxReplicas` of at least 1 and
/// `minReplicas` between 1 and it.
fn autoscaler_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for field in ["kind", "name"] {
        if str_at(obj, &format!("/spec/scaleTargetRef/{field}")).is_none_or(str::is_empty) {
            errors.push(FieldError::required(
                format!("spec.scaleTargetRef.{field}"),
                "",
            ));
        }
    }
    let max = obj
        .pointer("/spec/maxReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if max < 1 {
        errors.push(FieldError::invalid(
            "spec.maxReplicas",
            Value::from(max),
            "must be greater than or equal to 1",
        ));
    }
    if let Some(min) = obj.pointer("/spec/minReplicas").and_then(Value::as_i64) {
        if min < 1 {
            errors.push(FieldError::invalid(
                "spec.minReplicas",
                Value::from(min),
                "must be greater than or equal to 1",
            ));
        } else if max >= 1 && min > max {
            errors.push(FieldError::invalid(
                "spec.minReplicas",
                Value::from(min),
                "must be less than or equal to maxReplicas",
            ));
        }
    }
    errors
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let supported: Vec<String> = supported.iter().map(|s| s.to_string()).collect();
    FieldError::not_supported(field, Value::from(value), &supported)
}

/// The volume sources of a pod volume (one must be set, and only one).
const VOLUME_SOURCES: [&str; 12] = [
    "emptyDir",
    "secret",
    "configMap",
    "projected",
    "persistentVolumeClaim",
    "hostPath",
    "downwardAPI",
    "ephemeral",
    "csi",
    "nfs",
    "image",
    "iscsi",
];

/// A pod spec: at least one container; each container with a DNS-label name (unique), an image,
/// valid ports, env entries with a name, and mounts of declared volumes; volumes with a unique
/// name and exactly one source; valid topology spread constraints.
fn pod_spec_errors(pod: &Value, path: &str, claim_names: &[String]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut volumes: Vec<String> = claim_names.to_vec();
    for (i, volume) in array_at(pod, "/volumes").iter().enumerate() {
        let at = format!("{path}.volumes[{i}]");
        match volume.get("name").and_then(Value::as_str) {
            None | Some("") => errors.push(FieldError::required(format!("{at}.name"), "")),
            Some(name) if volumes.iter().any(|v| v == name) => errors.push(FieldError::new(
                crate::field_error::ErrorType::Duplicate,
                format!("{at}.name"),
                Value::from(name),
                "",
            )),
            Some(name) => volumes.push(name.to_string()),
        }
        let sources = VOLUME_SOURCES
            .iter()
            .filter(|s| volume.get(**s).is_some_and(|v| !v.is_null()))
            .count();
        match sources {
            0 => errors.push(FieldError::required(at, "must specify a volume type")),
            1 => {}
            _ => errors.push(FieldError::forbidden(
                at,
                "may not specify more than 1 volume type",
            )),
        }
    }
    for (i, constraint) in array_at(pod, "/topologySpreadConstraints")
        .iter()
        .enumerate()
    {
        errors.extend(spread_errors(
            &format!("{path}.topologySpreadConstraints[{i}]"),
            constraint,
        ));
    }
    let containers = array_at(pod, "/containers");
    if containers.is_empty() {
        errors.push(FieldError::required(format!("{path}.containers"), ""));
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, container) in containers.iter().enumerate() {
        let at = format!("{path}.containers[{i}]");
        match container.get("name").and_then(Value::as_str) {
            None | Some("") => errors.push(FieldError::required(format!("{at}.name"), "")),
            Some(name) => {
                for problem in super::validate::name_problems(name, true, false) {
                    errors.push(FieldError::invalid(
                        format!("{at}.name"),
                        Value::from(name),
                        problem,
                    ));
                }
                if names.contains(&name) {
                    errors.push(FieldError::new(
                        crate::field_error::ErrorType::Duplicate,
                        format!("{at}.name"),
                        Value::from(name),
                        "",
                    ));
                }
                names.push(name);
            }
        }
        if container
            .get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errors.push(FieldError::required(format!("{at}.image"), ""));
        }
        for (j, port) in array_at(container, "/ports").iter().enumerate() {
            let port_at = format!("{at}.ports[{j}]");
            let number = port.get("containerPort").and_then(Value::as_i64);
            if !number.is_some_and(|n| (1..=65535).contains(&n)) {
                errors.push(FieldError::invalid(
                    format!("{port_at}.containerPort"),
                    port.get("containerPort").cloned().unwrap_or(Value::from(0)),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if let Some(name) = port.get("name").and_then(Value::as_str) {
                errors.extend(port_name_errors(&format!("{port_at}.name"), name));
            }
        }
        for (j, env) in array_at(container, "/env").iter().enumerate() {
            if env
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errors.push(FieldError::required(format!("{at}.env[{j}].name"), ""));
            }
        }
        for (j, mount) in array_at(container, "/volumeMounts").iter().enumerate() {
            let mount_at = format!("{at}.volumeMounts[{j}]");
            let name = mount.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                errors.push(FieldError::required(format!("{mount_at}.name"), ""));
            } else if !volumes.iter().any(|v| v == name) {
                errors.push(FieldError::new(
                    crate::field_error::ErrorType::NotFound,
                    format!("{mount_at}.name"),
                    Value::from(name),
                    "",
                ));
            }
            if mount
                .get("mountPath")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errors.push(FieldError::required(format!("{mount_at}.mountPath"), ""));
            }
        }
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if let Some(port) = container.pointer(&format!("/{probe}/httpGet/port")) {
                errors.extend(port_ref_errors(&format!("{at}.{probe}.httpGet.port"), port));
            }
        }
    }
    errors
}

/// A topology spread constraint: `maxSkew` above zero, a `topologyKey`, and
/// `whenUnsatisfiable` from its enum.
fn spread_errors(path: &str, constraint: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let skew = constraint.get("maxSkew").cloned().unwrap_or(Value::from(0));
    if skew.as_i64().is_none_or(|n| n <= 0) {
        errors.push(FieldError::invalid(
            format!("{path}.maxSkew"),
            skew,
            "must be greater than zero",
        ));
    }
    if str_at(constraint, "/topologyKey").is_none_or(str::is_empty) {
        errors.push(FieldError::required(
            format!("{path}.topologyKey"),
            "can not be empty",
        ));
    }
    match str_at(constraint, "/whenUnsatisfiable") {
        Some("DoNotSchedule" | "ScheduleAnyway") => {}
        Some(other) => errors.push(not_supported(
            &format!("{path}.whenUnsatisfiable"),
            other,
            &["DoNotSchedule", "ScheduleAnyway"],
        )),
        None => errors.push(FieldError::not_supported(
            format!("{path}.whenUnsatisfiable"),
            Value::from(""),
            &["DoNotSchedule".to_string(), "ScheduleAnyway".to_string()],
        )),
    }
    errors
}

/// A named port (`IANA_SVC_NAME`): at most 15 lowercase letters, digits and `-`, with a letter,
/// no `-` at either end and no `--`.
fn port_name_errors(field: &str, name: &str) -> Vec<FieldError> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push("must be no more than 15 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        problems.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens");
    }
    if !name.chars().any(|c| c.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen");
    }
    problems
        .into_iter()
        .map(|p| FieldError::invalid(field, Value::from(name), p))
        .collect()
}

/// A port given as a number (1-65535) or a port name.
fn port_ref_errors(field: &str, port: &Value) -> Vec<FieldError> {
    match port {
        Value::String(name) => port_name_errors(field, name),
        Value::Number(n) if n.as_i64().is_some_and(|n| (1..=65535).contains(&n)) => Vec::new(),
        other => vec![FieldError::invalid(
            field,
            other.clone(),
            "must be between 1 and 65535, inclusive",
        )],
    }
}

/// An int-or-string budget: a non-negative integer or a percentage up to 100%.
fn budget_errors(field: &str, value: &Value) -> Vec<FieldError> {
    let problem = match value {
        Value::Number(n) if n.as_i64().is_some_and(|n| n >= 0) => None,
        Value::Number(_) => Some("must be greater than or equal to 0"),
        Value::String(s) => match s.strip_suffix('%').map(str::parse::<u64>) {
            Some(Ok(p)) if p <= 100 => None,
            Some(Ok(_)) => Some("must not be greater than 100%"),
            _ => Some("must be an integer or percentage (e.g '5%')"),
        },
        _ => Some("must be an integer or percentage (e.g '5%')"),
    };
    problem
        .map(|p| FieldError::invalid(field, value.clone(), p))
        .into_iter()
        .collect()
}

/// PodDisruptionBudget (policy/v1): `minAvailable` or `maxUnavailable`, not both, each a valid
/// budget, and `unhealthyPodEvictionPolicy` from its enum.
fn pdb_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let min = spec.get("minAvailable").filter(|v| !v.is_null());
    let max = spec.get("maxUnavailable").filter(|v| !v.is_null());
    if min.is_some() && max.is_some() {
        errors.push(FieldError::invalid(
            "spec",
            spec.clone(),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    if let Some(min) = min {
        errors.extend(budget_errors("spec.minAvailable", min));
    }
    if let Some(max) = max {
        errors.extend(budget_errors("spec.maxUnavailable", max));
    }
    if let Some(policy) = str_at(spec, "/unhealthyPodEvictionPolicy") {
        let supported = ["AlwaysAllow", "IfHealthyBudget"];
        if !supported.contains(&policy) {
            errors.push(not_supported(
                "spec.unhealthyPodEvictionPolicy",
                policy,
                &supported,
            ));
        }
    }
    errors
}

/// NetworkPolicy (networking.k8s.io/v1): `policyTypes` from `Ingress`/`Egress`, and every rule's
/// ports with a known protocol and a valid port (`endPort` only after a numeric `port`, not
/// below it).
fn network_policy_errors(obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, ty) in array_at(obj, "/spec/policyTypes").iter().enumerate() {
        let ty = ty.as_str().unwrap_or("");
        if !matches!(ty, "Ingress" | "Egress") {
            errors.push(not_supported(
                &format!("spec.policyTypes[{i}]"),
                ty,
                &["Egress", "Ingress"],
            ));
        }
    }
    for direction in ["ingress", "egress"] {
        for (i, rule) in array_at(obj, &format!("/spec/{direction}"))
            .iter()
            .enumerate()
        {
            for (j, port) in array_at(rule, "/ports").iter().enumerate() {
                let at = format!("spec.{direction}[{i}].ports[{j}]");
                if let Some(protocol) = str_at(port, "/protocol") {
                    if !matches!(protocol, "TCP" | "UDP" | "SCTP") {
                        errors.push(not_supported(
                            &format!("{at}.protocol"),
                            protocol,
                            &["SCTP", "TCP", "UDP"],
                        ));
                    }
                }
                if let Some(number) = port.get("port") {
                    errors.extend(port_ref_errors(&format!("{at}.port"), number));
                }
                if let Some(end) = port.get("endPort").and_then(Value::as_i64) {
                    match port.get("port").and_then(Value::as_i64) {
                        Some(start) if end >= start => {}
                        Some(_) => errors.push(FieldError::invalid(
                            format!("{at}.endPort"),
                            Value::from(end),
                            "must be greater than or equal to `port`",
                        )),
                        None => errors.push(FieldError::required(
                            format!("{at}.port"),
                            "must be specified when `endPort` is specified",
                        )),
                    }
                }
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_kind;
    use serde_json::json;

    fn messages(kind: &str, obj: Value) -> Vec<String> {
        errors(&builtin_kind(kind), &obj)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn stateful_set(pod: Value, claims: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "nats"},
            "spec": {"replicas": 3, "serviceName": "nats",
                "selector": {"matchLabels": {"app": "nats"}},
                "template": {"metadata": {"labels": {"app": "nats", "tier": "bus"}}, "spec": pod},
                "volumeClaimTemplates": claims}})
    }

    #[test]
    fn a_valid_stateful_set_mounts_its_claims_and_volumes() {
        let pod = json!({"containers": [{"name": "nats", "image": "nats:2.15.1-alpine",
            "ports": [{"name": "client", "containerPort": 4222}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "monitor"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "config", "mountPath": "/etc/nats"}]}],
            "volumes": [{"name": "config", "configMap": {"name": "nats"}}]});
        let claims = json!([{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "5Gi"}}}}]);
        assert_eq!(
            messages("StatefulSet", stateful_set(pod, claims)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn workload_errors_name_the_field_as_apiserver_does() {
        let pod = json!({"containers": [{"name": "Nats", "ports": [{"name": "a-very-long-port-name", "containerPort": 0}],
            "volumeMounts": [{"name": "missing", "mountPath": "/x"}]}],
            "volumes": [{"name": "v", "emptyDir": {}, "secret": {"secretName": "s"}}]});
        let claims = json!([{"metadata": {"name": "data"}, "spec": {}}]);
        let mut obj = stateful_set(pod, claims);
        obj["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
        obj["spec"]["podManagementPolicy"] = json!("Sometimes");
        obj["spec"]["template"]["spec"]["topologySpreadConstraints"] =
            json!([{"maxSkew": 0, "whenUnsatisfiable": "Never"}]);
        let got = messages("StatefulSet", obj).join("\n");
        for want in [
            "spec.volumeClaimTemplates[0].spec.accessModes: Required value: at least 1 access mode is required",
            "spec.volumeClaimTemplates[0].spec.resources[storage]: Required value",
            "spec.template.metadata.labels: Invalid value:",
            "`selector` does not match template `labels`",
            "spec.template.spec.volumes[0]: Forbidden: may not specify more than 1 volume type",
            "spec.template.spec.containers[0].name: Invalid value: \"Nats\"",
            "spec.template.spec.containers[0].image: Required value",
            "spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive",
            "spec.template.spec.containers[0].ports[0].name: Invalid value: \"a-very-long-port-name\": must be no more than 15 characters",
            "spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"missing\"",
            "spec.podManagementPolicy: Unsupported value: \"Sometimes\": supported values: \"OrderedReady\", \"Parallel\"",
            "spec.template.spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero",
            "spec.template.spec.topologySpreadConstraints[0].topologyKey: Required value: can not be empty",
            "spec.template.spec.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: \"Never\"",
        ] {
            assert!(got.contains(want), "missing {want:?} in:\n{got}");
        }
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        assert_eq!(
            messages("Deployment", deployment),
            ["spec.selector: Required value"]
        );
    }

    #[test]
    fn a_budget_sets_one_bound_within_range() {
        let pdb = |spec: Value| json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"}, "spec": spec});
        assert!(messages(
            "PodDisruptionBudget",
            pdb(json!({"maxUnavailable": 1, "selector": {}}))
        )
        .is_empty());
        assert!(messages("PodDisruptionBudget", pdb(json!({"minAvailable": "50%"}))).is_empty());
        let both = messages(
            "PodDisruptionBudget",
            pdb(json!({"minAvailable": 2, "maxUnavailable": "120%"})),
        )
        .join("\n");
        assert!(
            both.contains("minAvailable and maxUnavailable cannot be both set"),
            "{both}"
        );
        assert!(
            both.contains(
                "spec.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%"
            ),
            "{both}"
        );
        assert_eq!(
            messages("PodDisruptionBudget", pdb(json!({"minAvailable": "half"}))),
            ["spec.minAvailable: Invalid value: \"half\": must be an integer or percentage (e.g '5%')"]
        );
    }

    #[test]
    fn network_policy_ports_and_types_are_checked() {
        let policy = |spec: Value| json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "n"}, "spec": spec});
        let good = policy(json!({"podSelector": {}, "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": 4222}, {"port": "client"}, {"port": 6000, "endPort": 6010}]}]}));
        assert!(messages("NetworkPolicy", good).is_empty());
        let bad = policy(json!({"podSelector": {}, "policyTypes": ["Inbound"],
            "egress": [{"ports": [{"protocol": "HTTP", "port": 70000}, {"endPort": 10}]}]}));
        assert_eq!(
            messages("NetworkPolicy", bad),
            [
                "spec.policyTypes[0]: Unsupported value: \"Inbound\": supported values: \"Egress\", \"Ingress\"",
                "spec.egress[0].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.egress[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.egress[0].ports[1].port: Required value: must be specified when `endPort` is specified",
            ]
        );
    }
}
