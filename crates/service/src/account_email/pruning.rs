//! Deletes the single-use account secrets nobody can use any more: account tokens (links),
//! MFA challenges and single sign-on's one-time codes a day after they expired, used or not,
//! and the `state`s of single sign-ons that came back a day ago (a sign-in lasts at most an
//! hour, so a replay of one is refused by its expiry by then). A day's grace keeps a just
//! expired token answering "expired" rather than "unknown" in the logs an operator reads; the
//! answer to the client is the same either way.

use crate::db::Db;
use crate::error::ServiceError;
use aigw_persistence::{account_tokens, mfa, sso};
use std::time::Duration;

/// How long after its end a token or challenge row is kept.
const KEPT_AFTER_END: chrono::Duration = chrono::Duration::days(1);

/// Starts the hourly pruning (the first a minute after start). Stops when the handle is
/// aborted.
pub fn spawn_pruning(db: Db, clock: crate::Clock) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        loop {
            match prune(&db, &clock).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "pruned ended account tokens and challenges"),
                Err(e) => {
                    tracing::warn!(error = %e, "pruning account tokens failed; retrying later")
                }
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    })
}

/// Deletes the account tokens, MFA challenges, one-time codes and single sign-on states that
/// ended more than a day before `clock`'s now; returns how many rows went.
///
/// # Errors
/// [`ServiceError::Unavailable`] when the database is down.
pub async fn prune(db: &Db, clock: &crate::Clock) -> Result<usize, ServiceError> {
    let before = clock.now() - KEPT_AFTER_END;
    db.run(move |conn| {
        let tokens = account_tokens::prune_expired_before(conn, before)?;
        let challenges = mfa::prune_challenges_before(conn, before.naive_utc())?;
        let sign_ins = sso::prune_states(conn, before)? + sso::prune_codes(conn, before)?;
        Ok(tokens + challenges + sign_ins)
    })
    .await
}
