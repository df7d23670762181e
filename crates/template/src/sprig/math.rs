//! sprig math: int64 arithmetic through `cast.ToInt64`, float64 arithmetic (sprig uses
//! shopspring/decimal for `addf`..`divf`; sluice rounds to 15 significant digits to match it on
//! ordinary inputs), rounding and random integers.

use rand::Rng;

use super::{to_float64, to_int64};
use crate::funcs::{arg_int, def, FuncDef, FuncResult};
use crate::value::Value;

fn int(v: i64) -> FuncResult {
    Ok(Value::Int(v))
}

fn float(v: f64) -> FuncResult {
    Ok(Value::Float(v))
}

pub static FUNCS: &[FuncDef] = &[
    def!("add1", [Any], |a| int(to_int64(&a[0]).wrapping_add(1))),
    def!("add", [], ...Any, |a| int(a.iter().map(to_int64).fold(0i64, i64::wrapping_add))),
    def!("sub", [Any, Any], |a| int(
        to_int64(&a[0]).wrapping_sub(to_int64(&a[1]))
    )),
    def!("mul", [Any], ...Any, |a| int(a.iter().map(to_int64).fold(1i64, i64::wrapping_mul))),
    def!("div", [Any, Any], |a| match to_int64(&a[1]) {
        0 => Err("runtime error: integer divide by zero".into()),
        d => int(to_int64(&a[0]).wrapping_div(d)),
    }),
    def!("mod", [Any, Any], |a| match to_int64(&a[1]) {
        0 => Err("runtime error: integer divide by zero".into()),
        d => int(to_int64(&a[0]).wrapping_rem(d)),
    }),
    def!("max", [Any], ...Any, |a| int(a.iter().map(to_int64).max().unwrap_or(0))),
    def!("biggest", [Any], ...Any, |a| int(a.iter().map(to_int64).max().unwrap_or(0))),
    def!("min", [Any], ...Any, |a| int(a.iter().map(to_int64).min().unwrap_or(0))),
    def!("add1f", [Any], |a| float(decimal(to_float64(&a[0]) + 1.0))),
    def!("addf", [], ...Any, |a| float(decimal(a.iter().map(to_float64).sum()))),
    def!("subf", [Any], ...Any, |a| float(decimal(a[1..].iter().map(to_float64).fold(to_float64(&a[0]), |x, y| x - y)))),
    def!("mulf", [Any], ...Any, |a| float(decimal(a[1..].iter().map(to_float64).fold(to_float64(&a[0]), |x, y| x * y)))),
    def!("divf", [Any], ...Any, |a| {
        let mut acc = to_float64(&a[0]);
        for d in &a[1..] {
            let d = to_float64(d);
            if d == 0.0 {
                return Err("decimal division by 0".into());
            }
            acc /= d;
        }
        // shopspring/decimal divides to 16 decimal places.
        float(format!("{acc:.16}").parse().unwrap_or(acc))
    }),
    def!("maxf", [Any], ...Any, |a| float(a.iter().map(to_float64).fold(f64::NEG_INFINITY, f64::max))),
    def!("minf", [Any], ...Any, |a| float(a.iter().map(to_float64).fold(f64::INFINITY, f64::min))),
    def!("ceil", [Any], |a| float(to_float64(&a[0]).ceil())),
    def!("floor", [Any], |a| float(to_float64(&a[0]).floor())),
    def!("round", [Any, Int], ...Float, round),
    def!("randInt", [Int, Int], |a| {
        let (lo, hi) = (arg_int(&a, 0), arg_int(&a, 1));
        if hi <= lo {
            return Err("invalid argument to Intn".into());
        }
        Ok(Value::GoInt(rand::thread_rng().gen_range(lo..hi)))
    }),
];

/// Rounds to 15 significant digits, which is what decimal arithmetic gives for the usual
/// short decimal inputs (0.1 + 0.2 is 0.3, not 0.30000000000000004).
fn decimal(f: f64) -> f64 {
    if !f.is_finite() || f == 0.0 {
        return f;
    }
    format!("{f:.14e}").parse().unwrap_or(f)
}

/// sprig `round(a, p, roundOn=.5)`.
fn round(a: Vec<Value>) -> FuncResult {
    let val = to_float64(&a[0]);
    let p = arg_int(&a, 1);
    let round_on = match a.get(2) {
        Some(Value::Float(f)) => *f,
        _ => 0.5,
    };
    let pow = 10f64.powi(p as i32);
    let digit = pow * val;
    let frac = digit.fract();
    let rounded = if frac >= round_on {
        digit.ceil()
    } else {
        digit.floor()
    };
    float(rounded / pow)
}
