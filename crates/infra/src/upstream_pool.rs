//! Keep-alive HTTP/1.1 connections to upstream servers (hyper's `client::conn::http1`),
//! pooled per thread and per upstream, instead of hyper-util's pooled `Client` (a lock, two
//! hashes and a spawned task per call, connections shared by every thread) or reqwest
//! (hyper-util's client plus a URL parse and redirect and retry layers per call). The
//! benchmark `benches/upstream_pool.rs` measures the three in the same run (README.md).
//!
//! - Each thread that sends calls (each actix worker) keeps its own idle connections, so a
//!   call, its connection's task and its answer stay on one thread, and a checkout is a
//!   `Vec::pop` with no lock and no hashing.
//! - A connection goes back to its thread's pool only once its answer's body has been read to
//!   the end ([`PooledBody`]); an answer dropped before its end closes the connection (hyper
//!   cannot abort one HTTP/1 exchange and keep the connection).
//! - An idle connection is reused only while it is open and idle for less than
//!   [`IDLE_TIMEOUT`] (or [`ConnectionPool::with_idle_timeout`]'s); at most [`MAX_IDLE`] are
//!   kept per upstream and thread. A request that a reused connection closed before taking is
//!   sent again on another one; a request it took is never sent twice.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::SendRequest;
use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tower_service::Service;

/// The connector: hyper-util's `HttpConnector` (configured by the caller: connect timeout,
/// `TCP_NODELAY`) in hyper-rustls (TLS for `https`, plain TCP for `http`).
pub type Connector =
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// The connector of aigw's direct upstream calls: hyper-util's `HttpConnector` with a
/// `connect_timeout` and `TCP_NODELAY`, in hyper-rustls (TLS 1.2 and 1.3 on ring, trusting
/// the webpki roots, for `https`; plain TCP for `http`; HTTP/1.1 only).
///
/// # Errors
/// rustls' error when ring's provider offers no default protocol version (it always does).
pub fn connector(connect_timeout: Duration) -> Result<Connector, BoxError> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(Arc::new(rustls::crypto::ring::default_provider()))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// An error of an upstream call: hyper's, the connector's (its connect timeout is an
/// `io::Error` of kind `TimedOut` among the causes) or TLS.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type Sender = SendRequest<Full<Bytes>>;

/// Idle connections kept per upstream on each thread; one finishing beyond that is closed.
pub const MAX_IDLE: usize = 64;

/// How long an idle connection may wait to be reused, by default (hyper-util's default, and
/// below the 120 s after which OpenAI's load balancers close idle connections). Older ones
/// are closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// One idle connection and when it became idle.
struct Idle {
    sender: Sender,
    since: Instant,
}

/// Per thread: the idle connections of each upstream (by [`ConnectionPool::send`]'s `slot`),
/// most recently used last.
type IdleLists = RefCell<Vec<Vec<Idle>>>;

/// Keep-alive connections to a fixed set of upstreams (slots `0..upstreams`), per thread.
pub struct ConnectionPool {
    connector: Connector,
    upstreams: usize,
    idle_timeout: Duration,
    idle: thread_local::ThreadLocal<IdleLists>,
}

impl std::fmt::Debug for ConnectionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionPool")
            .field("upstreams", &self.upstreams)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

impl ConnectionPool {
    /// A pool for `upstreams` upstreams (slots `0..upstreams`), connecting with `connector`,
    /// reusing connections idle for less than [`IDLE_TIMEOUT`].
    pub fn new(connector: Connector, upstreams: usize) -> Self {
        Self {
            connector,
            upstreams,
            idle_timeout: IDLE_TIMEOUT,
            idle: thread_local::ThreadLocal::new(),
        }
    }

    /// The same pool, reusing connections idle for less than `idle_timeout` instead.
    #[must_use]
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// This thread's idle lists.
    fn idle_lists(&self) -> &IdleLists {
        self.idle.get_or(|| RefCell::new((0..self.upstreams).map(|_| Vec::new()).collect()))
    }

    /// An open idle connection to upstream `slot` from this thread's pool, if one is young
    /// enough (older ones, below it in the list, are closed with it).
    fn checkout(&self, slot: usize) -> Option<Sender> {
        let mut lists = self.idle_lists().borrow_mut();
        let list = lists.get_mut(slot)?;
        while let Some(idle) = list.pop() {
            if idle.since.elapsed() >= self.idle_timeout {
                list.clear();
                return None;
            }
            if !idle.sender.is_closed() {
                return Some(idle.sender);
            }
        }
        None
    }

    /// Puts `sender`, whose last answer has been read to the end, back into this thread's
    /// pool (or closes it, when closed already or the pool is full).
    fn check_in(&self, slot: usize, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut lists = self.idle_lists().borrow_mut();
        if let Some(list) = lists.get_mut(slot) {
            if list.len() < MAX_IDLE {
                list.push(Idle { sender, since: Instant::now() });
            }
        }
    }

    /// Opens a connection to `uri`'s host (TLS for `https`) and runs it as a task of this
    /// thread.
    async fn connect(&self, uri: &http::Uri) -> Result<Sender, BoxError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
        let io = connector.call(uri.clone()).await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Sends `request` (origin-form URI, with its `Host`) to upstream `slot`, whose
    /// connections go to `connect_to` (an absolute `http` or `https` URI: its scheme, host
    /// and port are used): on an idle connection of this thread when there is one, else on a
    /// new one. Answers the response head; its body is read with [`PooledBody`], which
    /// returns the connection to the pool at the body's end. A `slot` not below the pool's
    /// `upstreams` is sent on a new connection that is not kept.
    ///
    /// Runs inside a tokio runtime: a new connection runs as a task of it (`tokio::spawn`),
    /// so on a current-thread runtime (an actix worker's) it stays on that thread.
    ///
    /// # Errors
    /// The connector's error (refused, connect timeout, TLS) or hyper's (the connection
    /// closed or broke before the head arrived).
    pub async fn send(
        self: &Arc<Self>,
        slot: usize,
        connect_to: &http::Uri,
        mut request: http::Request<Full<Bytes>>,
    ) -> Result<(http::response::Parts, PooledBody), BoxError> {
        while let Some(mut sender) = self.checkout(slot) {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(self.lease(slot, sender, response)),
                Err(mut e) => match e.take_message() {
                    // Closed before it took the request: the request was not sent.
                    Some(unsent) => request = unsent,
                    None => return Err(e.into_error().into()),
                },
            }
        }
        let mut sender = self.connect(connect_to).await?;
        let response = sender.send_request(request).await?;
        Ok(self.lease(slot, sender, response))
    }

    fn lease(
        self: &Arc<Self>,
        slot: usize,
        sender: Sender,
        response: http::Response<Incoming>,
    ) -> (http::response::Parts, PooledBody) {
        let (head, body) = response.into_parts();
        let lease = Lease { pool: self.clone(), slot, sender };
        (head, PooledBody { body, lease: Some(lease) })
    }
}

/// A connection in use, and where it goes back to.
struct Lease {
    pool: Arc<ConnectionPool>,
    slot: usize,
    sender: Sender,
}

/// An upstream answer's body as a stream of data chunks (trailers are skipped). At its end
/// its connection goes back to the pool of the thread that read it; dropped earlier, or
/// after an error, the connection is closed.
pub struct PooledBody {
    body: Incoming,
    lease: Option<Lease>,
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody").field("pooled", &self.lease.is_some()).finish()
    }
}

impl futures_util::Stream for PooledBody {
    type Item = Result<Bytes, hyper::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Some(Err(e)) => {
                    self.lease = None;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    if let Some(Lease { pool, slot, sender }) = self.lease.take() {
                        pool.check_in(slot, sender);
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const ANSWER: &str = r#"{"id":"chatcmpl-1","choices":[]}"#;

    /// What the test upstream saw: connections by number, from 0.
    #[derive(Debug, Default)]
    struct Seen {
        connections: usize,
        /// Each request's connection and body.
        requests: Vec<(usize, String)>,
        /// Connections that ended (closed by either side).
        ended: Vec<usize>,
    }

    /// An HTTP/1.1 upstream on 127.0.0.1, on a thread of its own, that acts on each
    /// request's body: `json` is answered (keep-alive), `drop` gets the connection closed
    /// without an answer, `slow` gets a chunked answer's first chunk and never its end.
    struct Upstream {
        url: http::Uri,
        seen: Arc<Mutex<Seen>>,
        /// Told each time a connection ends.
        ended_one: Arc<tokio::sync::Notify>,
    }

    impl Upstream {
        /// Closes a connection idle for `close_idle_after` between requests, when given.
        fn start(close_idle_after: Option<Duration>) -> Self {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let url = format!("http://{}/v1/chat/completions", listener.local_addr().unwrap());
            let seen = Arc::new(Mutex::new(Seen::default()));
            let ended_one = Arc::new(tokio::sync::Notify::new());
            let (shared, tell) = (seen.clone(), ended_one.clone());
            std::thread::spawn(move || {
                let runtime =
                    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    loop {
                        let (stream, _) = listener.accept().await.unwrap();
                        let (seen, tell) = (shared.clone(), tell.clone());
                        let number = {
                            let mut seen = seen.lock().unwrap();
                            seen.connections += 1;
                            seen.connections - 1
                        };
                        tokio::spawn(async move {
                            serve(stream, number, &seen, close_idle_after).await;
                            seen.lock().unwrap().ended.push(number);
                            tell.notify_one();
                        });
                    }
                });
            });
            Self { url: url.parse().unwrap(), seen, ended_one }
        }

        fn connections(&self) -> usize {
            self.seen.lock().unwrap().connections
        }

        fn requests(&self) -> Vec<(usize, String)> {
            self.seen.lock().unwrap().requests.clone()
        }

        fn ended(&self) -> Vec<usize> {
            self.seen.lock().unwrap().ended.clone()
        }

        /// Waits up to 10 s for connection `number` to end (woken by each connection's end,
        /// no polling: a `notify_one` before the wait leaves a permit).
        async fn has_ended(&self, number: usize) {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !self.ended().contains(&number) {
                let woken = tokio::time::timeout_at(deadline, self.ended_one.notified()).await;
                assert!(woken.is_ok(), "connection {number} did not end within 10 s");
            }
        }
    }

    /// Serves connection `number` until the client closes it or a request says otherwise.
    async fn serve(
        mut stream: tokio::net::TcpStream,
        number: usize,
        seen: &Mutex<Seen>,
        close_idle_after: Option<Duration>,
    ) {
        let mut buffer = Vec::new();
        loop {
            let head_end = loop {
                if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
                let mut chunk = [0u8; 4096];
                let read = stream.read(&mut chunk);
                let read = match close_idle_after {
                    Some(idle) if buffer.is_empty() => match tokio::time::timeout(idle, read).await
                    {
                        Ok(read) => read,
                        Err(_) => return,
                    },
                    _ => read.await,
                };
                match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().unwrap());
            while buffer.len() < head_end + length {
                let mut chunk = [0u8; 4096];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
            let body = String::from_utf8_lossy(&buffer[head_end..head_end + length]).into_owned();
            buffer.drain(..head_end + length);
            seen.lock().unwrap().requests.push((number, body.clone()));
            let answer = match body.as_str() {
                "json" => format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\n\r\n{ANSWER}",
                    ANSWER.len()
                ),
                "slow" => "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                           transfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n"
                    .to_owned(),
                _ => return,
            };
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            if body == "slow" {
                // Never ends the answer; waits for the client to close the connection.
                let mut chunk = [0u8; 64];
                while matches!(stream.read(&mut chunk).await, Ok(n) if n > 0) {}
                return;
            }
        }
    }

    fn pool() -> ConnectionPool {
        ConnectionPool::new(connector(Duration::from_secs(5)).unwrap(), 1)
    }

    fn request(upstream: &Upstream, body: &'static str) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(Bytes::from_static(body.as_bytes())));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = upstream.url.path_and_query().unwrap().as_str().parse().unwrap();
        let host = upstream.url.authority().unwrap().as_str().parse().unwrap();
        request.headers_mut().insert(http::header::HOST, host);
        request
    }

    /// Sends `body` and reads the answer to its end.
    async fn call(pool: &Arc<ConnectionPool>, upstream: &Upstream, body: &'static str) -> String {
        let (head, mut answer) =
            pool.send(0, &upstream.url, request(upstream, body)).await.unwrap();
        assert_eq!(head.status, 200);
        let mut text = Vec::new();
        while let Some(chunk) = answer.next().await {
            text.extend_from_slice(&chunk.unwrap());
        }
        String::from_utf8(text).unwrap()
    }

    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn calls_of_one_thread_reuse_one_connection() {
        let upstream = Upstream::start(None);
        let pool = Arc::new(pool());
        current_thread().block_on(async {
            for _ in 0..3 {
                assert_eq!(call(&pool, &upstream, "json").await, ANSWER);
            }
        });
        assert_eq!(upstream.connections(), 1, "{:?}", upstream.requests());
        assert_eq!(upstream.requests().len(), 3);
    }

    #[test]
    fn each_thread_keeps_connections_of_its_own() {
        let upstream = Upstream::start(None);
        let pool = Arc::new(pool());
        for _ in 0..2 {
            let pool = pool.clone();
            let (url, seen) = (upstream.url.clone(), upstream.seen.clone());
            let ended_one = upstream.ended_one.clone();
            std::thread::spawn(move || {
                let upstream = Upstream { url, seen, ended_one };
                current_thread().block_on(async {
                    for _ in 0..2 {
                        call(&pool, &upstream, "json").await;
                    }
                });
            })
            .join()
            .unwrap();
        }
        let requests = upstream.requests();
        assert_eq!(upstream.connections(), 2, "{requests:?}");
        let connections: Vec<usize> = requests.iter().map(|(c, _)| *c).collect();
        assert_eq!(connections, [0, 0, 1, 1]);
    }

    #[test]
    fn concurrent_calls_open_a_connection_each_and_all_are_kept() {
        let upstream = Upstream::start(None);
        let pool = Arc::new(pool());
        current_thread().block_on(async {
            let calls = (0..4).map(|_| call(&pool, &upstream, "json"));
            futures_util::future::join_all(calls).await;
            let calls = (0..4).map(|_| call(&pool, &upstream, "json"));
            futures_util::future::join_all(calls).await;
        });
        assert_eq!(upstream.connections(), 4, "{:?}", upstream.requests());
    }

    #[test]
    fn an_answer_dropped_before_its_end_closes_its_connection() {
        let upstream = Upstream::start(None);
        let pool = Arc::new(pool());
        current_thread().block_on(async {
            let (_, mut answer) =
                pool.send(0, &upstream.url, request(&upstream, "slow")).await.unwrap();
            assert_eq!(&answer.next().await.unwrap().unwrap()[..], b"data: ");
            drop(answer);
            call(&pool, &upstream, "json").await;
            // And the next call reuses the second connection, not the half-read one.
            call(&pool, &upstream, "json").await;
            upstream.has_ended(0).await;
        });
        let connections: Vec<usize> = upstream.requests().iter().map(|(c, _)| *c).collect();
        assert_eq!(connections, [0, 1, 1]);
    }

    #[test]
    fn a_connection_the_upstream_closed_when_idle_costs_no_call() {
        let upstream = Upstream::start(Some(Duration::from_millis(50)));
        let pool = Arc::new(pool());
        current_thread().block_on(async {
            call(&pool, &upstream, "json").await;
            upstream.has_ended(0).await;
            // The idle connection is closed now: the call goes out on a new one.
            assert_eq!(call(&pool, &upstream, "json").await, ANSWER);
        });
        assert_eq!(upstream.connections(), 2);
        assert_eq!(upstream.requests().len(), 2);
    }

    #[test]
    fn a_request_a_connection_took_is_never_sent_again() {
        let upstream = Upstream::start(None);
        let pool = Arc::new(pool());
        current_thread().block_on(async {
            call(&pool, &upstream, "json").await;
            // Taken on the kept connection, which then closes without an answer.
            let error = pool.send(0, &upstream.url, request(&upstream, "drop")).await.err();
            assert!(error.is_some(), "the dropped request got an answer");
            call(&pool, &upstream, "json").await;
        });
        let requests = upstream.requests();
        let bodies: Vec<&str> = requests.iter().map(|(_, b)| b.as_str()).collect();
        assert_eq!(bodies, ["json", "drop", "json"], "sent once");
        let connections: Vec<usize> = requests.iter().map(|(c, _)| *c).collect();
        assert_eq!(connections, [0, 0, 1]);
    }

    #[test]
    fn connections_idle_too_long_are_not_reused() {
        // An idle timeout of zero: every idle connection is too old by the next call (the
        // reuse of younger ones is the first test's), so no clock needs to pass.
        let upstream = Upstream::start(None);
        let pool = Arc::new(pool().with_idle_timeout(Duration::ZERO));
        current_thread().block_on(async {
            call(&pool, &upstream, "json").await;
            call(&pool, &upstream, "json").await;
            // The old connection was closed, not kept.
            upstream.has_ended(0).await;
            call(&pool, &upstream, "json").await;
            upstream.has_ended(1).await;
        });
        let connections: Vec<usize> = upstream.requests().iter().map(|(c, _)| *c).collect();
        assert_eq!(connections, [0, 1, 2]);
    }

    #[test]
    fn a_refused_connection_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url: http::Uri =
            format!("http://{}/v1", listener.local_addr().unwrap()).parse().unwrap();
        drop(listener);
        let pool = Arc::new(pool());
        let request = http::Request::new(Full::new(Bytes::from_static(b"json")));
        let result = current_thread().block_on(pool.send(0, &url, request));
        assert!(result.is_err());
    }
}
