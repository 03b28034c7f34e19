//! Failovers under load: the database's primary switched over to its standby while two nodes
//! serve budgeted calls (`pg_switchover`), on a PostgreSQL cluster of the test's own
//! (`pg_cluster`); a node killed behind a load balancer while it serves (`node_kill`).

mod node_kill;
mod pg_cluster;
mod pg_switchover;

use crate::common::eventually::eventually;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Waits (at most 30 s) until the callers have had `n` calls served (`ok`, counted by them).
async fn calls_reach(ok: &AtomicUsize, n: usize) {
    eventually("calls served before the fault", Duration::from_secs(30), || async {
        let served = ok.load(Ordering::Relaxed);
        if served >= n {
            Ok(())
        } else {
            Err(served)
        }
    })
    .await;
}
