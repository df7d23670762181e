//! CRD version conversion as kube-apiserver performs it: strategy `None` relabels `apiVersion`,
//! strategy `Webhook` posts an `apiextensions.k8s.io/v1` `ConversionReview` to the CRD's
//! `clientConfig` (a `url`, or a `service` mapped to a URL by `Config::webhook_services`) over
//! HTTPS, trusting only the CRD's `caBundle`, and checks the answer as the real server does.
//!
//! The call is blocking (the API handlers are synchronous and run under the cluster lock); on a
//! multi-threaded runtime it runs in `block_in_place`. A webhook served by the same
//! current-thread runtime as the test server would deadlock: serve it from its own thread or
//! process.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::resources::ResourceInfo;

/// kube-apiserver's fixed timeout for conversion webhooks.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// `spec.conversion` of a CRD.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Strategy {
    #[default]
    None,
    Webhook(Webhook),
}

/// `spec.conversion.webhook.clientConfig`.
#[derive(Clone, Debug, PartialEq)]
pub struct Webhook {
    pub url: Option<String>,
    pub service: Option<ServiceRef>,
    /// PEM certificates the webhook's serving certificate must chain to.
    pub ca_bundle: Vec<u8>,
}

/// `clientConfig.service`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub path: String,
    pub port: u16,
}

/// Base URLs (`https://127.0.0.1:9443`) of in-cluster Services by `namespace/name`: how the
/// test server reaches a webhook named by `clientConfig.service`.
pub type ServiceUrls = Arc<BTreeMap<String, String>>;

/// Reads `spec.conversion`; an absent one is strategy `None`.
pub fn strategy(crd: &Value) -> Result<Strategy, String> {
    let Some(conversion) = crd.pointer("/spec/conversion") else {
        return Ok(Strategy::None);
    };
    match conversion.get("strategy").and_then(Value::as_str) {
        None | Some("None") => Ok(Strategy::None),
        Some("Webhook") => {
            let client = conversion
                .pointer("/webhook/clientConfig")
                .ok_or("spec.conversion.webhook.clientConfig is required for strategy Webhook")?;
            let url = client.get("url").and_then(Value::as_str).map(str::to_string);
            let service = client.get("service").map(|s| {
                let text = |key: &str| s.get(key).and_then(Value::as_str).unwrap_or("").to_string();
                ServiceRef {
                    namespace: text("namespace"),
                    name: text("name"),
                    path: text("path"),
                    port: s
                        .get("port")
                        .and_then(Value::as_u64)
                        .and_then(|p| u16::try_from(p).ok())
                        .unwrap_or(443),
                }
            });
            if url.is_some() == service.is_some() {
                return Err(
                    "spec.conversion.webhook.clientConfig: exactly one of url or service is required"
                        .into(),
                );
            }
            let ca_bundle = match client.get("caBundle").and_then(Value::as_str) {
                None => Vec::new(),
                Some(b64) => base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| format!("spec.conversion.webhook.clientConfig.caBundle: {e}"))?,
            };
            Ok(Strategy::Webhook(Webhook {
                url,
                service,
                ca_bundle,
            }))
        }
        Some(other) => Err(format!(
            "spec.conversion.strategy: Unsupported value: {other:?}: supported values: \"None\", \"Webhook\""
        )),
    }
}

/// Converts `objects` to `version` of `info`'s resource. Objects already in that version are
/// returned as they are; with strategy `None` the others are relabelled.
pub fn convert(
    info: &ResourceInfo,
    services: &ServiceUrls,
    objects: Vec<Value>,
    version: &str,
) -> Result<Vec<Value>, ApiError> {
    let desired = info.api_version(version);
    let webhook = match &info.conversion {
        Strategy::Webhook(w) => w,
        Strategy::None => {
            return Ok(objects
                .into_iter()
                .map(|mut o| {
                    if o.is_object() {
                        o["apiVersion"] = json!(desired);
                    }
                    o
                })
                .collect())
        }
    };
    let pending: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(&desired))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = pending.first() else {
        return Ok(objects);
    };
    let from = objects[first]
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let failed = |message: String| {
        ApiError::new(
            500,
            "InternalError",
            format!(
                "conversion webhook for {from}, Kind={} failed: {message}",
                info.kind
            ),
        )
    };
    let inputs: Vec<Value> = pending.iter().map(|&i| objects[i].clone()).collect();
    let converted = call(webhook, services, &inputs, &desired).map_err(failed)?;
    let mut objects = objects;
    for (&i, out) in pending.iter().zip(converted) {
        objects[i] = restore_meta(&objects[i], out, &desired).map_err(failed)?;
    }
    Ok(objects)
}

/// Sends one review and checks the answer: uid, result, object count.
fn call(
    webhook: &Webhook,
    services: &ServiceUrls,
    objects: &[Value],
    desired: &str,
) -> Result<Vec<Value>, String> {
    let url = match (&webhook.url, &webhook.service) {
        (Some(url), _) => url.clone(),
        (None, Some(s)) => {
            let key = format!("{}/{}", s.namespace, s.name);
            let base = services
                .get(&key)
                .ok_or_else(|| format!("service \"{}\" not found", s.name))?;
            format!("{}{}", base.trim_end_matches('/'), s.path)
        }
        (None, None) => return Err("no webhook url or service".into()),
    };
    let uid = uuid::Uuid::new_v4().to_string();
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    });
    let body = serde_json::to_vec(&review).unwrap_or_default();
    let (status, answer) = blocking(|| post(&url, &webhook.ca_bundle, &body))?;
    if status != 200 {
        return Err(format!(
            "conversion webhook returned HTTP {status}: {}",
            String::from_utf8_lossy(&answer)
        ));
    }
    let answer: Value = serde_json::from_slice(&answer)
        .map_err(|e| format!("unable to decode the conversion review response: {e}"))?;
    let response = answer.get("response").ok_or("no response provided")?;
    let got_uid = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got_uid != uid {
        return Err(format!("expected response uid {uid:?}, got {got_uid:?}"));
    }
    let status = response
        .pointer("/result/status")
        .and_then(Value::as_str)
        .unwrap_or("");
    if status != "Success" {
        let message = response
            .pointer("/result/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(message.to_string());
    }
    let converted = response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if converted.len() != objects.len() {
        return Err(format!(
            "expected {} converted objects, got {}",
            objects.len(),
            converted.len()
        ));
    }
    Ok(converted)
}

/// Checks a converted object and keeps the original metadata except labels and annotations, as
/// kube-apiserver does (a webhook may change only those).
fn restore_meta(original: &Value, mut converted: Value, desired: &str) -> Result<Value, String> {
    let api_version = converted.get("apiVersion").and_then(Value::as_str);
    if api_version != Some(desired) {
        return Err(format!(
            "invalid converted object: apiVersion {:?}, expected {desired:?}",
            api_version.unwrap_or("")
        ));
    }
    if converted.get("kind") != original.get("kind") {
        return Err("invalid converted object: kind changed".into());
    }
    for field in ["name", "namespace", "uid"] {
        if converted.pointer(&format!("/metadata/{field}"))
            != original.pointer(&format!("/metadata/{field}"))
        {
            return Err(format!(
                "invalid converted object: metadata.{field} changed"
            ));
        }
    }
    let mut meta = original
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    for field in ["labels", "annotations"] {
        match converted.pointer(&format!("/metadata/{field}")) {
            Some(v) => meta[field] = v.clone(),
            None => {
                if let Some(m) = meta.as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    converted["metadata"] = meta;
    Ok(converted)
}

/// Runs blocking IO without starving a multi-threaded runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// `POST url` with a JSON body over HTTPS (HTTP/1.1, one request per connection); returns the
/// status code and body.
fn post(url: &str, ca_bundle: &[u8], body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let post_err = |e: &dyn std::fmt::Display| format!("Post {url:?}: {e}");
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| post_err(&"the webhook URL must use https"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = host_port(authority).map_err(|e| post_err(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject as _;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|e| post_err(&format!("caBundle: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| post_err(&format!("caBundle: {e}")))?;
    }
    if roots.is_empty() {
        return Err(post_err(&"tls: failed to verify certificate: x509: certificate signed by unknown authority (no caBundle)"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| post_err(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| post_err(&e))?;
    let conn =
        rustls::ClientConnection::new(Arc::new(config), server_name).map_err(|e| post_err(&e))?;
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| post_err(&e))?
        .next()
        .ok_or_else(|| post_err(&"no address"))?;
    let tcp = TcpStream::connect_timeout(&addr, WEBHOOK_TIMEOUT)
        .map_err(|e| post_err(&format!("dial tcp {addr}: {e}")))?;
    tcp.set_read_timeout(Some(WEBHOOK_TIMEOUT)).ok();
    tcp.set_write_timeout(Some(WEBHOOK_TIMEOUT)).ok();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes())
        .and_then(|()| tls.write_all(body))
        .and_then(|()| tls.flush())
        .map_err(|e| post_err(&e))?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // Servers that close without close_notify: the body is complete if Content-Length says so.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(post_err(&e)),
    }
    parse_response(&raw).map_err(|e| post_err(&e))
}

/// `host[:port]` or `[v6][:port]`; the port defaults to 443.
fn host_port(authority: &str) -> Result<(&str, u16), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']').ok_or("unclosed [ in the URL host")?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .map_err(|e| format!("invalid port {p:?}: {e}"))?,
        None => 443,
    };
    Ok((host, port))
}

/// Splits an HTTP/1.1 response into status and body (Content-Length or close-delimited, or
/// chunked).
fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or("malformed HTTP status line")?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let rest = &raw[end + 4..];
    if chunked {
        let mut body = Vec::new();
        let mut at = 0;
        loop {
            let line_end = rest[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("malformed chunk")?;
            let size_text = String::from_utf8_lossy(&rest[at..at + line_end]);
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| "malformed chunk size")?;
            at += line_end + 2;
            if size == 0 {
                return Ok((status, body));
            }
            body.extend_from_slice(rest.get(at..at + size).ok_or("truncated chunk")?);
            at += size + 2;
        }
    }
    let body = match length {
        Some(n) => rest.get(..n).ok_or("truncated body")?.to_vec(),
        None => rest.to_vec(),
    };
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_conversion_of_a_crd() {
        let ca = base64::engine::general_purpose::STANDARD.encode("PEM");
        let cases = [
            (json!({"spec": {}}), Ok(Strategy::None)),
            (json!({"spec": {"conversion": {"strategy": "None"}}}), Ok(Strategy::None)),
            (
                json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://h/c", "caBundle": ca}}}}}),
                Ok(Strategy::Webhook(Webhook { url: Some("https://h/c".into()), service: None, ca_bundle: b"PEM".to_vec() })),
            ),
            (
                json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"namespace": "n", "name": "s", "path": "/convert"}}}}}}),
                Ok(Strategy::Webhook(Webhook { url: None, service: Some(ServiceRef { namespace: "n".into(), name: "s".into(), path: "/convert".into(), port: 443 }), ca_bundle: Vec::new() })),
            ),
            (
                json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {}}}}}),
                Err("spec.conversion.webhook.clientConfig: exactly one of url or service is required".to_string()),
            ),
        ];
        for (crd, expected) in cases {
            assert_eq!(strategy(&crd), expected, "{crd}");
        }
    }

    #[test]
    fn splits_host_and_port() {
        assert_eq!(host_port("127.0.0.1:9443"), Ok(("127.0.0.1", 9443)));
        assert_eq!(host_port("svc.ns.svc"), Ok(("svc.ns.svc", 443)));
        assert_eq!(host_port("[::1]:8443"), Ok(("::1", 8443)));
        assert_eq!(host_port("[::1]"), Ok(("::1", 443)));
        assert!(host_port("h:x").is_err());
    }

    #[test]
    fn parses_responses() {
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"),
            Ok((200, b"{}".to_vec()))
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n"),
            Ok((500, b"abcd".to_vec()))
        );
        assert!(parse_response(b"garbage").is_err());
    }

    #[test]
    fn a_webhook_may_change_only_labels_and_annotations() {
        let original = json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "a", "uid": "u", "resourceVersion": "7", "labels": {"x": "1"}}});
        let converted = json!({"apiVersion": "g/v2", "kind": "K", "metadata": {"name": "a", "uid": "u", "annotations": {"y": "2"}}, "spec": {}});
        assert_eq!(
            restore_meta(&original, converted, "g/v2"),
            Ok(
                json!({"apiVersion": "g/v2", "kind": "K", "metadata": {"name": "a", "uid": "u", "resourceVersion": "7", "annotations": {"y": "2"}}, "spec": {}})
            )
        );
        let renamed =
            json!({"apiVersion": "g/v2", "kind": "K", "metadata": {"name": "b", "uid": "u"}});
        assert_eq!(
            restore_meta(&original, renamed, "g/v2"),
            Err("invalid converted object: metadata.name changed".to_string())
        );
    }
}
