//! `[credential_cache]`: sizes and timings of the credential cache and its change feed.

use serde::Deserialize;
use std::time::Duration;

/// `[credential_cache]` settings (`AIGW__CREDENTIAL_CACHE__…`). Every field has a default.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CredentialCacheConfig {
    /// `false` reads every API key, user and session from the database on every request
    /// (the change feed still runs). Default `true`.
    pub enabled: bool,
    /// Most API keys held, by SHA-256 digest (default 20 000; about 250 bytes each).
    pub api_key_capacity: u64,
    /// Most users held for `GET /auth/me`, by id (default 20 000).
    pub user_capacity: u64,
    /// Longest time a cached API key or user is trusted before it is read again, in seconds
    /// (default 600). The feed invalidates entries as soon as they change; this bounds the
    /// memory of recent changes that the feed keeps.
    pub entry_ttl_secs: u64,
    /// How long an unknown API key digest is remembered as unknown, in seconds (default 5).
    pub negative_ttl_secs: u64,
    /// How often the feed is read when nothing wakes the tailer earlier, in milliseconds
    /// (default 250).
    pub feed_poll_interval_ms: u64,
    /// How long the feed may go unread before the node stops trusting its caches and reads the
    /// database on every request, in milliseconds (default 2000).
    pub max_feed_lag_ms: u64,
    /// How often recorded API key uses are written to `last_used_at`, in seconds (default 5).
    pub last_used_flush_secs: u64,
}

impl Default for CredentialCacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            api_key_capacity: 20_000,
            user_capacity: 20_000,
            entry_ttl_secs: 600,
            negative_ttl_secs: 5,
            feed_poll_interval_ms: 250,
            max_feed_lag_ms: 2000,
            last_used_flush_secs: 5,
        }
    }
}

impl CredentialCacheConfig {
    pub(crate) fn entry_ttl(&self) -> Duration {
        Duration::from_secs(self.entry_ttl_secs.max(1))
    }

    pub(crate) fn negative_ttl(&self) -> Duration {
        Duration::from_secs(self.negative_ttl_secs)
    }

    pub(crate) fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.feed_poll_interval_ms.clamp(10, 10_000))
    }

    pub(crate) fn max_lag(&self) -> Duration {
        Duration::from_millis(self.max_feed_lag_ms.max(100))
    }

    pub(crate) fn flush_interval(&self) -> Duration {
        Duration::from_secs(self.last_used_flush_secs.max(1))
    }
}
