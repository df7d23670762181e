//! Lexer for Go template text: text runs, `{{ }}` actions with trim markers and comments, and
//! the tokens inside actions. It does not know about functions or variables (the parser checks).

/// One lexical item with the byte offset where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub kind: Tok,
    pub pos: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// Literal text between actions, already trimmed by adjacent trim markers.
    Text(String),
    /// `{{` (a comment-only action yields no tokens at all).
    Open,
    /// `}}`
    Close,
    /// Whitespace inside an action: it separates command arguments.
    Space,
    Ident(String),
    Keyword(Keyword),
    /// `.name` (the name without the dot).
    Field(String),
    /// `.` alone.
    Dot,
    /// `$name` or `$` (with the `$`).
    Variable(String),
    /// A quoted or raw string, already unquoted.
    Str(String),
    /// A character constant `'x'`, as its code point.
    Char(char),
    Number(String),
    Bool(bool),
    Nil,
    LParen,
    RParen,
    Pipe,
    Declare,
    Assign,
    Comma,
    Eof,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keyword {
    If,
    Else,
    End,
    Range,
    With,
    Define,
    Template,
    Block,
    Break,
    Continue,
}

/// A lexing failure at a byte offset.
#[derive(Debug)]
pub struct LexError {
    pub pos: usize,
    pub message: String,
}

const OPEN: &str = "{{";
const CLOSE: &str = "}}";

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Splits `src` into tokens.
pub fn lex(src: &str) -> Result<Vec<Token>, LexError> {
    let bytes = src.as_bytes();
    let mut tokens = Vec::new();
    let mut pos = 0;
    let mut trim_next = false;
    loop {
        let text_start = pos;
        let open = src[pos..].find(OPEN).map(|i| pos + i);
        let text_end = open.unwrap_or(src.len());
        let mut text = &src[text_start..text_end];
        if trim_next {
            text = text.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8));
        }
        let Some(open) = open else {
            if !text.is_empty() {
                tokens.push(Token {
                    kind: Tok::Text(text.to_string()),
                    pos: text_start,
                });
            }
            tokens.push(Token {
                kind: Tok::Eof,
                pos: src.len(),
            });
            return Ok(tokens);
        };
        let mut inner = open + OPEN.len();
        let left_trim =
            bytes.get(inner) == Some(&b'-') && bytes.get(inner + 1).is_some_and(|b| is_space(*b));
        if left_trim {
            text = text.trim_end_matches(|c: char| c.is_ascii() && is_space(c as u8));
            inner += 2;
        }
        if !text.is_empty() {
            tokens.push(Token {
                kind: Tok::Text(text.to_string()),
                pos: text_start,
            });
        }
        // A comment must open right after the delimiter (and trim marker).
        if src[inner..].starts_with("/*") {
            let Some(end) = src[inner + 2..].find("*/") else {
                return Err(LexError {
                    pos: open,
                    message: "unclosed comment".into(),
                });
            };
            let mut after = inner + 2 + end + 2;
            trim_next = false;
            if src[after..].starts_with(" -}}")
                || src[after..].starts_with("\t-}}")
                || src[after..].starts_with("\n-}}")
            {
                trim_next = true;
                after += 2;
            }
            if !src[after..].starts_with(CLOSE) {
                return Err(LexError {
                    pos: open,
                    message: "comment ends before closing delimiter".into(),
                });
            }
            pos = after + CLOSE.len();
            continue;
        }
        tokens.push(Token {
            kind: Tok::Open,
            pos: open,
        });
        let (next, trim) = lex_action(src, inner, &mut tokens)?;
        pos = next;
        trim_next = trim;
    }
}

/// Lexes inside an action from `pos`; returns the offset after `}}` and whether it trims.
fn lex_action(
    src: &str,
    mut pos: usize,
    tokens: &mut Vec<Token>,
) -> Result<(usize, bool), LexError> {
    let bytes = src.as_bytes();
    let mut paren_depth = 0usize;
    loop {
        let rest = &src[pos..];
        if rest.starts_with(CLOSE) && paren_depth == 0 {
            tokens.push(Token {
                kind: Tok::Close,
                pos,
            });
            return Ok((pos + CLOSE.len(), false));
        }
        let Some(c) = rest.chars().next() else {
            return Err(LexError {
                pos,
                message: "unclosed action".into(),
            });
        };
        let start = pos;
        if c.is_ascii() && is_space(c as u8) {
            // A right trim marker is whitespace, '-', then the closing delimiter.
            let mut end = pos;
            while end < bytes.len() && is_space(bytes[end]) {
                end += 1;
            }
            if src[end..].starts_with("-}}") && end > pos {
                tokens.push(Token {
                    kind: Tok::Close,
                    pos: end,
                });
                return Ok((end + 3, true));
            }
            if src[pos..end].contains('\n') && !src[end..].starts_with(CLOSE) && paren_depth == 0 {
                // Go allows newlines inside actions since 1.16; nothing to reject here.
            }
            tokens.push(Token {
                kind: Tok::Space,
                pos,
            });
            pos = end;
            continue;
        }
        let kind = match c {
            '(' => {
                paren_depth += 1;
                pos += 1;
                Tok::LParen
            }
            ')' => {
                if paren_depth == 0 {
                    return Err(LexError {
                        pos,
                        message: "unexpected right paren".into(),
                    });
                }
                paren_depth -= 1;
                pos += 1;
                Tok::RParen
            }
            '|' => {
                pos += 1;
                Tok::Pipe
            }
            ',' => {
                pos += 1;
                Tok::Comma
            }
            '=' => {
                pos += 1;
                Tok::Assign
            }
            ':' => {
                if !rest.starts_with(":=") {
                    return Err(LexError {
                        pos,
                        message: "expected :=".into(),
                    });
                }
                pos += 2;
                Tok::Declare
            }
            '"' => {
                let (s, end) = lex_quoted(src, pos)?;
                pos = end;
                Tok::Str(s)
            }
            '`' => {
                let Some(end) = src[pos + 1..].find('`') else {
                    return Err(LexError {
                        pos,
                        message: "unterminated raw quoted string".into(),
                    });
                };
                let s = src[pos + 1..pos + 1 + end].replace('\r', "");
                pos += end + 2;
                Tok::Str(s)
            }
            '\'' => {
                let (kind, end) = lex_char(src, pos)?;
                pos = end;
                kind
            }
            '$' => {
                let end = scan_alnum(src, pos + 1);
                let name = src[pos..end].to_string();
                pos = end;
                Tok::Variable(name)
            }
            '.' => {
                let next = rest[1..].chars().next();
                if next.is_some_and(|d| d.is_ascii_digit()) {
                    let end = scan_number(src, pos);
                    let text = src[pos..end].to_string();
                    pos = end;
                    Tok::Number(text)
                } else if next.is_some_and(is_alnum) {
                    let end = scan_alnum(src, pos + 1);
                    let name = src[pos + 1..end].to_string();
                    pos = end;
                    Tok::Field(name)
                } else {
                    pos += 1;
                    Tok::Dot
                }
            }
            '+' | '-' | '0'..='9' => {
                let end = scan_number(src, pos);
                if end == pos + 1 && !c.is_ascii_digit() {
                    return Err(LexError {
                        pos,
                        message: format!("bad character {c:?}"),
                    });
                }
                let text = src[pos..end].to_string();
                if src[end..].chars().next().is_some_and(is_alnum) {
                    return Err(LexError {
                        pos,
                        message: format!("bad number syntax: {:?}", &src[pos..=end]),
                    });
                }
                pos = end;
                Tok::Number(text)
            }
            c if is_alnum(c) => {
                let end = scan_alnum(src, pos);
                let word = &src[pos..end];
                pos = end;
                match word {
                    "if" => Tok::Keyword(Keyword::If),
                    "else" => Tok::Keyword(Keyword::Else),
                    "end" => Tok::Keyword(Keyword::End),
                    "range" => Tok::Keyword(Keyword::Range),
                    "with" => Tok::Keyword(Keyword::With),
                    "define" => Tok::Keyword(Keyword::Define),
                    "template" => Tok::Keyword(Keyword::Template),
                    "block" => Tok::Keyword(Keyword::Block),
                    "break" => Tok::Keyword(Keyword::Break),
                    "continue" => Tok::Keyword(Keyword::Continue),
                    "true" => Tok::Bool(true),
                    "false" => Tok::Bool(false),
                    "nil" => Tok::Nil,
                    _ => Tok::Ident(word.to_string()),
                }
            }
            c => {
                return Err(LexError {
                    pos,
                    message: format!("unrecognized character in action: {c:?}"),
                })
            }
        };
        tokens.push(Token { kind, pos: start });
    }
}

fn scan_alnum(src: &str, pos: usize) -> usize {
    src[pos..]
        .char_indices()
        .find(|(_, c)| !is_alnum(*c))
        .map(|(i, _)| pos + i)
        .unwrap_or(src.len())
}

fn scan_number(src: &str, pos: usize) -> usize {
    let b = src.as_bytes();
    let mut i = pos;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let mut digits: &[u8] = b"0123456789_";
    let mut hex = false;
    if i + 1 < b.len() && b[i] == b'0' {
        match b[i + 1] {
            b'x' | b'X' => {
                digits = b"0123456789abcdefABCDEF_";
                hex = true;
                i += 2;
            }
            b'o' | b'O' => {
                digits = b"01234567_";
                i += 2;
            }
            b'b' | b'B' => {
                digits = b"01_";
                i += 2;
            }
            _ => {}
        }
    }
    while i < b.len() && digits.contains(&b[i]) {
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && digits.contains(&b[i]) {
            i += 1;
        }
    }
    let exp: &[u8] = if hex { b"pP" } else { b"eE" };
    if digits.len() >= 11 && i < b.len() && exp.contains(&b[i]) {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
    }
    i
}

/// Lexes a double-quoted string with Go escapes; returns it and the offset after the quote.
fn lex_quoted(src: &str, pos: usize) -> Result<(String, usize), LexError> {
    let mut out = String::new();
    let mut chars = src[pos + 1..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, pos + 1 + i + 1)),
            '\n' => break,
            '\\' => {
                let (c, _) = unescape(&mut chars, '"').ok_or_else(|| LexError {
                    pos,
                    message: "invalid syntax in quoted string".into(),
                })?;
                out.push(c);
            }
            c => out.push(c),
        }
    }
    Err(LexError {
        pos,
        message: "unterminated quoted string".into(),
    })
}

/// Lexes `'x'`. sluice accepts a multi-character single-quoted literal as a string (a
/// deliberate extension, ADR 0003); Go rejects it as a malformed character constant.
fn lex_char(src: &str, pos: usize) -> Result<(Tok, usize), LexError> {
    let mut out = String::new();
    let mut chars = src[pos + 1..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => {
                let end = pos + 1 + i + 1;
                let mut it = out.chars();
                return match (it.next(), it.next()) {
                    (Some(c), None) => Ok((Tok::Char(c), end)),
                    (None, _) => Err(LexError {
                        pos,
                        message: "empty character constant".into(),
                    }),
                    _ => Ok((Tok::Str(out), end)),
                };
            }
            '\n' => break,
            '\\' => {
                let (c, _) = unescape(&mut chars, '\'').ok_or_else(|| LexError {
                    pos,
                    message: "invalid escape in character constant".into(),
                })?;
                out.push(c);
            }
            c => out.push(c),
        }
    }
    Err(LexError {
        pos,
        message: "unterminated character constant".into(),
    })
}

fn unescape(chars: &mut std::str::CharIndices<'_>, quote: char) -> Option<(char, ())> {
    let (_, c) = chars.next()?;
    let simple = match c {
        'a' => Some('\x07'),
        'b' => Some('\x08'),
        'f' => Some('\x0c'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\x0b'),
        '\\' => Some('\\'),
        c if c == quote => Some(c),
        _ => None,
    };
    if let Some(s) = simple {
        return Some((s, ()));
    }
    let hex_digits = |chars: &mut std::str::CharIndices<'_>, n: usize, radix: u32| -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            v = v * radix + chars.next()?.1.to_digit(radix)?;
        }
        Some(v)
    };
    let code = match c {
        'x' => hex_digits(chars, 2, 16)?,
        'u' => hex_digits(chars, 4, 16)?,
        'U' => hex_digits(chars, 8, 16)?,
        '0'..='7' => c.to_digit(8)? * 64 + hex_digits(chars, 2, 8)?,
        _ => return None,
    };
    Some((char::from_u32(code)?, ()))
}
