//! `evaluateCEL` rules: compiled once with the `cel` crate (standard library only, one variable
//! `resource`), evaluated in order, the first rule that yields `true` matches. As in libsveltos, a
//! rule that fails to compile, fails to evaluate or yields a non-bool simply does not match; the
//! compile failures are kept as diagnostics so that they can be shown to the user.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, Program, Value as CelValue};
use serde_json::Value;
use sluice_domain::eventsource::CelRule;

/// The rules of one selector.
pub(crate) struct CelRules {
    rules: Vec<CompiledRule>,
}

struct CompiledRule {
    program: Option<Program>,
}

/// A rule that can never match because it does not compile, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CelDiagnostic {
    /// Where the rule is, e.g. `spec.resourceSelectors[0].evaluateCEL[1]`.
    pub field: String,
    /// The rule's `name`.
    pub name: String,
    pub message: String,
}

/// The standard environment, shared: building it registers every standard function.
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

impl CelRules {
    /// Compiles every rule; `field` is the path of the `evaluateCEL` list.
    pub(crate) fn compile(rules: &[CelRule], field: &str) -> (CelRules, Vec<CelDiagnostic>) {
        let env = env();
        let mut diagnostics = Vec::new();
        let compiled = rules
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let outcome = catch_unwind(AssertUnwindSafe(|| env.compile(&rule.rule)));
                let program = match outcome {
                    Ok(Ok(program)) => Some(program),
                    Ok(Err(e)) => {
                        diagnostics.push(CelDiagnostic {
                            field: format!("{field}[{i}]"),
                            name: rule.name.clone(),
                            message: e.to_string(),
                        });
                        None
                    }
                    Err(_) => {
                        diagnostics.push(CelDiagnostic {
                            field: format!("{field}[{i}]"),
                            name: rule.name.clone(),
                            message: "the CEL parser failed on this rule".into(),
                        });
                        None
                    }
                };
                CompiledRule { program }
            })
            .collect();
        (CelRules { rules: compiled }, diagnostics)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any rule yields `true` for this object.
    pub(crate) fn any_true(&self, object: &Value) -> bool {
        let mut context = Context::with_env(env());
        context.add_variable_from_value("resource", to_cel(object));
        self.rules.iter().any(|rule| {
            let Some(program) = &rule.program else {
                return false;
            };
            // A panic inside the CEL interpreter fails this rule, like any other rule error.
            matches!(
                catch_unwind(AssertUnwindSafe(|| program.execute(&context))),
                Ok(Ok(CelValue::Bool(true)))
            )
        })
    }
}

/// A JSON object as CEL sees it: integral numbers within int64 are `int`, other numbers `double`
/// (apimachinery's decoding), objects are maps with string keys.
pub(crate) fn to_cel(v: &Value) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => CelValue::Int(i),
            None => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<Key, CelValue> = m
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            CelValue::Map(CelMap { map: Arc::new(map) })
        }
    }
}
