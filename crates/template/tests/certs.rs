//! sprig's key and certificate generators, checked by parsing what they produce: subject,
//! SANs, validity, CA flag, key usage, key type and encoding, and signatures by the issuer.

use serde_json::json;
use sluice_template::{event_data, Options, Template};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::{parse_x509_pem, Pem};

/// Renders `text` and splits the output at `|` (PEM text never contains one).
fn render_parts(text: &str) -> Vec<String> {
    let template = Template::parse(text, &Options::default()).expect("template parses");
    let out = template
        .render(&event_data(&json!({})))
        .expect("template renders");
    out.split('|').map(str::to_string).collect()
}

fn render_err(text: &str) -> String {
    let template = Template::parse(text, &Options::default()).expect("template parses");
    match template.render(&event_data(&json!({}))) {
        Ok(out) => panic!("{text:?} rendered {out:?}, expected an error"),
        Err(e) => e.to_string(),
    }
}

fn pem(text: &str) -> Pem {
    let (rest, pem) = parse_x509_pem(text.as_bytes()).expect("output is PEM");
    assert!(rest.iter().all(u8::is_ascii_whitespace), "one PEM block");
    pem
}

fn common_name<'c>(cert: &'c X509Certificate<'_>) -> &'c str {
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .expect("subject has a CN")
}

fn validity_days(cert: &X509Certificate<'_>) -> i64 {
    let v = cert.validity();
    (v.not_after.timestamp() - v.not_before.timestamp()) / 86_400
}

fn sans(cert: &X509Certificate<'_>) -> (Vec<String>, Vec<Vec<u8>>) {
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    if let Some(ext) = cert
        .subject_alternative_name()
        .expect("SAN extension parses")
    {
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(ip) => ips.push(ip.to_vec()),
                _ => {}
            }
        }
    }
    (dns, ips)
}

#[test]
fn gen_ca_and_gen_signed_cert_make_a_verifiable_chain() {
    let parts = render_parts(
        r#"{{ $ca := genCA "sluice-ca" 365 }}{{ $c := genSignedCert "web" (list "10.0.0.1" "::1") (list "web.example.com" "web") 30 $ca }}{{ $ca.Cert }}|{{ $ca.Key }}|{{ $c.Cert }}|{{ $c.Key }}"#,
    );
    let [ca_cert, ca_key, cert, key] = parts.as_slice() else {
        panic!("four parts expected, got {parts:?}");
    };
    let ca_pem = pem(ca_cert);
    let ca = ca_pem.parse_x509().expect("CA certificate parses");
    assert_eq!(common_name(&ca), "sluice-ca");
    assert!(ca.is_ca(), "genCA makes a CA");
    let usage = ca
        .key_usage()
        .expect("key usage parses")
        .expect("key usage");
    assert!(usage.value.key_cert_sign() && usage.value.digital_signature());
    assert_eq!(validity_days(&ca), 365);
    ca.verify_signature(None).expect("the CA is self-signed");
    assert!(ca_key.starts_with("-----BEGIN RSA PRIVATE KEY-----"));

    let leaf_pem = pem(cert);
    let leaf = leaf_pem.parse_x509().expect("certificate parses");
    assert_eq!(common_name(&leaf), "web");
    assert!(!leaf.is_ca());
    assert_eq!(validity_days(&leaf), 30);
    assert_eq!(leaf.issuer(), ca.subject());
    leaf.verify_signature(Some(ca.public_key()))
        .expect("the certificate is signed by the CA");
    assert!(leaf.verify_signature(None).is_err(), "not self-signed");
    let (dns, ips) = sans(&leaf);
    assert_eq!(dns, ["web.example.com", "web"]);
    assert_eq!(
        ips,
        [
            vec![10, 0, 0, 1],
            std::net::Ipv6Addr::LOCALHOST.octets().to_vec()
        ]
    );
    assert!(key.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    // The key is the certificate's: its public half is the certificate's public key.
    let rsa_key = <rsa::RsaPrivateKey as rsa::pkcs1::DecodeRsaPrivateKey>::from_pkcs1_pem(key)
        .expect("PKCS#1 key");
    let public = rsa::pkcs8::EncodePublicKey::to_public_key_der(&rsa_key.to_public_key())
        .expect("public key encodes");
    assert_eq!(public.as_bytes(), leaf.public_key().raw);
}

#[test]
fn self_signed_certificates_with_generated_and_given_keys() {
    let parts = render_parts(
        r#"{{ $k := genPrivateKey "ecdsa" }}{{ $c := genSelfSignedCertWithKey "api" (list "192.168.1.7") (list "api.local") 7 $k }}{{ $k }}|{{ $c.Cert }}|{{ $c.Key }}|{{ (genSelfSignedCert "plain" nil nil 1).Cert }}"#,
    );
    let [key, cert, cert_key, plain] = parts.as_slice() else {
        panic!("four parts expected, got {parts:?}");
    };
    assert!(key.starts_with("-----BEGIN EC PRIVATE KEY-----"), "{key}");
    assert_eq!(
        key, cert_key,
        "the given key is returned in sprig's encoding"
    );
    let secret = p256::SecretKey::from_sec1_pem(key).expect("SEC1 P-256 key");
    let c = pem(cert);
    let c = c.parse_x509().expect("certificate parses");
    assert_eq!(common_name(&c), "api");
    assert_eq!(validity_days(&c), 7);
    assert!(!c.is_ca());
    c.verify_signature(None).expect("self-signed");
    assert_eq!(
        c.public_key().subject_public_key.data.as_ref(),
        secret.public_key().to_sec1_bytes().as_ref()
    );
    assert_eq!(
        sans(&c),
        (vec!["api.local".to_string()], vec![vec![192, 168, 1, 7]])
    );

    let p = pem(plain);
    let p = p.parse_x509().expect("certificate parses");
    assert_eq!(common_name(&p), "plain");
    assert_eq!(validity_days(&p), 1);
    assert_eq!(sans(&p), (vec![], vec![]));
    p.verify_signature(None).expect("self-signed");
}

#[test]
fn gen_ca_with_an_ed25519_key_signs_an_ecdsa_certificate() {
    let parts = render_parts(
        r#"{{ $k := genPrivateKey "ed25519" }}{{ $ca := genCAWithKey "ed-ca" 10 $k }}{{ $c := genSignedCertWithKey "svc" nil (list "svc.ns.svc") 5 $ca (genPrivateKey "ecdsa") }}{{ $k }}|{{ $ca.Cert }}|{{ $c.Cert }}"#,
    );
    let [key, ca_cert, cert] = parts.as_slice() else {
        panic!("three parts expected, got {parts:?}");
    };
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
    let ca = pem(ca_cert);
    let ca = ca.parse_x509().expect("CA parses");
    assert!(ca.is_ca());
    assert_eq!(common_name(&ca), "ed-ca");
    assert_eq!(validity_days(&ca), 10);
    ca.verify_signature(None).expect("self-signed with ed25519");
    let c = pem(cert);
    let c = c.parse_x509().expect("certificate parses");
    assert_eq!(common_name(&c), "svc");
    c.verify_signature(Some(ca.public_key()))
        .expect("signed by the ed25519 CA");
    assert_eq!(sans(&c).0, ["svc.ns.svc"]);
}

#[test]
fn gen_private_key_types_as_sprig() {
    let parts = render_parts(
        r#"{{ genPrivateKey "rsa" }}|{{ genPrivateKey "nope" }}|{{ genPrivateKey "dsa" }}"#,
    );
    let [rsa_pem, unknown, dsa] = parts.as_slice() else {
        panic!("three parts expected, got {parts:?}");
    };
    let key = <rsa::RsaPrivateKey as rsa::pkcs1::DecodeRsaPrivateKey>::from_pkcs1_pem(rsa_pem)
        .expect("PKCS#1 RSA key");
    assert_eq!(rsa::traits::PublicKeyParts::size(&key) * 8, 4096);
    assert_eq!(unknown, "Unknown type nope");
    assert!(dsa.starts_with("failed to generate private key: "), "{dsa}");
}

#[test]
fn build_custom_cert_returns_what_it_is_given_and_checks_it() {
    let parts = render_parts(
        r#"{{ $ca := genCA "x" 2 }}{{ $b := buildCustomCert ($ca.Cert | b64enc) ($ca.Key | b64enc) }}{{ eq $b.Cert $ca.Cert }}|{{ eq $b.Key $ca.Key }}"#,
    );
    assert_eq!(parts, ["true", "true"]);
    let e = render_err(r#"{{ buildCustomCert "not base64!" "" }}"#);
    assert!(e.contains("unable to decode base 64 certificate"), "{e}");
    let e = render_err(r#"{{ buildCustomCert ("hello" | b64enc) ("hello" | b64enc) }}"#);
    assert!(e.contains("unable to decode certificate"), "{e}");
}

#[test]
fn bad_arguments_are_render_errors() {
    let e = render_err(r#"{{ genSelfSignedCert "a" (list "not-an-ip") nil 1 }}"#);
    assert!(e.contains("error parsing ip: not-an-ip"), "{e}");
    let e = render_err(r#"{{ genSignedCert "a" nil nil 1 "not a ca" }}"#);
    assert!(e.contains("not a certificate"), "{e}");
    let e = render_err(r#"{{ genCAWithKey "a" 1 "no pem here" }}"#);
    assert!(e.contains("no PEM data in input"), "{e}");
}
