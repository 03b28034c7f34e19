//! The fake upstream's Responses API (`POST /responses`, OpenAI's shape), by the request's
//! `model`, plain or with `"stream": true` (`response.created`, two
//! `response.output_text.delta`, `response.completed`):
//!
//! - `resp-nousage`: a response (and a `response.completed`) without `usage`;
//! - `resp-break`: a stream cut after its first delta;
//! - anything else: a response whose `usage` bills every token it may
//!   ([`billed_usage`]): one input token per byte of the request body, half of them cached,
//!   and `max_output_tokens` (default 16) output tokens, half of them reasoning.
//!
//! Ids are `resp_` and a counter; `GET`/`DELETE /responses/{id}` and
//! `GET /responses/{id}/input_items` (with any query) answer what OpenAI answers for any id.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The text of every response, streamed as [`DELTAS`].
pub const TEXT: &str = "hello from responses";

/// The deltas a stream sends.
pub const DELTAS: [&str; 2] = ["hello from ", "responses"];

/// The usage the fake reports for a request of `body_len` bytes asking for `request`:
/// (input, cached, output, reasoning) tokens.
pub fn billed_usage(request: &Value, body_len: u64) -> (u64, u64, u64, u64) {
    let output = request["max_output_tokens"].as_u64().unwrap_or(16);
    (body_len, body_len / 2, output, output / 2)
}

fn usage_of(request: &Value, body_len: u64) -> Value {
    let (input, cached, output, reasoning) = billed_usage(request, body_len);
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
           "total_tokens": input + output})
}

fn response(id: &str, model: &str, status: &str, usage: Value) -> Value {
    json!({"id": id, "object": "response", "created_at": 1_700_000_000, "status": status,
           "model": model,
           "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}],
           "usage": usage})
}

fn json_answer(status: &str, body: &Value) -> String {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn event(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

/// Answers a request to `path` (`/responses…`) with `method` and body `request`
/// (`body_len` bytes) on `stream`.
pub async fn serve(
    mut stream: TcpStream,
    method: &str,
    path: &str,
    request: &Value,
    body_len: u64,
) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    if path != "/responses" {
        // The path without its query (`?after=…&limit=…`).
        let route = path.split('?').next().unwrap_or_default();
        let id = route.trim_start_matches("/responses/").split('/').next().unwrap_or_default();
        let body = match (method, route.ends_with("/input_items")) {
            (_, true) => json!({"object": "list", "data": [], "first_id": null, "last_id": null,
                                "has_more": false}),
            ("DELETE", _) => json!({"id": id, "object": "response", "deleted": true}),
            _ => response(id, "stored", "completed", Value::Null),
        };
        stream.write_all(json_answer("200 OK", &body).as_bytes()).await?;
        return stream.shutdown().await;
    }
    let id = format!("resp_{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let usage = if model == "resp-nousage" { Value::Null } else { usage_of(request, body_len) };
    if request["stream"] != json!(true) {
        let body = response(&id, &model, "completed", usage);
        stream.write_all(json_answer("200 OK", &body).as_bytes()).await?;
        return stream.shutdown().await;
    }
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .await?;
    let created = response(&id, &model, "in_progress", Value::Null);
    let mut events =
        vec![event("response.created", &json!({"type": "response.created", "response": created}))];
    for delta in DELTAS {
        events.push(event(
            "response.output_text.delta",
            &json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": delta}),
        ));
    }
    let done = response(&id, &model, "completed", usage);
    events.push(event(
        "response.completed",
        &json!({"type": "response.completed", "response": done}),
    ));
    for (i, event) in events.iter().enumerate() {
        if model == "resp-break" && i == 2 {
            return stream.shutdown().await;
        }
        super::upstream::write_chunk_to(&mut stream, event).await?;
    }
    stream.write_all(b"0\r\n\r\n").await?;
    stream.shutdown().await
}
