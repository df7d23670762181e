//! Authentication and authorization of API requests, as kube-apiserver does them with anonymous
//! authentication off and the RBAC authorizer: a bearer token names the user (401 without one),
//! `system:masters` may do anything, everyone else only what the cluster's RBAC objects grant
//! (403 with the real message). Also the API endpoints that exist only for identities:
//! `TokenRequest` (`serviceaccounts/<name>/token`), `SelfSubjectReview`,
//! `SelfSubjectAccessReview` and `SelfSubjectRulesReview`.
//!
//! Deliberate simplifications: tokens are opaque random strings, not JWTs, and do not expire
//! (a ServiceAccount token stops working when its ServiceAccount is deleted or recreated, as a
//! bound token does); no client certificates, no impersonation. RBAC objects are written only
//! within what their writer holds (`escalation`).

mod bootstrap;
mod escalation;
mod rbac;
mod request;

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use crate::api::{json_response, Call};
use crate::cluster::{Cluster, State};
use crate::error::ApiError;

pub use bootstrap::bootstrap_policy;
pub use rbac::{Action, Policy, PolicyRule, UserInfo};

pub(crate) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The credentials one cluster accepts: its admin token and the ServiceAccount tokens it issued.
pub struct Tokens {
    admin: String,
    issued: Mutex<HashMap<String, BoundAccount>>,
}

/// The ServiceAccount a token was issued for; `uid` ties it to that object, so a deleted and
/// recreated ServiceAccount of the same name does not inherit old tokens.
#[derive(Clone, Debug)]
struct BoundAccount {
    namespace: String,
    name: String,
    uid: String,
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens {
            admin: random_token(),
            issued: Mutex::default(),
        }
    }
}

fn random_token() -> String {
    format!(
        "sluice-testserver.{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl Tokens {
    /// The token of `kubernetes-admin` (group `system:masters`) in this cluster.
    pub fn admin(&self) -> &str {
        &self.admin
    }

    /// Issues a token for ServiceAccount `namespace/name`; 404 when it does not exist.
    pub fn issue(&self, state: &State, namespace: &str, name: &str) -> Result<String, ApiError> {
        let uid = service_account_uid(state, namespace, name).ok_or_else(|| {
            let mut e = ApiError::new(
                404,
                "NotFound",
                format!("serviceaccounts \"{name}\" not found"),
            );
            e.details = Some(json!({"name": name, "kind": "serviceaccounts"}));
            e
        })?;
        let token = random_token();
        self.issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                token.clone(),
                BoundAccount {
                    namespace: namespace.into(),
                    name: name.into(),
                    uid,
                },
            );
        Ok(token)
    }

    /// The user a bearer token stands for, if the token is valid in this cluster now.
    fn user(&self, state: &State, token: &str) -> Option<UserInfo> {
        if token == self.admin {
            return Some(UserInfo::admin());
        }
        let bound = self
            .issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()?;
        (service_account_uid(state, &bound.namespace, &bound.name).as_ref() == Some(&bound.uid))
            .then(|| UserInfo {
                uid: bound.uid.clone(),
                ..UserInfo::service_account(&bound.namespace, &bound.name)
            })
    }
}

fn service_account_uid(state: &State, namespace: &str, name: &str) -> Option<String> {
    state
        .get(&("".into(), "serviceaccounts".into()), namespace, name)?
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The response to a request without valid credentials.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// Authenticates a request on `path` (below the cluster's base path) and authorizes what it
/// asks; the user when it may proceed, else the 401 or 403 to answer.
pub fn admit(
    cluster: &Cluster,
    method: &str,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .ok_or_else(unauthorized)?;
    let state = cluster.lock();
    let user = cluster
        .tokens
        .user(&state, token)
        .ok_or_else(unauthorized)?;
    if user.in_group(rbac::MASTERS) {
        return Ok(user);
    }
    let path = path.trim_matches('/');
    // OpenAPI index URLs carry the cluster prefix; clients may join it onto the base path again.
    let prefix = format!("clusters/{}", cluster.name);
    let path = match path.strip_prefix(&prefix) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
        _ => path,
    };
    let path = format!("/{path}");
    let action = request::action(
        method,
        &path,
        query.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    let policy = state.policy();
    let denied = |error: ApiError| {
        cluster.audit.record_denial(crate::audit::Denial {
            user: user.name.clone(),
            method: method.to_string(),
            path: path.clone(),
            message: error.message.clone(),
        });
        error
    };
    authorize(&policy, &user, &action).map_err(denied)?;
    // A server-side apply that creates its object is also a create (kube-apiserver's
    // `withAuthorization` on create-on-update).
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Action::Resource {
        verb,
        group,
        resource,
        subresource,
        namespace,
        name,
        ..
    } = &action
    {
        let stored_namespace = if group.is_empty() && resource == "namespaces" {
            ""
        } else {
            namespace
        };
        if verb == "patch"
            && subresource.is_empty()
            && content_type.starts_with("application/apply-patch")
            && state
                .get(&(group.clone(), resource.clone()), stored_namespace, name)
                .is_none()
        {
            let mut create = action.clone();
            if let Action::Resource { verb, .. } = &mut create {
                *verb = "create".into();
            }
            authorize(&policy, &user, &create).map_err(denied)?;
        }
    }
    Ok(user)
}

/// 403 unless `policy` lets `user` do `action`; `system:masters` always may.
fn authorize(policy: &Policy, user: &UserInfo, action: &Action) -> Result<(), ApiError> {
    if user.in_group(rbac::MASTERS) || policy.allows(user, action) {
        return Ok(());
    }
    let mut error = ApiError::new(403, "Forbidden", action.forbidden_message(&user.name));
    if let Action::Resource {
        group,
        resource,
        name,
        ..
    } = action
    {
        // As the real Status: an empty name is left out.
        error.details = Some(if name.is_empty() {
            json!({"group": group, "kind": resource})
        } else {
            json!({"name": name, "group": group, "kind": resource})
        });
    }
    Err(error)
}

/// RBAC's escalation prevention (`escalation`) on a write of `object`, of the RBAC kind
/// `kind` (`plural`) in `namespace`, by `user`; `previous` is what is stored now.
pub(crate) fn confirm_rbac_write(
    policy: &Policy,
    user: &UserInfo,
    kind: &str,
    plural: &str,
    namespace: &str,
    object: &Value,
    previous: Option<&Value>,
) -> Result<(), ApiError> {
    escalation::confirm(policy, user, kind, namespace, object, previous).map_err(|refusal| {
        escalation::to_api_error(refusal, plural, crate::object::meta_str(object, "name"))
    })
}

/// Every Role, ClusterRole, RoleBinding and ClusterRoleBinding stored in a cluster (what
/// `State::policy` keeps until one of them changes).
pub(crate) fn read_policy(state: &State) -> Policy {
    let mut policy = Policy::default();
    for (kind, plural) in [
        ("ClusterRole", "clusterroles"),
        ("Role", "roles"),
        ("ClusterRoleBinding", "clusterrolebindings"),
        ("RoleBinding", "rolebindings"),
    ] {
        for (_, object) in state.list(&(RBAC_GROUP.into(), plural.into()), None, None) {
            policy.add(kind, object);
        }
    }
    policy
}

/// Answers the identity endpoints, `None` for every other request. Runs after `admit`.
pub(crate) fn serve(
    call: &Call,
    path: &str,
    user: &UserInfo,
) -> Option<Result<Response, ApiError>> {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if call.method != axum::http::Method::POST {
        // Create-only resources: their paths answer any other method as kube-apiserver's
        // router does.
        return is_create_only(&parts).then(|| {
            Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ))
        });
    }
    match parts.as_slice() {
        ["api", "v1", "namespaces", namespace, "serviceaccounts", name, "token"] => {
            Some(token_request(call, namespace, name))
        }
        ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] => {
            Some(self_subject_access_review(call, user))
        }
        ["apis", "authorization.k8s.io", "v1", "selfsubjectrulesreviews"] => {
            Some(self_subject_rules_review(call, user))
        }
        ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] => {
            Some(Ok(self_subject_review(user)))
        }
        _ => None,
    }
}

/// Whether `parts` (a path's segments) name one of the identity endpoints, which only create.
fn is_create_only(parts: &[&str]) -> bool {
    matches!(
        parts,
        ["api", "v1", "namespaces", _, "serviceaccounts", _, "token"]
            | [
                "apis",
                "authorization.k8s.io",
                "v1",
                "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            ]
            | ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]
    )
}

/// `POST serviceaccounts/<name>/token`: issues a token for an existing ServiceAccount.
fn token_request(call: &Call, namespace: &str, name: &str) -> Result<Response, ApiError> {
    let request = crate::api::body_json(call)?;
    let token = {
        let state = call.cluster.lock();
        call.cluster.tokens.issue(&state, namespace, name)?
    };
    let seconds = request
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    let expires = time::OffsetDateTime::now_utc() + time::Duration::seconds(seconds);
    let expires = expires
        .replace_nanosecond(0)
        .unwrap_or(expires)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let mut spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["expirationSeconds"] = json!(seconds);
    if spec
        .get("audiences")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    let response = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": spec,
        "status": {"token": token, "expirationTimestamp": expires},
    });
    Ok(json_response(StatusCode::CREATED, &response))
}

/// `POST selfsubjectreviews` (`kubectl auth whoami`): who the caller is.
fn self_subject_review(user: &UserInfo) -> Response {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    let review = json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": info},
    });
    json_response(StatusCode::CREATED, &review)
}

/// `POST selfsubjectrulesreviews` (`kubectl auth can-i --list`): every rule bound to the
/// caller in `spec.namespace`, resource rules and URL rules apart. A member of
/// `system:masters`, whom no rule is needed for, gets its bound rules like anyone, as from
/// kube-apiserver.
fn self_subject_rules_review(call: &Call, user: &UserInfo) -> Result<Response, ApiError> {
    let mut review = crate::api::body_json(call)?;
    let namespace = review
        .pointer("/spec/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let policy = call.cluster.lock().policy();
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in policy.rules_for(user, &namespace) {
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
        if !rule.resources.is_empty() {
            let mut out = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups, "resources": rule.resources});
            if !rule.resource_names.is_empty() {
                out["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(out);
        }
    }
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectRulesReview");
    review["metadata"] = json!({"creationTimestamp": null});
    review["spec"] = json!({"namespace": namespace});
    review["status"] = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    Ok(json_response(StatusCode::CREATED, &review))
}

/// `POST selfsubjectaccessreviews`: whether the caller may do what the spec describes.
fn self_subject_access_review(call: &Call, user: &UserInfo) -> Result<Response, ApiError> {
    let mut review = crate::api::body_json(call)?;
    let spec = review.get("spec").cloned().unwrap_or_default();
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let action = if let Some(r) = spec.get("resourceAttributes") {
        Action::Resource {
            verb: text(r, "verb"),
            group: text(r, "group"),
            version: text(r, "version"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            namespace: text(r, "namespace"),
            name: text(r, "name"),
        }
    } else if let Some(n) = spec.get("nonResourceAttributes") {
        Action::NonResource {
            verb: text(n, "verb"),
            path: text(n, "path"),
        }
    } else {
        return Err(ApiError::new(
            422,
            "Invalid",
            "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    };
    let allowed = authorize(&call.cluster.lock().policy(), user, &action).is_ok();
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectAccessReview");
    review["metadata"] = json!({"creationTimestamp": null});
    review["status"] = json!({"allowed": allowed});
    Ok(json_response(StatusCode::CREATED, &review))
}
