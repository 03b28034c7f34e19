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

/// What a validated chat request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequestSummary {
    /// The `model` field.
    pub model: String,
    /// The `stream` field (default false).
    pub stream: bool,
}

/// Checks the fields the gateway relies on; every other field is passed through untouched.
///
/// # Errors
/// [`FieldError`] on `body` (not valid JSON, or not an object), `model` (missing, not a
/// non-empty string), `messages` (missing, not a non-empty array), `messages[i]` (not an
/// object), `messages[i].role` (missing, not a string), `messages[i].content` (not a string,
/// array or null) or `stream` (not a boolean).
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
    for (i, raw) in messages.iter().enumerate() {
        let message: Fields<'_> = serde_json::from_str(raw.get())
            .map_err(|_| FieldError::new(format!("messages[{i}]"), "must be an object"))?;
        match message.role.map(first_byte) {
            Some(b'"') => {}
            None => return Err(FieldError::new(format!("messages[{i}].role"), "is required")),
            Some(_) => {
                return Err(FieldError::new(format!("messages[{i}].role"), "must be a string"))
            }
        }
        match message.content.map(first_byte) {
            None | Some(b'"' | b'[' | b'n') => {}
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
    Ok(ChatRequestSummary { model, stream })
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
    role: Option<&'a RawValue>,
    content: Option<&'a RawValue>,
}

/// An object key, matched without allocating (unless it contains escapes).
enum Key {
    Model,
    Messages,
    Stream,
    Role,
    Content,
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
                    "role" => Key::Role,
                    "content" => Key::Content,
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
                        Key::Role => &mut fields.role,
                        Key::Content => &mut fields.content,
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
        assert_eq!(ok, Ok(ChatRequestSummary { model: "m1".into(), stream: true }));
    }

    #[test]
    fn the_last_of_duplicate_keys_counts() {
        let ok = validate_chat_request(
            br#"{"model": 5, "model": "echo", "messages": [{"role": "user"}], "stream": false}"#,
        );
        assert_eq!(ok, Ok(ChatRequestSummary { model: "echo".into(), stream: false }));
    }
}
