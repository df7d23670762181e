//! `range` over borrowed JSON arrays and objects, owned lists and maps: Go's iteration order
//! (a JSON object's entries are sorted by key, ADR 0015), `$i, $v` bindings, `break`/`continue`, `else`
//! for empty collections, and a step of the budget per iteration.

use crate::doc::Doc as Json;

use super::{chain, Exec, Flow, MAX_STEPS, R};
use crate::ast::{Arg, Branch, Operand};
use crate::val::{element, Shape, Val};
use crate::value::Value;

impl<'a> Exec<'a> {
    // Out of line: inlined, its locals would widen the frame of every `walk`.
    #[inline(never)]
    pub(super) fn range(&mut self, b: &'a Branch, dot: &Val<'a>) -> R<()> {
        let mark = self.vars.len();
        // One command (the usual `range .a.b`) without the loop over commands, and a lone
        // field chain over borrowed data without the general command's frame (`command`
        // reads it the same way first; it is left whatever the chain does not find).
        let value = match b.pipe.cmds.as_slice() {
            [cmd] => match (dot, cmd.args.as_slice()) {
                (
                    Val::J(node, shape),
                    [Operand {
                        kind: Arg::Field(names),
                        ..
                    }],
                ) => match chain(&mut self.memo, node, *shape, names) {
                    Some(value) => value,
                    None => self.command(dot, cmd, None)?,
                },
                _ => self.command(dot, cmd, None)?,
            },
            cmds => self.commands(dot, cmds)?,
        };
        // A borrowed array, the usual case, here; the rest out of line, so that this frame
        // stays small.
        if let (Val::J(Json::Array(items), shape), false) = (&value, b.pipe.decl.len() > 1) {
            if !items.is_empty() {
                for item in items {
                    let elem = element(*shape, item);
                    if let Flow::Break = self.range_body(b, None, &elem, mark)? {
                        break;
                    }
                }
                return Ok(());
            }
        }
        self.range_value(b, dot, value, mark)
    }

    /// `range` over `value`, anything but a non-empty borrowed array ranged with at most one
    /// variable.
    #[inline(never)]
    fn range_value(&mut self, b: &'a Branch, dot: &Val<'a>, value: Val<'a>, mark: usize) -> R<()> {
        // The key or index is built only when the range binds it (`$i, $v :=`): an unbound
        // one would be built and dropped in every iteration.
        let wants_key = b.pipe.decl.len() > 1;
        let index = |i: usize| {
            if wants_key {
                Some(Val::V(Value::GoInt(i as i64)))
            } else {
                None
            }
        };
        let empty;
        match &value {
            Val::J(Json::Array(items), shape) => {
                empty = items.is_empty();
                for (i, item) in items.iter().enumerate() {
                    let elem = element(*shape, item);
                    if let Flow::Break = self.range_body(b, index(i), &elem, mark)? {
                        break;
                    }
                }
            }
            Val::J(Json::Object(entries), Shape::Plain) => {
                empty = entries.is_empty();
                // Go ranges over keys sorted by bytes; a JSON object is a sorted map
                // (ADR 0011), so its own order is Go's.
                for (k, v) in entries {
                    let key = wants_key.then_some(Val::Key(k));
                    if let Flow::Break = self.range_body(b, key, &Val::J(v, Shape::Plain), mark)? {
                        break;
                    }
                }
            }
            Val::J(Json::Null, _) | Val::V(Value::Nil) => empty = true,
            Val::V(Value::List(items)) => {
                empty = items.is_empty();
                for (i, elem) in items.iter().enumerate() {
                    if let Flow::Break =
                        self.range_body(b, index(i), &Val::V(elem.clone()), mark)?
                    {
                        break;
                    }
                }
            }
            other => {
                let value = self.root.value_ref(other);
                match &value {
                    Value::Map(m) => {
                        // A snapshot: the body may modify the map (Go iterates over sorted keys too).
                        let entries: Vec<(Option<Val<'a>>, Val<'a>)> = m
                            .read()
                            .iter()
                            .map(|(k, v)| {
                                let key = wants_key.then(|| Val::V(Value::str(k)));
                                (key, Val::V(v.clone()))
                            })
                            .collect();
                        empty = entries.is_empty();
                        for (key, elem) in entries {
                            if let Flow::Break = self.range_body(b, key, &elem, mark)? {
                                break;
                            }
                        }
                    }
                    other => {
                        let shown = crate::gofmt::to_string(other);
                        return Err(
                            self.error(b.pipe.span, format!("range can't iterate over {shown}"))
                        );
                    }
                }
            }
        }
        if empty {
            if let Some(else_list) = &b.else_list {
                self.walk(else_list, dot)?;
            }
        }
        Ok(())
    }

    /// One iteration; `key` is the key or index when the range binds two variables. Inlined
    /// into `range`'s loops, which are out of line of the walk: a call per iteration cost more
    /// than the iteration's own bookkeeping.
    #[inline(always)]
    fn range_body(
        &mut self,
        b: &'a Branch,
        key: Option<Val<'a>>,
        elem: &Val<'a>,
        mark: usize,
    ) -> R<Flow> {
        // Every iteration costs a step, even with an empty body.
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(self.error(b.pipe.span, "template exceeded its budget of steps"));
        }
        match b.pipe.decl.as_slice() {
            [] => {}
            // `$v :=` declares: a push, without the call that looks for `$v` to assign.
            [v] if !b.pipe.is_assign => self.vars.push((v, elem.clone())),
            [v] => self.bind(v, elem.clone(), true),
            [k, v, ..] => {
                self.bind(k, key.unwrap_or(Val::NIL), b.pipe.is_assign);
                self.bind(v, elem.clone(), b.pipe.is_assign);
            }
        }
        let flow = self.walk(&b.list, elem)?;
        self.vars.truncate(mark);
        Ok(flow)
    }
}
