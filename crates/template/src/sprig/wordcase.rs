//! sprig's word-case functions as the engines Sveltos runs them (sprig v3.3.0 links
//! huandu/xstrings v1.5.0 for `camelcase`, `snakecase`, `kebabcase`, and Masterminds/goutils
//! for `swapcase` and `initials`), with Go's `unicode` classes and case mappings (`gocase.rs`).
//! The conformance oracle links xstrings 1.3.3, whose `camelcase` also lower-cased the letters
//! inside a word (`fooBar` gave `Foobar`; Sveltos gives `FooBar`): sluice follows Sveltos. One quirk carried over: the replacement
//! character U+FFFD counts as an undecodable byte sequence, as `utf8.DecodeRuneInString`
//! reports it, so it is skipped when looking at the next rune and glued to the following word.

use super::gocase::{self, class};

const INVALID: char = '\u{FFFD}';

/// A separator between words: `-`, `_` or white space.
fn is_connector(c: char) -> bool {
    c == '-' || c == '_' || class::space(c)
}

/// A letter that is not a common CJK ideograph.
fn is_alphabet(c: char) -> bool {
    if !class::letter(c) {
        return false;
    }
    !matches!(u32::from(c), 0x4E00..=0x9FCC | 0x3400..=0x4D85 | 0x20000..=0x2B81D)
}

/// `camelcase`: words joined with their first letter upper-cased, the rest as written; leading
/// connectors are kept, a connector between two others is kept, a trailing one too.
pub fn camelcase(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    let mut r0 = None;
    for c in chars.by_ref() {
        if !is_connector(c) {
            r0 = Some(gocase::upper(c));
            break;
        }
        out.push(c);
    }
    let Some(mut r0) = r0 else {
        // Only connectors: xstrings writes the last one a second time.
        if let Some(last) = s.chars().next_back() {
            out.push(last);
        }
        return out;
    };
    for c in chars {
        let r1 = r0;
        r0 = c;
        if is_connector(r0) && is_connector(r1) {
            out.push(r1);
            continue;
        }
        if is_connector(r1) {
            r0 = gocase::upper(r0);
        } else {
            out.push(r1);
        }
    }
    out.push(r0);
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Word {
    Invalid,
    Number,
    Upper,
    Alphabet,
    Connector,
    Punct,
    Other,
}

/// The next decodable rune at the start of `s` and the bytes up to and including it (U+FFFD
/// before it is skipped); `prev` and all of `s` when there is none.
fn next_valid(s: &str, prev: char) -> (char, usize) {
    let mut size = 0;
    for c in s.chars() {
        size += c.len_utf8();
        if c != INVALID {
            return (c, size);
        }
    }
    (prev, size)
}

/// Splits the next word off `s`: its kind, the word and the rest.
fn next_word(s: &str) -> (Word, &str, &str) {
    if s.is_empty() {
        return (Word::Invalid, "", "");
    }
    let (r, size) = next_valid(s, INVALID);
    let mut offset = size;
    if r == INVALID {
        return (Word::Invalid, &s[..offset], &s[offset..]);
    }
    let mut rest = &s[size..];
    // Extends the word while `keep` holds for the next rune.
    let extend = |offset: &mut usize, rest: &mut &str, mut r: char, keep: &dyn Fn(char) -> bool| {
        while !rest.is_empty() {
            let (next, size) = next_valid(rest, r);
            r = next;
            if !keep(r) {
                break;
            }
            *offset += size;
            *rest = &rest[size..];
        }
    };
    let kind = if is_connector(r) {
        extend(&mut offset, &mut rest, r, &is_connector);
        Word::Connector
    } else if class::punct(r) {
        extend(&mut offset, &mut rest, r, &class::punct);
        Word::Punct
    } else if class::upper(r) {
        if !rest.is_empty() {
            let (next, size) = next_valid(rest, r);
            if class::upper(next) {
                let mut prev_size = size;
                offset += size;
                rest = &rest[size..];
                let mut r = next;
                while !rest.is_empty() {
                    let (n, size) = next_valid(rest, r);
                    r = n;
                    if !class::upper(r) {
                        break;
                    }
                    prev_size = size;
                    offset += size;
                    rest = &rest[size..];
                }
                // "HTTPStatus" is "HTTP" and "Status": the last capital starts the next word.
                if !rest.is_empty() && is_alphabet(r) {
                    offset -= prev_size;
                    rest = &s[offset..];
                }
            } else if is_alphabet(next) {
                offset += size;
                rest = &rest[size..];
                extend(&mut offset, &mut rest, next, &|c| {
                    is_alphabet(c) && !class::upper(c)
                });
            }
        }
        Word::Upper
    } else if is_alphabet(r) {
        extend(&mut offset, &mut rest, r, &|c| {
            is_alphabet(c) && !class::upper(c)
        });
        Word::Alphabet
    } else if class::number(r) {
        extend(&mut offset, &mut rest, r, &class::number);
        Word::Number
    } else {
        let mut r = r;
        while !rest.is_empty() {
            let (c, size) = next_valid(rest, r);
            r = c;
            if size == 0 || is_connector(c) || is_alphabet(c) || class::number(c) || class::punct(c)
            {
                break;
            }
            offset += size;
            rest = &rest[size..];
        }
        Word::Other
    };
    (kind, &s[..offset], rest)
}

/// Writes a word lower-cased (only capitalized and connector words change; connectors become
/// `connector`).
fn push_lower(out: &mut String, kind: Word, word: &str, connector: char) {
    if kind != Word::Upper && kind != Word::Connector {
        out.push_str(word);
        return;
    }
    for c in word.chars() {
        if is_connector(c) {
            out.push(connector);
        } else if class::upper(c) {
            out.push(gocase::lower(c));
        } else {
            out.push(c);
        }
    }
}

/// `snakecase` (`connector` `_`) and `kebabcase` (`-`): words lower-cased and joined, numbers
/// kept with the word before them unless lower-case letters follow (`Bld4Floor` is
/// `bld4_floor`, `HTTP2xx` is `http_2xx`).
pub fn lower_words(s: &str, connector: char) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    if s.is_empty() {
        return out;
    }
    let (mut kind, mut word, mut rest) = next_word(s);
    while !rest.is_empty() {
        if kind != Word::Connector {
            push_lower(&mut out, kind, word, connector);
        }
        let (prev, last) = (kind, word);
        (kind, word, rest) = next_word(rest);
        match prev {
            Word::Number => {
                while kind == Word::Alphabet || kind == Word::Number {
                    push_lower(&mut out, kind, word, connector);
                    (kind, word, rest) = next_word(rest);
                }
                if !matches!(kind, Word::Invalid | Word::Punct | Word::Connector) {
                    out.push(connector);
                }
            }
            Word::Connector => push_lower(&mut out, prev, last, connector),
            Word::Punct => {}
            _ => {
                if kind != Word::Number {
                    if kind != Word::Connector && kind != Word::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                if rest.is_empty() {
                    continue;
                }
                let number = word;
                (kind, word, rest) = next_word(rest);
                if kind != Word::Alphabet {
                    push_lower(&mut out, Word::Number, number, connector);
                    if kind != Word::Connector && kind != Word::Punct {
                        out.push(connector);
                    }
                    continue;
                }
                out.push(connector);
                push_lower(&mut out, Word::Number, number, connector);
                while kind == Word::Alphabet || kind == Word::Number {
                    push_lower(&mut out, kind, word, connector);
                    (kind, word, rest) = next_word(rest);
                }
                if !matches!(kind, Word::Invalid | Word::Connector | Word::Punct) {
                    out.push(connector);
                }
            }
        }
    }
    push_lower(&mut out, kind, word, connector);
    out
}

/// `swapcase`: capitals and title-case letters lower-cased; small letters upper-cased, or
/// title-cased at the start of the text or after white space.
pub fn swapcase(s: &str) -> String {
    let mut whitespace = true;
    s.chars()
        .map(|c| {
            if class::upper(c) || class::title(c) {
                whitespace = false;
                gocase::lower(c)
            } else if class::lower(c) {
                let to = if whitespace {
                    gocase::title(c)
                } else {
                    gocase::upper(c)
                };
                whitespace = false;
                to
            } else {
                whitespace = class::space(c);
                c
            }
        })
        .collect()
}

/// `initials` (goutils): the first character of every white-space-separated word, where the
/// text is read byte by byte as Latin-1 (goutils does), so a non-ASCII letter gives the
/// character of its first UTF-8 byte (`é` gives `Ã`) and the bytes 0x85 and 0xA0 inside a
/// multi-byte character separate words.
pub fn initials(s: &str) -> String {
    let mut out = String::new();
    let mut gap = true;
    for c in s.bytes().map(char::from) {
        if class::space(c) {
            gap = true;
        } else if gap {
            out.push(c);
            gap = false;
        }
    }
    out
}
