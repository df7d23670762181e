//! Reading results out of Lua with the quirks of gopher-lua's `ToGoValue` followed by Go's
//! `encoding/json`, and gopher-lua's number formatting. Objects go into Lua through `raw`
//! (libsveltos' `MapToTable` rules). Does not run scripts.

use mlua::Value as LuaValue;
use serde_json::{Map, Number, Value};

/// Deepest table nesting read back from Lua; deeper (or cyclic) results are rejected.
const MAX_RESULT_DEPTH: usize = 200;

/// Largest value (in bytes of Rust memory) that Rust code builds from Lua values (a result, or what
/// a helper such as `json.encode` or `strings.Repeat` returns). Rust allocations are outside the
/// Lua state's memory limit and outside the instruction budget, so without this a table that
/// holds the same table twice, forty levels deep, would be converted for ever.
pub(crate) const MAX_BUILT_BYTES: usize = 64 << 20;

/// What one JSON value or map key costs on top of its bytes.
const VALUE_BYTES: usize = std::mem::size_of::<Value>();

/// Fails when `size` bytes are more than [`MAX_BUILT_BYTES`].
pub(crate) fn check_built(size: usize) -> Result<(), String> {
    if size > MAX_BUILT_BYTES {
        return Err(format!("value larger than {MAX_BUILT_BYTES} bytes"));
    }
    Ok(())
}

/// A Lua value as Go sees it after `ToGoValue` and a `json.Marshal`: a table whose length is
/// positive is an array (its other keys are lost), any other table is an object with stringified
/// keys. NaN and infinities, functions and other non-data values are errors, worded like Go's.
/// A value larger than [`MAX_BUILT_BYTES`] (a shared table counted each time it
/// occurs) is an error too.
pub(crate) fn to_json(value: &LuaValue) -> Result<Value, String> {
    let mut built = 0;
    to_json_at(value, 0, &mut built)
}

fn to_json_at(value: &LuaValue, depth: usize, built: &mut usize) -> Result<Value, String> {
    if depth > MAX_RESULT_DEPTH {
        return Err(format!(
            "result nests deeper than {MAX_RESULT_DEPTH} tables (cyclic table?)"
        ));
    }
    // What the value holds in Rust: a `Value` and, for a string, its bytes.
    *built += match value {
        LuaValue::String(s) => s.as_bytes().len() + VALUE_BYTES,
        _ => VALUE_BYTES,
    };
    check_built(*built)?;
    Ok(match value {
        LuaValue::Nil => Value::Null,
        LuaValue::Boolean(b) => Value::Bool(*b),
        LuaValue::Integer(i) => Value::from(*i),
        LuaValue::Number(f) => number_to_json(*f)?,
        LuaValue::String(s) => Value::String(s.to_string_lossy()),
        LuaValue::Table(t) => {
            let len = t.raw_len();
            if len > 0 {
                let mut items = Vec::with_capacity(len);
                for i in 1..=len {
                    let item: LuaValue = t.raw_get(i).map_err(|e| e.to_string())?;
                    items.push(to_json_at(&item, depth + 1, built)?);
                }
                Value::Array(items)
            } else {
                let mut map = Map::new();
                for pair in t.pairs::<LuaValue, LuaValue>() {
                    let (k, v) = pair.map_err(|e| e.to_string())?;
                    let key = match &k {
                        LuaValue::String(s) => s.to_string_lossy(),
                        LuaValue::Number(f) => format_number(*f),
                        LuaValue::Integer(i) => i.to_string(),
                        LuaValue::Boolean(b) => b.to_string(),
                        other => {
                            return Err(format!(
                                "json: unsupported map key of type {}",
                                other.type_name()
                            ))
                        }
                    };
                    *built += key.len() + VALUE_BYTES;
                    map.insert(key, to_json_at(&v, depth + 1, built)?);
                }
                Value::Object(map)
            }
        }
        other => return Err(format!("json: unsupported type: {}", other.type_name())),
    })
}

/// A Lua number as JSON: integral values as integers (Go prints `3`, not `3.0`).
fn number_to_json(f: f64) -> Result<Value, String> {
    if f.is_nan() {
        return Err("json: unsupported value: NaN".into());
    }
    if f.is_infinite() {
        let sign = if f > 0.0 { "+" } else { "-" };
        return Err(format!("json: unsupported value: {sign}Inf"));
    }
    if f.fract() == 0.0 && f.abs() < 9.2e18 {
        return Ok(Value::from(f as i64));
    }
    Ok(Number::from_f64(f).map_or(Value::Null, Value::Number))
}

/// 2^63: int64's range is [-2^63, 2^63).
const TWO_63: f64 = 9_223_372_036_854_775_808.0;

/// Formats a number as gopher-lua does (`LNumber.String`): integral values that fit int64 as
/// integers, others as Go's `strconv.FormatFloat(f, 'g', -1, 64)` (shortest round trip, with an
/// exponent below 1e-4 and from 1e6: `1.2345675e+06`).
pub(crate) fn format_number(f: f64) -> String {
    // gopher-lua's isInteger: the value converts to int64 and back unchanged.
    if f.fract() == 0.0 && (-TWO_63..TWO_63).contains(&f) {
        return format!("{}", f as i64);
    }
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e6).contains(&abs) {
        // Rust prints `1e-5`, Go `1e-05`: a signed exponent of at least two digits.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    format!("{f}")
}

/// The JSON type name Go's decoder reports in "cannot unmarshal X into ...".
pub(crate) fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_gopher_lua() {
        let cases = [
            (2.5, "2.5"),
            (1.0, "1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (2f64.powi(53), "9007199254740992"),
            (1e16, "10000000000000000"),
            (-0.0, "0"),
            (1e-5, "1e-05"),
            (1e21 + 0.5, "1e+21"),
            (1.5e300, "1.5e+300"),
            (-3.0, "-3"),
            (2f64.powi(63), "9.223372036854776e+18"),
            (-(2f64.powi(63)), "-9223372036854775808"),
            (9.21e18, "9210000000000000000"),
            (1234567.5, "1.2345675e+06"),
            (999999.5, "999999.5"),
            (1e20 + 0.5, "1e+20"),
            (0.0001, "0.0001"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
        ];
        for (input, want) in cases {
            assert_eq!(format_number(input), want, "{input}");
        }
    }
}
