//! Validation of a chat completion request body (`POST /api/v1/ai/chat/completions`) without
//! building a tree of it.
//!
//! The gateway forwards the body byte for byte, so it only needs to know that the fields it
//! relies on are well formed. The body is read once, borrowing from the request bytes: the
//! fields the gateway checks are held as raw JSON slices, every other field is skipped
//! (validated as JSON, never copied). A large conversation therefore costs one pass over its
//! bytes, not a second copy of every string in it. Errors name the field by its JSON path.
//! As with `serde_json::Value`, a key given twice counts once, with its last value.

use crate::dialect::summary::RequestSummary;
use aigw_domain::usage::Endpoint;
use aigw_domain::FieldError;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// Completion tokens assumed for a request that sets no `max_tokens`.
pub const DEFAULT_COMPLETION_CAP: u64 = 4096;

/// The message roles OpenAI's chat completions know (the OpenAPI description's `ChatRole`).
pub const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// The largest `max_tokens` / `max_completion_tokens` accepted: 2^20 tokens, several times
/// the longest answer any provider offers today (so no real request is refused), and small
/// enough that a worst case priced with it never overflows a counter.
pub const MAX_COMPLETION_TOKENS: u64 = 1 << 20;

/// The largest `n` (completions per request) accepted: OpenAI's own limit.
pub const MAX_CHOICES: u64 = 128;

/// What `max_tokens` and `max_completion_tokens` may be.
const CAP_RANGE: (u64, u64) = (1, MAX_COMPLETION_TOKENS);

/// Checks the fields the gateway relies on; every other field is passed through untouched.
///
/// # Errors
/// [`FieldError`] on `body` (not valid JSON, or not an object), `model` (missing, not a
/// non-empty string), `messages` (missing, not a non-empty array), `messages[i]` (not an
/// object), `messages[i].role` (missing, or not one of [`ROLES`]), `messages[i].content` (not
/// a string, an array of content parts or null), `messages[i].content[j]` (not an object),
/// `messages[i].content[j].type` (missing, not a string), `messages[i].content[j].text` (not
/// a string), `stream` (not a boolean), `max_completion_tokens` and `max_tokens` (not an
/// integer from 1 to [`MAX_COMPLETION_TOKENS`]) or `n` (not an integer from 1 to
/// [`MAX_CHOICES`]), exactly as the OpenAPI description's `ChatCompletionRequest` says.
pub fn validate_chat_request(body: &[u8]) -> Result<RequestSummary, FieldError> {
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
    let body_bytes = u64::try_from(body.len()).unwrap_or(u64::MAX);
    let mut prompt_bound = crate::dialect::tokens::REPLY_PRIMING_TOKENS.saturating_add(body_bytes);
    let mut parts = PartCount::default();
    for (i, raw) in messages.iter().enumerate() {
        prompt_bound = prompt_bound
            .saturating_add(crate::dialect::tokens::TOKENS_PER_MESSAGE)
            .saturating_add(crate::dialect::tokens::TOKENS_PER_NAME);
        check_message(i, raw, &mut parts)?;
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
    // Both are checked, whichever counts: a provider refuses either out of range.
    let first = bounded_integer("max_completion_tokens", top.max_completion_tokens, CAP_RANGE)?;
    let second = bounded_integer("max_tokens", top.max_tokens, CAP_RANGE)?;
    let per_choice = first.or(second).unwrap_or(DEFAULT_COMPLETION_CAP);
    let choices = bounded_integer("n", top.n, (1, MAX_CHOICES))?.unwrap_or(1);
    let predicted = top.prediction.filter(|raw| !is_null(raw)).map_or(0, |raw| raw.get().len());
    let completion_cap = per_choice
        .saturating_mul(choices)
        .saturating_add(u64::try_from(predicted).unwrap_or(u64::MAX));
    Ok(RequestSummary {
        endpoint: Endpoint::Chat,
        model,
        stream,
        has_stream_options: top.stream_options.is_some(),
        include_usage,
        prompt_bound,
        prompt_floor: 0,
        images: parts.images,
        completion_cap,
        unbounded_part: parts.unbounded,
    })
}

/// Checks `messages[i]` (`raw`): an object with a known `role` and a `content` that is a
/// string, null or an array of content parts (counted into `parts`).
fn check_message(i: usize, raw: &RawValue, parts: &mut PartCount) -> Result<(), FieldError> {
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
        None | Some(b'"' | b'n') => Ok(()),
        Some(b'[') => check_content_parts(i, message.content, parts),
        Some(_) => Err(FieldError::new(
            format!("messages[{i}].content"),
            "must be a string or an array of content parts",
        )),
    }
}

/// An optional integer field (`null` counts as absent) within `min..=max`.
fn bounded_integer(
    field: &'static str,
    raw: Option<&RawValue>,
    (min, max): (u64, u64),
) -> Result<Option<u64>, FieldError> {
    match raw.map(RawValue::get) {
        None | Some("null") => Ok(None),
        Some(text) => match text.parse::<u64>() {
            Ok(value) if (min..=max).contains(&value) => Ok(Some(value)),
            _ => Err(FieldError::new(field, format!("must be an integer from {min} to {max}"))),
        },
    }
}

/// What the content parts of a request hold beyond text.
#[derive(Debug, Default)]
struct PartCount {
    /// `image_url` parts.
    images: u64,
    /// The path of the first part whose input cannot be bounded before the call.
    unbounded: Option<String>,
}

/// Checks the content parts of `messages[i]`: each an object with a string `type` and, when
/// present, a string (or null) `text`; counts its images and notes a file sent by id.
fn check_content_parts(
    i: usize,
    content: Option<&RawValue>,
    count: &mut PartCount,
) -> Result<(), FieldError> {
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
        match part.kind.map(|raw| serde_json::from_str::<&str>(raw.get())) {
            Some(Ok("image_url")) => count.images = count.images.saturating_add(1),
            Some(Ok("file")) if count.unbounded.is_none() => {
                let data = part
                    .file
                    .and_then(|raw| serde_json::from_str::<Fields<'_>>(raw.get()).ok())
                    .and_then(|file| file.file_data)
                    .filter(|raw| !is_null(raw));
                if data.is_none() {
                    count.unbounded = Some(field(".file.file_id"));
                }
            }
            // A type with escapes is still a string (serde_json borrows only plain ones).
            Some(Ok(_)) => {}
            Some(Err(_)) if part.kind.is_some_and(|raw| first_byte(raw) == b'"') => {}
            None => return Err(FieldError::new(field(".type"), "is required")),
            Some(Err(_)) => return Err(FieldError::new(field(".type"), "must be a string")),
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
    n: Option<&'a RawValue>,
    prediction: Option<&'a RawValue>,
    file: Option<&'a RawValue>,
    file_data: Option<&'a RawValue>,
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
    N,
    Prediction,
    File,
    FileData,
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
                    "n" => Key::N,
                    "prediction" => Key::Prediction,
                    "file" => Key::File,
                    "file_data" => Key::FileData,
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
                        Key::N => &mut fields.n,
                        Key::Prediction => &mut fields.prediction,
                        Key::File => &mut fields.file,
                        Key::FileData => &mut fields.file_data,
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
    use crate::dialect::tokens::{count_prompt, Encoding};
    use serde_json::json;

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
        let body = br#" {"model": "m\u0031", "stream": true, "tools": [{"a": 1}], "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}, {"role": "assistant", "content": null}]} "#;
        let ok = validate_chat_request(body);
        assert_eq!(
            ok,
            Ok(RequestSummary {
                endpoint: Endpoint::Chat,
                model: "m1".into(),
                stream: true,
                has_stream_options: false,
                include_usage: false,
                // 3 + 2 messages * (3 + 1) + the body's bytes.
                prompt_bound: 11 + body.len() as u64,
                prompt_floor: 0,
                images: 0,
                completion_cap: DEFAULT_COMPLETION_CAP,
                unbounded_part: None,
            })
        );
        // The completion cap: max_completion_tokens first, then max_tokens, times n; out of
        // range or not an integer: refused, naming the field.
        let cap = |extra: &str| {
            let body = format!(r#"{{"model": "m", "messages": [{{"role": "user"}}]{extra}}}"#);
            validate_chat_request(body.as_bytes()).map(|s| s.completion_cap).map_err(|e| e.field)
        };
        assert_eq!(cap(r#", "max_tokens": 7"#), Ok(7));
        assert_eq!(cap(r#", "max_tokens": 7, "max_completion_tokens": 9"#), Ok(9));
        assert_eq!(cap(r#", "max_tokens": null, "max_completion_tokens": 9"#), Ok(9));
        assert_eq!(cap(r#", "max_tokens": 7, "n": 100"#), Ok(700));
        assert_eq!(cap(r#", "n": null"#), Ok(4096));
        assert_eq!(cap(r#", "n": 3"#), Ok(3 * 4096));
        let prediction = r#"{"content": "abc"}"#;
        assert_eq!(
            cap(&format!(r#", "max_tokens": 10, "prediction": {prediction}"#)),
            Ok(10 + prediction.len() as u64)
        );
        assert_eq!(cap(""), Ok(4096));
        assert_eq!(cap(r#", "max_completion_tokens": 1048576"#), Ok(1 << 20));
        let refused = [
            (r#", "max_tokens": 7, "max_completion_tokens": -1"#, "max_completion_tokens"),
            (r#", "max_tokens": "7""#, "max_tokens"),
            (r#", "max_tokens": 9223372036854775807"#, "max_tokens"),
            (r#", "max_tokens": 18446744073709551616"#, "max_tokens"),
            (r#", "max_tokens": 0"#, "max_tokens"),
            (r#", "max_tokens": 1.5"#, "max_tokens"),
            (r#", "max_completion_tokens": 1048577"#, "max_completion_tokens"),
            (r#", "max_completion_tokens": 9, "max_tokens": 0"#, "max_tokens"),
            (r#", "n": 0"#, "n"),
            (r#", "n": 129"#, "n"),
            (r#", "n": -1"#, "n"),
            (r#", "n": "2""#, "n"),
        ];
        for (extra, field) in refused {
            assert_eq!(cap(extra), Err(field.to_owned()), "{extra}");
        }
    }

    #[test]
    fn images_and_files_by_id_are_noted() {
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
            {"type": "text", "text": "what is it?"},
            {"type": "image_url", "image_url": {"url": "https://x/b.png"}}]},
            {"role": "user", "content": [{"type": "file", "file": {"file_data": "JVBER"}}]}]}"#;
        let summary = validate_chat_request(body).map(|s| (s.images, s.unbounded_part));
        assert_eq!(summary, Ok((2, None)));
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": "x"},
            {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]}"#;
        let summary = validate_chat_request(body).map(|s| s.unbounded_part);
        assert_eq!(summary, Ok(Some("messages[1].content[0].file.file_id".to_owned())));
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

    #[test]
    fn the_bound_is_never_below_the_count() {
        let bodies = [
            json!({"model": "m", "messages": [{"role": "user", "content": "hello world"}]}),
            json!({"model": "m", "messages": [
                {"role": "system", "content": "You are terse.\n\nAnswer in one line."},
                {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Grüße, 東京! 🦀🦀"}]},
                {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
                    "function": {"name": "lookup", "arguments": "{\"q\":\"  spaced   out  \"}"}}]}
            ]}),
            json!({"model": "m", "messages": [{"role": "user", "content": "a".repeat(5000)}]}),
            json!({"model": "m", "messages": [{"role": "user", "content": "  \n\n \t  "}]}),
            json!({"model": "m", "messages": [{"role": "user", "content": "é\n"}]}),
        ];
        for body in &bodies {
            let bytes = serde_json::to_vec(body).unwrap_or_default();
            let bound =
                validate_chat_request(&bytes).map(|summary| summary.prompt_bound).unwrap_or(0);
            for encoding in [Encoding::Cl100k, Encoding::O200k] {
                let count = count_prompt(encoding, body);
                assert!(count <= bound, "{count} > {bound} for {body}");
            }
        }
        // The fixed tokens plus the body's bytes: 3 + 3 + 1 + its length.
        let hello = serde_json::to_vec(&bodies[0]).unwrap_or_default();
        let summary = validate_chat_request(&hello);
        assert_eq!(summary.map(|s| s.prompt_bound).ok(), Some(7 + hello.len() as u64));
    }
}
