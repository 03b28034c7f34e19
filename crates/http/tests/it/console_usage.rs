//! The console's usage page (totals, charts, tables, the per-request table and its pages),
//! sessions page and account page, over HTTP as a browser without a script engine uses them.

use crate::common;
use aigw_service::{PriceConfig, ProviderConfig, ProviderKind};
use common::browser::{Browser, Page};
use common::{spawn_app_with, Auth, Backend, TestApp, PASSWORD};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// USD per million prompt and completion tokens of the `priced` model.
const PRICE_PER_MILLION: f64 = 1000.0;

/// An app whose built-in echo also answers `priced` (priced at [`PRICE_PER_MILLION`]), with a
/// fast usage recorder.
pub(crate) async fn priced_app(
    backend: Backend,
    tweak: impl FnOnce(&mut aigw_http::settings::Settings),
) -> TestApp {
    spawn_app_with(backend, |s| {
        let price = PriceConfig {
            input_per_million: PRICE_PER_MILLION,
            output_per_million: PRICE_PER_MILLION,
            image_tokens: None,
            ..PriceConfig::default()
        };
        s.providers = vec![ProviderConfig {
            name: "local".into(),
            kind: ProviderKind::Echo,
            base_url: None,
            api_key: None,
            models: vec!["priced".into()],
            tokenizers: Default::default(),
            prices: BTreeMap::from([("priced".to_owned(), price)]),
            ..ProviderConfig::default()
        }];
        s.usage.flush_interval_ms = 20;
        tweak(s);
    })
    .await
}

/// Polls `GET /usage` (deadline 60 s) until the caller's totals count `n` requests.
pub(crate) async fn wait_for_usage(app: &TestApp, token: &str, n: u64) -> Value {
    let arrived = || async {
        let data = app.get("/api/v1/usage", Auth::Bearer(token)).await.data(200);
        if data["totals"]["requests"].as_u64() >= Some(n) {
            Ok(data)
        } else {
            Err(data)
        }
    };
    common::eventually("usage did not arrive", Duration::from_secs(60), arrived).await
}

/// A call of `model` with `key`, answered 200.
pub(crate) async fn call(app: &TestApp, key: &str, model: &str) {
    let reply = app.chat(Auth::Bearer(key), &common::chat_body(model, "hello there")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn the_usage_page_shows_totals_charts_and_tables(backend: Backend) {
    let app = priced_app(backend, |_| {}).await;
    let user = app.new_user("usage-page").await;
    let body = json!({"name": "<b>chart key</b>", "permissions": ["ai_gateway"]});
    let created = app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    let (key, key_id) =
        (created["key"].as_str().unwrap(), created["id"].as_str().unwrap().to_owned());
    call(&app, key, "priced").await;
    call(&app, key, "echo").await;
    let usage = wait_for_usage(&app, &user.token, 2).await;
    let totals = &usage["totals"];
    let cost_micros = (totals["cost_usd"].as_f64().unwrap() * 1e6).round() as i64;
    assert!(cost_micros > 0, "{usage}");

    let mut browser = Browser::new(&app);
    browser.sign_in(&user.email, &user.password).await;
    let page = browser.get("/usage").await;
    assert_eq!(page.status, 200, "{}", page.text);
    let shown = page.section("<dl id=\"totals\"", "</dl>");
    assert!(shown.contains("<dt>Requests</dt><dd>2</dd>"), "{shown}");
    let total_tokens = totals["total_tokens"].as_u64().unwrap();
    assert!(shown.contains(&format!("<dd>{total_tokens}</dd>")), "{shown}");
    let dollars = cost_micros as f64 / 1e6;
    let money =
        if cost_micros < 10_000 { format!("${dollars:.6}") } else { format!("${dollars:.2}") };
    assert!(shown.contains(&money), "{money}: {shown}");

    // Thirty days, one with bars: its title names today and the amount.
    let today = chrono::Utc::now().date_naive().to_string();
    let cost = page.section("<svg id=\"chart-cost\"", "</svg>");
    assert!(cost.contains("role=\"img\"") && cost.contains("aria-labelledby="), "{cost}");
    assert_eq!(cost.matches("<rect ").count(), 1, "{cost}");
    assert!(cost.contains(&format!("<title>{today}: {money}</title>")), "{cost}");
    let tokens = page.section("<svg id=\"chart-tokens\"", "</svg>");
    assert_eq!(tokens.matches("<rect ").count(), 1, "{tokens}");
    assert!(tokens.contains(&format!("<title>{today}: {total_tokens}</title>")), "{tokens}");
    let first_day = (chrono::Utc::now().date_naive() - chrono::Duration::days(29)).to_string();
    assert!(tokens.contains(&format!(">{first_day}</text>")), "{tokens}");
    // The same data as a table, every day of the range.
    let data = page.section("<table id=\"chart-cost-data\"", "</table>");
    assert_eq!(data.matches("<tr><td>").count(), 30, "{data}");

    let models = page.section("<table id=\"by-model\"", "</table>");
    assert!(models.contains("<td>priced</td>") && models.contains("<td>echo</td>"), "{models}");
    assert!(models.contains("<meter min=\"0\" max=\"1\" value=\"1"), "{models}");
    let endpoints = page.section("<table id=\"by-endpoint\"", "</table>");
    assert!(endpoints.contains("<tr data-endpoint=\"chat\"><td>chat</td><td class=\"num\">2</td>"));
    assert!(shown.contains("<dt>Cached prompt tokens</dt><dd>0</dd>"), "{shown}");
    let keys = page.section("<table id=\"by-key\"", "</table>");
    assert!(keys.contains(&format!("href=\"/keys/{key_id}\"")), "{keys}");
    assert!(keys.contains("&lt;b&gt;chart key&lt;&#x2f;b&gt;") && !keys.contains("<b>"), "{keys}");
    let requests = page.section("<table id=\"requests\"", "</table>");
    assert_eq!(requests.matches("data-request-id=").count(), 2, "{requests}");

    // One key, another key: the range's numbers are that key's.
    let filtered = browser.get(&format!("/usage?api_key_id={key_id}")).await;
    assert_eq!(filtered.status, 200, "{}", filtered.text);
    assert!(filtered.section("<dl id=\"totals\"", "</dl>").contains("<dd>2</dd>"));
    let other = browser.get("/usage?api_key_id=not-a-key-of-mine&from=&to=").await;
    assert_eq!(other.status, 200, "{}", other.text);
    assert!(other.section("<dl id=\"totals\"", "</dl>").contains("<dt>Requests</dt><dd>0</dd>"));
    assert_eq!(other.section("<svg id=\"chart-cost\"", "</svg>").matches("<rect ").count(), 0);
    assert!(!other.text.contains("id=\"by-model\""));

    // A server that keeps only the daily sums says so instead of an empty table.
    let sums_only = priced_app(backend, |s| {
        s.usage.request_records = aigw_service::usage::config::RequestRecords::None;
    })
    .await;
    let user = sums_only.new_user("sums-only").await;
    let key = sums_only.key(&user.token, &["ai_gateway"]).await;
    call(&sums_only, &key, "priced").await;
    wait_for_usage(&sums_only, &user.token, 1).await;
    let mut browser = Browser::new(&sums_only);
    browser.sign_in(&user.email, &user.password).await;
    let page = browser.get("/usage").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("id=\"no-request-records\""), "{}", page.text);
    assert!(!page.text.contains("id=\"requests\""), "{}", page.text);
    assert!(page.section("<dl id=\"totals\"", "</dl>").contains("<dd>1</dd>"));
}

async fn the_requests_table_is_paged_and_bad_ranges_are_named(backend: Backend) {
    let app = priced_app(backend, |_| {}).await;
    let user = app.new_user("usage-pages").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    for _ in 0..51 {
        call(&app, &key, "echo").await;
    }
    wait_for_usage(&app, &user.token, 51).await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&user.email, &user.password).await;
    let first = browser.get("/usage?from=&to=").await;
    assert_eq!(first.status, 200, "{}", first.text);
    let rows = first.section("<table id=\"requests\"", "</table>");
    assert_eq!(rows.matches("data-request-id=").count(), 50, "{rows}");
    let next = first.next_href().expect("a link to the next page");
    assert!(next.starts_with("/usage?") && next.contains("cursor="), "{next}");
    let second = browser.get(&next).await;
    assert_eq!(second.status, 200, "{}", second.text);
    let rows2 = second.section("<table id=\"requests\"", "</table>");
    assert_eq!(rows2.matches("data-request-id=").count(), 1, "{rows2}");
    assert!(second.next_href().is_none());
    let ids = |text: &str| -> HashSet<String> {
        text.split("data-request-id=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().to_owned())
            .collect()
    };
    assert!(ids(rows).is_disjoint(&ids(rows2)));
    assert_eq!(ids(rows).len() + ids(rows2).len(), 51);

    // A bad range or cursor: a 400 page naming the field, with the picker to fix it.
    let backwards = browser.get("/usage?from=2026-03-02&to=2026-03-01").await;
    assert_eq!(backwards.status, 400, "{}", backwards.text);
    assert!(backwards.text.contains("from must not be after to"), "{}", backwards.text);
    let from_input = backwards.section("<input id=\"from\"", ">");
    assert!(from_input.contains("aria-invalid=\"true\""), "{from_input}");
    assert!(from_input.contains("value=\"2026-03-02\""), "{from_input}");
    assert!(!backwards.text.contains("id=\"totals\""));
    let not_a_day = browser.get("/usage?to=yesterday").await;
    assert_eq!(not_a_day.status, 400, "{}", not_a_day.text);
    assert!(not_a_day.section("<input id=\"to\"", ">").contains("aria-invalid"));
    let too_long = browser.get("/usage?from=2024-01-01&to=2026-01-01").await;
    assert_eq!(too_long.status, 400, "{}", too_long.text);
    let bad_cursor = browser.get("/usage?cursor=nonsense").await;
    assert_eq!(bad_cursor.status, 400, "{}", bad_cursor.text);
    assert!(bad_cursor.text.contains("cursor"), "{}", bad_cursor.text);
}

/// The `data-session-id`s of the sessions table, and which one is marked as this session.
fn session_rows(page: &Page) -> (Vec<String>, Vec<String>) {
    let table = page.section("<table id=\"sessions\"", "</table>");
    let mut all = Vec::new();
    let mut current = Vec::new();
    for row in table.split("<tr data-session-id=\"").skip(1) {
        let id = row.split('"').next().unwrap().to_owned();
        if row
            .split("</tr>")
            .next()
            .unwrap()
            .contains("<span class=\"badge active\">this session</span>")
        {
            current.push(id.clone());
        }
        all.push(id);
    }
    (all, current)
}

async fn sessions_are_listed_and_ended(backend: Backend) {
    let app = priced_app(backend, |_| {}).await;
    let user = app.new_user("console-sessions").await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&user.email, &user.password).await;
    let page = browser.get("/sessions").await;
    assert_eq!(page.status, 200, "{}", page.text);
    let (all, current) = session_rows(&page);
    assert_eq!(all.len(), 2, "{}", page.text);
    assert_eq!(current.len(), 1, "{}", page.text);
    let other = all.iter().find(|id| **id != current[0]).unwrap().clone();
    assert_eq!(page.text.matches("<form class=\"end-session\" method=\"post\"").count(), 2);

    // Ending the other session (the API client's): its refresh token stops working.
    let csrf = page.csrf();
    let missing = browser.post(&format!("/sessions/{other}/end"), &[("csrf", "")]).await;
    assert_eq!(missing.status, 403, "{}", missing.text);
    let unknown = browser.post("/sessions/no-such-session/end", &[("csrf", &csrf)]).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    let ended = browser.post(&format!("/sessions/{other}/end"), &[("csrf", &csrf)]).await;
    assert_eq!((ended.status, ended.location.as_deref()), (303, Some("/sessions")));
    app.refresh_raw(&user.refresh_token).await.unauthorized();
    let page = browser.get("/sessions").await;
    assert!(page.text.contains("id=\"flash\""), "{}", page.text);
    assert_eq!(session_rows(&page), (current.clone(), current.clone()));

    // Ending the current one logs this browser out.
    let out = browser.post(&format!("/sessions/{}/end", current[0]), &[("csrf", &csrf)]).await;
    assert_eq!((out.status, out.location.as_deref()), (303, Some("/login")), "{}", out.text);
    assert!(browser.jar.is_empty(), "{:?}", browser.jar);
    let after = browser.get("/sessions").await;
    assert_eq!((after.status, after.location.as_deref()), (303, Some("/login?next=%2Fsessions")));
    let fresh = app.login(&user.email, &user.password).await;
    let listed = app
        .get("/api/v1/auth/sessions", Auth::Bearer(fresh["token"].as_str().unwrap()))
        .await
        .data(200);
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
}

async fn the_account_page_changes_name_and_password(backend: Backend) {
    let app = priced_app(backend, |s| {
        s.auth.email_verification = aigw_service::config::EmailVerification::Optional;
    })
    .await;
    let user = app.new_user("console-account").await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&user.email, &user.password).await;
    let page = browser.get("/account").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains(&user.email), "{}", page.text);
    for id in [
        "id=\"name-form\"",
        "id=\"display_name\"",
        "id=\"password-form\"",
        "id=\"current_password\"",
        "id=\"new_password\"",
        "id=\"verification-form\"",
    ] {
        assert!(page.text.contains(id), "{id}: {}", page.text);
    }
    assert!(page.section("<dd id=\"mfa-status\"", "</dd>").contains("off"));
    let csrf = page.csrf();

    // A new verification link, as the API sends one.
    let sent = browser.post("/account/verification", &[("csrf", &csrf)]).await;
    assert_eq!((sent.status, sent.location.as_deref()), (303, Some("/account")), "{}", sent.text);

    // The name: shown as text, never as markup.
    let xss = "<script>alert(1)</script>";
    let named = browser.post("/account/name", &[("csrf", &csrf), ("display_name", xss)]).await;
    assert_eq!(
        (named.status, named.location.as_deref()),
        (303, Some("/account")),
        "{}",
        named.text
    );
    let page = browser.get("/account").await;
    assert!(page.text.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"), "{}", page.text);
    assert!(!page.text.contains(xss), "{}", page.text);
    assert!(page.text.contains("id=\"flash\""), "{}", page.text);
    let me = app.me(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(me["user"]["name"], json!(xss));
    let empty = browser.post("/account/name", &[("csrf", &csrf), ("display_name", "  ")]).await;
    assert_eq!(empty.status, 400, "{}", empty.text);
    assert!(empty.section("<input id=\"display_name\"", ">").contains("aria-invalid=\"true\""));

    // A wrong current password: the error, the field marked, nothing changed.
    let new_password = "a brand new passphrase 42";
    let wrong = browser
        .post(
            "/account/password",
            &[
                ("csrf", &csrf),
                ("current_password", "not it at all"),
                ("new_password", new_password),
            ],
        )
        .await;
    assert_eq!(wrong.status, 401, "{}", wrong.text);
    assert!(wrong.text.contains("id=\"error\""), "{}", wrong.text);
    assert!(wrong.section("<input id=\"current_password\"", ">").contains("aria-invalid=\"true\""));
    assert!(!wrong.text.contains("not it at all"));
    app.login(&user.email, PASSWORD).await;
    app.refresh_raw(&user.refresh_token).await.data(200);
    let weak = browser
        .post(
            "/account/password",
            &[("csrf", &csrf), ("current_password", PASSWORD), ("new_password", "x")],
        )
        .await;
    assert_eq!(weak.status, 400, "{}", weak.text);
    assert!(weak.section("<input id=\"new_password\"", ">").contains("aria-invalid=\"true\""));
    app.login(&user.email, PASSWORD).await;

    // The right one: the other sessions end, this browser stays signed in with new cookies.
    let api_session = app.login(&user.email, PASSWORD).await;
    let changed = browser
        .post(
            "/account/password",
            &[("csrf", &csrf), ("current_password", PASSWORD), ("new_password", new_password)],
        )
        .await;
    assert_eq!(
        (changed.status, changed.location.as_deref()),
        (303, Some("/account")),
        "{}",
        changed.text
    );
    assert!(changed.cookie("aigw_access").is_some() && changed.cookie("aigw_refresh").is_some());
    app.refresh_raw(api_session["refresh_token"].as_str().unwrap()).await.unauthorized();
    app.login_raw(&user.email, PASSWORD).await.unauthorized();
    app.login(&user.email, new_password).await;
    let page = browser.get("/account").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("Your password is changed"), "{}", page.text);
    // Its refresh cookie is the new one: the session renews with it.
    browser.jar.remove("aigw_access");
    let renewed = browser.get("/sessions").await;
    assert_eq!(renewed.status, 200, "{}", renewed.text);
}

backend_tests!(
    the_usage_page_shows_totals_charts_and_tables,
    the_requests_table_is_paged_and_bad_ranges_are_named,
    sessions_are_listed_and_ended,
    the_account_page_changes_name_and_password,
);
