//! Go's `fmt` printing rules for template values: `%v` (what `{{ . }}` prints), `Sprint`,
//! `Sprintln` and `Sprintf` with the verbs and flags templates use. Not a general fmt port:
//! argument indexes (`%[1]d`) and `*` widths are reported as bad verbs.

use std::fmt::Write;

use crate::value::Value;

/// Appends `%v` of `value`, exactly as Go prints it.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Nil => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) | Value::GoInt(i) => push_int(out, *i),
        Value::Float(f) => out.push_str(&format_g(*f, None, false)),
        Value::String(s) => out.push_str(s),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Map(map) => {
            out.push_str("map[");
            for (i, (k, v)) in map.read().iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_value(out, v);
            }
            out.push(']');
        }
        Value::Time(t) => out.push_str(&t.go_string()),
        Value::Semver(v) => out.push_str(&v.to_string()),
    }
}

/// Appends a decimal integer without going through `fmt`.
pub fn push_int(out: &mut String, i: i64) {
    // Two digits per division: ports and counts take one or two steps.
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut buf = [0u8; 20];
    let mut n = i.unsigned_abs();
    let mut pos = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        pos -= 2;
        buf[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        pos -= 2;
        buf[pos..pos + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        pos -= 1;
        buf[pos] = b'0' + n as u8;
    }
    if i < 0 {
        out.push('-');
    }
    // SAFETY: the buffer holds ASCII digits only. Validating them cost more than writing
    // them (integers are printed in every loop of a template).
    out.push_str(unsafe { std::str::from_utf8_unchecked(&buf[pos..]) });
}

/// `%v` of `value` as a new string.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// Go's `fmt.Sprint`: a space between operands when neither side is a string.
pub fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    let mut prev_string = false;
    for (i, arg) in args.iter().enumerate() {
        let is_string = matches!(arg, Value::String(_));
        if i > 0 && !is_string && !prev_string {
            out.push(' ');
        }
        write_value(&mut out, arg);
        prev_string = is_string;
    }
    out
}

/// Go's `fmt.Sprintln`: spaces between all operands and a trailing newline.
pub fn sprintln(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        write_value(&mut out, arg);
    }
    out.push('\n');
    out
}

/// Formats a float like Go's `strconv.FormatFloat(f, 'g', prec, 64)` (`prec` None = shortest).
pub fn format_g(f: f64, prec: Option<usize>, sharp: bool) -> String {
    if let Some(special) = special_float(f) {
        return special.to_string();
    }
    let (neg, digits, exp) = decimal_digits(f, prec.map(|p| p.max(1)));
    let nd = digits.len() as i32;
    let dp = exp + 1;
    let mut eprec = match prec {
        None => 6,
        Some(p) => {
            let p = p.max(1) as i32;
            if p > nd && nd >= dp {
                nd
            } else {
                p
            }
        }
    };
    if sharp {
        eprec = prec.map(|p| p.max(1) as i32).unwrap_or(6);
    }
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if exp < -4 || exp >= eprec {
        let frac = if sharp { eprec - 1 } else { nd - 1 };
        push_e(&mut out, &digits, frac.max(0) as usize, exp, 'e');
    } else {
        let frac = if sharp {
            (eprec - dp).max(0)
        } else {
            (nd - dp).max(0)
        };
        push_f(&mut out, &digits, dp, frac as usize);
    }
    out
}

/// Formats a float like `%e` / `%E` with `prec` fraction digits (default 6).
pub fn format_e(f: f64, prec: usize, upper: bool) -> String {
    if let Some(special) = special_float(f) {
        return special.to_string();
    }
    let (neg, digits, exp) = decimal_digits(f, Some(prec + 1));
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    push_e(&mut out, &digits, prec, exp, if upper { 'E' } else { 'e' });
    out
}

/// Formats a float like `%f` with `prec` fraction digits.
pub fn format_f(f: f64, prec: usize) -> String {
    if let Some(special) = special_float(f) {
        return special.to_string();
    }
    let s = format!("{:.*}", prec, f);
    if s.starts_with('-') && s[1..].bytes().all(|b| b == b'0' || b == b'.') && !f.is_sign_negative()
    {
        return s[1..].to_string();
    }
    s
}

fn special_float(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("NaN")
    } else if f == f64::INFINITY {
        Some("+Inf")
    } else if f == f64::NEG_INFINITY {
        Some("-Inf")
    } else {
        None
    }
}

/// Decimal digits (no trailing zeros) and decimal exponent of `f`, rounded to `sig`
/// significant digits, or the shortest round-trip digits when `sig` is None.
fn decimal_digits(f: f64, sig: Option<usize>) -> (bool, Vec<u8>, i32) {
    let neg = f.is_sign_negative();
    let a = f.abs();
    let s = match sig {
        Some(n) => format!("{:.*e}", n - 1, a),
        None => format!("{:e}", a),
    };
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits == [b'0'] {
        return (neg, digits, 0);
    }
    (neg, digits, exp)
}

fn push_e(out: &mut String, digits: &[u8], frac: usize, exp: i32, e: char) {
    out.push(digits[0] as char);
    if frac > 0 {
        out.push('.');
        for i in 1..=frac {
            out.push(*digits.get(i).unwrap_or(&b'0') as char);
        }
    }
    out.push(e);
    out.push(if exp < 0 { '-' } else { '+' });
    let a = exp.unsigned_abs();
    if a < 10 {
        out.push('0');
    }
    let _ = write!(out, "{a}");
}

fn push_f(out: &mut String, digits: &[u8], dp: i32, frac: usize) {
    if dp <= 0 {
        out.push('0');
    } else {
        for i in 0..dp as usize {
            out.push(*digits.get(i).unwrap_or(&b'0') as char);
        }
    }
    if frac > 0 {
        out.push('.');
        for i in 0..frac as i32 {
            let idx = dp + i;
            let d = if idx < 0 {
                b'0'
            } else {
                *digits.get(idx as usize).unwrap_or(&b'0')
            };
            out.push(d as char);
        }
    }
}

/// Go's `strconv.Quote`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_quoted(&mut out, s);
    out
}

/// [`quote`] appending to `out`.
pub fn push_quoted(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut rest = s;
    while !rest.is_empty() {
        // Printable ASCII other than `"` and `\` is copied as it is, a run at a time.
        let plain = rest
            .bytes()
            .position(|b| !(b' '..=b'~').contains(&b) || b == b'"' || b == b'\\')
            .unwrap_or(rest.len());
        out.push_str(&rest[..plain]);
        rest = &rest[plain..];
        let Some(c) = rest.chars().next() else { break };
        push_escaped(out, c, '"');
        rest = &rest[c.len_utf8()..];
    }
    out.push('"');
}

/// Go's `strconv.QuoteRune`.
pub fn quote_rune(c: char) -> String {
    let mut out = String::from("'");
    push_escaped(&mut out, c, '\'');
    out.push('\'');
    out
}

fn push_escaped(out: &mut String, c: char, quote: char) {
    match c {
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\x0c' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x0b' => out.push_str("\\v"),
        '\\' => out.push_str("\\\\"),
        c if c == quote => {
            out.push('\\');
            out.push(c);
        }
        c if (c as u32) < 0x20 || c as u32 == 0x7f => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if (c as u32) >= 0x80 && !is_print(c) => {
            if (c as u32) < 0x10000 {
                let _ = write!(out, "\\u{:04x}", c as u32);
            } else {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
        c => out.push(c),
    }
}

/// Go's `strconv.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII space.
/// Other spaces (U+00A0), format characters (U+200B, U+00AD), separators, controls, private
/// use and unassigned code points are escaped by `%q` and `quote`. (Go 1.23 has Unicode 15.0;
/// the table here may be newer, which only differs for code points assigned since.)
fn is_print(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    c == ' '
        || !matches!(
            get_general_category(c),
            G::Control
                | G::Format
                | G::Surrogate
                | G::PrivateUse
                | G::Unassigned
                | G::SpaceSeparator
                | G::LineSeparator
                | G::ParagraphSeparator
        )
}

pub use crate::printf::sprintf;

#[cfg(test)]
mod tests {
    use super::push_int;

    #[test]
    fn integers_print_as_rust_prints_them() {
        let mut values = vec![i64::MIN, i64::MIN + 1, i64::MAX, 0];
        for digits in 0..19 {
            let p = 10i64.pow(digits);
            values.extend([p - 1, p, p + 1, -p + 1, -p, -p - 1, 8443, 443, -80]);
        }
        for i in values {
            let mut out = String::from(">");
            push_int(&mut out, i);
            assert_eq!(out, format!(">{i}"));
        }
    }
}
