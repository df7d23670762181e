//! sprig encodings: base64/base32, hashes, Go `encoding/json` output (HTML escaping, float
//! format, sorted keys), and URL parsing/joining.

use std::fmt::Write;

use base64::Engine as _;
use sha1::Digest as _;

use super::gourl::{self, Part};
use crate::funcs::{arg_str, def, FuncDef, FuncResult};
use crate::value::{Map, Value};

pub static FUNCS: &[FuncDef] = &[
    def!("b64enc", [Str], |a| Ok(Value::string(
        base64::engine::general_purpose::STANDARD.encode(arg_str(&a, 0))
    ))),
    def!("b64dec", [Str], |a| Ok(Value::string(b64dec(arg_str(
        &a, 0
    ))))),
    def!("b32enc", [Str], |a| Ok(Value::string(b32enc(
        arg_str(&a, 0).as_bytes()
    )))),
    def!("b32dec", [Str], |a| Ok(Value::string(b32dec(arg_str(
        &a, 0
    ))))),
    def!("sha1sum", [Str], |a| Ok(Value::string(hex(
        &sha1::Sha1::digest(arg_str(&a, 0).as_bytes())
    )))),
    def!("sha256sum", [Str], |a| Ok(Value::string(hex(
        &sha2::Sha256::digest(arg_str(&a, 0).as_bytes())
    )))),
    def!("adler32sum", [Str], |a| Ok(Value::string(
        adler32(arg_str(&a, 0).as_bytes()).to_string()
    ))),
    def!("toPrettyJson", [Any], |a| Ok(Value::string(
        go_json(&a[0], true, true).unwrap_or_default()
    ))),
    def!("toRawJson", [Any], |a| Ok(Value::string(
        go_json(&a[0], false, false).unwrap_or_default()
    ))),
    def!("mustToJson", [Any], |a| go_json(&a[0], true, false)
        .map(Value::string)),
    def!("mustToPrettyJson", [Any], |a| go_json(&a[0], true, true)
        .map(Value::string)),
    def!("mustToRawJson", [Any], |a| go_json(&a[0], false, false)
        .map(Value::string)),
    def!("mustFromJson", [Str], |a| {
        let json: serde_json::Value =
            serde_json::from_str(arg_str(&a, 0)).map_err(|e| e.to_string())?;
        Ok(from_json_floats(&json))
    }),
    def!("urlParse", [Str], |a| url_parse(arg_str(&a, 0))),
    def!("urlJoin", [Map], |a| url_join(&a[0]).map(Value::string)),
];

pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + byte as u32) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

fn b64dec(s: &str) -> String {
    match base64::engine::general_purpose::STANDARD.decode(s) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(
            base64::DecodeError::InvalidByte(i, _) | base64::DecodeError::InvalidLastSymbol(i, _),
        ) => {
            format!("illegal base64 data at input byte {i}")
        }
        // A truncated final quantum: Go reports its start, or the end when padding began.
        Err(_) if s.contains('=') => format!("illegal base64 data at input byte {}", s.len()),
        Err(_) => format!(
            "illegal base64 data at input byte {}",
            s.len() - s.len() % 4
        ),
    }
}

const B32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

fn b32enc(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let bits = buf.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64);
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < chars {
                out.push(B32[((bits >> (35 - i * 5)) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn b32dec(s: &str) -> String {
    let trimmed = s.trim_end_matches('=');
    let mut bits = 0u64;
    let mut nbits = 0;
    let mut out = Vec::new();
    for (i, c) in trimmed.bytes().enumerate() {
        let Some(v) = B32.iter().position(|b| *b == c) else {
            return format!("illegal base32 data at input byte {i}");
        };
        bits = (bits << 5) | v as u64;
        nbits += 5;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's `json.Marshal` (`pretty`: `MarshalIndent(v, "", "  ")`); `escape_html` as the
/// encoder's default. Errors only for NaN and infinities, as Go does.
pub fn go_json(v: &Value, escape_html: bool, pretty: bool) -> Result<String, String> {
    let mut out = String::new();
    write_json(&mut out, v, escape_html, pretty.then_some(0))?;
    Ok(out)
}

fn write_json(
    out: &mut String,
    v: &Value,
    html: bool,
    indent: Option<usize>,
) -> Result<(), String> {
    let newline = |out: &mut String, level: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', level * 2));
    };
    match v {
        Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) | Value::GoInt(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) => out.push_str(&json_float(*f)?),
        Value::String(s) => json_string(out, s, html),
        Value::Time(t) => json_string(out, &t.rfc3339(), html),
        Value::Semver(s) => json_string(out, &s.to_string(), html),
        Value::List(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let Some(level) = indent {
                    newline(out, level + 1);
                }
                write_json(out, item, html, indent.map(|l| l + 1))?;
            }
            if let Some(level) = indent {
                newline(out, level);
            }
            out.push(']');
        }
        Value::Map(map) => {
            let map = map.read();
            if map.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let Some(level) = indent {
                    newline(out, level + 1);
                }
                json_string(out, k, html);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_json(out, item, html, indent.map(|l| l + 1))?;
            }
            if let Some(level) = indent {
                newline(out, level);
            }
            out.push('}');
        }
    }
    Ok(())
}

/// Go's float encoding: shortest digits, exponent form below 1e-6 and from 1e21.
pub fn json_float(f: f64) -> Result<String, String> {
    if !f.is_finite() {
        return Err(format!(
            "json: unsupported value: {}",
            crate::gofmt::format_g(f, None, false)
        ));
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        return Ok(if exp < 0 {
            format!("{mantissa}e-{}", -exp)
        } else {
            format!("{mantissa}e+{exp:02}")
        });
    }
    Ok(format!("{f}"))
}

pub fn json_string(out: &mut String, s: &str, html: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '<' | '>' | '&' if html => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// JSON decoded the way Go's `json.Unmarshal` into `interface{}` does: every number is float64.
pub fn from_json_floats(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::Array(items) => {
            Value::list(items.iter().map(from_json_floats).collect())
        }
        serde_json::Value::Object(entries) => Value::map(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), from_json_floats(v)))
                .collect(),
        ),
        other => Value::from(other),
    }
}

fn url_parse(s: &str) -> FuncResult {
    let (rest, fragment) = s.split_once('#').unwrap_or((s, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (scheme, rest) = match rest.split_once(':') {
        Some((scheme, rest))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            (scheme, rest)
        }
        _ => ("", rest),
    };
    let (authority, path, opaque) = match rest.strip_prefix("//") {
        Some(after) => match after.find('/') {
            Some(i) => (&after[..i], &after[i..], ""),
            None => (after, "", ""),
        },
        None if !scheme.is_empty() && !rest.starts_with('/') => ("", "", rest),
        None => ("", rest, ""),
    };
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (u, h),
        None => ("", authority),
    };
    let hostname = match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    };
    // url.Parse keeps the path, host and fragment unescaped, the query raw; sprig returns the
    // user info as `User.String()`, escaped again.
    let path = gourl::unescape(path)?;
    let fragment = gourl::unescape(fragment)?;
    let host = gourl::unescape(host)?;
    let hostname = gourl::unescape(hostname)?;
    let userinfo = match userinfo {
        "" => String::new(),
        raw => gourl::userinfo(raw)?,
    };
    let mut map = Map::new();
    for (k, v) in [
        ("scheme", scheme),
        ("host", &host),
        (
            "hostname",
            hostname.trim_start_matches('[').trim_end_matches(']'),
        ),
        ("path", &path),
        ("query", query),
        ("opaque", opaque),
        ("fragment", &fragment),
        ("userinfo", &userinfo),
    ] {
        map.insert(k.to_string(), Value::str(v));
    }
    Ok(Value::map(map))
}

fn url_join(d: &Value) -> Result<String, String> {
    let get = |k: &str| match d {
        Value::Map(m) => m.get(k).map(|v| super::strval(&v)).unwrap_or_default(),
        _ => String::new(),
    };
    // sprig builds a `url.URL` (its user info parsed from "proto://USERINFO@host") and prints
    // it with `String()`.
    let userinfo = match get("userinfo") {
        u if u.is_empty() => None,
        u => Some(
            gourl::userinfo(&u).map_err(|e| format!("unable to parse userinfo in dict: {e}"))?,
        ),
    };
    let mut out = String::new();
    let scheme = get("scheme");
    if !scheme.is_empty() {
        out.push_str(&scheme);
        out.push(':');
    }
    let opaque = get("opaque");
    if !opaque.is_empty() {
        out.push_str(&opaque);
    } else {
        let host = get("host");
        let path = get("path");
        if !scheme.is_empty() || !host.is_empty() || userinfo.is_some() {
            if !host.is_empty() || !path.is_empty() || userinfo.is_some() {
                out.push_str("//");
            }
            if let Some(userinfo) = &userinfo {
                out.push_str(userinfo);
                out.push('@');
            }
            out.push_str(&gourl::escape(&host, Part::Host));
        }
        let path = if path == "*" {
            path
        } else {
            gourl::escape(&path, Part::Path)
        };
        if !path.is_empty() && !path.starts_with('/') && !host.is_empty() {
            out.push('/');
        }
        // A first segment holding a colon would read as a scheme (RFC 3986 §4.2).
        if out.is_empty() && path.split('/').next().is_some_and(|s| s.contains(':')) {
            out.push_str("./");
        }
        out.push_str(&path);
    }
    let query = get("query");
    if !query.is_empty() {
        out.push('?');
        out.push_str(&query);
    }
    let fragment = get("fragment");
    if !fragment.is_empty() {
        out.push('#');
        out.push_str(&gourl::escape(&fragment, Part::Fragment));
    }
    Ok(out)
}
