//! What an HTTP request asks to do, read from its method, path and query the way kube-apiserver's
//! `RequestInfoFactory` reads them: the verb, and for resource requests the group, version,
//! resource, subresource, namespace and name. Purely syntactic: it does not know which resources
//! exist (an unknown resource is still authorized before it is answered with 404).

use super::rbac::Action;

/// Namespace subresources: `namespaces/<name>/status` is a subresource of the namespace, not a
/// resource called `status` inside it.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The action of a request on `path` (below the cluster's base path, starting with `/`).
/// `query` yields the decoded query parameters.
pub fn action<'a>(
    method: &str,
    path: &str,
    query: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Action {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, mut rest) = match parts.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => ("", *version, rest),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => (*group, *version, rest),
        _ => {
            return Action::NonResource {
                verb: method.to_ascii_lowercase(),
                path: path.to_string(),
            }
        }
    };
    let mut verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        other => return resource_action(other.to_ascii_lowercase(), group, version, rest),
    }
    .to_string();
    if rest.first() == Some(&"watch") {
        verb = "watch".into();
        rest = &rest[1..];
    }
    let mut action = resource_action(verb, group, version, rest);
    if let Action::Resource { verb, name, .. } = &mut action {
        if name.is_empty() {
            let mut watch = false;
            let mut selected = None;
            for (key, value) in query {
                match key {
                    "watch" => watch = matches!(value, "true" | "1"),
                    "fieldSelector" => selected = exact_name(value),
                    _ => {}
                }
            }
            match verb.as_str() {
                "get" => {
                    *verb = if watch { "watch" } else { "list" }.into();
                    *name = selected.unwrap_or_default();
                }
                "watch" => *name = selected.unwrap_or_default(),
                "delete" => *verb = "deletecollection".into(),
                _ => {}
            }
        }
    }
    action
}

fn resource_action(verb: String, group: &str, version: &str, rest: &[&str]) -> Action {
    let mut namespace = "";
    let mut rest = rest;
    if rest.first() == Some(&"namespaces") {
        if let Some(ns) = rest.get(1) {
            namespace = ns;
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
            }
        }
    }
    let part = |i: usize| rest.get(i).copied().unwrap_or("").to_string();
    Action::Resource {
        verb,
        group: group.into(),
        version: version.into(),
        resource: part(0),
        name: part(1),
        subresource: part(2),
        namespace: namespace.into(),
    }
}

/// The name a field selector requires exactly (`metadata.name=x` or `==`), if it does.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let (field, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .filter(|(f, _)| !f.ends_with('!'))?;
        (field.trim() == "metadata.name" && !value.trim().is_empty())
            .then(|| value.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: &str, url: &str, want: &str) {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let pairs: Vec<(&str, &str)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        let got = match action(method, path, pairs) {
            Action::Resource {
                verb,
                group,
                version,
                resource,
                subresource,
                namespace,
                name,
            } => format!(
                "{verb} {group}/{version} {resource}/{subresource} ns={namespace} name={name}"
            ),
            Action::NonResource { verb, path } => format!("{verb} path {path}"),
        };
        assert_eq!(got, want, "{method} {url}");
    }

    #[test]
    fn requests_map_to_verbs_and_attributes_as_kube_apiserver_maps_them() {
        let cases = [
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps/c",
                "get /v1 configmaps/ ns=ns name=c",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps",
                "list /v1 configmaps/ ns=ns name=",
            ),
            (
                "GET",
                "/api/v1/configmaps",
                "list /v1 configmaps/ ns= name=",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=5",
                "watch /v1 configmaps/ ns=ns name=",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps?watch=1",
                "watch /v1 configmaps/ ns=ns name=",
            ),
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps?watch=false",
                "list /v1 configmaps/ ns=ns name=",
            ),
            (
                "GET",
                "/api/v1/watch/namespaces/ns/configmaps",
                "watch /v1 configmaps/ ns=ns name=",
            ),
            // a list or watch of one name by field selector names it
            (
                "GET",
                "/api/v1/namespaces/p/secrets?fieldSelector=metadata.name=x",
                "list /v1 secrets/ ns=p name=x",
            ),
            (
                "GET",
                "/api/v1/namespaces/p/secrets?fieldSelector=metadata.namespace=p,metadata.name=x",
                "list /v1 secrets/ ns=p name=x",
            ),
            (
                "GET",
                "/api/v1/namespaces/p/secrets?fieldSelector=metadata.name=x&watch=true",
                "watch /v1 secrets/ ns=p name=x",
            ),
            (
                "GET",
                "/api/v1/namespaces/p/secrets?fieldSelector=metadata.name==x",
                "list /v1 secrets/ ns=p name=x",
            ),
            (
                "GET",
                "/api/v1/namespaces/p/secrets?fieldSelector=metadata.name!=x",
                "list /v1 secrets/ ns=p name=",
            ),
            (
                "POST",
                "/apis/lib.projectsveltos.io/v1beta1/namespaces/default/eventreports",
                "create lib.projectsveltos.io/v1beta1 eventreports/ ns=default name=",
            ),
            (
                "PUT",
                "/apis/apps/v1/namespaces/ns/deployments/d",
                "update apps/v1 deployments/ ns=ns name=d",
            ),
            (
                "PATCH",
                "/apis/lib.projectsveltos.io/v1beta1/eventtriggers/t/status",
                "patch lib.projectsveltos.io/v1beta1 eventtriggers/status ns= name=t",
            ),
            (
                "PATCH",
                "/apis/lib.projectsveltos.io/v1beta1/eventtriggers/t",
                "patch lib.projectsveltos.io/v1beta1 eventtriggers/ ns= name=t",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/configmaps/c",
                "delete /v1 configmaps/ ns=ns name=c",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/ns/configmaps",
                "deletecollection /v1 configmaps/ ns=ns name=",
            ),
            (
                "POST",
                "/api/v1/namespaces/ns/serviceaccounts/sa/token",
                "create /v1 serviceaccounts/token ns=ns name=sa",
            ),
            // a namespace is named in its own namespace
            (
                "GET",
                "/api/v1/namespaces/ns",
                "get /v1 namespaces/ ns=ns name=ns",
            ),
            (
                "PUT",
                "/api/v1/namespaces/ns/finalize",
                "update /v1 namespaces/finalize ns=ns name=ns",
            ),
            (
                "PUT",
                "/api/v1/namespaces/ns/status",
                "update /v1 namespaces/status ns=ns name=ns",
            ),
            (
                "GET",
                "/api/v1/namespaces",
                "list /v1 namespaces/ ns= name=",
            ),
            (
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                "create authorization.k8s.io/v1 selfsubjectaccessreviews/ ns= name=",
            ),
            // discovery and the rest are paths
            ("GET", "/api", "get path /api"),
            ("GET", "/api/v1", "get path /api/v1"),
            ("GET", "/apis/apps/v1", "get path /apis/apps/v1"),
            (
                "GET",
                "/openapi/v3/apis/apps/v1",
                "get path /openapi/v3/apis/apps/v1",
            ),
            ("GET", "/version", "get path /version"),
            ("POST", "/healthz", "post path /healthz"),
        ];
        for (method, url, want) in cases {
            check(method, url, want);
        }
    }
}
