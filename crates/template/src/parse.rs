//! Parser from tokens to the node tree, with Go's parse-time checks: undefined functions and
//! variables, misplaced `{{end}}`/`{{else}}`, `{{break}}` outside `{{range}}`, and pipeline shape.

use std::sync::Arc;

use crate::ast::{Branch, Names, Node, Span, Tree};
use crate::lex::{lex, Keyword, Tok, Token};
use crate::Engine;

mod number;
mod pipeline;

use number::number;
pub use number::parse_go_int;

/// A parse failure at a byte offset.
#[derive(Debug)]
pub struct ParseError {
    pub pos: usize,
    pub message: String,
}

type PResult<T> = Result<T, ParseError>;

/// Parses `src`; the main template is stored under `name`.
pub fn parse(src: &str, name: &str, engine: Engine) -> PResult<Tree> {
    let tokens = lex(src).map_err(|e| ParseError {
        pos: e.pos,
        message: e.message,
    })?;
    let mut p = Parser {
        nesting: 0,
        tokens,
        idx: 0,
        vars: vec!["$".into()],
        range_depth: 0,
        tree: Tree::default(),
        engine,
        names: Names::default(),
    };
    let mut main = Vec::new();
    loop {
        match p.peek().clone() {
            Tok::Eof => break,
            Tok::Text(t) => {
                p.idx += 1;
                main.push(Node::Text(t.into()));
            }
            Tok::Open => {
                if matches!(p.peek_non_space_at(1), Some(Tok::Keyword(Keyword::Define))) {
                    p.idx += 1;
                    p.skip_space();
                    p.idx += 1;
                    p.definition()?;
                    continue;
                }
                match p.action()? {
                    Item::Node(n) => main.push(n),
                    Item::End(pos) => {
                        return Err(ParseError {
                            pos,
                            message: "unexpected {{end}}".into(),
                        })
                    }
                    Item::Else(pos) => {
                        return Err(ParseError {
                            pos,
                            message: "unexpected {{else}}".into(),
                        })
                    }
                }
            }
            _ => return p.unexpected("in input"),
        }
    }
    // Go: a main template that is only whitespace does not replace a define of the same name.
    let keep_defined = main
        .iter()
        .all(|n| matches!(n, Node::Text(t) if t.trim().is_empty()))
        && p.tree.templates.contains_key(name);
    if !keep_defined {
        p.tree.templates.insert(name.into(), Arc::new(main));
    }
    Ok(p.tree)
}

enum Item {
    Node(Node),
    End(usize),
    Else(usize),
}

/// Deepest nesting of control structures and parenthesised pipelines the parser accepts, so
/// that neither parsing nor rendering can exhaust a thread's stack.
const MAX_NESTING: usize = 48;

struct Parser {
    nesting: usize,
    tokens: Vec<Token>,
    idx: usize,
    vars: Vec<String>,
    range_depth: usize,
    tree: Tree,
    engine: Engine,
    names: Names,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.idx.min(self.tokens.len() - 1)].kind
    }

    fn pos(&self) -> usize {
        self.tokens[self.idx.min(self.tokens.len() - 1)].pos
    }

    fn peek_non_space_at(&self, offset: usize) -> Option<&Tok> {
        self.tokens[self.idx + offset..]
            .iter()
            .map(|t| &t.kind)
            .find(|k| **k != Tok::Space)
    }

    fn enter(&mut self) -> PResult<()> {
        if self.nesting >= MAX_NESTING {
            return Err(ParseError {
                pos: self.pos(),
                message: format!("template nested deeper than {MAX_NESTING} levels"),
            });
        }
        self.nesting += 1;
        Ok(())
    }

    fn skip_space(&mut self) {
        while *self.peek() == Tok::Space {
            self.idx += 1;
        }
    }

    fn next_non_space(&mut self) -> Token {
        self.skip_space();
        let t = self.tokens[self.idx.min(self.tokens.len() - 1)].clone();
        self.idx += 1;
        t
    }

    fn unexpected<T>(&self, context: &str) -> PResult<T> {
        let message = match self.peek() {
            Tok::Eof => format!("unexpected EOF {context}").trim_end().to_string(),
            t => format!("unexpected {} {context}", describe(t)),
        };
        Err(ParseError {
            pos: self.pos(),
            message,
        })
    }

    fn expect_close(&mut self, context: &str) -> PResult<()> {
        let t = self.next_non_space();
        if t.kind != Tok::Close {
            self.idx -= 1;
            return self.unexpected(&format!("in {context}"));
        }
        Ok(())
    }

    /// After `{{ define`: `"name" }} list {{ end }}`.
    fn definition(&mut self) -> PResult<()> {
        let t = self.next_non_space();
        let Tok::Str(name) = t.kind else {
            self.idx -= 1;
            return self.unexpected("in define clause");
        };
        self.expect_close("define clause")?;
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let (list, end) = self.item_list()?;
        self.vars = saved;
        if let Item::Else(pos) = end {
            return Err(ParseError {
                pos,
                message: "unexpected {{else}} in define".into(),
            });
        }
        self.tree.templates.insert(name.into(), Arc::new(list));
        Ok(())
    }

    /// Parses nodes until `{{end}}` or `{{else}}`.
    fn item_list(&mut self) -> PResult<(Vec<Node>, Item)> {
        let mut list = Vec::new();
        loop {
            match self.peek().clone() {
                Tok::Eof => return self.unexpected(""),
                Tok::Text(t) => {
                    self.idx += 1;
                    list.push(Node::Text(t.into()));
                }
                Tok::Open => match self.action()? {
                    Item::Node(n) => list.push(n),
                    end => return Ok((list, end)),
                },
                _ => return self.unexpected("in input"),
            }
        }
    }

    /// Parses one action after `{{`.
    fn action(&mut self) -> PResult<Item> {
        let open = self.pos();
        self.idx += 1; // Open
        self.skip_space();
        let pos = self.pos();
        let kw = match self.peek() {
            Tok::Keyword(k) => Some(*k),
            _ => None,
        };
        if let Some(kw) = kw {
            self.idx += 1;
            match kw {
                Keyword::End => {
                    self.expect_close("end")?;
                    return Ok(Item::End(pos));
                }
                Keyword::Else => {
                    // `{{ else if ... }}` / `{{ else with ... }}` stay open for the caller.
                    if matches!(
                        self.peek_non_space_at(0),
                        Some(Tok::Keyword(Keyword::If | Keyword::With))
                    ) {
                        return Ok(Item::Else(pos));
                    }
                    self.expect_close("else")?;
                    return Ok(Item::Else(pos));
                }
                Keyword::If => return Ok(Item::Node(Node::If(self.control("if")?))),
                Keyword::With => return Ok(Item::Node(Node::With(self.control("with")?))),
                Keyword::Range => {
                    self.range_depth += 1;
                    let branch = self.control("range");
                    self.range_depth -= 1;
                    return Ok(Item::Node(Node::Range(branch?)));
                }
                Keyword::Break | Keyword::Continue => {
                    if self.range_depth == 0 {
                        let which = if kw == Keyword::Break {
                            "break"
                        } else {
                            "continue"
                        };
                        return Err(ParseError {
                            pos,
                            message: format!("{{{{{which}}}}} outside {{{{range}}}}"),
                        });
                    }
                    self.expect_close("break or continue")?;
                    return Ok(Item::Node(if kw == Keyword::Break {
                        Node::Break
                    } else {
                        Node::Continue
                    }));
                }
                Keyword::Template | Keyword::Block => {
                    return self.template(kw == Keyword::Block, open).map(Item::Node)
                }
                Keyword::Define => {
                    return Err(ParseError {
                        pos,
                        message: "unexpected <define> in command".into(),
                    });
                }
            }
        }
        let pipe = self.pipeline("command", true)?;
        Ok(Item::Node(Node::Action(pipe)))
    }

    /// `{{ template "name" [pipeline] }}` or `{{ block "name" pipeline }} list {{ end }}`.
    fn template(&mut self, block: bool, open: usize) -> PResult<Node> {
        let context = if block {
            "block clause"
        } else {
            "template clause"
        };
        let t = self.next_non_space();
        let Tok::Str(name) = t.kind else {
            self.idx -= 1;
            return self.unexpected(&format!("in {context}"));
        };
        self.skip_space();
        let pipe = if *self.peek() == Tok::Close {
            self.idx += 1;
            None
        } else {
            Some(self.pipeline(context, true)?)
        };
        if block {
            let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
            let (list, end) = self.item_list()?;
            self.vars = saved;
            if let Item::Else(pos) = end {
                return Err(ParseError {
                    pos,
                    message: "unexpected {{else}} in block clause".into(),
                });
            }
            self.tree
                .templates
                .insert(name.as_str().into(), Arc::new(list));
        }
        let span = Span {
            start: open as u32,
            end: self.tokens[self.idx - 1].pos as u32 + 2,
        };
        Ok(Node::Template {
            name: name.into(),
            pipe,
            span,
        })
    }

    /// `if`/`with`/`range`: pipeline, list, optional else (with `else if`/`else with` chains).
    fn control(&mut self, context: &str) -> PResult<Branch> {
        let mark = self.vars.len();
        self.enter()?;
        let result = self.control_inner(context);
        self.nesting -= 1;
        self.vars.truncate(mark);
        result
    }

    fn control_inner(&mut self, context: &str) -> PResult<Branch> {
        let pipe = self.pipeline(context, true)?;
        let (list, end) = self.item_list()?;
        let else_list = match end {
            Item::End(_) => None,
            Item::Else(pos) => {
                self.skip_space();
                let chained = match (context, self.peek()) {
                    ("if", Tok::Keyword(Keyword::If)) => Some("if"),
                    ("with", Tok::Keyword(Keyword::With)) => Some("with"),
                    _ => None,
                };
                if let Some(kind) = chained {
                    self.idx += 1;
                    let inner = self.control(kind)?;
                    Some(vec![if kind == "if" {
                        Node::If(inner)
                    } else {
                        Node::With(inner)
                    }])
                } else {
                    if matches!(self.peek(), Tok::Keyword(_)) {
                        return Err(ParseError {
                            pos,
                            message: format!("unexpected {{{{else}}}} in {context}"),
                        });
                    }
                    let (else_list, end) = self.item_list()?;
                    if let Item::Else(pos) = end {
                        return Err(ParseError {
                            pos,
                            message: "expected end; found {{else}}".into(),
                        });
                    }
                    Some(else_list)
                }
            }
            Item::Node(_) => None,
        };
        let cond = match context {
            "if" => Box::new(crate::cond::compile(&pipe)),
            _ => Box::new(crate::cond::Cond::General),
        };
        let declares = list
            .iter()
            .chain(else_list.iter().flatten())
            .any(|node| matches!(node, Node::Action(p) if !p.decl.is_empty()));
        Ok(Branch {
            pipe,
            cond,
            list,
            else_list,
            declares,
        })
    }
}

/// A token as Go's parse errors name it.
fn describe(t: &Tok) -> String {
    match t {
        Tok::Keyword(k) => format!("<{}>", format!("{k:?}").to_lowercase()),
        Tok::Close => "\"}}\"".into(),
        Tok::RParen => "\")\"".into(),
        Tok::LParen => "\"(\"".into(),
        Tok::Pipe => "\"|\"".into(),
        Tok::Declare => "\":=\"".into(),
        Tok::Assign => "\"=\"".into(),
        Tok::Comma => "\",\"".into(),
        Tok::Ident(s) | Tok::Number(s) | Tok::Variable(s) => format!("<{s}>"),
        Tok::Field(s) => format!("<.{s}>"),
        Tok::Str(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}
