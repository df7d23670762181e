//! Methods callable on non-map values from templates: `*semver.Version` (`.Major`,
//! `.Compare`, ...) and `time.Time` (`.Unix`, `.Format`, ...), as Go exposes them.

use crate::value::Value;

/// Calls method or field `name` on `receiver` with already evaluated `args`.
pub fn call(receiver: &Value, name: &str, args: Vec<Value>) -> Result<Value, String> {
    match receiver {
        Value::Semver(v) => crate::sprig::semver::method(v, name, &args),
        Value::Time(t) => crate::sprig::dates::method(t, name, &args),
        other => Err(format!(
            "can't evaluate field {name} in type {}",
            other.go_type()
        )),
    }
}
