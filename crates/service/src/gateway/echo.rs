//! The built-in `echo` model: an offline provider that answers with the last user message in
//! OpenAI's shapes (JSON and server-sent events), with tokenizer counts as its `usage`.

use crate::dialect::reply::GatewayReply;
use crate::dialect::summary::RequestSummary;
use crate::dialect::tokens;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

/// The text of the last `user` message (string content, or the `text` parts of an array).
fn last_user_text(body: &Value) -> String {
    let messages = body.get("messages").and_then(Value::as_array);
    let last = messages.and_then(|m| {
        m.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    });
    match last.and_then(|m| m.get("content")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The built-in `echo` model: answers with the last user message, as an OpenAI chat
/// completion (or, when streaming, as `chat.completion.chunk` events ending in `[DONE]`, with a
/// final usage chunk when `include_usage`). Its `usage` counts tokens with the `cl100k_base`
/// tokenizer, as OpenAI counts a chat prompt.
pub(crate) fn echo(body: &Value, summary: &RequestSummary, include_usage: bool) -> GatewayReply {
    let text = last_user_text(body);
    let id = format!("chatcmpl-{}", uuid::Uuid::now_v7().simple());
    let created = chrono::Utc::now().timestamp();
    let model = summary.model.clone();
    let encoding = tokens::encoding_for_model(&model);
    let prompt_tokens = tokens::count_prompt(encoding, body);
    let completion_tokens = tokens::count_text(encoding, &text);
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens
    });
    if !summary.stream {
        let reply = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": "stop"
            }],
            "usage": usage
        });
        return GatewayReply::Json {
            status: http::StatusCode::OK,
            body: Bytes::from(reply.to_string()),
        };
    }
    let event = |event: Value| Ok(Bytes::from(format!("data: {event}\n\n")));
    let chunk = |delta: Value, finish: Value| {
        event(json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        }))
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for piece in text.split_inclusive(' ') {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    if include_usage {
        events.push(event(json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage
        })));
    }
    events.push(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
    GatewayReply::Stream {
        status: http::StatusCode::OK,
        content_type: "text/event-stream".to_owned(),
        body: stream::iter(events).boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::route::ECHO_MODEL;

    #[test]
    fn echo_answers_the_last_user_message() {
        let body = json!({"model": "echo", "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ignored"},
            {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}
        ]});
        assert_eq!(last_user_text(&body), "hello there");
    }

    /// The budget counts the built-in model's prompt with the tokenizer its `usage` uses.
    #[test]
    fn the_echo_model_s_prompt_counts_with_its_own_tokenizer() {
        let prices = crate::prices::PriceTable::from_providers(&[]).unwrap_or_default();
        assert_eq!(
            prices.prompt_counting(ECHO_MODEL),
            tokens::PromptCounting::Tokenizer(tokens::encoding_for_model(ECHO_MODEL))
        );
    }
}
