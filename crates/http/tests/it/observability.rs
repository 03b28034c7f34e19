//! `/metrics` read after a scripted run (logins, a refresh replay and a reuse, 429s,
//! chat calls to the fake upstream, a Redis outage) has each counter at its expected value;
//! the series stay bounded whatever ids, e-mails and paths callers use; every server counts
//! only its own requests (many servers run in this one process).

use crate::common::upstream::FakeUpstream;
use crate::common::*;
use crate::rate_limit_contract::{use_redis, RedisServer};
use aigw_service::rate_limit::PolicyConfig;
use aigw_service::{PriceConfig, ProviderConfig, ProviderKind};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

backend_tests!(
    scripted_run_counts_every_event,
    series_stay_bounded_whatever_the_callers,
    refusals_are_counted_by_why,
);

/// A revoked key, a logged-out session's access token and a deleted account's token are
/// counted as `revoked`, a garbled token as `invalid`: the outcome comes from why the service
/// refused, not from the wording of its hint.
async fn refusals_are_counted_by_why(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("refusals").await;
    let created = app.create_key(&user.token, &["read"], None).await;
    let (key, id) = (created["key"].as_str().unwrap(), created["id"].as_str().unwrap());
    assert_eq!(app.revoke_key(Auth::Bearer(&user.token), id).await.status, 200);
    assert_eq!(app.me(Auth::Raw(key)).await.status, 401);
    assert_eq!(app.logout(&user.token, None).await.status, 200);
    assert_eq!(app.me(Auth::Bearer(&user.token)).await.status, 401);
    assert_eq!(app.me(Auth::Bearer("eyJ.not.a-token")).await.status, 401);
    let series = scrape(&app).await;
    expect_all(
        &series,
        &[
            (
                "aigw_authentications_total",
                &[("credential", "api_key"), ("outcome", "revoked")],
                1.0,
            ),
            (
                "aigw_authentications_total",
                &[("credential", "access_token"), ("outcome", "revoked")],
                1.0,
            ),
            (
                "aigw_authentications_total",
                &[("credential", "access_token"), ("outcome", "invalid")],
                1.0,
            ),
        ],
    );
}

/// The series of an exposition: `name{k="v",…}` (labels sorted) -> value.
pub(crate) type Series = BTreeMap<String, f64>;

/// The key of a series as [`parse`] writes it.
pub(crate) fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<(&str, &str)> = labels.to_vec();
    labels.sort();
    if labels.is_empty() {
        return name.to_owned();
    }
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

/// Parses Prometheus text exposition (comments skipped) into [`Series`].
pub(crate) fn parse(text: &str) -> Series {
    let mut out = Series::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {line}"));
        let value: f64 = value.parse().unwrap_or_else(|e| panic!("bad value in {line}: {e}"));
        let Some((name, rest)) = series.split_once('{') else {
            out.insert(series.to_owned(), value);
            continue;
        };
        let mut labels = Vec::new();
        let mut rest = rest.strip_suffix('}').unwrap_or_else(|| panic!("bad labels in {line}"));
        while !rest.is_empty() {
            let (k, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("bad label {line}"));
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => {
                        if let Some((_, c)) = chars.next() {
                            value.push(c);
                        }
                    }
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => panic!("unterminated label in {line}"),
                }
            };
            labels.push((k.to_owned(), value));
            rest = after[end + 1..].trim_start_matches(',');
        }
        let labels: Vec<(&str, &str)> =
            labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        out.insert(key(name, &labels), value);
    }
    out
}

/// `GET /metrics` of `app`, parsed.
pub(crate) async fn scrape(app: &TestApp) -> Series {
    let reply = app.get("/metrics", Auth::None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let ct = reply.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    parse(&reply.text)
}

/// The value of a series (0 when absent: a counter not yet incremented).
pub(crate) fn value(series: &Series, name: &str, labels: &[(&str, &str)]) -> f64 {
    series.get(&key(name, labels)).copied().unwrap_or(0.0)
}

/// Asserts each `(name, labels, expected)`, reporting every mismatch at once.
/// One expectation: metric name, labels, value.
pub(crate) type Expected<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

pub(crate) fn expect_all(series: &Series, expected: &[Expected<'_>]) {
    let wrong: Vec<String> = expected
        .iter()
        .filter_map(|(name, labels, want)| {
            let got = value(series, name, labels);
            (got != *want).then(|| format!("{} = {got}, expected {want}", key(name, labels)))
        })
        .collect();
    let names: Vec<&String> = series.keys().collect();
    assert!(wrong.is_empty(), "{}\n\nseries: {names:#?}", wrong.join("\n"));
}

fn provider(base_url: &str) -> ProviderConfig {
    let mut prices = BTreeMap::new();
    prices.insert(
        "up-json".to_owned(),
        PriceConfig {
            input_per_million: 1.0,
            output_per_million: 2.0,
            image_tokens: None,
            ..PriceConfig::default()
        },
    );
    ProviderConfig {
        name: "fake".into(),
        kind: ProviderKind::Openai,
        base_url: Some(base_url.to_owned()),
        api_key: Some(secrecy::SecretString::from("sk-provider".to_owned())),
        models: vec!["up-json".into(), "up-500".into()],
        tokenizers: Default::default(),
        prices,
        ..ProviderConfig::default()
    }
}

async fn scripted_run_counts_every_event(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let mut redis = RedisServer::start();
    let base = upstream.base_url.clone();
    let app = spawn_app_with(backend, |s| {
        s.rate_limit.enabled = true;
        s.rate_limit.policies.login = PolicyConfig::new(3, 60);
        if let Some(redis) = &redis {
            use_redis(s, redis);
        }
        s.providers = vec![provider(&base)];
    })
    .await;

    // Register (a session), then four logins with the same e-mail: ok, wrong, ok, refused.
    let email = unique_email("metrics");
    let registered = app.register(&email, PASSWORD, None).await;
    let r0 = registered["refresh_token"].as_str().unwrap().to_owned();
    let token = app.login(&email, PASSWORD).await["token"].as_str().unwrap().to_owned();
    assert_eq!(app.login_raw(&email, "wrong password!").await.status, 401);
    app.login(&email, PASSWORD).await;
    assert_eq!(app.login_raw(&email, PASSWORD).await.status, 429);

    // Refresh: rotate, replay within the grace window, rotate, then reuse the first token.
    let r1 = app.refresh_raw(&r0).await.data(200)["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(app.refresh_raw(&r0).await.data(200)["refresh_token"].as_str(), Some(&*r1));
    app.refresh_raw(&r1).await.data(200);
    assert_eq!(app.refresh_raw(&r0).await.status, 401);

    // Credentials: good, bad, missing, and an API key where an access token is required.
    let key = app.key(&token, &["ai_gateway"]).await;
    assert_eq!(app.me(Auth::Bearer(&token)).await.status, 200);
    assert_eq!(app.me(Auth::Bearer("garbage")).await.status, 401);
    let forged = flip_char(&token, token.len() - 2);
    assert_eq!(app.me(Auth::Bearer(&forged)).await.status, 401);
    assert_eq!(app.me(Auth::None).await.status, 401);
    assert_eq!(app.logout(&key, None).await.status, 403);

    // Chat calls to the fake upstream: two answered, one failing upstream.
    for _ in 0..2 {
        assert_eq!(app.chat(Auth::Raw(&key), &chat_body("up-json", "hi")).await.status, 200);
    }
    assert_eq!(app.chat(Auth::Raw(&key), &chat_body("up-500", "hi")).await.status, 502);

    // The usage recorder counts tokens in the background: wait for it.
    let tokens = [("kind", "completion"), ("model", "up-json"), ("provider", "fake")];
    let counted = || async {
        let series = scrape(&app).await;
        if value(&series, "aigw_tokens_total", &tokens) >= 4.0 {
            Ok(series)
        } else {
            Err(series)
        }
    };
    let series = eventually("tokens never counted", Duration::from_secs(10), counted).await;
    let login = "/api/v1/auth/login";
    let me = "/api/v1/auth/me";
    expect_all(
        &series,
        &[
            ("aigw_logins_total", &[("outcome", "ok")], 2.0),
            ("aigw_logins_total", &[("outcome", "invalid")], 1.0),
            ("aigw_logins_total", &[("outcome", "rate_limited")], 1.0),
            ("aigw_rate_limited_total", &[("policy", "login")], 1.0),
            ("aigw_sessions_created_total", &[], 3.0),
            ("aigw_refresh_total", &[("outcome", "rotated")], 2.0),
            ("aigw_refresh_total", &[("outcome", "replayed")], 1.0),
            ("aigw_refresh_total", &[("outcome", "reused")], 1.0),
            ("aigw_refresh_total", &[("outcome", "invalid")], 0.0),
            ("aigw_api_keys_created_total", &[], 1.0),
            (
                "aigw_authentications_total",
                &[("credential", "access_token"), ("outcome", "ok")],
                2.0,
            ),
            (
                "aigw_authentications_total",
                &[("credential", "access_token"), ("outcome", "invalid")],
                1.0,
            ),
            (
                "aigw_authentications_total",
                &[("credential", "malformed"), ("outcome", "invalid")],
                1.0,
            ),
            ("aigw_authentications_total", &[("credential", "none"), ("outcome", "missing")], 1.0),
            (
                "aigw_authentications_total",
                &[("credential", "api_key"), ("outcome", "forbidden")],
                1.0,
            ),
            ("aigw_authentications_total", &[("credential", "api_key"), ("outcome", "ok")], 3.0),
            (
                "aigw_http_requests_total",
                &[("method", "POST"), ("route", login), ("status_class", "2xx")],
                2.0,
            ),
            (
                "aigw_http_requests_total",
                &[("method", "POST"), ("route", login), ("status_class", "4xx")],
                2.0,
            ),
            (
                "aigw_http_requests_total",
                &[("method", "GET"), ("route", me), ("status_class", "2xx")],
                1.0,
            ),
            (
                "aigw_http_requests_total",
                &[("method", "GET"), ("route", me), ("status_class", "4xx")],
                3.0,
            ),
            ("aigw_http_request_duration_seconds_count", &[("route", login)], 4.0),
            (
                "aigw_upstream_requests_total",
                &[("model", "up-json"), ("provider", "fake"), ("status_class", "2xx")],
                2.0,
            ),
            // A 500 is tried gateway.max_attempts (3) times: three upstream requests, three
            // failed attempts at the deployment, one call.
            (
                "aigw_upstream_requests_total",
                &[("model", "up-500"), ("provider", "fake"), ("status_class", "5xx")],
                3.0,
            ),
            (
                "aigw_upstream_attempts_total",
                &[("deployment", "fake/up-500"), ("outcome", "failed")],
                3.0,
            ),
            (
                "aigw_upstream_attempts_total",
                &[("deployment", "fake/up-json"), ("outcome", "ok")],
                2.0,
            ),
            (
                "aigw_upstream_ttfb_seconds_count",
                &[("model", "up-json"), ("provider", "fake")],
                2.0,
            ),
            (
                "aigw_upstream_duration_seconds_count",
                &[("model", "up-json"), ("provider", "fake")],
                2.0,
            ),
            ("aigw_gateway_overhead_seconds_count", &[("provider", "fake")], 3.0),
            // The fake upstream reports 3 prompt and 2 completion tokens per answer; priced at
            // 1 and 2 USD per million: 7 micro-USD per call.
            (
                "aigw_tokens_total",
                &[("kind", "prompt"), ("model", "up-json"), ("provider", "fake")],
                6.0,
            ),
            ("aigw_tokens_total", &tokens, 4.0),
            ("aigw_cost_usd_micros_total", &[("model", "up-json"), ("provider", "fake")], 14.0),
            ("aigw_db_pool_size", &[], 10.0),
            ("aigw_argon2_queue_length", &[], 0.0),
        ],
    );
    assert_catalogued(&series);
    for gauge in [
        "aigw_db_pool_connections_in_use",
        "aigw_db_pool_waiting",
        "aigw_argon2_in_flight",
        "aigw_change_feed_lag_seconds",
    ] {
        assert!(series.contains_key(gauge), "{gauge} missing: {series:#?}");
    }

    // A Redis outage: the next limited request falls back to the node's memory.
    let Some(redis) = redis.as_mut() else {
        return; // said loudly by RedisServer::start (and a failure under CI)
    };
    expect_all(
        &series,
        &[("aigw_redis_up", &[], 1.0), ("aigw_rate_limit_memory_fallbacks_total", &[], 0.0)],
    );
    redis.kill();
    assert_eq!(app.me(Auth::Bearer(&token)).await.status, 200);
    let series = scrape(&app).await;
    expect_all(
        &series,
        &[
            ("aigw_redis_up", &[], 0.0),
            ("aigw_rate_limit_memory_fallbacks_total", &[], 1.0),
            (
                "aigw_authentications_total",
                &[("credential", "access_token"), ("outcome", "ok")],
                3.0,
            ),
        ],
    );
}

/// Every series belongs to a metric of `aigw_http::observe::CATALOGUE` (which
/// docs/operations.md lists), with exactly the catalogued label names.
fn assert_catalogued(series: &Series) {
    for key in series.keys() {
        let name = key.split('{').next().unwrap();
        let labels: Vec<&str> = key
            .split_once('{')
            .map(|(_, l)| l.trim_end_matches('}'))
            .map(|l| l.split("\",").map(|p| p.split('=').next().unwrap()).collect())
            .unwrap_or_default();
        let (base, histogram_part) = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).map(|b| (b, *s)))
            .unwrap_or((name, ""));
        let spec = aigw_http::observe::CATALOGUE
            .iter()
            .find(|(n, ..)| *n == base || (histogram_part.is_empty() && *n == name))
            .unwrap_or_else(|| panic!("{key} is not in the catalogue"));
        let mut want: Vec<&str> = spec.2.to_vec();
        if histogram_part == "_bucket" {
            want.push("le");
        }
        want.sort_unstable();
        assert_eq!(labels, want, "labels of {key}");
    }
}

/// Many users, keys, e-mails, ids and unknown paths make no new series: labels carry only
/// bounded values, and nothing a caller chose appears in the exposition.
async fn series_stay_bounded_whatever_the_callers(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut seen = Vec::new();
    let round = |n: usize| {
        let app = &app;
        async move {
            let mut chosen = Vec::new();
            for i in 0..n {
                let user = app.new_user(&format!("bounded{i}")).await;
                let key = app.create_key(&user.token, &["ai_gateway", "read"], None).await;
                let key_id = key["id"].as_str().unwrap().to_owned();
                let random = uuid::Uuid::now_v7().simple().to_string();
                let body = chat_body(&format!("no-such-model-{random}"), "hi");
                let secret = key["key"].as_str().unwrap();
                assert_eq!(app.chat(Auth::Raw(secret), &body).await.status, 404);
                app.revoke_key(Auth::Bearer(&user.token), &key_id).await.data(200);
                assert_eq!(app.chat(Auth::Raw(secret), &body).await.status, 401);
                let path = format!("/api/v1/auth/api-keys/{random}/revoke");
                assert_eq!(app.post_empty(&path, Auth::Bearer(&user.token)).await.status, 404);
                assert_eq!(app.get(&format!("/nowhere/{random}"), Auth::None).await.status, 404);
                let odd = reqwest::Method::from_bytes(format!("X{i}").as_bytes()).unwrap();
                app.send(app.request(odd, "/api/v1/auth/me", Auth::None)).await;
                chosen.extend([user.id, user.email, key_id, random]);
            }
            chosen
        }
    };
    scrape(&app).await; // the scrape's own series
    seen.extend(round(3).await);
    let first = scrape(&app).await;
    seen.extend(round(5).await);
    let second = scrape(&app).await;
    let added: Vec<&String> = second.keys().filter(|k| !first.contains_key(*k)).collect();
    assert!(added.is_empty(), "new series after more callers: {added:#?}");
    assert!(second.len() < 400, "{} series: {:#?}", second.len(), second.keys());
    let text = app.get("/metrics", Auth::None).await.text;
    for value in &seen {
        assert!(!text.contains(value.as_str()), "{value} appears in the exposition");
    }
}

/// Two servers in one process count only their own requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_counts_only_its_own_requests() {
    let a = spawn_app(Backend::Sqlite).await;
    let b = spawn_app(Backend::Sqlite).await;
    for _ in 0..3 {
        assert_eq!(a.get("/healthz", Auth::None).await.status, 200);
    }
    let health = [("method", "GET"), ("route", "/healthz"), ("status_class", "2xx")];
    assert_eq!(value(&scrape(&a).await, "aigw_http_requests_total", &health), 3.0);
    assert_eq!(value(&scrape(&b).await, "aigw_http_requests_total", &health), 0.0);
}

/// With `server.metrics_listen`, `/metrics` is served there and not on `server.listen`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_moves_metrics_off_the_public_port() {
    let port = crate::binary::free_port();
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.server.metrics_listen = Some(format!("127.0.0.1:{port}"));
    })
    .await;
    app.get("/metrics", Auth::None).await.error(404, "not_found");
    assert_eq!(app.get("/healthz", Auth::None).await.status, 200);
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = parse(&text);
    let health = [("method", "GET"), ("route", "/healthz"), ("status_class", "2xx")];
    assert_eq!(value(&series, "aigw_http_requests_total", &health), 1.0, "{text}");
}

/// The `aigw` binary with `log.format = "json"` writes exactly one access-log line per
/// request, with its id, route, status, caller and (for a 5xx) cause at `error`; other lines
/// of a request carry its span with the same id; no secret appears anywhere in its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_has_one_line_per_request() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let port = crate::binary::free_port();
    let closed = crate::binary::free_port(); // nothing listens: the upstream call fails
    let config = crate::binary::write_config(dir.path(), port, closed);
    crate::binary::append_config(&config, "\n[log]\nformat = \"json\"\nlevel = \"info\"\n");
    let mut child = crate::binary::spawn_aigw(&config, dir.path(), Stdio::piped());
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        std::io::BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<String>>()
    });
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let mut sent: Vec<(String, u16)> = Vec::new();
    // Health probes until it answers: each answered one is a request too.
    let answered = || async {
        let r = client.get(format!("{base}/healthz")).send().await.map_err(|e| e.to_string())?;
        let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
        Ok::<_, String>((id, r.status().as_u16()))
    };
    sent.push(eventually("aigw did not start", Duration::from_secs(30), answered).await);
    async fn call(
        sent: &mut Vec<(String, u16)>,
        request: reqwest::RequestBuilder,
    ) -> serde_json::Value {
        let r = request.send().await.unwrap();
        let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
        sent.push((id, r.status().as_u16()));
        r.json::<serde_json::Value>().await.unwrap_or_default()
    }
    let email = unique_email("access-log");
    let reg = call(
        &mut sent,
        client
            .post(format!("{base}/api/v1/auth/register"))
            .json(&json!({"email": email, "password": PASSWORD})),
    )
    .await;
    let token = reg["data"]["token"].as_str().unwrap().to_owned();
    let user_id = reg["data"]["user"]["id"].as_str().unwrap().to_owned();
    let created = call(
        &mut sent,
        client
            .post(format!("{base}/api/v1/auth/api-keys"))
            .bearer_auth(&token)
            .json(&json!({"name": "log", "permissions": ["ai_gateway"]})),
    )
    .await;
    let key = created["data"]["key"].as_str().unwrap().to_owned();
    let key_id = created["data"]["id"].as_str().unwrap().to_owned();
    call(&mut sent, client.get(format!("{base}/api/v1/auth/me")).bearer_auth(&token)).await;
    call(&mut sent, client.get(format!("{base}/api/v1/auth/me"))).await;
    call(&mut sent, client.get(format!("{base}/nowhere"))).await;
    call(
        &mut sent,
        client
            .post(format!("{base}/api/v1/ai/chat/completions"))
            .header("authorization", &key)
            .json(&chat_body("slow-model", "hi")),
    )
    .await;
    call(&mut sent, client.get(format!("{base}/metrics"))).await;
    let statuses: Vec<u16> = sent.iter().map(|(_, s)| *s).collect();
    assert_eq!(statuses, [200, 201, 201, 200, 401, 404, 502, 200]);

    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(0));
    let lines = reader.join().unwrap();
    let all = lines.join("\n");
    for secret in [PASSWORD, token.as_str(), key.as_str(), "sk-upstream"] {
        assert!(!all.contains(secret), "a secret is in the log:\n{all}");
    }
    let access: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["message"] == "access")
        .collect();
    assert_eq!(access.len(), sent.len(), "one line per request:\n{all}");
    for (id, status) in &sent {
        let line = access
            .iter()
            .find(|l| l["request_id"] == json!(id))
            .unwrap_or_else(|| panic!("no access line for {id}:\n{all}"));
        assert_eq!(line["status"], json!(status), "{line}");
        let level = if *status >= 500 { "ERROR" } else { "INFO" };
        assert_eq!(line["level"], json!(level), "{line}");
        for field in ["method", "route", "duration_ms", "bytes", "client_ip"] {
            assert!(!line[field].is_null(), "{field} missing: {line}");
        }
    }
    let by_status = |s: u16| access.iter().find(|l| l["status"] == json!(s)).unwrap();
    let me = access.iter().find(|l| l["route"] == "/api/v1/auth/me" && l["status"] == 200).unwrap();
    assert_eq!(me["user_id"], json!(user_id), "{me}");
    assert!(me["session_id"].is_string(), "{me}");
    let chat = by_status(502);
    assert_eq!(chat["key_id"], json!(key_id), "{chat}");
    assert_eq!(chat["route"], "/api/v1/ai/chat/completions", "{chat}");
    assert!(chat["cause"].as_str().is_some_and(|c| c.contains("upstream slow failed")), "{chat}");
    assert_eq!(by_status(404)["route"], "unmatched");
    // A line written while a request is handled carries that request's span (JSON lines and
    // no OTLP: written from the request's id, without a tracing span per request).
    let logged = |message: &str| {
        lines
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line:\n{all}"))
    };
    for (message, (id, _)) in [("user registered", &sent[1]), ("API key created", &sent[2])] {
        let line = logged(message);
        assert_eq!(line["span"], json!({"name": "request", "request_id": id}), "{line}");
    }
    assert!(access.iter().all(|l| l.get("span").is_none()), "{all}");
}

/// An OpenAI-style path without `/api/v1/ai` gets a 404 whose hint names the base URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_style_path_gets_a_hint_of_the_base_url() {
    let app = spawn_app(Backend::Sqlite).await;
    for path in ["/v1/chat/completions", "/chat/completions", "/v1/models"] {
        let reply = app.post(path, Auth::None, &chat_body("echo", "hi")).await;
        let error = reply.not_found("route", path);
        let hint = error["details"]["hint"].as_str().unwrap_or_default();
        assert!(hint.contains("/api/v1/ai"), "{path}: {error}");
    }
    let plain = app.get("/nope", Auth::None).await;
    assert!(plain.not_found("route", "/nope")["details"].get("hint").is_none());
}

/// A chat call sends the caller's W3C trace context and its own request id upstream; a
/// malformed `traceparent` is not passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_and_request_id_go_upstream() {
    let upstream = FakeUpstream::start().await;
    let base = upstream.base_url.clone();
    let app = spawn_app_with(Backend::Sqlite, |s| s.providers = vec![provider(&base)]).await;
    let user = app.new_user("trace").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let reply = app
        .send(
            app.request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Raw(&key))
                .header("traceparent", parent)
                .header("tracestate", "congo=t61rcWkgMzE")
                .json(&chat_body("up-json", "hi")),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let bad = app
        .send(
            app.request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Raw(&key))
                .header("traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01")
                .header("tracestate", "congo=t61rcWkgMzE")
                .json(&chat_body("up-json", "hi")),
        )
        .await;
    assert_eq!(bad.status, 200, "{}", bad.text);
    let seen = upstream.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].headers.get("traceparent").map(String::as_str), Some(parent));
    assert_eq!(seen[0].headers.get("tracestate").map(String::as_str), Some("congo=t61rcWkgMzE"));
    assert_eq!(
        seen[0].headers.get("x-request-id").map(String::as_str),
        reply.header("x-request-id")
    );
    assert!(!seen[1].headers.contains_key("traceparent"), "{:?}", seen[1].headers);
    assert!(!seen[1].headers.contains_key("tracestate"), "{:?}", seen[1].headers);
    assert_eq!(seen[1].headers.get("x-request-id").map(String::as_str), bad.header("x-request-id"));
}

/// A second server on the data folder of a running one refuses to start, naming the folder;
/// once the first is gone the folder is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_refuses_a_data_folder_in_use() {
    use aigw_http::startup::Application;
    let dir = tempfile::tempdir().unwrap();
    let settings = || {
        let url = format!("sqlite://{}/aigw.db", dir.path().display());
        let mut s = test_settings(dir.path().to_path_buf(), url);
        s.server.listen = "127.0.0.1:0".into();
        s
    };
    let first = Application::build(settings()).await.unwrap();
    let err = Application::build(settings()).await.err().map(|e| format!("{e:#}"));
    let err = err.expect("a second server started on the same data_dir");
    assert!(err.contains("in use by another aigw process"), "{err}");
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    drop(first);
    Application::build(settings()).await.unwrap();
}

/// What a small in-test OTLP/HTTP receiver got: (path, content-type, body) per request.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, String, Vec<u8>)>>>;

/// A minimal OTLP/HTTP receiver on a random port: records every POST and answers 200 with
/// an empty protobuf `ExportTraceServiceResponse`. Keep-alive connections are served in turn.
async fn otlp_receiver() -> (u16, Received) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received: Received = Default::default();
    let store = received.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let store = store.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(socket);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    let (mut length, mut content_type) = (0usize, String::new());
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).await.unwrap();
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        let (name, value) = header.split_once(':').unwrap();
                        match name.to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap(),
                            "content-type" => content_type = value.trim().to_owned(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0u8; length];
                    reader.read_exact(&mut body).await.unwrap();
                    store.lock().unwrap().push((path, content_type, body));
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    reader.get_mut().write_all(answer.as_bytes()).await.unwrap();
                }
            });
        }
    });
    (port, received)
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

/// With `telemetry.otlp_endpoint`, the binary continues the caller's trace: the request's span
/// is exported over OTLP/HTTP with the caller's trace id, and the upstream receives that span
/// as its parent in `traceparent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_and_continue_the_callers_trace() {
    use std::process::{Command, Stdio};
    let upstream = FakeUpstream::start().await;
    let upstream_port: u16 = upstream.base_url.rsplit(':').next().unwrap().parse().unwrap();
    let (collector, received) = otlp_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let port = crate::binary::free_port();
    let config = crate::binary::write_config(dir.path(), port, upstream_port);
    let telemetry = format!("\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:{collector}\"\n");
    crate::binary::append_config(&config, &telemetry);
    let mut child = crate::binary::spawn_aigw(&config, dir.path(), Stdio::null());
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    crate::binary::wait_until_healthy(&client, &base).await;
    let (_, key) = crate::binary::register_with_key(&client, &base, "otlp@example.com").await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let answer = client
        .post(format!("{base}/api/v1/ai/chat/completions"))
        .header("authorization", &key)
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&chat_body("slow-model", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert_eq!(exit.code(), Some(0));

    let sent = upstream.requests();
    let parent = sent[0].headers.get("traceparent").cloned().unwrap_or_default();
    let parts: Vec<&str> = parent.split('-').collect();
    assert_eq!(parts.len(), 4, "upstream traceparent {parent:?}");
    assert_eq!(parts[1], trace_id, "the upstream continues the caller's trace: {parent}");
    assert_ne!(parts[2], caller_span, "the upstream's parent is aigw's span: {parent}");

    let received = received.lock().unwrap().clone();
    assert!(!received.is_empty(), "nothing exported to the OTLP receiver");
    for (path, content_type, _) in &received {
        assert_eq!(path, "/v1/traces");
        assert_eq!(content_type, "application/x-protobuf");
    }
    let bodies: Vec<u8> = received.iter().flat_map(|(_, _, b)| b.clone()).collect();
    let contains = |needle: &[u8]| bodies.windows(needle.len()).any(|w| w == needle);
    assert!(contains(&hex_bytes(trace_id)), "no span of the caller's trace was exported");
    assert!(contains(&hex_bytes(parts[2])), "the upstream's parent span was not exported");
    assert!(contains(&hex_bytes(caller_span)), "the exported span lost the caller as parent");
    assert!(contains(b"POST /api/v1/ai/chat/completions"), "span name");
    assert!(contains(b"aigw"), "service.name");
}
