//! The usage API: validation, who may read what, paging, retention.

use super::*;
use aigw_domain::usage::{TokenUsage, UsageOutcome, UsageRecord};

backend_tests!(
    usage_parameters_are_validated_naming_the_field,
    usage_is_read_with_read_and_only_ones_own,
    requests_are_paged_newest_first,
    old_records_are_pruned_and_rollups_kept,
    usage_is_exported_as_csv,
    the_demo_model_shows_money,
    calls_count_on_the_day_of_the_settings_clock,
);

fn today() -> chrono::NaiveDate {
    chrono::Utc::now().date_naive()
}

fn day(d: chrono::NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

/// Makes `n` echo calls with `key` one after the other; returns their request ids in order.
async fn echo_calls(app: &TestApp, key: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let reply = app.chat(Auth::Bearer(key), &chat_body("echo", &format!("call {i}"))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        ids.push(reply.header("x-request-id").unwrap().to_owned());
    }
    ids
}

async fn usage_parameters_are_validated_naming_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("usage-params").await;
    let auth = Auth::Bearer(&user.token);
    // Defaults: the last 30 days, grouped by day; nothing recorded yet.
    let data = app.get("/api/v1/usage", auth).await.data(200);
    assert_eq!(data["to"], json!(day(today())));
    assert_eq!(data["from"], json!(day(today() - chrono::Duration::days(29))));
    assert_eq!(data["group_by"], json!("day"));
    assert_eq!(data["rows"], json!([]));
    assert_eq!(data["totals"]["requests"], json!(0));
    assert_eq!(data["totals"]["cost_usd"], json!(0.0));
    assert_eq!(data["totals"]["priced"], json!(true));
    let cases = [
        ("/api/v1/usage?from=2026-13-01", "from"),
        ("/api/v1/usage?from=yesterday", "from"),
        ("/api/v1/usage?to=2026-1-1", "to"),
        ("/api/v1/usage?from=2026-02-01&to=2026-01-31", "from"),
        ("/api/v1/usage?from=2025-01-01&to=2026-01-02", "from"),
        ("/api/v1/usage?group_by=week", "group_by"),
        ("/api/v1/usage?groupby=day", "groupby"),
        ("/api/v1/usage?from=2026-01-01&from=2026-01-02", "from"),
        ("/api/v1/usage/requests?limit=0", "limit"),
        ("/api/v1/usage/requests?limit=201", "limit"),
        ("/api/v1/usage/requests?limit=ten", "limit"),
        ("/api/v1/usage/requests?cursor=not-a-cursor", "cursor"),
        ("/api/v1/usage/requests?page=2", "page"),
    ];
    for (path, field) in cases {
        app.get(path, auth).await.invalid(field);
    }
    // 366 days is the longest range.
    let data = app.get("/api/v1/usage?from=2025-01-01&to=2026-01-01", auth).await.data(200);
    assert_eq!(data["from"], json!("2025-01-01"));
    let data = app.get("/api/v1/usage/requests?limit=200", auth).await.data(200);
    assert_eq!(data, json!({"requests": [], "next_cursor": null}));
}

async fn usage_is_read_with_read_and_only_ones_own(backend: Backend) {
    let app = spawn_app(backend).await;
    let ann = app.new_user("usage-ann").await;
    let made = app.create_key(&ann.token, &["ai_gateway", "read"], None).await;
    let (key, key_id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    let ai_only = app.key(&ann.token, &["ai_gateway"]).await;
    let ids = echo_calls(&app, key, 2).await;
    echo_calls(&app, &ai_only, 1).await;
    wait_for_records(&app, Auth::Bearer(&ann.token), 3).await;
    // Access token and a key with `read` see the user's usage (all their keys).
    for auth in [Auth::Bearer(&ann.token), Auth::Bearer(key)] {
        let data = app.get("/api/v1/usage?group_by=api_key", auth).await.data(200);
        assert_eq!(data["rows"].as_array().unwrap().len(), 2, "{data}");
        assert_eq!(data["totals"]["requests"], json!(3));
        assert_eq!(all_records(&app, auth).await.len(), 3);
    }
    let one =
        app.get(&format!("/api/v1/usage?api_key_id={key_id}"), Auth::Bearer(key)).await.data(200);
    assert_eq!(one["totals"]["requests"], json!(2), "{one}");
    // Without `read`: 403; without a credential: 401.
    app.get("/api/v1/usage", Auth::Bearer(&ai_only)).await.forbidden("read", "ai_gateway");
    app.get("/api/v1/usage/requests", Auth::Bearer(&ai_only)).await.forbidden("read", "ai_gateway");
    app.get("/api/v1/usage", Auth::None).await.unauthorized();
    // Another user sees none of it, even naming Ann's key.
    let bob = app.new_user("usage-bob").await;
    let data = app
        .get(&format!("/api/v1/usage?api_key_id={key_id}"), Auth::Bearer(&bob.token))
        .await
        .data(200);
    assert_eq!(data["rows"], json!([]));
    assert!(all_records(&app, Auth::Bearer(&bob.token)).await.is_empty());
    // The ledger is history: a deleted key's usage stays.
    app.delete_key(Auth::Bearer(&ann.token), key_id).await.data(200);
    let data = app.get("/api/v1/usage?group_by=api_key", Auth::Bearer(&ann.token)).await.data(200);
    let row =
        data["rows"].as_array().unwrap().iter().find(|r| r["api_key_id"] == json!(key_id)).cloned();
    assert_eq!(row.map(|r| r["requests"].clone()), Some(json!(2)), "{data}");
    let records = all_records(&app, Auth::Bearer(&ann.token)).await;
    for id in &ids {
        assert!(records.iter().any(|r| r["request_id"] == json!(id)));
    }
}

async fn requests_are_paged_newest_first(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("usage-pages").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let ids = echo_calls(&app, &key, 5).await;
    let auth = Auth::Bearer(&user.token);
    wait_for_records(&app, auth, 5).await;
    let mut seen = Vec::new();
    let mut path = "/api/v1/usage/requests?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let data = app.get(&path, auth).await.data(200);
        pages += 1;
        let page = data["requests"].as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|r| r["request_id"].as_str().unwrap().to_owned()));
        match data["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/v1/usage/requests?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let newest_first: Vec<String> = ids.into_iter().rev().collect();
    assert_eq!(seen, newest_first);
}

/// Records older than `retention_days` go; the daily rollups that counted them stay.
async fn old_records_are_pruned_and_rollups_kept(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.usage.retention_days = 2;
        s.usage.prune_interval_secs = 1;
    })
    .await;
    let user = app.new_user("usage-retention").await;
    let made = app.create_key(&user.token, &["ai_gateway"], None).await;
    let key_id = made["id"].as_str().unwrap().to_owned();
    let old_day = today() - chrono::Duration::days(5);
    let old = UsageRecord {
        request_id: uuid::Uuid::now_v7().to_string(),
        api_key_id: key_id.as_str().into(),
        user_id: user.id.as_str().into(),
        model: "echo".into(),
        provider: "echo".into(),
        served_model: None,
        attempts: 1,
        endpoint: aigw_domain::usage::Endpoint::Chat,
        streamed: false,
        outcome: UsageOutcome::Ok,
        tokens: TokenUsage::new(5, 6),
        estimated: false,
        cost_micros: 0,
        priced: false,
        latency_ms: 1,
        started_at: old_day.and_hms_opt(12, 0, 0).unwrap().and_utc(),
        team_id: None,
        member_id: None,
    };
    let url = app.database_url.clone();
    let old_id = old.request_id.clone();
    tokio::task::spawn_blocking(move || {
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        use aigw_domain::ledger::{RollupKey, UsageFlush, UsageRollup, UsageSums};
        let flush = |records: &[UsageRecord], keep: Vec<UsageRecord>| {
            let mut sums = UsageSums::default();
            records.iter().for_each(|r| sums.add_record(r));
            UsageFlush {
                id: uuid::Uuid::now_v7().to_string(),
                rollups: vec![UsageRollup { key: RollupKey::of(&records[0]), sums }],
                records: keep,
                tracked: Vec::new(),
                keep_records: true,
            }
        };
        let apply = |conn: &mut aigw_persistence::DbConnection, f: &UsageFlush| {
            aigw_persistence::usage::apply_flush(conn, f).unwrap()
        };
        let first = flush(std::slice::from_ref(&old), vec![old.clone()]);
        assert_eq!(apply(&mut conn, &first).calls, 1);
        // A flush applied again (a replay of the spool) counts nothing twice.
        assert!(!apply(&mut conn, &first).applied);
        // More old records, in more than one batch of the old day; the rollups count them.
        let new_record = || {
            let mut other = old.clone();
            other.request_id = uuid::Uuid::now_v7().to_string();
            other.tokens = TokenUsage::new(1, 1);
            other.started_at += chrono::Duration::minutes(5);
            other
        };
        let new: Vec<UsageRecord> = std::iter::repeat_with(new_record).take(32).collect();
        let second = flush(&new, new.clone());
        assert_eq!(apply(&mut conn, &second).calls, 32);
        assert_eq!(apply(&mut conn, &second).calls, 0, "replayed");
    })
    .await
    .unwrap();
    let fresh = echo_calls(&app, made["key"].as_str().unwrap(), 1).await;
    let auth = Auth::Bearer(&user.token);
    let pruned = || async {
        let records = all_records(&app, auth).await;
        let ids: Vec<String> =
            records.iter().map(|r| r["request_id"].as_str().unwrap().to_owned()).collect();
        if ids == [fresh[0].as_str()] {
            Ok(())
        } else {
            Err(ids)
        }
    };
    let what = format!("the old record was not pruned (old {old_id})");
    eventually(&what, Duration::from_secs(30), pruned).await;
    let path = format!("/api/v1/usage?from={}&to={}", day(old_day), day(old_day));
    let data = app.get(&path, auth).await.data(200);
    assert_eq!(data["rows"][0]["day"], json!(day(old_day)), "{data}");
    assert_eq!(data["totals"]["requests"], json!(33));
    assert_eq!(data["totals"]["total_tokens"], json!(11 + 32 * 2));
}

/// Seeds `n` records of `key_id` (of `user_id`) directly into the ledger, one a second from
/// an hour ago, in one flush; returns their request ids, oldest first.
async fn seed_records(app: &TestApp, user_id: &str, key_id: &str, n: usize) -> Vec<String> {
    let start = chrono::Utc::now() - chrono::Duration::hours(1);
    let records: Vec<UsageRecord> = (0..n)
        .map(|i| UsageRecord {
            request_id: uuid::Uuid::now_v7().to_string(),
            api_key_id: key_id.into(),
            user_id: user_id.into(),
            model: "-model".into(),
            provider: "echo".into(),
            served_model: None,
            attempts: 1,
            endpoint: aigw_domain::usage::Endpoint::Chat,
            streamed: false,
            outcome: UsageOutcome::Ok,
            tokens: TokenUsage::new(5, 6),
            estimated: false,
            cost_micros: 11,
            priced: true,
            latency_ms: 1,
            started_at: start + chrono::Duration::seconds(i64::try_from(i).unwrap()),
            team_id: None,
            member_id: None,
        })
        .collect();
    let ids = records.iter().map(|r| r.request_id.clone()).collect();
    let url = app.database_url.clone();
    tokio::task::spawn_blocking(move || {
        use aigw_domain::ledger::{RollupKey, UsageFlush, UsageRollup, UsageSums};
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        let mut sums = UsageSums::default();
        records.iter().for_each(|r| sums.add_record(r));
        let flush = UsageFlush {
            id: uuid::Uuid::now_v7().to_string(),
            rollups: vec![UsageRollup { key: RollupKey::of(&records[0]), sums }],
            records,
            tracked: Vec::new(),
            keep_records: true,
        };
        aigw_persistence::usage::apply_flush(&mut conn, &flush).unwrap();
    })
    .await
    .unwrap();
    ids
}

/// `GET /usage/requests/export` streams every record as CSV, newest first, across chunks of
/// 1000; `GET /usage/export` writes the summary's rows with the key's name, a name that a
/// spreadsheet would run as a formula defused.
async fn usage_is_exported_as_csv(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("usage-csv").await;
    let auth = Auth::Bearer(&user.token);
    let body = json!({"name": "=HYPERLINK(\"http://x\")", "permissions": ["ai_gateway"]});
    let made = app.create_key_raw(auth, &body).await.data(201);
    let key_id = made["id"].as_str().unwrap().to_owned();
    let ids = seed_records(&app, &user.id, &key_id, 2_500).await;
    let export = app.get("/api/v1/usage/requests/export", auth).await;
    assert_eq!(export.status, 200, "{}", export.text);
    assert_eq!(export.header("content-type"), Some("text/csv; charset=utf-8"));
    let disposition = export.header("content-disposition").unwrap_or_default();
    assert!(disposition.starts_with("attachment") && disposition.contains(".csv"), "{disposition}");
    let mut reader = csv::Reader::from_reader(export.text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_owned).collect();
    assert_eq!(header[..3], ["started_at", "request_id", "api_key_id"], "{header:?}");
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let exported: Vec<String> = rows.iter().map(|r| r[1].to_owned()).collect();
    let newest_first: Vec<String> = ids.into_iter().rev().collect();
    assert_eq!(exported, newest_first, "every record once, newest first");
    let model = header.iter().position(|h| h == "model").unwrap();
    assert_eq!(&rows[0][model], "'-model", "a cell that starts with - is defused");
    app.get("/api/v1/usage/requests/export?limit=5", auth).await.invalid("limit");
    let summary = app.get("/api/v1/usage/export?group_by=api_key", auth).await;
    assert_eq!(summary.status, 200, "{}", summary.text);
    let mut reader = csv::Reader::from_reader(summary.text.as_bytes());
    let header = reader.headers().unwrap().clone();
    assert_eq!(&header[0], "api_key_id");
    let row = reader.records().next().unwrap().unwrap();
    assert_eq!(&row[0], key_id.as_str());
    assert_eq!(&row[1], "'=HYPERLINK(\"http://x\")", "{row:?}");
    assert_eq!(&row[2], made["key_prefix"].as_str().unwrap());
    assert_eq!(&row[header.iter().position(|h| h == "requests").unwrap()], "2500");
    app.get("/api/v1/usage/export?group_by=week", auth).await.invalid("group_by");
}

/// The built-in `demo-priced` model (`gateway.demo_model`): offline like `echo`, but priced, so
/// that a setup without a provider shows spend, and budgets refuse it.
async fn the_demo_model_shows_money(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.gateway.demo_model = true).await;
    let user = app.new_user("usage-demo").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let listed = app.get("/api/v1/ai/models", Auth::Bearer(&key)).await;
    let models: Value = serde_json::from_str(&listed.text).unwrap();
    let ids: Vec<&str> =
        models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert!(ids.contains(&"demo-priced") && ids.contains(&"echo"), "{ids:?}");
    let body = json!({"model": "demo-priced", "max_tokens": 5,
                      "messages": [{"role": "user", "content": "what does this cost?"}]});
    let answered = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(answered.status, 200, "{}", answered.text);
    let records = wait_for_records(&app, Auth::Bearer(&user.token), 1).await;
    let record = &records[0];
    assert_eq!((&record["model"], &record["priced"]), (&json!("demo-priced"), &json!(true)));
    assert!(record["cost_usd"].as_f64().unwrap() > 0.0, "{record}");
    let made = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "tiny", "permissions": ["ai_gateway"], "max_budget_usd": 0.00005}),
        )
        .await
        .data(201);
    let refused = app.chat(Auth::Bearer(made["key"].as_str().unwrap()), &body).await;
    assert_eq!(refused.error(429, "budget_exceeded")["details"]["scope"], "key");
}

/// A call is dated, and usage is read, by the settings' clock, as budgets and rate windows
/// are: with the clock three days ahead, the call counts on that day and "today" is that day;
/// the system's today has nothing.
async fn calls_count_on_the_day_of_the_settings_clock(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |_| {}).await;
    advance(&clock, 3 * 86_400_000);
    let ahead = clock.now().date_naive();
    let user = app.new_user("usage-clock").await;
    let auth = Auth::Bearer(&user.token);
    let key = app.key(&user.token, &["ai_gateway"]).await;
    echo_calls(&app, &key, 1).await;
    let records = wait_for_records(&app, auth, 1).await;
    assert_eq!(records[0]["started_at"].as_str().map(|t| &t[..10]), Some(day(ahead).as_str()));
    let data = app.get("/api/v1/usage?group_by=day", auth).await.data(200);
    assert_eq!(data["to"], json!(day(ahead)), "{data}");
    assert_eq!(data["totals"]["requests"], json!(1), "{data}");
    let system_today = format!("/api/v1/usage?from={0}&to={0}", day(today()));
    let data = app.get(&system_today, auth).await.data(200);
    assert_eq!(data["totals"]["requests"], json!(0), "{data}");
}
