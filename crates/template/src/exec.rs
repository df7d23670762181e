//! The evaluator: walks the node tree over a data value, with Go's semantics for field access,
//! missingkey modes, argument type checks, range/with/if, variables and nested templates.

use crate::ast::{Arg, Branch, Command, Node, Operand, Pipeline, Span, Tree};
use crate::funcs::{FuncDef, Imp, Ty};
use crate::gofmt::write_value;
use crate::value::Value;
use crate::{Engine, Error, MissingKey};

/// Deepest nesting of blocks (`if`, `with`, `range` bodies and `{{ template }}` calls together)
/// before rendering gives up. Go limits template calls to 100000 on its growable stacks; ours
/// must fit a 2 MiB render thread even in a debug build.
const MAX_DEPTH: usize = 160;

/// Nodes one render may execute (loops included) before it is stopped.
const MAX_STEPS: u64 = 10_000_000;

/// Bytes one render may produce.
const MAX_OUTPUT: usize = 64 << 20;

enum Flow {
    Normal,
    Break,
    Continue,
}

type R<T> = Result<T, Error>;

pub struct Exec<'a> {
    pub tree: &'a Tree,
    pub src: &'a str,
    pub name: &'a str,
    pub engine: Engine,
    pub missing_key: MissingKey,
    pub out: &'a mut String,
    vars: Vec<(&'a str, Value)>,
    depth: usize,
    steps: u64,
}

impl<'a> Exec<'a> {
    pub fn new(
        tree: &'a Tree,
        src: &'a str,
        name: &'a str,
        engine: Engine,
        missing_key: MissingKey,
        out: &'a mut String,
    ) -> Self {
        Exec {
            tree,
            src,
            name,
            engine,
            missing_key,
            out,
            vars: Vec::with_capacity(8),
            depth: 0,
            steps: 0,
        }
    }

    /// Runs the template `name` with `data` as dot and `$`.
    pub fn run(&mut self, list: &'a [Node], data: &Value) -> R<()> {
        self.vars.push(("$", data.clone()));
        self.walk(list, data)?;
        Ok(())
    }

    fn error(&self, span: Span, message: impl Into<String>) -> Error {
        Error::exec(self.name, self.src, span, message.into())
    }

    fn walk(&mut self, list: &'a [Node], dot: &Value) -> R<Flow> {
        self.depth += 1;
        let result = self.walk_nodes(list, dot);
        self.depth -= 1;
        result
    }

    fn walk_nodes(&mut self, list: &'a [Node], dot: &Value) -> R<Flow> {
        for node in list {
            self.steps += 1;
            if self.steps > MAX_STEPS || self.out.len() > MAX_OUTPUT {
                let what = if self.steps > MAX_STEPS {
                    "steps"
                } else {
                    "output bytes"
                };
                return Err(self.error(
                    Span::default(),
                    format!("template exceeded its budget of {what}"),
                ));
            }
            match node {
                Node::Text(t) => self.out.push_str(t),
                Node::Action(pipe) => {
                    let value = self.pipeline(dot, pipe)?;
                    if pipe.decl.is_empty() {
                        self.print(&value);
                    }
                }
                Node::If(b) => match self.if_or_with(b, dot, false)? {
                    Flow::Normal => {}
                    flow => return Ok(flow),
                },
                Node::With(b) => match self.if_or_with(b, dot, true)? {
                    Flow::Normal => {}
                    flow => return Ok(flow),
                },
                Node::Range(b) => self.range(b, dot)?,
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
                Node::Template { name, pipe, span } => {
                    self.template(name, pipe.as_ref(), *span, dot)?
                }
            }
        }
        Ok(Flow::Normal)
    }

    fn print(&mut self, value: &Value) {
        match (self.engine, value) {
            (Engine::Html, Value::Nil) => {}
            (Engine::Html, Value::String(s)) => self.out.push_str(&crate::builtins::html_escape(s)),
            (Engine::Html, v) => self
                .out
                .push_str(&crate::builtins::html_escape(&crate::gofmt::to_string(v))),
            (_, Value::Nil) => self.out.push_str("<no value>"),
            (_, v) => write_value(self.out, v),
        }
    }

    fn if_or_with(&mut self, b: &'a Branch, dot: &Value, with: bool) -> R<Flow> {
        let mark = self.vars.len();
        let value = self.pipeline(dot, &b.pipe)?;
        let flow = if value.truth() {
            self.walk(&b.list, if with { &value } else { dot })?
        } else if let Some(else_list) = &b.else_list {
            self.walk(else_list, dot)?
        } else {
            Flow::Normal
        };
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn range(&mut self, b: &'a Branch, dot: &Value) -> R<()> {
        let mark = self.vars.len();
        let value = self.commands(dot, &b.pipe.cmds)?;
        let wants_key = b.pipe.decl.len() > 1;
        match &value {
            Value::List(items) if !items.is_empty() => {
                for (i, elem) in items.iter().enumerate() {
                    let key = if wants_key {
                        Value::GoInt(i as i64)
                    } else {
                        Value::Nil
                    };
                    if let Flow::Break = self.range_body(b, key, elem, mark)? {
                        break;
                    }
                }
            }
            Value::Map(m) if !m.is_empty() => {
                // A snapshot: the body may modify the map (Go iterates over sorted keys too).
                let entries: Vec<(Value, Value)> = m
                    .read()
                    .iter()
                    .map(|(k, v)| {
                        (
                            if wants_key { Value::str(k) } else { Value::Nil },
                            v.clone(),
                        )
                    })
                    .collect();
                for (key, elem) in entries {
                    if let Flow::Break = self.range_body(b, key, &elem, mark)? {
                        break;
                    }
                }
            }
            Value::List(_) | Value::Map(_) | Value::Nil => {
                if let Some(else_list) = &b.else_list {
                    self.walk(else_list, dot)?;
                }
            }
            other => {
                let shown = crate::gofmt::to_string(other);
                return Err(self.error(b.pipe.span, format!("range can't iterate over {shown}")));
            }
        }
        Ok(())
    }

    fn range_body(&mut self, b: &'a Branch, key: Value, elem: &Value, mark: usize) -> R<Flow> {
        // Every iteration costs a step, even with an empty body.
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(self.error(b.pipe.span, "template exceeded its budget of steps"));
        }
        match b.pipe.decl.as_slice() {
            [] => {}
            [v] => self.bind(v, elem.clone(), b.pipe.is_assign),
            [k, v, ..] => {
                self.bind(k, key, b.pipe.is_assign);
                self.bind(v, elem.clone(), b.pipe.is_assign);
            }
        }
        let flow = self.walk(&b.list, elem)?;
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn bind(&mut self, name: &'a str, value: Value, assign: bool) {
        if assign {
            if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| *n == name) {
                slot.1 = value;
                return;
            }
        }
        self.vars.push((name, value));
    }

    fn template(
        &mut self,
        name: &str,
        pipe: Option<&'a Pipeline>,
        span: Span,
        dot: &Value,
    ) -> R<()> {
        let Some(list) = self.tree.templates.get(name) else {
            return Err(self.error(span, format!("template {name:?} not defined")));
        };
        if self.depth >= MAX_DEPTH {
            return Err(self.error(
                span,
                format!("exceeded maximum template depth ({MAX_DEPTH})"),
            ));
        }
        let new_dot = match pipe {
            Some(p) => self.pipeline(dot, p)?,
            None => Value::Nil,
        };
        let saved = std::mem::replace(&mut self.vars, vec![("$", new_dot.clone())]);
        let list: &'a [Node] = list;
        let result = self.walk(list, &new_dot);
        self.vars = saved;
        result.map(|_| ())
    }

    fn pipeline(&mut self, dot: &Value, pipe: &'a Pipeline) -> R<Value> {
        let value = self.commands(dot, &pipe.cmds)?;
        for name in &pipe.decl {
            self.bind(name, value.clone(), pipe.is_assign);
        }
        Ok(value)
    }

    fn commands(&mut self, dot: &Value, cmds: &'a [Command]) -> R<Value> {
        let mut value = None;
        for cmd in cmds {
            value = Some(self.command(dot, cmd, value)?);
        }
        Ok(value.unwrap_or_default())
    }

    fn command(&mut self, dot: &Value, cmd: &'a Command, final_: Option<Value>) -> R<Value> {
        let first = &cmd.args[0];
        let has_args = cmd.args.len() > 1 || final_.is_some();
        match &first.kind {
            Arg::Field(names) => {
                self.fields(Some(dot.clone()), names, first.span, &cmd.args, final_, dot)
            }
            Arg::Chain(base, names) => {
                let receiver = self.operand_any(dot, base)?;
                self.fields(Some(receiver), names, first.span, &cmd.args, final_, dot)
            }
            Arg::Variable(name, names) => {
                let value = self.var(name, first.span)?;
                if names.is_empty() {
                    self.not_a_function(first, has_args)?;
                    return Ok(value);
                }
                self.fields(Some(value), names, first.span, &cmd.args, final_, dot)
            }
            Arg::Func(def) => self.call(def, dot, &cmd.args[1..], final_, first.span),
            Arg::Pipe(p) => {
                self.not_a_function(first, has_args)?;
                self.pipeline(dot, p)
            }
            Arg::Dot => {
                self.not_a_function(first, has_args)?;
                Ok(dot.clone())
            }
            Arg::Nil => Err(self.error(first.span, "nil is not a command")),
            Arg::Literal(v) => {
                self.not_a_function(first, has_args)?;
                Ok(v.clone())
            }
            Arg::Number(n) => {
                self.not_a_function(first, has_args)?;
                Ok(n.ideal.clone())
            }
        }
    }

    fn not_a_function(&self, first: &Operand, has_args: bool) -> R<()> {
        if has_args {
            let text = self.span_text(first.span);
            return Err(self.error(
                first.span,
                format!("can't give argument to non-function {text}"),
            ));
        }
        Ok(())
    }

    fn span_text(&self, span: Span) -> &str {
        self.src
            .get(span.start as usize..span.end as usize)
            .unwrap_or_default()
            .trim()
    }

    fn var(&self, name: &str, span: Span) -> R<Value> {
        match self.vars.iter().rev().find(|(n, _)| *n == name) {
            Some((_, v)) => Ok(v.clone()),
            None => Err(self.error(span, format!("undefined variable: {name}"))),
        }
    }

    /// Evaluates a field chain; `receiver` None is Go's invalid (missing) value.
    fn fields(
        &mut self,
        receiver: Option<Value>,
        names: &'a [Box<str>],
        span: Span,
        args: &'a [Operand],
        final_: Option<Value>,
        dot: &Value,
    ) -> R<Value> {
        let mut current = receiver;
        let mut final_ = final_;
        for (i, name) in names.iter().enumerate() {
            let last = i + 1 == names.len();
            let (call_args, fin): (&'a [Operand], Option<Value>) = if last {
                (args.get(1..).unwrap_or_default(), final_.take())
            } else {
                (&[], None)
            };
            current = self.field(current, name, span, call_args, fin, dot)?;
        }
        Ok(current.unwrap_or_default())
    }

    fn field(
        &mut self,
        receiver: Option<Value>,
        name: &str,
        span: Span,
        args: &'a [Operand],
        final_: Option<Value>,
        dot: &Value,
    ) -> R<Option<Value>> {
        let has_args = !args.is_empty() || final_.is_some();
        let Some(receiver) = receiver else {
            if self.missing_key == MissingKey::Error {
                return Err(self.error(span, format!("nil data; no entry for key {name:?}")));
            }
            return Ok(None);
        };
        match &receiver {
            Value::Map(m) => {
                if has_args {
                    return Err(
                        self.error(span, format!("{name} is not a method but has arguments"))
                    );
                }
                match m.get(name) {
                    Some(v) => Ok(Some(v)),
                    None => match self.missing_key {
                        MissingKey::Error => {
                            Err(self.error(span, format!("map has no entry for key {name:?}")))
                        }
                        MissingKey::Default => Ok(None),
                        MissingKey::Zero => Ok(Some(Value::Nil)),
                    },
                }
            }
            Value::Nil => Err(self.error(
                span,
                format!("nil pointer evaluating interface {{}}.{name}"),
            )),
            Value::Semver(_) | Value::Time(_) => {
                let mut values = Vec::with_capacity(args.len() + 1);
                for arg in args {
                    values.push(self.operand_any(dot, arg)?);
                }
                values.extend(final_);
                crate::methods::call(&receiver, name, values)
                    .map(Some)
                    .map_err(|m| self.error(span, m))
            }
            other => Err(self.error(
                span,
                format!("can't evaluate field {name} in type {}", other.go_type()),
            )),
        }
    }

    /// Evaluates an operand as an `interface{}` argument.
    fn operand_any(&mut self, dot: &Value, op: &'a Operand) -> R<Value> {
        self.arg(dot, op, Ty::Any)
    }

    /// Go's `evalArg`: evaluates `op` for a parameter of type `ty`.
    fn arg(&mut self, dot: &Value, op: &'a Operand, ty: Ty) -> R<Value> {
        let value = match &op.kind {
            Arg::Dot => dot.clone(),
            Arg::Nil => {
                return match ty {
                    Ty::Any | Ty::Map | Ty::List => Ok(Value::Nil),
                    _ => Err(self.error(op.span, format!("cannot assign nil to {}", ty.go_name()))),
                }
            }
            Arg::Field(names) => self.fields(Some(dot.clone()), names, op.span, &[], None, dot)?,
            Arg::Variable(name, names) => {
                let v = self.var(name, op.span)?;
                if names.is_empty() {
                    v
                } else {
                    self.fields(Some(v), names, op.span, &[], None, dot)?
                }
            }
            Arg::Pipe(p) => self.pipeline(dot, p)?,
            Arg::Func(def) => self.call(def, dot, &[], None, op.span)?,
            Arg::Chain(base, names) => {
                let receiver = self.operand_any(dot, base)?;
                self.fields(Some(receiver), names, op.span, &[], None, dot)?
            }
            Arg::Literal(v) => return self.literal(v, ty, op),
            Arg::Number(n) => {
                return match ty {
                    Ty::Any => Ok(n.ideal.clone()),
                    Ty::Int => n
                        .int
                        .map(Value::GoInt)
                        .ok_or_else(|| self.expected(op, "integer")),
                    Ty::Float => n
                        .float
                        .map(Value::Float)
                        .ok_or_else(|| self.expected(op, "float")),
                    Ty::Str => Err(self.expected(op, "string")),
                    Ty::Bool => Err(self.expected(op, "bool")),
                    Ty::Map | Ty::List => Err(self.cant_handle(op, ty)),
                }
            }
        };
        self.validate(value, ty, op.span)
    }

    fn literal(&self, v: &Value, ty: Ty, op: &Operand) -> R<Value> {
        match (v, ty) {
            (_, Ty::Any) | (Value::String(_), Ty::Str) | (Value::Bool(_), Ty::Bool) => {
                Ok(v.clone())
            }
            (_, Ty::Str) => Err(self.expected(op, "string")),
            (_, Ty::Bool) => Err(self.expected(op, "bool")),
            (_, Ty::Int) => Err(self.expected(op, "integer")),
            (_, Ty::Float) => Err(self.expected(op, "float")),
            (_, Ty::Map | Ty::List) => Err(self.cant_handle(op, ty)),
        }
    }

    fn expected(&self, op: &Operand, what: &str) -> Error {
        self.error(
            op.span,
            format!("expected {what}; found {}", self.span_text(op.span)),
        )
    }

    fn cant_handle(&self, op: &Operand, ty: Ty) -> Error {
        self.error(
            op.span,
            format!(
                "can't handle {} for arg of type {}",
                self.span_text(op.span),
                ty.go_name()
            ),
        )
    }

    /// Go's `validateType` for an evaluated value.
    fn validate(&self, value: Value, ty: Ty, span: Span) -> R<Value> {
        let ok = matches!(
            (&value, ty),
            (_, Ty::Any)
                | (Value::String(_), Ty::Str)
                | (Value::GoInt(_), Ty::Int)
                | (Value::Float(_), Ty::Float)
                | (Value::Bool(_), Ty::Bool)
                | (Value::Map(_) | Value::Nil, Ty::Map)
                | (Value::List(_) | Value::Nil, Ty::List)
        );
        if ok {
            return Ok(value);
        }
        let got = if value.is_nil() {
            "interface {}"
        } else {
            value.go_type()
        };
        Err(self.error(
            span,
            format!("wrong type for value; expected {}; got {got}", ty.go_name()),
        ))
    }

    fn call(
        &mut self,
        def: &'static FuncDef,
        dot: &Value,
        args: &'a [Operand],
        final_: Option<Value>,
        span: Span,
    ) -> R<Value> {
        let given = args.len() + usize::from(final_.is_some());
        let fixed = def.params.len();
        if def.variadic.is_some() && given < fixed {
            let msg = format!(
                "wrong number of args for {}: want at least {fixed} got {given}",
                def.name
            );
            return Err(self.error(span, msg));
        }
        if def.variadic.is_none() && given != fixed {
            return Err(self.error(
                span,
                format!(
                    "wrong number of args for {}: want {fixed} got {given}",
                    def.name
                ),
            ));
        }
        let imp = match def.imp {
            Imp::Plain(f) => f,
            Imp::And | Imp::Or => {
                let want = matches!(def.imp, Imp::Or);
                let mut last = Value::Nil;
                for op in args {
                    last = self.operand_any(dot, op)?;
                    if last.truth() == want {
                        return Ok(last);
                    }
                }
                return Ok(final_.unwrap_or(last));
            }
        };
        let param = |i: usize| {
            def.params
                .get(i)
                .copied()
                .or(def.variadic)
                .unwrap_or(Ty::Any)
        };
        let mut values = Vec::with_capacity(given);
        for (i, op) in args.iter().enumerate() {
            values.push(self.arg(dot, op, param(i))?);
        }
        if let Some(fin) = final_ {
            let ty = param(args.len());
            let fin = match (fin, ty) {
                (Value::Nil, Ty::Any | Ty::Map | Ty::List) => Value::Nil,
                (fin, _) => self.validate(fin, ty, span)?,
            };
            values.push(fin);
        }
        let whole = self.command_span(span, args);
        imp(values).map_err(|m| self.error(whole, format!("error calling {}: {m}", def.name)))
    }

    fn command_span(&self, span: Span, args: &[Operand]) -> Span {
        match args.last() {
            Some(last) => Span {
                start: span.start,
                end: last.span.end,
            },
            None => span,
        }
    }
}
