//! Validation of an Anthropic Messages request body (`POST /api/v1/ai/anthropic/v1/messages`,
//! and the body of `/v1/messages/count_tokens`), without building a tree of it.
//!
//! The gateway forwards the body byte for byte; it checks the fields it relies on and finds
//! what it cannot price before the call. The body is read once: the fields it checks are held
//! as raw JSON slices borrowed from the request, every other field (and every text) is
//! skipped, validated as JSON but never copied. Errors name the field by its JSON path
//! (`messages[2].content[0].type`). A key given twice in one object is refused as invalid
//! JSON (as Anthropic refuses it).
//!
//! The worst case a budget and a `tpm_limit` reserve:
//!
//! - prompt: [`PRIMING_TOKENS`], [`TOKENS_PER_MESSAGE`] per message, [`TOOL_PROMPT_TOKENS`]
//!   when `tools` is non-empty (the tool-use system prompt Anthropic adds),
//!   [`BUILT_IN_TOOL_TOKENS`] per Anthropic-defined tool (`bash_…`, `computer_…`: their
//!   definitions are not in the body), plus one token per byte of the whole body;
//! - images: each `image` block (also inside a `tool_result`'s content) at the model's
//!   `image_tokens`;
//! - output: `max_tokens` (extended thinking included, as Anthropic counts it).
//!
//! Input the gateway cannot see makes the call [`RequestSummary::unbounded_part`]: a
//! `document` whose `source.type` is `file` (a file id) or `url`, the server tools that put
//! what they find into the prompt (`web_search_…`, `web_fetch_…`) and `mcp_servers`.

use crate::dialect::chat::MAX_COMPLETION_TOKENS;
use crate::dialect::summary::RequestSummary;
use aigw_domain::usage::Endpoint;
use aigw_domain::FieldError;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Tokens that prime the answer (`Assistant:`).
pub const PRIMING_TOKENS: u64 = 3;

/// Tokens Anthropic adds around each message (its role and separators).
pub const TOKENS_PER_MESSAGE: u64 = 4;

/// Tokens of the system prompt Anthropic adds when a request has tools (documented as up to
/// 346 for Claude's current models), with room to spare.
pub const TOOL_PROMPT_TOKENS: u64 = 512;

/// Tokens of an Anthropic-defined tool's definition, which the body only names by `type`
/// (the computer-use tool's is documented at up to 735).
pub const BUILT_IN_TOOL_TOKENS: u64 = 1024;

/// The roles of a message.
pub const ROLES: [&str; 2] = ["user", "assistant"];

/// Server tools whose results the provider adds to the prompt, unseen by the gateway (by the
/// start of their `type`, which carries a date: `web_search_20250305`).
const UNSEEN_TOOLS: [&str; 2] = ["web_search", "web_fetch"];

/// The fields of a request the gateway reads, as raw slices of the body.
#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    mcp_servers: Option<&'a RawValue>,
}

/// A message's fields the gateway reads.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// A content block's (or a tool's) fields the gateway reads.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    source: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// What the request holds beyond text.
#[derive(Debug, Default)]
struct Seen {
    /// `image` blocks.
    images: u64,
    /// Fixed tokens beyond the body's bytes.
    fixed: u64,
    /// The path of the first input the gateway cannot see.
    unbounded: Option<String>,
}

impl Seen {
    fn unseen(&mut self, path: String) {
        self.unbounded.get_or_insert(path);
    }
}

/// Checks a Messages request and summarises it.
///
/// # Errors
/// [`FieldError`] on `body` (not valid JSON, not an object), `model` (missing, not a
/// non-empty string), `max_tokens` (missing, not an integer from 1 to
/// [`MAX_COMPLETION_TOKENS`]), `messages` (missing, not a non-empty array), `messages[i]`
/// (not an object), `messages[i].role` (not `user` or `assistant`), `messages[i].content`
/// (not a string or an array), `messages[i].content[j]` (not an object),
/// `messages[i].content[j].type` (missing, not a string), `system` (not a string or an array
/// of blocks, each an object with a string `type`), `stream` (not a boolean), `tools` (not an
/// array of objects), as the OpenAPI description's `MessagesRequest` says.
pub fn validate_messages_request(body: &[u8]) -> Result<RequestSummary, FieldError> {
    let (request, model, mut seen) = read_request(body)?;
    let completion_cap = match request.max_tokens.filter(|raw| !is_null(raw)) {
        None => return Err(FieldError::new("max_tokens", "is required")),
        Some(raw) => raw
            .get()
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=MAX_COMPLETION_TOKENS).contains(n))
            .ok_or_else(|| {
                FieldError::new(
                    "max_tokens",
                    format!("must be an integer from 1 to {MAX_COMPLETION_TOKENS}"),
                )
            })?,
    };
    let stream = match request.stream.map(RawValue::get) {
        None | Some("null" | "false") => false,
        Some("true") => true,
        Some(_) => return Err(FieldError::new("stream", "must be a boolean")),
    };
    let bytes = u64::try_from(body.len()).unwrap_or(u64::MAX);
    seen.fixed = seen.fixed.saturating_add(PRIMING_TOKENS);
    Ok(RequestSummary {
        endpoint: Endpoint::Messages,
        model,
        stream,
        has_stream_options: false,
        include_usage: false,
        prompt_bound: seen.fixed.saturating_add(bytes),
        prompt_floor: 0,
        images: seen.images,
        completion_cap,
        unbounded_part: seen.unbounded,
    })
}

/// Checks the body of a token count (`/v1/messages/count_tokens`: a Messages request without
/// `max_tokens` or `stream`) and summarises it for routing: its model, nothing to price.
///
/// # Errors
/// [`FieldError`] as [`validate_messages_request`] but for `max_tokens` and `stream`.
pub fn validate_count_tokens_request(body: &[u8]) -> Result<RequestSummary, FieldError> {
    let (_, model, _) = read_request(body)?;
    Ok(RequestSummary {
        endpoint: Endpoint::Messages,
        model,
        stream: false,
        has_stream_options: false,
        include_usage: false,
        prompt_bound: 0,
        prompt_floor: 0,
        images: 0,
        completion_cap: 0,
        unbounded_part: None,
    })
}

/// Reads and checks what a request and a token count share: `model`, `messages`, `system`,
/// `tools`, `mcp_servers`.
fn read_request(body: &[u8]) -> Result<(Request<'_>, String, Seen), FieldError> {
    let is_object = body.trim_ascii_start().first() == Some(&b'{');
    let request: Request<'_> =
        serde_json::from_slice(body).ok().filter(|_| is_object).ok_or_else(|| {
            if !is_object && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
                FieldError::new("body", "must be a JSON object")
            } else {
                FieldError::new("body", "is not valid JSON (or repeats a key)")
            }
        })?;
    let model = match request.model.filter(|raw| !is_null(raw)) {
        None => return Err(FieldError::new("model", "is required")),
        Some(raw) => serde_json::from_str::<String>(raw.get())
            .ok()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| FieldError::new("model", "must be a non-empty string"))?,
    };
    let messages = match request.messages.filter(|raw| !is_null(raw)) {
        None => return Err(FieldError::new("messages", "is required")),
        Some(raw) => serde_json::from_str::<Vec<&RawValue>>(raw.get())
            .ok()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| FieldError::new("messages", "must be a non-empty array"))?,
    };
    let mut seen = Seen::default();
    for (i, raw) in messages.iter().enumerate() {
        seen.fixed = seen.fixed.saturating_add(TOKENS_PER_MESSAGE);
        check_message(i, raw, &mut seen)?;
    }
    match request.system.map(first_byte) {
        None | Some(b'"' | b'n') => {}
        Some(b'[') => check_blocks("system", request.system, &mut seen)?,
        Some(_) => {
            return Err(FieldError::new("system", "must be a string or an array of text blocks"))
        }
    }
    check_tools(request.tools, &mut seen)?;
    let servers = request
        .mcp_servers
        .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok())
        .unwrap_or_default();
    if !servers.is_empty() {
        seen.unseen("mcp_servers".to_owned());
    }
    Ok((request, model, seen))
}

/// Checks `messages[i]`: an object with role `user` or `assistant` and a string or an array
/// of content blocks.
fn check_message(i: usize, raw: &RawValue, seen: &mut Seen) -> Result<(), FieldError> {
    let message: Message<'_> = object(raw)
        .ok_or_else(|| FieldError::new(format!("messages[{i}]"), "must be an object"))?;
    let role = message.role.and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok());
    if !role.is_some_and(|r| ROLES.contains(&r.as_ref())) {
        return Err(FieldError::new(format!("messages[{i}].role"), "must be user or assistant"));
    }
    let path = format!("messages[{i}].content");
    match message.content.map(first_byte) {
        Some(b'"') => Ok(()),
        Some(b'[') => check_blocks(&path, message.content, seen),
        _ => Err(FieldError::new(path, "must be a string or an array of content blocks")),
    }
}

/// Checks the content blocks at `path`: each an object with a string `type`; counts images
/// (also those of a `tool_result`'s content) and notes documents the gateway cannot see.
fn check_blocks(path: &str, raw: Option<&RawValue>, seen: &mut Seen) -> Result<(), FieldError> {
    let blocks = raw
        .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok())
        .ok_or_else(|| FieldError::new(path, "must be a string or an array of content blocks"))?;
    for (j, raw) in blocks.iter().enumerate() {
        let at = format!("{path}[{j}]");
        let block: Block<'_> = object(raw)
            .ok_or_else(|| FieldError::new(at.clone(), "must be a content block object"))?;
        let kind = string(block.kind)
            .ok_or_else(|| FieldError::new(format!("{at}.type"), "is required (a string)"))?;
        match kind.as_ref() {
            "image" => seen.images = seen.images.saturating_add(1),
            "document" => {
                let source = block.source.and_then(object::<Block<'_>>);
                let source = source.and_then(|s| string(s.kind));
                if source.is_some_and(|s| s == "file" || s == "url") {
                    seen.unseen(format!("{at}.source"));
                }
            }
            "tool_result" if block.content.is_some_and(|raw| first_byte(raw) == b'[') => {
                check_blocks(&format!("{at}.content"), block.content, seen)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks `tools`: an array of objects; adds the tool-use prompt and the definitions of
/// Anthropic-defined tools, and notes the server tools whose results the gateway cannot see.
fn check_tools(raw: Option<&RawValue>, seen: &mut Seen) -> Result<(), FieldError> {
    let Some(raw) = raw.filter(|raw| !is_null(raw)) else {
        return Ok(());
    };
    let tools = serde_json::from_str::<Vec<&RawValue>>(raw.get())
        .map_err(|_| FieldError::new("tools", "must be an array of tool objects"))?;
    if !tools.is_empty() {
        seen.fixed = seen.fixed.saturating_add(TOOL_PROMPT_TOKENS);
    }
    for (i, raw) in tools.iter().enumerate() {
        let tool: Block<'_> = object(raw)
            .ok_or_else(|| FieldError::new(format!("tools[{i}]"), "must be a tool object"))?;
        let Some(kind) = string(tool.kind).filter(|k| k != "custom") else {
            continue;
        };
        seen.fixed = seen.fixed.saturating_add(BUILT_IN_TOOL_TOKENS);
        if UNSEEN_TOOLS.iter().any(|t| kind.starts_with(t)) {
            seen.unseen(format!("tools[{i}]"));
        }
    }
    Ok(())
}

/// A raw JSON value read as `T`, when it is an object (serde would also read an array into
/// a struct) with no key twice.
fn object<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Option<T> {
    (first_byte(raw) == b'{').then(|| serde_json::from_str(raw.get()).ok()).flatten()
}

/// A raw JSON value as a string, when it is one.
fn string<'a>(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
    serde_json::from_str::<Cow<'a, str>>(raw?.get()).ok()
}

/// The first byte of a raw JSON value (serde_json trims the whitespace around it).
fn first_byte(raw: &RawValue) -> u8 {
    raw.get().as_bytes().first().copied().unwrap_or(b' ')
}

fn is_null(raw: &&RawValue) -> bool {
    raw.get() == "null"
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]

    use super::*;

    fn summary(body: &str) -> Result<RequestSummary, String> {
        validate_messages_request(body.as_bytes()).map_err(|e| e.field)
    }

    #[test]
    fn the_worst_case_is_the_body_and_max_tokens() {
        let body = r#"{"model":"claude","max_tokens":50,"stream":true,
            "messages":[{"role":"user","content":"hello"}]}"#;
        let s = summary(body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.prompt_bound, PRIMING_TOKENS + TOKENS_PER_MESSAGE + body.len() as u64);
        assert_eq!((s.completion_cap, s.stream, s.images), (50, true, 0));
        assert_eq!((s.endpoint, s.unbounded_part), (Endpoint::Messages, None));
        let tools = r#"{"model":"m","max_tokens":9,"system":[{"type":"text","text":"be brief"}],
            "messages":[{"role":"user","content":[{"type":"text","text":"look"},
              {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]},
              {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
              {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[
                {"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}]}],
            "tools":[{"name":"f","input_schema":{"type":"object"}},{"type":"bash_20250124","name":"bash"}]}"#;
        let s = summary(tools).unwrap_or_else(|e| panic!("{e}"));
        let fixed =
            PRIMING_TOKENS + 3 * TOKENS_PER_MESSAGE + TOOL_PROMPT_TOKENS + BUILT_IN_TOOL_TOKENS;
        assert_eq!((s.prompt_bound, s.images), (fixed + tools.len() as u64, 2));
    }

    #[test]
    fn input_the_gateway_cannot_see_is_named() {
        let message = |content: &str| {
            format!(
                r#"{{"model":"m","max_tokens":5,"messages":[{{"role":"user","content":{content}}}]}}"#
            )
        };
        for (body, part) in [
            (
                message(r#"[{"type":"document","source":{"type":"file","file_id":"file_1"}}]"#),
                "messages[0].content[0].source",
            ),
            (
                r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],
                    "tools":[{"type":"web_search_20250305","name":"web_search"}]}"#
                    .to_owned(),
                "tools[0]",
            ),
            (
                r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],
                    "mcp_servers":[{"type":"url","url":"https://mcp"}]}"#
                    .to_owned(),
                "mcp_servers",
            ),
        ] {
            let s = summary(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
            assert_eq!(s.unbounded_part.as_deref(), Some(part), "{body}");
        }
        let inline = message(r#"[{"type":"document","source":{"type":"base64","data":"JVBE"}}]"#);
        assert_eq!(summary(&inline).map(|s| s.unbounded_part), Ok(None));
    }

    #[test]
    fn bad_input_names_the_field() {
        let ok = r#"{"role":"user","content":"x"}"#;
        for (body, field) in [
            ("[]".to_owned(), "body"),
            ("{".to_owned(), "body"),
            (r#"{"model":"m","model":"n","max_tokens":1,"messages":[]}"#.to_owned(), "body"),
            (format!(r#"{{"max_tokens":1,"messages":[{ok}]}}"#), "model"),
            (format!(r#"{{"model":"","max_tokens":1,"messages":[{ok}]}}"#), "model"),
            (format!(r#"{{"model":"m","messages":[{ok}]}}"#), "max_tokens"),
            (format!(r#"{{"model":"m","max_tokens":0,"messages":[{ok}]}}"#), "max_tokens"),
            (format!(r#"{{"model":"m","max_tokens":1.5,"messages":[{ok}]}}"#), "max_tokens"),
            (format!(r#"{{"model":"m","max_tokens":1048577,"messages":[{ok}]}}"#), "max_tokens"),
            (r#"{"model":"m","max_tokens":1,"messages":[]}"#.to_owned(), "messages"),
            (r#"{"model":"m","max_tokens":1}"#.to_owned(), "messages"),
            (r#"{"model":"m","max_tokens":1,"messages":[5]}"#.to_owned(), "messages[0]"),
            (r#"{"model":"m","max_tokens":1,"messages":[["user","x"]]}"#.to_owned(), "messages[0]"),
            (
                format!(r#"{{"model":"m","max_tokens":1,"messages":[{ok},{{"role":"system","content":"x"}}]}}"#),
                "messages[1].role",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}"#.to_owned(),
                "messages[0].content",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}"#.to_owned(),
                "messages[0].content",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"text":"x"}]}]}"#.to_owned(),
                "messages[0].content[0].type",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[7]}]}"#.to_owned(),
                "messages[0].content[0]",
            ),
            (format!(r#"{{"model":"m","max_tokens":1,"messages":[{ok}],"system":5}}"#), "system"),
            (
                format!(r#"{{"model":"m","max_tokens":1,"messages":[{ok}],"system":[{{"type":1}}]}}"#),
                "system[0].type",
            ),
            (format!(r#"{{"model":"m","max_tokens":1,"messages":[{ok}],"stream":"yes"}}"#), "stream"),
            (format!(r#"{{"model":"m","max_tokens":1,"messages":[{ok}],"tools":{{}}}}"#), "tools"),
        ] {
            assert_eq!(summary(&body).err().as_deref(), Some(field), "{body}");
        }
        let escaped = r#"{"model":"m","max_tokens":1,"messages":[{"role":"\u0075ser","content":[{"type":"te\u0078t","text":"x"}]}]}"#;
        assert!(summary(escaped).is_ok(), "escaped strings are strings");
    }

    #[test]
    fn a_token_count_needs_no_max_tokens() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#;
        assert_eq!(validate_count_tokens_request(body).map(|s| s.model), Ok("m".to_owned()));
        let bad = br#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#;
        assert_eq!(
            validate_count_tokens_request(bad).map_err(|e| e.field),
            Err("messages[0].role".to_owned())
        );
    }
}
