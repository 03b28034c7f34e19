//! Credentials at proxy speed: the change feed, the caches it invalidates, and their
//! supervisor. [`CredentialCache`] is the one entry
//! point.
//!
//! - **Change feed.** Every write that other nodes must see appends a row to
//!   `credential_changes` in its own transaction (`aigw_persistence::changes`). A tailer thread
//!   with its own connection reads the rows after its cursor, by id, every
//!   `feed_poll_interval_ms` (250 ms), and sooner when woken: by `LISTEN/NOTIFY` on
//!   PostgreSQL, by `PRAGMA data_version` on SQLite (both checked every 20 ms).
//! - **Caches.** API keys by SHA-256 digest, users by id (for `GET /auth/me`), and the set of
//!   sessions revoked within the access-token lifetime. A hit costs no database work. An
//!   entry is trusted only while no newer feed row concerns it (see `entries`).
//! - **Staleness.** When the feed has not been read for more than `max_feed_lag_ms` (2 s),
//!   the node trusts none of its caches and reads the database on every request, revoked
//!   sessions included, until the tailer catches up. It never serves a credential that a
//!   newer feed row would refuse.
//! - **Propagation.** A revocation answers only once every live node has applied it (each
//!   node reports its cursor in `credential_feed_nodes`), or after `max_feed_lag_ms` + 0.5 s
//!   at most, by which time a node that has not applied it has stopped trusting its caches.
//!   So a revoked key or session is refused "at once, on every node".
//! - **`last_used_at`** is noted in memory and written in batches (`last_used`).
//! - **Supervision.** The tailer is restarted when it fails or panics; its lag is reported
//!   by [`CredentialCache::health`] (and `/readyz`). Maintenance prunes old feed rows, old
//!   revocations and expired sealed refresh successors.

mod config;
mod entries;
mod feed;
mod last_used;
mod propagation;
mod revoked;
mod state;
mod supervisor;

pub use config::CredentialCacheConfig;
use state::Inner;
pub(crate) use state::{CachedKey, CachedScopeRule, CachedTeam, TeamStanding};
pub use supervisor::BackgroundTasks;

use crate::db::Db;
use crate::error::ServiceError;
use crate::levels::TeamScope;
use crate::views::UserView;
use aigw_domain::{CredentialChangeKind, SessionId, TeamId, UserId};
use aigw_persistence::changes::{self, ChangeRow};
use aigw_persistence::{api_keys, sessions, teams, users, DbConnection};
use chrono::{DateTime, Utc};
use entries::Entries;
use last_used::LastUsed;
use revoked::RevokedSessions;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A cache entry for one API key digest (`value` is `None` for an unknown digest).
pub(crate) type KeyEntry = Arc<entries::Cached<CachedKey>>;

/// Appends a change about `subject_id` to the feed, inside the caller's transaction and as one
/// of its last statements (see `aigw_persistence::changes`), and returns the row to hand to
/// `ServiceContext::publish` once the transaction has committed.
///
/// # Errors
/// On database failure (the transaction then rolls back, change included).
pub(crate) fn append(
    conn: &mut DbConnection,
    kind: CredentialChangeKind,
    subject_id: &str,
    now: DateTime<Utc>,
) -> Result<ChangeRow, ServiceError> {
    let id = changes::append_change(conn, kind, subject_id, now)?;
    Ok(ChangeRow { id, kind: Some(kind), subject_id: subject_id.to_owned(), created_at: now })
}

/// How current this node's view of the change feed is (for `/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedHealth {
    /// Whether the caches are trusted: the feed was read within `max_feed_lag_ms`.
    pub fresh: bool,
    /// Milliseconds since the last successful read of the feed (since start when none yet).
    pub lag_ms: u64,
    /// The highest feed id applied.
    pub cursor: i64,
}

/// The node's credential caches and the change feed that keeps them true. Cloning is cheap.
#[derive(Debug, Clone)]
pub struct CredentialCache {
    inner: Arc<Inner>,
}

impl CredentialCache {
    /// This node's id in the change feed (a UUIDv7 drawn at start): the node whose heartbeat
    /// `credential_feed_nodes` records while it runs.
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// A cache over `db`. Revocations are remembered for `revocation_horizon` (the longest
    /// access-token lifetime plus leeway); sealed refresh successors are swept once
    /// `refresh_grace_secs` have passed. Nothing runs until [`CredentialCache::start`]: until
    /// then every lookup reads the database.
    pub fn new(
        db: Db,
        config: CredentialCacheConfig,
        revocation_horizon: chrono::Duration,
        refresh_grace_secs: u64,
    ) -> Self {
        let keys = Entries::new(config.api_key_capacity, config.entry_ttl(), config.negative_ttl());
        let users = Entries::new(config.user_capacity, config.entry_ttl(), config.negative_ttl());
        let teams = Entries::new(config.user_capacity, config.entry_ttl(), config.negative_ttl());
        let scope_rules =
            Entries::new(config.user_capacity, config.entry_ttl(), config.negative_ttl());
        Self {
            inner: Arc::new(Inner {
                db,
                node_id: uuid::Uuid::now_v7().to_string(),
                epoch: Instant::now(),
                cursor: AtomicI64::new(0),
                floor: AtomicI64::new(0),
                generation: AtomicU64::new(0),
                last_read_ms: AtomicU64::new(0),
                synced: AtomicBool::new(false),
                keys,
                users,
                teams,
                scope_rules,
                revoked: RevokedSessions::new(revocation_horizon),
                last_used: LastUsed::default(),
                refresh_grace_secs,
                config,
            }),
        }
    }

    /// Starts the supervised background work (feed tailer, `last_used_at` writer, pruning).
    /// Call once, inside a tokio runtime. The work stops when the returned handle is shut down
    /// or dropped.
    pub fn start(&self) -> BackgroundTasks {
        supervisor::start(self.inner.clone())
    }

    /// How current the node's view of the feed is.
    pub fn health(&self) -> FeedHealth {
        let inner = &self.inner;
        let lag_ms = inner.lag_ms();
        FeedHealth {
            fresh: inner.synced.load(Ordering::Acquire)
                && lag_ms <= inner.config.max_lag().as_millis() as u64,
            lag_ms,
            cursor: inner.cursor.load(Ordering::Acquire),
        }
    }

    /// Whether cached entries may be used now.
    fn trusted(&self) -> bool {
        self.inner.config.enabled && self.health().fresh
    }

    /// The API key with SHA-256 digest `digest` (its `value` is `None`: no such key). Served
    /// from the cache while it is trusted, else read from the database (and cached).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is needed and down.
    pub(crate) async fn api_key(&self, digest: &str) -> Result<KeyEntry, ServiceError> {
        let inner = &self.inner;
        let (floor, generation) = inner.validity();
        if self.trusted() {
            if let Some(entry) = inner.keys.get(&digest.to_owned(), floor, generation) {
                return Ok(entry);
            }
        }
        // Only what is read while the caches are trusted is cached: an entry read before the
        // node synchronised (or while it was stale) could predate a change it never applied.
        let trusted = self.trusted();
        let (loaded_at, loaded) = (inner.position(), Instant::now());
        let wanted = digest.to_owned();
        let row = inner.db.run(move |conn| Ok(api_keys::find_by_hash(conn, &wanted)?)).await?;
        let value = row.map(|row| CachedKey::from_row(row, digest));
        Ok(if trusted {
            inner.keys.insert(digest.to_owned(), value, loaded_at, loaded)
        } else {
            Arc::new(entries::Cached::uncached(value))
        })
    }

    /// The user with id `id` (`None`: no such account), from the cache while it is trusted.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is needed and down.
    pub(crate) async fn user(&self, id: &str) -> Result<Option<UserView>, ServiceError> {
        let inner = &self.inner;
        let (floor, generation) = inner.validity();
        if self.trusted() {
            if let Some(entry) = inner.users.get(&id.to_owned(), floor, generation) {
                return Ok(entry.value.clone());
            }
        }
        let trusted = self.trusted();
        let (loaded_at, loaded) = (inner.position(), Instant::now());
        let wanted = UserId::from(id);
        let row = inner.db.run(move |conn| Ok(users::find_by_id(conn, &wanted)?)).await?;
        let view = row.as_ref().map(UserView::from);
        if trusted {
            inner.users.insert(id.to_owned(), view.clone(), loaded_at, loaded);
        }
        Ok(view)
    }

    /// Where a key scoped to team `team_id` stands: what it counts against (the team's limits
    /// and, for a key of `member`, `None` for a team key, the member's budget), or that its
    /// owner is not a member, or that the team is deleted. From the cache while it is trusted
    /// (a change of the team or its membership is a `team_changed` row of the feed).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is needed and down.
    pub(crate) async fn team_standing(
        &self,
        team_id: &str,
        member: Option<&str>,
    ) -> Result<TeamStanding, ServiceError> {
        let inner = &self.inner;
        let key = format!("{team_id}/{}", member.unwrap_or_default());
        let (floor, generation) = inner.validity();
        if self.trusted() {
            if let Some(entry) = inner.teams.get(&key, floor, generation) {
                if let Some(cached) = &entry.value {
                    return Ok(cached.standing.clone());
                }
            }
        }
        let trusted = self.trusted();
        let (loaded_at, loaded) = (inner.position(), Instant::now());
        let (team, user) = (TeamId::from(team_id), member.map(UserId::from));
        let standing = inner
            .db
            .run(move |conn| {
                let Some(row) = teams::find(conn, &team)? else {
                    return Ok(TeamStanding::Deleted);
                };
                let membership = match &user {
                    Some(user) => match teams::member(conn, &team, user)? {
                        Some(m) => Some(m),
                        None => return Ok(TeamStanding::NotMember),
                    },
                    None => None,
                };
                Ok(TeamStanding::Active(Arc::new(TeamScope::new(row, membership.as_ref()))))
            })
            .await?;
        if trusted {
            let value = CachedTeam { team_id: team_id.to_owned(), standing: standing.clone() };
            inner.teams.insert(key, Some(value), loaded_at, loaded);
        }
        Ok(standing)
    }

    /// The first team (by id) of user `user_id` whose members must call the gateway with keys
    /// scoped to it, if any. From the cache while it is trusted (every `team_changed` row of
    /// the feed distrusts every user's entry).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is needed and down.
    pub(crate) async fn team_requiring_scoped_keys(
        &self,
        user_id: &str,
    ) -> Result<Option<TeamId>, ServiceError> {
        let inner = &self.inner;
        let (floor, generation) = inner.validity();
        if self.trusted() {
            if let Some(entry) = inner.scope_rules.get(&user_id.to_owned(), floor, generation) {
                if let Some(rule) = &entry.value {
                    return Ok(rule.team_id.clone());
                }
            }
        }
        let trusted = self.trusted();
        let (loaded_at, loaded) = (inner.position(), Instant::now());
        let wanted = UserId::from(user_id);
        let team_id =
            inner.db.run(move |conn| Ok(teams::requiring_scoped_keys(conn, &wanted)?)).await?;
        if trusted {
            let rule = CachedScopeRule { team_id: team_id.clone() };
            inner.scope_rules.insert(user_id.to_owned(), Some(rule), loaded_at, loaded);
        }
        Ok(team_id)
    }

    /// Whether session `id` is revoked: from the revoked-session set while the feed is
    /// fresh, else (also) from the database.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is needed and down.
    pub(crate) async fn session_revoked(&self, id: &str) -> Result<bool, ServiceError> {
        if self.inner.revoked.contains(id) {
            return Ok(true);
        }
        if self.health().fresh {
            return Ok(false);
        }
        let wanted = SessionId::from(id);
        self.inner.db.run(move |conn| Ok(sessions::is_revoked(conn, &wanted)?)).await
    }

    /// Makes changes this node has just committed hold here at once, then waits until every
    /// live node has applied them (bounded; see `propagation`).
    pub(crate) async fn publish(&self, changes: Vec<ChangeRow>) {
        self.applied_locally(&changes);
        if let Some(newest) = changes.iter().map(|c| c.id).max() {
            self.propagated(newest).await;
        }
    }

    /// Refuses access tokens whose session is revoked: from the node's revoked-session set
    /// while the change feed is fresh, else from the database.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] (revoked) for an ended session;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub(crate) async fn ensure_session_live(&self, session_id: &str) -> Result<(), ServiceError> {
        if self.session_revoked(session_id).await? {
            Err(ServiceError::revoked_credential("the session has ended; log in again"))
        } else {
            Ok(())
        }
    }

    /// Applies changes this node has just committed (their feed ids known), so that the node
    /// itself refuses the credentials at once.
    pub(crate) fn applied_locally(&self, changes: &[ChangeRow]) {
        for change in changes {
            self.inner.apply(change);
        }
    }

    /// Waits until every live node has applied feed row `change_id` (see `propagation`).
    pub(crate) async fn propagated(&self, change_id: i64) {
        propagation::wait(&self.inner, change_id).await;
    }

    /// A key with digest `digest` was just created on this node: forget that it was unknown.
    /// (No other node can hold such an absence: the key's secret was unknown to everyone
    /// until now, so nobody can have presented it.)
    pub(crate) fn key_created(&self, digest: &str) {
        self.inner.keys.invalidate(&digest.to_owned());
    }

    /// Notes a successful use of `key` at `now` for `last_used_at` (at most once a minute per
    /// key and node; written by the background flush).
    pub(crate) fn note_key_use(&self, key: &CachedKey, now: DateTime<Utc>) {
        let secs = now.timestamp();
        let previous = key.last_use_noted.load(Ordering::Relaxed);
        if secs - previous >= last_used::RESOLUTION_SECS
            && key
                .last_use_noted
                .compare_exchange(previous, secs, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.inner.last_used.record(&key.key_id, now);
        }
    }

    /// The use of key `key_id` noted on this node and not yet written, if any (so that the
    /// node's key list is never behind its own requests).
    pub(crate) fn pending_use(&self, key_id: &str) -> Option<DateTime<Utc>> {
        self.inner.last_used.pending(key_id)
    }
}
