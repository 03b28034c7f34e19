//! The supervised background work of the credential cache:
//!
//! - the feed tailer (`feed`), on its own thread, restarted with a growing pause
//!   (100 ms doubling up to 2 s) whenever it returns an error or panics;
//! - maintenance, every `last_used_flush_secs`: writing noted `last_used_at` uses; and once a
//!   minute: forgetting revocations and recorded changes past their horizon, pruning feed rows
//!   older than the revocation horizon and nodes silent for an hour, and erasing sealed refresh
//!   successors whose grace window has passed. A failed or panicking round is logged and the
//!   next one runs as planned.
//!
//! Everything stops when [`BackgroundTasks::shutdown`] is awaited (which also writes the last
//! noted uses and removes the node from `credential_feed_nodes`) or when the handle, or the
//! runtime that runs the tasks, is dropped.

use super::feed;
use super::state::Inner;
use aigw_persistence::{changes, sessions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sets the flag when dropped: the tailer thread outlives no owner of this guard.
#[derive(Debug)]
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The running background work; see the module docs.
#[derive(Debug)]
pub struct BackgroundTasks {
    inner: Arc<Inner>,
    stop: StopOnDrop,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl BackgroundTasks {
    /// Stops the tailer and maintenance, writes the `last_used_at` uses noted so far and
    /// removes this node from the feed's node list (so revocations stop waiting for it).
    pub async fn shutdown(self) {
        self.stop.0.store(true, Ordering::Release);
        for task in &self.tasks {
            task.abort();
        }
        let inner = &self.inner;
        if let Err(e) = inner.last_used.flush(&inner.db).await {
            tracing::warn!(error = %e, "writing last_used_at at shutdown failed");
        }
        let node = inner.node_id.clone();
        let now = aigw_domain::time::now();
        let forgotten = inner
            .db
            .run(move |conn| {
                Ok(changes::forget_nodes(conn, Some(&node), now - chrono::Duration::hours(1))?)
            })
            .await;
        if let Err(e) = forgotten {
            tracing::debug!(error = %e, "removing the node from the feed's node list failed");
        }
    }
}

impl Drop for BackgroundTasks {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

pub(super) fn start(inner: Arc<Inner>) -> BackgroundTasks {
    let stop = Arc::new(AtomicBool::new(false));
    let tailer = tokio::spawn(supervise_tailer(inner.clone(), StopOnDrop(stop.clone())));
    let maintenance = tokio::spawn(maintain(inner.clone()));
    BackgroundTasks { inner, stop: StopOnDrop(stop), tasks: vec![tailer, maintenance] }
}

/// Runs the tailer on its own thread and starts it again after a failure or a panic.
async fn supervise_tailer(inner: Arc<Inner>, stop: StopOnDrop) {
    let mut pause = Duration::from_millis(100);
    loop {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let (thread_inner, flag) = (inner.clone(), stop.0.clone());
        let spawned = std::thread::Builder::new().name("aigw-feed".to_owned()).spawn(move || {
            let _ = done_tx.send(feed::run(&thread_inner, &flag));
        });
        let outcome = match spawned {
            // The sender is dropped unsent when the thread panics.
            Ok(_) => done_rx.await.map_err(|_| "the feed tailer panicked".to_owned()),
            Err(e) => Err(format!("cannot start the feed tailer thread: {e}")),
        };
        match outcome {
            Ok(Ok(())) => return,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, lag_ms = inner.lag_ms(), "credential change feed failed; restarting");
            }
            Err(e) => {
                tracing::error!(error = %e, lag_ms = inner.lag_ms(), "restarting the feed tailer")
            }
        }
        if stop.0.load(Ordering::Acquire) {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Maintenance rounds; a round that panics is logged and the next one runs.
async fn maintain(inner: Arc<Inner>) {
    let flush = inner.config.flush_interval();
    let mut rounds: u64 = 0;
    let every_minute = (60 / flush.as_secs().max(1)).max(1);
    loop {
        tokio::time::sleep(flush).await;
        rounds += 1;
        let round =
            tokio::spawn(maintenance_round(inner.clone(), rounds.is_multiple_of(every_minute)));
        if let Err(e) = round.await {
            tracing::error!(error = %e, "credential cache maintenance panicked");
        }
    }
}

async fn maintenance_round(inner: Arc<Inner>, minutely: bool) {
    if let Err(e) = inner.last_used.flush(&inner.db).await {
        tracing::warn!(error = %e, "writing last_used_at failed; retrying at the next flush");
    }
    if !minutely {
        return;
    }
    let now = aigw_domain::time::now();
    inner.revoked.prune(now);
    inner.keys.prune_changes();
    inner.users.prune_changes();
    inner.teams.prune_changes();
    inner.scope_rules.prune_changes();
    let feed_before = now - inner.revoked.horizon();
    let grace = i64::try_from(inner.refresh_grace_secs).unwrap_or(i64::MAX / 4);
    let sealed_before = now - chrono::Duration::seconds(grace.saturating_add(1));
    let swept = inner
        .db
        .run(move |conn| {
            let feed = changes::prune_changes_before(conn, feed_before)?;
            let nodes = changes::forget_nodes(conn, None, now - chrono::Duration::hours(1))?;
            let sealed = sessions::clear_sealed_before(conn, sealed_before)?;
            Ok((feed, nodes, sealed))
        })
        .await;
    match swept {
        Ok((feed, nodes, sealed)) if feed + nodes + sealed > 0 => {
            tracing::debug!(feed, nodes, sealed, "credential cache maintenance");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "credential cache maintenance failed"),
    }
}
