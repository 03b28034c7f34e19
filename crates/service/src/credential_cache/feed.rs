//! The feed tailer: one thread with its own database connection (never waiting behind
//! requests for a pooled one), started and restarted by the supervisor.
//!
//! Every 20 ms it checks whether something was committed: on PostgreSQL it drains the
//! notifications of `LISTEN aigw_credential_changes` (diesel's `notifications_iter`, which does
//! not block: a non-blocking read of the socket), on SQLite it reads `PRAGMA data_version`
//! (a read of the shared WAL index). When something was, or `feed_poll_interval_ms` has passed,
//! it reads the rows after its cursor. It returns on the first database error; the supervisor
//! then starts it again with a fresh connection.

use super::state::Inner;
use aigw_persistence::changes::{self, FeedWatch};
use aigw_persistence::{DbConnection, PersistenceError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the tailer checks for a wake-up.
const TICK: Duration = Duration::from_millis(20);

/// Most rows read per query.
const PAGE: i64 = 1000;

/// How often a node reports its progress when the cursor has not moved.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Tails the feed until `stop` is set (`Ok`) or the database fails (`Err`).
pub(super) fn run(inner: &Inner, stop: &AtomicBool) -> Result<(), PersistenceError> {
    let mut conn = inner.db.pool().session_connection()?;
    let mut watch = FeedWatch::new(&mut conn)?;
    // A node that fell far behind (or never synchronised) reloads its state; rows older than
    // the revocation horizon may have been pruned.
    let far_behind = inner.lag_ms() > horizon_ms(inner) / 2;
    if !inner.synced.load(Ordering::Acquire) || far_behind {
        inner.synced.store(false, Ordering::Release);
        resync(inner, &mut conn)?;
    } else {
        read(inner, &mut conn)?;
    }
    let mut last_read = Instant::now();
    let mut last_report: Option<(i64, Instant)> = None;
    loop {
        // The caches are trusted only once this node is on the node list, so that every
        // revocation committed from then on waits for it (see `propagation`).
        if report_progress(inner, &mut conn, &mut last_report) {
            inner.synced.store(true, Ordering::Release);
        }
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(());
            }
            std::thread::sleep(TICK);
            let woken = watch.woken(&mut conn)?;
            if woken || last_read.elapsed() >= inner.config.poll_interval() {
                break;
            }
        }
        read(inner, &mut conn)?;
        last_read = Instant::now();
    }
}

fn horizon_ms(inner: &Inner) -> u64 {
    u64::try_from(inner.revoked.horizon().num_milliseconds()).unwrap_or(u64::MAX)
}

/// Reads and applies the rows after the cursor. After a stale spell (no read for longer than
/// `max_feed_lag_ms`), nothing cached before it is trusted again: the node starts cold.
fn read(inner: &Inner, conn: &mut DbConnection) -> Result<(), PersistenceError> {
    let was_stale = inner.lag_ms() > inner.config.max_lag().as_millis() as u64;
    loop {
        let after = inner.cursor.load(Ordering::Acquire);
        let rows = changes::changes_after(conn, after, PAGE)?;
        for row in &rows {
            inner.apply(row);
        }
        if let Some(last) = rows.last() {
            // After the rows are applied: an entry loaded at this cursor has seen them.
            inner.cursor.store(last.id, Ordering::Release);
        }
        if rows.len() < PAGE as usize {
            if was_stale {
                inner.start_cold();
                tracing::info!(
                    cursor = inner.cursor.load(Ordering::Acquire),
                    "credential change feed caught up"
                );
            }
            inner.mark_read();
            return Ok(());
        }
    }
}

/// Loads the feed's current end and the sessions revoked within the horizon from one snapshot
/// (`changes::snapshot`), then trusts nothing cached below that end.
fn resync(inner: &Inner, conn: &mut DbConnection) -> Result<(), PersistenceError> {
    let since = aigw_domain::time::now() - inner.revoked.horizon();
    let snapshot = changes::snapshot(conn, since)?;
    let end = snapshot.end;
    inner.revoked.replace(snapshot.revoked_sessions);
    inner.cursor.store(end, Ordering::Release);
    inner.start_cold();
    inner.keys.clear_changes();
    inner.users.clear_changes();
    inner.teams.clear_changes();
    inner.scope_rules.clear_changes();
    inner.mark_read();
    tracing::info!(cursor = end, "credential change feed synchronised");
    Ok(())
}

/// Reports the node's cursor when it moved, or as a heartbeat every [`REPORT_EVERY`]. A failed
/// report is not fatal (SQLite may be busy); it is retried on the next round. Returns whether
/// the node has reported at least once.
fn report_progress(
    inner: &Inner,
    conn: &mut DbConnection,
    last: &mut Option<(i64, Instant)>,
) -> bool {
    let cursor = inner.cursor.load(Ordering::Acquire);
    if last.is_some_and(|(id, at)| id == cursor && at.elapsed() < REPORT_EVERY) {
        return true;
    }
    match changes::report_progress(conn, &inner.node_id, cursor, aigw_domain::time::now()) {
        Ok(()) => *last = Some((cursor, Instant::now())),
        Err(e) => tracing::debug!(error = %e, "reporting change-feed progress failed"),
    }
    last.is_some()
}
