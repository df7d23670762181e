//! Go number literals: `strconv.ParseInt(text, 0, 64)` bases and underscores, and the
//! `parse.newNumber` interpretations (int, float, Go's "ideal constant" for `interface{}`).

use crate::ast::Number;
use crate::value::Value;

/// Go's `parse.newNumber` for a number token.
pub(super) fn number(text: &str) -> Result<Number, String> {
    let int = parse_go_int(text);
    let float = match int {
        Some(i) => Some(i as f64),
        None => {
            let cleaned = text.replace('_', "");
            match cleaned.parse::<f64>() {
                Ok(f) if !text.contains(['.', 'e', 'E', 'p', 'P']) && !text.starts_with("0x") => {
                    let _ = f;
                    return Err(format!("integer overflow: {text:?}"));
                }
                Ok(f) => Some(f),
                Err(_) => None,
            }
        }
    };
    let int = int.or_else(|| {
        float
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
            .map(|f| f as i64)
    });
    let is_hex = text.trim_start_matches(['+', '-']).starts_with("0x")
        || text.trim_start_matches(['+', '-']).starts_with("0X");
    let ideal = match (int, float) {
        (_, Some(f)) if !is_hex && text.contains(['.', 'e', 'E', 'p', 'P']) => Value::Float(f),
        (Some(i), _) => Value::GoInt(i),
        (None, Some(f)) => Value::Float(f),
        (None, None) => return Err(format!("illegal number syntax: {text:?}")),
    };
    Ok(Number { int, float, ideal })
}

/// `strconv.ParseInt(text, 0, 64)`: sign, `0x`/`0o`/`0b`/leading-0 octal, underscores.
pub fn parse_go_int(text: &str) -> Option<i64> {
    let (neg, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || digits.starts_with('_') && radix == 10 {
        return None;
    }
    let digits: String = digits.chars().filter(|c| *c != '_').collect();
    let magnitude = u64::from_str_radix(&digits, radix).ok()?;
    if neg {
        if magnitude <= i64::MAX as u64 + 1 {
            Some((magnitude as i64).wrapping_neg())
        } else {
            None
        }
    } else {
        i64::try_from(magnitude).ok()
    }
}
