//! Self-service: a user's sessions, name and password.

use crate::common;
use crate::credential_cache::reply_eventually;

use common::{spawn_app, Auth, Backend, Reply, TestApp};
use serde_json::{json, Value};
use std::time::Duration;

/// How soon every other node must refuse a revoked credential.
const WITHIN: Duration = Duration::from_secs(1);

async fn login_as(app: &TestApp, email: &str, password: &str, agent: &str) -> Value {
    let request = app
        .request(reqwest::Method::POST, "/api/v1/auth/login", Auth::None)
        .header("user-agent", agent)
        .json(&json!({"email": email, "password": password}));
    app.send(request).await.data(200)
}

async fn patch_me(app: &TestApp, auth: Auth<'_>, body: &Value) -> Reply {
    app.send(app.request(reqwest::Method::PATCH, "/api/v1/auth/me", auth).json(body)).await
}

async fn change_password(app: &TestApp, token: &str, current: &str, new: &str) -> Reply {
    let body = json!({"current_password": current, "new_password": new});
    app.post("/api/v1/auth/password", Auth::Bearer(token), &body).await
}

async fn users_see_and_end_their_sessions(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("sessions").await;
    let long_agent = "A".repeat(300);
    let second = login_as(&app, &user.email, &user.password, &long_agent).await;
    let token = second["token"].as_str().unwrap();
    let listed = app.get("/api/v1/auth/sessions", Auth::Bearer(token)).await.data(200);
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{listed}");
    // Newest first; the current one is marked.
    assert_eq!(sessions[0]["current"], json!(true));
    assert_eq!(sessions[1]["current"], json!(false));
    assert_eq!(sessions[0]["user_agent"], json!("A".repeat(256)));
    assert_eq!(sessions[0]["ip"], json!("127.0.0.1"));
    for field in ["created_at", "last_used_at", "expires_at"] {
        common::assert_timestamp(&sessions[0][field]);
    }
    let first_id = sessions[1]["id"].as_str().unwrap().to_owned();
    // A key with `read` lists them (none is its own), but never ends one.
    let key = app.key(token, &["read", "write"]).await;
    let by_key = app.get("/api/v1/auth/sessions", Auth::Raw(&key)).await.data(200);
    assert!(by_key["sessions"].as_array().unwrap().iter().all(|s| s["current"] == json!(false)));
    let path = format!("/api/v1/auth/sessions/{first_id}");
    app.delete(&path, Auth::Raw(&key)).await.forbidden("access_token", "api_key");
    let ai_key = app.key(token, &["ai_gateway"]).await;
    app.get("/api/v1/auth/sessions", Auth::Raw(&ai_key)).await.forbidden("read", "ai_gateway");
    // Another user's session id is a 404, as one that never existed.
    let other = app.new_user("sessions-other").await;
    app.delete(&path, Auth::Bearer(&other.token)).await.not_found("session", &first_id);
    app.me(Auth::Bearer(&user.token)).await.data(200);

    let ended = app.delete(&path, Auth::Bearer(token)).await.data(200);
    assert_eq!(ended, json!({"id": first_id, "revoked": true}));
    app.me(Auth::Bearer(&user.token)).await.unauthorized();
    app.refresh_raw(&user.refresh_token).await.unauthorized();
    app.delete(&path, Auth::Bearer(token)).await.not_found("session", &first_id);
    let left = app.get("/api/v1/auth/sessions", Auth::Bearer(token)).await.data(200);
    assert_eq!(left["sessions"].as_array().unwrap().len(), 1);
    // A refresh is the session's last use.
    let refreshed = app.refresh_raw(second["refresh_token"].as_str().unwrap()).await.data(200);
    let token = refreshed["token"].as_str().unwrap();
    let after = app.get("/api/v1/auth/sessions", Auth::Bearer(token)).await.data(200);
    assert_ne!(after["sessions"][0]["last_used_at"], after["sessions"][0]["created_at"]);
}

async fn users_change_their_name_but_keys_cannot(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("renamed").await;
    let changed =
        patch_me(&app, Auth::Bearer(&user.token), &json!({"name": "  Ann B.  "})).await.data(200);
    assert_eq!(changed["user"]["name"], json!("Ann B."));
    assert_eq!(app.me(Auth::Bearer(&user.token)).await.data(200)["user"]["name"], json!("Ann B."));
    patch_me(&app, Auth::Bearer(&user.token), &json!({"name": " "})).await.invalid("name");
    patch_me(&app, Auth::Bearer(&user.token), &json!({})).await.invalid("name");
    patch_me(&app, Auth::Bearer(&user.token), &json!({"name": "x", "email": "e@example.com"}))
        .await
        .invalid("email");
    let key = app.key(&user.token, &["read", "write", "admin"]).await;
    patch_me(&app, Auth::Raw(&key), &json!({"name": "Eve"}))
        .await
        .forbidden("access_token", "api_key");
}

async fn a_password_change_ends_other_sessions_and_renews_this_one(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("password").await;
    let other = app.login(&user.email, &user.password).await;
    let new_password = "a much better passphrase 2026";

    let wrong = change_password(&app, &user.token, "not the password at all", new_password).await;
    let failed_login = app.login_raw(&user.email, "not the password at all").await;
    assert_eq!(wrong.unauthorized(), failed_login.unauthorized());
    change_password(&app, &user.token, &user.password, "short").await.invalid("new_password");
    change_password(&app, &user.token, &user.password, "password1234")
        .await
        .invalid("new_password");
    let key = app.key(&user.token, &["read", "write", "admin"]).await;
    let body = json!({"current_password": user.password, "new_password": new_password});
    app.post("/api/v1/auth/password", Auth::Raw(&key), &body)
        .await
        .forbidden("access_token", "api_key");
    app.login(&user.email, &user.password).await; // nothing changed so far

    let fresh = change_password(&app, &user.token, &user.password, new_password).await.data(200);
    assert_eq!(fresh["user"]["id"], json!(user.id));
    // The other sessions ended; this one lives on with new tokens.
    app.me(Auth::Bearer(other["token"].as_str().unwrap())).await.unauthorized();
    app.refresh_raw(other["refresh_token"].as_str().unwrap()).await.unauthorized();
    app.me(Auth::Bearer(&user.token)).await.data(200);
    app.me(Auth::Bearer(fresh["token"].as_str().unwrap())).await.data(200);
    let sessions = app.get("/api/v1/auth/sessions", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1, "{sessions}");
    app.refresh_raw(fresh["refresh_token"].as_str().unwrap()).await.data(200);
    app.login_raw(&user.email, &user.password).await.unauthorized();
    app.login(&user.email, new_password).await;
    // Keys are not sessions: they keep working.
    app.me(Auth::Raw(&key)).await.data(200);
}

async fn the_old_refresh_token_of_this_session_is_retired(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("retired").await;
    let new_password = "a much better passphrase 2026";
    change_password(&app, &user.token, &user.password, new_password).await.data(200);
    // The refresh token from before the change is refused (presenting it is a reuse).
    app.refresh_raw(&user.refresh_token).await.unauthorized();
}

async fn an_ended_session_and_a_new_name_reach_another_node_within_a_second(backend: Backend) {
    let a = spawn_app(backend).await;
    let b = a.spawn_sibling(|_| {}).await;
    let user = a.new_user("two-nodes").await;
    let second = a.login(&user.email, &user.password).await;
    let token = second["token"].as_str().unwrap();
    for _ in 0..3 {
        b.me(Auth::Bearer(&user.token)).await.data(200);
        b.me(Auth::Bearer(token)).await.data(200);
    }
    let listed = a.get("/api/v1/auth/sessions", Auth::Bearer(token)).await.data(200);
    let first_id = listed["sessions"][1]["id"].as_str().unwrap().to_owned();
    a.delete(&format!("/api/v1/auth/sessions/{first_id}"), Auth::Bearer(token)).await.data(200);
    reply_eventually(
        WITHIN,
        "ended session",
        || b.me(Auth::Bearer(&user.token)),
        |r| r.status == 401,
    )
    .await
    .unauthorized();
    patch_me(&a, Auth::Bearer(token), &json!({"name": "Renamed"})).await.data(200);
    reply_eventually(
        WITHIN,
        "new name",
        || b.me(Auth::Bearer(token)),
        |r| r.status == 200 && r.json()["data"]["user"]["name"] == json!("Renamed"),
    )
    .await;
    drop(b);
}

backend_tests!(
    users_see_and_end_their_sessions,
    users_change_their_name_but_keys_cannot,
    a_password_change_ends_other_sessions_and_renews_this_one,
    the_old_refresh_token_of_this_session_is_retired,
    an_ended_session_and_a_new_name_reach_another_node_within_a_second,
);
