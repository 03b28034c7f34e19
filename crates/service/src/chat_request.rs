//! Validation of a chat completion request body (`POST /api/v1/ai/chat/completions`) without
//! building a tree of it.
//!
//! The gateway forwards the body byte for byte, so it only needs to know that the fields it
//! relies on are well formed. The body is read once, borrowing from the request bytes: the
//! fields the gateway checks are held as raw JSON slices, every other field is skipped
//! (validated as JSON, never copied). A large conversation therefore costs one pass over its
//! bytes, not a second copy of every string in it. Errors name the field by its JSON path.
//! As with `serde_json::Value`, a key given twice counts once, with its last value.

use aigw_domain::FieldError;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// The message roles OpenAI's chat completions know (the OpenAPI description's `ChatRole`).
pub const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// What a validated chat request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequestSummary {
    /// The `model` field.
    pub model: String,
    /// The `stream` field (default false).
    pub stream: bool,
    /// Whether the body has a `stream_options` member (of any value).
    pub has_stream_options: bool,
    /// Whether the caller asked for a final usage chunk: `stream_options.include_usage` is
    /// `true`.
    pub include_usage: bool,
    /// An upper bound of the prompt's tokens under any byte-level BPE encoding, without a
    /// tokenizer: the chat format's fixed tokens of each message (as if each had a `name`) plus
    /// one token per byte of the message's JSON text. Every text the tokenizer counts (role,
    /// content, name, tool calls, each followed by a newline) is in that JSON, quoted, and a
    /// byte-level BPE token stands for at least one byte.
    pub prompt_bound: u64,
    /// `max_completion_tokens`, else `max_tokens`, else
    /// [`crate::budget::DEFAULT_COMPLETION_CAP`] (also when either is not a non-negative
    /// integer: the provider will refuse the request).
    pub completion_cap: u64,
}

/// Checks the fields the gateway relies on; every other field is passed through untouched.
///
/// # Errors
/// [`FieldError`] on `body` (not valid JSON, or not an object), `model` (missing, not a
/// non-empty string), `messages` (missing, not a non-empty array), `messages[i]` (not an
/// object), `messages[i].role` (missing, or not one of [`ROLES`]), `messages[i].content` (not
/// a string, an array of content parts or null), `messages[i].content[j]` (not an object),
/// `messages[i].content[j].type` (missing, not a string), `messages[i].content[j].text` (not
/// a string) or `stream` (not a boolean), exactly as the OpenAPI description's
/// `ChatCompletionRequest` says.
pub fn validate_chat_request(body: &[u8]) -> Result<ChatRequestSummary, FieldError> {
    let top: Fields<'_> = serde_json::from_slice(body).map_err(|_| {
        if serde_json::from_slice::<IgnoredAny>(body).is_ok() {
            FieldError::new("body", "must be a JSON object")
        } else {
            FieldError::new("body", "is not valid JSON")
        }
    })?;
    let model = match top.model.filter(|raw| !is_null(raw)) {
        None => return Err(FieldError::new("model", "is required")),
        Some(raw) => serde_json::from_str::<String>(raw.get())
            .ok()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| FieldError::new("model", "must be a non-empty string"))?,
    };
    let messages = match top.messages.filter(|raw| !is_null(raw)) {
        None => return Err(FieldError::new("messages", "is required")),
        Some(raw) => serde_json::from_str::<Vec<&RawValue>>(raw.get())
            .ok()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| FieldError::new("messages", "must be a non-empty array"))?,
    };
    let mut prompt_bound = crate::usage::tokens::REPLY_PRIMING_TOKENS;
    for (i, raw) in messages.iter().enumerate() {
        prompt_bound = prompt_bound
            .saturating_add(crate::usage::tokens::TOKENS_PER_MESSAGE)
            .saturating_add(crate::usage::tokens::TOKENS_PER_NAME)
            .saturating_add(u64::try_from(raw.get().len()).unwrap_or(u64::MAX));
        let message: Fields<'_> = serde_json::from_str(raw.get())
            .map_err(|_| FieldError::new(format!("messages[{i}]"), "must be an object"))?;
        match message.role {
            None => return Err(FieldError::new(format!("messages[{i}].role"), "is required")),
            Some(raw) => {
                let known =
                    serde_json::from_str::<&str>(raw.get()).is_ok_and(|role| ROLES.contains(&role));
                if !known {
                    return Err(FieldError::new(
                        format!("messages[{i}].role"),
                        "must be one of system, developer, user, assistant, tool",
                    ));
                }
            }
        }
        match message.content.map(first_byte) {
            None | Some(b'"' | b'n') => {}
            Some(b'[') => check_content_parts(i, message.content)?,
            Some(_) => {
                return Err(FieldError::new(
                    format!("messages[{i}].content"),
                    "must be a string or an array of content parts",
                ))
            }
        }
    }
    let stream = match top.stream.map(|raw| raw.get()) {
        None | Some("null") => false,
        Some("true") => true,
        Some("false") => false,
        Some(_) => return Err(FieldError::new("stream", "must be a boolean")),
    };
    let include_usage = top
        .stream_options
        .and_then(|raw| serde_json::from_str::<Fields<'_>>(raw.get()).ok())
        .and_then(|options| options.include_usage)
        .is_some_and(|raw| raw.get() == "true");
    let cap = |raw: Option<&RawValue>| match raw {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => raw.get().parse::<u64>().map(Some).map_err(|_| ()),
    };
    let completion_cap = match (cap(top.max_completion_tokens), cap(top.max_tokens)) {
        (Ok(first), Ok(second)) => first.or(second),
        _ => None,
    }
    .unwrap_or(crate::budget::DEFAULT_COMPLETION_CAP);
    Ok(ChatRequestSummary {
        model,
        stream,
        has_stream_options: top.stream_options.is_some(),
        include_usage,
        prompt_bound,
        completion_cap,
    })
}

/// Checks the content parts of `messages[i]`: each an object with a string `type` and, when
/// present, a string (or null) `text`.
fn check_content_parts(i: usize, content: Option<&RawValue>) -> Result<(), FieldError> {
    let parts = content
        .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok())
        .ok_or_else(|| {
            FieldError::new(
                format!("messages[{i}].content"),
                "must be a string or an array of content parts",
            )
        })?;
    for (j, raw) in parts.iter().enumerate() {
        let field = |name: &str| format!("messages[{i}].content[{j}]{name}");
        let part: Fields<'_> = serde_json::from_str(raw.get())
            .map_err(|_| FieldError::new(field(""), "must be a content part object"))?;
        match part.kind.map(first_byte) {
            Some(b'"') => {}
            None => return Err(FieldError::new(field(".type"), "is required")),
            Some(_) => return Err(FieldError::new(field(".type"), "must be a string")),
        }
        if !matches!(part.text.map(first_byte), None | Some(b'"' | b'n')) {
            return Err(FieldError::new(field(".text"), "must be a string"));
        }
    }
    Ok(())
}

/// The first byte of a raw JSON value (serde_json trims the whitespace around it).
fn first_byte(raw: &RawValue) -> u8 {
    raw.get().as_bytes().first().copied().unwrap_or(b' ')
}

fn is_null(raw: &&RawValue) -> bool {
    raw.get() == "null"
}

/// The fields of interest of a JSON object (the request, or one message), as raw slices of
/// the input; `None` when absent. Only a JSON object deserializes into it.
#[derive(Default)]
struct Fields<'a> {
    model: Option<&'a RawValue>,
    messages: Option<&'a RawValue>,
    stream: Option<&'a RawValue>,
    stream_options: Option<&'a RawValue>,
    include_usage: Option<&'a RawValue>,
    role: Option<&'a RawValue>,
    content: Option<&'a RawValue>,
    kind: Option<&'a RawValue>,
    text: Option<&'a RawValue>,
    max_tokens: Option<&'a RawValue>,
    max_completion_tokens: Option<&'a RawValue>,
}

/// An object key, matched without allocating (unless it contains escapes).
enum Key {
    Model,
    Messages,
    Stream,
    StreamOptions,
    IncludeUsage,
    Role,
    Content,
    Type,
    Text,
    MaxTokens,
    MaxCompletionTokens,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "model" => Key::Model,
                    "messages" => Key::Messages,
                    "stream" => Key::Stream,
                    "stream_options" => Key::StreamOptions,
                    "include_usage" => Key::IncludeUsage,
                    "role" => Key::Role,
                    "content" => Key::Content,
                    "type" => Key::Type,
                    "text" => Key::Text,
                    "max_tokens" => Key::MaxTokens,
                    "max_completion_tokens" => Key::MaxCompletionTokens,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> de::Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Fields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    let slot = match key {
                        Key::Model => &mut fields.model,
                        Key::Messages => &mut fields.messages,
                        Key::Stream => &mut fields.stream,
                        Key::StreamOptions => &mut fields.stream_options,
                        Key::IncludeUsage => &mut fields.include_usage,
                        Key::Role => &mut fields.role,
                        Key::Content => &mut fields.content,
                        Key::Type => &mut fields.kind,
                        Key::Text => &mut fields.text,
                        Key::MaxTokens => &mut fields.max_tokens,
                        Key::MaxCompletionTokens => &mut fields.max_completion_tokens,
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(fields)
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(body: &str) -> Option<String> {
        validate_chat_request(body.as_bytes()).err().map(|e| e.field)
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(field(r#"{"messages": []}"#), Some("model".into()));
        assert_eq!(field(r#"{"model": null, "messages": []}"#), Some("model".into()));
        assert_eq!(field(r#"{"model": " ", "messages": []}"#), Some("model".into()));
        assert_eq!(field(r#"{"model": "echo"}"#), Some("messages".into()));
        assert_eq!(field(r#"{"model": "echo", "messages": {}}"#), Some("messages".into()));
        assert_eq!(field(r#"{"model": "echo", "messages": [5]}"#), Some("messages[0]".into()));
        assert_eq!(
            field(r#"{"model": "echo", "messages": [{"content": "x"}]}"#),
            Some("messages[0].role".into())
        );
        assert_eq!(
            field(r#"{"model": "echo", "messages": [{"role": null}]}"#),
            Some("messages[0].role".into())
        );
        assert_eq!(
            field(r#"{"model": "echo", "messages": [{"role": "user", "content": 5}]}"#),
            Some("messages[0].content".into())
        );
        assert_eq!(
            field(
                r#"{"model": "echo", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}"#
            ),
            Some("stream".into())
        );
        assert_eq!(field(r#"["model"]"#), Some("body".into()));
        assert_eq!(field(r#"{"model": "echo""#), Some("body".into()));
        let ok = validate_chat_request(
            br#" {"model": "m\u0031", "stream": true, "tools": [{"a": 1}], "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}, {"role": "assistant", "content": null}]} "#,
        );
        assert_eq!(
            ok,
            Ok(ChatRequestSummary {
                model: "m1".into(),
                stream: true,
                has_stream_options: false,
                include_usage: false,
                // 3 + 2 messages * (3 + 1) + their JSON's 60 + 38 bytes.
                prompt_bound: 109,
                completion_cap: crate::budget::DEFAULT_COMPLETION_CAP,
            })
        );
        // The completion cap: max_completion_tokens first, then max_tokens; not a
        // non-negative integer: the default.
        let cap = |extra: &str| {
            let body = format!(r#"{{"model": "m", "messages": [{{"role": "user"}}]{extra}}}"#);
            validate_chat_request(body.as_bytes()).map(|s| s.completion_cap)
        };
        assert_eq!(cap(r#", "max_tokens": 7"#), Ok(7));
        assert_eq!(cap(r#", "max_tokens": 7, "max_completion_tokens": 9"#), Ok(9));
        assert_eq!(cap(r#", "max_tokens": null, "max_completion_tokens": 9"#), Ok(9));
        assert_eq!(cap(r#", "max_tokens": 7, "max_completion_tokens": -1"#), Ok(4096));
        assert_eq!(cap(r#", "max_tokens": "7""#), Ok(4096));
        assert_eq!(cap(""), Ok(4096));
    }

    #[test]
    fn the_last_of_duplicate_keys_counts() {
        let ok = validate_chat_request(
            br#"{"model": 5, "model": "echo", "messages": [{"role": "user"}], "stream": false}"#,
        );
        assert_eq!(ok.map(|s| (s.model, s.stream)), Ok(("echo".to_owned(), false)),);
    }

    #[test]
    fn roles_and_content_parts_are_checked() {
        let message = |m: &str| field(&format!(r#"{{"model": "echo", "messages": [{m}]}}"#));
        assert_eq!(message(r#"{"role": "", "content": "x"}"#), Some("messages[0].role".into()));
        assert_eq!(message(r#"{"role": "root", "content": "x"}"#), Some("messages[0].role".into()));
        assert_eq!(message(r#"{"role": 5, "content": "x"}"#), Some("messages[0].role".into()));
        assert_eq!(
            message(r#"{"role": "user", "content": [null, null]}"#),
            Some("messages[0].content[0]".into())
        );
        assert_eq!(
            message(r#"{"role": "user", "content": [{"text": "x"}]}"#),
            Some("messages[0].content[0].type".into())
        );
        assert_eq!(
            message(r#"{"role": "user", "content": [{"type": "text", "text": 5}]}"#),
            Some("messages[0].content[0].text".into())
        );
        for role in ROLES {
            let m =
                format!(r#"{{"role": "{role}", "content": [{{"type": "text", "text": "x"}}]}}"#);
            assert_eq!(message(&m), None);
        }
        assert_eq!(message(r#"{"role": "assistant", "content": null, "tool_calls": []}"#), None);
    }

    #[test]
    fn stream_options_are_read() {
        let summary = |b: &str| validate_chat_request(b.as_bytes()).ok();
        let base = r#""model": "m", "messages": [{"role": "user", "content": "x"}]"#;
        let s = summary(&format!(r#"{{{base}, "stream_options": {{"include_usage": true}}}}"#));
        assert_eq!(s.map(|s| (s.has_stream_options, s.include_usage)), Some((true, true)));
        let s = summary(&format!(r#"{{{base}, "stream_options": {{"include_usage": false}}}}"#));
        assert_eq!(s.map(|s| (s.has_stream_options, s.include_usage)), Some((true, false)));
        let s = summary(&format!(r#"{{{base}, "stream_options": null}}"#));
        assert_eq!(s.map(|s| (s.has_stream_options, s.include_usage)), Some((true, false)));
        let s = summary(&format!(r#"{{{base}}}"#));
        assert_eq!(s.map(|s| (s.has_stream_options, s.include_usage)), Some((false, false)));
    }
}
