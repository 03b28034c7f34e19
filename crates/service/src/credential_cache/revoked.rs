//! The sessions known to be revoked, so that an access token of a revoked session is refused
//! without a database round trip.
//!
//! A node keeps the ids of sessions revoked within the last access-token lifetime plus leeway
//! (the horizon): every access token of a session revoked earlier has expired anyway, so the set
//! is bounded by the horizon. It is loaded at start (and after the node was stale) from
//! `sessions.revoked_at`, then kept current by the change feed's `session_revoked` rows.

use chrono::{DateTime, Duration, Utc};
use std::collections::HashMap;
use std::sync::RwLock;

/// The set of recently revoked session ids.
#[derive(Debug)]
pub(crate) struct RevokedSessions {
    revoked: RwLock<HashMap<String, DateTime<Utc>>>,
    horizon: Duration,
}

impl RevokedSessions {
    /// A set remembering revocations for `horizon`.
    pub(crate) fn new(horizon: Duration) -> Self {
        Self { revoked: RwLock::new(HashMap::new()), horizon }
    }

    /// How far back revocations matter.
    pub(crate) fn horizon(&self) -> Duration {
        self.horizon
    }

    /// Whether session `id` is known to be revoked. A poisoned lock answers `true` (refuse).
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.revoked.read().map(|m| m.contains_key(id)).unwrap_or(true)
    }

    /// Records revocations.
    pub(crate) fn insert_all(&self, entries: impl IntoIterator<Item = (String, DateTime<Utc>)>) {
        if let Ok(mut map) = self.revoked.write() {
            map.extend(entries);
        }
    }

    /// Replaces the whole set (after loading it from the database).
    pub(crate) fn replace(&self, entries: impl IntoIterator<Item = (String, DateTime<Utc>)>) {
        if let Ok(mut map) = self.revoked.write() {
            *map = entries.into_iter().collect();
        }
    }

    /// Forgets revocations older than the horizon before `now`. Returns how many remain.
    pub(crate) fn prune(&self, now: DateTime<Utc>) -> usize {
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
        let set = RevokedSessions::new(Duration::seconds(60));
        let now = Utc::now();
        set.insert_all([("a".to_owned(), now), ("b".to_owned(), now - Duration::seconds(61))]);
        assert!(set.contains("a") && set.contains("b") && !set.contains("c"));
        assert_eq!(set.prune(now), 1);
        assert!(!set.contains("b"));
        set.replace([("c".to_owned(), now)]);
        assert!(set.contains("c") && !set.contains("a"));
    }
}
