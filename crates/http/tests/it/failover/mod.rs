//! Failovers under load: the database's primary switched over to its standby while two nodes
//! serve budgeted calls (`pg_switchover`), on a PostgreSQL cluster of the test's own
//! (`pg_cluster`); the Redis master killed and its replica promoted by Sentinel
//! (`redis_sentinel`, on `sentinel_cluster`); a node killed behind a load balancer while it
//! serves (`node_kill`).

mod node_kill;
mod pg_cluster;
mod pg_switchover;
mod redis_sentinel;
mod sentinel_cluster;

use crate::common::eventually::eventually;
use crate::common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The key's spend in the ledger (USD), once its ledger holds `served` requests (at most
/// 20 s: the usage recorder flushes every second).
async fn ledger_spend(app: &TestApp, token: &str, id: &str, served: usize) -> f64 {
    let path = format!("/api/v1/usage?api_key_id={id}");
    let totals = eventually("every served call in the ledger", Duration::from_secs(20), || async {
        let totals = app.get(&path, Auth::Bearer(token)).await.data(200)["totals"].clone();
        if totals["requests"].as_u64() == Some(served as u64) {
            Ok(totals)
        } else {
            Err(totals)
        }
    })
    .await;
    totals["cost_usd"].as_f64().unwrap()
}

/// One answer of a caller: when it came, how long it took, its status.
#[derive(Debug, Clone, Copy)]
struct Answer {
    at: Instant,
    took: Duration,
    status: u16,
}

/// One caller's answers.
type Answers = Vec<Answer>;

/// Calls `node` with `key` (model `priced`) until the budget is spent or `until`, `pause`
/// apart. Every answer is 200, 429 `budget_exceeded` (the last), or 503
/// `service_unavailable` with `Retry-After`; anything else fails the test.
async fn spend(
    node: Arc<TestApp>,
    key: Arc<str>,
    ok: Arc<AtomicUsize>,
    until: Instant,
    pause: Duration,
) -> Answers {
    let mut answers = Vec::new();
    while Instant::now() < until {
        let sent = Instant::now();
        let reply = node.chat(Auth::Bearer(&key), &chat_body("priced", "hi")).await;
        answers.push(Answer { at: Instant::now(), took: sent.elapsed(), status: reply.status });
        match reply.status {
            200 => {
                ok.fetch_add(1, Ordering::Relaxed);
            }
            429 => {
                reply.error(429, "budget_exceeded");
                break;
            }
            503 => {
                reply.error(503, "service_unavailable");
                let retry = reply.header("retry-after").and_then(|v| v.parse::<u64>().ok());
                assert!(retry.is_some_and(|s| s >= 1), "503 without Retry-After: {reply:?}");
                // Real time: the callers back off as a client honouring Retry-After would,
                // but shorter, so that a gap is measured to a tenth of a second.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("unexpected {other} during the failover: {}", reply.text),
        }
        tokio::time::sleep(pause).await;
    }
    answers
}

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
