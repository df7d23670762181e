//! Go's `net/url` percent-encoding as `url.URL.String()` and `url.Parse` apply it, for
//! sprig's `urlJoin` and `urlParse`.

/// Which URL component is being encoded (Go's `encoding` modes that sprig's functions reach).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Path,
    Host,
    UserPassword,
    Fragment,
}

/// Go's `shouldEscape`.
fn should_escape(c: u8, part: Part) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if part == Part::Host
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match part {
            Part::Path => c == b'?',
            Part::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
            Part::Fragment => false,
            Part::Host => true,
        },
        b'!' | b'(' | b')' | b'*' if part == Part::Fragment => false,
        _ => true,
    }
}

/// Go's `escape` for `part`: bytes that must be escaped as `%XX` (upper-case hex).
pub fn escape(s: &str, part: Part) -> String {
    let mut out = Vec::with_capacity(s.len());
    for &b in s.as_bytes() {
        if should_escape(b, part) {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
    // Only whole ASCII bytes were replaced, so the rest of every UTF-8 sequence is intact or
    // escaped as a whole.
    String::from_utf8(out).unwrap_or_default()
}

/// Go's `unescape` of `%XX` sequences (no `+` rule: paths, hosts and fragments); an invalid
/// escape is an error with Go's text.
pub fn unescape(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) if hex.is_some_and(|h| h.bytes().all(|c| c.is_ascii_hexdigit())) => {
                    out.push(b);
                    i += 3;
                }
                _ => {
                    let end = (i + 3).min(bytes.len());
                    let bad = String::from_utf8_lossy(&bytes[i..end]);
                    return Err(format!("invalid URL escape {bad:?}"));
                }
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `validUserinfo`: the characters `url.Parse` accepts in user information.
pub fn valid_userinfo(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
}

/// User information as `url.Parse` reads it and `Userinfo.String()` writes it back.
pub fn userinfo(raw: &str) -> Result<String, String> {
    if !valid_userinfo(raw) {
        return Err("net/url: invalid userinfo".into());
    }
    Ok(match raw.split_once(':') {
        Some((user, password)) => format!(
            "{}:{}",
            escape(&unescape(user)?, Part::UserPassword),
            escape(&unescape(password)?, Part::UserPassword)
        ),
        None => escape(&unescape(raw)?, Part::UserPassword),
    })
}
