//! Go's per-rune case mappings (`unicode.ToUpper`, `ToLower`, `ToTitle`, which `strings.ToUpper`,
//! `strings.ToLower` and `strings.Title` apply rune by rune; sprig's string functions and
//! gopher-lua's `string.upper`/`string.lower` use them): one rune always maps to one rune
//! (Unicode's simple mappings), never to the several that Rust's `char` methods give under
//! Unicode's special casing (`ß` stays `ß`, `İ` lowers to `i`), and there is no final-sigma rule.

/// `unicode.ToUpper`.
pub fn upper(c: char) -> char {
    let mut mapped = c.to_uppercase();
    match (mapped.next(), mapped.next()) {
        (Some(u), None) => u,
        // Several runes: the simple mapping where Unicode has one (Greek letters with
        // ypogegrammeni take their capital-with-prosgegrammeni form), else the rune itself.
        _ => match u32::from(c) {
            0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => {
                char::from_u32(u32::from(c) + 8).unwrap_or(c)
            }
            0x1FB3 => '\u{1FBC}',
            0x1FC3 => '\u{1FCC}',
            0x1FF3 => '\u{1FFC}',
            _ => c,
        },
    }
}

/// `unicode.ToLower`.
pub fn lower(c: char) -> char {
    let mut mapped = c.to_lowercase();
    match (mapped.next(), mapped.next()) {
        (Some(l), None) => l,
        // Only U+0130 lowers to several runes; its simple lowercase is `i`.
        _ if c == '\u{130}' => 'i',
        _ => c,
    }
}

/// `unicode.ToTitle`: the uppercase mapping except for the digraphs with a titlecase form and
/// the Georgian letters, whose title case is themselves.
pub fn title(c: char) -> char {
    match u32::from(c) {
        0x01C4..=0x01C6 => '\u{1C5}',
        0x01C7..=0x01C9 => '\u{1C8}',
        0x01CA..=0x01CC => '\u{1CB}',
        0x01F1..=0x01F3 => '\u{1F2}',
        0x10D0..=0x10FA | 0x10FD..=0x10FF => c,
        _ => upper(c),
    }
}

/// `strings.ToUpper`, appended to `out`.
pub fn push_upper(out: &mut String, s: &str) {
    if s.is_ascii() {
        out.extend(s.bytes().map(|b| char::from(b.to_ascii_uppercase())));
    } else {
        out.extend(s.chars().map(upper));
    }
}

/// `strings.ToLower`, appended to `out`.
pub fn push_lower(out: &mut String, s: &str) {
    if s.is_ascii() {
        out.extend(s.bytes().map(|b| char::from(b.to_ascii_lowercase())));
    } else {
        out.extend(s.chars().map(lower));
    }
}

/// Bytes as Go text: valid UTF-8 as it is, and every byte that is not part of a UTF-8 character
/// as U+FFFD (what Go's `strings.Map` and `encoding/json` make of such a byte).
pub fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                break;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                let bad = e.error_len().unwrap_or(after.len());
                out.extend(std::iter::repeat_n('\u{FFFD}', bad));
                rest = &after[bad..];
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runes_map_to_one_rune_as_in_go() {
        let upper_of = |s: &str| {
            let mut out = String::new();
            push_upper(&mut out, s);
            out
        };
        let lower_of = |s: &str| {
            let mut out = String::new();
            push_lower(&mut out, s);
            out
        };
        // Expected texts from the Go oracle (`strings.ToUpper`/`ToLower`, Go 1.23).
        assert_eq!(upper_of("été σας İ ß ǅ ŉ ﬀ"), "ÉTÉ ΣΑΣ İ ß Ǆ ŉ ﬀ");
        assert_eq!(lower_of("ÉTÉ ΣΑΣ İ ß ǅ"), "été σασ i ß ǆ");
        assert_eq!(title('ǆ'), 'ǅ');
        assert_eq!(title('a'), 'A');
        // "日" cut after two of its three bytes, then "x": one U+FFFD per stray byte.
        assert_eq!(lossy(&"日x".as_bytes()[1..]), "\u{FFFD}\u{FFFD}x");
        assert_eq!(lossy(b"ok"), "ok");
    }
}
