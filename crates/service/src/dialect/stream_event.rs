//! One server-sent event of a provider's stream, read for the meter: the usage it reports,
//! whether it says the answer failed, and the text it adds (for an estimate when the stream
//! reports no usage). Where each dialect puts them is [`super::usage`]'s module docs.
//!
//! An event is read into typed, borrowed views of only those members: the rest of the event
//! is skipped without building anything, and text without escapes is not copied. An event
//! whose members are of other types than the views expect (a count that is not a
//! non-negative integer, a `delta` that is not text) is read again as a
//! [`serde_json::Value`] by [`super::usage`]'s tree functions, so an event reads the same
//! either way; only an event that is not JSON is not read at all. Every view of an object is
//! an [`Object`]: serde would read a struct from an array by position, the tree finds no
//! member there.

use super::object::Object;
use super::usage::{
    stream_failed, stream_text, stream_usage, MessagesCounts, OpenAiCounts, ResponsesCounts,
};
use aigw_domain::usage::{Endpoint, TokenUsage};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::borrow::Cow;

/// What one event tells the meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventReading {
    /// The usage known after the event: the event's counts over what was known before.
    pub usage: Option<TokenUsage>,
    /// The event says the answer failed after its 200 (Anthropic's `error` event).
    pub failed: bool,
    /// A chat chunk with a `usage` object and `"choices": []`: the usage-only final chunk.
    /// Always false for the other dialects.
    pub usage_only: bool,
    /// A chat chunk whose top-level `usage` is `null`. Always false for the other dialects.
    pub null_usage: bool,
}

/// Reads the `data` of one event of `endpoint`, given the usage known `before` it, and hands
/// the text it adds to `push` (in the event's order). `None` when `data` is not JSON.
pub fn read_event(
    endpoint: Endpoint,
    data: &[u8],
    before: Option<TokenUsage>,
    mut push: impl FnMut(&str),
) -> Option<EventReading> {
    if let Ok(reading) = read_typed(endpoint, data, before, &mut push) {
        return Some(reading);
    }
    let value: Value = serde_json::from_slice(data).ok()?;
    Some(read_tree(endpoint, &value, before, push))
}

/// The event read through the typed views; an error when it does not fit them (nothing has
/// been pushed then).
fn read_typed(
    endpoint: Endpoint,
    data: &[u8],
    before: Option<TokenUsage>,
    push: &mut impl FnMut(&str),
) -> serde_json::Result<EventReading> {
    let mut reading =
        EventReading { usage: before, failed: false, usage_only: false, null_usage: false };
    match endpoint {
        Endpoint::Chat | Endpoint::Embeddings => {
            let event: ChatEvent<'_> = serde_json::from_slice(data)?;
            if let Some(Some(counts)) = &event.usage {
                reading.usage = counts.tokens().or(before);
            }
            let choices = event.choices.as_deref();
            reading.usage_only =
                matches!(event.usage, Some(Some(_))) && choices.is_some_and(<[_]>::is_empty);
            reading.null_usage = matches!(event.usage, Some(None));
            if endpoint == Endpoint::Chat {
                for delta in choices.into_iter().flatten().filter_map(|c| c.delta.as_ref()) {
                    delta.text(push);
                }
            }
        }
        Endpoint::Responses => {
            let event: ResponsesEvent<'_> = serde_json::from_slice(data)?;
            let kind = event.kind.as_deref().unwrap_or_default();
            if matches!(kind, "response.completed" | "response.incomplete" | "response.failed") {
                let counts = event.response.and_then(|r| r.0.usage);
                reading.usage = counts.and_then(|c| c.tokens()).or(before);
            }
            if kind.ends_with(".delta") {
                if let Some(text) = &event.delta {
                    push(text);
                }
            }
        }
        Endpoint::Messages => {
            let event: MessagesEvent<'_> = serde_json::from_slice(data)?;
            match event.kind.as_deref() {
                Some("message_start") => {
                    if let Some(counts) = event.message.and_then(|m| m.0.usage) {
                        reading.usage = counts.over(before);
                    }
                }
                Some("message_delta") => {
                    if let Some(counts) = event.usage {
                        reading.usage = counts.over(before);
                    }
                }
                Some("content_block_delta") => {
                    let delta = event.delta.as_ref();
                    for text in delta.into_iter().flat_map(|d| d.texts()) {
                        push(text);
                    }
                }
                Some("error") => reading.failed = true,
                _ => {}
            }
        }
    }
    Ok(reading)
}

/// The event read from its JSON tree (the typed views did not fit it).
fn read_tree(
    endpoint: Endpoint,
    event: &Value,
    before: Option<TokenUsage>,
    push: impl FnMut(&str),
) -> EventReading {
    stream_text(endpoint, event, push);
    let is_chat = endpoint == Endpoint::Chat || endpoint == Endpoint::Embeddings;
    let usage_member = event.get("usage");
    EventReading {
        usage: stream_usage(endpoint, event, before),
        failed: stream_failed(endpoint, event),
        usage_only: is_chat
            && usage_member.is_some_and(Value::is_object)
            && event.get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty),
        null_usage: is_chat && usage_member == Some(&Value::Null),
    }
}

/// `Some` of the member's value when the member is present (`Some(None)` for `null`); the
/// member's default, `None`, when it is absent.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// A chat completion chunk (or an embeddings event): its choices' deltas and its usage.
#[derive(Deserialize)]
struct ChatEvent<'a> {
    #[serde(borrow)]
    choices: Option<Vec<Object<ChatChoice<'a>>>>,
    /// Absent: `None`; `null`: `Some(None)`.
    #[serde(default, deserialize_with = "present")]
    usage: Option<Option<Object<OpenAiCounts>>>,
}

/// One choice of a chat chunk.
#[derive(Deserialize)]
struct ChatChoice<'a> {
    #[serde(borrow)]
    delta: Option<Object<ChatDelta<'a>>>,
}

/// The text a chat chunk's choice adds.
#[derive(Deserialize)]
struct ChatDelta<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<Object<ToolCallDelta<'a>>>>,
}

impl ChatDelta<'_> {
    /// Pushes the content, the refusal, then each tool call's name and arguments.
    fn text(&self, push: &mut impl FnMut(&str)) {
        for text in [&self.content, &self.refusal].into_iter().flatten() {
            push(text);
        }
        let functions = self.tool_calls.iter().flatten().filter_map(|c| c.function.as_ref());
        for function in functions {
            for text in [&function.name, &function.arguments].into_iter().flatten() {
                push(text);
            }
        }
    }
}

/// One tool call of a chat delta.
#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(borrow)]
    function: Option<Object<FunctionDelta<'a>>>,
}

/// The function part of a tool call's delta.
#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    arguments: Option<Cow<'a, str>>,
}

/// A Responses API event: its type, its response's usage and its text delta.
#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    response: Option<Object<ResponseUsage>>,
    #[serde(borrow)]
    delta: Option<Cow<'a, str>>,
}

/// The usage of the response an event carries.
#[derive(Deserialize)]
struct ResponseUsage {
    usage: Option<Object<ResponsesCounts>>,
}

/// An Anthropic Messages event: its type, the usage of `message_start`'s message and of
/// `message_delta`, and `content_block_delta`'s text.
#[derive(Deserialize)]
struct MessagesEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    message: Option<Object<MessageUsage>>,
    usage: Option<Object<MessagesCounts>>,
    #[serde(borrow)]
    delta: Option<Object<MessagesDelta<'a>>>,
}

/// The usage of `message_start`'s message.
#[derive(Deserialize)]
struct MessageUsage {
    usage: Option<Object<MessagesCounts>>,
}

/// A content block's delta: text, a tool call's JSON, or thinking.
#[derive(Deserialize)]
struct MessagesDelta<'a> {
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
}

impl MessagesDelta<'_> {
    fn texts(&self) -> impl Iterator<Item = &str> {
        [&self.text, &self.partial_json, &self.thinking].into_iter().flatten().map(AsRef::as_ref)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    /// Both readings of `data`, each with the text it pushed.
    fn both(
        endpoint: Endpoint,
        data: &str,
        before: Option<TokenUsage>,
    ) -> [(EventReading, String); 2] {
        let mut typed_text = String::new();
        let typed = read_typed(endpoint, data.as_bytes(), before, &mut |s: &str| {
            typed_text.push_str(s);
            typed_text.push('|');
        });
        let value: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{data}: {e}"));
        let mut tree_text = String::new();
        let tree = read_tree(endpoint, &value, before, |s| {
            tree_text.push_str(s);
            tree_text.push('|');
        });
        let typed = typed.map_or_else(|_| (tree, tree_text.clone()), |r| (r, typed_text));
        [typed, (tree, tree_text)]
    }

    const BEFORE: Option<TokenUsage> = Some(TokenUsage {
        prompt_tokens: 5,
        completion_tokens: 6,
        total_tokens: 11,
        cached_tokens: 1,
        cache_write_tokens: 2,
        reasoning_tokens: 0,
    });

    /// Events of every dialect, usual and odd (members of other types than the views expect).
    const CASES: &[(Endpoint, &str)] = &[
        (
            Endpoint::Chat,
            r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"He\"llo"}}],"usage":null}"#,
        ),
        (
            Endpoint::Chat,
            r#"{"choices":[{"delta":{"refusal":"no","tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}"#,
        ),
        (
            Endpoint::Chat,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":2}}}"#,
        ),
        (
            Endpoint::Chat,
            r#"{"choices":[{"delta":{"content":null}}],"usage":{"prompt_tokens":10}}"#,
        ),
        (Endpoint::Chat, r#"{"choices":[],"usage":{"completion_tokens":4}}"#),
        (Endpoint::Chat, r#"{"choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":4}}"#),
        (Endpoint::Chat, r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":"4"}}"#),
        (
            Endpoint::Chat,
            r#"{"choices":[],"usage":{"prompt_tokens":1,"total_tokens":"x","prompt_tokens_details":null}}"#,
        ),
        (Endpoint::Chat, r#"{"choices":[{"delta":{"content":["not","text"]}}]}"#),
        (Endpoint::Chat, r#"{"choices":"none","usage":7}"#),
        (Endpoint::Chat, r#"{"choices":[],"usage":[10,4,14,null,null]}"#),
        (Endpoint::Chat, r#"{"choices":[{"delta":["a",null,null]}]}"#),
        (Endpoint::Chat, r#"{"choices":[[["x",null,null]]]}"#),
        (Endpoint::Responses, r#"{"type":"response.completed","response":[[5,1,6,null,null]]}"#),
        (Endpoint::Messages, r#"{"type":"message_delta","usage":[1,2,null,null]}"#),
        (Endpoint::Messages, r#"{"type":"content_block_delta","delta":["hi",null,null]}"#),
        (
            Endpoint::Chat,
            r#"{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}],"choices":[]}"#,
        ),
        (Endpoint::Chat, r#"[1,2]"#),
        (Endpoint::Embeddings, r#"{"usage":{"prompt_tokens":8,"total_tokens":8}}"#),
        (
            Endpoint::Responses,
            r#"{"type":"response.created","response":{"id":"r","usage":null,"output":[{"content":[{"text":"x"}]}]}}"#,
        ),
        (Endpoint::Responses, r#"{"type":"response.output_text.delta","delta":"hi\n"}"#),
        (Endpoint::Responses, r#"{"type":"response.audio.delta","delta":{"not":"text"}}"#),
        (
            Endpoint::Responses,
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":10},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":80}}}"#,
        ),
        (
            Endpoint::Responses,
            r#"{"type":"response.incomplete","response":{"usage":{"input_tokens":50}}}"#,
        ),
        (
            Endpoint::Responses,
            r#"{"type":"response.failed","response":{"usage":{"input_tokens":5,"output_tokens":1.5}}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":300,"output_tokens":1}}}"#,
        ),
        (Endpoint::Messages, r#"{"type":"message_start","message":{"usage":null}}"#),
        (
            Endpoint::Messages,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
        ),
        (
            Endpoint::Messages,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":42}}"#,
        ),
        (Endpoint::Messages, r#"{"type":"message_delta","usage":{"output_tokens":"42"}}"#),
        (Endpoint::Messages, r#"{"type":"message_delta","usage":{}}"#),
        (Endpoint::Messages, r#"{"type":"ping"}"#),
        (
            Endpoint::Messages,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        (Endpoint::Messages, r#"{"type":7}"#),
    ];

    /// Every event reads the same through the typed views as through its JSON tree, the
    /// dialects' usual events and events that do not fit the views alike.
    #[test]
    fn typed_and_tree_readings_agree() {
        for (endpoint, data) in CASES {
            for before in [None, BEFORE] {
                let [typed, tree] = both(*endpoint, data, before);
                assert_eq!(typed, tree, "{endpoint:?} {data} after {before:?}");
            }
        }
    }

    /// The usual events of each dialect fit the typed views: the tree is the exception.
    #[test]
    fn the_usual_events_fit_the_typed_views() {
        let usual: &[(Endpoint, &str)] = &[
            (
                Endpoint::Chat,
                r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":null}"#,
            ),
            (
                Endpoint::Chat,
                r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}}"#,
            ),
            (
                Endpoint::Responses,
                r#"{"type":"response.completed","response":{"id":"r","output":[],"usage":{"input_tokens":5,"output_tokens":1,"total_tokens":6}}}"#,
            ),
            (
                Endpoint::Messages,
                r#"{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}"#,
            ),
            (
                Endpoint::Messages,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            (
                Endpoint::Messages,
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}"#,
            ),
        ];
        for (endpoint, data) in usual {
            assert!(read_typed(*endpoint, data.as_bytes(), None, &mut |_| {}).is_ok(), "{data}");
        }
        assert_eq!(read_event(Endpoint::Chat, b"not json", None, |_| {}), None);
    }
}
