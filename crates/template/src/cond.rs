//! `if` conditions compiled at parse time into a small tree the evaluator decides over borrowed
//! data (`Exec::test`), without walking pipelines, commands and operands per render:
//! `{{ if or (eq .port 443) (eq .port 8443) }}` becomes `Any[Compare(Eq, .port, 443), ...]`.
//! Only the forms whose Go result can be read without side effects are compiled; every other
//! part is [`Cond::General`], which makes the evaluator fall back to the general pipeline.
//! This module decides nothing at run time.

use crate::ast::{Arg, Chain, Operand, Pipeline};
use crate::funcs::{Fast, Imp};
use crate::value::Value;

/// A compiled condition. Deciding one yields the truth Go's pipeline would have, or "unknown"
/// (a missing key, a value that is not a scalar, a comparison Go would reject): the caller then
/// runs the general pipeline, which gives the same result or error.
#[derive(Debug)]
pub enum Cond {
    /// `or a b ...`: true at the first true operand, in order.
    Any(Vec<Cond>),
    /// `and a b ...`: false at the first false operand, in order.
    All(Vec<Cond>),
    Not(Box<Cond>),
    /// `eq ne lt le gt ge` of exactly two operands.
    Compare(Fast, Term, Term),
    /// `or`/`and` (`any`) of comparisons of one field chain with literals, in order:
    /// `or (eq .port 443) (eq .port 8443)`. The chain is read once; reading it again, as Go
    /// does for every comparison, gives the same value.
    Compares {
        any: bool,
        names: Chain,
        tests: Vec<(Fast, Value)>,
        /// The literals when every test is `eq` with an integer: an integer field is then
        /// decided by membership (`or`) or by all of them (`and`), without a test per literal.
        ints: Option<Box<[i64]>>,
    },
    /// A field chain from dot, as a truth value.
    Field(Chain),
    /// A literal, whose truth is known at parse time.
    Known(bool),
    /// Anything else: always decided by the general pipeline.
    General,
}

/// An operand of a compiled comparison.
#[derive(Debug)]
pub enum Term {
    /// A bool, string or number literal (a number as Go's `idealConstant` passes it).
    Const(Value),
    /// A field chain from dot.
    Field(Chain),
    /// `(index .a.b "k" 0)` with literal keys.
    Index(Chain, Vec<Value>),
    /// Anything else: the comparison is left to the general pipeline.
    General,
}

/// Compiles the pipeline of an `if`.
pub fn compile(pipe: &Pipeline) -> Cond {
    match (pipe.decl.is_empty(), pipe.cmds.as_slice()) {
        (true, [cmd]) => command(&cmd.args),
        _ => Cond::General,
    }
}

fn command(args: &[Operand]) -> Cond {
    let Some((first, rest)) = args.split_first() else {
        return Cond::General;
    };
    let Arg::Func(def) = &first.kind else {
        return match rest {
            [] => operand(first),
            _ => Cond::General,
        };
    };
    match (def.imp, def.fast, rest) {
        (Imp::Or | Imp::And, _, [_, ..]) => {
            let any = matches!(def.imp, Imp::Or);
            let all: Vec<Cond> = rest.iter().map(operand).collect();
            match same_field_compares(any, &all) {
                Some(compares) => compares,
                None if any => Cond::Any(all),
                None => Cond::All(all),
            }
        }
        (_, Some(Fast::Not), [op]) => Cond::Not(Box::new(operand(op))),
        (
            _,
            Some(which @ (Fast::Eq | Fast::Ne | Fast::Lt | Fast::Le | Fast::Gt | Fast::Ge)),
            [x, y],
        ) => Cond::Compare(which, term(x), term(y)),
        _ => Cond::General,
    }
}

/// [`Cond::Compares`] when every condition compares one field chain (left) with a literal
/// (right).
fn same_field_compares(any: bool, all: &[Cond]) -> Option<Cond> {
    let mut field: Option<&Chain> = None;
    let mut tests = Vec::with_capacity(all.len());
    for c in all {
        let Cond::Compare(which, Term::Field(names), Term::Const(value)) = c else {
            return None;
        };
        match field {
            Some(seen) if seen[..] != names[..] => return None,
            _ => field = Some(names),
        }
        tests.push((*which, value.clone()));
    }
    let ints = tests
        .iter()
        .map(|(which, value)| match (which, value) {
            (Fast::Eq, Value::GoInt(i) | Value::Int(i)) => Some(*i),
            _ => None,
        })
        .collect();
    field.map(|names| Cond::Compares {
        any,
        names: names.clone(),
        tests,
        ints,
    })
}

fn operand(op: &Operand) -> Cond {
    match &op.kind {
        Arg::Pipe(p) => compile(p),
        Arg::Field(names) => Cond::Field(names.clone()),
        Arg::Literal(v) => Cond::Known(v.truth()),
        Arg::Number(n) => Cond::Known(n.ideal.truth()),
        _ => Cond::General,
    }
}

fn term(op: &Operand) -> Term {
    match &op.kind {
        Arg::Number(n) => Term::Const(n.ideal.clone()),
        Arg::Literal(v) => Term::Const(v.clone()),
        Arg::Field(names) => Term::Field(names.clone()),
        Arg::Pipe(p) => index(p),
        _ => Term::General,
    }
}

/// `(index .a.b "k" 0)`: a field chain and literal keys.
fn index(pipe: &Pipeline) -> Term {
    let [cmd] = pipe.cmds.as_slice() else {
        return Term::General;
    };
    let [func, base, keys @ ..] = cmd.args.as_slice() else {
        return Term::General;
    };
    match (&func.kind, &base.kind) {
        (Arg::Func(def), Arg::Field(names))
            if def.fast == Some(Fast::Index) && pipe.decl.is_empty() =>
        {
            let mut literal = Vec::with_capacity(keys.len());
            for key in keys {
                match &key.kind {
                    Arg::Literal(v) | Arg::Number(crate::ast::Number { ideal: v, .. }) => {
                        literal.push(v.clone())
                    }
                    _ => return Term::General,
                }
            }
            Term::Index(names.clone(), literal)
        }
        _ => Term::General,
    }
}
