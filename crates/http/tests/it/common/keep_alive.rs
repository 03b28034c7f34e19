//! A fake OpenAI-compatible upstream that keeps its connections alive (raw HTTP/1.1 over
//! tokio), numbering each connection it accepts and recording which one every request came on.
//!
//! `POST …/chat/completions` behaves by the `model` of the request body:
//! - `ka-stream` (with `"stream": true`): three SSE events 30 ms apart and `data: [DONE]`,
//!   chunked, then waits for the next request on the same connection;
//! - `ka-slow-stream`: like `ka-stream` with 20 events 200 ms apart;
//! - `ka-drop`: takes the request, then closes the connection without an answer;
//! - anything else: a JSON completion with `Content-Length`, connection kept alive.
//!
//! With [`KeepAliveUpstream::closing_idle_after`], a connection idle that long after an answer
//! is closed by the upstream (as servers' keep-alive timeouts do), without warning.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The JSON answer (its `usage` counts 3 + 2 tokens).
pub const KEEP_ALIVE_JSON: &str = "{\"id\":\"chatcmpl-ka\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"ka\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"kept alive\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}";

/// One request: the connection it came on (0, 1, … in order of acceptance), its request
/// target, its `Host` and its body's `model`.
#[derive(Debug, Clone)]
pub struct Seen {
    pub connection: usize,
    pub target: String,
    pub host: String,
    pub model: String,
}

#[derive(Debug)]
pub struct KeepAliveUpstream {
    pub base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    ended: Arc<Mutex<Vec<usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KeepAliveUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KeepAliveUpstream {
    /// An upstream that keeps connections open as long as the client does.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// An upstream that closes a connection once it has been idle for `idle`.
    pub async fn closing_idle_after(idle: Duration) -> Self {
        Self::start_with(Some(idle)).await
    }

    async fn start_with(idle: Option<Duration>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(Mutex::new(Vec::new()));
        let (log, ends) = (seen.clone(), ended.clone());
        let task = tokio::spawn(async move {
            for connection in 0.. {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (log, ends) = (log.clone(), ends.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, connection, idle, log).await;
                    ends.lock().unwrap().push(connection);
                });
            }
        });
        Self { base_url: format!("http://127.0.0.1:{port}/v1"), seen, ended, task }
    }

    /// The requests so far, in order of arrival.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The connections that have ended (closed by either side, or broken).
    pub fn ended(&self) -> Vec<usize> {
        self.ended.lock().unwrap().clone()
    }

    /// How many connections the requests so far came on.
    pub fn connections(&self) -> usize {
        let seen = self.seen();
        let mut ids: Vec<usize> = seen.iter().map(|s| s.connection).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
}

/// Reads one request from `stream` after the `buf` bytes already read: `None` when the
/// client closed the connection (or `idle` passed) before a request began.
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    idle: Option<Duration>,
) -> std::io::Result<Option<(String, String, Vec<u8>)>> {
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let read = stream.read(&mut tmp);
        let n = match idle {
            Some(idle) if buf.is_empty() => match tokio::time::timeout(idle, read).await {
                Ok(n) => n?,
                Err(_) => return Ok(None),
            },
            _ => read.await?,
        };
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let target = lines.next().unwrap_or_default().split(' ').nth(1).unwrap_or_default().to_owned();
    let (mut host, mut length) = (String::new(), 0usize);
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "host" => host = value.trim().to_owned(),
                "content-length" => length = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    buf.drain(..head_end + 4);
    while buf.len() < length {
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = buf.drain(..length).collect();
    Ok(Some((target, host, body)))
}

async fn serve(
    mut stream: TcpStream,
    connection: usize,
    idle: Option<Duration>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some((target, host, body)) = read_request(&mut stream, &mut buf, idle).await? {
        let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let model = parsed["model"].as_str().unwrap_or_default().to_owned();
        seen.lock().unwrap().push(Seen { connection, target, host, model: model.clone() });
        let (events, pause) = match model.as_str() {
            "ka-drop" => return Ok(()),
            "ka-stream" => (3, Duration::from_millis(30)),
            "ka-slow-stream" => (20, Duration::from_millis(200)),
            _ => {
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{KEEP_ALIVE_JSON}",
                    KEEP_ALIVE_JSON.len()
                );
                stream.write_all(answer.as_bytes()).await?;
                continue;
            }
        };
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await?;
        for i in 0..events {
            let event = format!(
                "data: {{\"id\":\"chatcmpl-ka\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{i} \"}},\"finish_reason\":null}}]}}\n\n"
            );
            stream.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes()).await?;
            super::upstream::slow_down(pause).await;
        }
        let done = "data: [DONE]\n\n";
        stream.write_all(format!("{:x}\r\n{done}\r\n0\r\n\r\n", done.len()).as_bytes()).await?;
    }
    Ok(())
}
