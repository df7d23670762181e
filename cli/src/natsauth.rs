//! The bus's identities and TLS outside a cluster: `sluice nats-config` (the nats-server
//! authorization for given public nkeys, optionally generating the seeds), and the local stack's
//! secured nats-server: a throwaway CA, a server certificate for 127.0.0.1, and per identity of
//! the topology (plus an administrator) an nkey seed and a client certificate. The permissions
//! themselves come from `sluice_bus::permissions`, generated from the topology.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use sluice_bus::permissions::{self, Role, User};
use sluice_bus::topology::{Identity, IDENTITIES};
use sluice_bus::BusOptions;
use sluice_runtime::NatsAuth;
use sluice_testkit::{NatsServer, TestCa};

/// The administrator's name: no permission limits (the operator's tools, tests, the demo).
pub const ADMIN: &str = "admin";

/// The server side of TLS in a nats-server configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// CA of the client certificates; with it the server verifies every client (mTLS).
    pub verify_clients_with: Option<PathBuf>,
}

/// A nats-server configuration (or include file): the TLS block when given, then the
/// authorization of `users`. The JetStream and listen options stay with the deployment.
pub fn server_config(users: &[User], tls: Option<&ServerTls>) -> String {
    let mut out = String::new();
    if let Some(tls) = tls {
        out.push_str("tls {\n");
        out.push_str(&format!(
            "  cert_file: {:?}\n",
            tls.cert_file.display().to_string()
        ));
        out.push_str(&format!(
            "  key_file: {:?}\n",
            tls.key_file.display().to_string()
        ));
        if let Some(ca) = &tls.verify_clients_with {
            out.push_str(&format!("  ca_file: {:?}\n", ca.display().to_string()));
            out.push_str("  verify: true\n");
        }
        // TLS and authentication share this deadline; a loaded CI machine needs more than 2 s.
        out.push_str("  timeout: 5\n");
        out.push_str("}\n");
    }
    out.push_str(&permissions::authorization(users));
    out
}

/// The role of a name given on the command line: an identity of the topology or `admin`.
pub fn role(name: &str) -> anyhow::Result<Role> {
    if name == ADMIN {
        return Ok(Role::Admin);
    }
    IDENTITIES
        .iter()
        .find(|identity| identity.name == name)
        .map(|identity| Role::Service(*identity))
        .with_context(|| {
            let known: Vec<&str> = IDENTITIES.iter().map(|i| i.name).collect();
            format!("unknown identity {name:?}: expected one of {known:?} or {ADMIN:?}")
        })
}

/// `sluice nats-config`: `NAME=PUBLIC_NKEY` pairs, and/or `generate` (a directory that gets a
/// seed file `<name>.nk` for every identity and the administrator, kept when it exists).
pub fn run(
    nkeys: &[String],
    generate: Option<&Path>,
    tls: Option<&ServerTls>,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let mut users = BTreeMap::new();
    if let Some(dir) = generate {
        for (name, public) in generate_seeds(dir)? {
            users.insert(name, public);
        }
    }
    for pair in nkeys {
        let Some((name, public)) = pair.split_once('=') else {
            bail!("{pair:?}: expected NAME=PUBLIC_NKEY");
        };
        let user_key = nkeys::KeyPair::from_public_key(public)
            .is_ok_and(|pair| pair.key_pair_type() == nkeys::KeyPairType::User);
        if !user_key {
            bail!("{public:?} is not a public user nkey (U...)");
        }
        role(name)?;
        users.insert(name.to_string(), public.to_string());
    }
    if users.is_empty() {
        bail!("no identities: pass NAME=PUBLIC_NKEY pairs or --generate DIR");
    }
    let users = users
        .into_iter()
        .map(|(name, nkey)| {
            Ok(User {
                role: role(&name)?,
                nkey,
            })
        })
        .collect::<anyhow::Result<Vec<User>>>()?;
    out.write_all(server_config(&users, tls).as_bytes())?;
    Ok(())
}

/// A seed file per identity and the administrator in `dir` (mode 0600), created when missing;
/// returns each name with its public key.
pub fn generate_seeds(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let names = IDENTITIES.iter().map(|i| i.name).chain([ADMIN]);
    let mut out = Vec::new();
    for name in names {
        let path = seed_path(dir, name);
        let pair = if path.is_file() {
            let seed = std::fs::read_to_string(&path)
                .with_context(|| format!("failed to read {}", path.display()))?;
            nkeys::KeyPair::from_seed(seed.trim())
                .with_context(|| format!("{} holds no nkey seed", path.display()))?
        } else {
            let pair = nkeys::KeyPair::new_user();
            write_private(&path, &pair.seed()?)?;
            pair
        };
        out.push((name.to_string(), pair.public_key()));
    }
    Ok(out)
}

/// `<dir>/<name>.nk`.
pub fn seed_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.nk"))
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("failed to create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))
}

/// `sluice nats-config --issue DIR`: at the first start of a local stack (docker-compose), the
/// files of a secured bus ([`Credentials::issue`]), a bus key `bus.key` and the server's
/// configuration `nats.conf` (TLS with client certificates, the generated authorization),
/// written last, so its presence says the directory is complete. A directory that has it is
/// kept as it is. Returns whether it issued.
pub fn issue_once(dir: &Path) -> anyhow::Result<bool> {
    let config = dir.join("nats.conf");
    if config.is_file() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let credentials = Credentials::issue(dir)?;
    write_private(
        &dir.join("bus.key"),
        &sluice_wire::BusKey::generate_base64(),
    )?;
    write_private(&config, &credentials.server_config())?;
    Ok(true)
}

/// The files of a secured local bus, all in one directory: the CA, the server's certificate,
/// and per identity (and `admin`) a seed `<name>.nk` and a client certificate `<name>.crt`/`.key`.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub dir: PathBuf,
    pub ca_file: PathBuf,
    tls: ServerTls,
    users: Vec<User>,
}

impl Credentials {
    /// Issues every file into `dir`.
    pub fn issue(dir: &Path) -> anyhow::Result<Credentials> {
        let ca = TestCa::new("sluice stack nats CA")?;
        let ca_file = dir.join("nats-ca.crt");
        write_private(&ca_file, ca.pem())?;
        let server = ca.server("nats")?;
        let tls = ServerTls {
            cert_file: dir.join("nats-server.crt"),
            key_file: dir.join("nats-server.key"),
            verify_clients_with: Some(ca_file.clone()),
        };
        write_private(&tls.cert_file, &server.cert)?;
        write_private(&tls.key_file, &server.key)?;
        let mut users = Vec::new();
        for (name, nkey) in generate_seeds(dir)? {
            let client = ca.client(&format!("sluice-{name}"))?;
            write_private(&dir.join(format!("{name}.crt")), &client.cert)?;
            write_private(&dir.join(format!("{name}.key")), &client.key)?;
            users.push(User {
                role: role(&name)?,
                nkey,
            });
        }
        Ok(Credentials {
            dir: dir.to_path_buf(),
            ca_file,
            tls,
            users,
        })
    }

    /// The nats-server configuration: TLS with client verification, and the authorization.
    pub fn server_config(&self) -> String {
        server_config(&self.users, Some(&self.tls))
    }

    /// The authorization alone (the include file `auth.conf` of a deployment).
    pub fn authorization(&self) -> String {
        server_config(&self.users, None)
    }

    /// The files `name` (an identity or `admin`) connects with.
    pub fn auth(&self, name: &str) -> NatsAuth {
        NatsAuth {
            nats_nkey_file: Some(seed_path(&self.dir, name)),
            nats_ca_file: Some(self.ca_file.clone()),
            nats_cert_file: Some(self.dir.join(format!("{name}.crt"))),
            nats_key_file: Some(self.dir.join(format!("{name}.key"))),
        }
    }

    /// The environment a process acting as `name` gets (the `SLUICE_NATS_*` file variables).
    pub fn env(&self, name: &str) -> Vec<(String, String)> {
        let auth = self.auth(name);
        let files = [
            ("SLUICE_NATS_NKEY_FILE", auth.nats_nkey_file),
            ("SLUICE_NATS_CA_FILE", auth.nats_ca_file),
            ("SLUICE_NATS_CERT_FILE", auth.nats_cert_file),
            ("SLUICE_NATS_KEY_FILE", auth.nats_key_file),
        ];
        files
            .into_iter()
            .filter_map(|(var, path)| Some((var.to_string(), path?.display().to_string())))
            .collect()
    }

    /// Connection options for `url` as `identity`, or as the administrator when `None`.
    pub fn bus_options(&self, url: &str, identity: Option<Identity>) -> BusOptions {
        let name = identity.map_or(ADMIN, |identity| identity.name);
        let options = BusOptions::new(url).with_auth(self.auth(name));
        match identity {
            Some(identity) => options.with_identity(identity),
            None => options,
        }
    }
}

/// A nats-server with JetStream, TLS (clients verified) and the generated authorization; or
/// several forming one JetStream cluster, each so configured.
pub struct SecureNats {
    /// The server, or a cluster's first node.
    pub server: NatsServer,
    /// A cluster's other nodes.
    pub peers: Vec<NatsServer>,
    pub credentials: Credentials,
}

impl SecureNats {
    /// Issues the credentials into `dir`, writes `dir/nats.conf` (TLS, authorization, then
    /// `extra_config`, e.g. limits) and starts the server with it.
    pub async fn start(dir: &Path, extra_config: &str) -> anyhow::Result<SecureNats> {
        SecureNats::start_nodes(dir, extra_config, 1).await
    }

    /// [`SecureNats::start`] with `nodes` servers: one alone, or several forming one
    /// JetStream cluster (`sluice_testkit::NatsCluster`), each with the same configuration.
    pub async fn start_nodes(
        dir: &Path,
        extra_config: &str,
        nodes: usize,
    ) -> anyhow::Result<SecureNats> {
        let credentials = Credentials::issue(dir)?;
        let config = dir.join("nats.conf");
        let text = format!("{}{extra_config}", credentials.server_config());
        std::fs::write(&config, text)
            .with_context(|| format!("failed to write {}", config.display()))?;
        let config = config.display().to_string();
        let args = ["-c", config.as_str()];
        let (server, peers) = if nodes > 1 {
            let mut nodes = sluice_testkit::NatsCluster::start(nodes, &args)
                .await?
                .nodes;
            let first = nodes.remove(0);
            (first, nodes)
        } else {
            (NatsServer::start_with_args(&args).await?, Vec::new())
        };
        Ok(SecureNats {
            server,
            peers,
            credentials,
        })
    }

    /// Every server's URL, comma-separated (`SLUICE_NATS_URL`).
    pub fn url(&self) -> String {
        sluice_testkit::nats_urls(std::iter::once(&self.server).chain(&self.peers))
    }

    /// Connection options as `identity`, or as the administrator when `None`.
    pub fn bus_options(&self, identity: Option<Identity>) -> BusOptions {
        self.credentials.bus_options(&self.url(), identity)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(nkeys: &[String], generate: Option<&Path>) -> anyhow::Result<String> {
        let mut out = Vec::new();
        run(nkeys, generate, None, &mut out)?;
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn generated_seeds_are_kept_and_every_identity_is_listed() {
        let dir = tempfile::tempdir().unwrap();
        let first = config(&[], Some(dir.path())).unwrap();
        for name in IDENTITIES.iter().map(|i| i.name).chain([ADMIN]) {
            let seed = std::fs::read_to_string(seed_path(dir.path(), name)).unwrap();
            let public = nkeys::KeyPair::from_seed(&seed).unwrap().public_key();
            assert!(first.contains(&format!("nkey: \"{public}\"")), "{name}");
        }
        assert_eq!(config(&[], Some(dir.path())).unwrap(), first, "seeds kept");
    }

    #[test]
    fn public_keys_are_checked_and_names_must_be_identities() {
        let user = nkeys::KeyPair::new_user().public_key();
        let text = config(&[format!("renderer={user}")], None).unwrap();
        assert!(text.contains("# renderer"), "{text}");
        assert!(text.contains("\"sluice.v1.desired.>\""), "{text}");
        let account = nkeys::KeyPair::new_account().public_key();
        assert!(config(&[format!("renderer={account}")], None).is_err());
        assert!(config(&[format!("scheduler={user}")], None).is_err());
        assert!(config(&["renderer".to_string()], None).is_err());
        assert!(config(&[], None).is_err());
    }

    #[test]
    fn a_secured_bus_is_issued_once_and_then_kept() {
        let dir = tempfile::tempdir().unwrap();
        let bus = dir.path().join("nats");
        assert!(issue_once(&bus).unwrap());
        let config = std::fs::read_to_string(bus.join("nats.conf")).unwrap();
        assert!(config.contains("verify: true"), "{config}");
        assert!(config.contains("# evaluator"), "{config}");
        let key = std::fs::read(bus.join("bus.key")).unwrap();
        assert!(sluice_wire::BusKey::from_bytes(&key).is_some());
        for file in [
            "nats-ca.crt",
            "evaluator.nk",
            "evaluator.crt",
            "evaluator.key",
        ] {
            assert!(bus.join(file).is_file(), "{file}");
        }
        // A second start keeps everything, the key included.
        assert!(!issue_once(&bus).unwrap());
        assert_eq!(std::fs::read(bus.join("bus.key")).unwrap(), key);
        assert_eq!(
            std::fs::read_to_string(bus.join("nats.conf")).unwrap(),
            config
        );
    }

    #[test]
    fn the_tls_block_verifies_clients_only_with_their_ca() {
        let tls = ServerTls {
            cert_file: "/tls/tls.crt".into(),
            key_file: "/tls/tls.key".into(),
            verify_clients_with: None,
        };
        let text = server_config(&[], Some(&tls));
        assert!(text.contains("cert_file: \"/tls/tls.crt\""), "{text}");
        assert!(!text.contains("verify"), "{text}");
        let mtls = ServerTls {
            verify_clients_with: Some("/tls/ca.crt".into()),
            ..tls
        };
        let text = server_config(&[], Some(&mtls));
        assert!(
            text.contains("ca_file: \"/tls/ca.crt\"\n  verify: true"),
            "{text}"
        );
    }
}
