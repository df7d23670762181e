//! How a client connects to NATS: the URL, the identity it acts as (an nkey seed from a file),
//! TLS (the CA that signed the server, an optional client certificate) and the replica count of
//! the streams it creates. Files are read when connecting, through async-nats's own TLS and
//! nkey support: nothing is written to disk.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_runtime::{CommonArgs, NatsAuth};

use crate::error::{Error, Result};
use crate::gather::Linger;
use crate::permissions;
use crate::topology::Identity;

/// Everything [`crate::Bus::connect`] needs. A bare URL converts into options for an anonymous,
/// plain-text client that sets up every stream (tests, a local demo).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusOptions {
    pub url: String,
    /// The identity this client acts as: the streams it sets up, its inbox prefix and the name
    /// it logs refusals under. `None`: every stream, the default inbox (an administrator).
    pub identity: Option<Identity>,
    pub auth: NatsAuth,
    /// JetStream replicas of the streams this client creates or updates.
    pub stream_replicas: usize,
    /// How long a stage's batch of inputs may wait for more ([`crate::gather`]).
    pub linger: Linger,
}

/// The latest operations the server refused this connection (permissions violations, newest
/// last), shared with the connection's event callback so that a failed publish can say why.
pub(crate) type Refusals = Arc<Mutex<VecDeque<String>>>;

/// How many refusals a connection remembers.
const REFUSALS_KEPT: usize = 64;

impl BusOptions {
    pub fn new(url: impl Into<String>) -> BusOptions {
        BusOptions {
            url: url.into(),
            identity: None,
            auth: NatsAuth::default(),
            stream_replicas: 1,
            linger: Linger::OFF,
        }
    }

    /// A service's connection: its identity from the topology, its files from the configuration.
    pub fn service(common: &CommonArgs, identity: Identity) -> BusOptions {
        BusOptions {
            url: common.nats_url.clone(),
            identity: Some(identity),
            auth: common.nats_auth.clone(),
            stream_replicas: common.stream_replicas,
            linger: Linger(Duration::from_micros(common.linger_us)),
        }
    }

    pub fn with_identity(mut self, identity: Identity) -> BusOptions {
        self.identity = Some(identity);
        self
    }

    pub fn with_auth(mut self, auth: NatsAuth) -> BusOptions {
        self.auth = auth;
        self
    }

    pub fn with_linger(mut self, linger: Linger) -> BusOptions {
        self.linger = linger;
        self
    }

    /// The name the server and the logs know this client by.
    pub fn identity_name(&self) -> &'static str {
        self.identity.map_or("admin", |identity| identity.name)
    }

    /// A core NATS client with these credentials and TLS settings (what [`crate::Bus`] wraps;
    /// `sluice tap` uses it directly). It keeps reconnecting while the server is away.
    pub async fn connect_client(&self) -> Result<async_nats::Client> {
        let (lost, _) = tokio::sync::watch::channel(0u64);
        self.connect_client_with(Refusals::default(), lost).await
    }

    /// Connects with `refusals` recording what the server refuses, and `lost` counting every
    /// drop of the connection (see [`crate::Bus::disconnects`]).
    pub(crate) async fn connect_client_with(
        &self,
        refusals: Refusals,
        lost: tokio::sync::watch::Sender<u64>,
    ) -> Result<async_nats::Client> {
        let identity = self.identity_name();
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("sluice-{identity}"))
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            .event_callback(move |event| {
                if matches!(event, async_nats::Event::Disconnected) {
                    lost.send_modify(|count| *count += 1);
                }
                let refusals = Arc::clone(&refusals);
                async move { log_event(identity, &event, &refusals) }
            });
        if let Some(identity) = self.identity {
            options = options.custom_inbox_prefix(permissions::inbox_prefix(identity.name));
        }
        if let Some(path) = &self.auth.nats_nkey_file {
            let seed = read_seed(path)?;
            options = options.nkey(seed);
        }
        if let Some(path) = &self.auth.nats_ca_file {
            readable(path)?;
            options = options
                .add_root_certificates(path.clone())
                .require_tls(true);
        }
        if let (Some(cert), Some(key)) = (&self.auth.nats_cert_file, &self.auth.nats_key_file) {
            readable(cert)?;
            readable(key)?;
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        let servers = server_addrs(&self.url).map_err(|source| Error::Connect {
            url: self.url.clone(),
            source: source.into(),
        })?;
        options
            .connect(servers.as_slice())
            .await
            .map_err(|source| Error::Connect {
                url: self.url.clone(),
                source,
            })
    }
}

/// The servers of `url`: one URL, or several of one cluster separated by commas
/// (`nats://a:4222,nats://b:4222`), as the NATS command line tools and the Go client take them.
/// The client starts from any of them, and learns the cluster's other servers from the one it
/// reaches.
pub fn server_addrs(url: &str) -> std::io::Result<Vec<async_nats::ServerAddr>> {
    url.split(',')
        .map(|one| {
            let one = one.trim();
            one.parse::<async_nats::ServerAddr>().map_err(|error| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{one:?} is not a nats server address: {error}"),
                )
            })
        })
        .collect()
}

impl From<&str> for BusOptions {
    fn from(url: &str) -> BusOptions {
        BusOptions::new(url)
    }
}

impl From<&String> for BusOptions {
    fn from(url: &String) -> BusOptions {
        BusOptions::new(url.as_str())
    }
}

impl From<String> for BusOptions {
    fn from(url: String) -> BusOptions {
        BusOptions::new(url)
    }
}

/// Logs what the connection reports: refusals loudly and with the identity, because a refused
/// publish otherwise only surfaces as a publish ack that never comes.
fn log_event(identity: &'static str, event: &async_nats::Event, refusals: &Refusals) {
    use async_nats::{Event, ServerError};
    match event {
        Event::ServerError(ServerError::AuthorizationViolation) => {
            tracing::error!(
                identity,
                "nats refused this identity: authorization violation (unknown nkey, or no credentials)"
            );
        }
        Event::ServerError(ServerError::Other(message))
            if message.to_lowercase().contains("permissions violation") =>
        {
            tracing::error!(identity, refusal = %message, "nats refused an operation outside this identity's permissions");
            let mut refusals = refusals.lock().unwrap_or_else(|p| p.into_inner());
            if refusals.len() == REFUSALS_KEPT {
                refusals.pop_front();
            }
            refusals.push_back(message.clone());
        }
        Event::Connected => tracing::info!(identity, "connected to nats"),
        Event::Disconnected => tracing::warn!(identity, "disconnected from nats, reconnecting"),
        other => tracing::warn!(identity, event = %other, "nats connection event"),
    }
}

/// The nkey seed in `path` (the file may end with a newline), checked to be a seed.
fn read_seed(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Credentials {
        path: path.to_path_buf(),
        source: Box::new(source),
    })?;
    let seed = text.trim().to_string();
    let pair = nkeys::KeyPair::from_seed(&seed).map_err(|source| Error::Credentials {
        path: path.to_path_buf(),
        source: Box::new(source),
    })?;
    tracing::info!(nkey = %pair.public_key(), file = %path.display(), "connecting to nats with an nkey");
    Ok(seed)
}

fn readable(path: &PathBuf) -> Result<()> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|source| Error::Credentials {
            path: path.clone(),
            source: Box::new(source),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn connect_error(auth: NatsAuth) -> String {
        let options = BusOptions::new("nats://127.0.0.1:1").with_auth(auth);
        let error = options.connect_client().await.unwrap_err();
        let source = std::error::Error::source(&error).map(ToString::to_string);
        format!("{error}: {}", source.unwrap_or_default())
    }

    #[tokio::test]
    async fn unreadable_credentials_fail_before_connecting_and_name_the_file() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let missing = dir.join("missing.nk");
        let error = connect_error(NatsAuth {
            nats_nkey_file: Some(missing.clone()),
            ..NatsAuth::default()
        })
        .await;
        assert!(error.contains(&missing.display().to_string()), "{error}");

        let not_a_seed = dir.join("public.nk");
        std::fs::write(&not_a_seed, nkeys::KeyPair::new_user().public_key()).unwrap();
        let error = connect_error(NatsAuth {
            nats_nkey_file: Some(not_a_seed.clone()),
            ..NatsAuth::default()
        })
        .await;
        assert!(error.contains("public.nk"), "{error}");

        let seed = dir.join("seed.nk");
        std::fs::write(
            &seed,
            format!("{}\n", nkeys::KeyPair::new_user().seed().unwrap()),
        )
        .unwrap();
        assert_eq!(
            read_seed(&seed).unwrap().len(),
            58,
            "the newline is trimmed"
        );

        let error = connect_error(NatsAuth {
            nats_ca_file: Some(dir.join("missing-ca.crt")),
            ..NatsAuth::default()
        })
        .await;
        assert!(error.contains("missing-ca.crt"), "{error}");
    }
}
