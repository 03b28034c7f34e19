//! Register, login, me, refresh and logout.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

backend_tests!(
    register_returns_201_with_user_and_tokens,
    register_normalises_email_and_defaults_name,
    register_keeps_given_name,
    register_with_default_argon2_parameters,
    register_refuses_duplicate_email,
    register_refuses_bad_email,
    password_length_is_counted_in_code_points,
    password_maximum_is_256,
    login_returns_token_set,
    login_is_case_insensitive_on_email,
    login_failures_are_indistinguishable,
    me_returns_the_user_for_access_token_and_read_key,
    access_token_claims,
    refresh_rotates_tokens,
    refresh_token_replay_revokes_the_family,
    refresh_refuses_garbage_and_access_tokens,
    refresh_requires_the_field,
    logout_local_revokes_only_this_session,
    logout_global_revokes_every_session,
    logout_others_keeps_this_session,
    logout_rejects_unknown_scope,
);

fn assert_user_object(user: &Value, id: &str, email: &str, name: &str) {
    let keys: BTreeSet<&str> = user
        .as_object()
        .unwrap_or_else(|| panic!("user must be an object: {user}"))
        .keys()
        .map(String::as_str)
        .collect();
    for k in ["id", "email", "name", "role", "created_at"] {
        assert!(keys.contains(k), "user lacks {k}: {user}");
    }
    for secret in ["password", "password_hash"] {
        assert!(!keys.contains(secret), "user must not carry {secret}: {user}");
    }
    assert_eq!(user["id"], json!(id));
    assert_eq!(user["email"], json!(email));
    assert_eq!(user["name"], json!(name));
    assert_eq!(user["role"], json!("user"));
    assert_timestamp(&user["created_at"]);
}

fn assert_jwt(token: &Value) -> String {
    let t = token.as_str().unwrap_or_else(|| panic!("token must be a string: {token}"));
    let parts: Vec<&str> = t.split('.').collect();
    assert_eq!(parts.len(), 3, "a JWT has three dot-separated parts: {t}");
    assert!(parts.iter().all(|p| !p.is_empty()), "empty JWT part: {t}");
    t.to_owned()
}

/// Checks the token-set fields shared by register, login and refresh.
fn assert_token_set(data: &Value) {
    assert_jwt(&data["token"]);
    let refresh = data["refresh_token"].as_str().unwrap_or_default();
    assert!(refresh.starts_with("aigwr_"), "refresh_token: {data}");
    assert_eq!(data["expires_in"], json!(3600), "data: {data}");
    assert_eq!(data["token_type"], json!("Bearer"), "data: {data}");
    assert_timestamp(&data["expires_at"]);
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(data["expires_at"].as_str().unwrap()).unwrap();
    let delta = expires_at.timestamp() - chrono::Utc::now().timestamp();
    assert!(
        (3540..=3660).contains(&delta),
        "expires_at should be about an hour ahead, is {delta}s"
    );
}

async fn register_returns_201_with_user_and_tokens(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("reg");
    let reply = app
        .register_raw(&json!({"email": email, "password": PASSWORD, "name": "Ada Lovelace"}))
        .await;
    let ct = reply.header("content-type").unwrap_or_default().to_owned();
    assert!(ct.starts_with("application/json"), "content-type {ct}");
    assert!(!reply.text.contains(PASSWORD), "password echoed: {}", reply.text);
    let data = reply.data(201);
    let id = data["id"].as_str().expect("data.id").to_owned();
    assert!(!id.is_empty());
    assert_eq!(data["email"], json!(email));
    assert_eq!(data["name"], json!("Ada Lovelace"));
    assert_eq!(data["role"], json!("user"));
    assert_user_object(&data["user"], &id, &email, "Ada Lovelace");
    assert_token_set(&data);
    for secret in ["password", "password_hash"] {
        assert!(data.get(secret).is_none(), "data carries {secret}");
    }
    // The token works at once.
    let me = app.me(Auth::Bearer(data["token"].as_str().unwrap())).await.data(200);
    assert_eq!(me["user"], data["user"]);
}

async fn register_normalises_email_and_defaults_name(backend: Backend) {
    let app = spawn_app(backend).await;
    let local = format!("Mixed.Case{}", uuid::Uuid::now_v7().simple());
    let raw = format!("  {local}@Example.COM  ");
    let data = app.register(&raw, PASSWORD, None).await;
    let normalised = format!("{}@example.com", local.to_lowercase());
    assert_eq!(data["email"], json!(normalised));
    assert_eq!(data["user"]["email"], json!(normalised));
    assert_eq!(data["name"], json!(local.to_lowercase()));
    assert_eq!(data["user"]["name"], json!(local.to_lowercase()));
    // The same address in another case is the same account.
    let again =
        app.register_raw(&json!({"email": normalised.to_uppercase(), "password": PASSWORD})).await;
    again.invalid("email");
    app.login(&normalised, PASSWORD).await;
}

async fn register_keeps_given_name(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("named");
    let data = app.register(&email, PASSWORD, Some("Grace Hopper")).await;
    let me = app.me(Auth::Bearer(data["token"].as_str().unwrap())).await.data(200);
    assert_eq!(me["user"]["name"], json!("Grace Hopper"));
}

async fn register_with_default_argon2_parameters(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.auth.argon2 = aigw_service::password::Argon2Config::default();
    })
    .await;
    let email = unique_email("argon");
    let data = app.register(&email, PASSWORD, None).await;
    assert_token_set(&data);
    let login = app.login(&email, PASSWORD).await;
    assert_eq!(login["user"]["id"], data["user"]["id"]);
    app.login_raw(&email, "wrong password!").await.unauthorized();
}

async fn register_refuses_duplicate_email(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("dup");
    app.register(&email, PASSWORD, None).await;
    let reply = app.register_raw(&json!({"email": email, "password": "another password"})).await;
    reply.invalid("email");
    assert!(!reply.text.contains("another password"));
}

async fn register_refuses_bad_email(backend: Backend) {
    let app = spawn_app(backend).await;
    for bad in ["not-an-email", "", "   ", "a@", "@example.com", "two@@example.com"] {
        let reply = app.register_raw(&json!({"email": bad, "password": PASSWORD})).await;
        reply.invalid("email");
        assert!(!reply.text.contains(PASSWORD));
    }
}

async fn password_length_is_counted_in_code_points(backend: Backend) {
    let app = spawn_app(backend).await;
    // 7 code points (14 bytes): refused.
    let seven = "é".repeat(7);
    let reply = app.register_raw(&json!({"email": unique_email("pw7"), "password": seven})).await;
    reply.invalid("password");
    assert!(!reply.text.contains(&seven), "password echoed: {}", reply.text);
    // 8 code points: accepted, and logs in.
    let eight = "é".repeat(8);
    let email = unique_email("pw8");
    app.register(&email, &eight, None).await;
    app.login(&email, &eight).await;
    // 7 ASCII characters: refused.
    let reply =
        app.register_raw(&json!({"email": unique_email("pw7a"), "password": "Sh0rt!x"})).await;
    reply.invalid("password");
    assert!(!reply.text.contains("Sh0rt!x"));
}

async fn password_maximum_is_256(backend: Backend) {
    let app = spawn_app(backend).await;
    let max = "p".repeat(256);
    let email = unique_email("pw256");
    app.register(&email, &max, None).await;
    app.login(&email, &max).await;
    // Nothing is truncated: the first 255 characters are not the password.
    app.login_raw(&email, &"p".repeat(255)).await.unauthorized();
    let too_long = "q".repeat(257);
    let reply =
        app.register_raw(&json!({"email": unique_email("pw257"), "password": too_long})).await;
    reply.invalid("password");
    assert!(!reply.text.contains(&too_long));
}

async fn login_returns_token_set(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("login");
    let reg = app.register(&email, PASSWORD, Some("Login User")).await;
    let data = app.login(&email, PASSWORD).await;
    let keys: BTreeSet<&str> = data.as_object().unwrap().keys().map(String::as_str).collect();
    for k in ["user", "token", "refresh_token", "expires_at", "expires_in", "token_type"] {
        assert!(keys.contains(k), "login data lacks {k}: {data}");
    }
    assert_token_set(&data);
    let id = reg["user"]["id"].as_str().unwrap();
    assert_user_object(&data["user"], id, &email, "Login User");
    assert_ne!(data["refresh_token"], reg["refresh_token"]);
    assert_ne!(data["token"], reg["token"]);
    let me = app.me(Auth::Bearer(data["token"].as_str().unwrap())).await.data(200);
    assert_eq!(me["user"]["id"], json!(id));
    // Both sessions live side by side.
    app.me(Auth::Bearer(reg["token"].as_str().unwrap())).await.data(200);
}

async fn login_is_case_insensitive_on_email(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("case");
    app.register(&email, PASSWORD, None).await;
    let data = app.login(&format!("  {}  ", email.to_uppercase()), PASSWORD).await;
    assert_eq!(data["user"]["email"], json!(email));
}

async fn login_failures_are_indistinguishable(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("enum");
    app.register(&email, PASSWORD, None).await;
    let wrong_password = app.login_raw(&email, "not the password").await;
    let unknown_email = app.login_raw(&unique_email("nobody"), "not the password").await;
    wrong_password.unauthorized();
    unknown_email.unauthorized();
    assert_eq!(wrong_password.status, unknown_email.status);
    assert_eq!(
        wrong_password.json(),
        unknown_email.json(),
        "unknown e-mail and wrong password must give identical bodies"
    );
    assert_eq!(
        wrong_password.headers_but_ids(),
        unknown_email.headers_but_ids(),
        "unknown e-mail and wrong password must give identical headers"
    );
    assert!(!wrong_password.text.contains("not the password"));
    // A known e-mail with an empty password: the same 401 (or 400 on the password field),
    // never a hint that the account exists.
    let empty = app.login_raw(&email, "").await;
    assert!(empty.status == 401 || empty.status == 400, "empty password: {}", empty.text);
}

async fn me_returns_the_user_for_access_token_and_read_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("me");
    let reg = app.register(&email, PASSWORD, Some("Me Myself")).await;
    let token = reg["token"].as_str().unwrap();
    let me = app.me(Auth::Bearer(token)).await.data(200);
    let id = reg["user"]["id"].as_str().unwrap();
    assert_user_object(&me["user"], id, &email, "Me Myself");
    assert_eq!(me["user"], reg["user"]);
    let key = app.key(token, &["read"]).await;
    let via_key = app.me(Auth::Bearer(&key)).await.data(200);
    assert_eq!(via_key["user"], reg["user"]);
    let via_bare_key = app.me(Auth::Raw(&key)).await.data(200);
    assert_eq!(via_bare_key["user"], reg["user"]);
}

async fn access_token_claims(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("claims").await;
    let header = jwt_part(&user.token, 0);
    assert_eq!(header["alg"], json!("HS256"), "header: {header}");
    let claims = jwt_part(&user.token, 1);
    assert_eq!(claims["sub"], json!(user.id), "claims: {claims}");
    assert_eq!(claims["typ"], json!("access"), "claims: {claims}");
    let (iat, exp) = (claims["iat"].as_i64().unwrap(), claims["exp"].as_i64().unwrap());
    assert_eq!(exp - iat, 3600, "claims: {claims}");
}

async fn refresh_rotates_tokens(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.auth.refresh_reuse_grace_secs = 0).await;
    let user = app.new_user("refresh").await;
    let reply = app.refresh_raw(&user.refresh_token).await;
    let data = reply.data(200);
    let keys: BTreeSet<&str> = data.as_object().unwrap().keys().map(String::as_str).collect();
    for k in ["user", "token", "refresh_token", "expires_at", "expires_in", "token_type"] {
        assert!(keys.contains(k), "refresh data lacks {k}: {data}");
    }
    assert_token_set(&data);
    assert_user_object(
        &data["user"],
        &user.id,
        &user.email,
        data["user"]["name"].as_str().unwrap(),
    );
    let new_refresh = data["refresh_token"].as_str().unwrap();
    assert_ne!(new_refresh, user.refresh_token, "the refresh token must rotate");
    let new_token = data["token"].as_str().unwrap();
    app.me(Auth::Bearer(new_token)).await.data(200);
    // The new refresh token rotates again.
    let again = app.refresh_raw(new_refresh).await.data(200);
    assert_ne!(again["refresh_token"].as_str().unwrap(), new_refresh);
}

async fn refresh_token_replay_revokes_the_family(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.auth.refresh_reuse_grace_secs = 0).await;
    let user = app.new_user("replay").await;
    let data = app.refresh_raw(&user.refresh_token).await.data(200);
    let new_refresh = data["refresh_token"].as_str().unwrap().to_owned();
    let new_token = data["token"].as_str().unwrap().to_owned();
    // The old token is refused...
    let replay = app.refresh_raw(&user.refresh_token).await;
    replay.error(401, "unauthorized");
    assert!(replay.json()["error"]["details"]["hint"].is_string());
    // ...and the replay revoked the whole family: the newest token fails too.
    app.refresh_raw(&new_refresh).await.error(401, "unauthorized");
    // The session is gone, so its access token is refused as well.
    app.me(Auth::Bearer(&new_token)).await.unauthorized();
    // Other sessions of the same user are untouched.
    let other = app.login(&user.email, PASSWORD).await;
    app.refresh_raw(other["refresh_token"].as_str().unwrap()).await.data(200);
}

async fn refresh_refuses_garbage_and_access_tokens(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("refgarbage").await;
    for bad in [
        "garbage".to_owned(),
        "aigwr_".to_owned(),
        format!("aigwr_{}", "A".repeat(43)),
        user.token.clone(),
        flip_char(&user.refresh_token, 10),
    ] {
        let reply = app.refresh_raw(&bad).await;
        reply.error(401, "unauthorized");
        assert!(!reply.text.contains(&bad) || bad.len() < 8, "token echoed");
    }
    // The genuine token still works after those attempts.
    app.refresh_raw(&user.refresh_token).await.data(200);
}

async fn refresh_requires_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    app.post("/api/v1/auth/refresh", Auth::None, &json!({})).await.invalid("refresh_token");
    app.post("/api/v1/auth/refresh", Auth::None, &json!({"refresh_token": 5}))
        .await
        .invalid("refresh_token");
    app.post_raw("/api/v1/auth/refresh", Auth::None, "{\"refresh_token\": ").await.invalid("body");
}

async fn logout_local_revokes_only_this_session(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("logout").await;
    let other = app.login(&user.email, PASSWORD).await;
    let reply = app.logout(&user.token, None).await;
    let data = reply.data(200);
    assert_eq!(data["revoked_sessions"], json!(1), "data: {data}");
    app.me(Auth::Bearer(&user.token)).await.unauthorized();
    app.refresh_raw(&user.refresh_token).await.error(401, "unauthorized");
    // The other session lives on.
    app.me(Auth::Bearer(other["token"].as_str().unwrap())).await.data(200);
    // Explicit `local` works the same way.
    let data = app
        .logout(other["token"].as_str().unwrap(), Some(&json!({"scope": "local"})))
        .await
        .data(200);
    assert_eq!(data["revoked_sessions"], json!(1), "data: {data}");
    app.me(Auth::Bearer(other["token"].as_str().unwrap())).await.unauthorized();
    app.refresh_raw(other["refresh_token"].as_str().unwrap()).await.error(401, "unauthorized");
}

async fn logout_global_revokes_every_session(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("global").await;
    let second = app.login(&user.email, PASSWORD).await;
    let third = app.login(&user.email, PASSWORD).await;
    let bystander = app.new_user("bystander").await;
    let data = app.logout(&user.token, Some(&json!({"scope": "global"}))).await.data(200);
    assert_eq!(data["revoked_sessions"], json!(3), "data: {data}");
    for s in [&second, &third] {
        app.me(Auth::Bearer(s["token"].as_str().unwrap())).await.unauthorized();
        app.refresh_raw(s["refresh_token"].as_str().unwrap()).await.error(401, "unauthorized");
    }
    app.me(Auth::Bearer(&user.token)).await.unauthorized();
    app.refresh_raw(&user.refresh_token).await.error(401, "unauthorized");
    // Another user is untouched.
    app.me(Auth::Bearer(&bystander.token)).await.data(200);
    // Logging in again works.
    app.login(&user.email, PASSWORD).await;
}

async fn logout_others_keeps_this_session(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("others").await;
    let second = app.login(&user.email, PASSWORD).await;
    let data = app.logout(&user.token, Some(&json!({"scope": "others"}))).await.data(200);
    assert_eq!(data["revoked_sessions"], json!(1), "data: {data}");
    app.me(Auth::Bearer(&user.token)).await.data(200);
    app.me(Auth::Bearer(second["token"].as_str().unwrap())).await.unauthorized();
    app.refresh_raw(second["refresh_token"].as_str().unwrap()).await.error(401, "unauthorized");
    app.refresh_raw(&user.refresh_token).await.data(200);
}

async fn logout_rejects_unknown_scope(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("scope").await;
    app.logout(&user.token, Some(&json!({"scope": "everything"}))).await.invalid("scope");
    // Nothing was revoked.
    app.me(Auth::Bearer(&user.token)).await.data(200);
    // Without a credential: 401.
    app.post_empty("/api/v1/auth/logout", Auth::None).await.unauthorized();
}
