//! Printing pipelines of string functions without building values: `{{ .a | quote }}`,
//! `{{ lower .a }}`, `{{ printf "%s-%d" .ns 1 | upper | quote }}`. The head of the pipeline
//! yields text (borrowed, or written by a plain `printf` into a buffer the render reuses), each
//! piped string function writes its result into the next buffer, and the last one writes to the
//! output. Anything else about such a pipeline (a head that is not a string, a `printf` verb
//! beyond the plain ones) takes the general path from the point where it applies, so output and
//! errors are the general path's.

use super::call::{is_plain_read, FAST_ARGS};
use super::{Exec, R};
use crate::ast::{Arg, Command, Pipeline};
use crate::funcs::TextFn;
use crate::printf::sprintf_plain;
use crate::val::{Scalar, Val};
use crate::Engine;

impl<'a> Exec<'a> {
    /// Prints `pipe` when it is a printf or a pipeline ending in string functions of one string
    /// argument; `false` when that does not apply and nothing was evaluated.
    pub(super) fn print_text_call(&mut self, pipe: &'a Pipeline, dot: &Val<'a>) -> R<bool> {
        if self.engine != Engine::Text || !pipe.decl.is_empty() {
            return Ok(false);
        }
        let cmds = pipe.cmds.as_slice();
        // The trailing piped string functions (`| upper | quote`), after a head of at least
        // one command.
        let mut split = cmds.len();
        while split > 1 && piped_text(&cmds[split - 1]).is_some() {
            split -= 1;
        }
        let (head, tail) = cmds.split_at(split);
        let Some((last, middle)) = tail.split_last() else {
            return match head {
                [cmd] => self.print_lone_call(cmd, dot),
                _ => Ok(false),
            };
        };
        let mut bufs = std::mem::take(&mut self.text_bufs);
        let [first, a, b] = &mut bufs;
        first.clear();
        let value = match head {
            [cmd] if self.plain_printf(cmd, dot, first) => None,
            _ => Some(self.commands(dot, head)?),
        };
        let text = match &value {
            None => Some(first.as_str()),
            Some(v) => v.as_text(),
        };
        let Some(text) = text else {
            // Not a string: the general calls check and convert it.
            let mut value = value.unwrap_or(Val::NIL);
            for cmd in tail {
                value = self.command(dot, cmd, Some(value))?;
            }
            self.print(&value, pipe.span)?;
            return Ok(true);
        };
        let mut fns = middle.iter().filter_map(piped_text);
        let text = match fns.next() {
            None => text,
            Some(f) => {
                // `a` holds the latest result: the next one goes into `b`, then they swap.
                a.clear();
                f(text, a);
                for f in fns {
                    b.clear();
                    f(a, b);
                    std::mem::swap(a, b);
                }
                a.as_str()
            }
        };
        if let Some(f) = piped_text(last) {
            f(text, &mut self.out);
        }
        self.text_bufs = bufs;
        Ok(true)
    }

    /// `{{ lower .a }}` (a string function of one plainly read operand) or `{{ printf ... }}`
    /// with plain verbs, printed straight to the output.
    fn print_lone_call(&mut self, cmd: &'a Command, dot: &Val<'a>) -> R<bool> {
        let mark = self.out.len();
        let mut out = std::mem::take(&mut self.out);
        let printed = self.plain_printf(cmd, dot, &mut out);
        self.out = out;
        if printed {
            return Ok(true);
        }
        self.out.truncate(mark);
        let (text, op) = match cmd.args.as_slice() {
            [func, op] if is_plain_read(op) => match &func.kind {
                Arg::Func(def) => match def.text {
                    Some(text) => (text, op),
                    None => return Ok(false),
                },
                _ => return Ok(false),
            },
            _ => return Ok(false),
        };
        let value = self.operand(dot, op)?;
        if let Some(t) = value.as_text() {
            text(t, &mut self.out);
            return Ok(true);
        }
        // Not a string: the general call checks and converts it (the operand is re-read).
        let result = self.command(dot, cmd, None)?;
        self.print(&result, cmd.span)?;
        Ok(true)
    }

    /// `printf "literal format" args...` whose verbs are plain (`%s %d %v %%`) and whose
    /// arguments are literals or field chains ending in strings, integers or bools, appended to
    /// `out`; `false` (with `out` possibly written to) when the general `printf` must do it.
    /// Only reads: the general path may evaluate the same command afterwards.
    fn plain_printf(&mut self, cmd: &'a Command, dot: &Val<'a>, out: &mut String) -> bool {
        let [func, format, args @ ..] = cmd.args.as_slice() else {
            return false;
        };
        let (Arg::Func(def), Arg::Literal(format)) = (&func.kind, &format.kind) else {
            return false;
        };
        let Some(format) = format.as_str() else {
            return false;
        };
        if def.name != "printf" || args.len() > FAST_ARGS {
            return false;
        }
        let mut scalars = [Scalar::Nil; FAST_ARGS];
        for (slot, op) in scalars.iter_mut().zip(args) {
            match self.scalar_arg(dot, op) {
                Some(scalar) => *slot = scalar,
                None => return false,
            }
        }
        sprintf_plain(format, &scalars[..args.len()], out)
    }
}

/// The string function of a command that is only a piped function name (`| quote`).
fn piped_text(cmd: &Command) -> Option<TextFn> {
    match cmd.args.as_slice() {
        [func] => match &func.kind {
            Arg::Func(def) => def.text,
            _ => None,
        },
        _ => None,
    }
}
