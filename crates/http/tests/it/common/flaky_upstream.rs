//! An OpenAI-compatible chat upstream that fails on demand (raw HTTP/1.1 over tokio, one
//! request per connection), for the routing tests: healthy, it answers every
//! `POST /chat/completions` with a completion whose text names the upstream (`from NAME`), as
//! JSON or as a stream; told to, it fails with a [`Fault`], for every request or the next few.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the upstream fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// An OpenAI-style error with this status (`Retry-After: secs` when given).
    Status(u16, Option<u64>),
    /// Reads the request and never answers.
    Hang,
    /// Reads the request and closes the connection without a byte.
    Reset,
    /// A stream's head and first event, then the connection is dropped (JSON calls: a reset).
    BreakStream,
    /// 400 `context_length_exceeded`, as OpenAI refuses a prompt longer than the window.
    TooLong,
}

/// The `usage` of a healthy answer: (prompt, completion, total) tokens.
pub const FLAKY_USAGE: (u64, u64, u64) = (10, 5, 15);

#[derive(Debug, Default)]
struct State {
    /// The fault and how many more requests get it (`None`: all).
    fault: Option<(Fault, Option<usize>)>,
    /// The `model` of each request received, in order.
    models: Vec<String>,
}

/// The upstream; stops when dropped.
#[derive(Debug)]
pub struct FlakyUpstream {
    pub base_url: String,
    pub name: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FlakyUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FlakyUpstream {
    /// A healthy upstream named `name` on a random port.
    pub async fn start(name: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let (shared, own) = (state.clone(), name.to_owned());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (state, name) = (shared.clone(), own.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, &state, &name).await;
                });
            }
        });
        Self { base_url: format!("http://127.0.0.1:{port}"), name: name.to_owned(), state, task }
    }

    /// Fails every request from now on with `fault`.
    pub fn fail(&self, fault: Fault) {
        self.state.lock().unwrap().fault = Some((fault, None));
    }

    /// Fails the next `n` requests with `fault`, then answers again.
    pub fn fail_next(&self, n: usize, fault: Fault) {
        self.state.lock().unwrap().fault = Some((fault, Some(n)));
    }

    /// Answers every request from now on.
    pub fn heal(&self) {
        self.state.lock().unwrap().fault = None;
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().models.len()
    }

    /// The `model` of each request received, in order.
    pub fn models(&self) -> Vec<String> {
        self.state.lock().unwrap().models.clone()
    }
}

/// The fault for the request just received, counting it.
fn take_fault(state: &Mutex<State>, model: String) -> Option<Fault> {
    let mut state = state.lock().unwrap();
    state.models.push(model);
    let (fault, left) = state.fault?;
    match left {
        None => Some(fault),
        Some(0) => {
            state.fault = None;
            None
        }
        Some(n) => {
            state.fault = if n == 1 { None } else { Some((fault, Some(n - 1))) };
            Some(fault)
        }
    }
}

/// The request's JSON body (after its head; `Content-Length` framed).
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<serde_json::Value>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf[end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Ok(Some(serde_json::from_slice(&body).unwrap_or_default()))
}

async fn serve(mut stream: TcpStream, state: &Mutex<State>, name: &str) -> std::io::Result<()> {
    let Some(request) = read_request(&mut stream).await? else { return Ok(()) };
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let streaming = request["stream"] == serde_json::json!(true);
    let include_usage = request["stream_options"]["include_usage"] == serde_json::json!(true);
    let json = |status: &str, extra: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    match take_fault(state, model.clone()) {
        Some(Fault::Hang) => std::future::pending().await,
        Some(Fault::Reset) => return Ok(()),
        Some(Fault::BreakStream) if streaming => {
            stream.write_all(stream_head().as_bytes()).await?;
            let first = chunk(&event(&model, Some(&format!("from {name}")), None));
            stream.write_all(first.as_bytes()).await?;
            stream.flush().await?;
            return Ok(());
        }
        Some(Fault::BreakStream) => return Ok(()),
        Some(Fault::Status(status, retry_after)) => {
            let extra = retry_after.map(|s| format!("Retry-After: {s}\r\n")).unwrap_or_default();
            let body = format!(
                "{{\"error\":{{\"message\":\"{name} failed with {status}\",\"type\":\"server_error\"}}}}"
            );
            let answer = json(&format!("{status} Failure"), &extra, &body);
            stream.write_all(answer.as_bytes()).await?;
        }
        Some(Fault::TooLong) => {
            let body = "{\"error\":{\"message\":\"This model's maximum context length is 8 tokens\",\"type\":\"invalid_request_error\",\"param\":\"messages\",\"code\":\"context_length_exceeded\"}}";
            stream.write_all(json("400 Bad Request", "", body).as_bytes()).await?;
        }
        None if streaming => {
            stream.write_all(stream_head().as_bytes()).await?;
            for piece in ["from ", name, "!"] {
                stream.write_all(chunk(&event(&model, Some(piece), None)).as_bytes()).await?;
            }
            if include_usage {
                stream.write_all(chunk(&event(&model, None, Some(FLAKY_USAGE))).as_bytes()).await?;
            }
            stream.write_all(chunk("data: [DONE]\n\n").as_bytes()).await?;
            stream.write_all(b"0\r\n\r\n").await?;
        }
        None => {
            let (prompt, completion, total) = FLAKY_USAGE;
            let body = serde_json::json!({
                "id": "chatcmpl-flaky", "object": "chat.completion", "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant",
                    "content": format!("from {name}")}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                    "total_tokens": total},
            })
            .to_string();
            stream.write_all(json("200 OK", "", &body).as_bytes()).await?;
        }
    }
    stream.flush().await?;
    stream.shutdown().await
}

fn stream_head() -> String {
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        .to_owned()
}

fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

/// One chat-completion chunk event: a delta with `content`, or the usage chunk.
fn event(model: &str, content: Option<&str>, usage: Option<(u64, u64, u64)>) -> String {
    let value = match (content, usage) {
        (Some(text), _) => serde_json::json!({
            "id": "chatcmpl-flaky", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": [{"index": 0, "delta": {"content": text},
                "finish_reason": null}]}),
        (None, Some((p, c, t))) => serde_json::json!({
            "id": "chatcmpl-flaky", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": [],
            "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": t}}),
        (None, None) => serde_json::json!({}),
    };
    format!("data: {value}\n\n")
}
