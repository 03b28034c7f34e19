//! Slow and stalled clients: a body that stops arriving is cut
//! after `server.body_read_timeout_secs` with 408 `request_timeout`, a request head that
//! stops arriving after `server.header_read_timeout_secs`, and open connections are capped
//! (`server.max_connections`), so one client cannot exhaust the file descriptors while
//! `/healthz` keeps answering.

use crate::common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

backend_tests!(
    half_sent_bodies_are_cut_after_the_body_read_timeout,
    stalled_connections_are_capped_and_cut,
    chat_bodies_of_unauthenticated_callers_are_not_read,
);

const SLACK: Duration = Duration::from_millis(1500);

fn port_of(app: &TestApp) -> u16 {
    app.address.rsplit(':').next().unwrap().parse().unwrap()
}

/// Opens a connection and sends a request head announcing 100 body bytes, then 10 of them.
async fn half_sent_body(port: u16, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"email\":"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Reads until the server closes the connection; returns what it sent and when it closed.
async fn read_until_closed(mut stream: TcpStream, within: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(within.saturating_sub(started.elapsed()), stream.read(&mut buf))
            .await
        {
            Err(_) => panic!(
                "connection still open after {within:?}; got {:?}",
                String::from_utf8_lossy(&out)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), started.elapsed())
}

async fn half_sent_bodies_are_cut_after_the_body_read_timeout(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.server.body_read_timeout_secs = 1;
        // All from 127.0.0.1: past `max_pending_requests_per_address` they would be refused
        // at once (tests/it/connection_caps.rs); here the timeout itself is under test.
        s.server.max_pending_requests_per_address = 0;
    })
    .await;
    let port = port_of(&app);
    // Many stalled uploads at once, on a public and on an authenticated endpoint.
    let mut stalled = Vec::new();
    for i in 0..200 {
        let path = if i % 2 == 0 { "/api/v1/auth/register" } else { "/api/v1/auth/login" };
        stalled.push(half_sent_body(port, path).await);
    }
    // The server keeps answering others meanwhile.
    let started = Instant::now();
    assert_eq!(app.get("/healthz", Auth::None).await.status, 200);
    assert!(started.elapsed() < Duration::from_secs(1), "healthz took {:?}", started.elapsed());
    app.new_user("meanwhile").await;
    // Each stalled upload is answered 408 in the envelope and its connection closed.
    let answers = futures_util::future::join_all(
        stalled.into_iter().map(|s| read_until_closed(s, Duration::from_secs(1) + SLACK + SLACK)),
    )
    .await;
    for (text, _) in answers {
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("\"code\":\"request_timeout\""), "{text}");
        assert!(text.to_ascii_lowercase().contains("connection: close"), "{text}");
    }
}

async fn stalled_connections_are_capped_and_cut(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.server.max_connections = 8;
        s.server.workers = Some(2);
        s.server.header_read_timeout_secs = 1;
    })
    .await;
    let port = port_of(&app);
    // Eight connections (the cap) that never finish their request head.
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: loc").await.unwrap();
        stalled.push(s);
    }
    // Real time: actix accepts the eight on its own threads (nothing tells when it has), and
    // the head timeout it enforces runs on the real clock.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A ninth client is not served until the stalled ones are cut by the head timeout.
    let started = Instant::now();
    let reply = app.get("/healthz", Auth::None).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(waited >= Duration::from_millis(400), "the cap did not hold: served after {waited:?}");
    assert!(waited <= Duration::from_secs(1) + SLACK, "served after {waited:?}");
    for s in stalled {
        read_until_closed(s, SLACK).await;
    }
}

async fn chat_bodies_of_unauthenticated_callers_are_not_read(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.server.body_read_timeout_secs = 5).await;
    let mut stream = TcpStream::connect(("127.0.0.1", port_of(&app))).await.unwrap();
    let head = "POST /api/v1/ai/chat/completions HTTP/1.1\r\nHost: localhost\r\n\
                Authorization: Bearer not-a-credential\r\nContent-Type: application/json\r\n\
                Content-Length: 4000000\r\n\r\n{\"model\":\"echo\",";
    stream.write_all(head.as_bytes()).await.unwrap();
    // The 401 comes at once: the server does not wait for (nor buffer) the 4 MB first.
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf))
        .await
        .expect("no answer before the body arrived")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 401"), "{:?}", &buf[..n]);
}
