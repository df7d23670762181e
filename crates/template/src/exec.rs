//! The evaluator: walks the node tree over a data value, with Go's semantics for field access,
//! missingkey modes, argument type checks, range/with/if, variables and nested templates.

mod call;
mod cond;
mod lookup;
mod range;
mod text;

pub(crate) use lookup::{chain, lookup, Memo};

use crate::doc::Doc as Json;

use crate::ast::{Arg, Branch, Command, Name, Node, Operand, Pipeline, Span, Tree};
use crate::funcs::Ty;
use crate::gofmt::{push_int, write_value};
use crate::val::{child, Root, Val};
use crate::value::{check_expanded, Value};
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

/// Errors are boxed so that the results passed along every field step stay small.
type R<T> = Result<T, Box<Error>>;

pub struct Exec<'a> {
    pub tree: &'a Tree,
    pub src: &'a str,
    pub name: &'a str,
    pub engine: Engine,
    pub missing_key: MissingKey,
    /// The output, owned for the render (one indirection less on every write and budget
    /// check); `Template` takes it back afterwards, partial output on error included.
    pub out: String,
    root: Root,
    vars: Vec<(&'a str, Val<'a>)>,
    depth: usize,
    steps: u64,
    memo: Memo<'a>,
    /// Buffers for string-function pipelines (`exec/text.rs`), reused through the render.
    text_bufs: [String; 3],
}

impl<'a> Exec<'a> {
    pub fn new(
        tree: &'a Tree,
        src: &'a str,
        name: &'a str,
        engine: Engine,
        missing_key: MissingKey,
        out: String,
        root: Root,
    ) -> Self {
        Exec {
            tree,
            src,
            name,
            engine,
            missing_key,
            out,
            root,
            vars: Vec::with_capacity(8),
            depth: 0,
            steps: 0,
            memo: Memo::new(),
            text_bufs: Default::default(),
        }
    }

    /// Runs the template `name` with `data` as dot and `$`.
    pub fn run(&mut self, list: &'a [Node], data: Val<'a>) -> R<()> {
        self.vars.push(("$", data.clone()));
        self.walk(list, &data)?;
        Ok(())
    }

    fn error(&self, span: Span, message: impl Into<String>) -> Box<Error> {
        Box::new(Error::exec(self.name, self.src, span, message.into()))
    }

    fn walk(&mut self, list: &'a [Node], dot: &Val<'a>) -> R<Flow> {
        self.depth += 1;
        let result = self.walk_nodes(list, dot);
        self.depth -= 1;
        result
    }

    fn walk_nodes(&mut self, list: &'a [Node], dot: &Val<'a>) -> R<Flow> {
        // The budget is charged a list at a time: every loop walks its body as a list, so a
        // runaway loop is stopped within one iteration, and a node costs no check of its own.
        self.steps += list.len() as u64;
        if self.steps > MAX_STEPS || self.out.len() > MAX_OUTPUT {
            return Err(self.over_budget());
        }
        for node in list {
            match node {
                Node::Text(t) => self.out.push_str(t),
                Node::Action(pipe) => {
                    // `{{ .a.b }}`, `{{ $x }}`, `{{ $x.a }}` over borrowed data: straight to the
                    // output; anything unusual (missing keys, errors) takes the general path.
                    if !self.print_lone(pipe, dot) {
                        self.action(pipe, dot)?;
                    }
                }
                Node::If(b) => {
                    // A condition decided in place picks its list here, without the frame of
                    // the general `if`.
                    // Lists that declare nothing need no end to their variables.
                    let flow = match (self.test(dot, &b.cond), &b.else_list) {
                        (Some(true), _) if !b.declares => self.walk(&b.list, dot)?,
                        (Some(true), _) => self.branch(&b.list, dot)?,
                        (Some(false), Some(else_list)) if !b.declares => {
                            self.walk(else_list, dot)?
                        }
                        (Some(false), Some(else_list)) => self.branch(else_list, dot)?,
                        (Some(false), None) => Flow::Normal,
                        (None, _) => self.if_or_with(b, dot, false)?,
                    };
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
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

    #[cold]
    fn over_budget(&self) -> Box<Error> {
        let what = if self.steps > MAX_STEPS {
            "steps"
        } else {
            "output bytes"
        };
        self.error(
            Span::default(),
            format!("template exceeded its budget of {what}"),
        )
    }

    /// Any other action. Out of line: inlined, its locals would widen the frame of every `walk`.
    #[inline(never)]
    fn action(&mut self, pipe: &'a Pipeline, dot: &Val<'a>) -> R<()> {
        if self.print_text_call(pipe, dot)? {
            return Ok(());
        }
        let value = self.pipeline(dot, pipe)?;
        if pipe.decl.is_empty() {
            self.print(&value, pipe.span)?;
        }
        Ok(())
    }

    /// Prints a pipeline that is a lone field chain or variable when that needs no general
    /// rule; `false` when the general path must evaluate it.
    #[inline]
    fn print_lone(&mut self, pipe: &'a Pipeline, dot: &Val<'a>) -> bool {
        let value = match (pipe.lone_operand(), dot) {
            (Some(Arg::Field(names)), Val::J(node, shape)) => match (&names[..], node) {
                // `{{ .port }}`: one lookup, without the chain's frame.
                ([name], Json::Object(entries)) => {
                    lookup(entries, name).map(|found| child(*shape, name, found))
                }
                _ => chain(&mut self.memo, node, *shape, names),
            },
            (Some(Arg::Variable(name, names)), _) => {
                match self.vars.iter().rev().find(|(n, _)| same(n, name)) {
                    Some((_, value)) if names.is_empty() => Some(value.clone()),
                    Some((_, Val::J(node, shape))) => {
                        let (node, shape) = (*node, *shape);
                        chain(&mut self.memo, node, shape, names)
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        match value {
            // Borrowed strings and integers, the usual lone fields, without the out-of-line
            // `print` and the move of the value into it.
            Some(Val::J(Json::String(s), _)) if self.engine == Engine::Text => {
                self.out.push_str(s);
                true
            }
            Some(Val::J(Json::Number(n), _)) if self.engine == Engine::Text && n.is_i64() => {
                push_int(&mut self.out, n.as_i64().unwrap_or_default());
                true
            }
            // Lists and maps are checked before they are printed (`print`, general path).
            Some(Val::V(Value::List(_) | Value::Map(_))) => false,
            Some(value) => {
                // Anything else prints without error.
                let _ = self.print(&value, pipe.span);
                true
            }
            None => false,
        }
    }

    /// Prints a value; a list or map only when its printed form fits the output budget.
    pub(super) fn print(&mut self, value: &Val<'a>, span: Span) -> R<()> {
        let value = match (self.engine, value) {
            (_, Val::V(v)) => v,
            (Engine::Text, Val::Key(k)) => {
                self.out.push_str(k);
                return Ok(());
            }
            (Engine::Text, Val::J(Json::String(k), _)) => {
                self.out.push_str(k);
                return Ok(());
            }
            (Engine::Text, Val::J(Json::Number(n), _)) if n.is_i64() => {
                push_int(&mut self.out, n.as_i64().unwrap_or_default());
                return Ok(());
            }
            (_, other) => &self.root.value_ref(other),
        };
        if matches!(value, Value::List(_) | Value::Map(_)) {
            check_expanded(value, MAX_OUTPUT as u64).map_err(|m| self.error(span, m))?;
        }
        self.print_value(value);
        Ok(())
    }

    fn print_value(&mut self, value: &Value) {
        match (self.engine, value) {
            (Engine::Html, Value::Nil) => {}
            (Engine::Html, Value::String(s)) => self.out.push_str(&crate::builtins::html_escape(s)),
            (Engine::Html, v) => self
                .out
                .push_str(&crate::builtins::html_escape(&crate::gofmt::to_string(v))),
            (_, Value::Nil) => self.out.push_str("<no value>"),
            (_, v) => write_value(&mut self.out, v),
        }
    }

    /// The list an `if` chose, with dot unchanged.
    fn branch(&mut self, list: &'a [Node], dot: &Val<'a>) -> R<Flow> {
        let mark = self.vars.len();
        let flow = self.walk(list, dot)?;
        // Variables declared in the branch end with it.
        self.vars.truncate(mark);
        Ok(flow)
    }

    /// `if` (when its condition was not decided in place) and `with`.
    fn if_or_with(&mut self, b: &'a Branch, dot: &Val<'a>, with: bool) -> R<Flow> {
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

    fn bind(&mut self, name: &'a str, value: Val<'a>, assign: bool) {
        if assign {
            if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| same(n, name)) {
                slot.1 = value;
                return;
            }
        }
        self.vars.push((name, value));
    }

    #[inline(never)]
    fn template(
        &mut self,
        name: &str,
        pipe: Option<&'a Pipeline>,
        span: Span,
        dot: &Val<'a>,
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
            None => Val::NIL,
        };
        let saved = std::mem::replace(&mut self.vars, vec![("$", new_dot.clone())]);
        let list: &'a [Node] = list;
        let result = self.walk(list, &new_dot);
        self.vars = saved;
        result.map(|_| ())
    }

    fn pipeline(&mut self, dot: &Val<'a>, pipe: &'a Pipeline) -> R<Val<'a>> {
        if let (true, [cmd]) = (pipe.decl.is_empty(), pipe.cmds.as_slice()) {
            return self.command(dot, cmd, None);
        }
        let value = self.commands(dot, &pipe.cmds)?;
        for name in &pipe.decl {
            self.bind(name, value.clone(), pipe.is_assign);
        }
        Ok(value)
    }

    pub(super) fn commands(&mut self, dot: &Val<'a>, cmds: &'a [Command]) -> R<Val<'a>> {
        let mut value = None;
        for cmd in cmds {
            value = Some(self.command(dot, cmd, value)?);
        }
        Ok(value.unwrap_or(Val::NIL))
    }

    pub(super) fn command(
        &mut self,
        dot: &Val<'a>,
        cmd: &'a Command,
        final_: Option<Val<'a>>,
    ) -> R<Val<'a>> {
        let first = &cmd.args[0];
        let has_args = cmd.args.len() > 1 || final_.is_some();
        match &first.kind {
            Arg::Field(names) => {
                if let (Val::J(node, shape), false) = (dot, has_args) {
                    if let Some(v) = chain(&mut self.memo, node, *shape, names) {
                        return Ok(v);
                    }
                }
                self.fields(Some(dot.clone()), names, first.span, &cmd.args, final_, dot)
            }
            Arg::Chain(base, names) => {
                let receiver = self.operand(dot, base)?;
                self.fields(Some(receiver), names, first.span, &cmd.args, final_, dot)
            }
            Arg::Variable(name, names) => {
                let value = self.var(name, first.span)?;
                if names.is_empty() {
                    self.not_a_function(first, has_args)?;
                    return Ok(value);
                }
                if let (Val::J(node, shape), false) = (&value, has_args) {
                    if let Some(v) = chain(&mut self.memo, node, *shape, names) {
                        return Ok(v);
                    }
                }
                self.fields(Some(value), names, first.span, &cmd.args, final_, dot)
            }
            Arg::Func(def) => {
                if final_.is_none() {
                    if let Some(result) = self.quick_call(def, dot, &cmd.args[1..], first.span) {
                        return result;
                    }
                }
                self.call(def, dot, &cmd.args[1..], final_, first.span)
            }
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
                Ok(Val::V(v.clone()))
            }
            Arg::Number(n) => {
                self.not_a_function(first, has_args)?;
                Ok(Val::V(n.ideal.clone()))
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

    fn var(&self, name: &str, span: Span) -> R<Val<'a>> {
        match self.vars.iter().rev().find(|(n, _)| same(n, name)) {
            Some((_, v)) => Ok(v.clone()),
            None => Err(self.error(span, format!("undefined variable: {name}"))),
        }
    }

    /// Evaluates a field chain; `receiver` None is Go's invalid (missing) value.
    fn fields(
        &mut self,
        receiver: Option<Val<'a>>,
        names: &'a [Name],
        span: Span,
        args: &'a [Operand],
        final_: Option<Val<'a>>,
        dot: &Val<'a>,
    ) -> R<Val<'a>> {
        let mut current = receiver;
        let mut final_ = final_;
        let mut names = names;
        // Borrowed JSON objects: walk the chain in place while no step needs the general rules.
        if let Some(Val::J(mut node, mut shape)) = current {
            let plain_steps = if args.len() > 1 || final_.is_some() {
                names.len().saturating_sub(1)
            } else {
                names.len()
            };
            let mut done = 0;
            while done < plain_steps {
                let Json::Object(entries) = node else { break };
                let name = &names[done];
                match lookup(entries, name) {
                    Some(next) => match child(shape, name, next) {
                        Val::J(n, s) => (node, shape) = (n, s),
                        other => {
                            current = Some(other);
                            done += 1;
                            break;
                        }
                    },
                    None => match self.missing(span, name)? {
                        Some(v) => current = Some(v),
                        None => current = None,
                    },
                }
                done += 1;
                if !matches!(current, Some(Val::J(..))) {
                    break;
                }
                current = Some(Val::J(node, shape));
            }
            names = &names[done..];
            if names.is_empty() {
                return Ok(current.unwrap_or(Val::NIL));
            }
        }
        for (i, name) in names.iter().enumerate() {
            let last = i + 1 == names.len();
            let (call_args, fin): (&'a [Operand], Option<Val<'a>>) = if last {
                (args.get(1..).unwrap_or_default(), final_.take())
            } else {
                (&[], None)
            };
            current = self.field(current, name, span, call_args, fin, dot)?;
        }
        Ok(current.unwrap_or(Val::NIL))
    }

    fn field(
        &mut self,
        receiver: Option<Val<'a>>,
        name: &str,
        span: Span,
        args: &'a [Operand],
        final_: Option<Val<'a>>,
        dot: &Val<'a>,
    ) -> R<Option<Val<'a>>> {
        let has_args = !args.is_empty() || final_.is_some();
        let Some(receiver) = receiver else {
            if self.missing_key == MissingKey::Error {
                return Err(self.error(span, format!("nil data; no entry for key {name:?}")));
            }
            return Ok(None);
        };
        let receiver = match receiver {
            Val::J(Json::Object(entries), shape) => {
                if has_args {
                    return Err(self.not_a_method(span, name));
                }
                return match lookup(entries, name) {
                    Some(v) => Ok(Some(child(shape, name, v))),
                    None => self.missing(span, name),
                };
            }
            Val::V(v) => v,
            other => self.root.value(other),
        };
        match &receiver {
            Value::Map(m) => {
                if has_args {
                    return Err(self.not_a_method(span, name));
                }
                match m.get(name) {
                    Some(v) => Ok(Some(Val::V(v))),
                    None => self.missing(span, name),
                }
            }
            Value::Nil => Err(self.error(
                span,
                format!("nil pointer evaluating interface {{}}.{name}"),
            )),
            Value::Semver(_) | Value::Time(_) => {
                let mut values = Vec::with_capacity(args.len() + 1);
                for arg in args {
                    values.push(self.arg(dot, arg, Ty::Any)?);
                }
                values.extend(final_.map(|v| self.root.value(v)));
                crate::methods::call(&receiver, name, values)
                    .map(|v| Some(Val::V(v)))
                    .map_err(|m| self.error(span, m))
            }
            other => Err(self.error(
                span,
                format!("can't evaluate field {name} in type {}", other.go_type()),
            )),
        }
    }
}

/// String equality for the short names and keys templates use, without a call to `memcmp`.
#[inline]
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
}
