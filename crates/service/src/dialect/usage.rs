//! What each dialect's answer reports as usage, read into one [`TokenUsage`] whose kinds nest
//! (cached and cache-written tokens are parts of the prompt, reasoning a part of the output:
//! see [`TokenUsage`]), and the text of an answer for an estimate when it reports none.
//!
//! - Chat completions: `usage` (`prompt_tokens`, `completion_tokens`, `total_tokens`,
//!   `prompt_tokens_details.cached_tokens`, `completion_tokens_details.reasoning_tokens`), in
//!   the JSON answer or a stream's usage chunk.
//! - Embeddings: `usage` (`prompt_tokens`, `total_tokens`); no output.
//! - Responses: `usage` (`input_tokens`, `input_tokens_details.cached_tokens`,
//!   `output_tokens`, `output_tokens_details.reasoning_tokens`, `total_tokens`) of the
//!   response, in a stream that of `response.completed` (or `response.incomplete`,
//!   `response.failed`).
//! - Anthropic Messages: `usage` (`input_tokens`, `output_tokens`,
//!   `cache_creation_input_tokens`, `cache_read_input_tokens`; the cache counts are beside
//!   `input_tokens`, so they are added to the prompt here); in a stream `message_start`'s
//!   `message.usage`, then each `message_delta`'s `usage`, cumulative: each count it gives
//!   replaces the one before.

use super::object::Object;
use aigw_domain::usage::{Endpoint, TokenUsage};
use serde::Deserialize;
use serde_json::Value;

/// A count of `value` at `pointer`, when it is a non-negative integer.
fn count(value: &Value, pointer: &str) -> Option<u64> {
    value.pointer(pointer).and_then(Value::as_u64)
}

/// `Some(None)` when `value` has no `key` or it is `null`, `Some(count)` when it is a count,
/// `None` when it is anything else.
fn optional_count(value: &Value, key: &str) -> Option<Option<u64>> {
    match value.get(key) {
        None | Some(Value::Null) => Some(None),
        Some(count) => count.as_u64().map(Some),
    }
}

/// `cached_tokens` of `prompt_tokens_details` / `input_tokens_details`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CachedDetails {
    cached_tokens: Option<u64>,
}

/// `reasoning_tokens` of `completion_tokens_details` / `output_tokens_details`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReasoningDetails {
    reasoning_tokens: Option<u64>,
}

/// The counts of a chat completion's or an embeddings answer's `usage` object.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct OpenAiCounts {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
    prompt_tokens_details: Option<Object<CachedDetails>>,
    completion_tokens_details: Option<Object<ReasoningDetails>>,
}

impl OpenAiCounts {
    /// The counts of a `usage` tree: a member that is not a count reads as absent, except
    /// `completion_tokens`, which must be a count when present (`None`).
    fn from_tree(usage: &Value) -> Option<Self> {
        Some(Self {
            prompt_tokens: count(usage, "/prompt_tokens"),
            completion_tokens: optional_count(usage, "completion_tokens")?,
            total_tokens: count(usage, "/total_tokens"),
            prompt_tokens_details: Some(Object(CachedDetails {
                cached_tokens: count(usage, "/prompt_tokens_details/cached_tokens"),
            })),
            completion_tokens_details: Some(Object(ReasoningDetails {
                reasoning_tokens: count(usage, "/completion_tokens_details/reasoning_tokens"),
            })),
        })
    }

    /// The usage; `None` without `prompt_tokens` (`completion_tokens` defaults to 0 for
    /// embeddings, whose answer has none).
    pub(crate) fn tokens(&self) -> Option<TokenUsage> {
        let mut tokens = TokenUsage::new(self.prompt_tokens?, self.completion_tokens.unwrap_or(0));
        if let Some(total) = self.total_tokens {
            tokens.total_tokens = total;
        }
        tokens.cached_tokens =
            self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        tokens.reasoning_tokens =
            self.completion_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0);
        Some(tokens)
    }
}

/// The counts of a response's `usage` object (Responses API).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponsesCounts {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    total_tokens: Option<u64>,
    input_tokens_details: Option<Object<CachedDetails>>,
    output_tokens_details: Option<Object<ReasoningDetails>>,
}

impl ResponsesCounts {
    /// The counts of a `usage` tree: a member that is not a count reads as absent.
    fn from_tree(usage: &Value) -> Self {
        Self {
            input_tokens: count(usage, "/input_tokens"),
            output_tokens: count(usage, "/output_tokens"),
            total_tokens: count(usage, "/total_tokens"),
            input_tokens_details: Some(Object(CachedDetails {
                cached_tokens: count(usage, "/input_tokens_details/cached_tokens"),
            })),
            output_tokens_details: Some(Object(ReasoningDetails {
                reasoning_tokens: count(usage, "/output_tokens_details/reasoning_tokens"),
            })),
        }
    }

    /// The usage; `None` unless `input_tokens` and `output_tokens` are counts.
    pub(crate) fn tokens(&self) -> Option<TokenUsage> {
        let mut tokens = TokenUsage::new(self.input_tokens?, self.output_tokens?);
        if let Some(total) = self.total_tokens {
            tokens.total_tokens = total;
        }
        tokens.cached_tokens =
            self.input_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        tokens.reasoning_tokens =
            self.output_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0);
        Some(tokens)
    }
}

/// The counts of Anthropic's `usage` object.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct MessagesCounts {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl MessagesCounts {
    /// The counts of a `usage` tree: a member that is not a count reads as absent.
    fn from_tree(usage: &Value) -> Self {
        Self {
            input_tokens: count(usage, "/input_tokens"),
            output_tokens: count(usage, "/output_tokens"),
            cache_creation_input_tokens: count(usage, "/cache_creation_input_tokens"),
            cache_read_input_tokens: count(usage, "/cache_read_input_tokens"),
        }
    }

    /// The usage over `before` (a stream's counts so far): each count present replaces the
    /// one before; `before` when the object holds none of them.
    pub(crate) fn over(&self, before: Option<TokenUsage>) -> Option<TokenUsage> {
        let (input, output) = (self.input_tokens, self.output_tokens);
        let (written, read) = (self.cache_creation_input_tokens, self.cache_read_input_tokens);
        if input.is_none() && output.is_none() && written.is_none() && read.is_none() {
            return before;
        }
        let previous = before.unwrap_or_default();
        let uncached = input.unwrap_or(previous.uncached_prompt_tokens());
        let written = written.unwrap_or(previous.cache_write_tokens);
        let read = read.unwrap_or(previous.cached_tokens);
        let output = output.unwrap_or(previous.completion_tokens);
        let prompt = uncached.saturating_add(written).saturating_add(read);
        Some(TokenUsage {
            cached_tokens: read,
            cache_write_tokens: written,
            ..TokenUsage::new(prompt, output)
        })
    }
}

/// The usage object of a chat completion or an embeddings answer; `None` unless
/// `prompt_tokens` is a count and `completion_tokens` absent, `null` or a count.
fn openai_usage(usage: &Value) -> Option<TokenUsage> {
    OpenAiCounts::from_tree(usage)?.tokens()
}

/// The usage object of a response (Responses API); `None` unless `input_tokens` and
/// `output_tokens` are counts.
fn responses_usage(usage: &Value) -> Option<TokenUsage> {
    ResponsesCounts::from_tree(usage).tokens()
}

/// Anthropic's usage object over `before` (see [`MessagesCounts::over`]).
fn messages_usage(usage: &Value, before: Option<TokenUsage>) -> Option<TokenUsage> {
    MessagesCounts::from_tree(usage).over(before)
}

/// A JSON answer read for its `usage` member only, through the typed view `T` of the
/// dialect's counts; every other member is skipped without building anything.
#[derive(Deserialize)]
struct UsageView<T> {
    usage: Option<Object<T>>,
}

/// A JSON answer read for its `usage` member only, kept as the raw text of its value
/// (borrowed from the answer): the tree fallback of [`json_answer_usage`].
#[derive(Deserialize)]
struct RawUsage<'a> {
    #[serde(default, borrow)]
    usage: Option<&'a serde_json::value::RawValue>,
}

/// The usage the raw JSON `answer` of `endpoint` reports; `None` when it has none, when it is
/// `null` or not an object, or when it does not read as the dialect's counts. One pass of the
/// answer through the dialect's typed view of `usage`, the rest skipped; only a `usage` whose
/// members are of other types than the view expects (a count that is a string, say) is read
/// again, as a tree, by [`read_usage`], so an answer reads the same either way (as a stream's
/// events do in [`super::stream_event`]).
pub fn json_answer_usage(endpoint: Endpoint, answer: &[u8]) -> Option<TokenUsage> {
    let typed = match endpoint {
        Endpoint::Chat | Endpoint::Embeddings => {
            typed_usage::<OpenAiCounts>(answer).map(|c| c.and_then(|c| c.tokens()))
        }
        Endpoint::Responses => {
            typed_usage::<ResponsesCounts>(answer).map(|c| c.and_then(|c| c.tokens()))
        }
        Endpoint::Messages => {
            typed_usage::<MessagesCounts>(answer).map(|c| c.and_then(|c| c.over(None)))
        }
    };
    match typed {
        Ok(usage) => usage,
        Err(_) => {
            let raw = serde_json::from_slice::<Object<RawUsage<'_>>>(answer).ok()?.0.usage?;
            read_usage(endpoint, &serde_json::from_str::<Value>(raw.get()).ok()?)
        }
    }
}

/// The counts of `answer`'s `usage` through the view `T`; `Ok(None)` when it has no `usage`
/// or it is `null`; an error when the answer or its `usage` does not fit the view.
fn typed_usage<'de, T: Deserialize<'de>>(answer: &'de [u8]) -> serde_json::Result<Option<T>> {
    let view = serde_json::from_slice::<Object<UsageView<T>>>(answer)?;
    Ok(view.0.usage.map(|o| o.0))
}

/// The usage a JSON answer of `endpoint` reports; `None` when it has none (or none that reads
/// as counts). Only `usage` is looked at.
pub fn answer_usage(endpoint: Endpoint, answer: &Value) -> Option<TokenUsage> {
    read_usage(endpoint, answer.get("usage")?)
}

/// A JSON answer's `usage` object of `endpoint` read as counts; `None` when it does not read
/// as the dialect's usage.
pub fn read_usage(endpoint: Endpoint, usage: &Value) -> Option<TokenUsage> {
    match endpoint {
        Endpoint::Chat | Endpoint::Embeddings => openai_usage(usage),
        Endpoint::Responses => responses_usage(usage),
        Endpoint::Messages => messages_usage(usage, None),
    }
}

/// The usage known after a stream's event `data` of `endpoint`, given what was known before.
pub fn stream_usage(
    endpoint: Endpoint,
    data: &Value,
    before: Option<TokenUsage>,
) -> Option<TokenUsage> {
    let kind = data.get("type").and_then(Value::as_str);
    match endpoint {
        Endpoint::Chat | Endpoint::Embeddings => {
            data.get("usage").and_then(openai_usage).or(before)
        }
        Endpoint::Responses => match kind {
            Some("response.completed" | "response.incomplete" | "response.failed") => {
                data.pointer("/response/usage").and_then(responses_usage).or(before)
            }
            _ => before,
        },
        Endpoint::Messages => match kind {
            Some("message_start") => {
                data.pointer("/message/usage").map_or(before, |u| messages_usage(u, before))
            }
            Some("message_delta") => {
                data.get("usage").map_or(before, |u| messages_usage(u, before))
            }
            _ => before,
        },
    }
}

/// Whether a stream's event `data` of `endpoint` says the answer failed after its 200:
/// Anthropic's `error` event (`{"type":"error","error":{…}}`), after which no more comes.
pub fn stream_failed(endpoint: Endpoint, data: &Value) -> bool {
    endpoint == Endpoint::Messages && data.get("type").and_then(Value::as_str) == Some("error")
}

/// Appends the generated text of a stream's event `data` of `endpoint` (for an estimate when
/// the stream reports no usage) through `push`.
pub fn stream_text(endpoint: Endpoint, data: &Value, mut push: impl FnMut(&str)) {
    match endpoint {
        Endpoint::Chat => {
            let choices = data.get("choices").and_then(Value::as_array);
            for delta in choices.into_iter().flatten().filter_map(|c| c.get("delta")) {
                for key in ["content", "refusal"] {
                    if let Some(s) = delta.get(key).and_then(Value::as_str) {
                        push(s);
                    }
                }
                for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten()
                {
                    for key in ["/function/name", "/function/arguments"] {
                        if let Some(s) = call.pointer(key).and_then(Value::as_str) {
                            push(s);
                        }
                    }
                }
            }
        }
        Endpoint::Embeddings => {}
        Endpoint::Responses => {
            let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
            if kind.ends_with(".delta") {
                if let Some(s) = data.get("delta").and_then(Value::as_str) {
                    push(s);
                }
            }
        }
        Endpoint::Messages => {
            if data.get("type").and_then(Value::as_str) == Some("content_block_delta") {
                for key in ["/delta/text", "/delta/partial_json", "/delta/thinking"] {
                    if let Some(s) = data.pointer(key).and_then(Value::as_str) {
                        push(s);
                    }
                }
            }
        }
    }
}

/// The generated text of a JSON answer of `endpoint` (for an estimate when it reports no
/// usage): chat's choices are counted by `crate::dialect::tokens::count_completion_json`;
/// this serves the other dialects.
pub fn answer_text(endpoint: Endpoint, answer: &Value) -> String {
    let mut text = String::new();
    let mut push = |s: &str| {
        text.push_str(s);
        text.push('\n');
    };
    match endpoint {
        Endpoint::Chat | Endpoint::Embeddings => {}
        Endpoint::Responses => {
            for item in answer.get("output").and_then(Value::as_array).into_iter().flatten() {
                if let Some(s) = item.get("arguments").and_then(Value::as_str) {
                    push(s);
                }
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(s) = part.get("text").and_then(Value::as_str) {
                        push(s);
                    }
                }
            }
        }
        Endpoint::Messages => {
            for block in answer.get("content").and_then(Value::as_array).into_iter().flatten() {
                for key in ["text", "thinking"] {
                    if let Some(s) = block.get(key).and_then(Value::as_str) {
                        push(s);
                    }
                }
                if let Some(input) = block.get("input") {
                    push(&input.to_string());
                }
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_usage_keeps_cached_and_reasoning_tokens_inside_their_totals() {
        let answer = json!({"usage": {"prompt_tokens": 100, "completion_tokens": 20,
            "total_tokens": 120, "prompt_tokens_details": {"cached_tokens": 64},
            "completion_tokens_details": {"reasoning_tokens": 12}}});
        let usage = answer_usage(Endpoint::Chat, &answer);
        assert_eq!(
            usage,
            Some(TokenUsage {
                cached_tokens: 64,
                reasoning_tokens: 12,
                ..TokenUsage::new(100, 20)
            })
        );
        let embeddings = json!({"usage": {"prompt_tokens": 8, "total_tokens": 8}});
        assert_eq!(answer_usage(Endpoint::Embeddings, &embeddings), Some(TokenUsage::new(8, 0)));
        for bad in [
            json!({}),
            json!({"usage": null}),
            json!({"usage": {"prompt_tokens": -1}}),
            json!({"usage": {"prompt_tokens": 1, "completion_tokens": "2"}}),
        ] {
            assert_eq!(answer_usage(Endpoint::Chat, &bad), None, "{bad}");
        }
    }

    #[test]
    fn a_json_answer_reads_the_same_in_one_pass_as_through_its_tree() {
        let answers = [
            r#"{"id":"x","choices":[{"message":{"content":"a \"q\" \u00e9"}}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}"#,
            r#"{"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":12}}}"#,
            r#"{"usage":{"prompt_tokens":8,"total_tokens":8}}"#,
            r#"{"usage":{"prompt_tokens":1,"completion_tokens":null}}"#,
            r#"{"usage":{"prompt_tokens":1,"completion_tokens":"2"}}"#,
            r#"{"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":"3"}}"#,
            r#"{"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":7}}"#,
            r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2,"completion_tokens":3}}"#,
            r#"{"usage":{"prompt_tokens":-1,"completion_tokens":2}}"#,
            r#"{"usage":{"input_tokens":50,"output_tokens":5,"input_tokens_details":{"cached_tokens":10},"output_tokens_details":{"reasoning_tokens":2},"total_tokens":55}}"#,
            r#"{"usage":{"input_tokens":50,"output_tokens":"5"}}"#,
            r#"{"usage":{"input_tokens":7,"cache_creation_input_tokens":3,"cache_read_input_tokens":2,"output_tokens":9}}"#,
            r#"{"usage":{"output_tokens":9}}"#,
            r#"{"usage":{}}"#,
            r#"{"usage":null}"#,
            r#"{"usage":"twelve"}"#,
            r#"{"usage":[1,2]}"#,
            r#"[{"prompt_tokens":1,"completion_tokens":2}]"#,
            r#"{"choices":[]}"#,
            "not json",
        ];
        for endpoint in
            [Endpoint::Chat, Endpoint::Embeddings, Endpoint::Responses, Endpoint::Messages]
        {
            for answer in answers {
                let tree = serde_json::from_str::<Value>(answer)
                    .ok()
                    .and_then(|a| answer_usage(endpoint, &a));
                assert_eq!(
                    json_answer_usage(endpoint, answer.as_bytes()),
                    tree,
                    "{endpoint:?} {answer}"
                );
            }
        }
        assert_eq!(
            json_answer_usage(Endpoint::Chat, answers[1].as_bytes()),
            Some(TokenUsage {
                cached_tokens: 64,
                reasoning_tokens: 12,
                ..TokenUsage::new(100, 20)
            })
        );
    }

    #[test]
    fn responses_usage_comes_from_the_completed_event() {
        let usage = json!({"input_tokens": 50, "input_tokens_details": {"cached_tokens": 10},
            "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 20},
            "total_tokens": 80});
        let expected =
            TokenUsage { cached_tokens: 10, reasoning_tokens: 20, ..TokenUsage::new(50, 30) };
        assert_eq!(answer_usage(Endpoint::Responses, &json!({"usage": usage})), Some(expected));
        let created = json!({"type": "response.created", "response": {"usage": null}});
        assert_eq!(stream_usage(Endpoint::Responses, &created, None), None);
        let done = json!({"type": "response.completed", "response": {"usage": usage}});
        assert_eq!(stream_usage(Endpoint::Responses, &done, None), Some(expected));
        let delta = json!({"type": "response.output_text.delta", "delta": "hi"});
        assert_eq!(stream_usage(Endpoint::Responses, &delta, Some(expected)), Some(expected));
        let mut text = String::new();
        stream_text(Endpoint::Responses, &delta, |s| text.push_str(s));
        assert_eq!(text, "hi");
    }

    /// Anthropic reports cache reads and writes beside `input_tokens`: they join the prompt
    /// once; a stream's `message_delta` counts replace `message_start`'s.
    #[test]
    fn messages_usage_adds_the_cache_to_the_prompt_and_the_last_count_wins() {
        let start = json!({"type": "message_start", "message": {"usage": {"input_tokens": 10,
            "cache_creation_input_tokens": 200, "cache_read_input_tokens": 300,
            "output_tokens": 1}}});
        let after_start = stream_usage(Endpoint::Messages, &start, None);
        let expected_start =
            TokenUsage { cached_tokens: 300, cache_write_tokens: 200, ..TokenUsage::new(510, 1) };
        assert_eq!(after_start, Some(expected_start));
        let delta = json!({"type": "message_delta", "usage": {"output_tokens": 42}});
        let after_delta = stream_usage(Endpoint::Messages, &delta, after_start);
        assert_eq!(
            after_delta,
            Some(TokenUsage { ..TokenUsage::new(510, 42) }.with_cache(300, 200))
        );
        let ping = json!({"type": "ping"});
        assert_eq!(stream_usage(Endpoint::Messages, &ping, after_delta), after_delta);
        let answer = json!({"content": [{"type": "text", "text": "hello"}],
            "usage": {"input_tokens": 7, "output_tokens": 3}});
        assert_eq!(answer_usage(Endpoint::Messages, &answer), Some(TokenUsage::new(7, 3)));
        assert_eq!(answer_text(Endpoint::Messages, &answer), "hello\n");
    }

    trait WithCache {
        fn with_cache(self, read: u64, written: u64) -> Self;
    }

    impl WithCache for TokenUsage {
        fn with_cache(self, read: u64, written: u64) -> Self {
            TokenUsage { cached_tokens: read, cache_write_tokens: written, ..self }
        }
    }
}
