//! The fake upstream's Anthropic Messages API (`POST /v1/messages` and
//! `/v1/messages/count_tokens`, Anthropic's shapes), by the request's `model`, plain or with
//! `"stream": true` (`message_start`, `content_block_start`, two `content_block_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`):
//!
//! - `claude-error`: a stream that sends `message_start` and one delta, then an `error`
//!   event (`overloaded_error`) and ends;
//! - `claude-400`, `claude-429` (`retry-after: 7`), `claude-529`: Anthropic's error body with
//!   that status (the 400's message quotes the provider's key, [`PROVIDER_KEY`]);
//! - anything else: a message whose `usage` bills every token it may ([`billed_usage`]):
//!   one prompt token per byte of the request body, a quarter written to the cache and a
//!   quarter read from it, and `max_tokens` output tokens.
//!
//! A token count answers `{"input_tokens": <the body's bytes>}`.

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The provider's key the tests configure (sent upstream as `x-api-key`).
pub const PROVIDER_KEY: &str = "sk-ant-provider-key";

/// The text of every message, streamed as [`DELTAS`].
pub const TEXT: &str = "hello from claude";

/// The deltas a stream sends.
pub const DELTAS: [&str; 2] = ["hello from ", "claude"];

/// The usage the fake reports for a request of `body_len` bytes asking for `request`:
/// (uncached input, cache written, cache read, output) tokens; their prompt is `body_len`.
pub fn billed_usage(request: &Value, body_len: u64) -> (u64, u64, u64, u64) {
    let output = request["max_tokens"].as_u64().unwrap_or(0);
    let quarter = body_len / 4;
    (body_len - 2 * quarter, quarter, quarter, output)
}

fn usage_of(request: &Value, body_len: u64) -> Value {
    let (input, written, read, output) = billed_usage(request, body_len);
    json!({"input_tokens": input, "cache_creation_input_tokens": written,
           "cache_read_input_tokens": read, "output_tokens": output})
}

fn json_answer(status: &str, extra: &str, body: &Value) -> String {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn event(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The events of a stream of `model` for `request` (`body_len` bytes), exactly as sent.
pub fn stream_events(model: &str, request: &Value, body_len: u64) -> Vec<String> {
    let (input, written, read, output) = billed_usage(request, body_len);
    let start_usage = json!({"input_tokens": input, "cache_creation_input_tokens": written,
                             "cache_read_input_tokens": read, "output_tokens": 1});
    let mut events = vec![
        event(
            "message_start",
            &json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": start_usage}}),
        ),
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for delta in DELTAS {
        events.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": delta}}),
        ));
        if model == "claude-error" {
            events.push(event("error", &error_body("overloaded_error", "Overloaded")));
            return events;
        }
    }
    events.push(event("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
    events.push(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                "stop_sequence": null}, "usage": {"output_tokens": output}}),
    ));
    events.push(event("message_stop", &json!({"type": "message_stop"})));
    events
}

/// Answers a request to `path` (`/v1/messages…`) with body `request` (`body_len` bytes) on
/// `stream`.
pub async fn serve(
    mut stream: TcpStream,
    path: &str,
    request: &Value,
    body_len: u64,
) -> std::io::Result<()> {
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let refusal = match model.as_str() {
        "claude-400" => Some((
            "400 Bad Request",
            "",
            error_body(
                "invalid_request_error",
                &format!("max_tokens: too large for this model (key {PROVIDER_KEY})"),
            ),
        )),
        "claude-429" => Some((
            "429 Too Many Requests",
            "retry-after: 7\r\n",
            error_body("rate_limit_error", "Number of request tokens has exceeded your limit"),
        )),
        "claude-529" => Some(("529 Overloaded", "", error_body("overloaded_error", "Overloaded"))),
        _ => None,
    };
    let answer = if let Some((status, extra, body)) = refusal {
        json_answer(status, extra, &body)
    } else if path == "/v1/messages/count_tokens" {
        json_answer("200 OK", "", &json!({"input_tokens": body_len}))
    } else if request["stream"] != json!(true) {
        let body = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": TEXT}], "stop_reason": "end_turn",
            "stop_sequence": null, "usage": usage_of(request, body_len)});
        json_answer("200 OK", "", &body)
    } else {
        stream
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            )
            .await?;
        for event in stream_events(&model, request, body_len) {
            super::upstream::write_chunk_to(&mut stream, &event).await?;
        }
        stream.write_all(b"0\r\n\r\n").await?;
        return stream.shutdown().await;
    };
    stream.write_all(answer.as_bytes()).await?;
    stream.shutdown().await
}
