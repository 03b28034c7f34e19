//! A tiny fake OpenAI-compatible upstream on a random port (raw HTTP/1.1 over tokio).
//! `POST /embeddings` is answered by `super::upstream_embeddings`, `/responses…` by
//! `super::upstream_responses`, `/v1/messages…` by `super::upstream_messages`.
//!
//! `POST /chat/completions` behaves by the `model` of the request body:
//! - `up-500`: answers 500 with an OpenAI-style error body;
//! - `up-hang`: reads the request and never answers;
//! - `up-400`, `up-401`, `up-403`, `up-429` (with `Retry-After: 7`): OpenAI-style errors (the
//!   400 and 401 quote the `Authorization` they received, as careless upstreams do);
//! - `up-302`: a redirect; `up-huge`: a 2 MiB JSON answer;
//! - `up-gated`: streams one SSE event, then waits until [`FakeUpstream::release`] is called,
//!   then sends the rest (proves the gateway passes chunks through as they come);
//! - `up-nousage`: like the default but reports no `usage` (JSON without it; a stream that
//!   ignores `stream_options.include_usage`);
//! - `up-slow`: streams [`SLOW_PIECES`] pieces, one every [`SLOW_PIECE_DELAY`];
//! - `up-break`: streams two pieces, then drops the connection mid-stream;
//! - `up-bill`: bills like a provider that uses every token it may: waits the milliseconds of
//!   `metadata.delay_ms` (a string; default 0), then answers JSON whose `usage` has
//!   [`billed_prompt`] prompt tokens and `n` times `max_completion_tokens` (or `max_tokens`,
//!   default 16) completion tokens;
//! - `up-bytes`: bills like `up-bill`, but one prompt token per byte of the request body it
//!   received (an upstream whose tokenizer makes tokens of single bytes);
//! - `up-cached`: JSON whose `usage` is [`CACHED_USAGE`], with cached prompt tokens and
//!   reasoning tokens (`prompt_tokens_details`, `completion_tokens_details`);
//! - anything else: answers [`UPSTREAM_JSON`] verbatim, or with `"stream": true` the events of
//!   [`UPSTREAM_SSE_PIECES`] then `data: [DONE]`. Like OpenAI, a stream asked for usage
//!   (`"stream_options": {"include_usage": true}`) carries `"usage": null` in every chunk and
//!   a last chunk with `"choices": []` and [`STREAM_USAGE`].
//!
//! Every request is recorded (method, path, headers, body bytes).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The upstream's JSON answer, with unusual formatting so that a re-serialisation shows.
pub const UPSTREAM_JSON: &str = "{\"id\":\"chatcmpl-upstream-1\",  \"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"up-json\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"from upstream\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5},\"x_upstream_marker\":true}";

/// The delta contents the upstream streams, in order.
pub const UPSTREAM_SSE_PIECES: [&str; 3] = ["Hel", "lo ", "stream!"];

/// The `usage` of `up-cached`: (prompt, of them cached, completion, of them reasoning) tokens.
pub const CACHED_USAGE: (u64, u64, u64, u64) = (100, 60, 40, 30);

/// The `usage` a stream asked for it reports: (prompt, completion, total) tokens.
pub const STREAM_USAGE: (u64, u64, u64) = (7, 3, 10);

/// Pieces of an `up-slow` stream.
pub const SLOW_PIECES: usize = 40;

/// Pause before each piece of an `up-slow` stream.
pub const SLOW_PIECE_DELAY: Duration = Duration::from_millis(100);

/// One request the upstream received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-cased header names.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

#[derive(Debug)]
pub struct FakeUpstream {
    pub base_url: String,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    gate: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeUpstream {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Notify::new());
        let (rec, g) = (recorded.clone(), gate.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (rec, g) = (rec.clone(), g.clone());
                tokio::spawn(async move {
                    let _ = handle(stream, rec, g).await;
                });
            }
        });
        Self { base_url: format!("http://127.0.0.1:{port}"), recorded, gate, task }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().unwrap().clone()
    }

    /// Lets a waiting `up-gated` stream continue.
    pub fn release(&self) {
        self.gate.notify_one();
    }
}

/// Waits `pause`, as a slow upstream does before it writes.
pub async fn slow_down(pause: Duration) {
    // Real time: a slow upstream is slow on the wire, and what the gateway does meanwhile
    // (its timeouts, the calls in flight it writes, streaming) runs on the real clock.
    tokio::time::sleep(pause).await;
}

/// The prompt tokens `up-bill` bills for `request`: one per 4 bytes of the compact JSON of
/// `messages` and of every other field a provider renders into the prompt (`tools`,
/// `functions`, `response_format`, `tool_choice`), as English text and JSON average.
pub fn billed_prompt(request: &serde_json::Value) -> u64 {
    ["messages", "tools", "functions", "response_format", "tool_choice"]
        .iter()
        .filter_map(|field| request.get(field))
        .map(|value| value.to_string().len() as u64)
        .sum::<u64>()
        .div_ceil(4)
}

/// A URL on which nothing listens.
pub async fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// One chunk event; `with_usage` adds `"usage": null` as OpenAI does once asked for usage.
fn sse_chunk(
    id: &str,
    model: &str,
    delta: &serde_json::Value,
    finish: &serde_json::Value,
    with_usage: bool,
) -> String {
    let mut event = serde_json::json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    if with_usage {
        event["usage"] = serde_json::Value::Null;
    }
    format!("data: {event}\n\n")
}

/// The events of a default stream of `model`: exactly what the upstream sends, asked for
/// usage or not.
pub fn default_stream(model: &str, include_usage: bool) -> Vec<String> {
    stream_events(model, &UPSTREAM_SSE_PIECES, include_usage)
}

fn stream_events(model: &str, pieces: &[&str], include_usage: bool) -> Vec<String> {
    let id = "chatcmpl-upstream-stream";
    let null = serde_json::Value::Null;
    let mut events = vec![sse_chunk(
        id,
        model,
        &serde_json::json!({"role": "assistant", "content": ""}),
        &null,
        include_usage,
    )];
    for piece in pieces {
        events.push(sse_chunk(
            id,
            model,
            &serde_json::json!({"content": piece}),
            &null,
            include_usage,
        ));
    }
    events.push(sse_chunk(
        id,
        model,
        &serde_json::json!({}),
        &serde_json::json!("stop"),
        include_usage,
    ));
    if include_usage {
        let (prompt, completion, total) = STREAM_USAGE;
        let usage = serde_json::json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
        });
        events.push(format!("data: {usage}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// The JSON answer of `up-nousage`: [`UPSTREAM_JSON`]'s shape without `usage`.
pub const UPSTREAM_JSON_NO_USAGE: &str = "{\"id\":\"chatcmpl-upstream-2\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"up-nousage\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hello world\"},\"finish_reason\":\"stop\"}]}";

/// The method of the last request `recorded`.
fn method_of(recorded: &Mutex<Vec<Recorded>>) -> String {
    recorded.lock().unwrap().last().map(|r| r.method.clone()).unwrap_or_default()
}

/// Writes `data` as one chunk of a chunked body (for the other dialects' streams).
pub async fn write_chunk_to(stream: &mut TcpStream, data: &str) -> std::io::Result<()> {
    write_chunk(stream, data).await
}

fn find_header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

async fn write_chunk(stream: &mut TcpStream, data: &str) -> std::io::Result<()> {
    stream.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes()).await?;
    stream.flush().await
}

/// Reads one HTTP/1.1 request from `stream` (a `Content-Length` or chunked body, de-chunked);
/// `None` when the peer closed the connection first.
pub(crate) async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<Recorded>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let header_end = loop {
        if let Some(end) = find_header_end(&buf) {
            break end;
        }
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = BTreeMap::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let mut body = buf[header_end + 4..].to_vec();
    let chunked = headers
        .get("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        // Read until the terminating zero-length chunk, then de-chunk.
        while !body.ends_with(b"0\r\n\r\n") {
            let n = stream.read(&mut tmp).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&tmp[..n]);
        }
        body = dechunk(&body);
    } else {
        let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while body.len() < length {
            let n = stream.read(&mut tmp).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&tmp[..n]);
        }
    }
    Ok(Some(Recorded { method, path, headers, body }))
}

async fn handle(
    mut stream: TcpStream,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    gate: Arc<Notify>,
) -> std::io::Result<()> {
    let Some(request) = read_request(&mut stream).await? else {
        return Ok(());
    };
    let Recorded { path, body, .. } = request.clone();
    let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let body_len = body.len() as u64;
    recorded.lock().unwrap().push(request);
    let model = parsed["model"].as_str().unwrap_or_default().to_owned();
    let streaming = parsed["stream"] == serde_json::json!(true);

    // The other dialects' endpoints, each answered by a module of its own.
    if path == "/embeddings" {
        let response = super::upstream_embeddings::answer(&model, &parsed);
        stream.write_all(response.as_bytes()).await?;
        return stream.shutdown().await;
    }
    if path.starts_with("/v1/messages") {
        return super::upstream_messages::serve(stream, &path, &parsed, body_len).await;
    }
    if path.starts_with("/responses") {
        return super::upstream_responses::serve(
            stream,
            &method_of(&recorded),
            &path,
            &parsed,
            body_len,
        )
        .await;
    }
    if path != "/chat/completions" {
        let msg = "{\"error\":{\"message\":\"no such path\"}}";
        let response = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{msg}",
            msg.len()
        );
        stream.write_all(response.as_bytes()).await?;
        return stream.shutdown().await;
    }
    let bearer = recorded
        .lock()
        .unwrap()
        .last()
        .and_then(|r| r.headers.get("authorization").cloned())
        .unwrap_or_default();
    let canned = |status: &str, extra: &str, body: String| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let canned = match model.as_str() {
        "up-400" => Some(canned("400 Bad Request", "", serde_json::json!({"error": {
            "message": format!("This model's maximum context length is 8192 tokens ({bearer})"),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}).to_string())),
        "up-401" => Some(canned("401 Unauthorized", "", serde_json::json!({"error": {
            "message": format!("Incorrect API key provided: {bearer}"), "code": "invalid_api_key"}}).to_string())),
        "up-403" => Some(canned("403 Forbidden", "", "{\"error\":{\"message\":\"region not allowed\"}}".to_owned())),
        "up-429" => Some(canned("429 Too Many Requests", "Retry-After: 7\r\n", "{\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}".to_owned())),
        "up-302" => Some(canned("302 Found", "Location: /elsewhere\r\n", "{}".to_owned())),
        "up-huge" => Some(canned("200 OK", "", format!("{{\"pad\":\"{}\"}}", "x".repeat(2 * 1024 * 1024)))),
        "up-cached" => {
            let (prompt, cached, completion, reasoning) = CACHED_USAGE;
            Some(canned("200 OK", "", serde_json::json!({
                "id": "chatcmpl-cached", "object": "chat.completion", "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "cached"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion,
                          "prompt_tokens_details": {"cached_tokens": cached},
                          "completion_tokens_details": {"reasoning_tokens": reasoning}}}).to_string()))
        }
        "up-bill" | "up-bytes" => {
            let delay = parsed["metadata"]["delay_ms"].as_str().and_then(|d| d.parse().ok());
            slow_down(Duration::from_millis(delay.unwrap_or(0))).await;
            let cap = parsed["max_completion_tokens"].as_u64().or(parsed["max_tokens"].as_u64());
            let completion = parsed["n"].as_u64().unwrap_or(1) * cap.unwrap_or(16);
            let prompt = if model == "up-bytes" {
                body_len
            } else {
                billed_prompt(&parsed)
            };
            Some(canned("200 OK", "", serde_json::json!({
                "id": "chatcmpl-bill", "object": "chat.completion", "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "billed"},
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}).to_string()))
        }
        _ => None,
    };
    if let Some(response) = canned {
        stream.write_all(response.as_bytes()).await?;
        return stream.shutdown().await;
    }
    match model.as_str() {
        "up-hang" => std::future::pending().await,
        "up-500" => {
            let msg = "{\"error\":{\"message\":\"upstream exploded\",\"type\":\"server_error\"}}";
            let response = format!(
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{msg}",
                msg.len()
            );
            stream.write_all(response.as_bytes()).await?;
            stream.shutdown().await
        }
        _ if streaming => {
            stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                )
                .await?;
            let include_usage = model != "up-nousage"
                && parsed.pointer("/stream_options/include_usage")
                    == Some(&serde_json::json!(true));
            let slow: Vec<String> = (0..SLOW_PIECES).map(|i| format!("w{i} ")).collect();
            let slow: Vec<&str> = slow.iter().map(String::as_str).collect();
            let pieces: &[&str] = if model == "up-slow" { &slow } else { &UPSTREAM_SSE_PIECES };
            let events = stream_events(&model, pieces, include_usage);
            for (i, event) in events.iter().enumerate() {
                if model == "up-slow" && i > 0 {
                    slow_down(SLOW_PIECE_DELAY).await;
                }
                if model == "up-break" && i == 3 {
                    // Gone mid-stream: no terminating chunk.
                    return stream.shutdown().await;
                }
                write_chunk(&mut stream, event).await?;
                if model == "up-gated" && i == 0 {
                    gate.notified().await;
                }
            }
            stream.write_all(b"0\r\n\r\n").await?;
            stream.flush().await?;
            stream.shutdown().await
        }
        "up-nousage" => {
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{UPSTREAM_JSON_NO_USAGE}",
                UPSTREAM_JSON_NO_USAGE.len()
            );
            stream.write_all(response.as_bytes()).await?;
            stream.shutdown().await
        }
        _ => {
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{UPSTREAM_JSON}",
                UPSTREAM_JSON.len()
            );
            stream.write_all(response.as_bytes()).await?;
            stream.shutdown().await
        }
    }
}

fn dechunk(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_line = String::from_utf8_lossy(&rest[..line_end]).to_string();
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        rest = &rest[line_end + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[(size + 2).min(rest.len())..];
    }
    out
}
