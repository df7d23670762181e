//! Field errors as kube-apiserver reports them (apimachinery `field.Error`): a type, a field path,
//! the bad value and a detail, rendered the way the real server renders them in `422 Invalid`
//! messages and causes. It does not decide what is invalid; validators build these.

use std::fmt;

use serde_json::Value;

/// Why a field is invalid; each maps to a Status cause reason and a fixed phrase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    NotFound,
    Duplicate,
    Invalid,
    TypeInvalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
}

impl ErrorType {
    /// The Status cause `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
        }
    }

    fn phrase(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::NotFound => "Not found",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
        }
    }

    /// Types whose message never shows the bad value.
    fn omits_value(self) -> bool {
        matches!(
            self,
            ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong
        )
    }
}

/// One invalid field.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub kind: ErrorType,
    /// The dotted path (`spec.rules[0].name`, `data[key]`), or `<nil>` for the object root.
    pub field: String,
    pub value: Value,
    /// The bad value as Go prints it where JSON cannot say it (a uint64 printed with `%#v` is
    /// `0x0`); shown instead of `value`.
    pub shown: Option<String>,
    pub detail: String,
}

impl FieldError {
    pub fn new(
        kind: ErrorType,
        field: impl Into<String>,
        value: Value,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError {
            kind,
            field: field.into(),
            value,
            shown: None,
            detail: detail.into(),
        }
    }

    /// An invalid value shown as Go shows it (`Invalid value: 0x0: ...`).
    pub fn invalid_shown(
        field: impl Into<String>,
        shown: impl Into<String>,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError {
            shown: Some(shown.into()),
            ..FieldError::new(ErrorType::Invalid, field, Value::Null, detail)
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError::new(ErrorType::Required, field, Value::Null, detail)
    }

    pub fn invalid(
        field: impl Into<String>,
        value: Value,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError::new(ErrorType::Invalid, field, value, detail)
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError::new(ErrorType::Forbidden, field, Value::Null, detail)
    }

    /// `Unsupported value: "x": supported values: "a", "b"`.
    pub fn not_supported(
        field: impl Into<String>,
        value: Value,
        supported: &[String],
    ) -> FieldError {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError::new(ErrorType::NotSupported, field, value, detail)
    }

    /// `Too long: may not be more than N bytes`.
    pub fn too_long(field: impl Into<String>, max: i64) -> FieldError {
        let detail = match max {
            1 => "may not be more than 1 byte".to_string(),
            m if m >= 0 => format!("may not be more than {m} bytes"),
            _ => "value is too long".to_string(),
        };
        FieldError::new(ErrorType::TooLong, field, Value::Null, detail)
    }

    /// `Too many: 4: must have at most 3 items`.
    pub fn too_many(field: impl Into<String>, actual: i64, max: i64) -> FieldError {
        let detail = match max {
            1 => "must have at most 1 item".to_string(),
            m if m >= 0 => format!("must have at most {m} items"),
            _ => "has too many items".to_string(),
        };
        FieldError::new(ErrorType::TooMany, field, Value::from(actual), detail)
    }

    /// The message without the field: what a Status cause carries.
    pub fn body(&self) -> String {
        let mut s = if self.kind.omits_value() {
            self.kind.phrase().to_string()
        } else {
            let value = match &self.shown {
                Some(shown) => shown.clone(),
                None => render_value(&self.value),
            };
            format!("{}: {value}", self.kind.phrase())
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// The Status cause for this error.
    pub fn cause(&self) -> Value {
        serde_json::json!({"reason": self.kind.reason(), "message": self.body(), "field": self.field})
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The errors joined as apimachinery's aggregate does: one message alone, several in brackets,
/// repeated messages once.
pub fn aggregate(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// A bad value as Go prints it: strings quoted, numbers and booleans bare, the rest as JSON.
fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Go's `%q` for the strings that appear in API messages (JSON escaping matches it for these).
pub fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_render_like_apimachinery() {
        let cases = [
            (FieldError::required("spec.a", ""), "spec.a: Required value"),
            (
                FieldError::new(
                    ErrorType::TypeInvalid,
                    "spec.b",
                    json!("string"),
                    "spec.b in body must be of type boolean: \"string\"",
                ),
                "spec.b: Invalid value: \"string\": spec.b in body must be of type boolean: \"string\"",
            ),
            (
                FieldError::not_supported("spec.c", json!("x"), &["a".into(), "b".into()]),
                "spec.c: Unsupported value: \"x\": supported values: \"a\", \"b\"",
            ),
            (FieldError::too_long("spec.d", 5), "spec.d: Too long: may not be more than 5 bytes"),
            (FieldError::too_many("spec.e", 4, 3), "spec.e: Too many: 4: must have at most 3 items"),
            (
                FieldError::new(ErrorType::Duplicate, "spec.f[1]", json!({"name": "a"}), ""),
                "spec.f[1]: Duplicate value: {\"name\":\"a\"}",
            ),
            (FieldError::invalid("spec.g", json!(7), "bad"), "spec.g: Invalid value: 7: bad"),
        ];
        for (error, want) in cases {
            assert_eq!(error.to_string(), want);
        }
    }

    #[test]
    fn aggregate_brackets_several_and_drops_repeats() {
        let a = FieldError::required("spec.a", "");
        let b = FieldError::required("spec.b", "");
        assert_eq!(
            aggregate(std::slice::from_ref(&a)),
            "spec.a: Required value"
        );
        assert_eq!(
            aggregate(&[a.clone(), b, a]),
            "[spec.a: Required value, spec.b: Required value]"
        );
    }
}
