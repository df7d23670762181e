//! The `sveltos-nats` Secret of a managed cluster: how to reach its NATS server and JetStream,
//! which subjects and streams carry CloudEvents, and how to authenticate (spec §4.5). Parsing
//! only; connecting is the watcher's job.

use std::fmt;

use base64::Engine as _;
use serde_json::{Map, Value};

/// Where the Secret lives in every managed cluster.
pub const NATS_SECRET_NAMESPACE: &str = "projectsveltos";
pub const NATS_SECRET_NAME: &str = "sveltos-nats";
/// The data key holding the JSON configuration.
pub const NATS_SECRET_KEY: &str = "sveltos-nats";

/// The whole configuration; a section that is absent is not connected to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsSettings {
    pub nats: Option<NatsConnection>,
    pub jetstream: Option<JetStreamConnection>,
}

/// Core NATS: subscribe to each subject (at most once delivery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsConnection {
    pub url: String,
    /// Distinct subjects, in the order written.
    pub subjects: Vec<String>,
    pub authorization: Authorization,
}

/// JetStream: consume streams with a durable consumer (at least once delivery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JetStreamConnection {
    pub url: String,
    pub streams: Vec<JetStreamSource>,
    pub authorization: Authorization,
}

/// One stream to consume; `subjects` filter it (empty: every message of the stream). The older
/// `subjects` form names streams like their subject and consumes them whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JetStreamSource {
    pub stream: String,
    pub subjects: Vec<String>,
}

/// How to authenticate; every part is optional and they combine.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Authorization {
    pub user: Option<UserPassword>,
    pub token: Option<String>,
    pub client_cert: Option<ClientCertificate>,
    /// PEM of the CA that signed the server certificate.
    pub root_ca: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct UserPassword {
    pub user: String,
    pub password: String,
}

/// PEM certificate and key for mutual TLS.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// Why a `sveltos-nats` Secret is unusable; `field` is the JSON path inside the configuration.
/// Permanent until the Secret changes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NatsConfigError {
    #[error("secret has no data key {key}")]
    MissingKey { key: &'static str },
    #[error("{field}: not valid base64")]
    InvalidBase64 { field: String },
    #[error("configuration is not JSON: {reason}")]
    NotJson { reason: String },
    #[error("{field}: expected {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
    },
    #[error("{field}: required field is missing or empty")]
    Missing { field: String },
}

/// Secrets are redacted: configurations end up in logs.
impl fmt::Debug for Authorization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorization")
            .field("user", &self.user)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("client_cert", &self.client_cert)
            .field("root_ca", &self.root_ca.as_ref().map(|ca| ca.len()))
            .finish()
    }
}

impl fmt::Debug for UserPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserPassword")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificate")
            .field("cert_pem", &self.cert_pem.len())
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Reads the configuration from the Secret object as the API server returns it (`data`
/// base64-encoded; `stringData` is accepted too).
pub fn parse_nats_secret(secret: &Value) -> Result<NatsSettings, NatsConfigError> {
    if let Some(text) = secret
        .pointer(&format!("/data/{NATS_SECRET_KEY}"))
        .and_then(Value::as_str)
    {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| NatsConfigError::InvalidBase64 {
                field: format!("data.{NATS_SECRET_KEY}"),
            })?;
        return parse_nats_config(&bytes);
    }
    match secret
        .pointer(&format!("/stringData/{NATS_SECRET_KEY}"))
        .and_then(Value::as_str)
    {
        Some(text) => parse_nats_config(text.as_bytes()),
        None => Err(NatsConfigError::MissingKey {
            key: NATS_SECRET_KEY,
        }),
    }
}

/// Parses the JSON configuration (the value of the `sveltos-nats` key).
pub fn parse_nats_config(json: &[u8]) -> Result<NatsSettings, NatsConfigError> {
    let root: Value = serde_json::from_slice(json).map_err(|error| NatsConfigError::NotJson {
        reason: error.to_string(),
    })?;
    let root = object(&root, ".")?;
    let nats = section(root, "nats")?
        .map(|(c, path)| -> Result<NatsConnection, NatsConfigError> {
            Ok(NatsConnection {
                url: url(c, &path)?,
                subjects: distinct(strings(c, "subjects", &path)?),
                authorization: authorization(c, &path)?,
            })
        })
        .transpose()?;
    let jetstream = section(root, "jetstream")?
        .map(
            |(c, path)| -> Result<JetStreamConnection, NatsConfigError> {
                let mut streams: Vec<JetStreamSource> = Vec::new();
                for (i, item) in list(c, "streams", &path)?.iter().enumerate() {
                    let item_path = format!("{path}.streams[{i}]");
                    let s = object(item, &item_path)?;
                    let stream = string(s, "name", &item_path)?
                        .filter(|n| !n.is_empty())
                        .ok_or_else(|| NatsConfigError::Missing {
                            field: format!("{item_path}.name"),
                        })?;
                    let subjects = distinct(strings(s, "subjects", &item_path)?);
                    streams.push(JetStreamSource { stream, subjects });
                }
                for subject in strings(c, "subjects", &path)? {
                    streams.push(JetStreamSource {
                        stream: subject,
                        subjects: Vec::new(),
                    });
                }
                let mut seen = Vec::new();
                streams.retain(|s| {
                    let new = !seen.contains(s);
                    seen.push(s.clone());
                    new
                });
                Ok(JetStreamConnection {
                    url: url(c, &path)?,
                    streams,
                    authorization: authorization(c, &path)?,
                })
            },
        )
        .transpose()?;
    Ok(NatsSettings { nats, jetstream })
}

/// A JSON object and its path in the configuration.
type Located<'a> = (&'a Map<String, Value>, String);

/// `<name>.configuration`, when the section is present.
fn section<'a>(
    root: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<Located<'a>>, NatsConfigError> {
    match root.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(section) => {
            let section = object(section, name)?;
            let path = format!("{name}.configuration");
            match section.get("configuration") {
                None | Some(Value::Null) => Err(NatsConfigError::Missing { field: path }),
                Some(c) => Ok(Some((object(c, &path)?, path))),
            }
        }
    }
}

fn url(c: &Map<String, Value>, path: &str) -> Result<String, NatsConfigError> {
    string(c, "url", path)?
        .filter(|u| !u.trim().is_empty())
        .map(|u| u.trim().to_string())
        .ok_or_else(|| NatsConfigError::Missing {
            field: format!("{path}.url"),
        })
}

fn authorization(c: &Map<String, Value>, path: &str) -> Result<Authorization, NatsConfigError> {
    let path = format!("{path}.authorization");
    let a = match c.get("authorization") {
        None | Some(Value::Null) => return Ok(Authorization::default()),
        Some(a) => object(a, &path)?,
    };
    let user = match a.get("user") {
        None | Some(Value::Null) => None,
        Some(u) => {
            let user_path = format!("{path}.user");
            let u = object(u, &user_path)?;
            Some(UserPassword {
                user: string(u, "user", &user_path)?.unwrap_or_default(),
                password: string(u, "password", &user_path)?.unwrap_or_default(),
            })
        }
    };
    let token = string(a, "token", &path)?.filter(|t| !t.is_empty());
    let client_cert = match a.get("clientCert") {
        None | Some(Value::Null) => None,
        Some(cc) => {
            let cc_path = format!("{path}.clientCert");
            let cc = object(cc, &cc_path)?;
            let pem = |key: &str| -> Result<Vec<u8>, NatsConfigError> {
                bytes(cc, key, &cc_path)?.ok_or_else(|| NatsConfigError::Missing {
                    field: format!("{cc_path}.{key}"),
                })
            };
            Some(ClientCertificate {
                cert_pem: pem("certPem")?,
                key_pem: pem("keyPem")?,
            })
        }
    };
    let root_ca = bytes(a, "rootCA", &path)?;
    Ok(Authorization {
        user,
        token,
        client_cert,
        root_ca,
    })
}

/// A Go `[]byte` field: base64 in JSON. Empty is absent.
fn bytes(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, NatsConfigError> {
    let Some(text) = string(m, key, path)?.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map(Some)
        .map_err(|_| NatsConfigError::InvalidBase64 {
            field: format!("{path}.{key}"),
        })
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, NatsConfigError> {
    v.as_object().ok_or_else(|| NatsConfigError::WrongType {
        field: path.to_string(),
        expected: "an object",
    })
}

fn list<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a [Value], NatsConfigError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(NatsConfigError::WrongType {
            field: format!("{path}.{key}"),
            expected: "a list",
        }),
    }
}

fn string(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, NatsConfigError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(NatsConfigError::WrongType {
            field: format!("{path}.{key}"),
            expected: "a string",
        }),
    }
}

/// A list of non-empty subject strings.
fn strings(m: &Map<String, Value>, key: &str, path: &str) -> Result<Vec<String>, NatsConfigError> {
    list(m, key, path)?
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Value::String(_) => Err(NatsConfigError::Missing {
                field: format!("{path}.{key}[{i}]"),
            }),
            _ => Err(NatsConfigError::WrongType {
                field: format!("{path}.{key}[{i}]"),
                expected: "a string",
            }),
        })
        .collect()
}

fn distinct(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
#[path = "natsconfig/tests.rs"]
mod tests;
