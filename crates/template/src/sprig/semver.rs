//! Masterminds/semver v3 as sprig uses it: lenient version parsing (`v1.2`), constraint
//! checks (`=`, `!=`, `<`, `<=`, `>`, `>=`, `~`, `^`, wildcards, hyphen ranges, `,` and `||`),
//! and pre-releases only matching constraints that name a pre-release.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use crate::funcs::{arg_str, def, FuncDef};
use crate::value::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    pub pre: String,
    pub metadata: String,
    pub original: String,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre)?;
        }
        if !self.metadata.is_empty() {
            write!(f, "+{}", self.metadata)?;
        }
        Ok(())
    }
}

pub static FUNCS: &[FuncDef] = &[
    def!("semver", [Str], |a| Ok(Value::Semver(Arc::new(
        parse_version(arg_str(&a, 0))?
    )))),
    def!("semverCompare", [Str, Str], |a| {
        let constraint = parse_constraint(arg_str(&a, 0))?;
        let version = parse_version(arg_str(&a, 1))?;
        Ok(Value::Bool(
            constraint
                .iter()
                .any(|all| all.iter().all(|c| c.check(&version))),
        ))
    }),
];

/// Parses a version the way `semver.NewVersion` does (missing minor/patch are zero).
pub fn parse_version(s: &str) -> Result<Version, String> {
    let invalid = || "Invalid Semantic Version".to_string();
    let body = s.strip_prefix('v').unwrap_or(s);
    let (body, metadata) = body.split_once('+').unwrap_or((body, ""));
    let (core, pre) = body.split_once('-').unwrap_or((body, ""));
    let ident_ok = |p: &str| {
        !p.is_empty()
            && p.split('.')
                .all(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    };
    if (body.contains('-') && !ident_ok(pre)) || (s.contains('+') && !ident_ok(metadata)) {
        return Err(invalid());
    }
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty()
        || parts.len() > 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(invalid());
    }
    let num = |i: usize| {
        parts
            .get(i)
            .map(|p| p.parse::<u64>().map_err(|_| invalid()))
            .unwrap_or(Ok(0))
    };
    Ok(Version {
        major: num(0)?,
        minor: num(1)?,
        patch: num(2)?,
        pre: pre.to_string(),
        metadata: metadata.to_string(),
        original: s.to_string(),
    })
}

/// Semantic-version precedence (metadata ignored).
pub fn compare(a: &Version, b: &Version) -> Ordering {
    (a.major, a.minor, a.patch)
        .cmp(&(b.major, b.minor, b.patch))
        .then_with(|| compare_pre(&a.pre, &b.pre))
}

fn compare_pre(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) => {
                let ord = match (p.parse::<u64>(), q.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    _ => p.cmp(q),
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

/// Methods and fields of `*semver.Version`.
pub fn method(v: &Version, name: &str, args: &[Value]) -> Result<Value, String> {
    let other = || match args {
        [Value::Semver(o)] => Ok(Version::clone(o)),
        _ => Err(format!("wrong arguments for method {name}")),
    };
    Ok(match name {
        "Major" => Value::Int(v.major as i64),
        "Minor" => Value::Int(v.minor as i64),
        "Patch" => Value::Int(v.patch as i64),
        "Prerelease" => Value::str(&v.pre),
        "Metadata" => Value::str(&v.metadata),
        "Original" => Value::str(&v.original),
        "String" => Value::string(v.to_string()),
        "Compare" => Value::GoInt(compare(v, &other()?) as i64),
        "LessThan" => Value::Bool(compare(v, &other()?) == Ordering::Less),
        "GreaterThan" => Value::Bool(compare(v, &other()?) == Ordering::Greater),
        "Equal" => Value::Bool(compare(v, &other()?) == Ordering::Equal),
        _ => {
            return Err(format!(
                "can't evaluate field {name} in type *semver.Version"
            ))
        }
    })
}

#[derive(Debug)]
struct Constraint {
    op: String,
    version: Version,
    /// How many of major/minor/patch were given as numbers (wildcards and omissions are not).
    given: usize,
}

fn parse_constraint(s: &str) -> Result<Vec<Vec<Constraint>>, String> {
    let improper = || format!("improper constraint: {s}");
    let mut groups = Vec::new();
    for group in s.split("||") {
        let mut all = Vec::new();
        let normalized = group.replace(',', " ");
        let tokens: Vec<&str> = normalized.split_whitespace().collect();
        let mut i = 0;
        while i < tokens.len() {
            // Hyphen range: "1.2 - 1.4".
            if tokens.get(i + 1) == Some(&"-") && i + 2 < tokens.len() {
                all.push(single(&format!(">={}", tokens[i])).ok_or_else(improper)?);
                all.push(single(&format!("<={}", tokens[i + 2])).ok_or_else(improper)?);
                i += 3;
                continue;
            }
            // An operator separated from its version by a space.
            let token = if is_op(tokens[i]) && i + 1 < tokens.len() {
                i += 1;
                format!("{}{}", tokens[i - 1], tokens[i])
            } else {
                tokens[i].to_string()
            };
            all.push(single(&token).ok_or_else(improper)?);
            i += 1;
        }
        if all.is_empty() {
            return Err(improper());
        }
        groups.push(all);
    }
    Ok(groups)
}

fn is_op(s: &str) -> bool {
    matches!(
        s,
        "=" | "!=" | ">" | "<" | ">=" | "=>" | "<=" | "=<" | "~" | "~>" | "^"
    )
}

fn single(token: &str) -> Option<Constraint> {
    let op_len = token
        .find(|c: char| c.is_ascii_alphanumeric() || c == '*')
        .unwrap_or(token.len());
    let (op, rest) = token.split_at(op_len);
    if !(op.is_empty() || is_op(op)) || rest.is_empty() {
        return None;
    }
    let rest = rest.strip_prefix('v').unwrap_or(rest);
    let (core, suffix) = match rest.find(['-', '+']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let mut given = 0;
    let mut nums = Vec::new();
    for part in core.split('.') {
        if matches!(part, "x" | "X" | "*") {
            break;
        }
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        nums.push(part);
        given += 1;
    }
    if given > 3 {
        return None;
    }
    while nums.len() < 3 {
        nums.push("0");
    }
    let version = parse_version(&format!("{}{suffix}", nums.join("."))).ok()?;
    let op = match op {
        "=>" => ">=",
        "=<" => "<=",
        "~>" => "~",
        "" => "=",
        o => o,
    };
    Some(Constraint {
        op: op.to_string(),
        version,
        given,
    })
}

impl Constraint {
    fn check(&self, v: &Version) -> bool {
        let c = &self.version;
        if !v.pre.is_empty() && c.pre.is_empty() {
            return false;
        }
        // Compare only the parts the constraint gave (wildcards match anything).
        let truncated = |x: &Version| -> (u64, u64, u64) {
            match self.given {
                0 => (0, 0, 0),
                1 => (x.major, 0, 0),
                2 => (x.major, x.minor, 0),
                _ => (x.major, x.minor, x.patch),
            }
        };
        let full = compare(v, c);
        let partial = truncated(v).cmp(&truncated(c));
        let ord = if self.given < 3 { partial } else { full };
        match self.op.as_str() {
            "=" => ord == Ordering::Equal,
            "!=" => ord != Ordering::Equal,
            ">" => ord == Ordering::Greater,
            "<" => ord == Ordering::Less,
            ">=" => full != Ordering::Less,
            "<=" => ord != Ordering::Greater,
            "~" => {
                if full == Ordering::Less {
                    return false;
                }
                if self.given <= 1 {
                    v.major == c.major
                } else {
                    v.major == c.major && v.minor == c.minor
                }
            }
            "^" => {
                if full == Ordering::Less {
                    return false;
                }
                if c.major > 0 || self.given <= 1 {
                    v.major == c.major
                } else if c.minor > 0 || self.given == 2 {
                    v.major == 0 && v.minor == c.minor
                } else {
                    v.major == 0 && v.minor == 0 && v.patch == c.patch
                }
            }
            _ => false,
        }
    }
}
