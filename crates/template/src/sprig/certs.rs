//! sprig's key and certificate generators: `genPrivateKey`, `genCA`, `genCAWithKey`,
//! `genSelfSignedCert(WithKey)`, `genSignedCert(WithKey)` and `buildCustomCert`, with sprig's key
//! types, PEM encodings and certificate templates (rcgen on ring for X.509, `rsa` for RSA keys,
//! `p256` for SEC1 encoding). Certificates are maps with `.Cert` and `.Key`, where Go has a
//! struct. Not offered: DSA keys (no maintained Rust crate; sprig's own docs discourage them).

use std::net::IpAddr;

use base64::Engine as _;
use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, LineEnding};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber, SignatureAlgorithm,
};
use rsa::pkcs1::{DecodeRsaPrivateKey as _, EncodeRsaPrivateKey as _};
use rsa::RsaPrivateKey;

use crate::funcs::{arg_int, arg_str, def, FuncDef, FuncResult};
use crate::value::{Map, Value};

pub static FUNCS: &[FuncDef] = &[
    def!("genPrivateKey", [Str], |a| Ok(Value::string(
        gen_private_key(arg_str(&a, 0))
    ))),
    def!("buildCustomCert", [Str, Str], |a| build_custom_cert(
        arg_str(&a, 0),
        arg_str(&a, 1)
    )),
    def!("genCA", [Str, Int], |a| {
        let key = rsa_key(2048)?;
        gen_ca(arg_str(&a, 0), arg_int(&a, 1), key)
    }),
    def!("genCAWithKey", [Str, Int, Str], |a| {
        let key = parse_key(arg_str(&a, 2))?;
        gen_ca(arg_str(&a, 0), arg_int(&a, 1), key)
    }),
    def!("genSelfSignedCert", [Str, List, List, Int], |a| {
        let key = rsa_key(2048)?;
        gen_cert(&a, key, None)
    }),
    def!(
        "genSelfSignedCertWithKey",
        [Str, List, List, Int, Str],
        |a| {
            let key = parse_key(arg_str(&a, 4))?;
            gen_cert(&a, key, None)
        }
    ),
    def!("genSignedCert", [Str, List, List, Int, Any], |a| {
        let key = rsa_key(2048)?;
        gen_cert(&a, key, Some(&a[4]))
    }),
    def!(
        "genSignedCertWithKey",
        [Str, List, List, Int, Any, Str],
        |a| {
            let key = parse_key(arg_str(&a, 5))?;
            gen_cert(&a, key, Some(&a[4]))
        }
    ),
];

/// A private key: rcgen's signing key and the PEM sprig prints for it (`pemBlockForKey`:
/// PKCS#1 for RSA, SEC1 for ECDSA, PKCS#8 for Ed25519).
struct Key {
    pair: KeyPair,
    pem: String,
}

/// sprig `genPrivateKey`: failures are reported in the returned string, as sprig does.
fn gen_private_key(kind: &str) -> String {
    let key = match kind {
        "" | "rsa" => rsa_key(4096),
        "ecdsa" => ecdsa_key(),
        "ed25519" => KeyPair::generate_for(&rcgen::PKCS_ED25519)
            .map(|pair| Key {
                pem: pair.serialize_pem(),
                pair,
            })
            .map_err(|e| e.to_string()),
        "dsa" => Err("dsa keys are not supported by sluice".into()),
        other => return format!("Unknown type {other}"),
    };
    match key {
        Ok(key) => key.pem,
        Err(e) => format!("failed to generate private key: {e}"),
    }
}

fn rsa_key(bits: usize) -> Result<Key, String> {
    let key = RsaPrivateKey::new(&mut rand::thread_rng(), bits).map_err(|e| e.to_string())?;
    from_rsa(&key)
}

fn from_rsa(key: &RsaPrivateKey) -> Result<Key, String> {
    let pkcs8 = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| e.to_string())?;
    let pair = key_pair(&pkcs8, &rcgen::PKCS_RSA_SHA256)?;
    let pem = key
        .to_pkcs1_pem(LineEnding::LF)
        .map_err(|e| e.to_string())?;
    Ok(Key {
        pair,
        pem: pem.to_string(),
    })
}

fn ecdsa_key() -> Result<Key, String> {
    let pair = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
    let secret =
        p256::SecretKey::from_pkcs8_der(pair.serialized_der()).map_err(|e| e.to_string())?;
    from_p256(&secret)
}

fn from_p256(secret: &p256::SecretKey) -> Result<Key, String> {
    let pkcs8 = secret
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| e.to_string())?;
    let pair = key_pair(&pkcs8, &rcgen::PKCS_ECDSA_P256_SHA256)?;
    let pem = secret
        .to_sec1_pem(LineEnding::LF)
        .map_err(|e| e.to_string())?;
    Ok(Key {
        pair,
        pem: pem.to_string(),
    })
}

fn key_pair(pkcs8_pem: &str, alg: &'static SignatureAlgorithm) -> Result<KeyPair, String> {
    KeyPair::from_pem_and_sign_algo(pkcs8_pem, alg).map_err(|e| e.to_string())
}

/// The first PEM block of `text` (Go's `pem.Decode` skips what comes before it).
fn first_block(text: &str) -> Option<(&str, &str)> {
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + "-----BEGIN ".len()..];
    let label = &rest[..rest.find("-----")?];
    let end_marker = format!("-----END {label}-----");
    let end = text[start..].find(&end_marker)? + start + end_marker.len();
    Some((label, &text[start..end]))
}

/// sprig `parsePrivateKeyPEM`: PKCS#1 RSA, SEC1 EC or PKCS#8 keys.
fn parse_key(text: &str) -> Result<Key, String> {
    let Some((label, block)) = first_block(text) else {
        return Err("no PEM data in input".into());
    };
    let bad = |e: &dyn std::fmt::Display| format!("error parsing private key: {e}");
    match label {
        "RSA PRIVATE KEY" => from_rsa(&RsaPrivateKey::from_pkcs1_pem(block).map_err(|e| bad(&e))?),
        "EC PRIVATE KEY" => from_p256(&p256::SecretKey::from_sec1_pem(block).map_err(|e| bad(&e))?),
        "PRIVATE KEY" => {
            if let Ok(key) = rsa::pkcs8::DecodePrivateKey::from_pkcs8_pem(block) {
                return from_rsa(&key);
            }
            if let Ok(secret) = p256::SecretKey::from_pkcs8_pem(block) {
                return from_p256(&secret);
            }
            let pair = key_pair(block, &rcgen::PKCS_ED25519).map_err(|e| bad(&e))?;
            Ok(Key {
                pem: pair.serialize_pem(),
                pair,
            })
        }
        other => Err(format!("unknown private key type {other:?}")),
    }
}

/// sprig `getBaseCertTemplate`: random 128-bit serial, subject CN, validity from now for
/// `days` days, digital signature and key encipherment for server and client auth.
fn base_params(cn: &str, ips: &Value, dns: &Value, days: i64) -> Result<CertificateParams, String> {
    let mut params = CertificateParams::default();
    let mut serial = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut serial);
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, cn);
    params.distinguished_name = name;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now;
    params.not_after = now
        .checked_add(time::Duration::days(days))
        .ok_or_else(|| format!("validity of {days} days is out of range"))?;
    params.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    for ip in items(ips, "ip")? {
        let addr: IpAddr = ip.parse().map_err(|_| format!("error parsing ip: {ip}"))?;
        params.subject_alt_names.push(SanType::IpAddress(addr));
    }
    for name in items(dns, "dns")? {
        let name = name
            .try_into()
            .map_err(|e| format!("invalid dns name {name:?}: {e}"))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    Ok(params)
}

/// The strings of an `ips`/`alternateDNS` list (nil is an empty list, as in Go).
fn items<'v>(list: &'v Value, what: &str) -> Result<Vec<&'v str>, String> {
    match list {
        Value::Nil => Ok(Vec::new()),
        Value::List(l) => l
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    format!(
                        "error processing {what} list: {} is not a string",
                        v.go_type()
                    )
                })
            })
            .collect(),
        other => Err(format!("{what} list is a {}", other.go_type())),
    }
}

fn certificate(cert_pem: String, key_pem: String) -> Value {
    let mut map = Map::new();
    map.insert("Cert".into(), Value::string(cert_pem));
    map.insert("Key".into(), Value::string(key_pem));
    Value::map(map)
}

/// sprig `generateCertificateAuthorityWithKeyInternal`: a self-signed CA.
fn gen_ca(cn: &str, days: i64, key: Key) -> FuncResult {
    let mut params = base_params(cn, &Value::Nil, &Value::Nil, days)?;
    params.key_usages.push(KeyUsagePurpose::KeyCertSign);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params
        .self_signed(&key.pair)
        .map_err(|e| format!("error creating certificate: {e}"))?;
    Ok(certificate(cert.pem(), key.pem))
}

/// `genSelfSignedCert*` (no `ca`) and `genSignedCert*` (signed by `ca`, a certificate map).
/// `a` holds cn, ips, alternate DNS names and days first.
fn gen_cert(a: &[Value], key: Key, ca: Option<&Value>) -> FuncResult {
    let params = base_params(arg_str(a, 0), &a[1], &a[2], arg_int(a, 3))?;
    let created = |r: Result<rcgen::Certificate, rcgen::Error>| {
        r.map_err(|e| format!("error creating certificate: {e}"))
    };
    let cert = match ca {
        None => created(params.self_signed(&key.pair))?,
        Some(ca) => {
            let field = |name: &str| match ca {
                Value::Map(m) => m.get(name).and_then(|v| v.as_str().map(str::to_string)),
                _ => None,
            };
            let (Some(ca_cert), Some(ca_key)) = (field("Cert"), field("Key")) else {
                return Err(format!(
                    "ca is a {}, not a certificate with Cert and Key",
                    ca.go_type()
                ));
            };
            let signer = parse_key(&ca_key)?;
            let issuer = Issuer::from_ca_cert_pem(&ca_cert, signer.pair)
                .map_err(|e| format!("error parsing ca certificate: {e}"))?;
            created(params.signed_by(&key.pair, &issuer))?
        }
    };
    Ok(certificate(cert.pem(), key.pem))
}

/// sprig `buildCustomCert`: base64 PEM certificate and key, checked and returned as given.
fn build_custom_cert(cert_b64: &str, key_b64: &str) -> FuncResult {
    let decode = |text: &str, what: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| format!("unable to decode base 64 {what}"))
    };
    let cert = decode(cert_b64, "certificate")?;
    let key = decode(key_b64, "private key")?;
    let Some(("CERTIFICATE", block)) = first_block(&cert) else {
        return Err("unable to decode certificate".into());
    };
    let der = pem_der(block).ok_or("unable to decode certificate")?;
    x509_parser::parse_x509_certificate(&der)
        .map_err(|e| format!("error parsing certificate: {e}"))?;
    parse_key(&key)?;
    Ok(certificate(cert, key))
}

/// The DER bytes of one PEM block.
fn pem_der(block: &str) -> Option<Vec<u8>> {
    let body: String = block
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .flat_map(|l| l.trim().chars())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}
