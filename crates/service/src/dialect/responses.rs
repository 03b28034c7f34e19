//! Validation of a Responses API request body (`POST /api/v1/ai/responses`, OpenAI's shape).
//!
//! The gateway forwards the body byte for byte; it checks the fields it relies on and finds
//! what it cannot price before the call:
//!
//! - input the gateway cannot see: `previous_response_id`, `conversation`, a stored `prompt`,
//!   an `item_reference` item, a file sent by `file_id` (or `file_url`), and the hosted tools
//!   that put what they find into the prompt (`file_search`, `web_search*`, `mcp`). The call's
//!   prompt is then bounded only by the model's context window (`[[providers]]
//!   context_windows`); a key with a budget or a `tpm_limit` cannot make it without one.
//! - `background: true` is refused: the answer to a background response arrives later, out
//!   of the call the gateway meters.
//!
//! The worst case: the prompt's bound is the body's bytes (one token per byte) plus the
//! dialect's fixed tokens; images (`input_image` parts) at the model's image tokens; the
//! output is `max_output_tokens` (reasoning included, as the API counts it), else
//! [`DEFAULT_COMPLETION_CAP`].

use crate::dialect::chat::{DEFAULT_COMPLETION_CAP, MAX_COMPLETION_TOKENS};
use crate::dialect::summary::RequestSummary;
use aigw_domain::usage::Endpoint;
use aigw_domain::FieldError;
use serde_json::Value;

/// Tokens a provider adds around each input item (its role and separators), counted per
/// item in the prompt's bound beside the body's bytes.
const TOKENS_PER_ITEM: u64 = 4;

/// Tokens that prime the answer.
const PRIMING_TOKENS: u64 = 3;

/// The roles of a message item.
const ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];

/// Hosted tools whose results the provider adds to the prompt, unseen by the gateway.
const UNSEEN_TOOLS: [&str; 5] =
    ["file_search", "web_search", "web_search_preview", "web_search_2025_08_26", "mcp"];

/// Checks a Responses API request and summarises it.
///
/// # Errors
/// [`FieldError`] on `body` (not valid JSON, not an object), `model` (missing, not a
/// non-empty string), `input` (not a string or an array), `input[i]` (not an object),
/// `input[i].role` (not one of user, assistant, system, developer), `input[i].content` (not
/// a string or an array), `input[i].content[j]` (not an object with a string `type`),
/// `instructions` (not a string), `stream` (not a boolean), `max_output_tokens` (not an
/// integer from 1 to [`MAX_COMPLETION_TOKENS`]), `background` (true), as the OpenAPI
/// description's `ResponseRequest` says.
pub fn validate_responses_request(body: &[u8]) -> Result<RequestSummary, FieldError> {
    let parsed: Value =
        serde_json::from_slice(body).map_err(|_| FieldError::new("body", "is not valid JSON"))?;
    let top = parsed.as_object().ok_or_else(|| FieldError::new("body", "must be a JSON object"))?;
    let model = match top.get("model") {
        None | Some(Value::Null) => return Err(FieldError::new("model", "is required")),
        Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(_) => return Err(FieldError::new("model", "must be a non-empty string")),
    };
    let stream = match top.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(FieldError::new("stream", "must be a boolean")),
    };
    if top.get("background") == Some(&Value::Bool(true)) {
        return Err(FieldError::new(
            "background",
            "is not supported: a background response is answered after the call the gateway \
             meters",
        ));
    }
    if !matches!(top.get("instructions"), None | Some(Value::Null | Value::String(_))) {
        return Err(FieldError::new("instructions", "must be a string"));
    }
    let cap = match top.get("max_output_tokens") {
        None | Some(Value::Null) => DEFAULT_COMPLETION_CAP,
        Some(value) => {
            value.as_u64().filter(|n| (1..=MAX_COMPLETION_TOKENS).contains(n)).ok_or_else(|| {
                FieldError::new(
                    "max_output_tokens",
                    format!("must be an integer from 1 to {MAX_COMPLETION_TOKENS}"),
                )
            })?
        }
    };
    let mut seen = Seen::default();
    match top.get("input") {
        None | Some(Value::Null) | Some(Value::String(_)) => seen.items = 1,
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                check_item(i, item, &mut seen)?;
            }
        }
        Some(_) => return Err(FieldError::new("input", "must be a string or an array of items")),
    }
    for field in ["previous_response_id", "conversation", "prompt"] {
        if top.get(field).is_some_and(|v| !v.is_null()) {
            seen.unseen(field.to_owned());
        }
    }
    for (i, tool) in top.get("tools").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
        if UNSEEN_TOOLS.contains(&kind) {
            seen.unseen(format!("tools[{i}]"));
        }
    }
    let bytes = u64::try_from(body.len()).unwrap_or(u64::MAX);
    let prompt_bound = PRIMING_TOKENS
        .saturating_add(bytes)
        .saturating_add(seen.items.saturating_mul(TOKENS_PER_ITEM));
    Ok(RequestSummary {
        endpoint: Endpoint::Responses,
        model,
        stream,
        has_stream_options: false,
        include_usage: false,
        prompt_bound,
        prompt_floor: 0,
        images: seen.images,
        completion_cap: cap,
        unbounded_part: seen.unbounded,
    })
}

/// What the input items hold beyond text.
#[derive(Debug, Default)]
struct Seen {
    /// Input items (a string input counts as one).
    items: u64,
    /// `input_image` parts.
    images: u64,
    /// The path of the first input the gateway cannot see.
    unbounded: Option<String>,
}

impl Seen {
    fn unseen(&mut self, path: String) {
        self.unbounded.get_or_insert(path);
    }
}

/// Checks `input[i]`: an object; a message (it has a `role`, or `type: "message"`) with a
/// known role and a string or array content; an `item_reference` is input the gateway cannot
/// see; other item types (function calls and their outputs, reasoning) pass as they are.
fn check_item(i: usize, item: &Value, seen: &mut Seen) -> Result<(), FieldError> {
    let object = item
        .as_object()
        .ok_or_else(|| FieldError::new(format!("input[{i}]"), "must be an object"))?;
    seen.items = seen.items.saturating_add(1);
    let kind = object.get("type").and_then(Value::as_str);
    if kind == Some("item_reference") {
        seen.unseen(format!("input[{i}]"));
        return Ok(());
    }
    if kind.is_some_and(|k| k != "message") || (kind.is_none() && !object.contains_key("role")) {
        return Ok(());
    }
    let role = object.get("role").and_then(Value::as_str);
    if !role.is_some_and(|r| ROLES.contains(&r)) {
        return Err(FieldError::new(
            format!("input[{i}].role"),
            "must be one of user, assistant, system, developer",
        ));
    }
    match object.get("content") {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) => {
            for (j, part) in parts.iter().enumerate() {
                check_part(i, j, part, seen)?;
            }
            Ok(())
        }
        _ => Err(FieldError::new(
            format!("input[{i}].content"),
            "must be a string or an array of content parts",
        )),
    }
}

/// Checks `input[i].content[j]`: an object with a string `type`; counts an image, and notes
/// a file the gateway cannot see.
fn check_part(i: usize, j: usize, part: &Value, seen: &mut Seen) -> Result<(), FieldError> {
    let path = format!("input[{i}].content[{j}]");
    let kind = part
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| FieldError::new(format!("{path}.type"), "is required (a string)"))?;
    match kind {
        "input_image" => seen.images = seen.images.saturating_add(1),
        "input_file" if part.get("file_data").is_none_or(Value::is_null) => {
            seen.unseen(format!("{path}.file_id"));
        }
        _ => {}
    }
    if !matches!(part.get("text"), None | Some(Value::Null | Value::String(_))) {
        return Err(FieldError::new(format!("{path}.text"), "must be a string"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]

    use super::*;

    fn summary(body: &str) -> Result<RequestSummary, String> {
        validate_responses_request(body.as_bytes()).map_err(|e| e.field)
    }

    #[test]
    fn the_worst_case_is_the_body_and_the_output_cap() {
        let body = r#"{"model":"m","input":"hello","max_output_tokens":50,"stream":true}"#;
        let s = summary(body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.prompt_bound, PRIMING_TOKENS + body.len() as u64 + TOKENS_PER_ITEM);
        assert_eq!(s.completion_cap, 50);
        assert!(s.stream);
        assert_eq!(s.unbounded_part, None);
        let images = r#"{"model":"m","input":[{"role":"user","content":[
            {"type":"input_text","text":"what is this"},{"type":"input_image","image_url":"x"}]}]}"#;
        let s = summary(images).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.images, s.completion_cap), (1, DEFAULT_COMPLETION_CAP));
    }

    #[test]
    fn input_the_gateway_cannot_see_is_named() {
        for (body, part) in [
            (
                r#"{"model":"m","previous_response_id":"resp_1","input":"more"}"#,
                "previous_response_id",
            ),
            (r#"{"model":"m","conversation":"conv_1"}"#, "conversation"),
            (r#"{"model":"m","prompt":{"id":"pmpt_1"}}"#, "prompt"),
            (r#"{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}"#, "input[0]"),
            (
                r#"{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}"#,
                "input[0].content[0].file_id",
            ),
            (r#"{"model":"m","input":"x","tools":[{"type":"web_search"}]}"#, "tools[0]"),
        ] {
            let s = summary(body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert_eq!(s.unbounded_part.as_deref(), Some(part), "{body}");
        }
        let with_data = r#"{"model":"m","input":[{"role":"user","content":[
            {"type":"input_file","file_data":"data:application/pdf;base64,AA=="}]}]}"#;
        assert_eq!(summary(with_data).map(|s| s.unbounded_part), Ok(None));
    }

    #[test]
    fn bad_input_names_the_field() {
        for (body, field) in [
            ("[]", "body"),
            ("{", "body"),
            (r#"{"input":"x"}"#, "model"),
            (r#"{"model":7}"#, "model"),
            (r#"{"model":"m","input":5}"#, "input"),
            (r#"{"model":"m","input":[5]}"#, "input[0]"),
            (r#"{"model":"m","input":[{"role":"robot","content":"x"}]}"#, "input[0].role"),
            (r#"{"model":"m","input":[{"role":"user","content":5}]}"#, "input[0].content"),
            (
                r#"{"model":"m","input":[{"role":"user","content":[{"text":"x"}]}]}"#,
                "input[0].content[0].type",
            ),
            (
                r#"{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":1}]}]}"#,
                "input[0].content[0].text",
            ),
            (r#"{"model":"m","stream":"yes"}"#, "stream"),
            (r#"{"model":"m","max_output_tokens":0}"#, "max_output_tokens"),
            (r#"{"model":"m","max_output_tokens":2097152}"#, "max_output_tokens"),
            (r#"{"model":"m","instructions":["x"]}"#, "instructions"),
            (r#"{"model":"m","background":true}"#, "background"),
        ] {
            assert_eq!(summary(body).err().as_deref(), Some(field), "{body}");
        }
        let calls = r#"{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"42"}]}"#;
        assert!(summary(calls).is_ok(), "other item types pass");
    }
}
