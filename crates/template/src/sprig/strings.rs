//! sprig string functions: case, trim, truncate/abbreviate, indent, quote, replace, split/join,
//! wrap, regular expressions (Go's RE2 syntax through the `regex` crate), random strings.

use rand::Rng;

use super::{byte_slice, gocase, strslice, strval, wordcase};
use crate::funcs::{arg_int, arg_str, budget, def, FuncDef, FuncResult, MAX_STRING};
use crate::gofmt::push_quoted;
use crate::value::{Map, Value};

/// sprig's `quote`: every non-nil argument as a Go string literal, separated by spaces.
fn quote_all(args: Vec<Value>) -> FuncResult {
    let mut out = String::new();
    for v in args.iter().filter(|v| !v.is_nil()) {
        if !out.is_empty() {
            out.push(' ');
        }
        match v {
            Value::String(text) => push_quoted(&mut out, text),
            other => push_quoted(&mut out, &strval(other)),
        }
    }
    s(out)
}

fn s(v: String) -> FuncResult {
    Ok(Value::string(v))
}

/// The text a [`crate::funcs::TextFn`]-style function makes of `t`.
fn text_of(f: fn(&mut String, &str), t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    f(&mut out, t);
    out
}

pub static FUNCS: &[FuncDef] = &[
    def!("hello", [], |_| s("Hello!".into())),
    def!("upper", [Str], |a| s(text_of(gocase::push_upper, arg_str(&a, 0))))
        .text(|t, out| gocase::push_upper(out, t)),
    def!("lower", [Str], |a| s(text_of(gocase::push_lower, arg_str(&a, 0))))
        .text(|t, out| gocase::push_lower(out, t)),
    def!("title", [Str], |a| s(title(arg_str(&a, 0)))).text(|t, out| out.push_str(&title(t))),
    def!("untitle", [Str], |a| s(map_words(arg_str(&a, 0), |w| {
        first_to(w, false)
    }))),
    def!("substr", [Int, Int, Str], substr),
    def!(
        "repeat",
        [Int, Str],
        |a| match usize::try_from(arg_int(&a, 0)) {
            Ok(n) => {
                budget(
                    (n as i64).saturating_mul(arg_str(&a, 1).len() as i64),
                    MAX_STRING,
                )?;
                s(arg_str(&a, 1).repeat(n))
            }
            Err(_) => Err("strings: negative Repeat count".into()),
        }
    ),
    def!("trim", [Str], |a| s(arg_str(&a, 0).trim().to_string()))
        .text(|t, out| out.push_str(t.trim())),
    def!("trimAll", [Str, Str], trim_all),
    def!("trimall", [Str, Str], trim_all),
    def!("trimSuffix", [Str, Str], |a| s(arg_str(&a, 1)
        .strip_suffix(arg_str(&a, 0))
        .unwrap_or(arg_str(&a, 1))
        .into())),
    def!("trimPrefix", [Str, Str], |a| s(arg_str(&a, 1)
        .strip_prefix(arg_str(&a, 0))
        .unwrap_or(arg_str(&a, 1))
        .into())),
    // goutils.DeleteWhiteSpace reads the text byte by byte as Latin-1, dropping the bytes that
    // are white space as Latin-1 characters; when it drops any, `é` comes out as `Ã©`.
    def!("nospace", [Str], |a| {
        let text = arg_str(&a, 0);
        let kept: String = text
            .bytes()
            .map(char::from)
            .filter(|c| !c.is_whitespace())
            .collect();
        // Nothing dropped: goutils returns the text itself.
        s(if kept.chars().count() == text.len() {
            text.to_string()
        } else {
            kept
        })
    }),
    def!("initials", [Str], |a| s(wordcase::initials(arg_str(&a, 0)))),
    def!("randAlphaNum", [Int], |a| random(
        arg_int(&a, 0),
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    )),
    def!("randAlpha", [Int], |a| random(
        arg_int(&a, 0),
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    )),
    def!("randAscii", [Int], |a| random(
        arg_int(&a, 0),
        &(32u8..127).collect::<Vec<u8>>()
    )),
    def!("randNumeric", [Int], |a| random(
        arg_int(&a, 0),
        b"0123456789"
    )),
    def!("swapcase", [Str], |a| s(wordcase::swapcase(arg_str(&a, 0)))),
    def!("shuffle", [Str], shuffle),
    def!("snakecase", [Str], |a| s(wordcase::lower_words(arg_str(&a, 0), '_'))),
    def!("kebabcase", [Str], |a| s(wordcase::lower_words(arg_str(&a, 0), '-'))),
    def!("camelcase", [Str], |a| s(wordcase::camelcase(arg_str(&a, 0)))),
    def!("wrap", [Int, Str], |a| s(wrap(
        arg_str(&a, 1),
        arg_int(&a, 0),
        "\n",
        false
    ))),
    def!("wrapWith", [Int, Str, Str], |a| s(wrap(
        arg_str(&a, 2),
        arg_int(&a, 0),
        arg_str(&a, 1),
        true
    ))),
    def!("contains", [Str, Str], |a| Ok(Value::Bool(
        arg_str(&a, 1).contains(arg_str(&a, 0))
    ))),
    def!("hasPrefix", [Str, Str], |a| Ok(Value::Bool(
        arg_str(&a, 1).starts_with(arg_str(&a, 0))
    ))),
    def!("hasSuffix", [Str, Str], |a| Ok(Value::Bool(
        arg_str(&a, 1).ends_with(arg_str(&a, 0))
    ))),
    def!("quote", [], ...Any, quote_all).text(|t, out| push_quoted(out, t)),
    def!("squote", [], ...Any, |a| s(a.iter().filter(|v| !v.is_nil()).map(|v| format!("'{}'", strval(v))).collect::<Vec<_>>().join(" "))).text(|t, out| {
        out.push('\'');
        out.push_str(t);
        out.push('\'');
    }),
    def!("cat", [], ...Any, |a| s(a.iter().filter(|v| !v.is_nil()).map(strval).collect::<Vec<_>>().join(" "))),
    def!("indent", [Int, Str], |a| s(indent(
        arg_int(&a, 0),
        arg_str(&a, 1)
    ))),
    def!("nindent", [Int, Str], |a| s(format!(
        "\n{}",
        indent(arg_int(&a, 0), arg_str(&a, 1))
    ))),
    def!("replace", [Str, Str, Str], |a| s(
        arg_str(&a, 2).replace(arg_str(&a, 0), arg_str(&a, 1))
    )),
    def!("plural", [Str, Str, Int], |a| s(if arg_int(&a, 2) == 1 {
        arg_str(&a, 0)
    } else {
        arg_str(&a, 1)
    }
    .into())),
    def!("trunc", [Int, Str], trunc),
    def!("abbrev", [Int, Str], |a| s(abbrev(
        arg_str(&a, 1),
        arg_int(&a, 0)
    ))),
    def!("abbrevboth", [Int, Int, Str], abbrevboth),
    def!("split", [Str, Str], |a| Ok(indexed(go_split(
        arg_str(&a, 1),
        arg_str(&a, 0),
        -1
    )))),
    def!("splitList", [Str, Str], |a| Ok(Value::list(
        go_split(arg_str(&a, 1), arg_str(&a, 0), -1)
            .into_iter()
            .map(Value::str)
            .collect()
    ))),
    def!("splitn", [Str, Int, Str], splitn),
    def!("join", [Str, Any], |a| s(
        strslice(&a[1]).join(arg_str(&a, 0))
    )),
    def!("sortAlpha", [Any], |a| {
        let mut l = strslice(&a[0]);
        l.sort();
        Ok(Value::list(l.into_iter().map(Value::string).collect()))
    }),
    def!("regexMatch", [Str, Str], |a| Ok(Value::Bool(
        regex(&a, 0)
            .map(|r| r.is_match(arg_str(&a, 1)))
            .unwrap_or(false)
    ))),
    def!("mustRegexMatch", [Str, Str], |a| Ok(Value::Bool(
        regex(&a, 0)?.is_match(arg_str(&a, 1))
    ))),
    def!("regexFindAll", [Str, Str, Int], |a| Ok(
        find_all(a).unwrap_or_else(|_| Value::list(vec![]))
    )),
    def!("mustRegexFindAll", [Str, Str, Int], find_all),
    def!("regexFind", [Str, Str], |a| Ok(
        find(a).unwrap_or_else(|_| Value::str(""))
    )),
    def!("mustRegexFind", [Str, Str], find),
    def!("regexReplaceAll", [Str, Str, Str], |a| Ok(replace_all(
        &a, false
    )
    .unwrap_or_else(|_| a[1].clone()))),
    def!("mustRegexReplaceAll", [Str, Str, Str], |a| replace_all(
        &a, false
    )),
    def!("regexReplaceAllLiteral", [Str, Str, Str], |a| Ok(
        replace_all(&a, true).unwrap_or_else(|_| a[1].clone())
    )),
    def!("mustRegexReplaceAllLiteral", [Str, Str, Str], |a| {
        replace_all(&a, true)
    }),
    def!("regexSplit", [Str, Str, Int], |a| Ok(
        regex_split(a).unwrap_or_else(|_| Value::list(vec![]))
    )),
    def!("mustRegexSplit", [Str, Str, Int], regex_split),
    def!("regexQuoteMeta", [Str], |a| s(quote_meta(arg_str(&a, 0)))),
];

fn title(s: &str) -> String {
    // strings.Title: upper-case letters that follow a separator (not letter, digit or '_').
    let mut out = String::with_capacity(s.len());
    let mut prev_sep = true;
    for c in s.chars() {
        if prev_sep {
            out.push(gocase::title(c));
        } else {
            out.push(c);
        }
        // Go's `isSeparator`: any ASCII character but letters, digits and `_`; beyond ASCII
        // only white space (a letter, a digit or a symbol like `…` does not start a word).
        prev_sep = if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else {
            c.is_whitespace()
        };
    }
    out
}

fn first_to(w: &str, upper: bool) -> String {
    let mut chars = w.chars();
    match chars.next() {
        Some(c) if upper => std::iter::once(gocase::upper(c)).chain(chars).collect(),
        Some(c) => std::iter::once(gocase::lower(c)).chain(chars).collect(),
        None => String::new(),
    }
}

/// Applies `f` to each whitespace-delimited word, keeping the whitespace.
fn map_words(s: &str, f: impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    for c in s.chars() {
        if c.is_whitespace() {
            out.push_str(&f(&word));
            word.clear();
            out.push(c);
        } else {
            word.push(c);
        }
    }
    out.push_str(&f(&word));
    out
}

fn substr(a: Vec<Value>) -> FuncResult {
    let (start, end, s) = (arg_int(&a, 0), arg_int(&a, 1), arg_str(&a, 2));
    let len = s.len() as i64;
    let slice = |from: i64, to: i64| -> FuncResult {
        if from < 0 || to > len || from > to {
            return Err(format!(
                "runtime error: slice bounds out of range [{from}:{to}]"
            ));
        }
        Ok(Value::string(byte_slice(s, from as usize, to as usize)))
    };
    if start < 0 {
        return slice(0, end);
    }
    if end < 0 || end > len {
        return slice(start, len);
    }
    slice(start, end)
}

fn trim_all(a: Vec<Value>) -> FuncResult {
    let cutset: Vec<char> = arg_str(&a, 0).chars().collect();
    s(arg_str(&a, 1)
        .trim_matches(|c| cutset.contains(&c))
        .to_string())
}

fn random(n: i64, alphabet: &[u8]) -> FuncResult {
    budget(n, MAX_STRING)?;
    let n = usize::try_from(n).map_err(|_| "negative length".to_string())?;
    let mut rng = rand::thread_rng();
    s((0..n)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
        .collect())
}

fn shuffle(a: Vec<Value>) -> FuncResult {
    use rand::seq::SliceRandom;
    let mut chars: Vec<char> = arg_str(&a, 0).chars().collect();
    chars.shuffle(&mut rand::thread_rng());
    s(chars.into_iter().collect())
}

/// goutils `WrapCustom`: breaks at the last space within the width; long words are cut
/// (`wrapWith`) or left whole (`wrap`). Byte-based, like the Go original.
fn wrap(s: &str, width: i64, newline: &str, long_words: bool) -> String {
    if s.is_empty() {
        return String::new();
    }
    let newline = if newline.is_empty() { "\n" } else { newline };
    let width = width.max(1) as usize;
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(s.len());
    let mut offset = 0;
    while b.len() - offset > width {
        if b[offset] == b' ' {
            offset += 1;
            continue;
        }
        let end = (width + offset + 1).min(b.len());
        match b[offset..end].iter().rposition(|c| *c == b' ') {
            Some(space) => {
                out.extend_from_slice(&b[offset..offset + space]);
                out.extend_from_slice(newline.as_bytes());
                offset += space + 1;
            }
            None if long_words => {
                out.extend_from_slice(&b[offset..offset + width]);
                out.extend_from_slice(newline.as_bytes());
                offset += width;
            }
            None => match b[offset + width..].iter().position(|c| *c == b' ') {
                None => {
                    out.extend_from_slice(&b[offset..]);
                    offset = b.len();
                }
                Some(i) => {
                    let at = offset + width + i;
                    out.extend_from_slice(&b[offset..at]);
                    out.extend_from_slice(newline.as_bytes());
                    offset = at + 1;
                }
            },
        }
    }
    out.extend_from_slice(&b[offset..]);
    String::from_utf8_lossy(&out).into_owned()
}

fn indent(n: i64, s: &str) -> String {
    // Beyond the budget the padding is clamped rather than allocated.
    let pad = " ".repeat(n.clamp(0, 4096) as usize);
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

fn trunc(a: Vec<Value>) -> FuncResult {
    let (c, s) = (arg_int(&a, 0), arg_str(&a, 1));
    // sprig slices bytes.
    let len = s.len() as i64;
    if c < 0 && len + c > 0 {
        return Ok(Value::string(byte_slice(s, (len + c) as usize, s.len())));
    }
    if c >= 0 && len > c {
        return Ok(Value::string(byte_slice(s, 0, c as usize)));
    }
    Ok(Value::str(s))
}

fn abbrev(s: &str, width: i64) -> String {
    if width < 4 || s.len() as i64 <= width {
        return s.to_string();
    }
    format!("{}...", byte_slice(s, 0, (width - 3) as usize))
}

fn abbrevboth(a: Vec<Value>) -> FuncResult {
    // goutils.AbbreviateFull over bytes; the cut text goes out as Go's JSON writes it.
    let (left, right, s) = (arg_int(&a, 0), arg_int(&a, 1), arg_str(&a, 2));
    if right < 4 || (left > 0 && right < 7) || s.is_empty() || s.len() as i64 <= right {
        return Ok(Value::str(s));
    }
    let len = s.len() as i64;
    let width = right - 3;
    let mut offset = left.min(len);
    if len - offset < width {
        offset = len - width;
    }
    let cut = |from: i64, to: i64| byte_slice(s, from.max(0) as usize, to.min(len) as usize);
    Ok(Value::string(if offset <= 4 {
        format!("{}...", cut(0, width))
    } else if offset + width < len {
        // Abbreviate(s[offset:], width): whole when it fits, else cut with a marker.
        if len - offset <= width {
            format!("...{}", cut(offset, len))
        } else {
            format!("...{}...", cut(offset, offset + width - 3))
        }
    } else {
        format!("...{}", cut(len - width, len))
    }))
}

/// sprig's `split`/`splitn` result: a map with keys `_0`, `_1`, ...
fn indexed(parts: Vec<&str>) -> Value {
    let map: Map = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("_{i}"), Value::str(p)))
        .collect();
    Value::map(map)
}

fn splitn(a: Vec<Value>) -> FuncResult {
    let (sep, n, s) = (arg_str(&a, 0), arg_int(&a, 1), arg_str(&a, 2));
    Ok(indexed(go_split(s, sep, n)))
}

/// Go's `strings.SplitN`: an empty separator splits into characters.
fn go_split<'s>(s: &'s str, sep: &str, n: i64) -> Vec<&'s str> {
    if n == 0 {
        return Vec::new();
    }
    let limit = if n < 0 { usize::MAX } else { n as usize };
    if sep.is_empty() {
        let mut parts: Vec<&str> = Vec::new();
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            if parts.len() + 1 == limit {
                break;
            }
            parts.push(&rest[..c.len_utf8()]);
            rest = &rest[c.len_utf8()..];
        }
        if !rest.is_empty() {
            parts.push(rest);
        }
        return parts;
    }
    s.splitn(limit, sep).collect()
}

fn regex(a: &[Value], i: usize) -> Result<regex::Regex, String> {
    regex::Regex::new(arg_str(a, i)).map_err(|e| format!("error parsing regexp: {e}"))
}

fn find_all(a: Vec<Value>) -> FuncResult {
    let re = regex(&a, 0)?;
    let n = arg_int(&a, 2);
    let limit = if n < 0 { usize::MAX } else { n as usize };
    Ok(Value::list(
        re.find_iter(arg_str(&a, 1))
            .take(limit)
            .map(|m| Value::str(m.as_str()))
            .collect(),
    ))
}

fn find(a: Vec<Value>) -> FuncResult {
    let re = regex(&a, 0)?;
    Ok(Value::str(
        re.find(arg_str(&a, 1))
            .map(|m| m.as_str())
            .unwrap_or_default(),
    ))
}

fn replace_all(a: &[Value], literal: bool) -> FuncResult {
    let re = regex(a, 0)?;
    let (src, repl) = (arg_str(a, 1), arg_str(a, 2));
    let out = if literal {
        re.replace_all(src, regex::NoExpand(repl))
    } else {
        re.replace_all(src, repl)
    };
    Ok(Value::string(out.into_owned()))
}

/// Go's `Regexp.Split(s, n)`.
fn regex_split(a: Vec<Value>) -> FuncResult {
    let re = regex(&a, 0)?;
    let (s, n) = (arg_str(&a, 1), arg_int(&a, 2));
    if n == 0 {
        return Ok(Value::list(vec![]));
    }
    if re.as_str().is_empty() && s.is_empty() {
        return Ok(Value::list(vec![Value::str("")]));
    }
    let mut parts = Vec::new();
    let (mut beg, mut end) = (0, 0);
    let limit = if n < 0 { usize::MAX } else { n as usize };
    for m in re.find_iter(s).take(limit) {
        if n > 0 && parts.len() as i64 == n - 1 {
            break;
        }
        end = m.start();
        if m.end() != 0 {
            parts.push(Value::str(&s[beg..end]));
        }
        beg = m.end();
    }
    if end != s.len() {
        parts.push(Value::str(&s[beg..]));
    }
    Ok(Value::list(parts))
}

/// Go's `regexp.QuoteMeta`.
fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
