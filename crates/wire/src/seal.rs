//! Sealing Secret contents for the bus: XChaCha20-Poly1305 with a 256-bit key every service
//! that handles Secret contents reads from a file (`--bus-key-file`, a mounted Kubernetes
//! Secret). A random 24-byte nonce per message; the associated data names what the message is
//! about, so a sealed payload copied onto another subject does not open. It does not decide
//! what is sealed (`sluice_domain::configdata` does).

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;

/// Why a bus key could not be loaded or a payload not opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("failed to read the bus key file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the bus key file {path} holds no 32-byte key (32 raw bytes, or their base64)")]
    BadKey { path: PathBuf },
    #[error("sealed payload does not open with this bus key")]
    Open,
}

/// The key that seals Secret contents on the bus. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct BusKey {
    cipher: XChaCha20Poly1305,
}

impl fmt::Debug for BusKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BusKey(..)")
    }
}

impl BusKey {
    /// Reads the key from a file holding 32 raw bytes or their base64 (white space around it
    /// ignored), as `head -c 32 /dev/urandom | base64` makes one.
    pub fn from_file(path: &Path) -> Result<BusKey, SealError> {
        let bytes = std::fs::read(path).map_err(|source| SealError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        BusKey::from_bytes(&bytes).ok_or_else(|| SealError::BadKey {
            path: path.to_path_buf(),
        })
    }

    /// The key from 32 raw bytes or their base64 text.
    pub fn from_bytes(bytes: &[u8]) -> Option<BusKey> {
        // Base64 of 32 bytes is 44 characters, so a 32-byte input can only be the raw key.
        let decoded;
        let key = if bytes.len() == KEY_LEN {
            bytes
        } else {
            let text = std::str::from_utf8(bytes).ok()?.trim();
            decoded = base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()?;
            decoded.as_slice()
        };
        (key.len() == KEY_LEN).then(|| BusKey {
            cipher: XChaCha20Poly1305::new(key.into()),
        })
    }

    /// A new random key as base64 text, the form a key file holds.
    pub fn generate_base64() -> String {
        let key = XChaCha20Poly1305::generate_key(&mut OsRng);
        base64::engine::general_purpose::STANDARD.encode(key)
    }

    /// The key read from `path` when one is configured.
    pub fn load(path: Option<&Path>) -> Result<Option<BusKey>, SealError> {
        path.map(BusKey::from_file).transpose()
    }

    /// `plaintext` sealed: nonce, then ciphertext and tag. `about` must be given again to open.
    pub fn seal(&self, about: &str, plaintext: &[u8]) -> Vec<u8> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad: about.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 encrypts any message shorter than 256 GiB");
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`BusKey::seal`] sealed about the same `about`.
    pub fn open(&self, about: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < NONCE_LEN {
            return Err(SealError::Open);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: about.as_bytes(),
                },
            )
            .map_err(|_| SealError::Open)
    }
}

/// What a sealed config object is about: its subject, which names kind, namespace and name.
pub fn config_about(kind: &str, namespace: &str, name: &str) -> String {
    sluice_bus::topology::config_subject(kind, namespace, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> BusKey {
        BusKey::from_bytes(&[byte; KEY_LEN]).expect("key")
    }

    #[test]
    fn sealed_payloads_open_only_with_the_key_and_the_same_subject() {
        let sealed = key(1).seal("a", b"secret value");
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(key(1).open("a", &sealed).expect("opens"), b"secret value");
        assert!(key(2).open("a", &sealed).is_err());
        assert!(key(1).open("b", &sealed).is_err());
        assert!(key(1).open("a", &sealed[..10]).is_err());
        // A fresh nonce each time.
        assert_ne!(sealed, key(1).seal("a", b"secret value"));
    }

    #[test]
    fn keys_are_read_raw_or_as_base64() {
        let dir = tempfile::tempdir().expect("dir");
        let raw = dir.path().join("raw");
        std::fs::write(&raw, [7u8; KEY_LEN]).expect("write");
        let text = dir.path().join("text");
        let encoded = base64::engine::general_purpose::STANDARD.encode([7u8; KEY_LEN]);
        std::fs::write(&text, format!("{encoded}\n")).expect("write");
        let sealed = BusKey::from_file(&raw).expect("raw").seal("x", b"v");
        assert_eq!(
            BusKey::from_file(&text)
                .expect("base64")
                .open("x", &sealed)
                .expect("same key"),
            b"v"
        );
        let short = dir.path().join("short");
        std::fs::write(&short, "c2hvcnQ=").expect("write");
        assert!(matches!(
            BusKey::from_file(&short),
            Err(SealError::BadKey { .. })
        ));
        assert!(matches!(
            BusKey::from_file(&dir.path().join("missing")),
            Err(SealError::Read { .. })
        ));
        assert!(format!("{:?}", key(9)).contains(".."));
        let generated = BusKey::generate_base64();
        assert!(BusKey::from_bytes(generated.as_bytes()).is_some());
        assert_ne!(generated, BusKey::generate_base64());
    }
}
