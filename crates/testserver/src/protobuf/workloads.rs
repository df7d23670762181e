//! The workload kinds kubectl's typed generators send as protobuf: `create deployment`, `create
//! job`, `create cronjob`, `create service`, `create pdb`, `create ingress` and `autoscale`. The fields those
//! generators set are converted; a body that sets any other field (a Job made `--from` a
//! CronJob whose template uses more of the pod spec, say) is refused with 415 naming the message,
//! never stored without it.

use prost::Message;
use serde_json::{json, Map, Value};

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::autoscaling::v2 as autoscaling;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::networking::v1 as networking;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;

use super::{into_map, label_selector, object_meta, unsupported, with_meta, Obj};
use crate::error::ApiError;

type Result<T> = std::result::Result<T, ApiError>;

/// Whether an encoded message holds only zero values: Go writes every non-pointer field, so an
/// untouched struct arrives as zero varints, empty strings and empty submessages. A
/// length-delimited field counts as zero when it is empty or itself a message of zero values.
fn is_zero(mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        let Ok(key) = prost::encoding::decode_varint(&mut bytes) else {
            return false;
        };
        let zero = match key & 7 {
            0 => prost::encoding::decode_varint(&mut bytes).is_ok_and(|v| v == 0),
            1 if bytes.len() >= 8 => {
                let (value, after) = bytes.split_at(8);
                bytes = after;
                value == [0; 8]
            }
            2 => match prost::encoding::decode_varint(&mut bytes) {
                Ok(len) if (len as usize) <= bytes.len() => {
                    let (inner, after) = bytes.split_at(len as usize);
                    bytes = after;
                    inner.is_empty() || is_zero(inner)
                }
                _ => false,
            },
            5 if bytes.len() >= 4 => {
                let (value, after) = bytes.split_at(4);
                bytes = after;
                value == [0; 4]
            }
            _ => false,
        };
        if !zero {
            return false;
        }
    }
    true
}

/// Refuses a body whose `message` still holds fields once the ones decoded here were taken.
fn nothing_else<T: Message>(kind: &str, message: &str, rest: &T) -> Result<()> {
    if is_zero(&rest.encode_to_vec()) {
        Ok(())
    } else {
        Err(unsupported(format!(
            "protobuf body of {kind} sets fields of {message} this test server does not decode; send application/json"
        )))
    }
}

fn int_or_string(v: IntOrString) -> Value {
    match v.r#type {
        Some(1) => json!(v.str_val.unwrap_or_default()),
        _ => json!(v.int_val.unwrap_or_default()),
    }
}

fn quantities(
    map: std::collections::BTreeMap<String, Quantity>,
) -> impl Iterator<Item = (String, String)> {
    map.into_iter()
        .map(|(k, q)| (k, q.string.unwrap_or_default()))
}

fn container(kind: &str, mut c: core::Container) -> Result<Value> {
    let ports = std::mem::take(&mut c.ports);
    let resources = c.resources.take().unwrap_or_default();
    let out = Obj::default()
        .string("name", c.name.take())
        .string("image", c.image.take())
        .list("command", std::mem::take(&mut c.command), Value::from)
        .list("args", std::mem::take(&mut c.args), Value::from)
        .string("workingDir", c.working_dir.take())
        .list("ports", ports, |p| {
            Obj::default()
                .string("name", p.name)
                .int("hostPort", p.host_port.map(i64::from))
                .int("containerPort", p.container_port.map(i64::from))
                .string("protocol", p.protocol)
                .string("hostIP", p.host_ip)
                .done()
        })
        .string("imagePullPolicy", c.image_pull_policy.take())
        .string("terminationMessagePath", c.termination_message_path.take())
        .string(
            "terminationMessagePolicy",
            c.termination_message_policy.take(),
        );
    nothing_else(
        kind,
        "its resources",
        &core::ResourceRequirements {
            claims: resources.claims,
            ..Default::default()
        },
    )?;
    let requirements = Obj::default()
        .strings("limits", quantities(resources.limits))
        .strings("requests", quantities(resources.requests))
        .done();
    // `resources` is a struct without a pointer: Go's JSON always writes it.
    let mut out = out;
    out.0.insert("resources".into(), requirements);
    nothing_else(kind, "a container", &c)?;
    Ok(out.done())
}

fn pod_template(kind: &str, t: Option<core::PodTemplateSpec>) -> Result<Value> {
    let t = t.unwrap_or_default();
    let mut spec = t.spec.unwrap_or_default();
    let containers = std::mem::take(&mut spec.containers)
        .into_iter()
        .map(|c| container(kind, c))
        .collect::<Result<Vec<_>>>()?;
    let init = std::mem::take(&mut spec.init_containers)
        .into_iter()
        .map(|c| container(kind, c))
        .collect::<Result<Vec<_>>>()?;
    let pod = Obj::default()
        .value("initContainers", Value::Array(init))
        .nullable_list("containers", containers, |c| c)
        .string("restartPolicy", spec.restart_policy.take())
        .present(
            "terminationGracePeriodSeconds",
            spec.termination_grace_period_seconds
                .take()
                .map(Value::from),
        )
        .present(
            "activeDeadlineSeconds",
            spec.active_deadline_seconds.take().map(Value::from),
        )
        .string("dnsPolicy", spec.dns_policy.take())
        .string("schedulerName", spec.scheduler_name.take())
        .string("serviceAccountName", spec.service_account_name.take())
        .strings("nodeSelector", std::mem::take(&mut spec.node_selector));
    nothing_else(kind, "the pod spec", &spec)?;
    Ok(Obj::default()
        .value("metadata", object_meta(t.metadata))
        .value("spec", pod.done())
        .done())
}

/// An object of `metadata` and `spec`.
fn with_spec(
    metadata: Option<k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    spec: Value,
) -> Map<String, Value> {
    let mut obj = with_meta(metadata);
    obj.0.insert("spec".into(), spec);
    into_map(obj.done())
}

/// The status a generator sends: empty.
fn no_status<T: Message>(kind: &str, status: Option<T>) -> Result<()> {
    match status {
        Some(status) => nothing_else(kind, "the status", &status),
        None => Ok(()),
    }
}

pub fn deployment(
    raw: &[u8],
    invalid: impl Fn(prost::DecodeError) -> ApiError,
) -> Result<Map<String, Value>> {
    const KIND: &str = "apps/v1 Deployment";
    let d = apps::Deployment::decode(raw).map_err(&invalid)?;
    no_status(KIND, d.status)?;
    let s = d.spec.unwrap_or_default();
    let strategy = s.strategy.unwrap_or_default();
    let rolling = strategy.rolling_update.map(|r| {
        Obj::default()
            .present("maxUnavailable", r.max_unavailable.map(int_or_string))
            .present("maxSurge", r.max_surge.map(int_or_string))
            .done()
    });
    let spec = Obj::default()
        .present("replicas", s.replicas.map(Value::from))
        .present("selector", s.selector.map(label_selector))
        .value("template", pod_template(KIND, s.template)?)
        .value(
            "strategy",
            Obj::default()
                .string("type", strategy.r#type)
                .present("rollingUpdate", rolling)
                .done(),
        )
        .int("minReadySeconds", s.min_ready_seconds.map(i64::from))
        .present(
            "revisionHistoryLimit",
            s.revision_history_limit.map(Value::from),
        )
        .bool("paused", s.paused.filter(|p| *p))
        .present(
            "progressDeadlineSeconds",
            s.progress_deadline_seconds.map(Value::from),
        )
        .done();
    Ok(with_spec(d.metadata, spec))
}

fn job_spec(kind: &str, mut s: batch::JobSpec) -> Result<Value> {
    let template = pod_template(kind, s.template.take())?;
    let out = Obj::default()
        .present("parallelism", s.parallelism.take().map(Value::from))
        .present("completions", s.completions.take().map(Value::from))
        .present("backoffLimit", s.backoff_limit.take().map(Value::from))
        .present("selector", s.selector.take().map(label_selector))
        .bool("manualSelector", s.manual_selector.take())
        .value("template", template)
        .present(
            "ttlSecondsAfterFinished",
            s.ttl_seconds_after_finished.take().map(Value::from),
        )
        .string("completionMode", s.completion_mode.take())
        .bool("suspend", s.suspend.take());
    nothing_else(kind, "the job spec", &s)?;
    Ok(out.done())
}

pub fn job(
    raw: &[u8],
    invalid: impl Fn(prost::DecodeError) -> ApiError,
) -> Result<Map<String, Value>> {
    const KIND: &str = "batch/v1 Job";
    let j = batch::Job::decode(raw).map_err(&invalid)?;
    no_status(KIND, j.status)?;
    let spec = job_spec(KIND, j.spec.unwrap_or_default())?;
    Ok(with_spec(j.metadata, spec))
}

pub fn cron_job(
    raw: &[u8],
    invalid: impl Fn(prost::DecodeError) -> ApiError,
) -> Result<Map<String, Value>> {
    const KIND: &str = "batch/v1 CronJob";
    let c = batch::CronJob::decode(raw).map_err(&invalid)?;
    no_status(KIND, c.status)?;
    let mut s = c.spec.unwrap_or_default();
    let template = s.job_template.take().unwrap_or_default();
    let job_template = Obj::default()
        .value("metadata", object_meta(template.metadata))
        .value("spec", job_spec(KIND, template.spec.unwrap_or_default())?)
        .done();
    let spec = Obj::default()
        .string("schedule", s.schedule.take())
        .string("timeZone", s.time_zone.take())
        .string("concurrencyPolicy", s.concurrency_policy.take())
        .bool("suspend", s.suspend.take())
        .value("jobTemplate", job_template)
        .present(
            "successfulJobsHistoryLimit",
            s.successful_jobs_history_limit.take().map(Value::from),
        )
        .present(
            "failedJobsHistoryLimit",
            s.failed_jobs_history_limit.take().map(Value::from),
        );
    nothing_else(KIND, "the cron job spec", &s)?;
    Ok(with_spec(c.metadata, spec.done()))
}

pub fn service(
    raw: &[u8],
    invalid: impl Fn(prost::DecodeError) -> ApiError,
) -> Result<Map<String, Value>> {
    const KIND: &str = "v1 Service";
    let svc = core::Service::decode(raw).map_err(&invalid)?;
    if let Some(status) = svc.status {
        nothing_else(KIND, "the status", &status)?;
    }
    let mut s = svc.spec.unwrap_or_default();
    let spec = Obj::default()
        .list("ports", std::mem::take(&mut s.ports), |p| {
            Obj::default()
                .string("name", p.name)
                .string("protocol", p.protocol)
                .string("appProtocol", p.app_protocol)
                .int("port", p.port.map(i64::from))
                .present(
                    "targetPort",
                    p.target_port
                        .map(int_or_string)
                        .filter(|v| v != &json!(0) && v != &json!("")),
                )
                .int("nodePort", p.node_port.map(i64::from))
                .done()
        })
        .strings("selector", std::mem::take(&mut s.selector))
        .string("clusterIP", s.cluster_ip.take())
        .list(
            "clusterIPs",
            std::mem::take(&mut s.cluster_ips),
            Value::from,
        )
        .string("type", s.r#type.take())
        .string("externalName", s.external_name.take());
    nothing_else(KIND, "the service spec", &s)?;
    Ok(with_spec(svc.metadata, spec.done()))
}

pub fn autoscaler(
    raw: &[u8],
    invalid: impl Fn(prost::DecodeError) -> ApiError,
) -> Result<Map<String, Value>> {
    const KIND: &str = "autoscaling/v2 HorizontalPodAutoscaler";
    let h = autoscaling::HorizontalPodAutoscaler::decode(raw).map_err(&invalid)?;
    no_status(KIND, h.status)?;
    let mut s = h.spec.unwrap_or_default();
    let target = s.scale_target_ref.take().unwrap_or_default();
    let mut metrics = Vec::new();
    for mut m in std::mem::take(&mut s.metrics) {
        let resource = m.resource.take().map(|r| {
            let t = r.target.unwrap_or_default();
            let target = Obj::default()
                .string("type", t.r#type)
                .present("value", t.value.and_then(|q| q.string).map(Value::from))
                .present(
                    "averageValue",
                    t.average_value.and_then(|q| q.string).map(Value::from),
                )
                .present("averageUtilization", t.average_utilization.map(Value::from))
                .done();
            Obj::default()
                .string("name", r.name)
                .value("target", target)
                .done()
        });
        let metric = Obj::default()
            .string("type", m.r#type.take())
            .present("resource", resource);
        nothing_else(KIND, "a metric", &m)?;
        metrics.push(metric.done());
    }
    let spec = Obj::default()
        .value(
            "scaleTargetRef",
            Obj::default()
                .required("kind", target.kind)
                .required("name", target.name)
                .string("apiVersion", target.api_version)
                .done(),
        )
        .present("minReplicas", s.min_replicas.take().map(Value::from))
        .int("maxReplicas", s.max_replicas.take().map(i64::from))
        .value("metrics", Value::Array(metrics));
    nothing_else(KIND, "the autoscaler spec", &s)?;
    Ok(with_spec(h.metadata, spec.done()))
}

pub fn disruption_budget(
    raw: &[u8],
    invalid: impl Fn(prost::DecodeError) -> ApiError,
) -> Result<Map<String, Value>> {
    const KIND: &str = "policy/v1 PodDisruptionBudget";
    let p = policy::PodDisruptionBudget::decode(raw).map_err(&invalid)?;
    no_status(KIND, p.status)?;
    let s = p.spec.unwrap_or_default();
    let spec = Obj::default()
        .present("minAvailable", s.min_available.map(int_or_string))
        .present("selector", s.selector.map(label_selector))
        .present("maxUnavailable", s.max_unavailable.map(int_or_string))
        .string(
            "unhealthyPodEvictionPolicy",
            s.unhealthy_pod_eviction_policy,
        )
        .done();
    Ok(with_spec(p.metadata, spec))
}

fn ingress_backend(b: networking::IngressBackend) -> Value {
    let service = b.service.map(|s| {
        let port = s.port.unwrap_or_default();
        let mut out = Obj::default().required("name", s.name);
        out.0.insert(
            "port".into(),
            Obj::default()
                .string("name", port.name)
                .int("number", port.number.map(i64::from))
                .done(),
        );
        out.done()
    });
    let resource = b.resource.map(|r| {
        Obj::default()
            .present("apiGroup", r.api_group.map(Value::from))
            .required("kind", r.kind)
            .required("name", r.name)
            .done()
    });
    Obj::default()
        .present("service", service)
        .present("resource", resource)
        .done()
}

pub fn ingress(
    raw: &[u8],
    invalid: impl Fn(prost::DecodeError) -> ApiError,
) -> Result<Map<String, Value>> {
    const KIND: &str = "networking.k8s.io/v1 Ingress";
    let i = networking::Ingress::decode(raw).map_err(&invalid)?;
    no_status(KIND, i.status)?;
    let s = i.spec.unwrap_or_default();
    let rules = s.rules.into_iter().map(|r| {
        let http = r.ingress_rule_value.and_then(|v| v.http).map(|h| {
            Obj::default()
                .nullable_list("paths", h.paths, |p| {
                    let mut out = Obj::default()
                        .string("path", p.path)
                        .present("pathType", p.path_type.map(Value::from));
                    out.0.insert(
                        "backend".into(),
                        ingress_backend(p.backend.unwrap_or_default()),
                    );
                    out.done()
                })
                .done()
        });
        Obj::default()
            .string("host", r.host)
            .present("http", http)
            .done()
    });
    let spec = Obj::default()
        .present("ingressClassName", s.ingress_class_name.map(Value::from))
        .present("defaultBackend", s.default_backend.map(ingress_backend))
        .list("tls", s.tls, |t| {
            Obj::default()
                .list("hosts", t.hosts, Value::from)
                .string("secretName", t.secret_name)
                .done()
        })
        .value("rules", Value::Array(rules.collect()))
        .done();
    Ok(with_spec(i.metadata, spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(e: prost::DecodeError) -> ApiError {
        ApiError::bad_request(e.to_string())
    }

    #[test]
    fn a_field_no_generator_sets_is_refused_not_dropped() {
        let container = |probe: Option<core::Probe>| core::Container {
            name: Some("web".into()),
            image: Some("nginx".into()),
            liveness_probe: probe,
            ..Default::default()
        };
        let deployment = |probe| apps::Deployment {
            spec: Some(apps::DeploymentSpec {
                template: Some(core::PodTemplateSpec {
                    spec: Some(core::PodSpec {
                        containers: vec![container(probe)],
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let plain = deployment(None).encode_to_vec();
        let decoded = super::deployment(&plain, bad).expect("decoded");
        assert_eq!(
            decoded["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx", "resources": {}}])
        );
        let probed = deployment(Some(core::Probe {
            period_seconds: Some(5),
            ..Default::default()
        }))
        .encode_to_vec();
        let refused = super::deployment(&probed, bad).expect_err("refused");
        assert_eq!(refused.code, 415);
        assert_eq!(
            refused.message,
            "protobuf body of apps/v1 Deployment sets fields of a container this test server does not decode; send application/json"
        );
    }

    #[test]
    fn zero_values_are_empty_and_anything_else_is_not() {
        let untouched = core::Container {
            name: Some(String::new()),
            stdin: Some(false),
            resources: Some(core::ResourceRequirements::default()),
            ..Default::default()
        };
        assert!(is_zero(&untouched.encode_to_vec()));
        let set = core::Container {
            tty: Some(true),
            ..Default::default()
        };
        assert!(!is_zero(&set.encode_to_vec()));
        let probe = core::Container {
            liveness_probe: Some(core::Probe {
                period_seconds: Some(5),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!is_zero(&probe.encode_to_vec()));
    }
}
