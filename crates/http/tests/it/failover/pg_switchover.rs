//! A planned PostgreSQL switchover while two nodes serve 200 concurrent callers of one
//! budgeted key: the primary stops (fast shutdown, which hands its standby every commit
//! first) and the standby is promoted. The nodes reach the database through one URL naming
//! both servers (libpq tries them in order; aigw asks for a server that accepts writes), so
//! nothing is reconfigured.
//!
//! Checked: every answer is 200, 429 `budget_exceeded`, or 503 `service_unavailable` with
//! `Retry-After`; the 503s fall in the switchover's gap; every call answered 200 is in the
//! ledger on the new primary and the spend stays within the budget; a revocation made after
//! the switchover reaches the other node. The gap, the answers and the spend are printed.

use super::pg_cluster::PgCluster;
use super::{calls_reach, ledger_spend, spend, Answers};
use crate::budgets::{budget_key, cost_of_one_call, priced_providers};
use crate::common::gateway_calls::refused_by;
use crate::common::*;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Concurrent callers.
const CALLERS: usize = 200;
/// Calls the budget allows: enough to last through the switchover.
const BUDGET_CALLS: f64 = 600.0;
/// Calls answered before the switchover starts.
const CALLS_BEFORE: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_switchover_under_load_loses_no_call_and_overspends_nothing() {
    let Some(mut cluster) = PgCluster::new() else { return };
    // Blocking, on this worker thread: the runtime's other worker runs on meanwhile.
    let (primary, standby) = tokio::task::block_in_place(|| {
        let primary = cluster.primary();
        let standby = cluster.standby(&primary);
        (primary, standby)
    });
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/aigw?sslmode=disable",
        primary.port, standby.port
    );
    let node = |s: &mut aigw_http::settings::Settings| {
        priced_providers(s);
        s.database.acquire_timeout_secs = 2;
        s.database.statement_timeout_secs = 2;
        s.database.max_connections = 8;
    };
    let a = Arc::new(spawn_app_at(&url, node).await);
    let b = Arc::new(a.spawn_sibling(node).await);
    let user = a.new_user("switchover").await;
    let cost = cost_of_one_call(&a, &user.token).await;
    let budget = BUDGET_CALLS * cost;
    let made = budget_key(&a, &user.token, budget, "monthly").await;
    let key: Arc<str> = made["key"].as_str().unwrap().into();
    let id = made["id"].as_str().unwrap().to_owned();

    let ok = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(90);
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let node = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(spend(node, key.clone(), ok.clone(), until, Duration::ZERO))
        })
        .collect();
    calls_reach(&ok, CALLS_BEFORE).await;
    let stopped_at = Instant::now();
    let promoted_at = tokio::task::block_in_place(|| {
        cluster.stop(&primary);
        cluster.promote(&standby);
        Instant::now()
    });
    let mut answers: Answers = Vec::new();
    for caller in callers {
        answers.extend(caller.await.unwrap());
    }
    answers.sort_by_key(|a| a.at);

    let ok_calls = answers.iter().filter(|a| a.status == 200).count();
    let unavailable: Vec<Instant> =
        answers.iter().filter(|a| a.status == 503).map(|a| a.at).collect();
    let before = answers.iter().filter(|a| a.status == 200 && a.at < stopped_at).count();
    let back_at = answers
        .iter()
        .find(|a| a.status == 200 && a.at > promoted_at)
        .map(|a| a.at)
        .expect("a call served after the promotion");
    let gap = back_at - stopped_at;
    eprintln!(
        "switchover: {before} calls served before it, gap {:.2} s (promotion done after {:.2} s), \
         {} answers 503 in it, {ok_calls} calls served in all",
        gap.as_secs_f64(),
        (promoted_at - stopped_at).as_secs_f64(),
        unavailable.len(),
    );
    let refused = answers.iter().filter(|a| a.status == 429).count();
    let last = answers.last().map_or(0.0, |a| (a.at - stopped_at).as_secs_f64());
    eprintln!("switchover: {refused} refused by the budget, the last answer {last:.2} s after it");
    assert!(refused > 0, "the budget ran out before the deadline");
    for at in &unavailable {
        assert!(*at >= stopped_at, "a 503 before the switchover");
        assert!(*at <= back_at + Duration::from_secs(5), "a 503 long after the switchover");
    }

    // The ledger, on the new primary, holds every call answered 200, and the spend is within
    // the budget.
    let spent = ledger_spend(&a, &user.token, &id, ok_calls).await;
    eprintln!("switchover: spent {spent:.6} of a {budget:.6} USD budget ({cost:.6} a call)");
    assert!(spent <= budget + 1e-9, "overspent: {spent} of {budget}");
    assert!(ok_calls as f64 >= BUDGET_CALLS - 1.0 - CALLERS as f64, "{ok_calls} calls served");

    // A revocation on one node still reaches the other: its change feed follows the primary.
    a.revoke_key(Auth::Bearer(&user.token), &id).await.data(200);
    refused_by(&b, &key, Duration::from_secs(15)).await;
    drop(b);
    drop(a);
    drop(cluster);
}
