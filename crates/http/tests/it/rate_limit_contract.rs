//! Rate limits: the 429 contract field by field, the
//! `RateLimit-Policy` / `RateLimit` header fields, the key of each policy (limits never leak
//! between users, keys or addresses), the switch, and Redis shared by two nodes, including
//! Redis dying mid-test.
//!
//! Redis tests start their own `redis-server` on a free port. Without one installed they say
//! so loudly and pass, unless `CI=true`, where they fail.

use crate::common;

use aigw_http::settings::Settings;
use aigw_service::rate_limit::{PolicyConfig, RateLimitBackend};
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

backend_tests!(
    login_trips_at_exactly_the_limit_and_then_refuses_the_right_password,
    refusal_details_limit_is_the_policy_limit,
    refusal_details_remaining_is_zero,
    refusal_details_reset_is_unix_seconds_when_a_request_passes_again,
    refusal_has_retry_after_in_whole_seconds,
    ratelimit_fields_on_success_and_refusal,
    ratelimit_policy_on_answers_that_were_not_counted,
    login_limit_is_per_email_and_per_address,
    register_and_refresh_are_limited_per_address,
    untrusted_peer_cannot_choose_its_address,
    account_limit_is_per_credential,
    ai_limit_is_per_api_key,
    limited_client_passes_again_after_retry_after,
    disabled_rate_limiting_answers_no_429_and_no_fields,
    one_policy_can_be_switched_off,
    redis_backend_enforces_the_same_contract,
    login_failures_stay_indistinguishable_with_limits_on,
);

/// Small limits, so tests trip them quickly; addresses from `X-Forwarded-For` are believed
/// when the peer is 127.0.0.1 (`tests` use it to play several clients).
fn small_limits(s: &mut Settings) {
    let rl = &mut s.rate_limit;
    rl.enabled = true;
    rl.backend = RateLimitBackend::Memory;
    rl.trusted_proxies = vec!["127.0.0.1".into(), "::1".into()];
    rl.policies.register = PolicyConfig::new(3, 3600);
    rl.policies.login = PolicyConfig::new(3, 60);
    rl.policies.refresh = PolicyConfig::new(3, 60);
    rl.policies.account = PolicyConfig::new(3, 60);
    rl.policies.ai = PolicyConfig::new(3, 60);
}

/// `small_limits`, but registration generous (tests create several users).
fn small_limits_many_users(s: &mut Settings) {
    small_limits(s);
    s.rate_limit.policies.register = PolicyConfig::new(1000, 3600);
}

async fn limited_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, small_limits_many_users).await
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Extra requests of this file: a client address via `X-Forwarded-For`.
trait Ext {
    async fn post_from(&self, ip: &str, path: &str, body: &Value) -> Reply;
    async fn login_from(&self, ip: &str, email: &str, password: &str) -> Reply;
}

impl Ext for TestApp {
    async fn post_from(&self, ip: &str, path: &str, body: &Value) -> Reply {
        self.send(
            self.request(Method::POST, path, Auth::None).header("x-forwarded-for", ip).json(body),
        )
        .await
    }

    async fn login_from(&self, ip: &str, email: &str, password: &str) -> Reply {
        self.post_from(ip, "/api/v1/auth/login", &json!({"email": email, "password": password}))
            .await
    }
}

/// Asserts a 429 `rate_limit_exceeded` and returns `details`.
fn refused(reply: &Reply) -> Value {
    reply.error(429, "rate_limit_exceeded")["details"].clone()
}

/// Makes `limit` wrong-password logins (all 401) and returns the next answer, with the
/// right password.
async fn exhaust_login(app: &TestApp, user: &User, limit: u32) -> Reply {
    for i in 0..limit {
        let reply = app.login_raw(&user.email, "wrong password!").await;
        assert_eq!(reply.status, 401, "attempt {}: {}", i + 1, reply.text);
    }
    app.login_raw(&user.email, &user.password).await
}

async fn login_trips_at_exactly_the_limit_and_then_refuses_the_right_password(backend: Backend) {
    let app = limited_app(backend).await;
    let user = app.new_user("rl-login").await;
    // Two right logins and one wrong: three requests, the limit.
    app.login(&user.email, &user.password).await;
    assert_eq!(app.login_raw(&user.email, "wrong password!").await.status, 401);
    app.login(&user.email, &user.password).await;
    // The fourth is refused although the password is right: the limit is checked first.
    let reply = app.login_raw(&user.email, &user.password).await;
    refused(&reply);
    let reply = app.login_raw(&user.email, "wrong password!").await;
    refused(&reply);
}

async fn refusal_details_limit_is_the_policy_limit(backend: Backend) {
    let app = limited_app(backend).await;
    let user = app.new_user("rl-limit").await;
    let details = refused(&exhaust_login(&app, &user, 3).await);
    assert_eq!(details["limit"], json!(3), "{details}");
    assert!(details["limit"].is_u64(), "limit must be an integer: {details}");
}

async fn refusal_details_remaining_is_zero(backend: Backend) {
    let app = limited_app(backend).await;
    let user = app.new_user("rl-remaining").await;
    let details = refused(&exhaust_login(&app, &user, 3).await);
    assert_eq!(details["remaining"], json!(0), "{details}");
}

async fn refusal_details_reset_is_unix_seconds_when_a_request_passes_again(backend: Backend) {
    let app = limited_app(backend).await;
    let user = app.new_user("rl-reset").await;
    let before = now();
    let reply = exhaust_login(&app, &user, 3).await;
    let after = now();
    let details = refused(&reply);
    let reset =
        details["reset"].as_i64().unwrap_or_else(|| panic!("reset must be an integer: {details}"));
    // 3 per 60 s: one request comes back every 20 s.
    assert!(
        reset > before && reset <= after + 21,
        "reset {reset} not within ({before}, {}]",
        after + 21
    );
    let retry_after: i64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert!(
        (reset - (after + retry_after)).abs() <= 1,
        "reset {reset} and Retry-After {retry_after} disagree (now {after})"
    );
}

async fn refusal_has_retry_after_in_whole_seconds(backend: Backend) {
    let app = limited_app(backend).await;
    let user = app.new_user("rl-retry").await;
    let reply = exhaust_login(&app, &user, 3).await;
    refused(&reply);
    let value = reply
        .header("retry-after")
        .unwrap_or_else(|| panic!("429 needs Retry-After: {:?}", reply.headers));
    let secs: u64 =
        value.parse().unwrap_or_else(|_| panic!("Retry-After must be whole seconds: {value:?}"));
    assert!((1..=20).contains(&secs), "Retry-After {secs}");
}

/// Parses `"name";k=v;k=v` into the name and the parameters.
fn parse_field(value: &str) -> (String, Vec<(String, i64)>) {
    let mut parts = value.split(';');
    let name = parts.next().unwrap().trim().trim_matches('"').to_owned();
    let params = parts
        .map(|p| {
            let (k, v) = p.trim().split_once('=').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect();
    (name, params)
}

fn field(reply: &Reply, name: &str) -> (String, Vec<(String, i64)>) {
    let value = reply
        .header(name)
        .unwrap_or_else(|| panic!("missing {name}; status {} {:?}", reply.status, reply.headers));
    parse_field(value)
}

fn param(params: &[(String, i64)], key: &str) -> i64 {
    params.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key} in {params:?}")).1
}

async fn ratelimit_fields_on_success_and_refusal(backend: Backend) {
    let app = limited_app(backend).await;
    let user = app.new_user("rl-fields").await;
    for expected_remaining in [2, 1, 0] {
        let reply = app.login_raw(&user.email, &user.password).await;
        reply.data(200);
        let (name, params) = field(&reply, "ratelimit-policy");
        assert_eq!(name, "login");
        assert_eq!(param(&params, "q"), 3);
        assert_eq!(param(&params, "w"), 60);
        let (name, params) = field(&reply, "ratelimit");
        assert_eq!(name, "login");
        assert_eq!(param(&params, "r"), expected_remaining);
        let t = param(&params, "t");
        assert!((1..=60).contains(&t), "t={t}");
    }
    let reply = app.login_raw(&user.email, &user.password).await;
    refused(&reply);
    let (_, params) = field(&reply, "ratelimit");
    assert_eq!(param(&params, "r"), 0);
    let retry_after: i64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(param(&params, "t"), retry_after);
    let (_, params) = field(&reply, "ratelimit-policy");
    assert_eq!(param(&params, "q"), 3);

    // Failed logins carry them too, and so do the other limited endpoints.
    let other = app.new_user("rl-fields2").await;
    let reply = app.login_raw(&other.email, "wrong password!").await;
    reply.unauthorized();
    assert_eq!(field(&reply, "ratelimit").0, "login");
    let reply = app.me(Auth::Bearer(&other.token)).await;
    reply.data(200);
    assert_eq!(field(&reply, "ratelimit").0, "account");
    assert_eq!(field(&reply, "ratelimit-policy").0, "account");
    let reply =
        app.register_raw(&json!({"email": unique_email("rl-f"), "password": PASSWORD})).await;
    reply.data(201);
    assert_eq!(field(&reply, "ratelimit").0, "register");
    // Unlimited endpoints carry neither.
    let reply = app.get("/healthz", Auth::None).await;
    assert!(reply.header("ratelimit").is_none(), "{:?}", reply.headers);
    assert!(reply.header("ratelimit-policy").is_none(), "{:?}", reply.headers);
}

async fn ratelimit_policy_on_answers_that_were_not_counted(backend: Backend) {
    let app = limited_app(backend).await;
    // No credential: refused before anything is counted, but the policy is announced.
    let reply = app.me(Auth::None).await;
    reply.unauthorized();
    assert_eq!(field(&reply, "ratelimit-policy").0, "account");
    assert!(reply.header("ratelimit").is_none(), "{:?}", reply.headers);
    let reply = app.post_raw("/api/v1/auth/login", Auth::None, "{").await;
    reply.invalid("body");
    assert_eq!(field(&reply, "ratelimit-policy").0, "login");
}

async fn login_limit_is_per_email_and_per_address(backend: Backend) {
    let app = limited_app(backend).await;
    let alice = app.new_user("rl-alice").await;
    let bob = app.new_user("rl-bob").await;
    for _ in 0..3 {
        assert_eq!(
            app.login_from("203.0.113.1", &alice.email, "wrong password!").await.status,
            401
        );
    }
    refused(&app.login_from("203.0.113.1", &alice.email, &alice.password).await);
    // The same e-mail, in another spelling, is the same key.
    let shouted = alice.email.to_uppercase();
    refused(&app.login_from("203.0.113.1", &shouted, &alice.password).await);
    // Another e-mail from the same address, and the same e-mail from another address, pass.
    app.login_from("203.0.113.1", &bob.email, &bob.password).await.data(200);
    app.login_from("203.0.113.2", &alice.email, &alice.password).await.data(200);
}

async fn register_and_refresh_are_limited_per_address(backend: Backend) {
    let app = spawn_app_with(backend, small_limits).await;
    let mut refresh_tokens = Vec::new();
    for _ in 0..3 {
        let body = json!({"email": unique_email("rl-reg"), "password": PASSWORD});
        let data = app.post_from("198.51.100.1", "/api/v1/auth/register", &body).await.data(201);
        refresh_tokens.push(data["refresh_token"].as_str().unwrap().to_owned());
    }
    let body = json!({"email": unique_email("rl-reg"), "password": PASSWORD});
    let details = refused(&app.post_from("198.51.100.1", "/api/v1/auth/register", &body).await);
    assert_eq!(details["limit"], json!(3));
    // Another address may still register.
    let data = app.post_from("198.51.100.2", "/api/v1/auth/register", &body).await.data(201);
    refresh_tokens.push(data["refresh_token"].as_str().unwrap().to_owned());

    // Refresh: three per address, whatever the token.
    for token in &refresh_tokens[..3] {
        app.post_from("198.51.100.1", "/api/v1/auth/refresh", &json!({"refresh_token": token}))
            .await
            .data(200);
    }
    let reply = app
        .post_from(
            "198.51.100.1",
            "/api/v1/auth/refresh",
            &json!({"refresh_token": refresh_tokens[3]}),
        )
        .await;
    refused(&reply);
    assert_eq!(field(&reply, "ratelimit").0, "refresh");
    // The token was not used by the refused request: it still works from elsewhere.
    app.post_from(
        "198.51.100.3",
        "/api/v1/auth/refresh",
        &json!({"refresh_token": refresh_tokens[3]}),
    )
    .await
    .data(200);
}

async fn untrusted_peer_cannot_choose_its_address(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        small_limits_many_users(s);
        s.rate_limit.trusted_proxies = vec![];
    })
    .await;
    let user = app.new_user("rl-spoof").await;
    for i in 0..3 {
        let ip = format!("192.0.2.{}", i + 1);
        assert_eq!(app.login_from(&ip, &user.email, "wrong password!").await.status, 401);
    }
    refused(&app.login_from("192.0.2.99", &user.email, &user.password).await);
}

async fn account_limit_is_per_credential(backend: Backend) {
    let app = limited_app(backend).await;
    let alice = app.new_user("rl-acct-a").await;
    let bob = app.new_user("rl-acct-b").await;
    // A key of Alice's, made before her session runs out (creating it counts too).
    let key = app.key(&alice.token, &["read"]).await;
    app.me(Auth::Bearer(&alice.token)).await.data(200);
    app.list_keys(Auth::Bearer(&alice.token)).await.data(200);
    refused(&app.me(Auth::Bearer(&alice.token)).await);
    refused(&app.list_keys(Auth::Bearer(&alice.token)).await);
    refused(&app.logout(&alice.token, None).await);
    // Bob, Alice's key and Alice's other session each have their own quota.
    app.me(Auth::Bearer(&bob.token)).await.data(200);
    for _ in 0..3 {
        app.me(Auth::Bearer(&key)).await.data(200);
    }
    refused(&app.me(Auth::Bearer(&key)).await);
    let second = app.login(&alice.email, &alice.password).await;
    let token = second["token"].as_str().unwrap();
    app.me(Auth::Bearer(token)).await.data(200);
}

async fn ai_limit_is_per_api_key(backend: Backend) {
    let app = limited_app(backend).await;
    let alice = app.new_user("rl-ai-a").await;
    let bob = app.new_user("rl-ai-b").await;
    let key1 = app.key(&alice.token, &["ai_gateway"]).await;
    let key2 = app.key(&alice.token, &["ai_gateway"]).await;
    let key3 = app.key(&bob.token, &["ai_gateway"]).await;
    for _ in 0..2 {
        let reply = app.chat(Auth::Bearer(&key1), &chat_body("echo", "hi")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(field(&reply, "ratelimit").0, "ai");
    }
    let reply = app.get("/api/v1/ai/models", Auth::Bearer(&key1)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reply = app.chat(Auth::Bearer(&key1), &chat_body("echo", "hi")).await;
    let details = refused(&reply);
    assert_eq!(details["limit"], json!(3));
    assert!(reply.header("retry-after").is_some());
    refused(&app.get("/api/v1/ai/models", Auth::Bearer(&key1)).await);
    // Another key of the same user, and another user's key, are not affected.
    for key in [&key2, &key3] {
        let reply = app.chat(Auth::Bearer(key), &chat_body("echo", "hi")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
}

async fn limited_client_passes_again_after_retry_after(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        small_limits_many_users(s);
        s.rate_limit.policies.login = PolicyConfig::new(2, 2);
    })
    .await;
    let user = app.new_user("rl-again").await;
    let reply = exhaust_login(&app, &user, 2).await;
    refused(&reply);
    let retry_after: u64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry_after, 1);
    // Real time: the node's memory limiter (governor) measures its quotas on the monotonic
    // clock, not on the settings' `Clock`.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    app.login(&user.email, &user.password).await;
}

async fn disabled_rate_limiting_answers_no_429_and_no_fields(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        small_limits(s);
        s.rate_limit.enabled = false;
    })
    .await;
    let user = app.new_user("rl-off").await;
    for _ in 0..6 {
        let reply = app.login_raw(&user.email, &user.password).await;
        reply.data(200);
        assert!(reply.header("ratelimit").is_none(), "{:?}", reply.headers);
        assert!(reply.header("ratelimit-policy").is_none(), "{:?}", reply.headers);
    }
    for _ in 0..6 {
        app.me(Auth::Bearer(&user.token)).await.data(200);
        app.new_user("rl-off-more").await;
    }
}

async fn one_policy_can_be_switched_off(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        small_limits_many_users(s);
        s.rate_limit.policies.login = PolicyConfig::off();
    })
    .await;
    let user = app.new_user("rl-one-off").await;
    for _ in 0..6 {
        let reply = app.login_raw(&user.email, &user.password).await;
        reply.data(200);
        // Only `login_ip` (per address across e-mails) still counts logins.
        let state = reply.header("ratelimit").unwrap_or_default();
        assert!(state.starts_with("\"login_ip\""), "{:?}", reply.headers);
    }
    for _ in 0..3 {
        app.me(Auth::Bearer(&user.token)).await.data(200);
    }
    refused(&app.me(Auth::Bearer(&user.token)).await);
}

#[test]
fn configuration_from_toml_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aigw.toml");
    std::fs::write(
        &path,
        r#"
[rate_limit]
backend = "redis"
redis_url = "redis://cache.internal:6379/2"
trusted_proxies = ["10.0.0.0/8", "192.0.2.7"]
forwarded_header = "forwarded"
[rate_limit.policies.login]
limit = 5
[rate_limit.policies.ai]
limit = 1200
window_secs = 30
[rate_limit.policies.refresh]
enabled = false
"#,
    )
    .unwrap();
    let env = [
        ("AIGW__RATE_LIMIT__ENABLED", "false"),
        ("AIGW__RATE_LIMIT__POLICIES__ACCOUNT__WINDOW_SECS", "30"),
    ];
    let settings = Settings::load_from(Some(&path), Some(&env));
    let rl = settings.unwrap().rate_limit;
    use aigw_service::rate_limit::ForwardedHeader;
    use aigw_service::Policy;
    assert!(!rl.enabled);
    assert_eq!(rl.backend, RateLimitBackend::Redis);
    assert_eq!(rl.redis_url, "redis://cache.internal:6379/2");
    assert_eq!(rl.trusted_proxies, vec!["10.0.0.0/8", "192.0.2.7"]);
    assert_eq!(rl.forwarded_header, ForwardedHeader::Forwarded);
    let login = rl.policies.get(Policy::Login);
    assert_eq!((login.enabled, login.limit, login.window_secs), (true, 5, 60));
    let ai = rl.policies.get(Policy::Ai);
    assert_eq!((ai.limit, ai.window_secs), (1200, 30));
    assert!(!rl.policies.get(Policy::Refresh).enabled);
    let account = rl.policies.get(Policy::Account);
    assert_eq!((account.limit, account.window_secs), (120, 30));
    let register = rl.policies.get(Policy::Register);
    assert_eq!((register.limit, register.window_secs), (10, 3600));
}

#[test]
fn defaults_are_the_documented_ones() {
    use aigw_service::Policy;
    let rl = Settings::default().rate_limit;
    assert!(rl.enabled);
    assert_eq!(rl.backend, RateLimitBackend::Memory);
    assert!(rl.trusted_proxies.is_empty());
    let quota = |p| {
        let q = rl.policies.get(p);
        (q.enabled, q.limit, q.window_secs)
    };
    assert_eq!(quota(Policy::Register), (true, 10, 3600));
    assert_eq!(quota(Policy::Login), (true, 10, 60));
    assert_eq!(quota(Policy::Refresh), (true, 60, 60));
    assert_eq!(quota(Policy::Account), (true, 120, 60));
    assert_eq!(quota(Policy::Ai), (true, 600, 60));
}

// ---------------------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------------------

/// A `redis-server` of this test on a free port; killed when dropped.
pub(crate) struct RedisServer {
    port: u16,
    child: Option<Child>,
}

const REDIS_SERVER: &str = "/usr/bin/redis-server";

pub(crate) fn redis_binary() -> Option<String> {
    let candidates = [std::env::var("AIGW_TEST_REDIS_SERVER").ok(), Some(REDIS_SERVER.into())];
    for candidate in candidates.into_iter().flatten() {
        if std::path::Path::new(&candidate).exists() {
            return Some(candidate);
        }
    }
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    found.then(|| "redis-server".to_owned())
}

impl RedisServer {
    /// Starts one, or returns `None` after a loud message when `redis-server` is not
    /// installed (a failure under `CI=true`).
    pub(crate) fn start() -> Option<Self> {
        let Some(binary) = redis_binary() else {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true but redis-server is not installed: the Redis tests cannot run");
            }
            eprintln!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !!! redis-server not found: SKIPPING this Redis rate-limit test.     !!!\n\
                 !!! Install Redis (or set AIGW_TEST_REDIS_SERVER) to run it.         !!!\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
            return None;
        };
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut server = Self { port, child: None };
        server.spawn(&binary);
        Some(server)
    }

    fn spawn(&mut self, binary: &str) {
        let child = Command::new(binary)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        self.child = Some(child);
        let what = format!("redis-server did not start on {}", self.port);
        eventually_blocking(&what, Duration::from_secs(10), || listening(self.port));
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits until it is gone.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let binary = redis_binary().unwrap();
        self.spawn(&binary);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) fn use_redis(s: &mut Settings, redis: &RedisServer) {
    s.rate_limit.backend = RateLimitBackend::Redis;
    s.rate_limit.redis_url = redis.url();
    s.rate_limit.redis_retry_secs = 1;
    s.rate_limit.redis_key_prefix = format!("aigw-test:{}:", uuid::Uuid::now_v7().simple());
}

async fn redis_backend_enforces_the_same_contract(backend: Backend) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let app = spawn_app_with(backend, |s| {
        small_limits_many_users(s);
        use_redis(s, &redis);
    })
    .await;
    let user = app.new_user("rl-redis").await;
    for expected in [2, 1, 0] {
        let reply = app.login_raw(&user.email, "wrong password!").await;
        reply.unauthorized();
        assert_eq!(param(&field(&reply, "ratelimit").1, "r"), expected);
    }
    let before = now();
    let reply = app.login_raw(&user.email, &user.password).await;
    let details = refused(&reply);
    assert_eq!(details["limit"], json!(3));
    assert_eq!(details["remaining"], json!(0));
    let reset = details["reset"].as_i64().unwrap();
    assert!(reset > before && reset <= before + 22, "reset {reset}, now {before}");
    let retry_after: u64 = reply.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry_after), "Retry-After {retry_after}");
    // Another e-mail is untouched.
    let other = app.new_user("rl-redis-2").await;
    let ready = app.get("/readyz", Auth::None).await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    assert_eq!(ready.json()["redis"], json!("ok"));
    app.login(&other.email, &other.password).await;
}

/// Two nodes (one PostgreSQL database, one Redis). Only PostgreSQL, because two nodes on
/// one SQLite file is not a supported deployment. The path contains `postgres::`, so
/// `scripts/test.sh` skips these without PostgreSQL.
mod two_nodes {
    pub(crate) mod postgres {
        use super::super::*;

        async fn two_nodes(redis: &RedisServer) -> (TestApp, TestApp) {
            let prefix = format!("aigw-test:{}:", uuid::Uuid::now_v7().simple());
            let a_prefix = prefix.clone();
            let a = spawn_app_with(Backend::Postgres, |s| {
                small_limits_many_users(s);
                use_redis(s, redis);
                s.rate_limit.redis_key_prefix = a_prefix;
            })
            .await;
            let b = a
                .spawn_sibling(|s| {
                    small_limits_many_users(s);
                    use_redis(s, redis);
                    s.rate_limit.redis_key_prefix = prefix;
                })
                .await;
            (a, b)
        }

        /// Wrong-password logins for `email`, alternating between the nodes, until the first
        /// 429; returns how many were allowed. Fails on any 5xx.
        async fn allowed_before_refusal(nodes: &[&TestApp], email: &str, max: usize) -> usize {
            for i in 0..max {
                let node = nodes[i % nodes.len()];
                let started = Instant::now();
                let reply = node.login_raw(email, "wrong password!").await;
                assert!(reply.status < 500, "5xx from node {}: {}", i % nodes.len(), reply.text);
                assert!(
                    started.elapsed() < Duration::from_secs(3),
                    "a login took {:?}",
                    started.elapsed()
                );
                match reply.status {
                    401 => {}
                    429 => {
                        refused(&reply);
                        return i;
                    }
                    other => panic!("unexpected {other}: {}", reply.text),
                }
            }
            max
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres_login_limit_is_shared_by_two_nodes_through_redis() {
            let Some(redis) = RedisServer::start() else {
                return;
            };
            let (a, b) = two_nodes(&redis).await;
            let user = a.new_user("rl-2n").await;
            // One node alone trips after exactly `limit` (3) attempts...
            let one = allowed_before_refusal(&[&a], &user.email, 10).await;
            assert_eq!(one, 3);
            // ...and so do both nodes taken in turns, for another e-mail.
            let other = b.new_user("rl-2n-b").await;
            let both = allowed_before_refusal(&[&a, &b], &other.email, 10).await;
            assert_eq!(both, 3, "two nodes must share one quota");
            // Refused on both nodes now, even with the right password.
            refused(&a.login_raw(&other.email, &other.password).await);
            refused(&b.login_raw(&other.email, &other.password).await);
            drop(b);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres_redis_outage_falls_back_to_each_nodes_memory_and_recovers() {
            let Some(mut redis) = RedisServer::start() else {
                return;
            };
            let (a, b) = two_nodes(&redis).await;
            let user = a.new_user("rl-outage").await;
            assert_eq!(allowed_before_refusal(&[&a, &b], &user.email, 10).await, 3);

            redis.kill();
            // No 5xx, and each node now counts on its own: a fresh e-mail gets `limit` attempts
            // per node (3 + 3 when alternating), then 429.
            let fresh = a.new_user("rl-outage-2").await;
            let allowed = allowed_before_refusal(&[&a, &b], &fresh.email, 20).await;
            assert_eq!(allowed, 6, "each node must limit on its own while Redis is down");
            // The other endpoints keep working, and the nodes stay ready.
            a.me(Auth::Bearer(&fresh.token)).await.data(200);
            b.me(Auth::Bearer(&fresh.token)).await.data(200);
            let ready = b.get("/readyz", Auth::None).await;
            assert_eq!(ready.status, 200, "{}", ready.text);
            assert_eq!(ready.json()["redis"], json!("unreachable"));

            // Redis comes back: within a few seconds, limits are shared again.
            redis.restart();
            let shared = || async {
                let probe = a.new_user("rl-outage-3").await;
                match allowed_before_refusal(&[&a, &b], &probe.email, 20).await {
                    3 => Ok(()),
                    allowed => Err(format!("a run allowed {allowed}")),
                }
            };
            eventually("nodes did not return to Redis", Duration::from_secs(15), shared).await;
            drop(b);
        }
    }
}

/// Rate limiting adds headers, but never ones that tell an unknown e-mail from a wrong
/// password.
async fn login_failures_stay_indistinguishable_with_limits_on(backend: Backend) {
    let app = spawn_app_with(backend, small_limits).await;
    let user = app.new_user("enumrl").await;
    let wrong = app.login_raw(&user.email, "not the password").await;
    let unknown = app.login_raw(&unique_email("nobody"), "not the password").await;
    wrong.unauthorized();
    unknown.unauthorized();
    assert_eq!(wrong.json(), unknown.json());
    assert_eq!(wrong.headers_but_ids(), unknown.headers_but_ids());
}
