//! sprig crypto and random helpers: `derivePassword` (Master Password: scrypt + HMAC-SHA256),
//! `bcrypt`, `htpasswd`, `encryptAES`/`decryptAES` (AES-256-CBC, PKCS#7, random IV),
//! `randBytes`, `uuidv4`. Key and certificate generation is in `certs.rs`.

use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use base64::Engine as _;
use hmac::Mac;
use rand::RngCore;

use crate::funcs::{arg_int, arg_str, budget, def, FuncDef, MAX_STRING};
use crate::value::Value;

pub static FUNCS: &[FuncDef] = &[
    def!("derivePassword", [Int, Str, Str, Str, Str], |a| {
        Ok(Value::string(derive_password(
            arg_int(&a, 0) as u32,
            arg_str(&a, 1),
            arg_str(&a, 2),
            arg_str(&a, 3),
            arg_str(&a, 4),
        )))
    }),
    def!("bcrypt", [Str], |a| Ok(Value::string(bcrypt_hash(
        arg_str(&a, 0)
    )))),
    def!("htpasswd", [Str, Str], |a| {
        let user = arg_str(&a, 0);
        if user.contains(':') {
            return Ok(Value::string(format!("invalid username: {user}")));
        }
        Ok(Value::string(format!(
            "{user}:{}",
            bcrypt_hash(arg_str(&a, 1))
        )))
    }),
    def!("encryptAES", [Str, Str], |a| encrypt_aes(
        arg_str(&a, 0),
        arg_str(&a, 1)
    )
    .map(Value::string)),
    def!("decryptAES", [Str, Str], |a| decrypt_aes(
        arg_str(&a, 0),
        arg_str(&a, 1)
    )
    .map(Value::string)),
    def!("randBytes", [Int], |a| {
        budget(arg_int(&a, 0), MAX_STRING)?;
        let mut buf = vec![0u8; arg_int(&a, 0).max(0) as usize];
        rand::thread_rng().fill_bytes(&mut buf);
        Ok(Value::string(
            base64::engine::general_purpose::STANDARD.encode(buf),
        ))
    }),
    def!("uuidv4", [], |_| Ok(Value::string(
        uuid::Uuid::new_v4().to_string()
    ))),
];

fn bcrypt_hash(password: &str) -> String {
    match bcrypt::hash_with_result(password, bcrypt::DEFAULT_COST) {
        Ok(parts) => parts.format_for_version(bcrypt::Version::TwoA),
        Err(e) => format!("failed to encrypt string with bcrypt: {e}"),
    }
}

const SEED: &str = "com.lyndir.masterpassword";

fn templates(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "maximum" => &["anoxxxxxxxxxxxxxxxxx", "axxxxxxxxxxxxxxxxxno"],
        "long" => &[
            "CvcvnoCvcvCvcv",
            "CvcvCvcvnoCvcv",
            "CvcvCvcvCvcvno",
            "CvccnoCvcvCvcv",
            "CvccCvcvnoCvcv",
            "CvccCvcvCvcvno",
            "CvcvnoCvccCvcv",
            "CvcvCvccnoCvcv",
            "CvcvCvccCvcvno",
            "CvcvnoCvcvCvcc",
            "CvcvCvcvnoCvcc",
            "CvcvCvcvCvccno",
            "CvccnoCvccCvcv",
            "CvccCvccnoCvcv",
            "CvccCvccCvcvno",
            "CvcvnoCvccCvcc",
            "CvcvCvccnoCvcc",
            "CvcvCvccCvccno",
            "CvccnoCvcvCvcc",
            "CvccCvcvnoCvcc",
            "CvccCvcvCvccno",
        ],
        "medium" => &["CvcnoCvc", "CvcCvcno"],
        "short" => &["Cvcn"],
        "basic" => &["aaanaaan", "aannaaan", "aaannaaa"],
        "pin" => &["nnnn"],
        _ => return None,
    })
}

fn characters(class: u8) -> &'static [u8] {
    match class {
        b'V' => b"AEIOU",
        b'C' => b"BCDFGHJKLMNPQRSTVWXYZ",
        b'v' => b"aeiou",
        b'c' => b"bcdfghjklmnpqrstvwxyz",
        b'A' => b"AEIOUBCDFGHJKLMNPQRSTVWXYZ",
        b'a' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz",
        b'n' => b"0123456789",
        b'o' => b"@&%?,=[]_:-+*$#!'^~;()/.",
        _ => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz0123456789!@#$%^&*()",
    }
}

fn derive_password(counter: u32, kind: &str, password: &str, user: &str, site: &str) -> String {
    let Some(templates) = templates(kind) else {
        return format!("cannot find password template {kind}");
    };
    let mut salt = SEED.as_bytes().to_vec();
    salt.extend_from_slice(&(user.len() as u32).to_be_bytes());
    salt.extend_from_slice(user.as_bytes());
    let mut key = [0u8; 64];
    let Ok(params) = scrypt::Params::new(15, 8, 2, 64) else {
        return "failed to derive password: bad scrypt parameters".into();
    };
    if let Err(e) = scrypt::scrypt(password.as_bytes(), &salt, &params, &mut key) {
        return format!("failed to derive password: {e}");
    }
    let mut message = SEED.as_bytes().to_vec();
    message.extend_from_slice(&(site.len() as u32).to_be_bytes());
    message.extend_from_slice(site.as_bytes());
    message.extend_from_slice(&counter.to_be_bytes());
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key) else {
        return "failed to derive password: bad key".into();
    };
    mac.update(&message);
    let seed = mac.finalize().into_bytes();
    let template = templates[seed[0] as usize % templates.len()];
    template
        .bytes()
        .enumerate()
        .map(|(i, class)| {
            let chars = characters(class);
            chars[seed[i + 1] as usize % chars.len()] as char
        })
        .collect()
}

fn aes_key(password: &str) -> [u8; 32] {
    let mut key = [0u8; 32];
    let n = password.len().min(32);
    key[..n].copy_from_slice(&password.as_bytes()[..n]);
    key
}

fn encrypt_aes(password: &str, plaintext: &str) -> Result<String, String> {
    if plaintext.is_empty() {
        return Ok(String::new());
    }
    let mut iv = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut iv);
    let cipher = cbc::Encryptor::<aes::Aes256>::new(&aes_key(password).into(), &iv.into());
    let encrypted = cipher.encrypt_padded_vec_mut::<Pkcs7>(plaintext.as_bytes());
    let mut out = iv.to_vec();
    out.extend(encrypted);
    Ok(base64::engine::general_purpose::STANDARD.encode(out))
}

fn decrypt_aes(password: &str, encoded: &str) -> Result<String, String> {
    if encoded.is_empty() {
        return Ok(String::new());
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| e.to_string())?;
    if data.len() < 16 || data.len() % 16 != 0 {
        return Err("ciphertext is not a multiple of the block size".into());
    }
    let (iv, body) = data.split_at(16);
    let cipher = cbc::Decryptor::<aes::Aes256>::new(&aes_key(password).into(), iv.into());
    let plain = cipher
        .decrypt_padded_vec_mut::<Pkcs7>(body)
        .map_err(|_| "invalid padding".to_string())?;
    Ok(String::from_utf8_lossy(&plain).into_owned())
}
