//! Revoked sessions, as each node knows them, so that an access token of a revoked session is
//! refused without a database round trip on every request.
//!
//! Every node keeps the ids of sessions revoked within the last access-token lifetime (plus
//! leeway): older revocations need no entry, since every access token of such a session has
//! expired anyway. The set is bounded by that horizon. Revocations made on this node enter it
//! at once; those made on other nodes arrive by polling the shared database every
//! [`POLL_INTERVAL`] (an indexed range read of `sessions.revoked_at`), so every node refuses
//! them within a second. Polling needs no extra infrastructure and works on SQLite and
//! PostgreSQL alike.

use chrono::{DateTime, Duration, Utc};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// How often each node reads new revocations from the database.
pub const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// How far back each poll reads beyond the previous one, absorbing clock skew between nodes
/// and transactions that committed late.
pub const POLL_OVERLAP_SECS: i64 = 10;

/// The set of recently revoked session ids.
#[derive(Debug, Clone)]
pub struct RevocationCache {
    revoked: Arc<RwLock<HashMap<String, DateTime<Utc>>>>,
    horizon: Duration,
}

impl RevocationCache {
    /// A cache remembering revocations for `horizon_secs` (the longest access-token lifetime
    /// plus leeway).
    pub fn new(horizon_secs: u64) -> Self {
        let secs = i64::try_from(horizon_secs).unwrap_or(i64::MAX / 4);
        Self {
            revoked: Arc::new(RwLock::new(HashMap::new())),
            horizon: Duration::try_seconds(secs).unwrap_or(Duration::MAX),
        }
    }

    /// How far back revocations matter.
    pub fn horizon(&self) -> Duration {
        self.horizon
    }

    /// Whether session `id` is known to be revoked.
    pub fn is_revoked(&self, id: &str) -> bool {
        self.revoked.read().map(|m| m.contains_key(id)).unwrap_or(true)
    }

    /// Records revocations.
    pub fn insert_all(&self, entries: impl IntoIterator<Item = (String, DateTime<Utc>)>) {
        if let Ok(mut map) = self.revoked.write() {
            map.extend(entries);
        }
    }

    /// Forgets revocations older than the horizon before `now`. Returns how many remain.
    pub fn prune(&self, now: DateTime<Utc>) -> usize {
        let cutoff = now - self.horizon;
        match self.revoked.write() {
            Ok(mut map) => {
                map.retain(|_, at| *at >= cutoff);
                map.len()
            }
            Err(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_then_forgets_after_the_horizon() {
        let cache = RevocationCache::new(60);
        let now = Utc::now();
        cache.insert_all([("a".to_owned(), now), ("b".to_owned(), now - Duration::seconds(61))]);
        assert!(cache.is_revoked("a") && cache.is_revoked("b") && !cache.is_revoked("c"));
        assert_eq!(cache.prune(now), 1);
        assert!(!cache.is_revoked("b"));
    }
}
