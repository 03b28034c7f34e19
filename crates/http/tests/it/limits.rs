//! Size limits: body limits per endpoint, name and e-mail lengths.

use crate::common;

use common::*;
use serde_json::json;

backend_tests!(
    chat_accepts_bodies_above_the_account_limit,
    chat_body_over_its_limit_is_413,
    account_body_just_under_the_limit_is_accepted,
    names_are_bounded,
    email_is_bounded,
);

async fn chat_accepts_bodies_above_the_account_limit(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("bigchat").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let text = "word ".repeat(40_000); // 200 KB
    let reply = app.chat(Auth::Bearer(&key), &chat_body("echo", &text)).await;
    assert_eq!(reply.status, 200, "{}", &reply.text[..reply.text.len().min(500)]);
    assert_eq!(reply.json()["choices"][0]["message"]["content"], json!(text));
}

async fn chat_body_over_its_limit_is_413(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("hugechat").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let text = "x".repeat(4 * 1024 * 1024 + 1);
    app.chat(Auth::Bearer(&key), &chat_body("echo", &text)).await.error(413, "payload_too_large");
    // A smaller configured limit applies.
    let app = spawn_app_with(backend, |s| s.server.chat_body_limit_bytes = 1024).await;
    let user = app.new_user("smallchat").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    app.chat(Auth::Bearer(&key), &chat_body("echo", &"y".repeat(2048)))
        .await
        .error(413, "payload_too_large");
    let reply = app.chat(Auth::Bearer(&key), &chat_body("echo", "small")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn account_body_just_under_the_limit_is_accepted(backend: Backend) {
    let app = spawn_app(backend).await;
    // Padding in an unknown-free way: whitespace inside the JSON object.
    let email = unique_email("pad");
    let core = json!({"email": email, "password": PASSWORD}).to_string();
    let padding = " ".repeat(60 * 1024);
    let body = format!("{{{padding}{}", &core[1..]);
    assert!(body.len() < 64 * 1024);
    app.post_raw("/api/v1/auth/register", Auth::None, body).await.data(201);
}

async fn names_are_bounded(backend: Backend) {
    let app = spawn_app(backend).await;
    let ok = "n".repeat(100);
    let data = app.register(&unique_email("name100"), PASSWORD, Some(&ok)).await;
    assert_eq!(data["user"]["name"], json!(ok));
    for bad in ["n".repeat(101), "bad\u{0007}name".to_owned(), "   ".to_owned()] {
        app.register_raw(&json!({"email": unique_email("nm"), "password": PASSWORD, "name": bad}))
            .await
            .invalid("name");
    }
    let user = app.new_user("keyname").await;
    let auth = Auth::Bearer(&user.token);
    app.create_key_raw(auth, &json!({"name": ok, "permissions": ["read"]})).await.data(201);
    app.create_key_raw(auth, &json!({"name": "k".repeat(101), "permissions": ["read"]}))
        .await
        .invalid("name");
}

async fn email_is_bounded(backend: Backend) {
    let app = spawn_app(backend).await;
    let long_local = "a".repeat(64);
    let domain =
        format!("{}.example.com", ["b".repeat(60), "c".repeat(60), "d".repeat(60)].join("."));
    let too_long = format!("{long_local}@{domain}");
    assert!(too_long.len() > 254);
    app.register_raw(&json!({"email": too_long, "password": PASSWORD})).await.invalid("email");
}
