//! Deciding compiled `if` conditions (`crate::cond`) over borrowed data: a bool without building
//! a value, a result frame or an error. "Unknown" (`None`) sends the caller to the general
//! pipeline, which reads nothing this did not read (lookups only) and so gives the same result
//! or error.

use crate::doc::Doc as Json;

use super::{chain, lookup, Exec};
use crate::ast::Chain;
use crate::cond::{Cond, Term};
use crate::funcs::Fast;
use crate::val::{child, element, Scalar, Val};
use crate::value::Value;

impl<'a> Exec<'a> {
    /// The truth of a compiled condition with `dot` as dot; `None` when it needs the general
    /// rules (a missing key, a non-scalar comparison, any error, any other function).
    pub(super) fn test(&mut self, dot: &Val<'a>, cond: &'a Cond) -> Option<bool> {
        match cond {
            Cond::Compare(which, x, y) => {
                let a = self.term(dot, x)?;
                let b = self.term(dot, y)?;
                decide(*which, a, b)
            }
            Cond::Compares {
                any,
                names,
                tests,
                ints,
            } => {
                let a = self.term_field(dot, names)?;
                // `or (eq .port 443) (eq .port 8443)` over an integer: what the tests below
                // decide one by one.
                if let (Some(ints), Scalar::Int(x)) = (ints, a) {
                    return Some(if *any {
                        ints.contains(&x)
                    } else {
                        ints.iter().all(|&y| y == x)
                    });
                }
                for (which, value) in tests {
                    let truth = match (which, a, value) {
                        // `eq .port 443`, the common case, without the general decision.
                        (Fast::Eq, Scalar::Int(x), Value::GoInt(y) | Value::Int(y)) => x == *y,
                        _ => decide(*which, a, Scalar::of_value(value))?,
                    };
                    if truth == *any {
                        return Some(*any);
                    }
                }
                Some(!*any)
            }
            // `or` yields its first true argument (else its last), `and` its first false one:
            // as a condition, whether any (all) of them is true, evaluated in order.
            Cond::Any(all) => {
                for c in all {
                    if self.test(dot, c)? {
                        return Some(true);
                    }
                }
                Some(false)
            }
            Cond::All(all) => {
                for c in all {
                    if !self.test(dot, c)? {
                        return Some(false);
                    }
                }
                Some(true)
            }
            Cond::Not(c) => Some(!self.test(dot, c)?),
            Cond::Field(names) => match dot {
                Val::J(node, shape) => Some(chain(&mut self.memo, node, *shape, names)?.truth()),
                _ => None,
            },
            Cond::Known(truth) => Some(*truth),
            Cond::General => None,
        }
    }

    /// A field chain from dot ending in a scalar.
    #[inline]
    fn term_field(&mut self, dot: &Val<'a>, names: &'a Chain) -> Option<Scalar<'a>> {
        let Val::J(node, shape) = dot else {
            return None;
        };
        if let ([name], Json::Object(entries)) = (&names[..], node) {
            // `.port`: one lookup, without the chain's frame.
            return scalar_of(child(*shape, name, lookup(entries, name)?));
        }
        scalar_of(chain(&mut self.memo, node, *shape, names)?)
    }

    /// A comparison operand as a borrowed scalar; `None` for anything else.
    #[inline]
    fn term(&mut self, dot: &Val<'a>, term: &'a Term) -> Option<Scalar<'a>> {
        let found = match term {
            Term::Const(v) => return Some(Scalar::of_value(v)),
            Term::Field(names) => match dot {
                Val::J(node, shape) => chain(&mut self.memo, node, *shape, names)?,
                _ => return None,
            },
            Term::Index(names, keys) => match dot {
                Val::J(node, shape) => {
                    let item = chain(&mut self.memo, node, *shape, names)?;
                    index(item, keys)?
                }
                _ => return None,
            },
            Term::General => return None,
        };
        scalar_of(found)
    }
}

/// `index item k1 k2 ...` over borrowed JSON with literal keys, as the builtin answers it: a
/// missing map key is nil; `None` for anything else (an index out of range is an error).
fn index<'a>(mut item: Val<'a>, keys: &'a [Value]) -> Option<Val<'a>> {
    for key in keys {
        item = index_step(&item, Scalar::of_value(key))?;
    }
    Some(item)
}

/// A borrowed value as a scalar of a comparison; `None` for a map, a list or a converted value.
#[inline]
pub(super) fn scalar_of(found: Val<'_>) -> Option<Scalar<'_>> {
    match found {
        Val::J(j, _) => match Scalar::of_json(j) {
            Scalar::Other => None,
            scalar => Some(scalar),
        },
        Val::Key(k) => Some(Scalar::Str(k)),
        Val::V(_) => None,
    }
}

/// One key of `index` over borrowed JSON: a map's entry (a missing key is nil) or a list's
/// element; `None` for anything else (an index out of range is an error).
#[inline]
pub(super) fn index_step<'a>(item: &Val<'a>, key: Scalar<'a>) -> Option<Val<'a>> {
    Some(match (item, key) {
        (Val::J(Json::Object(entries), shape), Scalar::Str(k)) => match lookup(entries, k) {
            Some(v) => child(*shape, k, v),
            None => Val::NIL,
        },
        (Val::J(Json::Array(items), shape), Scalar::Int(i)) => {
            element(*shape, usize::try_from(i).ok().and_then(|i| items.get(i))?)
        }
        _ => return None,
    })
}

/// Go's comparison builtins over two scalars; `None` where Go would fail (mixed kinds, `lt` of
/// bools or nil) or where the general comparison must decide.
#[inline]
fn decide(which: Fast, a: Scalar<'_>, b: Scalar<'_>) -> Option<bool> {
    let equal = match (a, b) {
        (Scalar::Nil, Scalar::Nil) => Some(true),
        (Scalar::Nil, _) | (_, Scalar::Nil) => Some(false),
        (Scalar::Other, _) | (_, Scalar::Other) => return None,
        (Scalar::Bool(x), Scalar::Bool(y)) => Some(x == y),
        (Scalar::Int(x), Scalar::Int(y)) => Some(x == y),
        (Scalar::Float(x), Scalar::Float(y)) => Some(x == y),
        (Scalar::Str(x), Scalar::Str(y)) => Some(x == y),
        // Mixed kinds: `eq`/`ne` fail ("incompatible types"), and so do the orderings.
        _ => None,
    };
    match which {
        Fast::Eq => equal,
        Fast::Ne => equal.map(|eq| !eq),
        _ => {
            let less = match (a, b) {
                (Scalar::Int(x), Scalar::Int(y)) => x < y,
                (Scalar::Float(x), Scalar::Float(y)) => {
                    x.partial_cmp(&y) == Some(std::cmp::Ordering::Less)
                }
                (Scalar::Str(x), Scalar::Str(y)) => x < y,
                // nil, bools and mixed kinds cannot be ordered: Go fails.
                _ => return None,
            };
            let equal = equal.unwrap_or(false);
            Some(match which {
                Fast::Lt => less,
                Fast::Le => less || equal,
                Fast::Gt => !(less || equal),
                _ => !less,
            })
        }
    }
}
