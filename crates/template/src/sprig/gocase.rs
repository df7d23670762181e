//! Go's per-rune case mappings (`unicode.ToUpper`, `ToLower`, `ToTitle`, which `strings.ToUpper`,
//! `strings.ToLower` and `strings.Title` apply rune by rune): one rune always maps to one rune
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

/// Go's `unicode` predicates, by general category (Rust's `char::is_uppercase` and friends
/// use the derived properties, which also hold `Ⓐ` and other symbols).
pub mod class {
    use unicode_general_category::{get_general_category, GeneralCategory as G};

    /// `unicode.IsUpper`: category Lu.
    pub fn upper(c: char) -> bool {
        get_general_category(c) == G::UppercaseLetter
    }

    /// `unicode.IsLower`: category Ll.
    pub fn lower(c: char) -> bool {
        get_general_category(c) == G::LowercaseLetter
    }

    /// `unicode.IsTitle`: category Lt.
    pub fn title(c: char) -> bool {
        get_general_category(c) == G::TitlecaseLetter
    }

    /// `unicode.IsLetter`: category L.
    pub fn letter(c: char) -> bool {
        matches!(
            get_general_category(c),
            G::UppercaseLetter
                | G::LowercaseLetter
                | G::TitlecaseLetter
                | G::ModifierLetter
                | G::OtherLetter
        )
    }

    /// `unicode.IsNumber`: category N.
    pub fn number(c: char) -> bool {
        matches!(
            get_general_category(c),
            G::DecimalNumber | G::LetterNumber | G::OtherNumber
        )
    }

    /// `unicode.IsPunct`: category P.
    pub fn punct(c: char) -> bool {
        matches!(
            get_general_category(c),
            G::ConnectorPunctuation
                | G::DashPunctuation
                | G::OpenPunctuation
                | G::ClosePunctuation
                | G::InitialPunctuation
                | G::FinalPunctuation
                | G::OtherPunctuation
        )
    }

    /// `unicode.IsSpace`: the White_Space property, as `char::is_whitespace`.
    pub fn space(c: char) -> bool {
        c.is_whitespace()
    }
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
    }
}
