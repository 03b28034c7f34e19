//! Shared harness of the black-box integration tests: spawns the real server on a random
//! port against a fresh SQLite file or a fresh PostgreSQL database, drives it over HTTP with
//! reqwest, and offers a fake OpenAI-compatible upstream.
#![allow(unreachable_pub)]

pub mod browser;
pub mod eventually;
pub mod flaky_upstream;
pub mod gateway_calls;
pub mod keep_alive;
pub mod oidc;
pub mod proxy;
pub mod smtp;
pub mod upstream;
pub mod upstream_embeddings;
pub mod upstream_messages;
pub mod upstream_responses;
pub mod webhook_receiver;

pub use eventually::{eventually, eventually_blocking, listening};

use aigw_http::settings::Settings;
use aigw_http::startup::Application;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::path::PathBuf;

/// Generates each listed `async fn name(backend: Backend)` once per backend, in modules
/// `sqlite` and `postgres` (so `cargo test -- --skip postgres` skips PostgreSQL).
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Postgres).await
                }
            )*
        }
    };
}

/// The storage backend a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
pub const PASSWORD: &str = "correct horse battery staple";
pub const JWT_SECRET_LEN: usize = 40;

/// Drops the per-test PostgreSQL database when the test ends.
#[derive(Debug)]
struct PgDatabase {
    admin_url: String,
    name: String,
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        use diesel::{Connection, RunQueryDsl};
        if let Ok(mut conn) = diesel::PgConnection::establish(&self.admin_url) {
            let _ = diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            ))
            .execute(&mut conn);
        }
    }
}

/// Replaces the database name of a PostgreSQL URL.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = &base[scheme_end..];
    let prefix = match host_part.find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{prefix}/{db}?{q}"),
        None => format!("{prefix}/{db}"),
    }
}

/// The PostgreSQL admin URL of the tests: `AIGW_TEST_DATABASE_URL` (else [`DEFAULT_PG_URL`]),
/// with `sslmode=disable` added when it sets no `sslmode`.
///
/// Without it libpq negotiates TLS with a local server that offers it (Debian's does), and a
/// test process may exit while a pool thread is still in a TLS handshake: OpenSSL's exit
/// handler frees its global locks under that thread, which then dies with SIGSEGV after the
/// test has passed (seen in 4 of 602 tests on a slow machine; the core's stack ends in
/// `EVP_PKEY_generate` from `PQconnectPoll`). Tests that need TLS set `sslmode` themselves.
pub fn pg_admin_url() -> String {
    let url = std::env::var("AIGW_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_PG_URL.to_owned());
    if url.contains("sslmode=") {
        return url;
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=disable")
}

fn create_pg_database() -> (String, PgDatabase) {
    use diesel::{Connection, RunQueryDsl};
    let admin_url = pg_admin_url();
    let mut conn = match diesel::PgConnection::establish(&admin_url) {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL is unreachable at {} ({e}). The postgres tests need a \
             server: set AIGW_TEST_DATABASE_URL to a reachable postgres:// URL (a user that \
             may CREATE DATABASE), or run scripts/test.sh, which skips them with \
             `--skip postgres` when no PostgreSQL exists.",
            aigw_domain::redact::redact_url(&admin_url)
        ),
    };
    let name = format!("aigw_test_{}", uuid::Uuid::now_v7().simple());
    diesel::sql_query(format!("CREATE DATABASE \"{name}\"")).execute(&mut conn).unwrap_or_else(
        |e| {
            panic!(
                "CREATE DATABASE {name} failed on {}: {e}",
                aigw_domain::redact::redact_url(&admin_url)
            )
        },
    );
    let url = with_database(&admin_url, &name);
    (url, PgDatabase { admin_url, name })
}

/// Runs one SQL statement as the PostgreSQL admin user (`AIGW_TEST_DATABASE_URL`).
pub fn pg_admin(sql: &str) {
    use diesel::{Connection, RunQueryDsl};
    let url = pg_admin_url();
    let mut conn = diesel::PgConnection::establish(&url).unwrap();
    diesel::sql_query(sql).execute(&mut conn).unwrap();
}

/// The database name of a PostgreSQL URL.
pub fn pg_db_name(url: &str) -> String {
    let path = url.rsplit('/').next().unwrap();
    path.split('?').next().unwrap().to_owned()
}

/// Makes a test's own PostgreSQL database refuse connections and ends the open ones (the
/// machine's server and the other tests' databases are untouched), or lets it accept them
/// again.
pub async fn pg_set_reachable(database_url: &str, reachable: bool) {
    let name = pg_db_name(database_url);
    tokio::task::spawn_blocking(move || {
        pg_admin(&format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS {reachable}"));
        if !reachable {
            pg_admin(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            ));
        }
    })
    .await
    .unwrap();
}

/// Default settings of a test app: random port, fresh data folder, fast argon2.
pub fn test_settings(data_dir: PathBuf, database_url: String) -> Settings {
    let mut settings = Settings::default();
    settings.server.listen = "127.0.0.1:0".into();
    settings.server.data_dir = data_dir;
    settings.database.url = Some(database_url);
    settings.auth.jwt_secret = Some(secrecy::SecretString::from("x".repeat(JWT_SECRET_LEN)));
    settings.auth.argon2.memory_kib = 8192;
    settings.auth.argon2.iterations = 1;
    settings.gateway.upstream_timeout_secs = 30;
    // The demonstration model stays out of the model lists the tests compare
    // (tests/usage/kinds.rs turns it on).
    settings.gateway.demo_model = false;
    // Every test app is its own client at 127.0.0.1, so rate limits are off unless a test
    // turns them on (tests/rate_limit_contract.rs).
    settings.rate_limit.enabled = false;
    // Most tests read calls back one by one from `GET /usage/requests`: per-request records
    // on (the sums-only default is tested in tests/usage/ledger.rs).
    settings.usage.request_records = aigw_service::usage::config::RequestRecords::Database;
    settings
}

/// A running server.
#[derive(Debug)]
pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub backend: Backend,
    pub database_url: String,
    _pg: Option<PgDatabase>,
    _dir: tempfile::TempDir,
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

pub async fn spawn_app_with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_routed(backend, |url| url.to_owned(), tweak).await
}

/// [`spawn_app_with`] on an adjustable [`aigw_service::Clock`], returned for the test to move
/// (share it with a sibling: `spawn_sibling(|s| s.clock = clock.clone())`).
pub async fn spawn_app_with_clock(
    backend: Backend,
    tweak: impl FnOnce(&mut Settings),
) -> (TestApp, aigw_service::Clock) {
    let clock = aigw_service::Clock::adjustable();
    let app = spawn_app_with(backend, |s| {
        s.clock = clock.clone();
        tweak(s);
    })
    .await;
    (app, clock)
}

/// Moves `clock` forward by `millis` milliseconds.
pub fn advance(clock: &aigw_service::Clock, millis: i64) {
    assert!(clock.advance(chrono::Duration::milliseconds(millis)), "a system clock cannot move");
}

/// The host and port of a `postgres://` URL (for a proxy in front of it).
pub fn pg_host_port(url: &str) -> std::net::SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let authority =
        if authority.contains(':') { authority.to_owned() } else { format!("{authority}:5432") };
    let authority = authority.replace("localhost", "127.0.0.1");
    authority.parse().unwrap_or_else(|e| panic!("{authority}: {e}"))
}

/// `url` with its host and port replaced by `127.0.0.1:port`.
pub fn pg_via_port(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (format!("{u}@"), r),
        None => (String::new(), rest),
    };
    let tail_at = rest.find(['/', '?']).unwrap_or(rest.len());
    format!("{scheme}://{userinfo}127.0.0.1:{port}{}", &rest[tail_at..])
}

/// Like [`spawn_app_with`], but the server reaches the database through `route(url)` (e.g. a
/// test-owned proxy in front of PostgreSQL). `TestApp::database_url` stays the direct URL.
pub async fn spawn_app_routed(
    backend: Backend,
    route: impl FnOnce(&str) -> String,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, pg) = match backend {
        Backend::Sqlite => (format!("sqlite://{}", dir.path().join("aigw.db").display()), None),
        Backend::Postgres => {
            let (url, guard) = tokio::task::spawn_blocking(create_pg_database)
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            (url, Some(guard))
        }
    };
    let routed = route(&url);
    start(backend, dir, url, pg, |s| {
        s.database.url = Some(routed);
        tweak(s);
    })
    .await
}

async fn start(
    backend: Backend,
    dir: tempfile::TempDir,
    url: String,
    pg: Option<PgDatabase>,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    let mut settings = test_settings(dir.path().join("data"), url.clone());
    tweak(&mut settings);
    let keep_alive = settings.server.keep_alive_secs;
    let app = Application::build(settings)
        .await
        .unwrap_or_else(|e| panic!("Application::build failed: {e:#}"));
    let port = app.port();
    tokio::spawn(app.run_until_stopped());
    // Idle connections are dropped before the server's keep-alive closes them (5 s by
    // default), so that a call never goes out on a connection the server is closing.
    let idle = std::time::Duration::from_secs(keep_alive.saturating_sub(1).max(1));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(idle)
        .build()
        .unwrap();
    TestApp {
        address: format!("http://127.0.0.1:{port}"),
        client,
        backend,
        database_url: url,
        _pg: pg,
        _dir: dir,
    }
}

/// A server on the PostgreSQL database at `url`, which the test owns and drops (a cluster of
/// its own: `failover`).
pub async fn spawn_app_at(url: &str, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    start(Backend::Postgres, dir, url.to_owned(), None, tweak).await
}

impl TestApp {
    /// A second server on the same database (another gateway node), with its own settings.
    /// It must be dropped before `self` (it does not own the database).
    pub async fn spawn_sibling(&self, tweak: impl FnOnce(&mut Settings)) -> TestApp {
        let dir = tempfile::tempdir().expect("tempdir");
        start(self.backend, dir, self.database_url.clone(), None, tweak).await
    }
}

/// A fully read response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    /// The headers, sorted, without the ones that differ on every answer (`x-request-id`,
    /// `date`): for checking that two answers cannot be told apart.
    pub fn headers_but_ids(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .headers
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "x-request-id" | "date"))
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned()))
            .collect();
        v.sort();
        v
    }

    pub async fn from_response(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("reading the body");
        let reply = Self { status, headers, text };
        let request_id = reply.header("x-request-id");
        assert!(
            request_id.is_some_and(|v| !v.is_empty()),
            "every response must carry an x-request-id header; got {reply:?}"
        );
        reply
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| {
            panic!("body is not JSON ({e}): status {} {}", self.status, self.text)
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status and the success envelope; returns `data`.
    pub fn data(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text);
        let body = self.json();
        assert_eq!(body["success"], json!(true), "body: {body}");
        assert!(body["data"].is_object(), "data must be an object: {body}");
        body["data"].clone()
    }

    /// Asserts status, error envelope and code; returns `error` (with `details`).
    pub fn error(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text);
        let body = self.json();
        assert_eq!(body["success"], json!(false), "body: {body}");
        let error = &body["error"];
        assert_eq!(error["code"], json!(code), "body: {body}");
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "error.message must be a non-empty string: {body}"
        );
        assert!(error["details"].is_object(), "error.details must be an object: {body}");
        let ct = self.header("content-type").unwrap_or_default();
        assert!(ct.starts_with("application/json"), "error content-type: {ct}");
        error.clone()
    }

    /// 400 `invalid_request` naming `field`; returns the error.
    pub fn invalid(&self, field: &str) -> Value {
        let error = self.error(400, "invalid_request");
        assert_eq!(error["details"]["field"], json!(field), "error: {error}");
        assert!(
            error["details"]["issue"].as_str().is_some_and(|s| !s.is_empty()),
            "details.issue must be a non-empty string: {error}"
        );
        error
    }

    /// 401 `unauthorized` with a hint and `WWW-Authenticate: Bearer…`.
    pub fn unauthorized(&self) -> Value {
        let error = self.error(401, "unauthorized");
        assert!(
            error["details"]["hint"].as_str().is_some_and(|s| !s.is_empty()),
            "details.hint must be a non-empty string: {error}"
        );
        let www = self.header("www-authenticate").unwrap_or_default();
        assert!(www.starts_with("Bearer"), "401 needs WWW-Authenticate: Bearer…, got {www:?}");
        error
    }

    /// 403 `forbidden` with `required` and `current`.
    pub fn forbidden(&self, required: &str, current: &str) -> Value {
        let error = self.error(403, "forbidden");
        assert_eq!(error["details"]["required"], json!(required), "error: {error}");
        assert_eq!(error["details"]["current"], json!(current), "error: {error}");
        error
    }

    /// 404 `not_found` with `resource` and `id`.
    pub fn not_found(&self, resource: &str, id: &str) -> Value {
        let error = self.error(404, "not_found");
        assert_eq!(error["details"]["resource"], json!(resource), "error: {error}");
        assert_eq!(error["details"]["id"], json!(id), "error: {error}");
        error
    }
}

/// How a request authenticates.
#[derive(Debug, Clone, Copy)]
pub enum Auth<'a> {
    None,
    /// `Authorization: Bearer <x>`.
    Bearer(&'a str),
    /// `Authorization: <x>` verbatim.
    Raw(&'a str),
}

/// A registered user and its first session.
#[derive(Debug, Clone)]
pub struct User {
    pub id: String,
    pub email: String,
    pub password: String,
    pub token: String,
    pub refresh_token: String,
}

pub fn unique_email(tag: &str) -> String {
    format!("{tag}-{}@example.com", uuid::Uuid::now_v7().simple())
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        auth: Auth<'_>,
    ) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, self.url(path));
        match auth {
            Auth::None => builder,
            Auth::Bearer(t) => builder.header("authorization", format!("Bearer {t}")),
            Auth::Raw(t) => builder.header("authorization", t),
        }
    }

    pub async fn send(&self, builder: reqwest::RequestBuilder) -> Reply {
        Reply::from_response(builder.send().await.expect("request failed")).await
    }

    pub async fn get(&self, path: &str, auth: Auth<'_>) -> Reply {
        self.send(self.request(reqwest::Method::GET, path, auth)).await
    }

    pub async fn delete(&self, path: &str, auth: Auth<'_>) -> Reply {
        self.send(self.request(reqwest::Method::DELETE, path, auth)).await
    }

    pub async fn post(&self, path: &str, auth: Auth<'_>, body: &Value) -> Reply {
        self.send(self.request(reqwest::Method::POST, path, auth).json(body)).await
    }

    /// POST with no body at all.
    pub async fn post_empty(&self, path: &str, auth: Auth<'_>) -> Reply {
        self.send(self.request(reqwest::Method::POST, path, auth)).await
    }

    /// POST with a raw body and `Content-Type: application/json`.
    pub async fn post_raw(
        &self,
        path: &str,
        auth: Auth<'_>,
        body: impl Into<reqwest::Body>,
    ) -> Reply {
        self.send(
            self.request(reqwest::Method::POST, path, auth)
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    pub async fn register_raw(&self, body: &Value) -> Reply {
        self.post("/api/v1/auth/register", Auth::None, body).await
    }

    /// Registers and returns `data` (asserting 201).
    pub async fn register(&self, email: &str, password: &str, name: Option<&str>) -> Value {
        let mut body = json!({"email": email, "password": password});
        if let Some(n) = name {
            body["name"] = json!(n);
        }
        self.register_raw(&body).await.data(201)
    }

    /// Registers a fresh user with a unique e-mail.
    pub async fn new_user(&self, tag: &str) -> User {
        let email = unique_email(tag);
        let data = self.register(&email, PASSWORD, None).await;
        User {
            id: data["user"]["id"].as_str().unwrap().to_owned(),
            email,
            password: PASSWORD.to_owned(),
            token: data["token"].as_str().unwrap().to_owned(),
            refresh_token: data["refresh_token"].as_str().unwrap().to_owned(),
        }
    }

    pub async fn login_raw(&self, email: &str, password: &str) -> Reply {
        self.post("/api/v1/auth/login", Auth::None, &json!({"email": email, "password": password}))
            .await
    }

    /// Logs in and returns `data` (asserting 200).
    pub async fn login(&self, email: &str, password: &str) -> Value {
        self.login_raw(email, password).await.data(200)
    }

    pub async fn refresh_raw(&self, refresh_token: &str) -> Reply {
        self.post("/api/v1/auth/refresh", Auth::None, &json!({"refresh_token": refresh_token}))
            .await
    }

    pub async fn me(&self, auth: Auth<'_>) -> Reply {
        self.get("/api/v1/auth/me", auth).await
    }

    pub async fn create_key_raw(&self, auth: Auth<'_>, body: &Value) -> Reply {
        self.post("/api/v1/auth/api-keys", auth, body).await
    }

    /// Creates a key with an access token; returns `data` (asserting 201).
    pub async fn create_key(
        &self,
        token: &str,
        permissions: &[&str],
        expires_at: Option<&str>,
    ) -> Value {
        let mut body = json!({"name": "test key", "permissions": permissions});
        if let Some(e) = expires_at {
            body["expires_at"] = json!(e);
        }
        self.create_key_raw(Auth::Bearer(token), &body).await.data(201)
    }

    /// Creates a key and returns only its secret.
    pub async fn key(&self, token: &str, permissions: &[&str]) -> String {
        self.create_key(token, permissions, None).await["key"].as_str().unwrap().to_owned()
    }

    pub async fn list_keys(&self, auth: Auth<'_>) -> Reply {
        self.get("/api/v1/auth/api-keys", auth).await
    }

    pub async fn revoke_key(&self, auth: Auth<'_>, id: &str) -> Reply {
        self.post_empty(&format!("/api/v1/auth/api-keys/{id}/revoke"), auth).await
    }

    pub async fn delete_key(&self, auth: Auth<'_>, id: &str) -> Reply {
        self.delete(&format!("/api/v1/auth/api-keys/{id}"), auth).await
    }

    pub async fn logout(&self, token: &str, body: Option<&Value>) -> Reply {
        match body {
            Some(b) => self.post("/api/v1/auth/logout", Auth::Bearer(token), b).await,
            None => self.post_empty("/api/v1/auth/logout", Auth::Bearer(token)).await,
        }
    }

    pub async fn chat(&self, auth: Auth<'_>, body: &Value) -> Reply {
        self.post("/api/v1/ai/chat/completions", auth, body).await
    }
}

/// A minimal chat request for `model`.
pub fn chat_body(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// Base64url without padding (for forging JWTs).
pub fn b64url(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Decodes base64url (no padding).
pub fn b64url_decode(input: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'-' => 62,
            b'_' => 63,
            _ => panic!("not base64url: {c}"),
        }
    };
    let bytes = input.trim_end_matches('=').as_bytes();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        let produced = chunk.len().saturating_sub(1);
        for i in 0..produced {
            out.push(((n >> (16 - 8 * i)) & 0xff) as u8);
        }
    }
    out
}

/// The JSON of one JWT segment (0 = header, 1 = payload).
pub fn jwt_part(token: &str, index: usize) -> Value {
    let part = token.split('.').nth(index).expect("JWT segment");
    serde_json::from_slice(&b64url_decode(part)).expect("JWT segment JSON")
}

/// `key` with the character at `index` replaced by another base62 character.
pub fn flip_char(key: &str, index: usize) -> String {
    let mut chars: Vec<char> = key.chars().collect();
    chars[index] = if chars[index] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

/// RFC 3339 timestamp `secs` seconds from now.
pub fn in_secs(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Asserts `s` is an RFC 3339 UTC timestamp ending in `Z`.
pub fn assert_timestamp(value: &Value) {
    let s = value.as_str().unwrap_or_else(|| panic!("timestamp must be a string: {value}"));
    assert!(s.ends_with('Z'), "timestamp must be UTC with Z: {s}");
    chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("not RFC 3339 ({e}): {s}"));
}

/// SHA-256 (FIPS 180-4), enough to sign test JWTs without another dependency.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                block[4 * i],
                block[4 * i + 1],
                block[4 * i + 2],
                block[4 * i + 3],
            ]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, word) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&sha256(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
    inner.extend_from_slice(message);
    let inner_hash = sha256(&inner);
    let mut outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
    outer.extend_from_slice(&inner_hash);
    sha256(&outer)
}

/// The JWT secret every test app uses (unless a test overrides it).
pub fn test_jwt_secret() -> String {
    "x".repeat(JWT_SECRET_LEN)
}

/// Signs `header.payload` with HS256 and the test secret.
pub fn sign_jwt(header: &Value, claims: &Value) -> String {
    let signing_input = format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    );
    let sig = hmac_sha256(test_jwt_secret().as_bytes(), signing_input.as_bytes());
    format!("{signing_input}.{}", b64url(&sig))
}

/// Sends each `(label, Authorization value)` to `GET /auth/me` and asserts every one is a
/// proper 401; reports all the labels that were not, at once.
pub async fn expect_all_unauthorized(app: &TestApp, cases: &[(String, String)]) {
    let mut failures = Vec::new();
    for (label, header) in cases {
        let reply = app.me(Auth::Raw(header)).await;
        if reply.status == 401 {
            reply.unauthorized();
        } else {
            failures.push(format!("{label}: {} {}", reply.status, reply.text));
        }
    }
    assert!(failures.is_empty(), "expected 401 unauthorized for:\n{}", failures.join("\n"));
}
