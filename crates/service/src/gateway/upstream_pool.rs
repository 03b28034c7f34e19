//! Direct upstream calls: HTTP/1.1 keep-alive connections (hyper's `client::conn::http1`),
//! pooled per thread and per provider (docs/decisions.md "Upstream connections pooled per
//! worker, on hyper's connections").
//!
//! - Each thread that sends calls (each actix worker) keeps its own idle connections, so a
//!   call, its connection's task and its answer stay on one thread, and a checkout is a
//!   `Vec::pop` with no lock and no hashing.
//! - A connection goes back to its thread's pool only once its answer's body has been read to
//!   the end ([`PooledBody`]); an answer dropped before its end closes the connection (hyper
//!   cannot abort one HTTP/1 exchange and keep the connection).
//! - An idle connection is reused only while it is open and idle for less than
//!   [`IDLE_TIMEOUT`]; at most [`MAX_IDLE`] are kept per provider and thread. A request that a
//!   reused connection closed before taking is sent again on another one; a request it took is
//!   never sent twice.

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

/// The HTTPS-capable connector of direct upstream calls.
pub(crate) type Connector =
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// An error of an upstream call: hyper's, the connector's (its connect timeout is an
/// `io::Error` of kind `TimedOut` among the causes) or TLS.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

type Sender = SendRequest<Full<Bytes>>;

/// Idle connections kept per provider on each thread; one finishing beyond that is closed.
pub(crate) const MAX_IDLE: usize = 64;

/// How long an idle connection may wait to be reused (hyper-util's default, and below the
/// 120 s after which OpenAI's load balancers close idle connections). Older ones are closed.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// One idle connection and when it became idle.
struct Idle {
    sender: Sender,
    since: Instant,
}

/// Per thread: the idle connections of each provider (by [`ConnectionPool::send`]'s `slot`),
/// most recently used last.
type IdleLists = RefCell<Vec<Vec<Idle>>>;

/// Keep-alive connections to the upstream providers, per thread.
pub(crate) struct ConnectionPool {
    connector: Connector,
    providers: usize,
    idle: thread_local::ThreadLocal<IdleLists>,
}

impl std::fmt::Debug for ConnectionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionPool").field("providers", &self.providers).finish()
    }
}

impl ConnectionPool {
    /// A pool for `providers` providers (slots `0..providers`), connecting with `connector`.
    pub(crate) fn new(connector: Connector, providers: usize) -> Self {
        Self { connector, providers, idle: thread_local::ThreadLocal::new() }
    }

    /// This thread's idle lists.
    fn idle_lists(&self) -> &IdleLists {
        self.idle.get_or(|| RefCell::new((0..self.providers).map(|_| Vec::new()).collect()))
    }

    /// An open idle connection to provider `slot` from this thread's pool, if one is young
    /// enough (older ones, below it in the list, are closed with it).
    fn checkout(&self, slot: usize) -> Option<Sender> {
        let mut lists = self.idle_lists().borrow_mut();
        let list = lists.get_mut(slot)?;
        while let Some(idle) = list.pop() {
            if idle.since.elapsed() >= IDLE_TIMEOUT {
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

    /// Sends `request` (origin-form URI, with its `Host`) to provider `slot`, whose
    /// connections go to `connect_to`: on an idle connection of this thread when there is
    /// one, else on a new one. Answers the response head; its body is read with
    /// [`PooledBody`], which returns the connection to the pool at the body's end.
    ///
    /// # Errors
    /// The connector's error (refused, connect timeout, TLS) or hyper's (the connection
    /// closed or broke before the head arrived).
    pub(crate) async fn send(
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
pub(crate) struct PooledBody {
    body: Incoming,
    lease: Option<Lease>,
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
