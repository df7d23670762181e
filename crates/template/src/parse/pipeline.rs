//! Pipelines and their parts: declarations, commands joined by `|`, operands and field
//! chains, literals; with Go's parse-time checks of their shape (undefined functions and
//! variables, misplaced arguments). Actions and control structures are in `parse.rs`.

use super::{describe, number, PResult, ParseError, Parser};
use crate::ast::{Arg, Command, Name, Number, Operand, Pipeline, Span};
use crate::funcs;
use crate::lex::Tok;
use crate::value::Value;

impl Parser {
    /// A pipeline up to `}}` (when `at_close`) or `)`.
    pub(super) fn pipeline(&mut self, context: &str, at_close: bool) -> PResult<Pipeline> {
        self.skip_space();
        let start = self.pos();
        let mut decl = Vec::new();
        let mut is_assign = false;
        // Declarations: `$x :=`, `$x =`, `$k, $v :=` (range only).
        if let Tok::Variable(_) = self.peek() {
            let save = self.idx;
            let mut names = Vec::new();
            while let Tok::Variable(name) = self.peek().clone() {
                self.idx += 1;
                self.skip_space();
                match self.peek() {
                    Tok::Declare | Tok::Assign => {
                        is_assign = *self.peek() == Tok::Assign;
                        self.idx += 1;
                        names.push(name);
                        decl = names.clone();
                        break;
                    }
                    Tok::Comma if context == "range" && names.is_empty() => {
                        self.idx += 1;
                        self.skip_space();
                        names.push(name);
                        continue;
                    }
                    _ => break,
                }
            }
            if decl.is_empty() {
                self.idx = save;
            } else if decl.len() > 1 && is_assign && context != "range" {
                return Err(ParseError {
                    pos: start,
                    message: "too many declarations".into(),
                });
            }
            for name in &decl {
                if is_assign && !self.vars.contains(name) {
                    return Err(ParseError {
                        pos: start,
                        message: format!("undefined variable {name:?}"),
                    });
                }
                self.vars.push(name.clone());
            }
        }
        let mut cmds = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                Tok::Close if at_close => {
                    self.idx += 1;
                    break;
                }
                Tok::RParen if !at_close => {
                    self.idx += 1;
                    break;
                }
                Tok::Pipe if !cmds.is_empty() => {
                    self.idx += 1;
                }
                _ => cmds.push(self.command(context, at_close)?),
            }
        }
        if cmds.is_empty() {
            return Err(ParseError {
                pos: start,
                message: format!("missing value for {context}"),
            });
        }
        for (i, cmd) in cmds.iter().enumerate().skip(1) {
            if matches!(
                cmd.args[0].kind,
                Arg::Literal(_) | Arg::Number(_) | Arg::Nil | Arg::Dot
            ) {
                return Err(ParseError {
                    pos: cmd.span.start as usize,
                    message: format!("non executable command in pipeline stage {}", i + 1),
                });
            }
        }
        let end = self.tokens[self.idx - 1].pos;
        let decl = decl.into_iter().map(String::into_boxed_str).collect();
        Ok(Pipeline {
            span: Span {
                start: start as u32,
                end: end as u32,
            },
            decl,
            is_assign,
            cmds,
        })
    }

    pub(super) fn command(&mut self, context: &str, at_close: bool) -> PResult<Command> {
        let start = self.pos();
        let mut args = Vec::new();
        let mut end = start;
        loop {
            self.skip_space();
            match self.peek() {
                Tok::Close | Tok::RParen | Tok::Pipe => break,
                Tok::Eof => return self.unexpected(&format!("in {context}")),
                _ => {}
            }
            let op = self.operand()?;
            end = op.span.end as usize;
            args.push(op);
            // Arguments must be separated by space.
            match self.peek() {
                Tok::Space | Tok::Close | Tok::RParen | Tok::Pipe => {}
                _ => return self.unexpected("in operand"),
            }
        }
        let _ = at_close;
        if args.is_empty() {
            return Err(ParseError {
                pos: start,
                message: "empty command".into(),
            });
        }
        Ok(Command {
            span: Span {
                start: start as u32,
                end: end as u32,
            },
            args,
        })
    }

    /// A term followed by any `.field` chain.
    pub(super) fn operand(&mut self) -> PResult<Operand> {
        let start = self.pos();
        let term = self.term()?;
        let mut fields: Vec<Name> = Vec::new();
        while let Tok::Field(f) = self.peek() {
            let name = f.clone();
            fields.push(self.names.get(&name));
            self.idx += 1;
        }
        let end = self.tokens[self.idx].pos;
        let span = Span {
            start: start as u32,
            end: end as u32,
        };
        if fields.is_empty() {
            return Ok(Operand { kind: term, span });
        }
        let kind = match term {
            Arg::Field(base) => Arg::Field(self.names.chain([&base[..], &fields].concat())),
            Arg::Variable(name, base) => {
                Arg::Variable(name, self.names.chain([&base[..], &fields].concat()))
            }
            Arg::Literal(_) | Arg::Number(_) | Arg::Nil | Arg::Dot => {
                return Err(ParseError {
                    pos: start,
                    message: "unexpected . after term".into(),
                });
            }
            other => Arg::Chain(
                Box::new(Operand { kind: other, span }),
                self.names.chain(fields),
            ),
        };
        Ok(Operand { kind, span })
    }

    pub(super) fn term(&mut self) -> PResult<Arg> {
        let t = self.tokens[self.idx].clone();
        self.idx += 1;
        Ok(match t.kind {
            Tok::Ident(name) => match funcs::lookup(&name, self.engine) {
                Some(f) => {
                    self.tree.mutates |= funcs::mutates_maps(f);
                    Arg::Func(f)
                }
                None => {
                    return Err(ParseError {
                        pos: t.pos,
                        message: format!("function {name:?} not defined"),
                    })
                }
            },
            Tok::Dot => Arg::Dot,
            Tok::Nil => Arg::Nil,
            Tok::Variable(name) => {
                if !self.vars.contains(&name) {
                    return Err(ParseError {
                        pos: t.pos,
                        message: format!("undefined variable {name:?}"),
                    });
                }
                Arg::Variable(name.into(), self.names.chain(Vec::new()))
            }
            Tok::Field(f) => {
                let name = self.names.get(&f);
                Arg::Field(self.names.chain(vec![name]))
            }
            Tok::Bool(b) => Arg::Literal(Value::Bool(b)),
            Tok::Str(s) => Arg::Literal(Value::string(s)),
            Tok::Char(c) => {
                let n = c as i64;
                Arg::Number(Number {
                    int: Some(n),
                    float: Some(n as f64),
                    ideal: Value::GoInt(n),
                })
            }
            Tok::Number(text) => Arg::Number(number(&text).map_err(|message| ParseError {
                pos: t.pos,
                message,
            })?),
            Tok::LParen => {
                self.enter()?;
                let pipe = self.pipeline("parenthesized pipeline", false);
                self.nesting -= 1;
                let pipe = pipe?;
                Arg::Pipe(Box::new(pipe))
            }
            other => {
                self.idx -= 1;
                return Err(ParseError {
                    pos: t.pos,
                    message: format!("unexpected {} in operand", describe(&other)),
                });
            }
        })
    }
}
