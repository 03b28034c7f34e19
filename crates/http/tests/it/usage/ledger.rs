//! The aggregated ledger: calls are summed in memory and written once per flush interval,
//! exactly, on two nodes at once, with per-request records kept or not.

use crate::common::*;
use aigw_service::usage::config::RequestRecords;
use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

/// Sends `n` echo calls with `key`, `concurrency` at a time, alternately to each of `nodes`;
/// returns how many each node answered 200.
async fn echo_load(nodes: &[&TestApp], key: &str, n: usize, concurrency: usize) -> Vec<u64> {
    let answered: Vec<std::sync::atomic::AtomicU64> =
        nodes.iter().map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
    futures_util::stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let node = nodes[i % nodes.len()];
            let answered = &answered[i % nodes.len()];
            async move {
                let request = node
                    .request(
                        reqwest::Method::POST,
                        "/api/v1/ai/chat/completions",
                        Auth::Bearer(key),
                    )
                    .json(
                        &json!({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}),
                    );
                if node.send(request).await.status == 200 {
                    answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
        .await;
    answered.iter().map(|a| a.load(std::sync::atomic::Ordering::Relaxed)).collect()
}

/// The calls in `GET /usage`'s totals of the user of `token`, once it equals `expected` (or
/// after 30 s), then again two flush intervals later: nothing is counted twice either.
async fn settled_total(app: &TestApp, token: &str, expected: u64) -> (u64, u64) {
    let read = || async {
        let data = app.get("/api/v1/usage", Auth::Bearer(token)).await.data(200);
        data["totals"]["requests"].as_u64().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = read().await;
    while seen != expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = read().await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    (seen, read().await)
}

/// Rows of `usage_records` in the database of `app`.
async fn record_rows(app: &TestApp) -> i64 {
    let url = app.database_url.clone();
    tokio::task::spawn_blocking(move || {
        use diesel::{QueryDsl, RunQueryDsl};
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        aigw_persistence::schema::usage_records::table.count().get_result(&mut conn).unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_calls_on_two_postgres_nodes_are_summed_exactly() {
    // One node keeps per-request records, the other only sums: both count every call once.
    let a = spawn_app_with(Backend::Postgres, |s| {
        s.usage.flush_interval_ms = 100;
        s.rate_limit.enabled = false;
    })
    .await;
    let b = a
        .spawn_sibling(|s| {
            s.usage.flush_interval_ms = 100;
            s.usage.request_records = RequestRecords::None;
            s.rate_limit.enabled = false;
        })
        .await;
    let user = a.new_user("ledger").await;
    let key = a.create_key(&user.token, &["ai_gateway", "read"], None).await;
    let key = key["key"].as_str().unwrap();
    let answered = echo_load(&[&a, &b], key, 10_000, 64).await;
    let total: u64 = answered.iter().sum();
    assert_eq!(total, 10_000, "every call was answered: {answered:?}");
    let (first, later) = settled_total(&a, &user.token, total).await;
    assert_eq!((first, later), (total, total), "the ledger sums every answered call once");
    assert_eq!(
        record_rows(&a).await,
        i64::try_from(answered[0]).unwrap(),
        "records of node a only"
    );
}

backend_tests!(with_records_off_the_sums_stay_exact_and_no_request_is_listed);

async fn with_records_off_the_sums_stay_exact_and_no_request_is_listed(backend: Backend) {
    {
        let app = spawn_app_with(backend, |s| {
            s.usage.flush_interval_ms = 100;
            s.usage.request_records = RequestRecords::None;
            s.rate_limit.enabled = false;
        })
        .await;
        let user = app.new_user("ledger-off").await;
        let key = app.create_key(&user.token, &["ai_gateway", "read"], None).await;
        let answered = echo_load(&[&app], key["key"].as_str().unwrap(), 300, 16).await;
        assert_eq!(answered, [300]);
        assert_eq!(settled_total(&app, &user.token, 300).await, (300, 300), "{backend:?}");
        let page = app.get("/api/v1/usage/requests", Auth::Bearer(&user.token)).await.data(200);
        assert_eq!(page["requests"], json!([]), "{backend:?}: no per-request records");
        assert_eq!(record_rows(&app).await, 0);
        let ready: serde_json::Value = app.get("/readyz", Auth::None).await.json();
        assert_eq!(ready["usage"]["recorded"], json!(300), "{ready}");
        assert!(ready["usage"]["flushes"].as_u64().unwrap() >= 1, "{ready}");
    }
}
