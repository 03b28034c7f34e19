//! Rate limiting at the HTTP edge: who the client is, counting a request before the work is
//! done, and the header fields that tell clients where they stand.
//!
//! - Handlers call [`RequestRateLimits`] (in `AppState::limits`) before doing the work: per client
//!   IP (`register`, `refresh`), per client IP and e-mail (`login`, before the password is
//!   verified), per credential (`account`, `ai`, after authentication). A refusal is a
//!   429 `rate_limit_exceeded` with `details.limit`, `details.remaining` (0) and `details.reset`
//!   (Unix seconds) and `Retry-After` in whole seconds (RFC 9110 §10.2.3).
//! - The decision is kept in the request's extensions; the middleware of
//!   `crate::middleware::rate_limit_headers` turns it into the `RateLimit-Policy` and
//!   `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers
//!   (`"login";q=10;w=60` and `"login";r=9;t=6`) on every answer of a counted request, 2xx
//!   and 4xx alike. Answers of a limited endpoint that were refused before counting (bad
//!   JSON, missing credential) still carry `RateLimit-Policy`, from the resource's
//!   [`LimitedBy`].
//! - The client IP is the socket peer, unless the peer is a configured trusted proxy: then it
//!   is the rightmost address of the configured forwarded header that is not itself a trusted
//!   proxy (so a client cannot choose its address by sending the header itself).

use crate::error::ApiError;
use crate::observe::metric;
use actix_web::http::header::HeaderMap;
use actix_web::{HttpMessage, HttpRequest};
use aigw_domain::time;
use aigw_service::rate_limit::ForwardedHeader;
use aigw_service::{Decision, LimitKey, Policy, Principal, RateLimitConfig, RateLimiter};
use ipnet::{IpNet, Ipv4Net};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Resource app data naming the policy of a limited endpoint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitedBy(pub(crate) Policy);

/// A bad `rate_limit` setting.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RateLimitSetupError {
    /// An entry of `trusted_proxies` is neither an IP address nor a CIDR block.
    #[error("rate_limit.trusted_proxies: {0:?} is not an IP address or CIDR block")]
    BadProxy(String),
    /// The limiter could not be built (a zero limit or window, a bad Redis URL).
    #[error("{0}")]
    Limiter(String),
}

/// The configured trusted proxies and the header they write.
#[derive(Debug, Clone)]
pub(crate) struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ForwardedHeader,
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) as IPv4, so both spellings match alike.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// A block written in IPv4-mapped IPv6 (`::ffff:10.0.0.0/104`) as the IPv4 block it covers
/// (`10.0.0.0/8`); `None` for such a block shorter than /96, which is not all mapped addresses.
fn canonical_net(net: IpNet) -> Option<IpNet> {
    match net {
        IpNet::V6(v6) => match v6.addr().to_ipv4_mapped() {
            Some(v4) => {
                let bits = v6.prefix_len().checked_sub(96)?;
                Ipv4Net::new(v4, bits).ok().map(IpNet::V4)
            }
            None => Some(net),
        },
        IpNet::V4(_) => Some(net),
    }
}

/// An address of a forwarded header: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]:4711`, optionally in double quotes.
fn parse_hop(raw: &str) -> Option<IpAddr> {
    let s = raw.trim().trim_matches('"');
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(canonical(sa.ip()));
    }
    s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.parse::<IpAddr>().ok())
        .map(canonical)
}

impl TrustedProxies {
    /// Parses `entries` (IP addresses or CIDR blocks).
    ///
    /// # Errors
    /// [`RateLimitSetupError::BadProxy`] naming the first bad entry.
    pub(crate) fn parse(
        entries: &[String],
        header: ForwardedHeader,
    ) -> Result<Self, RateLimitSetupError> {
        let nets = entries
            .iter()
            .map(|entry| {
                let entry = entry.trim();
                let net = match entry.parse::<IpNet>() {
                    Ok(net) => net,
                    Err(_) => IpNet::from(
                        entry
                            .parse::<IpAddr>()
                            .map_err(|_| RateLimitSetupError::BadProxy(entry.to_owned()))?,
                    ),
                };
                canonical_net(net).ok_or_else(|| RateLimitSetupError::BadProxy(entry.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { nets, header })
    }

    /// Whether `ip` is a trusted proxy.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The hops of the configured header, leftmost (the original client) first.
    fn hops(&self, headers: &HeaderMap) -> Vec<String> {
        let (name, forwarded) = match self.header {
            ForwardedHeader::XForwardedFor => ("x-forwarded-for", false),
            ForwardedHeader::Forwarded => ("forwarded", true),
        };
        let mut hops = Vec::new();
        for value in headers.get_all(name) {
            let Ok(value) = value.to_str() else {
                // Not ASCII: nothing in it can be trusted, nor anything left of it.
                hops.clear();
                hops.push(String::new());
                continue;
            };
            for element in value.split(',') {
                if forwarded {
                    let for_value = element.split(';').find_map(|pair| {
                        let (k, v) = pair.split_once('=')?;
                        k.trim().eq_ignore_ascii_case("for").then(|| v.to_owned())
                    });
                    hops.push(for_value.unwrap_or_default());
                } else {
                    hops.push(element.to_owned());
                }
            }
        }
        hops
    }

    /// The client address of a request from `peer` with `headers`: the peer itself unless it
    /// is trusted; else, walking the forwarded hops from the right, the first address that is
    /// not a trusted proxy (or the leftmost, when all are). A hop that is not an address
    /// (`unknown`, an obfuscated identifier, garbage) stops the walk at the hop to its right.
    pub(crate) fn client_ip(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
        if self.nets.is_empty() || !self.contains(peer) {
            return peer;
        }
        let mut client = peer;
        for hop in self.hops(headers).iter().rev() {
            let Some(ip) = parse_hop(hop) else {
                break;
            };
            client = ip;
            if !self.contains(ip) {
                break;
            }
        }
        client
    }
}

/// The rate limiter and the client-address rule, as handlers use them.
#[derive(Debug, Clone)]
pub(crate) struct RequestRateLimits {
    limiter: RateLimiter,
    proxies: TrustedProxies,
    metrics: aigw_service::Metrics,
}

impl RequestRateLimits {
    /// Builds the limiter and parses the trusted proxies of `config`.
    ///
    /// # Errors
    /// [`RateLimitSetupError`] for a bad proxy entry, a zero limit or window, or a bad Redis URL.
    pub(crate) fn new(config: &RateLimitConfig) -> Result<Self, RateLimitSetupError> {
        let proxies = TrustedProxies::parse(&config.trusted_proxies, config.forwarded_header)?;
        let limiter =
            RateLimiter::new(config).map_err(|e| RateLimitSetupError::Limiter(e.to_string()))?;
        Ok(Self { limiter, proxies, metrics: aigw_service::Metrics::default() })
    }

    /// Counts refusals by policy into `metrics` (`aigw_rate_limited_total{policy}`).
    pub(crate) fn with_metrics(mut self, metrics: aigw_service::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Whether `req` came straight from a configured trusted proxy (whose `x-request-id`
    /// and forwarded headers are then believed).
    pub(crate) fn is_from_trusted_proxy(&self, req: &HttpRequest) -> bool {
        req.peer_addr().is_some_and(|a| self.proxies.contains(a.ip()))
    }

    /// The node's Redis connection for keys' counters (`gateway.key_counters = "redis"`),
    /// shared with the policies when they count in Redis (see [`RateLimiter::share_redis`]).
    ///
    /// # Errors
    /// [`RateLimitSetupError::Limiter`] when `redis_url` cannot be parsed.
    pub(crate) fn share_redis(
        &mut self,
        config: &RateLimitConfig,
    ) -> Result<aigw_service::redis_link::RedisLink, RateLimitSetupError> {
        self.limiter.share_redis(config).map_err(|e| RateLimitSetupError::Limiter(e.to_string()))
    }

    /// The underlying limiter.
    pub(crate) fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// The client address of `req` (see [`TrustedProxies::client_ip`]).
    pub(crate) fn client_ip(&self, req: &HttpRequest) -> IpAddr {
        self.proxies.client_ip(req.peer_addr().map(|a| a.ip()), req.headers())
    }

    /// Counts `req` against `policy` per client IP (`register`, `refresh`).
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` when over the limit.
    pub(crate) async fn by_ip(&self, req: &HttpRequest, policy: Policy) -> Result<(), ApiError> {
        self.enforce(req, policy, || LimitKey::client_ip(self.client_ip(req))).await
    }

    /// Counts a login attempt per client IP and normalised e-mail. Call before verifying the
    /// password, so that a limited client learns nothing from the answer.
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` when over the limit.
    pub(crate) async fn login(&self, req: &HttpRequest, email: &str) -> Result<(), ApiError> {
        let ip = self.client_ip(req);
        // `login_ip` first, so that the `login` decision is the one the headers report.
        self.enforce(req, Policy::LoginIp, || LimitKey::client_ip(ip)).await?;
        self.enforce(req, Policy::Login, || LimitKey::login(ip, email)).await
    }

    /// Refuses (429) a client IP that failed authentication too often recently (policy
    /// `auth_failure`), without counting anything. Call before any database or hashing work.
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` while the address is refused.
    pub(crate) async fn refuse_if_failing(&self, req: &HttpRequest) -> Result<(), ApiError> {
        if self.limiter.policy(Policy::AuthFailure).is_none() {
            return Ok(());
        }
        let key = LimitKey::client_ip(self.client_ip(req));
        match self.limiter.peek_refused(Policy::AuthFailure, &key).await {
            None => Ok(()),
            Some(decision) => self.answer(req, decision),
        }
    }

    /// Counts one failed authentication of the client IP (policy `auth_failure`); once the
    /// quota is spent, [`RequestRateLimits::refuse_if_failing`] refuses the address.
    pub(crate) async fn count_failure(&self, req: &HttpRequest) {
        if self.limiter.policy(Policy::AuthFailure).is_none() {
            return;
        }
        let key = LimitKey::client_ip(self.client_ip(req));
        if let Some(d) = self.limiter.check(Policy::AuthFailure, &key).await {
            if !d.allowed {
                tracing::info!(
                    retry_after_secs = d.retry_after_secs(),
                    "client refused after failed authentications"
                );
            }
        }
    }

    /// Counts `req` against `policy` per credential (`account`, `ai`).
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` when over the limit.
    pub(crate) async fn by_caller(
        &self,
        req: &HttpRequest,
        policy: Policy,
        caller: &Principal,
    ) -> Result<(), ApiError> {
        self.enforce(req, policy, || LimitKey::principal(caller)).await
    }

    /// Counts `req` against `policy` per user, whatever credential or session they use
    /// (`email_send`).
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` when over the limit.
    pub(crate) async fn by_user(
        &self,
        req: &HttpRequest,
        policy: Policy,
        user_id: &str,
    ) -> Result<(), ApiError> {
        self.enforce(req, policy, || LimitKey::user(user_id)).await
    }

    /// Counts a password reset request per client IP (`password_reset`) and per normalised
    /// e-mail address (`password_reset_email`), whether or not an account has the address.
    ///
    /// # Errors
    /// 429 `rate_limit_exceeded` when over either limit.
    pub(crate) async fn password_reset(
        &self,
        req: &HttpRequest,
        email: &str,
    ) -> Result<(), ApiError> {
        let ip = self.client_ip(req);
        self.enforce(req, Policy::PasswordReset, || LimitKey::client_ip(ip)).await?;
        self.enforce(req, Policy::PasswordResetEmail, || LimitKey::email(email)).await
    }

    /// Counts `req` against `policy` under the key `key` builds (a digest: only built when
    /// the policy is on).
    async fn enforce(
        &self,
        req: &HttpRequest,
        policy: Policy,
        key: impl FnOnce() -> LimitKey,
    ) -> Result<(), ApiError> {
        if self.limiter.policy(policy).is_none() {
            return Ok(());
        }
        let Some(decision) = self.limiter.check(policy, &key()).await else {
            return Ok(());
        };
        self.answer(req, decision)
    }

    fn answer(&self, req: &HttpRequest, decision: Decision) -> Result<(), ApiError> {
        let policy = decision.policy;
        req.extensions_mut().insert(decision);
        if !decision.allowed {
            self.metrics.count(metric::RATE_LIMITED_TOTAL, &[("policy", policy.name())]);
            tracing::info!(
                policy = policy.name(),
                retry_after_secs = decision.retry_after_secs(),
                "request refused by rate limit"
            );
        }
        decision.into_result(time::now().timestamp()).map(|_| ()).map_err(ApiError::from)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn proxies(entries: &[&str], header: ForwardedHeader) -> TrustedProxies {
        let entries: Vec<String> = entries.iter().map(|s| (*s).to_owned()).collect();
        TrustedProxies::parse(&entries, header).unwrap()
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_addresses_and_cidrs() {
        let p =
            proxies(&["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"], ForwardedHeader::XForwardedFor);
        assert!(p.contains(ip("10.1.2.3")));
        assert!(p.contains(ip("::ffff:10.1.2.3")));
        assert!(p.contains(ip("192.0.2.7")));
        assert!(!p.contains(ip("192.0.2.8")));
        assert!(p.contains(ip("2001:db8:1::1")));
        assert!(!p.contains(ip("2001:db9::1")));
        let mapped = proxies(&["::ffff:10.0.0.0/104"], ForwardedHeader::XForwardedFor);
        assert!(mapped.contains(ip("10.200.0.1")));
        assert!(mapped.contains(ip("::ffff:10.200.0.1")));
        assert!(!mapped.contains(ip("11.0.0.1")));
        for bad in ["10.0.0.0/33", "nonsense", "::/129", "1.2.3.4/x", "::ffff:10.0.0.0/90"] {
            assert!(
                TrustedProxies::parse(&[bad.to_owned()], ForwardedHeader::XForwardedFor).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_sends() {
        let p = proxies(&["10.0.0.1"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(p.client_ip(Some(ip("198.51.100.1")), &h), ip("198.51.100.1"));
        let none = proxies(&[], ForwardedHeader::XForwardedFor);
        assert_eq!(none.client_ip(Some(ip("10.0.0.1")), &h), ip("10.0.0.1"));
    }

    #[test]
    fn rightmost_untrusted_hop_of_x_forwarded_for() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        // The client forged the first entry; the proxy appended the real address.
        let h = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.2")]);
        assert_eq!(p.client_ip(Some(ip("10.0.0.1")), &h), ip("203.0.113.9"));
        let split = headers(&[("x-forwarded-for", "1.1.1.1"), ("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(p.client_ip(Some(ip("10.0.0.1")), &split), ip("203.0.113.9"));
        let garbage = headers(&[("x-forwarded-for", "203.0.113.9, garbage")]);
        assert_eq!(p.client_ip(Some(ip("10.0.0.1")), &garbage), ip("10.0.0.1"));
        let absent = HeaderMap::new();
        assert_eq!(p.client_ip(Some(ip("10.0.0.1")), &absent), ip("10.0.0.1"));
        // The Forwarded header is ignored when X-Forwarded-For is configured.
        let other = headers(&[("forwarded", "for=203.0.113.9")]);
        assert_eq!(p.client_ip(Some(ip("10.0.0.1")), &other), ip("10.0.0.1"));
    }

    #[test]
    fn forwarded_header_with_ports_and_ipv6() {
        let p = proxies(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let h = headers(&[(
            "forwarded",
            "for=1.1.1.1, for=\"[2001:db8::9]:4711\";proto=https, for=10.0.0.3:80",
        )]);
        assert_eq!(p.client_ip(Some(ip("10.0.0.1")), &h), ip("2001:db8::9"));
        let hidden = headers(&[("forwarded", "for=_hidden")]);
        assert_eq!(p.client_ip(Some(ip("10.0.0.1")), &hidden), ip("10.0.0.1"));
    }
}
