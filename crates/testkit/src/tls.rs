//! A throwaway certificate authority for tests and local stacks: it signs server certificates
//! for 127.0.0.1 and client certificates, all in memory (what cert-manager does in a cluster).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A self-signed CA; its certificate is [`TestCa::pem`].
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A signed certificate and its private key, PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl TestCa {
    pub fn new(name: &str) -> anyhow::Result<TestCa> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate clients and servers trust.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate for `127.0.0.1`, `localhost` and `name` when it is a host name
    /// (e.g. `nats`, a compose service's name).
    pub fn server(&self, name: &str) -> anyhow::Result<Issued> {
        self.sign(name, true)
    }

    /// A client certificate with common name `name`.
    pub fn client(&self, name: &str) -> anyhow::Result<Issued> {
        self.sign(name, false)
    }

    /// A certificate for `127.0.0.1` and `localhost` with the extended key usages cert-manager's
    /// `usages` name (`server auth`, `client auth`; the others are key usages, which every
    /// certificate here has): a NATS server's, which it also presents when it dials a route.
    pub fn with_usages(&self, name: &str, usages: &[&str]) -> anyhow::Result<Issued> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.subject_alt_names = vec![
            SanType::IpAddress([127, 0, 0, 1].into()),
            SanType::DnsName("localhost".try_into()?),
        ];
        for usage in usages {
            match *usage {
                "server auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ServerAuth),
                "client auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ClientAuth),
                "digital signature" | "key encipherment" => {}
                other => anyhow::bail!("usage {other:?} is not one a test certificate takes"),
            }
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    fn sign(&self, name: &str, server: bool) -> anyhow::Result<Issued> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if server {
            params.subject_alt_names = vec![
                SanType::IpAddress([127, 0, 0, 1].into()),
                SanType::DnsName("localhost".try_into()?),
            ];
            let host_name = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if host_name && name != "localhost" {
                params
                    .subject_alt_names
                    .push(SanType::DnsName(name.try_into()?));
            }
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        } else {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}
