//! The credential change feed (`credential_changes`) and each node's progress through it
//! (`credential_feed_nodes`).
//!
//! Writers call [`append_change`] as the **last** statements of the transaction that makes the
//! change, so the row commits (or rolls back) with it. Readers tail the table by `id`, never by
//! time: [`changes_after`] returns the rows after a cursor, in order.
//!
//! Tailing by id is only sound if ids become visible in order: a reader that has seen id 11
//! must never later find id 10. SQLite serialises writers, so that holds by itself. On
//! PostgreSQL a sequence hands out ids at insert time but transactions commit in any order, so
//! [`append_change`] first takes a transaction-level advisory lock: the next appender gets its
//! id only after the previous appending transaction has committed and released the lock. The
//! lock is taken after every row lock of the transaction (hence "last statements"), so it can
//! never be part of a deadlock cycle. It also sends `NOTIFY aigw_credential_changes`, delivered
//! at commit, which wakes the nodes that `LISTEN` (see [`LISTEN_CHANNEL`]).

use crate::error::PersistenceError;
use crate::models::{from_utc, to_utc};
use crate::pool::DbConnection;
use crate::schema::{credential_changes, credential_feed_nodes};
use aigw_domain::CredentialChangeKind;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;

/// The PostgreSQL channel notified at the commit of every appending transaction.
pub const LISTEN_CHANNEL: &str = "aigw_credential_changes";

/// Advisory-lock key serialising feed appends on PostgreSQL ("aigwfeed" in ASCII, less the
/// top bit).
const APPEND_LOCK_KEY: i64 = 0x6169_6777_6665_6564;

/// One row of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRow {
    /// Position in the feed; strictly increasing in commit order.
    pub id: i64,
    /// What changed; `None` for a kind this version does not know (written by a newer one).
    pub kind: Option<CredentialChangeKind>,
    /// The session, API key or user id the change is about.
    pub subject_id: String,
    /// When the change was made, UTC (informational: nothing orders by it).
    pub created_at: DateTime<Utc>,
}

/// A node's progress through the feed, as it last reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeProgress {
    /// The node's random id (one per process start).
    pub node_id: String,
    /// The highest feed id the node has applied.
    pub seen_id: i64,
    /// When the node last reported, by its own clock, UTC.
    pub heartbeat_at: DateTime<Utc>,
}

#[derive(Insertable)]
#[diesel(table_name = credential_changes)]
struct NewChange<'a> {
    kind: &'a str,
    subject_id: &'a str,
    created_at: NaiveDateTime,
}

/// Appends a change about `subject_id` at `now` and returns its id. Call it inside the
/// transaction that makes the change, as its last statements (see the module docs).
///
/// # Errors
/// On database failure (the caller's transaction then rolls back, change included).
pub fn append_change(
    conn: &mut DbConnection,
    kind: CredentialChangeKind,
    subject_id: &str,
    now: DateTime<Utc>,
) -> Result<i64, PersistenceError> {
    if let DbConnection::Postgres(pg) = conn {
        pg.batch_execute(&format!("SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})"))?;
    }
    let id = diesel::insert_into(credential_changes::table)
        .values(NewChange { kind: kind.as_str(), subject_id, created_at: from_utc(now) })
        .returning(credential_changes::id)
        .get_result::<i64>(conn)?;
    if let DbConnection::Postgres(pg) = conn {
        pg.batch_execute(&format!("NOTIFY {LISTEN_CHANNEL}"))?;
    }
    Ok(id)
}

/// Up to `limit` rows with an id above `after`, in id order.
///
/// # Errors
/// On database failure (including a missing table).
pub fn changes_after(
    conn: &mut DbConnection,
    after: i64,
    limit: i64,
) -> Result<Vec<ChangeRow>, PersistenceError> {
    let rows = credential_changes::table
        .filter(credential_changes::id.gt(after))
        .order(credential_changes::id.asc())
        .limit(limit)
        .select((
            credential_changes::id,
            credential_changes::kind,
            credential_changes::subject_id,
            credential_changes::created_at,
        ))
        .load::<(i64, String, String, NaiveDateTime)>(conn)?;
    Ok(rows
        .into_iter()
        .map(|(id, kind, subject_id, created_at)| ChangeRow {
            id,
            kind: kind.parse().ok(),
            subject_id,
            created_at: to_utc(created_at),
        })
        .collect())
}

/// The highest id in the feed, 0 when it is empty.
///
/// # Errors
/// On database failure.
pub fn max_change_id(conn: &mut DbConnection) -> Result<i64, PersistenceError> {
    Ok(credential_changes::table
        .select(diesel::dsl::max(credential_changes::id))
        .first::<Option<i64>>(conn)?
        .unwrap_or(0))
}

/// Deletes the rows made before `before` (UTC). Returns how many were deleted.
///
/// # Errors
/// On database failure.
pub fn prune_changes_before(
    conn: &mut DbConnection,
    before: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    Ok(diesel::delete(
        credential_changes::table.filter(credential_changes::created_at.lt(from_utc(before))),
    )
    .execute(conn)?)
}

/// Records that node `node_id` has applied the feed up to `seen_id`, at `now` by its clock.
///
/// # Errors
/// On database failure.
pub fn report_progress(
    conn: &mut DbConnection,
    node_id: &str,
    seen_id: i64,
    now: DateTime<Utc>,
) -> Result<(), PersistenceError> {
    let at = from_utc(now);
    // Only the node itself writes its row, so update-then-insert cannot race (diesel's
    // `ON CONFLICT` is not available over the two-backend connection).
    let updated = diesel::update(credential_feed_nodes::table.find(node_id))
        .set((
            credential_feed_nodes::seen_id.eq(seen_id),
            credential_feed_nodes::heartbeat_at.eq(at),
        ))
        .execute(conn)?;
    if updated == 0 {
        diesel::insert_into(credential_feed_nodes::table)
            .values((
                credential_feed_nodes::node_id.eq(node_id),
                credential_feed_nodes::seen_id.eq(seen_id),
                credential_feed_nodes::heartbeat_at.eq(at),
            ))
            .execute(conn)?;
    }
    Ok(())
}

/// The nodes that reported at or after `since` (UTC), except `except` (the caller).
///
/// # Errors
/// On database failure.
pub fn nodes_reporting_since(
    conn: &mut DbConnection,
    since: DateTime<Utc>,
    except: &str,
) -> Result<Vec<NodeProgress>, PersistenceError> {
    Ok(credential_feed_nodes::table
        .filter(credential_feed_nodes::heartbeat_at.ge(from_utc(since)))
        .filter(credential_feed_nodes::node_id.ne(except))
        .select((
            credential_feed_nodes::node_id,
            credential_feed_nodes::seen_id,
            credential_feed_nodes::heartbeat_at,
        ))
        .load::<(String, i64, NaiveDateTime)>(conn)?
        .into_iter()
        .map(|(node_id, seen_id, at)| NodeProgress { node_id, seen_id, heartbeat_at: to_utc(at) })
        .collect())
}

/// Forgets node `node_id` (at shutdown) and every node that has not reported since `before`.
///
/// # Errors
/// On database failure.
pub fn forget_nodes(
    conn: &mut DbConnection,
    node_id: Option<&str>,
    before: DateTime<Utc>,
) -> Result<usize, PersistenceError> {
    let mut n = diesel::delete(
        credential_feed_nodes::table
            .filter(credential_feed_nodes::heartbeat_at.lt(from_utc(before))),
    )
    .execute(conn)?;
    if let Some(id) = node_id {
        n += diesel::delete(credential_feed_nodes::table.find(id)).execute(conn)?;
    }
    Ok(n)
}

/// What a node loads before it tails the feed: see [`snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedSnapshot {
    /// The feed's highest id when the snapshot was taken (0 when empty).
    pub end: i64,
    /// Sessions revoked at or after the requested time: id and revocation time, UTC.
    pub revoked_sessions: Vec<(String, DateTime<Utc>)>,
}

/// The feed's current end and the sessions revoked at or after `revoked_since` (UTC), read
/// from one snapshot so that no revocation falls between them: REPEATABLE READ on PostgreSQL,
/// a read transaction (one snapshot in WAL mode) on SQLite. A node starts tailing from the end.
///
/// # Errors
/// On database failure.
pub fn snapshot(
    conn: &mut DbConnection,
    revoked_since: DateTime<Utc>,
) -> Result<FeedSnapshot, PersistenceError> {
    crate::pool::transaction(conn, |c| {
        if let DbConnection::Postgres(pg) = c {
            // Must be the transaction's first statement.
            pg.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        }
        let end = max_change_id(c)?;
        let revoked_sessions = crate::sessions::revoked_since(c, revoked_since)?;
        Ok(FeedSnapshot { end, revoked_sessions })
    })
}

/// Tells a feed tailer, cheaply and without blocking, whether anything may have been appended
/// since it last asked. PostgreSQL: `LISTEN` on [`LISTEN_CHANNEL`], then drain the pending
/// notifications (diesel's `notifications_iter` reads the socket without blocking). SQLite:
/// `PRAGMA data_version`, which changes when another connection commits (a read of the
/// shared WAL index, no I/O).
#[derive(Debug)]
pub struct FeedWatch {
    data_version: i64,
}

impl FeedWatch {
    /// Prepares `conn`, a connection kept for the tailer alone: `LISTEN` on PostgreSQL; on
    /// SQLite a `busy_timeout` of 200 ms, so that a progress report never holds the tailer long.
    ///
    /// # Errors
    /// On database failure.
    pub fn new(conn: &mut DbConnection) -> Result<Self, PersistenceError> {
        match conn {
            DbConnection::Postgres(pg) => {
                pg.batch_execute(&format!("LISTEN {LISTEN_CHANNEL}"))?;
                Ok(Self { data_version: 0 })
            }
            DbConnection::Sqlite(lite) => {
                lite.batch_execute("PRAGMA busy_timeout = 200")?;
                Ok(Self { data_version: sqlite_data_version(lite)? })
            }
        }
    }

    /// Whether something may have been committed since the last call.
    ///
    /// # Errors
    /// On database failure (a broken connection).
    pub fn woken(&mut self, conn: &mut DbConnection) -> Result<bool, PersistenceError> {
        match conn {
            DbConnection::Postgres(pg) => {
                let mut any = false;
                for notification in pg.notifications_iter() {
                    notification?;
                    any = true;
                }
                Ok(any)
            }
            DbConnection::Sqlite(lite) => {
                let now = sqlite_data_version(lite)?;
                Ok(std::mem::replace(&mut self.data_version, now) != now)
            }
        }
    }
}

fn sqlite_data_version(conn: &mut diesel::SqliteConnection) -> Result<i64, PersistenceError> {
    #[derive(QueryableByName)]
    struct Version {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        data_version: i64,
    }
    Ok(diesel::sql_query("PRAGMA data_version").get_result::<Version>(conn)?.data_version)
}
