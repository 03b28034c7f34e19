//! Retention of raw usage records: a supervised task deletes records older than
//! `usage.retention_days`, in bounded batches so it never holds a long write lock, then the
//! ids of flushes applied and the calls in flight billed before then, and the owners of
//! stored responses recorded before then (`response_owners`: the providers' own retention of
//! stored responses is 30 days by default). Daily rollups are kept for ever (they are small
//! and are what usage queries read).

use super::supervisor::supervise;
use crate::db::Db;
use crate::Clock;
use chrono::Duration as Days;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Batches of records deleted per statement (each at most
/// [`aigw_persistence::usage_records::BATCH_RECORDS`] records).
const PRUNE_BATCH: i64 = 16;
/// Pause between two batches, leaving room for other writers.
const PAUSE_BETWEEN_BATCHES: Duration = Duration::from_millis(20);
/// Delay before the first sweep after start.
const FIRST_SWEEP_AFTER: Duration = Duration::from_secs(1);

/// Starts the retention task: a sweep shortly after start, then every `interval`.
pub(crate) fn spawn(
    db: Db,
    retention_days: u32,
    interval: Duration,
    restarts: Arc<AtomicU64>,
    clock: Clock,
) -> JoinHandle<()> {
    supervise("usage retention", restarts, move || {
        let (db, clock) = (db.clone(), clock.clone());
        async move {
            tokio::time::sleep(FIRST_SWEEP_AFTER).await;
            loop {
                match sweep(&db, retention_days, clock.now()).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(deleted = n, retention_days, "pruned old usage records")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "pruning usage records failed; retrying later")
                    }
                }
                tokio::time::sleep(interval.max(Duration::from_secs(1))).await;
            }
        }
    })
}

/// Deletes every record older than `retention_days` before `now` (a batch once its newest
/// record is), a few batches per statement. Returns how many records.
///
/// # Errors
/// [`crate::ServiceError`] when the database fails (what was deleted stays deleted).
pub(crate) async fn sweep(
    db: &Db,
    retention_days: u32,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<u64, crate::ServiceError> {
    let cutoff = (now - Days::days(i64::from(retention_days.max(1)))).naive_utc();
    let mut total = 0;
    loop {
        let pruned = db
            .run(move |conn| {
                Ok(aigw_persistence::usage_records::prune_before(conn, cutoff, PRUNE_BATCH)?)
            })
            .await?;
        total += pruned.records;
        if i64::try_from(pruned.batches).unwrap_or(0) < PRUNE_BATCH {
            db.run(move |conn| Ok(aigw_persistence::usage::prune_flushes_before(conn, cutoff)?))
                .await?;
            prune_response_owners(db, cutoff).await?;
            return Ok(total);
        }
        tokio::time::sleep(PAUSE_BETWEEN_BATCHES).await;
    }
}

/// Owners of stored responses removed per statement.
const OWNERS_PER_STATEMENT: i64 = 1000;

/// Deletes the owners of stored responses recorded before `cutoff` (UTC), a bounded number
/// per statement.
///
/// # Errors
/// [`crate::ServiceError`] when the database fails (what was deleted stays deleted).
async fn prune_response_owners(
    db: &Db,
    cutoff: chrono::NaiveDateTime,
) -> Result<(), crate::ServiceError> {
    use aigw_persistence::response_owners::prune_before;
    loop {
        let removed =
            db.run(move |conn| Ok(prune_before(conn, cutoff, OWNERS_PER_STATEMENT)?)).await?;
        if i64::try_from(removed).unwrap_or(0) < OWNERS_PER_STATEMENT {
            return Ok(());
        }
        tokio::time::sleep(PAUSE_BETWEEN_BATCHES).await;
    }
}
