//! sprig v3 (`TxtFuncMap`) re-implemented over template values, one file per function family.
//! Deliberate differences: `env`/`expandenv` see an empty environment and `getHostByName`
//! resolves nothing (templates never touch the environment, the file system or the network).

pub mod certs;
pub mod convert;
pub mod crypto;
pub mod dates;
pub mod dicts;
pub mod encoding;
pub mod gocase;
pub mod gourl;
pub mod lists;
pub mod math;
pub mod semver;
pub mod strings;
pub mod wordcase;

use crate::gofmt::to_string;
use crate::value::Value;

/// sprig's `strval`: strings as they are, everything else through `%v`.
pub fn strval(v: &Value) -> String {
    match v {
        Value::String(s) => s.to_string(),
        other => to_string(other),
    }
}

/// sprig's `strslice`: a list of strings (nil elements dropped); a non-list is one string.
pub fn strslice(v: &Value) -> Vec<String> {
    match v {
        Value::List(items) => items.iter().filter(|i| !i.is_nil()).map(strval).collect(),
        Value::Nil => Vec::new(),
        other => vec![strval(other)],
    }
}

/// sprig's `empty`: Go's zero values and empty collections.
pub fn empty(v: &Value) -> bool {
    match v {
        Value::Nil => true,
        Value::Bool(b) => !b,
        Value::Int(i) | Value::GoInt(i) => *i == 0,
        Value::Float(f) => *f == 0.0,
        Value::String(s) => s.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.is_empty(),
        Value::Time(_) | Value::Semver(_) => false,
    }
}

/// `reflect.DeepEqual` over template values (int and int64 differ, as in Go).
pub fn deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) | (Value::GoInt(x), Value::GoInt(y)) => x == y,
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| deep_equal(a, b))
        }
        (Value::Map(x), Value::Map(y)) => {
            if x.ptr_eq(y) {
                return true;
            }
            let (x, y) = (x.read(), y.read());
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| deep_equal(v, w)))
        }
        (Value::Time(x), Value::Time(y)) => x == y,
        (Value::Semver(x), Value::Semver(y)) => x == y,
        _ => false,
    }
}

/// `cast.ToInt64`: numbers (floats truncated), numeric strings (base prefixes allowed), bools.
pub fn to_int64(v: &Value) -> i64 {
    match v {
        Value::Int(i) | Value::GoInt(i) => *i,
        Value::Float(f) => *f as i64,
        Value::Bool(b) => i64::from(*b),
        Value::String(s) => {
            let s = trim_zero_decimal(s);
            crate::parse::parse_go_int(&s).unwrap_or(0)
        }
        _ => 0,
    }
}

/// `cast.ToFloat64`.
pub fn to_float64(v: &Value) -> f64 {
    match v {
        Value::Int(i) | Value::GoInt(i) => *i as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        // cast.ToFloat64: a string out of float64's range is an error, so 0 (an explicit
        // "Inf" is not).
        Value::String(s) => match s.parse::<f64>() {
            Ok(f) if f.is_infinite() && !s.to_ascii_lowercase().contains("inf") => 0.0,
            Ok(f) => f,
            Err(_) => 0.0,
        },
        _ => 0.0,
    }
}

/// `s[from..to]` by bytes, as Go slices a string, where the text then goes out as Go's
/// `encoding/json` writes it (what the rendered ConfigMap holds): a byte that is not part of a
/// whole UTF-8 character becomes U+FFFD.
pub fn byte_slice(s: &str, from: usize, to: usize) -> String {
    sluice_domain::gocase::lossy(s.as_bytes().get(from..to).unwrap_or_default()).into_owned()
}

fn trim_zero_decimal(s: &str) -> String {
    match s.split_once('.') {
        Some((int, frac)) if !int.is_empty() && frac.bytes().all(|b| b == b'0') => int.to_string(),
        _ => s.to_string(),
    }
}
