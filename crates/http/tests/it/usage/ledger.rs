//! The aggregated ledger: calls are summed in memory and written once per flush interval,
//! exactly, on two nodes at once, with per-request records kept or not.

use crate::common::*;
use aigw_service::usage::config::RequestRecords;
use futures_util::StreamExt;
use serde_json::json;
use std::time::Duration;

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

/// The calls in `GET /usage`'s totals of the user of `token` (read on `nodes[0]`) once they
/// equal `expected` (30 s at most), then again once every node has written all it metered
/// (nothing queued or spooled, `expected` calls recorded in all): nothing is counted twice
/// either.
async fn settled_total(nodes: &[&TestApp], token: &str, expected: u64) -> (u64, u64) {
    let read = || async {
        let data = nodes[0].get("/api/v1/usage", Auth::Bearer(token)).await.data(200);
        data["totals"]["requests"].as_u64().unwrap()
    };
    let counted = || async {
        let seen = read().await;
        if seen == expected {
            Ok(seen)
        } else {
            Err(seen)
        }
    };
    let what = format!("GET /usage never counted {expected} calls");
    let seen = eventually(&what, Duration::from_secs(30), counted).await;
    let all_written = || async {
        let mut recorded = 0;
        for node in nodes {
            let usage = node.get("/readyz", Auth::None).await.json()["usage"].take();
            if usage["queued"] != json!(0) || usage["spooled"] != json!(0) {
                return Err(usage);
            }
            recorded += usage["recorded"].as_u64().unwrap();
        }
        if recorded >= expected {
            Ok(())
        } else {
            Err(json!({ "recorded": recorded }))
        }
    };
    eventually("the nodes did not write all they metered", Duration::from_secs(30), all_written)
        .await;
    (seen, read().await)
}

/// Per-request records kept in the database of `app`.
async fn record_rows(app: &TestApp) -> u64 {
    let url = app.database_url.clone();
    tokio::task::spawn_blocking(move || {
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        aigw_persistence::usage_records::count(&mut conn).unwrap()
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
    let (first, later) = settled_total(&[&a, &b], &user.token, total).await;
    assert_eq!((first, later), (total, total), "the ledger sums every answered call once");
    assert_eq!(record_rows(&a).await, answered[0], "records of node a only");
}

backend_tests!(
    with_records_off_the_sums_stay_exact_and_no_request_is_listed,
    a_call_billed_as_interrupted_is_not_counted_again_by_its_own_node,
    records_in_batches_page_newest_first_across_flushes_and_minutes,
);

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
        assert_eq!(settled_total(&[&app], &user.token, 300).await, (300, 300), "{backend:?}");
        let page = app.get("/api/v1/usage/requests", Auth::Bearer(&user.token)).await.data(200);
        assert_eq!(page["requests"], json!([]), "{backend:?}: no per-request records");
        assert_eq!(record_rows(&app).await, 0);
        let ready: serde_json::Value = app.get("/readyz", Auth::None).await.json();
        assert_eq!(ready["usage"]["recorded"], json!(300), "{ready}");
        assert!(ready["usage"]["flushes"].as_u64().unwrap() >= 1, "{ready}");
    }
}

/// A node cut off long enough for another to bill its running call as interrupted, that then
/// records the call itself (it was alive all along), does not count it twice: the other node
/// marked the call's row billed, and the flush that carries the call finds the mark. A call
/// whose row was never written (or already deleted) counts normally, and a flush applied
/// twice counts once.
async fn a_call_billed_as_interrupted_is_not_counted_again_by_its_own_node(backend: Backend) {
    use aigw_domain::ledger::UsageFlush;
    use aigw_domain::usage::{TokenUsage, UsageOutcome, UsageRecord};
    use aigw_persistence::in_flight::CallInFlight;
    let app = spawn_app(backend).await;
    let url = app.database_url.clone();
    tokio::task::spawn_blocking(move || {
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        let now = aigw_domain::time::now();
        // The rows are the app's own node's: its background recovery never bills them, so the
        // only other node here is the test's own calls below.
        let node: String = {
            use aigw_persistence::schema::credential_feed_nodes as n;
            use diesel::{OptionalExtension, QueryDsl, RunQueryDsl};
            let reported = || {
                let found = n::table.select(n::node_id).first(&mut conn).optional().unwrap();
                found.ok_or("no node")
            };
            eventually_blocking("the app's node never reported", Duration::from_secs(10), reported)
        };
        let call = |id: &str| CallInFlight {
            request_id: id.to_owned(),
            node_id: node.clone(),
            api_key_id: "key-1".into(),
            user_id: "user-1".into(),
            model: "m".into(),
            provider: "p".into(),
            endpoint: aigw_domain::usage::Endpoint::Embeddings,
            streamed: true,
            reserved_micros: 500,
            priced: true,
            prompt_tokens: 10,
            completion_tokens: 100,
            started_at: now,
            team_id: None,
            member_id: None,
        };
        let record = |id: &str, outcome: UsageOutcome, cost: u64| UsageRecord {
            request_id: id.to_owned(),
            api_key_id: "key-1".into(),
            user_id: "user-1".into(),
            model: "m".into(),
            provider: "p".into(),
            served_model: None,
            attempts: 1,
            endpoint: aigw_domain::usage::Endpoint::Chat,
            streamed: true,
            outcome,
            tokens: TokenUsage::new(10, 20),
            estimated: false,
            cost_micros: cost,
            priced: true,
            latency_ms: 5,
            started_at: now,
            team_id: None,
            member_id: None,
        };
        let (billed, kept, unwritten) = (
            uuid::Uuid::now_v7().to_string(),
            uuid::Uuid::now_v7().to_string(),
            uuid::Uuid::now_v7().to_string(),
        );
        aigw_persistence::in_flight::insert(&mut conn, &[call(&billed), call(&kept)]).unwrap();
        // A row reads back with its endpoint (billed under it if its node stops).
        let later = now + chrono::Duration::hours(1);
        let rows = aigw_persistence::in_flight::of_stopped_nodes(&mut conn, "", later, 10).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.endpoint == aigw_domain::usage::Endpoint::Embeddings));
        // Another node bills the first call at its reservation (twice: the second finds the
        // mark and bills nothing).
        let interrupted = [record(&billed, UsageOutcome::Interrupted, 500)];
        assert_eq!(
            aigw_persistence::usage::bill_interrupted(&mut conn, &interrupted, true).unwrap(),
            1
        );
        assert_eq!(
            aigw_persistence::usage::bill_interrupted(&mut conn, &interrupted, true).unwrap(),
            0
        );
        // The cut-off node then records all three calls itself.
        let flush = UsageFlush {
            id: uuid::Uuid::now_v7().to_string(),
            rollups: Vec::new(),
            records: Vec::new(),
            tracked: vec![
                record(&billed, UsageOutcome::Ok, 7),
                record(&kept, UsageOutcome::Ok, 7),
                record(&unwritten, UsageOutcome::Ok, 7),
            ],
            keep_records: true,
        };
        let applied = aigw_persistence::usage::apply_flush(&mut conn, &flush).unwrap();
        assert_eq!((applied.calls, applied.already_billed), (2, 1));
        assert!(!aigw_persistence::usage::apply_flush(&mut conn, &flush).unwrap().applied);
        // Three calls in the ledger: one billed at its reservation, two at their cost.
        let spent = aigw_persistence::budgets::ledger_spend_since(
            &mut conn,
            aigw_domain::CounterSubject::Key("key-1"),
            "2000-01-01",
        )
        .unwrap();
        assert_eq!(spent, 500 + 7 + 7);
        let mut outcome = |id: &str| {
            let found =
                aigw_persistence::usage_records::find_record(&mut conn, &"user-1".into(), id);
            found.unwrap().unwrap().outcome
        };
        assert_eq!(outcome(&billed), UsageOutcome::Interrupted);
        assert_eq!(outcome(&kept), UsageOutcome::Ok);
        assert_eq!(aigw_persistence::usage_records::count(&mut conn).unwrap(), 3);
        // No row is left but the mark (pruned with the records), and it reserves nothing.
        let reserved = aigw_persistence::in_flight::reserved_for(
            &mut conn,
            aigw_domain::CounterSubject::Key("key-1"),
        )
        .unwrap();
        assert_eq!(reserved, 0);
    })
    .await
    .unwrap();
}

/// Records are stored in batches per user and minute of their start, and several flushes
/// (and a long call that started minutes before the others) give batches whose times overlap:
/// paging newest first still lists every record once, in order, whatever the page size; a
/// flush applied twice stores its records once; and retention deletes a batch once its
/// newest record is older than the cutoff.
async fn records_in_batches_page_newest_first_across_flushes_and_minutes(backend: Backend) {
    use aigw_domain::ledger::{UsageFlush, UsageRollup, UsageSums};
    use aigw_domain::usage::{TokenUsage, UsageOutcome, UsageRecord};
    use aigw_persistence::usage_records;
    let app = spawn_app(backend).await;
    let url = app.database_url.clone();
    tokio::task::spawn_blocking(move || {
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        // Ten minutes ago, on a whole minute (recent: the app's retention must not delete
        // them meanwhile).
        let now = aigw_domain::time::now().timestamp();
        let base = chrono::DateTime::from_timestamp(now - now.rem_euclid(60) - 600, 0).unwrap();
        let record = |n: i64, user: &str, started_secs: i64| UsageRecord {
            request_id: format!("req-{n:05}"),
            api_key_id: "key-3".into(),
            user_id: user.into(),
            model: "m".into(),
            provider: "p".into(),
            served_model: None,
            attempts: 1,
            endpoint: aigw_domain::usage::Endpoint::Chat,
            streamed: n % 2 == 0,
            outcome: UsageOutcome::Ok,
            tokens: TokenUsage::new(1, 2),
            estimated: false,
            cost_micros: 3,
            priced: true,
            latency_ms: 1,
            // Several records share a start: the request id orders them.
            started_at: base + chrono::TimeDelta::milliseconds(started_secs * 1000 + n % 3),
            team_id: None,
            member_id: None,
        };
        // Twelve flushes, each with calls started over the same three minutes: a minute's
        // batches overlap in time, more of them than one read of batches takes. The last flush
        // also carries a call that started four minutes before the others; another user's
        // records are interleaved and must not be listed.
        let mut all = Vec::new();
        let mut flushes = Vec::new();
        for f in 0..12i64 {
            let mut records: Vec<UsageRecord> = (0..150)
                .map(|i| {
                    let n = f * 1000 + i;
                    let user = if i % 7 == 0 { "user-other" } else { "user-3" };
                    record(n, user, (i * 7 + f * 13) % 150)
                })
                .collect();
            if f == 11 {
                records.push(record(9999, "user-3", -240));
            }
            let mut sums = UsageSums::default();
            records.iter().for_each(|r| sums.add_record(r));
            flushes.push(UsageFlush {
                id: uuid::Uuid::now_v7().to_string(),
                rollups: vec![UsageRollup {
                    key: aigw_domain::ledger::RollupKey::of(&records[1]),
                    sums,
                }],
                records: records.clone(),
                tracked: Vec::new(),
                keep_records: true,
            });
            all.extend(records.into_iter().filter(|r| r.user_id == "user-3"));
        }
        for flush in &flushes {
            assert!(aigw_persistence::usage::apply_flush(&mut conn, flush).unwrap().applied);
            assert!(!aigw_persistence::usage::apply_flush(&mut conn, flush).unwrap().applied);
        }
        assert_eq!(usage_records::count(&mut conn).unwrap(), 12 * 150 + 1);
        all.sort_by(|a, b| (b.started_at, &b.request_id).cmp(&(a.started_at, &a.request_id)));
        for limit in [1, 7, 200] {
            let mut listed = Vec::new();
            let mut after: Option<(chrono::NaiveDateTime, String)> = None;
            loop {
                let page = usage_records::list_records(
                    &mut conn,
                    &"user-3".into(),
                    after.as_ref().map(|(t, id)| (*t, id.as_str())),
                    limit,
                )
                .unwrap();
                let Some(last) = page.last() else { break };
                after = Some((last.started_at.naive_utc(), last.request_id.clone()));
                let short = page.len() < usize::try_from(limit).unwrap();
                listed.extend(page);
                if short {
                    break;
                }
            }
            // Compared whole, but reported by request id (the records are long to print).
            let ids =
                |v: &[UsageRecord]| v.iter().map(|r| r.request_id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(&listed), ids(&all), "pages of {limit}");
            assert!(listed == all, "pages of {limit}: same ids, other fields differ");
        }
        // Retention: the batch of the long call's minute goes; the rest stay.
        let cutoff = (base - chrono::TimeDelta::seconds(60)).naive_utc();
        let pruned = usage_records::prune_before(&mut conn, cutoff, 16).unwrap();
        assert_eq!((pruned.batches, pruned.records), (1, 1));
        assert_eq!(usage_records::count(&mut conn).unwrap(), 12 * 150);
        assert!(usage_records::find_record(&mut conn, &"user-3".into(), "req-09999")
            .unwrap()
            .is_none());
    })
    .await
    .unwrap();
}
