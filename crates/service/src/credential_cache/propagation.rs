//! Waiting until every live node has applied a change, so that a revocation holds on every
//! node by the time it is answered ("at once, on every node").
//!
//! Each node reports its cursor in `credential_feed_nodes` when it moves, and at least every
//! second (a heartbeat). After committing change `id`, the revoking request polls that table
//! every 10 ms until every other node that reported within the last `max_feed_lag_ms` + 1 s
//! has a cursor at or past `id`. A node whose heartbeat does not move for `max_feed_lag_ms`
//! while we wait is counted out: it has not read the feed for that long, so it has stopped
//! trusting its caches by its own rule. The wait never exceeds `max_feed_lag_ms` + 0.5 s; a
//! database error ends it early (the change is committed; nodes still read it within their
//! poll interval). Node clocks are only compared at the scale of seconds, to skip nodes that
//! are long gone.

use super::state::Inner;
use aigw_persistence::changes;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(10);

pub(super) async fn wait(inner: &Inner, change_id: i64) {
    let max_lag = inner.config.max_lag();
    let started = Instant::now();
    let deadline = started + max_lag + Duration::from_millis(500);
    let recent = chrono::Duration::from_std(max_lag + Duration::from_secs(1))
        .unwrap_or(chrono::Duration::seconds(3));
    // Per node: the heartbeat last seen and since when it has not moved.
    let mut heartbeats: HashMap<String, (chrono::DateTime<chrono::Utc>, Instant)> = HashMap::new();
    loop {
        let since = aigw_domain::time::now() - recent;
        let me = inner.node_id.clone();
        let nodes = match inner
            .db
            .run(move |conn| Ok(changes::nodes_reporting_since(conn, since, &me)?))
            .await
        {
            Ok(nodes) => nodes,
            Err(e) => {
                tracing::warn!(error = %e, change_id, "cannot check that other nodes applied a change");
                return;
            }
        };
        let now = Instant::now();
        let waiting: Vec<&str> = nodes
            .iter()
            .filter(|node| node.seen_id < change_id)
            .filter(|node| {
                let seen =
                    heartbeats.entry(node.node_id.clone()).or_insert((node.heartbeat_at, now));
                if seen.0 != node.heartbeat_at {
                    *seen = (node.heartbeat_at, now);
                }
                now.duration_since(seen.1) < max_lag
            })
            .map(|node| node.node_id.as_str())
            .collect();
        if waiting.is_empty() {
            return;
        }
        if now >= deadline {
            tracing::warn!(
                change_id,
                nodes = ?waiting,
                "nodes did not confirm a credential change in time; they stop trusting their caches"
            );
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}
