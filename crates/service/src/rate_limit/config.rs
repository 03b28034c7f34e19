//! `[rate_limit]`: named policies, each a `limit` of requests per `window_secs`, the backend
//! that keeps the counters, and the proxies whose forwarded client address is believed.
//!
//! Every policy is a GCRA ("leaky bucket as a meter"): a burst of up to `limit` requests is
//! allowed, and one request's worth of quota comes back every `window_secs / limit` seconds,
//! so a client can never exceed `limit` requests in any `window_secs`-long window.

use serde::Deserialize;

/// `[rate_limit]`. `Debug` prints `redis_url` without its password.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// `false` turns every policy off (default `true`).
    pub enabled: bool,
    /// Where counters live: `memory` (default, per node) or `redis` (shared by every node).
    pub backend: RateLimitBackend,
    /// Redis URL for `backend = "redis"` (default `redis://127.0.0.1:6379`; `rediss://` for
    /// TLS, `redis://:password@host:port/db` for AUTH).
    pub redis_url: String,
    /// Redis Sentinels that name the master (default none: `redis_url` is the server).
    /// Each is `host:port` or `redis://[:password@]host:port`; as an environment variable, a
    /// comma-separated list. With Sentinels, `redis_url` gives only the master's password,
    /// user and database number, and the node follows the master through failovers.
    pub redis_sentinels: Vec<String>,
    /// The master's name in the Sentinels' configuration (default `mymaster`).
    pub redis_sentinel_master: String,
    /// Prefix of every Redis key (default `aigw:rl:`), so that several deployments can share
    /// one Redis.
    pub redis_key_prefix: String,
    /// Longest wait for Redis per check, connecting included, in milliseconds (default 250).
    /// Past it the node's memory limiter decides.
    pub redis_timeout_ms: u64,
    /// After Redis failed, seconds the node uses its memory limiter before trying Redis again
    /// (default 5).
    pub redis_retry_secs: u64,
    /// IP addresses or CIDR blocks (`10.0.0.0/8`, `::1`) of the reverse proxies whose
    /// forwarded-client header is believed (default none: the socket peer is the client).
    pub trusted_proxies: Vec<String>,
    /// The header that trusted proxies set: `x-forwarded-for` (default) or `forwarded`
    /// (RFC 7239). Only this one is read, so a client cannot smuggle in the other.
    pub forwarded_header: ForwardedHeader,
    /// The policies.
    pub policies: Policies,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            backend: RateLimitBackend::Memory,
            redis_url: "redis://127.0.0.1:6379".to_owned(),
            redis_sentinels: Vec::new(),
            redis_sentinel_master: "mymaster".to_owned(),
            redis_key_prefix: "aigw:rl:".to_owned(),
            redis_timeout_ms: 250,
            redis_retry_secs: 5,
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            policies: Policies::default(),
        }
    }
}

impl RateLimitConfig {
    /// Where the node's Redis is: the URL, or the Sentinels that name its master.
    pub fn redis_endpoint(&self) -> crate::redis_link::RedisEndpoint<'_> {
        crate::redis_link::RedisEndpoint {
            url: &self.redis_url,
            sentinels: &self.redis_sentinels,
            sentinel_master: &self.redis_sentinel_master,
        }
    }
}

impl std::fmt::Debug for RateLimitConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitConfig")
            .field("enabled", &self.enabled)
            .field("backend", &self.backend)
            .field("redis_url", &aigw_domain::redact::redact_url(&self.redis_url))
            .field("redis_sentinels", &self.redis_endpoint().sentinels_for_logs())
            .field("redis_sentinel_master", &self.redis_sentinel_master)
            .field("redis_key_prefix", &self.redis_key_prefix)
            .field("redis_timeout_ms", &self.redis_timeout_ms)
            .field("redis_retry_secs", &self.redis_retry_secs)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("forwarded_header", &self.forwarded_header)
            .field("policies", &self.policies)
            .finish()
    }
}

/// Where the counters live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitBackend {
    /// In the process (the `governor` crate): each node counts on its own.
    #[default]
    Memory,
    /// In Redis, one atomic script per check: limits hold across every node. When Redis
    /// cannot be reached the node falls back to its memory limiter until Redis is back.
    Redis,
}

/// The header a trusted proxy writes the client address into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, HAProxy, most cloud balancers).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client;proto=https, for=proxy1` (RFC 7239).
    Forwarded,
}

/// One policy as configured: at most `limit` requests in any `window_secs` seconds per key.
/// Each field is optional; what is left out keeps the policy's default, so
/// `AIGW__RATE_LIMIT__POLICIES__LOGIN__LIMIT=5` alone is enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// `false` turns just this policy off (default `true`).
    pub enabled: Option<bool>,
    /// Requests allowed per window (>= 1); also the largest burst.
    pub limit: Option<u32>,
    /// Window length in seconds (>= 1).
    pub window_secs: Option<u64>,
}

impl PolicyConfig {
    /// A policy of `limit` requests per `window_secs` seconds.
    pub const fn new(limit: u32, window_secs: u64) -> Self {
        Self { enabled: Some(true), limit: Some(limit), window_secs: Some(window_secs) }
    }

    /// This policy switched off.
    pub const fn off() -> Self {
        Self { enabled: Some(false), limit: None, window_secs: None }
    }
}

/// A policy's effective quota: the configured values over the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyQuota {
    /// Whether the policy is on.
    pub enabled: bool,
    /// Requests allowed per window; also the largest burst.
    pub limit: u32,
    /// Window length in seconds.
    pub window_secs: u64,
}

/// `[rate_limit.policies.*]`. Each value that is not configured keeps its default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policies {
    /// `POST /auth/register`, per client IP (default 10 per 3600 s: a person registers once,
    /// each registration costs an argon2 hash, and mass sign-up is the abuse to stop; shared
    /// NATs still get ten accounts an hour).
    pub register: PolicyConfig,
    /// `POST /auth/login`, per client IP and normalised e-mail (default 10 per 60 s). Checked
    /// before the password, so once limited even the right password is refused and the limit
    /// is no oracle.
    pub login: PolicyConfig,
    /// `POST /auth/refresh`, per client IP (default 60 per 60 s: a client refreshes about once
    /// an hour per session, so this leaves room for many users behind one NAT while bounding
    /// database load; refresh tokens carry 256 random bits, so guessing is not the threat).
    pub refresh: PolicyConfig,
    /// The other account endpoints (`me`, `logout`, `api-keys`), per credential: the user's
    /// session for an access token, the key for an API key (default 120 per 60 s).
    pub account: PolicyConfig,
    /// `POST /ai/chat/completions` and `GET /ai/models`, per API key (default 600 per 60 s,
    /// i.e. 10 per second sustained with a burst of 600).
    pub ai: PolicyConfig,
    /// Failed authentication per client IP: a refused credential, login or refresh (default
    /// 30 per 60 s). Once exhausted, the address is refused before any database or hashing
    /// work, whatever it presents, until a request's worth of quota is back.
    pub auth_failure: PolicyConfig,
    /// `POST /auth/login` per client IP across e-mail addresses (default 30 per 60 s), so one
    /// address rotating e-mails cannot buy unlimited password hashing.
    pub login_ip: PolicyConfig,
    /// `POST /auth/password-reset` per client IP (default 10 per 3600 s).
    pub password_reset: PolicyConfig,
    /// `POST /auth/password-reset` per normalised e-mail address, whether or not an account
    /// has it (default 3 per 3600 s), so nobody can flood one mailbox.
    pub password_reset_email: PolicyConfig,
    /// Messages a user asks for: a new verification link, an e-mail change (default 5 per
    /// 3600 s per user).
    pub email_send: PolicyConfig,
}

/// The built-in quota of `policy` (see the field documentation of [`Policies`]).
pub fn default_quota(policy: super::Policy) -> (u32, u64) {
    use super::Policy;
    match policy {
        Policy::Register => (10, 3600),
        Policy::Login => (10, 60),
        Policy::Refresh => (60, 60),
        Policy::Account => (120, 60),
        Policy::Ai => (600, 60),
        Policy::AuthFailure => (30, 60),
        Policy::LoginIp => (30, 60),
        Policy::PasswordReset => (10, 3600),
        Policy::PasswordResetEmail => (3, 3600),
        Policy::EmailSend => (5, 3600),
    }
}

impl Policies {
    /// The effective quota of `policy`: its configured values over [`default_quota`].
    pub fn get(&self, policy: super::Policy) -> PolicyQuota {
        use super::Policy;
        let configured = match policy {
            Policy::Register => self.register,
            Policy::Login => self.login,
            Policy::Refresh => self.refresh,
            Policy::Account => self.account,
            Policy::Ai => self.ai,
            Policy::AuthFailure => self.auth_failure,
            Policy::LoginIp => self.login_ip,
            Policy::PasswordReset => self.password_reset,
            Policy::PasswordResetEmail => self.password_reset_email,
            Policy::EmailSend => self.email_send,
        };
        let (limit, window_secs) = default_quota(policy);
        PolicyQuota {
            enabled: configured.enabled.unwrap_or(true),
            limit: configured.limit.unwrap_or(limit),
            window_secs: configured.window_secs.unwrap_or(window_secs),
        }
    }
}
