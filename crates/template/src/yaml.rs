//! YAML output as Sveltos produces it: `toYaml` is sigs.k8s.io/yaml (JSON round trip, then
//! goyaml.v2: 2-space indent, sequences not indented under keys, plain scalars folded at 80
//! columns) and `copy`/`setField`/`removeField` are goyaml.v3 with 4-space indent. Both sort
//! keys with go-yaml's natural order and quote strings that YAML 1.1 would read as non-strings.

pub mod load;

use std::fmt::Write;

use crate::value::Value;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// sigs.k8s.io/yaml over goyaml.v2.
    V2,
    /// gopkg.in/yaml.v3 with `SetIndent(4)` (its default for `Marshal`).
    V3,
}

impl Flavor {
    fn indent(self) -> usize {
        match self {
            Flavor::V2 => 2,
            Flavor::V3 => 4,
        }
    }
}

/// Marshals `v`; the output ends with a newline, as go-yaml's does.
pub fn to_yaml(v: &Value, flavor: Flavor) -> Result<String, String> {
    let mut out = String::new();
    let mut e = Emitter {
        out: &mut out,
        flavor,
    };
    match v {
        Value::Map(m) if !m.is_empty() => e.map(v, 0, 0, false)?,
        Value::List(l) if !l.is_empty() => e.list(v, 0, false)?,
        other => {
            e.scalar(other, 0)?;
            e.out.push('\n');
        }
    }
    Ok(out)
}

struct Emitter<'a> {
    out: &'a mut String,
    flavor: Flavor,
}

impl Emitter<'_> {
    fn column(&self) -> usize {
        self.out.len() - self.out.rfind('\n').map(|i| i + 1).unwrap_or(0)
    }

    fn pad(&mut self, n: usize) {
        self.out.extend(std::iter::repeat_n(' ', n));
    }

    /// A block mapping with keys at `key_col`; nested blocks are placed relative to `base`
    /// (go-yaml v3 places the children of a mapping inside a sequence item relative to the
    /// sequence, not to the keys).
    fn map(
        &mut self,
        v: &Value,
        key_col: usize,
        base: usize,
        inline_first: bool,
    ) -> Result<(), String> {
        let Value::Map(m) = v else { return Ok(()) };
        let entries: Vec<(String, Value)> = {
            let map = m.read();
            let mut entries: Vec<(String, Value)> =
                map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            entries.sort_by(|a, b| natural_cmp(&a.0, &b.0));
            entries
        };
        for (i, (key, value)) in entries.iter().enumerate() {
            if i > 0 || !inline_first {
                self.pad(key_col);
            }
            self.string(key, key_col)?;
            self.out.push(':');
            self.value_after_key(value, base)?;
        }
        Ok(())
    }

    fn value_after_key(&mut self, value: &Value, base: usize) -> Result<(), String> {
        let step = self.flavor.indent();
        match value {
            Value::Map(m) if !m.is_empty() => {
                self.out.push('\n');
                self.map(value, base + step, base + step, false)
            }
            Value::List(l) if !l.is_empty() => {
                self.out.push('\n');
                let seq_indent = if self.flavor == Flavor::V3 {
                    base + step
                } else {
                    base
                };
                self.list(value, seq_indent, false)
            }
            scalar => {
                self.out.push(' ');
                self.scalar(scalar, base + step)?;
                self.out.push('\n');
                Ok(())
            }
        }
    }

    fn list(&mut self, v: &Value, indent: usize, inline_first: bool) -> Result<(), String> {
        let Value::List(items) = v else { return Ok(()) };
        for (i, item) in items.iter().enumerate() {
            if i > 0 || !inline_first {
                self.pad(indent);
            }
            self.out.push_str("- ");
            match item {
                Value::Map(m) if !m.is_empty() => {
                    let base = if self.flavor == Flavor::V3 {
                        indent
                    } else {
                        indent + 2
                    };
                    self.map(item, indent + 2, base, true)?
                }
                Value::List(l) if !l.is_empty() => self.list(item, indent + 2, true)?,
                scalar => {
                    self.scalar(scalar, indent + 2)?;
                    self.out.push('\n');
                }
            }
        }
        Ok(())
    }

    /// A scalar, without the trailing newline; `indent` is where continuation lines go.
    fn scalar(&mut self, v: &Value, indent: usize) -> Result<(), String> {
        match v {
            Value::Nil => self.out.push_str("null"),
            Value::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) | Value::GoInt(i) => {
                let _ = write!(self.out, "{i}");
            }
            Value::Float(f) => self.out.push_str(&self.float(*f)?),
            Value::String(s) => self.string(s, indent)?,
            Value::Map(_) => self.out.push_str("{}"),
            Value::List(_) => self.out.push_str("[]"),
            Value::Time(t) => self.string(&t.rfc3339(), indent)?,
            Value::Semver(s) => self.string(&s.to_string(), indent)?,
        }
        Ok(())
    }

    fn float(&self, f: f64) -> Result<String, String> {
        if f.is_nan() {
            return Ok(".nan".into());
        }
        if f.is_infinite() {
            return Ok(if f > 0.0 { ".inf" } else { "-.inf" }.into());
        }
        match self.flavor {
            // The JSON round trip turns integral floats into YAML integers.
            Flavor::V2 => {
                let json = crate::sprig::encoding::json_float(f)?;
                if json.contains(['.', 'e']) {
                    Ok(crate::gofmt::format_g(f, None, false))
                } else {
                    Ok(json)
                }
            }
            Flavor::V3 => Ok(crate::gofmt::format_g(f, None, false)),
        }
    }

    fn string(&mut self, s: &str, indent: usize) -> Result<(), String> {
        match style(s) {
            Style::Plain => {
                if self.flavor == Flavor::V2 {
                    self.folded_plain(s, indent);
                } else {
                    self.out.push_str(s);
                }
            }
            Style::Single => {
                self.out.push('\'');
                self.out.push_str(&s.replace('\'', "''"));
                self.out.push('\'');
            }
            Style::Double => double_quoted(self.out, s),
            Style::Literal => self.literal(s, indent),
        }
        Ok(())
    }

    /// goyaml.v2 breaks a plain scalar at a single space once past column 80.
    fn folded_plain(&mut self, s: &str, indent: usize) {
        if !s.contains(' ') {
            // Nowhere to break (most keys and values): copied as it is.
            self.out.push_str(s);
            return;
        }
        let chars: Vec<char> = s.chars().collect();
        let mut prev_space = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_space = chars.get(i + 1) == Some(&' ');
                if !prev_space && self.column() > 80 && !next_space {
                    self.out.push('\n');
                    self.pad(indent);
                } else {
                    self.out.push(' ');
                }
                prev_space = true;
            } else {
                self.out.push(c);
                prev_space = false;
            }
        }
    }

    fn literal(&mut self, s: &str, indent: usize) {
        self.out.push('|');
        if s.starts_with(' ') {
            let _ = write!(self.out, "{}", self.flavor.indent());
        }
        let trailing = s.len() - s.trim_end_matches('\n').len();
        match trailing {
            0 => self.out.push('-'),
            1 => {}
            _ => self.out.push('+'),
        }
        let body = if trailing == 1 {
            &s[..s.len() - 1]
        } else {
            s.trim_end_matches('\n')
        };
        for line in body.split('\n') {
            self.out.push('\n');
            if !line.is_empty() {
                self.pad(indent);
                self.out.push_str(line);
            }
        }
        for _ in 1..trailing {
            self.out.push('\n');
        }
    }
}

enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

fn style(s: &str) -> Style {
    if s.is_empty() || resolves_to_non_string(s) {
        return Style::Double;
    }
    let special = s.chars().any(|c| {
        (c < ' ' && c != '\n')
            || c == '\u{7f}'
            || c == '\u{feff}'
            || (c >= '\u{80}' && c.is_control())
    });
    if special {
        return Style::Double;
    }
    if s.contains('\n') {
        let trailing_space =
            s.split('\n').any(|l| l.ends_with(' ')) || s.starts_with('\n') && s.trim().is_empty();
        return if trailing_space {
            Style::Double
        } else {
            Style::Literal
        };
    }
    let first = s.chars().next().unwrap_or(' ');
    let second = s.chars().nth(1);
    let indicator = "#,[]{}&*!|>'\"%@`".contains(first)
        || (matches!(first, '-' | '?' | ':') && second.is_none_or(|c| c == ' '))
        || s.starts_with("---")
        || s.starts_with("...");
    if indicator
        || s.starts_with(' ')
        || s.ends_with(' ')
        || s.contains(": ")
        || s.contains(" #")
        || s.ends_with(':')
    {
        return Style::Single;
    }
    Style::Plain
}

fn double_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\x0b' => out.push_str("\\v"),
            '\x0c' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            '\u{85}' => out.push_str("\\N"),
            '\u{a0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if c < ' ' || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c if c == '\u{feff}' || (c >= '\u{80}' && c.is_control()) => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether goyaml would read the plain scalar `s` as something other than a string (YAML 1.1
/// booleans and nulls, integers, floats, timestamps, base-60 numbers, the merge key).
pub fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
        "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "~", "null", "Null", "NULL",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
        ".NaN", ".NAN", "<<",
    ];
    // The words are at most six bytes long: longer text skips comparing with each.
    if s.len() <= 6 && WORDS.contains(&s) {
        return true;
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return false;
    }
    let plain = s.replace('_', "");
    if crate::parse::parse_go_int(&plain).is_some() || is_yaml_float(&plain) {
        return true;
    }
    is_timestamp(s) || is_base60(s)
}

pub fn is_yaml_float(s: &str) -> bool {
    let b = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exp) = match b.find(['e', 'E']) {
        Some(i) => (&b[..i], Some(&b[i + 1..])),
        None => (b, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && !frac.is_empty() && frac.bytes().all(|c| c.is_ascii_digit()))
                || (!int.is_empty()
                    && int.bytes().all(|c| c.is_ascii_digit())
                    && frac.bytes().all(|c| c.is_ascii_digit()))
        }
        None => !mantissa.is_empty() && mantissa.bytes().all(|c| c.is_ascii_digit()),
    };
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit())
    });
    mantissa_ok && exp_ok
}

fn is_timestamp(s: &str) -> bool {
    let date = s.split(['T', 't', ' ']).next().unwrap_or(s);
    let parts: Vec<&str> = date.split('-').collect();
    parts.len() == 3
        && parts[0].len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()))
        && parts[1].len() <= 2
        && parts[2].len() <= 2
}

fn is_base60(s: &str) -> bool {
    let b = s.strip_prefix(['-', '+']).unwrap_or(s);
    let mut parts = b.split(':');
    let first_ok = parts
        .next()
        .is_some_and(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit() || c == b'_'));
    let rest: Vec<&str> = parts.collect();
    first_ok
        && !rest.is_empty()
        && rest.iter().enumerate().all(|(i, p)| {
            let p = if i + 1 == rest.len() {
                p.split('.').next().unwrap_or(p)
            } else {
                p
            };
            !p.is_empty()
                && p.len() <= 2
                && p.bytes().all(|c| c.is_ascii_digit())
                && p.parse::<u32>().is_ok_and(|n| n < 60)
        })
}

/// go-yaml's key order: letters by code point, digit runs by numeric value, non-letters first.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an.wrapping_mul(10).wrapping_add(ar[ai] as i64 - '0' as i64);
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn.wrapping_mul(10).wrapping_add(br[bi] as i64 - '0' as i64);
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}
