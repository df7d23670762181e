//! Operands and function calls for the evaluator: Go's argument type checks, lazy `and`/`or`,
//! and the builtins templates call most (`eq ne lt le gt ge not len index`) evaluated over
//! borrowed data without converting it. Everything else gets owned `Value` arguments.

use crate::doc::Doc as Json;

use super::{lookup, Exec, R};
use crate::ast::{Arg, Operand, Pipeline, Span};
use crate::funcs::{budget, Fast, FuncDef, FuncResult, Imp, TextFn, Ty, MAX_GENERATED, MAX_STRING};
use crate::val::{child, element, Scalar, Val};
use crate::value::{check_expanded, Value, MAX_DEPTH};
use crate::{Error, MissingKey};

/// The elements of `items` and of every list nested in it, each time it occurs; the count
/// stops once it is over `cap`. `true` when the lists nest more than `MAX_DEPTH` levels (a
/// chain that deep would overflow the render thread's stack when it is dropped).
fn list_weight(items: &[Value], cap: u64) -> (u64, bool) {
    let mut weight = 0u64;
    let mut pending = vec![(items, 1u32)];
    while let Some((list, depth)) = pending.pop() {
        weight += list.len() as u64;
        if weight > cap {
            break;
        }
        if depth > MAX_DEPTH {
            return (weight, true);
        }
        pending.extend(list.iter().filter_map(|v| match v {
            Value::List(inner) => Some((inner.as_slice(), depth + 1)),
            _ => None,
        }));
    }
    (weight, false)
}

/// Refuses a list or map argument whose printed, encoded or copied form would exceed the
/// string budget (`check_expanded`), before `def` expands it: a map held many times over
/// (`$d = dict "a" $d "b" $d` in a loop) is cheap to build and would take for ever to print.
/// Functions that only look one level in, or follow one path, are not checked (their cost
/// does not depend on what their argument holds).
fn expandable(def: &FuncDef, values: &[Value]) -> Result<(), String> {
    let shallow = matches!(
        def.name,
        "list"
            | "tuple"
            | "first"
            | "mustFirst"
            | "last"
            | "mustLast"
            | "rest"
            | "mustRest"
            | "initial"
            | "mustInitial"
            | "reverse"
            | "mustReverse"
            | "append"
            | "push"
            | "mustAppend"
            | "mustPush"
            | "prepend"
            | "mustPrepend"
            | "concat"
            | "slice"
            | "mustSlice"
            | "chunk"
            | "mustChunk"
            | "compact"
            | "mustCompact"
            | "dict"
            | "get"
            | "set"
            | "unset"
            | "hasKey"
            | "pluck"
            | "keys"
            | "values"
            | "pick"
            | "omit"
            | "dig"
            | "default"
            | "empty"
            | "coalesce"
            | "all"
            | "any"
            | "ternary"
            | "typeOf"
            | "typeIs"
            | "typeIsLike"
            | "kindOf"
            | "kindIs"
            | "len"
            | "index"
            | "not"
            | "getField"
    );
    if shallow {
        return Ok(());
    }
    for v in values {
        if matches!(v, Value::List(_) | Value::Map(_)) {
            check_expanded(v, MAX_STRING as u64)?;
        }
    }
    Ok(())
}

/// Most arguments a fast-path call evaluates into its stack buffer.
pub(super) const FAST_ARGS: usize = 4;

impl<'a> Exec<'a> {
    /// Evaluates an operand as an `interface{}` argument, without converting borrowed data.
    pub(super) fn operand(&mut self, dot: &Val<'a>, op: &'a Operand) -> R<Val<'a>> {
        Ok(match &op.kind {
            Arg::Dot => dot.clone(),
            Arg::Nil => Val::NIL,
            Arg::Field(names) => match dot {
                Val::J(node, shape) => match super::chain(&mut self.memo, node, *shape, names) {
                    Some(v) => v,
                    None => self.fields(Some(dot.clone()), names, op.span, &[], None, dot)?,
                },
                _ => self.fields(Some(dot.clone()), names, op.span, &[], None, dot)?,
            },
            Arg::Variable(name, names) => {
                let v = self.var(name, op.span)?;
                if names.is_empty() {
                    v
                } else if let Some(found) = match &v {
                    Val::J(node, shape) => super::chain(&mut self.memo, node, *shape, names),
                    _ => None,
                } {
                    found
                } else {
                    self.fields(Some(v), names, op.span, &[], None, dot)?
                }
            }
            Arg::Pipe(p) => match (p.decl.is_empty(), p.cmds.as_slice()) {
                // `(eq .a 1)`: one command, nothing to bind.
                (true, [cmd]) => self.command(dot, cmd, None)?,
                _ => self.pipeline(dot, p)?,
            },
            Arg::Func(def) => self.call(def, dot, &[], None, op.span)?,
            Arg::Chain(base, names) => {
                let receiver = self.operand(dot, base)?;
                self.fields(Some(receiver), names, op.span, &[], None, dot)?
            }
            Arg::Literal(v) => Val::V(v.clone()),
            Arg::Number(n) => Val::V(n.ideal.clone()),
        })
    }

    /// Go's `evalArg`: evaluates `op` for a parameter of type `ty`.
    pub(super) fn arg(&mut self, dot: &Val<'a>, op: &'a Operand, ty: Ty) -> R<Value> {
        match &op.kind {
            Arg::Nil => {
                return match ty {
                    Ty::Any | Ty::Map | Ty::List => Ok(Value::Nil),
                    _ => Err(self.error(op.span, format!("cannot assign nil to {}", ty.go_name()))),
                }
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
            _ => {}
        }
        let value = self.operand(dot, op)?;
        let value = self.root.value(value);
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

    fn expected(&self, op: &Operand, what: &str) -> Box<Error> {
        self.error(
            op.span,
            format!("expected {what}; found {}", self.span_text(op.span)),
        )
    }

    fn cant_handle(&self, op: &Operand, ty: Ty) -> Box<Error> {
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

    /// A missing map key, as the missingkey option says.
    pub(super) fn missing(&self, span: Span, name: &str) -> R<Option<Val<'a>>> {
        match self.missing_key {
            MissingKey::Error => {
                Err(self.error(span, format!("map has no entry for key {name:?}")))
            }
            MissingKey::Default => Ok(None),
            MissingKey::Zero => Ok(Some(Val::NIL)),
        }
    }

    pub(super) fn not_a_method(&self, span: Span, name: &str) -> Box<Error> {
        self.error(span, format!("{name} is not a method but has arguments"))
    }

    pub(super) fn call(
        &mut self,
        def: &'static FuncDef,
        dot: &Val<'a>,
        args: &'a [Operand],
        final_: Option<Val<'a>>,
        span: Span,
    ) -> R<Val<'a>> {
        let result = self.call_unbounded(def, dot, args, final_, span)?;
        self.bounded(result, def, span, args)
    }

    /// Holds every function result to the budgets of generated values: a string of at most
    /// `MAX_STRING` bytes, a list of at most `MAX_GENERATED` elements with the lists nested in
    /// it counted as often as they occur. A loop that feeds a result back into its function
    /// (`$s = print $s $s`, `$l = list $l $l`) is thus stopped at the limit instead of doubling
    /// until memory runs out or printing it never ends. Counting the elements of nested lists
    /// is charged to the render's step budget.
    fn bounded(
        &mut self,
        result: Val<'a>,
        def: &FuncDef,
        span: Span,
        args: &[Operand],
    ) -> R<Val<'a>> {
        let over = match &result {
            Val::V(Value::String(s)) => budget(s.len() as i64, MAX_STRING).err(),
            Val::V(Value::List(items)) => {
                let (weight, too_deep) = list_weight(items, MAX_GENERATED as u64);
                if too_deep {
                    Some(format!(
                        "list nested more than {MAX_DEPTH} levels deep exceeds the template depth limit"
                    ))
                } else {
                    // The nested elements are charged: the function copied the top level
                    // anyway, and a list built by `append` one element at a time stays linear.
                    self.steps += weight.saturating_sub(items.len() as u64);
                    budget(weight as i64, MAX_GENERATED).err()
                }
            }
            _ => None,
        };
        match over {
            None => Ok(result),
            Some(m) => {
                let whole = self.command_span(span, args);
                Err(self.error(whole, format!("error calling {}: {m}", def.name)))
            }
        }
    }

    fn call_unbounded(
        &mut self,
        def: &'static FuncDef,
        dot: &Val<'a>,
        args: &'a [Operand],
        final_: Option<Val<'a>>,
        span: Span,
    ) -> R<Val<'a>> {
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
        if let (Some(text), 1) = (def.text, given) {
            if let Some(result) = self.text_call(text, dot, args, final_.as_ref())? {
                return Ok(result);
            }
        }
        let imp = match def.imp {
            Imp::Plain(f) => f,
            Imp::And | Imp::Or => {
                let want = matches!(def.imp, Imp::Or);
                let mut last = Val::NIL;
                for op in args {
                    last = self.operand(dot, op)?;
                    if last.truth() == want {
                        return Ok(last);
                    }
                }
                return Ok(final_.unwrap_or(last));
            }
        };
        let whole = self.command_span(span, args);
        let fail =
            |exec: &Self, m: String| exec.error(whole, format!("error calling {}: {m}", def.name));
        if let (Some(which), true) = (def.fast, given <= FAST_ARGS) {
            let mut buf = [Val::NIL; FAST_ARGS];
            for (slot, op) in buf.iter_mut().zip(args) {
                *slot = self.operand(dot, op)?;
            }
            if let Some(fin) = final_ {
                buf[args.len()] = fin;
            }
            let vals = &buf[..given];
            return match fast(which, vals) {
                Ok(Some(v)) => Ok(v),
                Ok(None) => {
                    let values: Vec<Value> = vals.iter().map(|v| self.root.value_ref(v)).collect();
                    expandable(def, &values).map_err(|m| fail(self, m))?;
                    imp(values).map(Val::V).map_err(|m| fail(self, m))
                }
                Err(m) => Err(fail(self, m)),
            };
        }
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
            let fin = match (self.root.value(fin), ty) {
                (Value::Nil, Ty::Any | Ty::Map | Ty::List) => Value::Nil,
                (fin, _) => self.validate(fin, ty, span)?,
            };
            values.push(fin);
        }
        expandable(def, &values).map_err(|m| fail(self, m))?;
        let result: FuncResult = imp(values);
        result.map(Val::V).map_err(|m| fail(self, m))
    }

    /// A string function of one string argument (`x | lower`, `quote .a.b`) on the borrowed
    /// text; `None` when the argument is not a string (the general call then checks and
    /// converts it; an argument read here is a plain read, so reading it again is the same).
    fn text_call(
        &mut self,
        text: TextFn,
        dot: &Val<'a>,
        args: &'a [Operand],
        final_: Option<&Val<'a>>,
    ) -> R<Option<Val<'a>>> {
        let arg = match (final_, args) {
            (Some(piped), []) => piped.clone(),
            (None, [op]) if is_plain_read(op) => self.operand(dot, op)?,
            _ => return Ok(None),
        };
        Ok(arg.as_text().map(|t| {
            let mut out = String::new();
            text(t, &mut out);
            Val::V(Value::string(out))
        }))
    }

    /// `eq .port 443` (both sides borrowed scalars, nothing built or dropped) and `and`/`or`
    /// without the general call's frame; `None` when [`Exec::call`] must decide. Only for
    /// commands without a piped-in final argument.
    #[inline]
    pub(super) fn quick_call(
        &mut self,
        def: &'static FuncDef,
        dot: &Val<'a>,
        args: &'a [Operand],
        span: Span,
    ) -> Option<R<Val<'a>>> {
        match (def.imp, def.fast, args) {
            // At least one argument: the arity `and`/`or` ask for.
            (Imp::And | Imp::Or, _, [_, ..]) => {
                let want = matches!(def.imp, Imp::Or);
                let mut last = Val::NIL;
                for op in args {
                    last = match self.operand(dot, op) {
                        Ok(value) => value,
                        Err(e) => return Some(Err(e)),
                    };
                    if last.truth() == want {
                        break;
                    }
                }
                Some(Ok(last))
            }
            // `len .spec.ports`: a plain read, so the general call may read it again.
            (_, Some(Fast::Len), [x]) if is_plain_read(x) => {
                let value = match self.operand(dot, x) {
                    Ok(value) => value,
                    Err(e) => return Some(Err(e)),
                };
                let n = match value {
                    Val::J(Json::Array(a), _) => a.len(),
                    Val::J(Json::Object(o), _) => o.len(),
                    Val::J(Json::String(s), _) => s.len(),
                    Val::Key(k) => k.len(),
                    _ => return None,
                };
                Some(Ok(Val::V(Value::GoInt(n as i64))))
            }
            (
                _,
                Some(which @ (Fast::Eq | Fast::Ne | Fast::Lt | Fast::Le | Fast::Gt | Fast::Ge)),
                [x, y],
            ) => {
                let a = self.scalar_arg(dot, x)?;
                let b = self.scalar_arg(dot, y)?;
                let result = compare(which, a, b)?;
                Some(result.map(|b| Val::V(Value::Bool(b))).map_err(|m| {
                    let whole = self.command_span(span, args);
                    self.error(whole, format!("error calling {}: {m}", def.name))
                }))
            }
            _ => None,
        }
    }

    /// An operand that is a literal or a field/variable chain ending in a JSON scalar, read
    /// without side effects; `None` leaves it (and any error it raises) to [`Exec::operand`].
    #[inline]
    pub(super) fn scalar_arg(&mut self, dot: &Val<'a>, op: &'a Operand) -> Option<Scalar<'a>> {
        let found = match &op.kind {
            Arg::Number(n) => return Some(Scalar::of_value(&n.ideal)),
            Arg::Literal(v) => return Some(Scalar::of_value(v)),
            Arg::Field(names) => match dot {
                Val::J(node, shape) => super::chain(&mut self.memo, node, *shape, names)?,
                _ => return None,
            },
            Arg::Pipe(p) => self.index_chain(dot, p)?,
            _ => return None,
        };
        super::cond::scalar_of(found)
    }

    /// `(index .a.b "k" 0)` over borrowed JSON with literal keys, as [`fast`] answers it;
    /// `None` for anything else (including an index out of range, which is an error).
    #[inline(never)]
    fn index_chain(&mut self, dot: &Val<'a>, pipe: &'a Pipeline) -> Option<Val<'a>> {
        let [cmd] = pipe.cmds.as_slice() else {
            return None;
        };
        let [func, base, keys @ ..] = cmd.args.as_slice() else {
            return None;
        };
        match (&func.kind, &base.kind, dot) {
            (Arg::Func(def), Arg::Field(names), Val::J(node, shape))
                if def.fast == Some(Fast::Index) && pipe.decl.is_empty() =>
            {
                let mut item = super::chain(&mut self.memo, node, *shape, names)?;
                for key in keys {
                    let key = match &key.kind {
                        Arg::Literal(v) | Arg::Number(crate::ast::Number { ideal: v, .. }) => {
                            Scalar::of_value(v)
                        }
                        _ => return None,
                    };
                    item = super::cond::index_step(&item, key)?;
                }
                Some(item)
            }
            _ => None,
        }
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

/// An operand whose evaluation only reads (a field chain, a variable, dot, a literal), so that
/// evaluating it twice gives the same value or error.
pub(super) fn is_plain_read(op: &Operand) -> bool {
    matches!(
        op.kind,
        Arg::Field(_) | Arg::Variable(..) | Arg::Dot | Arg::Literal(_) | Arg::Number(_)
    )
}

/// A builtin over borrowed values; `Ok(None)` when the general implementation must decide
/// (lists, maps, times or versions among the arguments).
fn fast<'a>(which: Fast, vals: &[Val<'a>]) -> Result<Option<Val<'a>>, String> {
    let bool_ = |b: bool| Ok(Some(Val::V(Value::Bool(b))));
    match (which, vals) {
        (Fast::Not, [a]) => bool_(!a.truth()),
        (Fast::Eq, [a, rest @ ..]) if !rest.is_empty() => {
            for b in rest {
                match scalar_equal(a.scalar(), b.scalar()) {
                    None => return Ok(None),
                    Some(Err(m)) => return Err(m),
                    Some(Ok(true)) => return bool_(true),
                    Some(Ok(false)) => {}
                }
            }
            bool_(false)
        }
        (Fast::Eq, _) => Err("missing argument for comparison".into()),
        (Fast::Ne, [a, b]) => match scalar_equal(a.scalar(), b.scalar()) {
            None => Ok(None),
            Some(r) => bool_(!r?),
        },
        (Fast::Lt | Fast::Le | Fast::Gt | Fast::Ge, [a, b]) => {
            let (a, b) = (a.scalar(), b.scalar());
            let less = scalar_less(a, b)?;
            // Both sides are numbers or strings of one kind here: equality cannot fail.
            let equal = || scalar_equal(a, b).and_then(Result::ok).unwrap_or(false);
            bool_(match which {
                Fast::Lt => less,
                Fast::Le => less || equal(),
                Fast::Gt => !(less || equal()),
                _ => !less,
            })
        }
        (Fast::Len, [v]) => {
            let n = match v {
                Val::J(Json::Array(a), _) => a.len(),
                Val::J(Json::Object(o), _) => o.len(),
                Val::J(Json::String(s), _) => s.len(),
                Val::Key(k) => k.len(),
                _ => return Ok(None),
            };
            Ok(Some(Val::V(Value::GoInt(n as i64))))
        }
        (Fast::Index, [item, keys @ ..]) => {
            let mut item = item.clone();
            for key in keys {
                item = match (&item, key.scalar()) {
                    (Val::J(Json::Object(entries), shape), Scalar::Str(k)) => {
                        match lookup(entries, k) {
                            Some(v) => child(*shape, k, v),
                            None => Val::NIL,
                        }
                    }
                    (Val::J(Json::Array(items), shape), Scalar::Int(i)) => {
                        match usize::try_from(i).ok().and_then(|i| items.get(i)) {
                            Some(v) => element(*shape, v),
                            None => return Err(format!("index out of range: {i}")),
                        }
                    }
                    _ => return Ok(None),
                };
            }
            Ok(Some(item))
        }
        _ => Ok(None),
    }
}

/// A two-operand comparison builtin over scalars; `None` for other builtins or when the
/// general comparison must decide.
fn compare(which: Fast, a: Scalar<'_>, b: Scalar<'_>) -> Option<Result<bool, String>> {
    match which {
        Fast::Eq => scalar_equal(a, b),
        Fast::Ne => scalar_equal(a, b).map(|r| r.map(|eq| !eq)),
        Fast::Lt | Fast::Le | Fast::Gt | Fast::Ge => Some(scalar_less(a, b).map(|less| {
            // Both sides are numbers or strings of one kind here: equality cannot fail.
            let equal = || scalar_equal(a, b).and_then(Result::ok).unwrap_or(false);
            match which {
                Fast::Lt => less,
                Fast::Le => less || equal(),
                Fast::Gt => !(less || equal()),
                _ => !less,
            }
        })),
        _ => None,
    }
}

/// Go's `eq` for two scalars; `None` when either side needs the general comparison.
fn scalar_equal(a: Scalar<'_>, b: Scalar<'_>) -> Option<Result<bool, String>> {
    Some(Ok(match (a, b) {
        (Scalar::Nil, Scalar::Nil) => true,
        (Scalar::Nil, _) | (_, Scalar::Nil) => false,
        (Scalar::Other, _) | (_, Scalar::Other) => return None,
        (Scalar::Bool(x), Scalar::Bool(y)) => x == y,
        (Scalar::Int(x), Scalar::Int(y)) => x == y,
        (Scalar::Float(x), Scalar::Float(y)) => x == y,
        (Scalar::Str(x), Scalar::Str(y)) => x == y,
        _ => return Some(Err("incompatible types for comparison".into())),
    }))
}

/// Go's `lt` for two values seen as scalars.
fn scalar_less(a: Scalar<'_>, b: Scalar<'_>) -> Result<bool, String> {
    match (a, b) {
        (Scalar::Nil | Scalar::Bool(_) | Scalar::Other, _)
        | (_, Scalar::Nil | Scalar::Bool(_) | Scalar::Other) => {
            Err("invalid type for comparison".into())
        }
        (Scalar::Int(x), Scalar::Int(y)) => Ok(x < y),
        (Scalar::Float(x), Scalar::Float(y)) => {
            Ok(x.partial_cmp(&y) == Some(std::cmp::Ordering::Less))
        }
        (Scalar::Str(x), Scalar::Str(y)) => Ok(x < y),
        _ => Err("incompatible types for comparison".into()),
    }
}
