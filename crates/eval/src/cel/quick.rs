//! CEL rules of two common shapes answered on the object's tape, without converting it into
//! CEL values or running the interpreter:
//!
//! - `resource.a.b == literal` (either side), [`Quick::Field`];
//! - `resource.a.b.exists(x, x.c == literal)`, [`Quick::Exists`].
//!
//! A quick answer is the interpreter's answer or nothing: where the interpreter's rules are not
//! plain (a number that is not an integer, a range that is not a list), [`Quick::answer`] says
//! `None` and the interpreter decides. `cel::tests` checks both shapes against the interpreter.

use cel::common::ast::{operators, ComprehensionExpr, Expr, LiteralValue};
use cel::IdedExpr;

use crate::tape::{Kind, NodeRef};

/// A rule answered without the interpreter.
#[derive(Debug, PartialEq)]
pub(super) enum Quick {
    /// `resource.a.b.c == literal`: true exactly when every step of the path is a map holding
    /// the next key and the value there equals the literal. A missing key or a step into a
    /// non-map is an error (the rule does not match); a value of another type is not equal.
    Field(Vec<String>, Literal),
    /// `resource.a.b.exists(x, x.c == literal)`: the macro's fold yields true when any item
    /// compares true, whatever errors other items raise (`error || true` is true); otherwise an
    /// error or false, and the rule does not match either way.
    Exists {
        range: Vec<String>,
        item: Vec<String>,
        literal: Literal,
    },
}

#[derive(Debug, PartialEq)]
pub(super) enum Literal {
    Str(String),
    Bool(bool),
    Int(i64),
}

impl Quick {
    /// The rule's shape, if it has one of the quick shapes.
    pub(super) fn of(e: &IdedExpr) -> Option<Quick> {
        if let Expr::Comprehension(c) = &e.expr {
            return exists(c);
        }
        let (path, literal) = comparison(e, "resource")?;
        (!path.is_empty()).then_some(Quick::Field(path, literal))
    }

    /// The rule's truth for `object`; `None` when the interpreter must decide.
    pub(super) fn answer(&self, object: NodeRef<'_>) -> Option<bool> {
        match self {
            Quick::Field(path, literal) => match walk(object, path) {
                Some(node) => literal.equals(node),
                None => Some(false),
            },
            Quick::Exists {
                range,
                item,
                literal,
            } => {
                let Some(list) = walk(object, range) else {
                    return Some(false);
                };
                if list.kind() != Kind::Array {
                    return None;
                }
                for entry in list.items() {
                    if let Some(node) = walk(entry, item) {
                        if literal.equals(node)? {
                            return Some(true);
                        }
                    }
                }
                Some(false)
            }
        }
    }
}

impl Literal {
    /// Whether `node == literal` is true; `None` when CEL's numeric equality must decide (a
    /// number that is not an integer, compared with an integer).
    fn equals(&self, node: NodeRef<'_>) -> Option<bool> {
        Some(match (self, node.kind()) {
            (Literal::Str(want), Kind::String) => node.as_str().is_some_and(|s| s == *want),
            (Literal::Bool(want), Kind::True) => *want,
            (Literal::Bool(want), Kind::False) => !*want,
            (Literal::Int(want), Kind::Number) => node.as_i64()? == *want,
            _ => false,
        })
    }
}

/// `get` answers `None` for a key missing and for a step into anything but a map: both are
/// errors to the interpreter.
fn walk<'a>(node: NodeRef<'a>, path: &[String]) -> Option<NodeRef<'a>> {
    path.iter().try_fold(node, |node, key| node.get(key))
}

/// `root.a.b == literal` or `literal == root.a.b`, with the path below the identifier `root`.
fn comparison(e: &IdedExpr, root: &str) -> Option<(Vec<String>, Literal)> {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    if call.func_name != operators::EQUALS || call.target.is_some() {
        return None;
    }
    let [a, b] = call.args.as_slice() else {
        return None;
    };
    let (field, literal) = match (&a.expr, &b.expr) {
        (_, Expr::Literal(l)) => (a, l),
        (Expr::Literal(l), _) => (b, l),
        _ => return None,
    };
    let literal = match literal {
        LiteralValue::String(s) => Literal::Str(s.inner().to_string()),
        LiteralValue::Boolean(b) => Literal::Bool(*b.inner()),
        LiteralValue::Int(i) => Literal::Int(*i.inner()),
        _ => return None,
    };
    Some((select_path(field, root, true)?, literal))
}

/// `root.a.b.c` as `["a", "b", "c"]`; `None` when the chain does not start at the identifier
/// `root`, or when `reads_only` and it tests a field (`has(root.a)` is a select with `test` set:
/// not a field read).
pub(super) fn select_path(e: &IdedExpr, root: &str, reads_only: bool) -> Option<Vec<String>> {
    let mut path = Vec::new();
    let mut node = e;
    loop {
        match &node.expr {
            Expr::Select(select) if !(reads_only && select.test) => {
                path.push(select.field.clone());
                node = &select.operand;
            }
            Expr::Ident(name) if name == root => {
                path.reverse();
                return Some(path);
            }
            _ => return None,
        }
    }
}

/// The expansion of `resource.a.b.exists(x, x.c == literal)` by the `cel` crate's parser
/// (`exists_macro_expander`): accumulator `@result` from `false`, loop while
/// `@not_strictly_false(!@result)`, step `@result || predicate`, result `@result`.
fn exists(c: &ComprehensionExpr) -> Option<Quick> {
    let accu = c.accu_var.as_str();
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(name) if name == accu);
    let call = |e: &IdedExpr, name: &str| match &e.expr {
        Expr::Call(call) if call.func_name == name && call.target.is_none() => {
            Some(call.args.clone())
        }
        _ => None,
    };
    if c.iter_var2.is_some()
        || c.iter_var == accu
        || !matches!(&c.accu_init.expr, Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner())
        || !is_accu(&c.result)
    {
        return None;
    }
    let [not] = call(&c.loop_cond, operators::NOT_STRICTLY_FALSE)?
        .try_into()
        .ok()?;
    let [accumulated] = call(&not, operators::LOGICAL_NOT)?.try_into().ok()?;
    let [first, predicate] = call(&c.loop_step, operators::LOGICAL_OR)?.try_into().ok()?;
    if !is_accu(&accumulated) || !is_accu(&first) {
        return None;
    }
    let range = select_path(&c.iter_range, "resource", true).filter(|p| !p.is_empty())?;
    let (item, literal) = comparison(&predicate, &c.iter_var)?;
    Some(Quick::Exists {
        range,
        item,
        literal,
    })
}
