//! JSON decoding with Go's `encoding/json` error texts (Sveltos' `fromJson` stores the error
//! text under the key `Error`, so templates can print it).

/// Checks `text` as Go's scanner does and returns Go's message for the first syntax error.
pub fn syntax_error(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut s = Scanner { b, i: 0 };
    s.ws();
    if s.i >= b.len() {
        return Some("unexpected end of JSON input".into());
    }
    if let Err(e) = s.value("looking for beginning of value") {
        return Some(e);
    }
    s.ws();
    if s.i < b.len() {
        return Some(format!(
            "invalid character {} after top-level value",
            s.quote(s.i)
        ));
    }
    None
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

type R = Result<(), String>;

impl Scanner<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn quote(&self, i: usize) -> String {
        let c = std::str::from_utf8(&self.b[i..])
            .ok()
            .and_then(|s| s.chars().next())
            .unwrap_or('\u{fffd}');
        match c {
            '\'' => "'\\''".into(),
            '"' => "'\"'".into(),
            c if (c as u32) < 0x20 => format!("'\\x{:02x}'", c as u32),
            c => format!("'{c}'"),
        }
    }

    fn eof(&self) -> String {
        "unexpected end of JSON input".into()
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn value(&mut self, context: &str) -> R {
        match self.peek() {
            None => Err(self.eof()),
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string(),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(format!(
                "invalid character {} {context}",
                self.quote(self.i)
            )),
        }
    }

    fn literal(&mut self, word: &str) -> R {
        for (k, expected) in word.bytes().enumerate() {
            match self.peek() {
                None => return Err(self.eof()),
                Some(c) if c == expected => self.i += 1,
                Some(_) => {
                    return Err(format!(
                        "invalid character {} in literal {word} (expecting '{}')",
                        self.quote(self.i),
                        word.as_bytes()[k] as char
                    ))
                }
            }
        }
        Ok(())
    }

    fn number(&mut self) -> R {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            None => return Err(self.eof()),
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
            }
            Some(_) => {
                return Err(format!(
                    "invalid character {} in numeric literal",
                    self.quote(self.i)
                ))
            }
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return match self.peek() {
                    None => Err(self.eof()),
                    Some(_) => Err(format!(
                        "invalid character {} after decimal point in numeric literal",
                        self.quote(self.i)
                    )),
                };
            }
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return match self.peek() {
                    None => Err(self.eof()),
                    Some(_) => Err(format!(
                        "invalid character {} in exponent of numeric literal",
                        self.quote(self.i)
                    )),
                };
            }
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
        }
        Ok(())
    }

    fn string(&mut self) -> R {
        self.i += 1;
        loop {
            match self.peek() {
                None => return Err(self.eof()),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        None => return Err(self.eof()),
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            self.i += 1;
                            for _ in 0..4 {
                                match self.peek() {
                                    None => return Err(self.eof()),
                                    Some(c) if c.is_ascii_hexdigit() => self.i += 1,
                                    Some(_) => {
                                        return Err(format!(
                                        "invalid character {} in \\u hexadecimal character escape",
                                        self.quote(self.i)
                                    ))
                                    }
                                }
                            }
                        }
                        Some(_) => {
                            return Err(format!(
                                "invalid character {} in string escape code",
                                self.quote(self.i)
                            ))
                        }
                    }
                }
                Some(c) if c < 0x20 => {
                    return Err(format!(
                        "invalid character {} in string literal",
                        self.quote(self.i)
                    ))
                }
                Some(_) => self.i += 1,
            }
        }
    }

    fn array(&mut self) -> R {
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            self.value("looking for beginning of value")?;
            self.ws();
            match self.peek() {
                None => return Err(self.eof()),
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(_) => {
                    return Err(format!(
                        "invalid character {} after array element",
                        self.quote(self.i)
                    ))
                }
            }
        }
    }

    fn object(&mut self) -> R {
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            match self.peek() {
                None => return Err(self.eof()),
                Some(b'"') => self.string()?,
                Some(_) => {
                    return Err(format!(
                        "invalid character {} looking for beginning of object key string",
                        self.quote(self.i)
                    ))
                }
            }
            self.ws();
            match self.peek() {
                None => return Err(self.eof()),
                Some(b':') => self.i += 1,
                Some(_) => {
                    return Err(format!(
                        "invalid character {} after object key",
                        self.quote(self.i)
                    ))
                }
            }
            self.ws();
            self.value("looking for beginning of value")?;
            self.ws();
            match self.peek() {
                None => return Err(self.eof()),
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(_) => {
                    return Err(format!(
                        "invalid character {} after object key:value pair",
                        self.quote(self.i)
                    ))
                }
            }
        }
    }
}

/// The JSON type name Go uses in "cannot unmarshal X into Go value of type ..." errors.
pub fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}
