//! The parsed form of a template: a tree of nodes whose functions are already resolved, so
//! rendering never looks a name up in a map. Spans are byte ranges into the source text.

use std::sync::Arc;

use crate::funcs::FuncDef;
use crate::value::Value;

/// A field name. Equal names of one template share one allocation, so that a render can
/// remember a lookup by the name's address (`exec::lookup::Memo`).
pub type Name = Arc<str>;

/// A field chain (`.a.b.c`). Equal chains of one template share one allocation, so that a
/// render can remember a whole chain by its address (`exec::lookup::Memo`).
pub type Chain = Arc<[Name]>;

/// Hands out one shared [`Name`] per distinct field name, and one shared [`Chain`] per
/// distinct chain, while parsing.
#[derive(Debug, Default)]
pub struct Names {
    names: std::collections::HashMap<Box<str>, Name>,
    chains: std::collections::HashMap<Vec<Name>, Chain>,
}

impl Names {
    pub fn get(&mut self, name: &str) -> Name {
        if let Some(shared) = self.names.get(name) {
            return Arc::clone(shared);
        }
        let shared: Name = Arc::from(name);
        self.names.insert(name.into(), Arc::clone(&shared));
        shared
    }

    pub fn chain(&mut self, names: Vec<Name>) -> Chain {
        if let Some(shared) = self.chains.get(&names) {
            return Arc::clone(shared);
        }
        let shared: Chain = Arc::from(names.as_slice());
        self.chains.insert(names, Arc::clone(&shared));
        shared
    }
}

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
    /// An `if` condition compiled for deciding in place (`Cond::General` for `with`/`range`).
    pub cond: Box<crate::cond::Cond>,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
    /// Whether a node at the top of `list` or `else_list` declares a variable, which must end
    /// with the list (nested blocks and template calls end their own).
    pub declares: bool,
}

#[derive(Debug)]
pub struct Pipeline {
    pub span: Span,
    /// Declared or assigned variables (`$x :=`, `$i, $v :=`, `$x =`).
    pub decl: Vec<Box<str>>,
    pub is_assign: bool,
    pub cmds: Vec<Command>,
}

impl Pipeline {
    /// The operand when the pipeline is only one operand (no declaration, no function).
    #[inline]
    pub fn lone_operand(&self) -> Option<&Arg> {
        match (self.decl.is_empty(), self.cmds.as_slice()) {
            (true, [cmd]) => match cmd.args.as_slice() {
                [operand] => Some(&operand.kind),
                _ => None,
            },
            _ => None,
        }
    }
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
    Field(Chain),
    /// `$x.a.b` (fields may be empty).
    Variable(Box<str>, Chain),
    Func(&'static FuncDef),
    /// `(pipeline).a.b` or `$x.a` style chains on any operand.
    Chain(Box<Operand>, Chain),
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
