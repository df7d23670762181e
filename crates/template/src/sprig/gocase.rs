//! Go's case mappings (`sluice_domain::gocase`, shared with the Lua engine) and Go's `unicode`
//! predicates, for sprig's string functions.

pub use sluice_domain::gocase::{lower, push_lower, push_upper, title, upper};

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
