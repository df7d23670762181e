//! An unanchored regular expression as Sveltos writes them in `messagingMatchCriteria` (Go
//! RE2, `regexp.MatchString`): compiled once when the EventSource is loaded, never per event.
//! It does not decide what is matched against what; `cloudevent` does.

use regex::Regex;

/// A compiled pattern with the text it was written as. The empty pattern matches anything.
#[derive(Clone, Debug, Default)]
pub struct Pattern {
    source: String,
    regex: Option<Regex>,
}

/// Why a pattern does not compile: the compiler's own message, on one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct PatternError {
    pub reason: String,
}

impl Pattern {
    /// Compiles `source`; the empty string needs no compiling and matches every text.
    pub fn new(source: &str) -> Result<Pattern, PatternError> {
        let regex = if source.is_empty() {
            None
        } else {
            Some(Regex::new(source).map_err(|error| PatternError {
                reason: one_line(&error),
            })?)
        };
        Ok(Pattern {
            source: source.to_string(),
            regex,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn is_empty(&self) -> bool {
        self.source.is_empty()
    }

    /// Whether the pattern matches anywhere in `text` (unanchored, as Go's `MatchString`).
    pub fn is_match(&self, text: &str) -> bool {
        self.regex.as_ref().is_none_or(|regex| regex.is_match(text))
    }
}

/// Two patterns are the same when they are written the same.
impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

impl PartialEq<&str> for Pattern {
    fn eq(&self, other: &&str) -> bool {
        self.source == *other
    }
}

/// The regex crate renders syntax errors over several lines with a caret diagram; the line
/// that starts with `error:` says what is wrong.
fn one_line(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines()
        .find_map(|line| line.trim().strip_prefix("error:"))
        .map(|reason| reason.trim().to_string())
        .unwrap_or_else(|| text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unanchored_like_go_match_string() {
        let cases = [
            ("", "anything", true),
            ("", "", true),
            ("user-operation", "user-operation", true),
            ("user-operation", "x.user-operation.y", true),
            ("^prefix.*", "prefix-and-more", true),
            ("^prefix.*", "no-prefix", false),
            (".*suffix$", "has-suffix", true),
            (".*suffix$", "suffix-not-last", false),
            (".*mid.*", "in-the-mid-dle", true),
            (".*mid.*", "nothing", false),
            ("auth.example.com", "auth.example.com/user-login", true),
            (
                "^auth\\.example\\.com$",
                "auth.example.com/user-login",
                false,
            ),
        ];
        for (pattern, text, want) in cases {
            let p = Pattern::new(pattern).expect("compiles");
            assert_eq!(p.is_match(text), want, "{pattern:?} against {text:?}");
        }
    }

    #[test]
    fn invalid_patterns_say_why_on_one_line() {
        let error = Pattern::new("user-(login").expect_err("unclosed group");
        assert_eq!(error.reason, "unclosed group");
        let error = Pattern::new("[z-a]").expect_err("bad range");
        assert!(!error.reason.contains('\n'), "{}", error.reason);
        assert!(error.reason.contains("range"), "{}", error.reason);
    }

    #[test]
    fn equality_is_by_source() {
        let a = Pattern::new("a.*").expect("compiles");
        assert_eq!(a, Pattern::new("a.*").expect("compiles"));
        assert_eq!(a, "a.*");
        assert_ne!(a, Pattern::new("a.+").expect("compiles"));
        assert!(Pattern::default().is_empty());
    }
}
