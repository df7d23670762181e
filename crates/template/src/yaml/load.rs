//! YAML input as sigs.k8s.io/yaml reads it into `interface{}`: goyaml.v2 resolution (YAML 1.1
//! booleans such as `y` and `on`), then a JSON round trip, so every number is a float64 and
//! every key a string. Only the first document is read.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::TScalarStyle;

use crate::value::{Map, Value};

/// Reads the first document of `text`; an empty document is `Nil`.
pub fn load(text: &str) -> Result<Value, String> {
    let mut loader = Loader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
    };
    loop {
        match loader.next()? {
            Event::StreamStart | Event::DocumentStart | Event::Nothing => continue,
            Event::StreamEnd | Event::DocumentEnd => return Ok(Value::Nil),
            event => return loader.node(event),
        }
    }
}

struct Loader<'a> {
    parser: Parser<std::str::Chars<'a>>,
    anchors: HashMap<usize, Value>,
}

impl Loader<'_> {
    fn next(&mut self) -> Result<Event, String> {
        self.parser
            .next_token()
            .map(|(event, _)| event)
            .map_err(|e| format!("error converting YAML to JSON: yaml: {e}"))
    }

    fn node(&mut self, event: Event) -> Result<Value, String> {
        let (value, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => {
                let explicit_str = tag.as_ref().is_some_and(|t| t.suffix == "str");
                let v = if style != TScalarStyle::Plain || explicit_str {
                    Value::string(text)
                } else {
                    resolve(&text)
                };
                (v, anchor)
            }
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                loop {
                    match self.next()? {
                        Event::SequenceEnd => break,
                        event => items.push(self.node(event)?),
                    }
                }
                (Value::list(items), anchor)
            }
            Event::MappingStart(anchor, _) => {
                let mut map = Map::new();
                loop {
                    let key = match self.next()? {
                        Event::MappingEnd => break,
                        event => self.node(event)?,
                    };
                    let value = self.next().and_then(|event| self.node(event))?;
                    map.insert(key_string(&key), value);
                }
                (Value::map(map), anchor)
            }
            Event::Alias(id) => {
                return self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| "yaml: unknown anchor".to_string())
            }
            other => return Err(format!("yaml: unexpected event {other:?}")),
        };
        if anchor > 0 {
            self.anchors.insert(anchor, value.clone());
        }
        Ok(value)
    }
}

fn key_string(key: &Value) -> String {
    match key {
        Value::String(s) => s.to_string(),
        Value::Nil => "null".into(),
        other => crate::gofmt::to_string(other),
    }
}

/// goyaml.v2's plain-scalar resolution, with numbers as JSON would hand them back (float64).
fn resolve(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Nil,
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            return Value::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            return Value::Bool(false)
        }
        _ => {}
    }
    let plain = s.replace('_', "");
    if let Some(i) = crate::parse::parse_go_int(&plain) {
        return Value::Float(i as f64);
    }
    if crate::yaml::is_yaml_float(&plain) {
        if let Ok(f) = plain.parse::<f64>() {
            return Value::Float(f);
        }
    }
    Value::str(s)
}
