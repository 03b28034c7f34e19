//! HTTP details found in review: credentials are checked before bodies, 405 names `Allow`,
//! `HEAD` works where `GET` does, an empty logout body is no body, error texts carry no
//! serde punctuation, login/refresh 401s are not `invalid_token`, CORS only when configured,
//! the database follows `server.data_dir`, and the error envelope starts with `success`.

use crate::common;

use aigw_http::settings::Settings;
use aigw_http::startup::Application;
use common::{spawn_app, spawn_app_with, Auth, Backend};
use serde_json::json;

async fn credential_and_permission_errors_win_over_body_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("order").await;
    let created = app.create_key(&user.token, &["read"], None).await;
    let key = created["key"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();

    // A key may never create keys: 403, whatever the body.
    for _ in 0..10 {
        let reply = app.post_raw("/api/v1/auth/api-keys", Auth::Raw(&key), "{\"name\":").await;
        reply.forbidden("access_token", "api_key");
    }
    // A JWT may not chat: 403 before the body is looked at.
    let reply = app.post_raw("/api/v1/ai/chat/completions", Auth::Bearer(&user.token), "[").await;
    reply.forbidden("api_key", "access_token");
    // A key without ai_gateway: 403, not 400.
    let reply = app.post_raw("/api/v1/ai/chat/completions", Auth::Raw(&key), "{").await;
    reply.forbidden("ai_gateway", "read");

    // A revoked key: 401, whatever the body.
    app.revoke_key(Auth::Bearer(&user.token), &id).await.data(200);
    for _ in 0..10 {
        let reply =
            app.post_raw("/api/v1/ai/chat/completions", Auth::Raw(&key), "{\"model\":").await;
        reply.unauthorized();
    }
    // An API key logging out: 403 even with a malformed body.
    let writer = app.key(&user.token, &["write", "read"]).await;
    let reply = app.post_raw("/api/v1/auth/logout", Auth::Raw(&writer), "{").await;
    reply.forbidden("access_token", "api_key");
}

async fn method_not_allowed_names_allow_and_head_works(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app.send(app.request(reqwest::Method::PUT, "/api/v1/auth/login", Auth::None)).await;
    reply.error(405, "method_not_allowed");
    assert_eq!(reply.header("allow"), Some("POST"));

    let reply =
        app.send(app.request(reqwest::Method::PATCH, "/api/v1/auth/api-keys", Auth::None)).await;
    reply.error(405, "method_not_allowed");
    let allow = reply.header("allow").unwrap_or_default().to_owned();
    for m in ["GET", "HEAD", "POST"] {
        assert!(allow.split(", ").any(|a| a == m), "{allow}");
    }

    for path in ["/healthz", "/readyz", "/api/v1/openapi.json"] {
        let reply = app.send(app.request(reqwest::Method::HEAD, path, Auth::None)).await;
        assert_eq!(reply.status, 200, "HEAD {path}");
        assert!(reply.text.is_empty(), "HEAD {path} sent a body");
    }
}

async fn empty_logout_body_with_json_content_type_is_no_body(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("emptybody").await;
    let reply = app.post_raw("/api/v1/auth/logout", Auth::Bearer(&user.token), "").await;
    assert_eq!(reply.data(200)["revoked_sessions"], 1);
}

async fn enum_errors_carry_no_serde_punctuation(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("scope").await;
    let reply = app.logout(&user.token, Some(&json!({"scope": "everything"}))).await;
    let error = reply.invalid("scope");
    let issue = error["details"]["issue"].as_str().unwrap();
    assert!(!issue.contains('`') && issue.contains("local"), "{issue}");
}

async fn login_and_refresh_failures_are_not_invalid_token(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("rfc6750").await;
    let login = app.login_raw(&user.email, "a wrong password").await;
    login.unauthorized();
    let www = login.header("www-authenticate").unwrap();
    assert!(www.starts_with("Bearer") && !www.contains("invalid_token"), "{www}");
    let refresh = app.refresh_raw("aigwr_nope").await;
    refresh.unauthorized();
    let www = refresh.header("www-authenticate").unwrap();
    assert!(www.starts_with("Bearer") && !www.contains("invalid_token"), "{www}");
}

async fn error_envelope_starts_with_success(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app.get("/api/v1/nowhere", Auth::None).await;
    reply.error(404, "not_found");
    assert!(
        reply.text.starts_with(r#"{"success":false,"error":{"code":"not_found""#),
        "{}",
        reply.text
    );
}

async fn cors_only_for_configured_origins(backend: Backend) {
    let closed = spawn_app(backend).await;
    let reply = closed
        .send(
            closed
                .request(reqwest::Method::GET, "/healthz", Auth::None)
                .header("origin", "https://app.example.com"),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert!(reply.header("access-control-allow-origin").is_none());

    let open = spawn_app_with(backend, |s| {
        s.server.cors_allowed_origins = vec!["https://app.example.com".into()];
    })
    .await;
    let preflight = open
        .send(
            open.request(reqwest::Method::OPTIONS, "/api/v1/auth/me", Auth::None)
                .header("origin", "https://app.example.com")
                .header("access-control-request-method", "GET")
                .header("access-control-request-headers", "authorization"),
        )
        .await;
    assert_eq!(preflight.status, 200, "{}", preflight.text);
    // Anthropic's SDKs send their key and version headers from a browser too.
    let anthropic = open
        .send(
            open.request(reqwest::Method::OPTIONS, "/api/v1/ai/anthropic/v1/messages", Auth::None)
                .header("origin", "https://app.example.com")
                .header("access-control-request-method", "POST")
                .header(
                    "access-control-request-headers",
                    "x-api-key,anthropic-version,content-type",
                ),
        )
        .await;
    assert_eq!(anthropic.status, 200, "{}", anthropic.text);
    assert_eq!(preflight.header("access-control-allow-origin"), Some("https://app.example.com"));
    let user = open.new_user("cors").await;
    let reply = open
        .send(
            open.request(reqwest::Method::GET, "/api/v1/auth/me", Auth::Bearer(&user.token))
                .header("origin", "https://app.example.com"),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("access-control-allow-origin"), Some("https://app.example.com"));
    let exposed = reply.header("access-control-expose-headers").unwrap_or_default().to_lowercase();
    assert!(exposed.contains("x-request-id"), "{exposed}");
    assert!(
        exposed.contains("x-aigw-deployment") && exposed.contains("x-aigw-attempts"),
        "{exposed}"
    );
}

backend_tests!(
    credential_and_permission_errors_win_over_body_errors,
    method_not_allowed_names_allow_and_head_works,
    empty_logout_body_with_json_content_type_is_no_body,
    enum_errors_carry_no_serde_punctuation,
    login_and_refresh_failures_are_not_invalid_token,
    error_envelope_starts_with_success,
    cors_only_for_configured_origins,
);

#[tokio::test]
async fn the_default_database_lives_in_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::default();
    settings.server.listen = "127.0.0.1:0".into();
    settings.server.data_dir = dir.path().join("state");
    let _app = Application::build(settings).await.unwrap();
    assert!(dir.path().join("state/aigw.db").exists());
    assert!(dir.path().join("state/jwt_secret").exists());
}
