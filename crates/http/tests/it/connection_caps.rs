//! Caps per client address (`server.max_connections_per_address`,
//! `server.max_pending_requests_per_address`): one address cannot take the node's connections,
//! whatever it opens, while other addresses are served. Other addresses are other loopback
//! addresses (127.0.0.2): the client socket is bound to one before it connects.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

backend_tests!(
    connections_over_the_per_address_cap_are_closed_at_once,
    stalled_bodies_from_one_address_leave_healthz_to_others,
    a_request_over_the_pending_cap_is_answered_429_and_closed,
    trusted_proxies_are_not_capped,
);

const HOST: &str = "127.0.0.1";
const OTHER: &str = "127.0.0.2";

fn port_of(app: &TestApp) -> u16 {
    app.address.rsplit(':').next().unwrap().parse().unwrap()
}

/// A connection to the server at `port` from the loopback address `from`.
async fn connect_from(from: &str, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from.parse().unwrap(), 0)).unwrap();
    socket.connect(SocketAddr::new(HOST.parse().unwrap(), port)).await.unwrap()
}

/// Reads one answer (head and a `Content-Length` body) within `within`; `None` when the
/// connection was closed first or nothing complete came in time.
async fn read_answer(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0usize);
            if out.len() >= end + 4 + length {
                return Some(text);
            }
        }
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
}

/// Whether the server closes `stream` within `within` (end of stream or reset), and what it
/// sent before.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// `GET path` on `stream` (kept alive); the answer within 2 s.
async fn get_on(stream: &mut TcpStream, path: &str) -> Option<String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    read_answer(stream, Duration::from_secs(2)).await
}

/// `GET path` on a new connection from `from`; the answer and how long it took.
async fn get_from(from: &str, port: u16, path: &str) -> (Option<String>, Duration) {
    let started = Instant::now();
    let mut stream = connect_from(from, port).await;
    (get_on(&mut stream, path).await, started.elapsed())
}

/// The value of `aigw_connections_refused_total{reason="…"}` (0 when absent), read from 127.0.0.2.
async fn refused(port: u16, reason: &str) -> u64 {
    let (metrics, _) = get_from(OTHER, port, "/metrics").await;
    let series = format!("aigw_connections_refused_total{{reason=\"{reason}\"}} ");
    metrics
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0)
}

/// A connection from `from` that sends a registration's head announcing 100 body bytes, then
/// ten of them, and stalls.
async fn stalled_body(from: &str, port: u16) -> TcpStream {
    let mut stream = connect_from(from, port).await;
    let head = "POST /api/v1/auth/register HTTP/1.1\r\nHost: localhost\r\n\
                Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"email\":";
    // A connection refused at once may already be reset.
    let _ = stream.write_all(head.as_bytes()).await;
    stream
}

fn ok(answer: &Option<String>) -> bool {
    answer.as_deref().is_some_and(|a| a.starts_with("HTTP/1.1 200"))
}

async fn connections_over_the_per_address_cap_are_closed_at_once(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.server.max_connections_per_address = 8;
        s.server.keep_alive_secs = 60;
    })
    .await;
    let port = port_of(&app);
    // Eight connections of 127.0.0.1, each served (so admitted) before the next opens.
    let mut held = Vec::new();
    for i in 0..8 {
        let mut stream = connect_from(HOST, port).await;
        assert!(ok(&get_on(&mut stream, "/healthz").await), "connection {i} not served");
        held.push(stream);
    }
    // The ninth is closed at once, before it sends anything.
    let started = Instant::now();
    let mut ninth = connect_from(HOST, port).await;
    let sent = closed_within(&mut ninth, Duration::from_secs(1)).await;
    assert_eq!(sent.as_deref(), Some(""), "the ninth connection was not closed at once");
    assert!(started.elapsed() < Duration::from_secs(1), "closed after {:?}", started.elapsed());
    // Another address is served meanwhile; the eight held connections still are.
    let (answer, took) = get_from(OTHER, port, "/healthz").await;
    assert!(ok(&answer), "{answer:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(ok(&get_on(&mut held[0], "/healthz").await));
    // Closing one of the eight frees its slot (the server sees the close a moment later).
    drop(held.pop());
    let served_again = || async {
        let mut again = connect_from(HOST, port).await;
        let answer = get_on(&mut again, "/healthz").await;
        if ok(&answer) {
            Ok(())
        } else {
            Err(answer)
        }
    };
    let what = "the closed connection's slot never came back";
    eventually(what, Duration::from_secs(3), served_again).await;
    assert!(refused(port, "max_connections_per_address").await >= 1);
}

/// The headline: two thousand stalled uploads from one address while another address probes
/// `/healthz`, which must answer every time within a second. Without the per-address caps the
/// stalled uploads fill `server.max_connections` (1024) for `server.body_read_timeout_secs`
/// (10 s) and the probes wait in the listen backlog.
async fn stalled_bodies_from_one_address_leave_healthz_to_others(backend: Backend) {
    const STALLED: usize = 2000;
    let open_files = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?.to_owned();
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        })
        .unwrap_or(usize::MAX);
    // Both ends of every admitted connection live in this process.
    if open_files < 2 * STALLED + 1024 {
        eprintln!(
            "SKIPPED stalled_bodies_from_one_address_leave_healthz_to_others: the open-file \
             limit is {open_files}, this test needs {} (raise it with `ulimit -n`)",
            2 * STALLED + 1024
        );
        return;
    }
    let app = spawn_app_with(backend, |s| s.server.workers = Some(2)).await;
    let port = port_of(&app);
    let started = Instant::now();
    let probes = tokio::spawn(async move {
        let mut took = Vec::new();
        for _ in 0..8 {
            let (answer, t) =
                tokio::time::timeout(Duration::from_secs(3), get_from(OTHER, port, "/healthz"))
                    .await
                    .unwrap_or((None, Duration::from_secs(3)));
            took.push((ok(&answer), t));
            // Real time: the probes are spread over the seconds the stalled uploads are open
            // and held (until `server.body_read_timeout_secs`, 10 s of real time).
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        took
    });
    let mut stalled = Vec::with_capacity(STALLED);
    for _ in 0..STALLED {
        // A connect that waits means the server stopped accepting: the probes will tell.
        match tokio::time::timeout(Duration::from_secs(2), stalled_body(HOST, port)).await {
            Ok(stream) => stalled.push(stream),
            Err(_) => break,
        }
    }
    let opened = started.elapsed();
    let took = probes.await.unwrap();
    eprintln!("{} stalled uploads opened in {opened:?}; probes: {took:?}", stalled.len());
    for (i, (served, t)) in took.iter().enumerate() {
        assert!(*served && *t < Duration::from_secs(1), "probe {i}: served {served} in {t:?}");
    }
    // Every upload past the caps was refused: closed at once, or answered 429 and closed.
    let refusals = refused(port, "max_connections_per_address").await
        + refused(port, "max_pending_requests_per_address").await;
    assert!(refusals >= (STALLED - 256) as u64, "{refusals} refused");
}

async fn a_request_over_the_pending_cap_is_answered_429_and_closed(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.server.max_pending_requests_per_address = 2;
        s.server.body_read_timeout_secs = 30;
    })
    .await;
    let port = port_of(&app);
    // Three stalled uploads from one address: whichever comes third is refused.
    let mut stalled = Vec::new();
    for _ in 0..3 {
        stalled.push(stalled_body(HOST, port).await);
    }
    let mut answers = Vec::new();
    for stream in &mut stalled {
        answers.push(closed_within(stream, Duration::from_millis(1500)).await);
    }
    let refused_answers: Vec<&String> = answers.iter().flatten().collect();
    assert_eq!(refused_answers.len(), 1, "exactly one of three is refused: {answers:?}");
    let answer = refused_answers[0];
    let lower = answer.to_ascii_lowercase();
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(lower.contains("\r\nretry-after: 1\r\n"), "{answer}");
    assert!(lower.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(lower.contains("\r\ncontent-type: application/json"), "{answer}");
    let body: Value =
        serde_json::from_str(&answer[answer.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(body["success"], json!(false), "{body}");
    assert_eq!(body["error"]["code"], json!("rate_limit_exceeded"), "{body}");
    assert_eq!(body["error"]["details"]["limit"], json!(2), "{body}");
    assert_eq!(body["error"]["details"]["remaining"], json!(0), "{body}");
    assert!(body["error"]["details"]["reset"].is_i64(), "{body}");
    // A body that comes with its head never waits: served while the address is at its cap.
    let mut whole = connect_from(HOST, port).await;
    let payload = json!({"email": unique_email("whole"), "password": PASSWORD}).to_string();
    let request = format!(
        "POST /api/v1/auth/register HTTP/1.1\r\nHost: localhost\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    );
    whole.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut whole, Duration::from_secs(5)).await;
    assert!(answer.as_deref().is_some_and(|a| a.starts_with("HTTP/1.1 201")), "{answer:?}");
    // Another address is not refused.
    let mut other = stalled_body(OTHER, port).await;
    assert_eq!(closed_within(&mut other, Duration::from_millis(300)).await, None);
    // Closing the stalled uploads gives their slots back.
    drop(stalled);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut again = stalled_body(HOST, port).await;
        if closed_within(&mut again, Duration::from_millis(300)).await.is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "the closed uploads' slots never came back");
    }
    assert!(refused(port, "max_pending_requests_per_address").await >= 1);
}

async fn trusted_proxies_are_not_capped(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.server.max_connections_per_address = 2;
        s.server.max_pending_requests_per_address = 1;
        s.server.keep_alive_secs = 60;
        s.server.body_read_timeout_secs = 30;
        s.rate_limit.trusted_proxies = vec![HOST.to_owned()];
    })
    .await;
    let port = port_of(&app);
    // The proxy's address: five connections served and held, three stalled uploads kept.
    let mut held = Vec::new();
    for i in 0..5 {
        let mut stream = connect_from(HOST, port).await;
        assert!(ok(&get_on(&mut stream, "/healthz").await), "proxy connection {i}");
        held.push(stream);
    }
    let mut uploads = Vec::new();
    for _ in 0..3 {
        uploads.push(stalled_body(HOST, port).await);
    }
    for (i, upload) in uploads.iter_mut().enumerate() {
        let answer = closed_within(upload, Duration::from_millis(500)).await;
        assert_eq!(answer, None, "the proxy's upload {i} was refused");
    }
    // Any other address is capped: its third connection is closed at once.
    let mut other = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from(OTHER, port).await;
        assert!(ok(&get_on(&mut stream, "/healthz").await));
        other.push(stream);
    }
    let mut third = connect_from(OTHER, port).await;
    assert_eq!(closed_within(&mut third, Duration::from_secs(1)).await.as_deref(), Some(""));
}
