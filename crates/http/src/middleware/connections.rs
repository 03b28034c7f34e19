//! Caps per client address, so that no single address can fill `server.max_connections`
//! (docs/safeguards.md, "Slow and greedy clients").
//!
//! - **Open connections** (`server.max_connections_per_address`): checked when a connection
//!   is accepted, before anything is read from it. A connection from an address that already
//!   holds that many is closed at once, so it never waits ahead of other clients' connections.
//!   An admitted connection holds a slot of its address until it closes, however it closes:
//!   the slot ([`Slot`]) travels with the connection's stream ([`CappedStream`]) and is given
//!   back when the stream is dropped.
//! - **Requests still sending their body** (`server.max_pending_requests_per_address`): a
//!   request whose body reader (`crate::extract`) has to wait for the client takes a pending
//!   slot of its address until the body is complete or the read ends (timeout, error, answer).
//!   A request over the cap is answered 429 `rate_limit_exceeded` with `Retry-After` and
//!   `Connection: close`, and its connection is closed, so an address holds at most that many
//!   stalled uploads whatever the open-connection cap. A body that arrives with its head never
//!   waits and takes no slot.
//! - A request head that does not arrive counts among the open connections only, and is cut
//!   after `server.header_read_timeout_secs`: counting heads as pending would refuse a
//!   client's burst of new connections, whose heads arrive a moment after they are accepted.
//! - An address is an IPv4 address, or the /64 prefix of an IPv6 address (one host usually
//!   holds a whole /64); IPv4-mapped IPv6 addresses count as IPv4. The addresses of
//!   `rate_limit.trusted_proxies` are exempt: a reverse proxy carries all its clients on its
//!   own address, so it must cap them itself.
//! - Refusals are counted in `aigw_connections_refused_total{reason}` (`reason`: the setting
//!   that refused) and logged at `warn` at most once a minute per reason, with the address and
//!   the number refused since the previous line.
//!
//! Cost: the counters live in a sharded map (dashmap), touched when a connection is accepted
//! and when it closes, never per request; a pending slot is an atomic add and subtract on the
//! address's counter, which the connection holds.

use crate::observe::metric;
use crate::rate_limit::TrustedProxies;
use actix_http::error::DispatchError;
use actix_http::{Extensions, Protocol};
use actix_service::{apply_fn_factory, Service, ServiceFactory};
use aigw_service::Metrics;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use futures_util::future::Either;
use ipnet::{IpNet, Ipv6Net};
use std::future::ready;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Seconds a request refused by the pending-request cap is told to wait (`Retry-After`): a
/// pending slot frees as soon as one of the address's bodies is complete.
pub(crate) const PENDING_RETRY_AFTER_SECS: u64 = 1;

/// Milliseconds between two log lines of one refusal reason.
const LOG_EVERY_MS: u64 = 60_000;

/// What refused a connection or request: the `reason` label of
/// `aigw_connections_refused_total`, named after its setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `server.max_connections_per_address`: the connection was closed at once.
    OpenConnections,
    /// `server.max_pending_requests_per_address`: the request was answered 429 and its
    /// connection closed.
    PendingRequests,
}

impl Refusal {
    /// The setting's name under `[server]`, which is also the metric's `reason` label.
    pub(crate) fn setting(self) -> &'static str {
        match self {
            Self::OpenConnections => "max_connections_per_address",
            Self::PendingRequests => "max_pending_requests_per_address",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::OpenConnections => 0,
            Self::PendingRequests => 1,
        }
    }
}

/// The caps of `[server]` per client address, shared by every worker (cheap to clone).
#[derive(Clone)]
pub(crate) struct AddressCaps {
    inner: Arc<Inner>,
}

struct Inner {
    /// Most open connections per address (0: no cap).
    max_open: u32,
    /// Most requests per address whose body the server waits for (0: no cap).
    max_pending: u32,
    exempt: TrustedProxies,
    /// Only addresses with open connections have an entry.
    addresses: DashMap<IpNet, Counts>,
    metrics: Metrics,
    started: Instant,
    logs: [RefusalLog; 2],
}

/// One address's counters.
struct Counts {
    /// Open connections; changed only under the map's shard lock.
    open: u32,
    /// Requests whose body the server waits for; shared with the address's connections.
    pending: Arc<AtomicU32>,
}

/// When a refusal reason was last logged, and how many were refused since.
struct RefusalLog {
    /// Milliseconds after `Inner::started`; `u64::MAX` before the first line.
    last_ms: AtomicU64,
    unlogged: AtomicU64,
}

impl Default for RefusalLog {
    fn default() -> Self {
        Self { last_ms: AtomicU64::new(u64::MAX), unlogged: AtomicU64::new(0) }
    }
}

impl std::fmt::Debug for AddressCaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressCaps")
            .field("max_open", &self.inner.max_open)
            .field("max_pending", &self.inner.max_pending)
            .field("addresses", &self.inner.addresses.len())
            .finish_non_exhaustive()
    }
}

/// The address a connection from `ip` counts against: IPv4 addresses (IPv4-mapped IPv6 ones
/// included) as themselves, IPv6 addresses by their /64 prefix.
pub(crate) fn address_key(ip: IpAddr) -> IpNet {
    match ip {
        IpAddr::V4(v4) => IpNet::from(IpAddr::V4(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpNet::from(IpAddr::V4(v4)),
            None => Ipv6Net::new(v6, 64).map_or(IpNet::from(ip), |net| IpNet::V6(net.trunc())),
        },
    }
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl AddressCaps {
    /// Caps of `max_open` open connections and `max_pending` requests still sending their
    /// body per client address (0 turns a cap off); the addresses of `exempt` are not capped.
    /// Refusals are counted into `metrics`.
    pub(crate) fn new(
        max_open: usize,
        max_pending: usize,
        exempt: TrustedProxies,
        metrics: Metrics,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_open: clamp(max_open),
                max_pending: clamp(max_pending),
                exempt,
                addresses: DashMap::new(),
                metrics,
                started: Instant::now(),
                logs: Default::default(),
            }),
        }
    }

    /// Admits a connection from `peer`: its slot, or the refusal when the address already
    /// holds `max_connections_per_address` open connections (then close the connection).
    /// Connections without a peer address, from exempt addresses, or with both caps off are
    /// admitted uncounted.
    ///
    /// # Errors
    /// [`Refusal::OpenConnections`] when the address is at its cap.
    pub(crate) fn admit(&self, peer: Option<SocketAddr>) -> Result<Slot, Refusal> {
        let inner = &self.inner;
        let Some(peer) = peer else {
            return Ok(Slot { held: None });
        };
        if (inner.max_open == 0 && inner.max_pending == 0) || inner.exempt.contains(peer.ip()) {
            return Ok(Slot { held: None });
        }
        let key = address_key(peer.ip());
        let pending = {
            let mut counts = inner
                .addresses
                .entry(key)
                .or_insert_with(|| Counts { open: 0, pending: Arc::new(AtomicU32::new(0)) });
            if inner.max_open > 0 && counts.open >= inner.max_open {
                drop(counts);
                inner.refused(Refusal::OpenConnections, key, inner.max_open);
                return Err(Refusal::OpenConnections);
            }
            counts.open += 1;
            Arc::clone(&counts.pending)
        };
        Ok(Slot { held: Some(Held { caps: Arc::clone(inner), key, pending }) })
    }

    /// Addresses with open connections now.
    #[cfg(test)]
    fn tracked_addresses(&self) -> usize {
        self.inner.addresses.len()
    }

    /// Wraps `http` (actix-http's service for one connection) so that every accepted
    /// connection is first [admitted](Self::admit): one over the cap is closed at once, an
    /// admitted one is served with its [`Slot`] in a [`CappedStream`].
    pub(crate) fn guard<SF>(
        &self,
        http: SF,
    ) -> impl ServiceFactory<
        TcpStream,
        Config = (),
        Response = (),
        Error = DispatchError,
        InitError = SF::InitError,
    >
    where
        SF: ServiceFactory<
            (CappedStream, Protocol, Option<SocketAddr>),
            Config = (),
            Response = (),
            Error = DispatchError,
        >,
    {
        let caps = self.clone();
        apply_fn_factory(http, move |io: TcpStream, http: &SF::Service| {
            let peer = io.peer_addr().ok();
            match caps.admit(peer) {
                Ok(slot) => Either::Right(http.call((
                    CappedStream { stream: io, slot },
                    Protocol::Http1,
                    peer,
                ))),
                // Dropping the stream closes the connection before anything is read.
                Err(_) => Either::Left(ready(Ok(()))),
            }
        })
    }
}

impl Inner {
    /// Counts a refusal and logs it when the reason was not logged in the last minute.
    fn refused(&self, reason: Refusal, key: IpNet, limit: u32) {
        self.metrics.count(metric::CONNECTIONS_REFUSED_TOTAL, &[("reason", reason.setting())]);
        let log = &self.logs[reason.index()];
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        let last = log.last_ms.load(Ordering::Relaxed);
        let due = last == u64::MAX || now.saturating_sub(last) >= LOG_EVERY_MS;
        if !due
            || log
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            log.unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let refused_since_last_line = log.unlogged.swap(0, Ordering::Relaxed);
        // `192.0.2.7`, `2001:db8:1:2::/64`.
        let key = if key.prefix_len() == key.max_prefix_len() {
            key.addr().to_string()
        } else {
            key.to_string()
        };
        match reason {
            Refusal::OpenConnections => tracing::warn!(
                address = %key,
                limit,
                refused_since_last_line,
                "a client address holds server.max_connections_per_address open connections: \
                 its further connections are closed at once (logged at most once a minute)"
            ),
            Refusal::PendingRequests => tracing::warn!(
                address = %key,
                limit,
                refused_since_last_line,
                "a client address has server.max_pending_requests_per_address requests still \
                 sending their body: its further ones are answered 429 and their connections \
                 closed (logged at most once a minute)"
            ),
        }
    }
}

/// An admitted connection's share of its address's counters: gives the open-connection slot
/// back when dropped. Uncounted connections hold none.
pub(crate) struct Slot {
    held: Option<Held>,
}

struct Held {
    caps: Arc<Inner>,
    key: IpNet,
    pending: Arc<AtomicU32>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("address", &self.held.as_ref().map(|h| h.key)).finish()
    }
}

impl Slot {
    /// The pending-request counter of the connection's address, when it is capped.
    pub(crate) fn pending_requests(&self) -> Option<PendingRequests> {
        let held = self.held.as_ref()?;
        (held.caps.max_pending > 0).then(|| PendingRequests {
            caps: Arc::clone(&held.caps),
            key: held.key,
            count: Arc::clone(&held.pending),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        if let Entry::Occupied(mut entry) = held.caps.addresses.entry(held.key) {
            let counts = entry.get_mut();
            counts.open = counts.open.saturating_sub(1);
            if counts.open == 0 {
                entry.remove();
            }
        };
    }
}

/// The requests of one client address whose body the server waits for. Kept in each capped
/// connection's data (`HttpRequest::conn_data`).
#[derive(Clone)]
pub(crate) struct PendingRequests {
    caps: Arc<Inner>,
    key: IpNet,
    count: Arc<AtomicU32>,
}

impl std::fmt::Debug for PendingRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingRequests")
            .field("address", &self.key)
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish()
    }
}

impl PendingRequests {
    /// Takes a pending slot for a request whose body the server is about to wait for.
    ///
    /// # Errors
    /// The cap (`server.max_pending_requests_per_address`) when the address already has that
    /// many; the refusal is counted and logged.
    pub(crate) fn take(&self) -> Result<PendingSlot, u32> {
        let cap = self.caps.max_pending;
        let taken = self
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap).then_some(n + 1));
        if taken.is_err() {
            self.caps.refused(Refusal::PendingRequests, self.key, cap);
            return Err(cap);
        }
        Ok(PendingSlot { count: Arc::clone(&self.count) })
    }
}

/// A request's pending slot; given back when dropped.
#[derive(Debug)]
pub(crate) struct PendingSlot {
    count: Arc<AtomicU32>,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An accepted connection's stream with its [`Slot`]: reads and writes go to the
/// `TcpStream`; dropping it closes the socket, then gives the slot back.
#[derive(Debug)]
pub(crate) struct CappedStream {
    // Dropped in this order: the socket is closed before its slot can be taken again.
    stream: TcpStream,
    slot: Slot,
}

impl CappedStream {
    /// Puts the address's [`PendingRequests`] into the connection's data (actix-http's
    /// `on_connect_ext`), where the body reader finds it.
    pub(crate) fn share_pending(&self, data: &mut Extensions) {
        if let Some(pending) = self.slot.pending_requests() {
            data.insert(pending);
        }
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use aigw_service::rate_limit::ForwardedHeader;

    fn caps(max_open: usize, max_pending: usize, exempt: &[&str]) -> AddressCaps {
        let exempt: Vec<String> = exempt.iter().map(|s| (*s).to_owned()).collect();
        let exempt = TrustedProxies::parse(&exempt, ForwardedHeader::XForwardedFor).unwrap();
        AddressCaps::new(max_open, max_pending, exempt, Metrics::default())
    }

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(s.parse().unwrap(), 4711))
    }

    #[test]
    fn ipv4_counts_by_address_and_ipv6_by_its_64_prefix() {
        let key = |s: &str| address_key(s.parse().unwrap()).to_string();
        assert_eq!(key("192.0.2.7"), "192.0.2.7/32");
        assert_eq!(key("::ffff:192.0.2.7"), "192.0.2.7/32");
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    }

    #[test]
    fn the_open_cap_refuses_past_it_and_closing_frees_a_slot() {
        let caps = caps(2, 0, &[]);
        let a = caps.admit(peer("192.0.2.1")).unwrap();
        let b = caps.admit(peer("192.0.2.1")).unwrap();
        assert_eq!(caps.admit(peer("192.0.2.1")).err(), Some(Refusal::OpenConnections));
        // Another address, and another host of another /64, are not affected.
        let _c = caps.admit(peer("192.0.2.2")).unwrap();
        let _d = caps.admit(peer("2001:db8::1")).unwrap();
        let _e = caps.admit(peer("2001:db8::2")).unwrap();
        assert!(caps.admit(peer("2001:db8::3")).is_err(), "one /64 is one address");
        assert!(caps.admit(peer("2001:db8:0:1::3")).is_ok());
        drop(a);
        let a = caps.admit(peer("192.0.2.1")).unwrap();
        drop((a, b));
        drop((_c, _d, _e));
        assert_eq!(caps.tracked_addresses(), 0, "closed addresses leave no entry");
    }

    #[test]
    fn trusted_proxies_and_zero_caps_are_not_counted() {
        let caps_ = caps(1, 1, &["10.0.0.0/8"]);
        let held: Vec<Slot> = (0..5).map(|_| caps_.admit(peer("10.1.2.3")).unwrap()).collect();
        assert!(held.iter().all(|s| s.pending_requests().is_none()));
        assert_eq!(caps_.tracked_addresses(), 0);
        let off = caps(0, 0, &[]);
        let held: Vec<Slot> = (0..5).map(|_| off.admit(peer("192.0.2.1")).unwrap()).collect();
        assert_eq!(off.tracked_addresses(), 0);
        drop(held);
    }

    #[test]
    fn the_pending_cap_is_per_address_and_slots_come_back() {
        let caps = caps(0, 2, &[]);
        let (a, b) =
            (caps.admit(peer("192.0.2.1")).unwrap(), caps.admit(peer("192.0.2.1")).unwrap());
        let pending = a.pending_requests().unwrap();
        let first = pending.take().unwrap();
        let _second = b.pending_requests().unwrap().take().unwrap();
        assert_eq!(pending.take().err(), Some(2));
        let other = caps.admit(peer("192.0.2.2")).unwrap();
        let _third = other.pending_requests().unwrap().take().unwrap();
        drop(first);
        let _again = pending.take().unwrap();
    }
}
