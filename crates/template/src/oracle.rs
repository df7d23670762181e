//! `sluice render`: the oracle's `template` mode request/response JSON over this engine, so the
//! same corpus and the same tools run against sluice and against Go.

use serde_json::{json, Value as Json};

use std::sync::Arc;

use crate::{event_data_shared, Doc, Engine, MissingKey, Options, Template};

/// The oracle's default template name.
pub const DEFAULT_NAME: &str = "sluice-conformance";

/// Answers one request object with `{"output": ..}` / `{"error": ..}`, or a JSON array of
/// requests with an array of answers. Malformed input is answered with `{"error": ..}`.
pub fn run(input: &str) -> String {
    let answer = match serde_json::from_str::<Json>(input) {
        Ok(Json::Array(requests)) => Json::Array(requests.iter().map(answer).collect()),
        Ok(request) => answer(&request),
        Err(e) => json!({ "error": format!("request is not JSON: {e}") }),
    };
    answer.to_string()
}

/// Answers one request.
pub fn answer(request: &Json) -> Json {
    match render_request(request) {
        Ok(output) => json!({ "output": output }),
        Err(error) => json!({ "error": error }),
    }
}

fn render_request(request: &Json) -> Result<String, String> {
    let Json::Object(fields) = request else {
        return Err("request must be a JSON object".into());
    };
    let text = fields
        .get("template")
        .and_then(Json::as_str)
        .ok_or("template is required")?;
    let engine = match fields
        .get("engine")
        .and_then(Json::as_str)
        .unwrap_or("text")
    {
        "text" => Engine::Text,
        "html" => Engine::Html,
        "tera" => Engine::Tera,
        other => return Err(format!("engine must be text, html or tera, got {other:?}")),
    };
    let missing_key = match fields
        .get("missingkey")
        .and_then(Json::as_str)
        .unwrap_or("error")
    {
        "error" => MissingKey::Error,
        "default" | "invalid" => MissingKey::Default,
        "zero" => MissingKey::Zero,
        other => {
            return Err(format!(
                "missingkey must be error, default or zero, got {other:?}"
            ))
        }
    };
    let name = fields
        .get("name")
        .and_then(Json::as_str)
        .unwrap_or(DEFAULT_NAME)
        .to_string();
    let data = match fields.get("data") {
        None | Some(Json::Null) => event_data_shared(Arc::new(Doc::object::<&str>([]))),
        Some(d @ Json::Object(_)) => event_data_shared(Arc::new(Doc::from(d))),
        Some(_) => return Err("data must be a JSON object".into()),
    };
    let options = Options {
        engine,
        missing_key,
        name,
    };
    let template = Template::parse(text, &options).map_err(|e| e.to_string())?;
    template.render(&data).map_err(|e| e.to_string())
}
