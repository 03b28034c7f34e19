//! The ledger keeps the endpoint of every call and the token kinds nested in its counts
//! (cached and cache-write prompt tokens, reasoning tokens): per request, in the daily
//! rollups after a flush, grouped and filtered by endpoint; records stored before they were
//! kept read as `chat` with zeros.

use super::*;
use crate::common::upstream::{FakeUpstream, CACHED_USAGE};
use std::collections::BTreeMap;

backend_tests!(
    cached_and_reasoning_tokens_are_recorded_priced_and_grouped_by_endpoint,
    a_batch_stored_before_endpoints_were_kept_reads_as_chat,
);

/// `up-cached`'s price: 1000 USD per million prompt tokens, 100 per million cached ones,
/// 2000 per million completion tokens.
const CACHED_PRICE: PriceConfig = PriceConfig {
    input_per_million: 1000.0,
    output_per_million: 2000.0,
    image_tokens: None,
    cached_input_per_million: Some(100.0),
    cache_write_per_million: None,
};

/// A node whose provider serves the chat model `up-cached` ([`CACHED_PRICE`]) and the
/// embeddings model `emb-bill` (1000 USD per million input tokens), keeping per-request
/// records.
async fn app_with_kinds(backend: Backend, upstream: &str) -> TestApp {
    let base = upstream.to_owned();
    spawn_app_with(backend, move |s| {
        let emb = PriceConfig { input_per_million: 1000.0, ..PriceConfig::default() };
        s.providers = vec![ProviderConfig {
            name: "fake".into(),
            kind: ProviderKind::Openai,
            base_url: Some(base),
            api_key: Some(secrecy::SecretString::from("sk-provider".to_owned())),
            models: vec!["up-cached".into(), "emb-bill".into()],
            tokenizers: BTreeMap::new(),
            prices: BTreeMap::from([
                ("up-cached".to_owned(), CACHED_PRICE),
                ("emb-bill".to_owned(), emb),
            ]),
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 50;
        s.usage.request_records = aigw_service::usage::config::RequestRecords::Database;
    })
    .await
}

/// `(group value, requests, cached_tokens, reasoning_tokens)` of each row of `data`.
fn endpoint_rows(data: &Value) -> Vec<(String, u64, u64, u64)> {
    let n = |row: &Value, k: &str| row[k].as_u64().unwrap();
    data["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let group = row["endpoint"].as_str().unwrap().to_owned();
            (group, n(row, "requests"), n(row, "cached_tokens"), n(row, "reasoning_tokens"))
        })
        .collect()
}

async fn cached_and_reasoning_tokens_are_recorded_priced_and_grouped_by_endpoint(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let app = app_with_kinds(backend, &upstream.base_url).await;
    let user = app.new_user("kinds").await;
    let key = app.key(&user.token, &["ai_gateway", "read"]).await;
    let chat = app.chat(Auth::Bearer(&key), &chat_body("up-cached", "hello")).await;
    assert_eq!(chat.status, 200, "{}", chat.text);
    let body = json!({"model": "emb-bill", "input": "hello"});
    let embedded = app.post("/api/v1/ai/embeddings", Auth::Bearer(&key), &body).await;
    assert_eq!(embedded.status, 200, "{}", embedded.text);

    let auth = Auth::Bearer(&user.token);
    let records = wait_for_records(&app, auth, 2).await;
    let (prompt, cached, completion, reasoning) = CACHED_USAGE;
    let chat_record = the_record(&app, auth, chat.header("x-request-id").unwrap()).await;
    assert_eq!(chat_record["endpoint"], json!("chat"), "{chat_record}");
    for (kind, n) in [
        ("prompt_tokens", prompt),
        ("cached_tokens", cached),
        ("cache_write_tokens", 0),
        ("completion_tokens", completion),
        ("reasoning_tokens", reasoning),
        ("total_tokens", prompt + completion),
    ] {
        assert_eq!(chat_record[kind], json!(n), "{kind}: {chat_record}");
    }
    // Uncached prompt tokens at the input price, cached ones at theirs, output (reasoning
    // included) at the output price: each token counted once.
    let chat_micros = (prompt - cached) * 1000 + cached * 100 + completion * 2000;
    assert_eq!(chat_record["cost_usd"], json!(chat_micros as f64 / 1e6), "{chat_record}");
    let emb_record = records.iter().find(|r| r["endpoint"] == json!("embeddings")).unwrap();
    assert_eq!(emb_record["model"], json!("emb-bill"));
    assert_eq!(
        (emb_record["prompt_tokens"].as_u64(), emb_record["cached_tokens"].as_u64()),
        (Some(5), Some(0))
    );

    // The daily rollups (what GET /usage reads) hold the kinds once flushed, by endpoint.
    let data = app.get("/api/v1/usage?group_by=endpoint", auth).await.data(200);
    assert_eq!(data["group_by"], json!("endpoint"));
    assert_eq!(
        endpoint_rows(&data),
        [("chat".to_owned(), 1, cached, reasoning), ("embeddings".to_owned(), 1, 0, 0)],
        "{data}"
    );
    let totals = &data["totals"];
    assert_eq!(totals["requests"], json!(2), "{data}");
    assert_eq!(
        (totals["cached_tokens"].as_u64(), totals["reasoning_tokens"].as_u64()),
        (Some(cached), Some(reasoning))
    );
    assert_eq!(totals["cost_usd"], json!((chat_micros + 5 * 1000) as f64 / 1e6), "{data}");
    // Grouped by day, both endpoints are one row; filtered, one endpoint's calls only.
    let by_day = app.get("/api/v1/usage", auth).await.data(200);
    assert_eq!(by_day["rows"].as_array().unwrap().len(), 1, "{by_day}");
    assert_eq!(by_day["rows"][0]["requests"], json!(2), "{by_day}");
    // The rows themselves: one per endpoint, the kinds in their columns.
    let url = app.database_url.clone();
    let stored = tokio::task::spawn_blocking(move || {
        use aigw_persistence::schema::usage_daily as d;
        use diesel::{QueryDsl, RunQueryDsl};
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        d::table
            .order(d::endpoint)
            .select((d::endpoint, d::requests, d::cached_tokens, d::reasoning_tokens))
            .load::<(String, i64, i64, i64)>(&mut conn)
            .unwrap()
    })
    .await
    .unwrap();
    let (cached_i, reasoning_i) = (cached as i64, reasoning as i64);
    assert_eq!(
        stored,
        [("chat".to_owned(), 1, cached_i, reasoning_i), ("embeddings".to_owned(), 1, 0, 0)]
    );
    let only = app.get("/api/v1/usage?group_by=model&endpoint=embeddings", auth).await.data(200);
    assert_eq!(only["totals"]["requests"], json!(1), "{only}");
    assert_eq!(only["rows"][0]["model"], json!("emb-bill"), "{only}");
    app.get("/api/v1/usage?endpoint=telepathy", auth).await.invalid("endpoint");
    app.get("/api/v1/usage?endpoint=", auth).await.invalid("endpoint");
}

async fn a_batch_stored_before_endpoints_were_kept_reads_as_chat(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("old-batch").await;
    let (url, user_id) = (app.database_url.clone(), user.id.clone());
    tokio::task::spawn_blocking(move || {
        use aigw_persistence::schema::usage_record_batches as b;
        use diesel::{ExpressionMethods, RunQueryDsl};
        let url = aigw_persistence::DatabaseUrl::parse(&url).unwrap();
        let pool = aigw_persistence::Pool::new(&url, &Default::default()).unwrap();
        let mut conn = pool.get().unwrap();
        let at = chrono::Utc::now().naive_utc();
        let micros = at.and_utc().timestamp_micros();
        let body = format!(
            r#"[["old-1","k-old","gpt","openai",false,"ok",10,20,30,false,123,true,45,{micros}]]"#
        );
        diesel::insert_into(b::table)
            .values((
                b::user_id.eq(&user_id),
                b::records.eq(1_i64),
                b::oldest_started_at.eq(at),
                b::oldest_request_id.eq("old-1"),
                b::newest_started_at.eq(at),
                b::newest_request_id.eq("old-1"),
                b::body.eq(body),
            ))
            .execute(&mut conn)
            .unwrap();
    })
    .await
    .unwrap();
    let page = app.get("/api/v1/usage/requests", Auth::Bearer(&user.token)).await.data(200);
    let record = &page["requests"][0];
    assert_eq!(record["request_id"], json!("old-1"), "{page}");
    assert_eq!(record["endpoint"], json!("chat"), "{record}");
    assert_eq!(
        (record["prompt_tokens"].as_u64(), record["total_tokens"].as_u64()),
        (Some(10), Some(30))
    );
    for kind in ["cached_tokens", "cache_write_tokens", "reasoning_tokens"] {
        assert_eq!(record[kind], json!(0), "{kind}: {record}");
    }
}
