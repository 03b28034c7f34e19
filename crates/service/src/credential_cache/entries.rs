//! A bounded cache (moka) whose entries the change feed invalidates without races.
//!
//! Plain "invalidate on change" loses a race: a request reads a row just before a change
//! commits, the feed applies the change (nothing is cached yet), and then the request inserts
//! the old row, which stays until it expires. So every entry remembers the feed position at
//! which its read *started* (`loaded_at`, the cursor before the read), and the cache remembers,
//! per subject, the id of the newest change the feed has applied. An entry is trusted only if
//! no change of its subject is newer than its `loaded_at`, and `loaded_at` is not below the
//! floor (raised when the node re-synchronises, or on a change kind it does not know). An
//! entry is also dropped after the entry TTL, which bounds how long changes must be remembered.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// A cached value that names the subject its changes are filed under.
pub(crate) trait Subject {
    /// The id that change-feed rows about this value carry (key id, user id).
    fn subject(&self) -> &str;
}

/// One cache entry: the value read from the database (`None`: there was no such row).
#[derive(Debug)]
pub(crate) struct Cached<V> {
    pub(crate) value: Option<V>,
    loaded_at: i64,
    generation: u64,
    loaded: Instant,
}

impl<V> Cached<V> {
    /// A value read while the caches are not trusted, handed to the caller and not cached.
    pub(crate) fn uncached(value: Option<V>) -> Self {
        Self { value, loaded_at: i64::MIN, generation: u64::MAX, loaded: Instant::now() }
    }
}

/// A bounded map from `K` to [`Cached`] values with feed-driven invalidation.
pub(crate) struct Entries<K, V> {
    cache: moka::sync::Cache<K, Arc<Cached<V>>>,
    changes: RwLock<HashMap<String, (i64, Instant)>>,
    ttl: Duration,
    negative_ttl: Duration,
}

impl<K, V> std::fmt::Debug for Entries<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entries")
            .field("entries", &self.cache.entry_count())
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<K, V> Entries<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Subject + Send + Sync + 'static,
{
    /// At most `capacity` entries; values trusted for `ttl`, absences for `negative_ttl`.
    pub(crate) fn new(capacity: u64, ttl: Duration, negative_ttl: Duration) -> Self {
        Self {
            cache: moka::sync::Cache::builder().max_capacity(capacity).time_to_live(ttl).build(),
            changes: RwLock::new(HashMap::new()),
            ttl,
            negative_ttl,
        }
    }

    /// The entry for `key` if it can be trusted: not past its TTL, loaded in the current
    /// `generation` (bumped when the node re-synchronises or recovers from a stale spell) at or
    /// above `floor`, and no change of its subject applied since it was loaded.
    pub(crate) fn get(&self, key: &K, floor: i64, generation: u64) -> Option<Arc<Cached<V>>> {
        let entry = self.cache.get(key)?;
        let ttl = if entry.value.is_some() { self.ttl } else { self.negative_ttl };
        if entry.generation != generation || entry.loaded_at < floor || entry.loaded.elapsed() > ttl
        {
            return None;
        }
        if let Some(value) = &entry.value {
            let changes = self.changes.read().ok()?;
            if changes.get(value.subject()).is_some_and(|(id, _)| *id > entry.loaded_at) {
                return None;
            }
        }
        Some(entry)
    }

    /// Caches `value` for `key`, read from the database after the feed was at `loaded_at` in
    /// `generation` (both read at `loaded`, before the database read started).
    pub(crate) fn insert(
        &self,
        key: K,
        value: Option<V>,
        (loaded_at, generation): (i64, u64),
        loaded: Instant,
    ) -> Arc<Cached<V>> {
        let entry = Arc::new(Cached { value, loaded_at, generation, loaded });
        self.cache.insert(key, entry.clone());
        entry
    }

    /// Drops the entry of `key` (e.g. an absence that is no longer true).
    pub(crate) fn invalidate(&self, key: &K) {
        self.cache.invalidate(key);
    }

    /// Records that change `id` about `subject` has been applied: entries of that subject loaded
    /// before it are no longer trusted.
    pub(crate) fn record_change(&self, subject: &str, id: i64) {
        if let Ok(mut changes) = self.changes.write() {
            let slot = changes.entry(subject.to_owned()).or_insert((id, Instant::now()));
            if slot.0 <= id {
                *slot = (id, Instant::now());
            }
        }
    }

    /// Forgets recorded changes older than the TTL (every entry loaded before them has expired).
    /// Returns how many remain.
    pub(crate) fn prune_changes(&self) -> usize {
        let ttl = self.ttl;
        match self.changes.write() {
            Ok(mut changes) => {
                changes.retain(|_, (_, at)| at.elapsed() <= ttl);
                changes.len()
            }
            Err(_) => 0,
        }
    }

    /// Forgets every recorded change (after a re-synchronisation raised the floor above them).
    pub(crate) fn clear_changes(&self) {
        if let Ok(mut changes) = self.changes.write() {
            changes.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Value(&'static str);

    impl Subject for Value {
        fn subject(&self) -> &str {
            self.0
        }
    }

    fn entries() -> Entries<String, Value> {
        Entries::new(100, Duration::from_secs(60), Duration::from_secs(60))
    }

    #[test]
    fn a_change_after_the_read_started_distrusts_the_entry() {
        let cache = entries();
        let started = Instant::now();
        // The read starts with the feed at 10; change 11 is applied before the insert.
        cache.record_change("k1", 11);
        cache.insert("digest".into(), Some(Value("k1")), (10, 0), started);
        assert!(cache.get(&"digest".to_owned(), 0, 0).is_none(), "stale entry trusted");
        // A read that starts after change 11 was applied is trusted.
        cache.insert("digest".into(), Some(Value("k1")), (11, 0), Instant::now());
        assert!(cache.get(&"digest".to_owned(), 0, 0).is_some());
        // ...until the next change of the same subject.
        cache.record_change("k1", 12);
        assert!(cache.get(&"digest".to_owned(), 0, 0).is_none());
        // Changes of other subjects do not matter.
        cache.insert("digest".into(), Some(Value("k1")), (12, 0), Instant::now());
        cache.record_change("k2", 13);
        assert!(cache.get(&"digest".to_owned(), 0, 0).is_some());
    }

    #[test]
    fn the_floor_the_generation_and_the_ttl_distrust_entries() {
        let cache = entries();
        cache.insert("d".into(), Some(Value("k")), (5, 3), Instant::now());
        assert!(cache.get(&"d".to_owned(), 5, 3).is_some());
        assert!(cache.get(&"d".to_owned(), 6, 3).is_none());
        assert!(cache.get(&"d".to_owned(), 5, 4).is_none(), "entry of an older generation trusted");
        let short: Entries<String, Value> =
            Entries::new(100, Duration::from_secs(60), Duration::from_millis(0));
        // Read 2 ms ago: past a TTL of zero.
        let read_at = Instant::now() - Duration::from_millis(2);
        short.insert("absent".into(), None, (0, 0), read_at);
        assert!(short.get(&"absent".to_owned(), 0, 0).is_none(), "negative entry outlived its TTL");
    }
}
