//! Kubernetes label selectors: the string syntax (`a=b,c in (x,y),!d`), the structured
//! `metav1.LabelSelector`, validation of keys and values, canonical printing and matching.
//! Does not apply Sveltos' "an empty selector matches no cluster" rule: callers do that.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The structured selector as written in API objects (`metav1.LabelSelector`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry (`metav1.LabelSelectorRequirement`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

/// A parsed, validated selector: a conjunction of requirements, sorted by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// One requirement on one label key. Set values are kept sorted and deduplicated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    Equals {
        key: String,
        value: String,
    },
    NotEquals {
        key: String,
        value: String,
    },
    In {
        key: String,
        values: BTreeSet<String>,
    },
    NotIn {
        key: String,
        values: BTreeSet<String>,
    },
    Exists {
        key: String,
    },
    DoesNotExist {
        key: String,
    },
}

/// Why a selector was rejected; `position` is a byte offset into the parsed text (0 for structured selectors).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector at position {position}: {message}")]
pub struct SelectorError {
    pub position: usize,
    pub message: String,
}

impl Requirement {
    /// The label key this requirement constrains.
    pub fn key(&self) -> &str {
        match self {
            Requirement::Equals { key, .. }
            | Requirement::NotEquals { key, .. }
            | Requirement::In { key, .. }
            | Requirement::NotIn { key, .. }
            | Requirement::Exists { key }
            | Requirement::DoesNotExist { key } => key,
        }
    }

    /// Whether a label set satisfies this requirement (missing keys satisfy `!=` and `notin`).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_value(labels.get(self.key()).map(String::as_str))
    }

    /// Whether the value of this requirement's key (`None`: the label is missing) satisfies it.
    pub fn matches_value(&self, got: Option<&str>) -> bool {
        match self {
            Requirement::Equals { value, .. } => got == Some(value.as_str()),
            Requirement::NotEquals { value, .. } => got != Some(value.as_str()),
            Requirement::In { values, .. } => got.is_some_and(|v| values.contains(v)),
            Requirement::NotIn { values, .. } => !got.is_some_and(|v| values.contains(v)),
            Requirement::Exists { .. } => got.is_some(),
            Requirement::DoesNotExist { .. } => got.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |values: &BTreeSet<String>| values.iter().cloned().collect::<Vec<_>>().join(",");
        match self {
            Requirement::Equals { key, value } => write!(f, "{key}={value}"),
            Requirement::NotEquals { key, value } => write!(f, "{key}!={value}"),
            Requirement::In { key, values } => write!(f, "{key} in ({})", set(values)),
            Requirement::NotIn { key, values } => write!(f, "{key} notin ({})", set(values)),
            Requirement::Exists { key } => write!(f, "{key}"),
            Requirement::DoesNotExist { key } => write!(f, "!{key}"),
        }
    }
}

impl Selector {
    /// Parses the Kubernetes string form; the empty string selects everything.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let tokens = lex(text)?;
        let mut parser = Parser {
            tokens,
            index: 0,
            len: text.len(),
        };
        let mut requirements = Vec::new();
        if parser.peek().is_none() {
            return Ok(Selector::everything());
        }
        loop {
            requirements.push(parser.requirement()?);
            match parser.next() {
                None => break,
                Some((Token::Comma, _)) => continue,
                Some((token, pos)) => {
                    return Err(err(pos, format!("expected ',' but found {token}")))
                }
            }
        }
        Ok(Selector::from_requirements(requirements))
    }

    /// Converts a structured selector, validating it as `metav1.LabelSelectorAsSelector` does.
    pub fn from_label_selector(sel: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in &sel.match_labels {
            validate_key(key, 0)?;
            validate_value(value, 0)?;
            requirements.push(Requirement::Equals {
                key: key.clone(),
                value: value.clone(),
            });
        }
        for expr in &sel.match_expressions {
            validate_key(&expr.key, 0)?;
            for value in &expr.values {
                validate_value(value, 0)?;
            }
            let key = expr.key.clone();
            let values: BTreeSet<String> = expr.values.iter().cloned().collect();
            if !matches!(
                expr.operator.as_str(),
                "In" | "NotIn" | "Exists" | "DoesNotExist"
            ) {
                return Err(err(
                    0,
                    format!("{:?} is not a valid label selector operator", expr.operator),
                ));
            }
            let needs_values = matches!(expr.operator.as_str(), "In" | "NotIn");
            if needs_values && values.is_empty() {
                return Err(err(
                    0,
                    format!(
                        "operator {} on key {key} needs at least one value",
                        expr.operator
                    ),
                ));
            }
            if !needs_values && !values.is_empty() {
                return Err(err(
                    0,
                    format!("operator {} on key {key} takes no values", expr.operator),
                ));
            }
            requirements.push(match expr.operator.as_str() {
                "In" => Requirement::In { key, values },
                "NotIn" => Requirement::NotIn { key, values },
                "Exists" => Requirement::Exists { key },
                _ => Requirement::DoesNotExist { key },
            });
        }
        Ok(Selector::from_requirements(requirements))
    }

    /// The selector with no requirements; it matches every label set.
    pub fn everything() -> Selector {
        Selector::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether every requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// [`Selector::matches`] over labels read through `label` (key to value), without building
    /// a map of them.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(label(r.key())))
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Selector {
        // Stable sort by key, as Kubernetes' internalSelector keeps them.
        requirements.sort_by(|a, b| a.key().cmp(b.key()));
        Selector { requirements }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

fn err(position: usize, message: impl Into<String>) -> SelectorError {
    SelectorError {
        position,
        message: message.into(),
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Comma,
    Open,
    Close,
    Not,
    Eq,
    NotEq,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Word(w) => write!(f, "{w:?}"),
            Token::Comma => f.write_str("','"),
            Token::Open => f.write_str("'('"),
            Token::Close => f.write_str("')'"),
            Token::Not => f.write_str("'!'"),
            Token::Eq => f.write_str("'='"),
            Token::NotEq => f.write_str("'!='"),
        }
    }
}

fn lex(text: &str) -> Result<Vec<(Token, usize)>, SelectorError> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((pos, c)) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => continue,
            ',' => Token::Comma,
            '(' => Token::Open,
            ')' => Token::Close,
            '!' | '=' => {
                let double = chars.next_if(|&(_, n)| n == '=').is_some();
                match (c, double) {
                    ('!', true) => Token::NotEq,
                    ('!', false) => Token::Not,
                    _ => Token::Eq,
                }
            }
            _ => {
                let mut word = String::from(c);
                while let Some((_, n)) = chars.next_if(|&(_, n)| !is_special(n)) {
                    word.push(n);
                }
                Token::Word(word)
            }
        };
        tokens.push((token, pos));
    }
    Ok(tokens)
}

fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | '(' | ')' | '!' | '=')
}

struct Parser {
    tokens: Vec<(Token, usize)>,
    index: usize,
    len: usize,
}

impl Parser {
    fn peek(&self) -> Option<&(Token, usize)> {
        self.tokens.get(self.index)
    }

    fn next(&mut self) -> Option<(Token, usize)> {
        let t = self.tokens.get(self.index).cloned();
        self.index += 1;
        t
    }

    fn word(&mut self, what: &str) -> Result<(String, usize), SelectorError> {
        match self.next() {
            Some((Token::Word(w), pos)) => Ok((w, pos)),
            Some((t, pos)) => Err(err(pos, format!("expected {what} but found {t}"))),
            None => Err(err(
                self.len,
                format!("expected {what} but found end of input"),
            )),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if let Some((Token::Not, _)) = self.peek() {
            self.index += 1;
            let (key, pos) = self.word("a label key after '!'")?;
            validate_key(&key, pos)?;
            return Ok(Requirement::DoesNotExist { key });
        }
        let (key, pos) = self.word("a label key")?;
        validate_key(&key, pos)?;
        let (op, op_pos) = match self.peek() {
            None | Some((Token::Comma, _)) => return Ok(Requirement::Exists { key }),
            Some((t, p)) => (t.clone(), *p),
        };
        self.index += 1;
        match op {
            Token::Eq | Token::NotEq => {
                let (value, vpos) = match self.peek() {
                    Some((Token::Word(w), p)) => (w.clone(), *p),
                    // `a=` selects the empty value, as in Kubernetes.
                    None | Some((Token::Comma, _)) => (String::new(), self.len),
                    Some((t, p)) => return Err(err(*p, format!("expected a label value but found {t}"))),
                };
                if !value.is_empty() {
                    self.index += 1;
                }
                validate_value(&value, vpos)?;
                Ok(if op == Token::Eq {
                    Requirement::Equals { key, value }
                } else {
                    Requirement::NotEquals { key, value }
                })
            }
            Token::Word(w) if w == "in" || w == "notin" => {
                let values = self.value_set(&w)?;
                Ok(if w == "in" { Requirement::In { key, values } } else { Requirement::NotIn { key, values } })
            }
            t => Err(err(op_pos, format!("expected an operator ('=', '==', '!=', 'in', 'notin') after key {key:?} but found {t}"))),
        }
    }

    fn value_set(&mut self, op: &str) -> Result<BTreeSet<String>, SelectorError> {
        match self.next() {
            Some((Token::Open, _)) => {}
            Some((t, pos)) => {
                return Err(err(pos, format!("expected '(' after '{op}' but found {t}")))
            }
            None => {
                return Err(err(
                    self.len,
                    format!("expected '(' after '{op}' but found end of input"),
                ))
            }
        }
        let mut values = BTreeSet::new();
        let mut expect_value = true;
        loop {
            match self.next() {
                Some((Token::Word(w), pos)) if expect_value => {
                    validate_value(&w, pos)?;
                    values.insert(w);
                    expect_value = false;
                }
                Some((Token::Comma, pos)) => {
                    if expect_value {
                        validate_value("", pos)?;
                        values.insert(String::new());
                    }
                    expect_value = true;
                }
                Some((Token::Close, pos)) => {
                    if expect_value && !values.is_empty() {
                        // A trailing comma adds the empty value, as in Kubernetes.
                        values.insert(String::new());
                    }
                    if values.is_empty() {
                        return Err(err(
                            pos,
                            format!("the value set of '{op}' must not be empty"),
                        ));
                    }
                    return Ok(values);
                }
                Some((t, pos)) => {
                    return Err(err(
                        pos,
                        format!("unexpected {t} in the value set of '{op}'"),
                    ))
                }
                None => {
                    return Err(err(
                        self.len,
                        format!("missing ')' to close the value set of '{op}'"),
                    ))
                }
            }
        }
    }
}

/// Validates a qualified label key: optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
pub fn validate_key(key: &str, position: usize) -> Result<(), SelectorError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok_label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(ok_label) {
            return Err(err(
                position,
                format!(
                    "label key {key:?} has an invalid prefix: it must be a lowercase DNS subdomain"
                ),
            ));
        }
    }
    if name.is_empty() {
        return Err(err(
            position,
            format!("label key {key:?} has an empty name part"),
        ));
    }
    if !is_label_name(name) {
        return Err(err(
            position,
            format!("label key {key:?} is invalid: the name part must be at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"),
        ));
    }
    Ok(())
}

/// Validates a label value: empty, or at most 63 characters of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub fn validate_value(value: &str, position: usize) -> Result<(), SelectorError> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(err(
            position,
            format!("label value {value:?} is invalid: it must be at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"),
        ))
    }
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

#[cfg(test)]
#[path = "selector/tests.rs"]
mod tests;
