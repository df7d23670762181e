//! `evaluateCEL` rules: compiled once with the `cel` crate (standard library only, one variable
//! `resource`), evaluated in order, the first rule that yields `true` matches. As in libsveltos, a
//! rule that fails to compile, fails to evaluate or yields a non-bool simply does not match; the
//! compile failures are kept as diagnostics so that they can be shown to the user.
//!
//! Speed: turning an object into CEL values costs far more than evaluating a typical rule, so
//! only the parts of `resource` the rules select (`resource.metadata.labels...`) are converted;
//! rules that use `resource` in any other way get the whole object. A rule that only compares
//! one field of `resource` with a string or bool literal (`resource.metadata.labels.tier ==
//! 'web'`), or whether any item of a list has a field equal to a literal
//! (`resource.spec.ports.exists(p, p.port == 443)`), is answered on the object directly, without
//! the interpreter (`cel/quick.rs`).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

mod quick;

use cel::common::ast::{EntryExpr, Expr};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, IdedExpr, Program, Value as CelValue};

use sluice_domain::eventsource::CelRule;

use crate::tape::{Kind, NodeRef};
use quick::Quick;

/// The rules of one selector.
pub(crate) struct CelRules {
    rules: Vec<CompiledRule>,
    /// The field paths of `resource` the rules read (`resource.metadata.labels` is
    /// `["metadata", "labels"]`), or `None` when some rule needs the whole object.
    paths: Option<Vec<Vec<String>>>,
}

struct CompiledRule {
    program: Option<Program>,
    /// The same rule answered without the interpreter, when it has a quick shape.
    quick: Option<Quick>,
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
                let quick = program.as_ref().and_then(|p| Quick::of(p.expression()));
                CompiledRule { program, quick }
            })
            .collect::<Vec<_>>();
        let mut paths = Some(Vec::new());
        for program in compiled.iter().filter_map(|r| r.program.as_ref()) {
            if let Some(out) = paths.as_mut() {
                if !resource_paths(program.expression(), out) {
                    paths = None;
                }
            }
        }
        (
            CelRules {
                rules: compiled,
                paths,
            },
            diagnostics,
        )
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether any rule yields `true` for this object.
    pub(crate) fn any_true(&self, object: NodeRef<'_>) -> bool {
        if !self.rules.iter().all(|rule| rule.quick.is_some()) {
            return self.interpreted(object);
        }
        for quick in self.rules.iter().filter_map(|rule| rule.quick.as_ref()) {
            match quick.answer(object) {
                Some(true) => return true,
                Some(false) => {}
                None => return self.interpreted(object),
            }
        }
        false
    }

    /// [`CelRules::any_true`] by the interpreter alone.
    fn interpreted(&self, object: NodeRef<'_>) -> bool {
        let mut context = Context::with_env(env());
        let resource = match &self.paths {
            Some(paths) => {
                let refs: Vec<&[String]> = paths.iter().map(Vec::as_slice).collect();
                pruned(object, &refs)
            }
            None => to_cel(object),
        };
        context.add_variable_from_value("resource", resource);
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

/// The part of `v` that the `paths` below it reach, as CEL values: maps keep only the keys the
/// paths name (each converted along the rest of its paths), anything else is converted whole.
/// An empty path means the whole value.
fn pruned(v: NodeRef<'_>, paths: &[&[String]]) -> CelValue {
    if v.kind() != Kind::Object {
        return to_cel(v);
    }
    if paths.iter().any(|p| p.is_empty()) {
        return to_cel(v);
    }
    let mut out: HashMap<Key, CelValue> = HashMap::new();
    for (i, path) in paths.iter().enumerate() {
        let field = &path[0];
        if paths[..i].iter().any(|p| &p[0] == field) {
            continue;
        }
        let Some(child) = v.get(field) else {
            continue;
        };
        let rest: Vec<&[String]> = paths
            .iter()
            .filter(|p| &p[0] == field)
            .map(|p| &p[1..])
            .collect();
        out.insert(Key::String(Arc::new(field.clone())), pruned(child, &rest));
    }
    CelValue::Map(CelMap { map: Arc::new(out) })
}

/// Adds to `out` the field paths of `resource` that `e` selects; false when `e` uses the
/// variable `resource` other than by selecting fields of it.
fn resource_paths(e: &IdedExpr, out: &mut Vec<Vec<String>>) -> bool {
    match &e.expr {
        Expr::Select(select) => match select_path(e) {
            Some(path) => {
                if !out.contains(&path) {
                    out.push(path);
                }
                true
            }
            None => resource_paths(&select.operand, out),
        },
        Expr::Ident(name) => name != "resource",
        Expr::Unspecified | Expr::Literal(_) => true,
        Expr::Call(call) => {
            call.target
                .as_deref()
                .is_none_or(|t| resource_paths(t, out))
                && call.args.iter().all(|a| resource_paths(a, out))
        }
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .all(|part| resource_paths(part, out)),
        Expr::List(list) => list.elements.iter().all(|i| resource_paths(i, out)),
        Expr::Map(map) => map
            .entries
            .iter()
            .all(|entry| entry_paths(&entry.expr, out)),
        Expr::Struct(st) => st.entries.iter().all(|entry| entry_paths(&entry.expr, out)),
    }
}

fn entry_paths(entry: &EntryExpr, out: &mut Vec<Vec<String>>) -> bool {
    match entry {
        EntryExpr::StructField(field) => resource_paths(&field.value, out),
        EntryExpr::MapEntry(entry) => {
            resource_paths(&entry.key, out) && resource_paths(&entry.value, out)
        }
    }
}

/// `resource.a.b.c` as `["a", "b", "c"]` (`has(resource.a.b)` too); `None` when the chain does
/// not start at `resource`.
fn select_path(e: &IdedExpr) -> Option<Vec<String>> {
    quick::select_path(e, "resource", false)
}

/// A JSON object as CEL sees it: integral numbers within int64 are `int`, other numbers `double`
/// (apimachinery's decoding), objects are maps with string keys.
pub(crate) fn to_cel(v: NodeRef<'_>) -> CelValue {
    match v.kind() {
        Kind::Null => CelValue::Null,
        Kind::True => CelValue::Bool(true),
        Kind::False => CelValue::Bool(false),
        Kind::Number => match v.as_i64() {
            Some(i) => CelValue::Int(i),
            None => CelValue::Float(v.as_f64().unwrap_or(f64::NAN)),
        },
        Kind::String => CelValue::String(Arc::new(v.as_str().unwrap_or_default().into_owned())),
        Kind::Array => CelValue::List(Arc::new(v.items().map(to_cel).collect())),
        Kind::Object => {
            // A repeated key keeps its last value, as in a `serde_json` map.
            let map: HashMap<Key, CelValue> = v
                .entries()
                .map(|(k, v)| {
                    let key = k.as_str().unwrap_or_default().into_owned();
                    (Key::String(Arc::new(key)), to_cel(v))
                })
                .collect();
            CelValue::Map(CelMap { map: Arc::new(map) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(texts: &[&str]) -> CelRules {
        let rules: Vec<CelRule> = texts
            .iter()
            .map(|t| CelRule {
                name: "r".into(),
                rule: (*t).to_string(),
            })
            .collect();
        CelRules::compile(&rules, "evaluateCEL").0
    }

    /// Each rule alone gives the interpreter's answer on each object (JSON text).
    fn answers_as_the_interpreter(texts: &[&str], objects: &[&str]) {
        for text in texts {
            let compiled = rules(&[text]);
            let quick = compiled.rules[0].quick.is_some();
            for json in objects {
                let tape = crate::tape::Tape::parse(json.as_bytes().to_vec()).expect("valid");
                assert_eq!(
                    compiled.any_true(tape.root()),
                    compiled.interpreted(tape.root()),
                    "{text} on {json} (answered without the interpreter: {quick})"
                );
            }
        }
    }

    #[test]
    fn rules_see_the_selected_parts_of_resource_as_if_it_were_whole() {
        let object = json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"ports": [{"port": 443}], "n": 2}, "status": {"ok": true}});
        let object = crate::tape::Tape::from_value(&object).expect("a document");
        for (rule, want) in [
            ("resource.metadata.labels.x == '1'", true),
            ("resource.metadata.labels.y == '1'", false),
            ("has(resource.spec.n) && !has(resource.spec.m)", true),
            ("resource.spec.ports.exists(p, p.port == 443)", true),
            (
                "resource.spec.ports[0].port == 443 && resource.spec.n == 2",
                true,
            ),
            ("size(resource) == 3", true),
            ("resource['status'].ok", true),
            ("resource.metadata.name.size() == 1", true),
            ("resource.nope.x == 1", false),
        ] {
            let compiled = rules(&[rule]);
            assert_eq!(compiled.any_true(object.root()), want, "{rule}");
        }
        assert!(rules(&["size(resource) == 3"]).paths.is_none());
        assert!(rules(&["resource.metadata.labels.x == '1'"]).rules[0]
            .quick
            .is_some());
        assert_eq!(
            rules(&["resource.metadata.labels.x == '1' || resource.spec.n == 1"]).paths,
            Some(vec![
                vec!["metadata".to_string(), "labels".into(), "x".into()],
                vec!["spec".into(), "n".into()]
            ])
        );
    }

    /// The rules answered without the interpreter give the interpreter's answer on objects
    /// where the field is missing, null, of another type, nested under a non-map, escaped or
    /// repeated.
    #[test]
    fn field_comparisons_answer_as_the_interpreter_does() {
        let texts = [
            r#"resource.metadata.labels.tier == 'web'"#,
            r#"'web' == resource.metadata.labels.tier"#,
            r#"resource.metadata.labels.tier == """#,
            r#"resource.metadata.labels["tier"] == 'web'"#,
            r#"resource.status.ready == true"#,
            r#"false == resource.status.ready"#,
            r#"resource.metadata.name == 'a\nb'"#,
            r#"resource.spec == 'x'"#,
            r#"resource.metadata.labels.tier == 1"#,
        ];
        let objects = [
            r#"{"metadata": {"labels": {"tier": "web"}}, "status": {"ready": true}}"#,
            r#"{"metadata": {"labels": {"tier": "db"}}, "status": {"ready": false}}"#,
            r#"{"metadata": {"labels": {"tier": ""}}, "status": {"ready": "true"}}"#,
            r#"{"metadata": {"labels": {"tier": 1}}, "status": {"ready": 1}}"#,
            r#"{"metadata": {"labels": {"tier": null}}, "status": null}"#,
            r#"{"metadata": {"labels": null}}"#,
            r#"{"metadata": {"labels": "tier"}, "spec": "x"}"#,
            r#"{"metadata": {"labels": ["tier"]}, "spec": {"x": 1}}"#,
            r#"{"metadata": {"name": "a\nb", "labels": {"tier": "w\u0065b"}}}"#,
            r#"{"metadata": {"labels": {"tier": "db", "tier": "web"}}}"#,
            r#"{"metadata": {}}"#,
            r#"{}"#,
            r#"[]"#,
            r#""web""#,
        ];
        answers_as_the_interpreter(&texts, &objects);
        assert!(rules(&[texts[0]]).rules[0].quick.is_some());
        assert!(rules(&[texts[4]]).rules[0].quick.is_some());
        assert!(rules(&["has(resource.metadata) == true"]).rules[0]
            .quick
            .is_none());
    }

    /// `exists` over a list with a field compared to a literal gives the interpreter's answer
    /// when the list is missing, not a list, empty, or holds items without the field, of other
    /// types, non-maps, floats equal to the integer, or a match after an erroring item.
    #[test]
    fn exists_comparisons_answer_as_the_interpreter_does() {
        let texts = [
            "resource.spec.ports.exists(p, p.port == 443)",
            "resource.spec.ports.exists(p, 443 == p.port)",
            "resource.spec.ports.exists(p, p.name == 'https')",
            "resource.spec.ports.exists(p, p.tls.on == true)",
            "resource.spec.ports.exists(resource, resource.port == 443)",
            "resource.spec.ports.exists(p, p == 443)",
            "resource.spec.ports.exists(p, p.port == 443 || p.port == 8443)",
            "resource.spec.ports.all(p, p.port == 443)",
            "resource.spec.ports.exists_one(p, p.port == 443)",
            "resource.spec.ports.exists(p, p.port == 443u)",
        ];
        let objects = [
            r#"{"spec": {"ports": [{"port": 80}, {"port": 443, "name": "https"}]}}"#,
            r#"{"spec": {"ports": [{"port": 80}, {"port": 8443}]}}"#,
            r#"{"spec": {"ports": [{"name": "x"}, {"port": 443}]}}"#,
            r#"{"spec": {"ports": [5, {"port": 443}]}}"#,
            r#"{"spec": {"ports": [{"port": 443.0}]}}"#,
            r#"{"spec": {"ports": [{"port": 443.5}, {"port": "443"}]}}"#,
            r#"{"spec": {"ports": [{"port": 1e3}, {"port": 443}]}}"#,
            r#"{"spec": {"ports": [{"port": 18446744073709551615}]}}"#,
            r#"{"spec": {"ports": [443, 80]}}"#,
            r#"{"spec": {"ports": [{"port": 443, "port": 80}]}}"#,
            r#"{"spec": {"ports": [{"tls": {"on": true}}, {"tls": null}]}}"#,
            r#"{"spec": {"ports": [{"tls": "on"}, {"tls": {"on": "true"}}]}}"#,
            r#"{"spec": {"ports": {"port": 443}}}"#,
            r#"{"spec": {"ports": []}}"#,
            r#"{"spec": {"ports": null}}"#,
            r#"{"spec": {"ports": "443"}}"#,
            r#"{"spec": []}"#,
            r#"{}"#,
        ];
        answers_as_the_interpreter(&texts, &objects);
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(rules(&[text]).rules[0].quick.is_some(), i < 6, "{text}");
        }
        // A quick rule before one that needs the interpreter still answers first.
        let mixed = rules(&[texts[0], "size(resource.spec.ports) == 2"]);
        let tape = crate::tape::Tape::parse(objects[1].as_bytes().to_vec()).expect("valid");
        assert!(mixed.any_true(tape.root()));
    }
}
