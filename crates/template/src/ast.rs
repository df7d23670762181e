//! The parsed form of a template: a tree of nodes whose functions are already resolved, so
//! rendering never looks a name up in a map. Spans are byte ranges into the source text.

use std::sync::Arc;

use crate::funcs::FuncDef;
use crate::value::Value;

/// A byte range of the template source.
#[derive(Clone, Copy, Debug, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

#[derive(Debug)]
pub enum Node {
    Text(Box<str>),
    Action(Pipeline),
    If(Branch),
    With(Branch),
    Range(Branch),
    Template {
        name: Box<str>,
        pipe: Option<Pipeline>,
        span: Span,
    },
    Break,
    Continue,
}

#[derive(Debug)]
pub struct Branch {
    pub pipe: Pipeline,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
}

#[derive(Debug)]
pub struct Pipeline {
    pub span: Span,
    /// Declared or assigned variables (`$x :=`, `$i, $v :=`, `$x =`).
    pub decl: Vec<Box<str>>,
    pub is_assign: bool,
    pub cmds: Vec<Command>,
}

#[derive(Debug)]
pub struct Command {
    pub span: Span,
    pub args: Vec<Operand>,
}

#[derive(Debug)]
pub struct Operand {
    pub kind: Arg,
    pub span: Span,
}

#[derive(Debug)]
pub enum Arg {
    Dot,
    Nil,
    /// A bool or string literal, ready to use.
    Literal(Value),
    Number(Number),
    /// `.a.b.c`
    Field(Vec<Box<str>>),
    /// `$x.a.b` (fields may be empty).
    Variable(Box<str>, Vec<Box<str>>),
    Func(&'static FuncDef),
    /// `(pipeline).a.b` or `$x.a` style chains on any operand.
    Chain(Box<Operand>, Vec<Box<str>>),
    Pipe(Box<Pipeline>),
}

/// A number literal with every Go interpretation that applies to it.
#[derive(Debug, Clone)]
pub struct Number {
    pub int: Option<i64>,
    pub float: Option<f64>,
    /// What the literal is when passed as `interface{}` (Go's `idealConstant`).
    pub ideal: Value,
}

/// A parsed set of templates: the main one and every `define`/`block`.
#[derive(Debug, Default)]
pub struct Tree {
    pub templates: std::collections::HashMap<Box<str>, Arc<Vec<Node>>>,
    /// Whether any template calls a function that modifies a map in place (`set`,
    /// `getResource`, ...): only then is the identity of data maps observable.
    pub mutates: bool,
}
