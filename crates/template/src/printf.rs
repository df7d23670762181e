//! Go's `fmt.Sprintf` over template values: verbs `v s d q x X o b c U e E f F g G t T %`,
//! flags `+ - # 0 space`, width and precision, and Go's `%!verb(type=value)` error forms.

use std::fmt::Write;

use crate::gofmt::{
    format_e, format_f, format_g, push_int, quote, quote_rune, to_string, write_value,
};
use crate::val::Scalar;
use crate::value::Value;

#[derive(Default, Clone, Copy)]
struct Spec {
    plus: bool,
    minus: bool,
    sharp: bool,
    zero: bool,
    space: bool,
    width: Option<usize>,
    prec: Option<usize>,
}

/// Go's `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    let mut out = String::with_capacity(format.len() + 16);
    let bytes = format.as_bytes();
    let mut next_arg = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i] != b'%' {
            i += 1;
        }
        out.push_str(&format[start..i]);
        if i >= bytes.len() {
            break;
        }
        i += 1; // '%'
        let mut spec = Spec::default();
        while i < bytes.len() {
            match bytes[i] {
                b'+' => spec.plus = true,
                b'-' => spec.minus = true,
                b'#' => spec.sharp = true,
                b'0' => spec.zero = true,
                b' ' => spec.space = true,
                _ => break,
            }
            i += 1;
        }
        let (width, after) = parse_num(bytes, i);
        spec.width = width;
        i = after;
        if i < bytes.len() && bytes[i] == b'.' {
            let (prec, after) = parse_num(bytes, i + 1);
            spec.prec = Some(prec.unwrap_or(0));
            i = after;
        }
        let Some(verb) = format[i..].chars().next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        i += verb.len_utf8();
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next_arg) else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        next_arg += 1;
        if verb == 'v' && spec.sharp {
            // `%#v`: Go syntax.
            let mut text = String::new();
            go_syntax(&mut text, arg, true);
            pad(
                &mut out,
                &text,
                Spec {
                    sharp: false,
                    ..spec
                },
                false,
            );
            continue;
        }
        // `%+v` asks for struct field names, which template values do not have: `+` does not
        // sign numbers under `v`.
        let spec = if verb == 'v' {
            Spec {
                plus: false,
                ..spec
            }
        } else {
            spec
        };
        format_arg(&mut out, verb, spec, arg);
    }
    if next_arg < args.len() {
        out.push_str("%!(EXTRA ");
        for (n, arg) in args[next_arg..].iter().enumerate() {
            if n > 0 {
                out.push_str(", ");
            }
            if arg.is_nil() {
                out.push_str("<nil>");
            } else {
                let _ = write!(out, "{}=", arg.go_type());
                write_value(&mut out, arg);
            }
        }
        out.push(')');
    }
    out
}

fn parse_num(bytes: &[u8], mut i: usize) -> (Option<usize>, usize) {
    let start = i;
    let mut n: usize = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        n = n
            .saturating_mul(10)
            .saturating_add((bytes[i] - b'0') as usize);
        i += 1;
    }
    // Widths and precisions are clamped: a template cannot make printf allocate gigabytes.
    (
        if i > start {
            Some(n.min(1 << 16))
        } else {
            None
        },
        i,
    )
}

fn format_arg(out: &mut String, verb: char, spec: Spec, arg: &Value) {
    if verb == 'T' {
        pad(out, arg.go_type(), spec, false);
        return;
    }
    match arg {
        Value::Nil => match verb {
            'v' => pad(out, "<nil>", spec, false),
            _ => bad_verb(out, verb, spec, arg),
        },
        Value::Bool(b) => match verb {
            't' | 'v' => pad(out, if *b { "true" } else { "false" }, spec, false),
            _ => bad_verb(out, verb, spec, arg),
        },
        Value::Int(i) | Value::GoInt(i) => format_int(out, verb, spec, *i, arg),
        Value::Float(f) => format_float(out, verb, spec, *f, arg),
        Value::String(s) => format_str(out, verb, spec, s, arg),
        Value::List(items) => {
            // Go formats a slice element by element with the same verb, whatever it is.
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(' ');
                }
                format_elem(out, verb, spec, item);
            }
            out.push(']');
        }
        Value::Map(map) => {
            out.push_str("map[");
            for (n, (k, v)) in map.read().iter().enumerate() {
                if n > 0 {
                    out.push(' ');
                }
                format_str(out, verb, spec, k, &Value::str(k));
                out.push(':');
                format_elem(out, verb, spec, v);
            }
            out.push(']');
        }
        Value::Time(_) | Value::Semver(_) => {
            // Both implement fmt.Stringer in Go: %v and %s print the String() form.
            let s = to_string(arg);
            format_str(out, verb, spec, &s, arg)
        }
    }
}

/// An element of a list or map: a nil one prints `<nil>` whatever the verb, without padding
/// (Go prints a nil interface inside a composite that way).
fn format_elem(out: &mut String, verb: char, spec: Spec, item: &Value) {
    if item.is_nil() {
        out.push_str("<nil>");
    } else {
        format_arg(out, verb, spec, item);
    }
}

/// `%#v`: a value in Go syntax, as the template's Go types write it.
fn go_syntax(out: &mut String, v: &Value, top: bool) {
    match v {
        Value::Nil if top => out.push_str("<nil>"),
        Value::Nil => out.push_str("interface {}(nil)"),
        Value::String(s) => out.push_str(&quote(s)),
        Value::List(items) => {
            out.push_str("[]interface {}{");
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                go_syntax(out, item, false);
            }
            out.push('}');
        }
        Value::Map(map) => {
            out.push_str("map[string]interface {}{");
            for (n, (k, item)) in map.read().iter().enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                out.push_str(&quote(k));
                out.push(':');
                go_syntax(out, item, false);
            }
            out.push('}');
        }
        other => write_value(out, other),
    }
}

/// Go's `%!verb(type=value)`: the value as `%v` with the verb's flags, width and precision.
fn bad_verb(out: &mut String, verb: char, spec: Spec, arg: &Value) {
    if arg.is_nil() {
        let _ = write!(out, "%!{verb}(<nil>)");
    } else {
        let _ = write!(out, "%!{verb}({}=", arg.go_type());
        format_arg(out, 'v', spec, arg);
        out.push(')');
    }
}

fn format_int(out: &mut String, verb: char, spec: Spec, i: i64, arg: &Value) {
    // Plain `%d`/`%v` (no flags, width or precision): the digits, straight to the output.
    let plain = !(spec.plus || spec.minus || spec.sharp || spec.zero || spec.space);
    if plain && spec.width.is_none() && spec.prec.is_none() && matches!(verb, 'd' | 'v') {
        return crate::gofmt::push_int(out, i);
    }
    let digits = match verb {
        'd' | 'v' => i.unsigned_abs().to_string(),
        'x' => format!("{:x}", i.unsigned_abs()),
        'X' => format!("{:X}", i.unsigned_abs()),
        'o' | 'O' => format!("{:o}", i.unsigned_abs()),
        'b' => format!("{:b}", i.unsigned_abs()),
        'c' => {
            let c = char::from_u32(i as u32).unwrap_or('\u{fffd}');
            return pad(out, &c.to_string(), spec, false);
        }
        'q' => {
            let c = char::from_u32(i as u32).unwrap_or('\u{fffd}');
            return pad(out, &quote_rune(c), spec, false);
        }
        'U' => {
            return pad(out, &format!("U+{:04X}", i), spec, false);
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 's' | 't' => return bad_verb(out, verb, spec, arg),
        _ => return bad_verb(out, verb, spec, arg),
    };
    let mut prefix = String::new();
    if i < 0 {
        prefix.push('-');
    } else if spec.plus {
        prefix.push('+');
    } else if spec.space {
        prefix.push(' ');
    }
    if spec.sharp {
        match verb {
            'x' => prefix.push_str("0x"),
            'X' => prefix.push_str("0X"),
            'o' => prefix.push('0'),
            'b' => prefix.push_str("0b"),
            _ => {}
        }
    }
    if verb == 'O' {
        prefix.push_str("0o");
    }
    let mut digits = digits;
    if let Some(p) = spec.prec {
        if p == 0 && i == 0 {
            digits.clear();
        }
        while digits.len() < p {
            digits.insert(0, '0');
        }
    }
    number_pad(out, &prefix, &digits, spec);
}

fn number_pad(out: &mut String, prefix: &str, digits: &str, spec: Spec) {
    let len = prefix.len() + digits.len();
    let width = spec.width.unwrap_or(0);
    if spec.zero && !spec.minus && spec.prec.is_none() && width > len {
        out.push_str(prefix);
        out.extend(std::iter::repeat_n('0', width - len));
        out.push_str(digits);
    } else {
        pad(out, &format!("{prefix}{digits}"), spec, false);
    }
}

fn format_float(out: &mut String, verb: char, spec: Spec, f: f64, arg: &Value) {
    let body = match verb {
        'v' | 'g' => format_g(f, spec.prec, spec.sharp),
        'G' => format_g(f, spec.prec, spec.sharp).to_uppercase(),
        'e' => format_e(f, spec.prec.unwrap_or(6), false),
        'E' => format_e(f, spec.prec.unwrap_or(6), true),
        'f' | 'F' => format_f(f, spec.prec.unwrap_or(6)),
        _ => return bad_verb(out, verb, spec, arg),
    };
    let (sign, digits) = match body.strip_prefix('-') {
        Some(rest) => ("-", rest.to_string()),
        None if spec.plus => ("+", body),
        None if spec.space => (" ", body),
        None => ("", body),
    };
    if f.is_infinite() || f.is_nan() {
        let s = if digits.starts_with('+') {
            digits.clone()
        } else {
            format!("{sign}{digits}")
        };
        return pad(
            out,
            &s,
            Spec {
                zero: false,
                ..spec
            },
            false,
        );
    }
    let width = spec.width.unwrap_or(0);
    let len = sign.len() + digits.len();
    if spec.zero && !spec.minus && width > len {
        out.push_str(sign);
        out.extend(std::iter::repeat_n('0', width - len));
        out.push_str(&digits);
    } else {
        pad(out, &format!("{sign}{digits}"), spec, false);
    }
}

fn format_str(out: &mut String, verb: char, spec: Spec, s: &str, arg: &Value) {
    let truncated: String;
    let s = match spec.prec {
        Some(p) if matches!(verb, 's' | 'v' | 'q') => {
            truncated = s.chars().take(p).collect();
            truncated.as_str()
        }
        _ => s,
    };
    match verb {
        's' | 'v' => pad(out, s, spec, true),
        'q' => {
            let quoted = if spec.sharp && !s.contains('`') {
                format!("`{s}`")
            } else {
                quote(s)
            };
            pad(out, &quoted, spec, false)
        }
        'x' | 'X' => {
            let mut hex = String::new();
            for (n, b) in s.bytes().enumerate() {
                if spec.space && n > 0 {
                    hex.push(' ');
                }
                if verb == 'x' {
                    let _ = write!(hex, "{b:02x}");
                } else {
                    let _ = write!(hex, "{b:02X}");
                }
            }
            pad(out, &hex, spec, false)
        }
        _ => bad_verb(out, verb, spec, arg),
    }
}

fn pad(out: &mut String, s: &str, spec: Spec, zero_ok: bool) {
    let Some(width) = spec.width else {
        return out.push_str(s);
    };
    let len = s.chars().count();
    if width <= len {
        out.push_str(s);
        return;
    }
    let fill = width - len;
    if spec.minus {
        out.push_str(s);
        out.extend(std::iter::repeat_n(' ', fill));
    } else {
        let c = if spec.zero && zero_ok { '0' } else { ' ' };
        out.extend(std::iter::repeat_n(c, fill));
        out.push_str(s);
    }
}

/// [`sprintf`] for formats whose verbs are all plain `%s`, `%d` or `%v` (no flags, width or
/// precision) or `%%`, over one scalar per verb that the verb prints as itself (a string for
/// `%s`, an integer for `%d`, either or a bool for `%v`), appended to `out`. `false`, with
/// `out` possibly written to, for anything else: then [`sprintf`] decides.
pub fn sprintf_plain(format: &str, args: &[Scalar<'_>], out: &mut String) -> bool {
    let mut args = args.iter();
    let mut rest = format;
    while let Some(at) = rest.bytes().position(|b| b == b'%') {
        out.push_str(&rest[..at]);
        let verb = rest.as_bytes().get(at + 1).copied();
        match verb {
            Some(b'%') => out.push('%'),
            Some(verb @ (b's' | b'd' | b'v')) => match (verb, args.next()) {
                (b's' | b'v', Some(Scalar::Str(s))) => out.push_str(s),
                (b'd' | b'v', Some(Scalar::Int(i))) => push_int(out, *i),
                (b'v', Some(Scalar::Bool(b))) => out.push_str(if *b { "true" } else { "false" }),
                _ => return false,
            },
            _ => return false,
        }
        // Both bytes are ASCII: the slice stays on a character boundary.
        rest = &rest[at + 2..];
    }
    out.push_str(rest);
    // Arguments left over are printed as `%!(EXTRA ...)` by the general form.
    args.next().is_none()
}
