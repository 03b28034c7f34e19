//! The state every part of the credential cache shares: the cached entries (keys, users,
//! teams' standings, revoked sessions), the feed cursor and the trust markers. The feed tailer,
//! the propagation wait and the supervisor work on it; nothing here knows them.

use super::config::CredentialCacheConfig;
use super::entries::{Entries, Subject};
use super::last_used::LastUsed;
use super::revoked::RevokedSessions;
use crate::db::Db;
use crate::levels::TeamScope;
use crate::views::UserView;
use aigw_domain::{CredentialChangeKind, PermissionSet, TeamId};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::models::{ApiKeyPolicy, ApiKeyRow};
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// An API key as authentication needs it (no name, no digest).
#[derive(Debug)]
pub(crate) struct CachedKey {
    pub(crate) key_id: String,
    pub(crate) user_id: String,
    pub(crate) permissions: PermissionSet,
    pub(crate) expires_at: Option<DateTime<Utc>>,
    pub(crate) revoked: bool,
    /// Set when the digest looked up is the secret a rotation replaced: when it stops working.
    pub(crate) replaced_until: Option<DateTime<Utc>>,
    /// The key's models, budget and rate limits.
    pub(crate) policy: Arc<ApiKeyPolicy>,
    /// The team the key is scoped to.
    pub(crate) team_id: Option<String>,
    /// Whether it is a team key (its creator's account does not matter to it).
    pub(crate) team_owned: bool,
    /// Unix seconds of the last use noted for `last_used_at` by this node (0: none).
    pub(super) last_use_noted: AtomicI64,
}

impl CachedKey {
    /// The key of `row`, as found by digest `digest` (its current or its replaced secret).
    pub(super) fn from_row(row: ApiKeyRow, digest: &str) -> Self {
        let noted = row.last_used_at.map_or(0, |t| t.timestamp());
        let replaced_until = if row.key_hash == digest {
            None
        } else {
            // No expiry stored with a previous digest cannot happen; treat it as expired.
            Some(row.previous_key_expires_at.unwrap_or(DateTime::<Utc>::MIN_UTC))
        };
        Self {
            replaced_until,
            policy: Arc::new(row.policy),
            team_id: row.team_id.map(String::from),
            team_owned: row.team_owned,
            key_id: row.id.to_string(),
            user_id: row.user_id.to_string(),
            permissions: row.permissions,
            expires_at: row.expires_at,
            revoked: row.revoked_at.is_some(),
            last_use_noted: AtomicI64::new(noted),
        }
    }
}

impl Subject for CachedKey {
    fn subject(&self) -> &str {
        &self.key_id
    }
}

/// Where a team-scoped key stands with its team.
#[derive(Debug, Clone)]
pub(crate) enum TeamStanding {
    /// The team and, for a member's key, the membership exist: what the key counts against.
    Active(Arc<TeamScope>),
    /// The key's owner is not a member of the team (now).
    NotMember,
    /// The team was deleted: its keys are revoked.
    Deleted,
}

/// A team-scoped key's standing, cached per team and member.
#[derive(Debug)]
pub(crate) struct CachedTeam {
    pub(super) team_id: String,
    pub(super) standing: TeamStanding,
}

impl Subject for CachedTeam {
    fn subject(&self) -> &str {
        &self.team_id
    }
}

/// The team, if any, whose members must call the gateway with keys scoped to it, of one
/// user: cached per user and distrusted by every `team_changed` row (a team's setting or
/// membership may change it, and such changes are rare), so all are filed under one subject.
#[derive(Debug)]
pub(crate) struct CachedScopeRule {
    pub(super) team_id: Option<TeamId>,
}

/// The subject every [`CachedScopeRule`] is filed under.
pub(super) const ANY_TEAM: &str = "team:*";

impl Subject for CachedScopeRule {
    fn subject(&self) -> &str {
        ANY_TEAM
    }
}

impl Subject for UserView {
    fn subject(&self) -> &str {
        &self.id
    }
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) db: Db,
    pub(super) config: CredentialCacheConfig,
    pub(super) node_id: String,
    /// Reference point of the millisecond clocks below.
    pub(super) epoch: Instant,
    /// Highest feed id applied.
    pub(super) cursor: AtomicI64,
    /// Entries loaded below this feed id are not trusted (raised by a change kind this
    /// version does not know).
    pub(super) floor: AtomicI64,
    /// Entries loaded in an earlier generation are not trusted (bumped when the node
    /// re-synchronises, or catches up after a stale spell).
    pub(super) generation: AtomicU64,
    /// Milliseconds after `epoch` of the last successful feed read.
    pub(super) last_read_ms: AtomicU64,
    /// Whether the revoked-session set and the cursor have been loaded.
    pub(super) synced: AtomicBool,
    pub(super) keys: Entries<String, CachedKey>,
    pub(super) users: Entries<String, UserView>,
    /// Team scopes by `team id/member user id` (`team id/` for a team key).
    pub(super) teams: Entries<String, CachedTeam>,
    /// The team requiring scoped keys of each user, by user id.
    pub(super) scope_rules: Entries<String, CachedScopeRule>,
    pub(super) revoked: RevokedSessions,
    pub(super) last_used: LastUsed,
    /// `auth.refresh_reuse_grace_secs`, for sweeping sealed refresh successors.
    pub(super) refresh_grace_secs: u64,
}

impl Inner {
    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn lag_ms(&self) -> u64 {
        self.now_ms().saturating_sub(self.last_read_ms.load(Ordering::Acquire))
    }

    /// The floor and the generation entries are checked against.
    pub(super) fn validity(&self) -> (i64, u64) {
        (self.floor.load(Ordering::Acquire), self.generation.load(Ordering::Acquire))
    }

    /// Where a database read that starts now stands: the cursor and the generation.
    pub(super) fn position(&self) -> (i64, u64) {
        (self.cursor.load(Ordering::Acquire), self.generation.load(Ordering::Acquire))
    }

    /// Distrusts every entry loaded so far.
    pub(super) fn start_cold(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn mark_read(&self) {
        self.last_read_ms.store(self.now_ms(), Ordering::Release);
    }

    /// Applies one feed row to the caches.
    pub(super) fn apply(&self, change: &ChangeRow) {
        match change.kind {
            Some(CredentialChangeKind::SessionRevoked) => {
                self.revoked.insert_all([(change.subject_id.clone(), change.created_at)]);
            }
            Some(kind) if kind.is_api_key() => {
                self.keys.record_change(&change.subject_id, change.id)
            }
            Some(CredentialChangeKind::UserChanged) => {
                self.users.record_change(&change.subject_id, change.id);
            }
            Some(CredentialChangeKind::TeamChanged) => {
                self.teams.record_change(&change.subject_id, change.id);
                self.scope_rules.record_change(ANY_TEAM, change.id);
            }
            // A kind added by a newer version: trust nothing cached before it.
            _ => {
                self.floor.fetch_max(change.id, Ordering::AcqRel);
            }
        }
    }
}
