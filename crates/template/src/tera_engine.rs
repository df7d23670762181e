//! Tera as a second template syntax: the same JSON data, with the Sveltos functions registered
//! as filters (`{{ resource | toYaml }}`) and functions (`{{ getField(obj=r, path="a.b") }}`).

use std::collections::HashMap;

use tera::{Context, Tera};

use crate::value::Value;
use crate::yaml::{to_yaml, Flavor};
use crate::{Error, ErrorKind};

/// A parsed Tera template.
#[derive(Debug)]
pub struct TeraTemplate {
    tera: Tera,
    name: String,
}

impl TeraTemplate {
    pub fn parse(text: &str, name: &str) -> Result<TeraTemplate, Error> {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        register(&mut tera);
        tera.add_raw_template(name, text)
            .map_err(|e| Error::tera(name, ErrorKind::Parse, chain(&e)))?;
        Ok(TeraTemplate {
            tera,
            name: name.to_string(),
        })
    }

    pub fn render(&self, data: &Value) -> Result<String, Error> {
        let exec = |message: String| Error::tera(&self.name, ErrorKind::Exec, message);
        let json = data.to_json().unwrap_or(serde_json::Value::Null);
        let template = self
            .tera
            .get_template(&self.name)
            .map_err(|e| exec(chain(&e)))?;
        // Tera has no budget of its own: loops and growing variables are checked first.
        crate::tera_bounds::check(&template.ast, &json).map_err(exec)?;
        let context = Context::from_value(json).map_err(|e| exec(chain(&e)))?;
        RANGED.with(|r| r.set(0));
        self.tera
            .render(&self.name, &context)
            .map_err(|e| exec(chain(&e)))
    }
}

/// Tera puts the useful part of a message in its source chain.
fn chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

type Args = HashMap<String, serde_json::Value>;

fn to_tera(v: Value) -> tera::Result<serde_json::Value> {
    v.to_json()
        .ok_or_else(|| tera::Error::msg("value cannot be represented in JSON"))
}

/// Calls a Go-side function of the text engine by name with JSON arguments.
fn call(name: &str, args: Vec<serde_json::Value>) -> tera::Result<serde_json::Value> {
    let Some(def) = crate::funcs::lookup(name, crate::Engine::Text) else {
        return Err(tera::Error::msg(format!("function {name} not defined")));
    };
    let crate::funcs::Imp::Plain(f) = def.imp else {
        return Err(tera::Error::msg(format!(
            "{name} is not callable from tera"
        )));
    };
    let values = args.iter().map(Value::from).collect();
    f(values).map_err(tera::Error::msg).and_then(to_tera)
}

thread_local! {
    /// Elements `range` generated in the render running on this thread (Tera renders on the
    /// caller's thread and has no budget of its own).
    static RANGED: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// Tera's `range(end, start=0, step_by=1)`, with the elements generated in one render held to
/// `MAX_GENERATED` together, so that loops over ranges (nested ones included) end.
fn range(args: &Args) -> tera::Result<serde_json::Value> {
    let number = |name: &str, default: Option<usize>| match args.get(name) {
        Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| {
            tera::Error::msg(format!(
                "Function `range` received {name}={v} but `{name}` can only be a number"
            ))
        }),
        None => default.ok_or_else(|| {
            tera::Error::msg(format!(
                "Function `range` was called without a `{name}` argument"
            ))
        }),
    };
    let (start, end, step) = (
        number("start", Some(0))?,
        number("end", None)?,
        number("step_by", Some(1))?,
    );
    if start > end || step == 0 {
        return Err(tera::Error::msg(
            "Function `range` was called with a `start` greater than `end` or a `step_by` of 0",
        ));
    }
    let count = ((end - start).div_ceil(step)) as i64;
    let total = RANGED.with(|r| {
        r.set(r.get().saturating_add(count));
        r.get()
    });
    crate::funcs::budget(total, crate::funcs::MAX_GENERATED).map_err(tera::Error::msg)?;
    Ok((start..end).step_by(step).collect::<Vec<_>>().into())
}

fn register(tera: &mut Tera) {
    tera.register_function("range", range);
    tera.register_filter("toYaml", |v: &serde_json::Value, _: &Args| {
        let yaml = to_yaml(&Value::from(v), Flavor::V2).map_err(tera::Error::msg)?;
        Ok(serde_json::Value::String(
            yaml.trim_end_matches('\n').to_string(),
        ))
    });
    for name in [
        "toJson",
        "fromYaml",
        "fromYamlArray",
        "fromJson",
        "fromJsonArray",
        "toToml",
        "fromToml",
        "getResource",
        "copy",
    ] {
        tera.register_filter(name, move |v: &serde_json::Value, _: &Args| {
            call(name, vec![v.clone()])
        });
    }
    tera.register_function("getField", |args: &Args| {
        call("getField", vec![arg(args, "obj")?, arg(args, "path")?])
    });
    tera.register_function("removeField", |args: &Args| {
        call("removeField", vec![arg(args, "obj")?, arg(args, "path")?])
    });
    tera.register_function("setField", |args: &Args| {
        call(
            "setField",
            vec![arg(args, "obj")?, arg(args, "path")?, arg(args, "value")?],
        )
    });
    tera.register_function("chainRemoveField", |args: &Args| {
        call(
            "chainRemoveField",
            vec![arg(args, "obj")?, arg(args, "path")?],
        )
    });
    tera.register_function("chainSetField", |args: &Args| {
        call(
            "chainSetField",
            vec![arg(args, "obj")?, arg(args, "path")?, arg(args, "value")?],
        )
    });
}

fn arg(args: &Args, name: &str) -> tera::Result<serde_json::Value> {
    args.get(name)
        .cloned()
        .ok_or_else(|| tera::Error::msg(format!("missing argument {name}")))
}
