//! `sluice eval`: the reference oracle's `eventsource` request/response JSON, answered by the same
//! code the evaluator service runs. A request is `{"eventSource": .., "object": ..}` (answer
//! `{"matching", "message"}`) or `{"eventSource": .., "objects": [..]}` (answer
//! `{"message", "resources"}`); a failure answers `{"error": ..}`; an array of requests gives an
//! array of answers. No IO here: the CLI reads stdin and prints the string.

use std::error::Error as StdError;

use serde_json::{json, Value};

use crate::compile_object;

/// Answers one request or an array of requests (see the module documentation).
pub fn run(input: &str) -> String {
    let answer = match serde_json::from_str::<Value>(input) {
        Ok(Value::Array(requests)) => Value::Array(requests.iter().map(answer).collect()),
        Ok(request) => answer(&request),
        Err(e) => error(format!("invalid request json: {e}")),
    };
    answer.to_string()
}

/// Answers one request given as a JSON value.
pub fn answer(request: &Value) -> Value {
    match try_answer(request) {
        Ok(v) => v,
        Err(message) => error(message),
    }
}

fn try_answer(request: &Value) -> Result<Value, String> {
    let es = request
        .get("eventSource")
        .ok_or("eventSource is required")?;
    let compiled = compile_object(es).map_err(|e| chain(&e))?;
    if let Some(object) = request.get("object") {
        if !object.is_object() {
            return Err("object: expected a JSON object".into());
        }
        let verdict = compiled.evaluate_value(object).map_err(|e| chain(&e))?;
        return Ok(json!({"matching": verdict.matching, "message": verdict.message}));
    }
    let objects = match request.get("objects") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err("objects: expected a list of JSON objects".into()),
        None => return Err("object or objects is required".into()),
    };
    if let Some(i) = objects.iter().position(|o| !o.is_object()) {
        return Err(format!("objects[{i}]: expected a JSON object"));
    }
    let selected = compiled.select(objects).map_err(|e| chain(&e))?;
    let aggregated = compiled.aggregate(&selected).map_err(|e| chain(&e))?;
    Ok(json!({"message": aggregated.message, "resources": aggregated.resources}))
}

fn error(message: String) -> Value {
    json!({ "error": message })
}

/// The error and its sources on one line, outermost first.
fn chain(e: &dyn StdError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
