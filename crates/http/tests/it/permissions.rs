//! Who may call what: every row of the access table, for access tokens and API keys.

use crate::common;

use common::*;
use serde_json::json;

backend_tests!(
    me_and_list_need_read,
    create_key_needs_an_access_token,
    revoke_needs_write,
    delete_needs_write,
    chat_needs_an_api_key_with_ai_gateway,
    admin_includes_every_other_permission,
    bearer_scheme_is_case_insensitive_and_bare_keys_work,
);

async fn me_and_list_need_read(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("read").await;
    app.me(Auth::Bearer(&user.token)).await.data(200);
    app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    for perms in [&["read"][..], &["read", "write"][..]] {
        let key = app.key(&user.token, perms).await;
        app.me(Auth::Bearer(&key)).await.data(200);
        app.list_keys(Auth::Bearer(&key)).await.data(200);
    }
    for (perms, current) in
        [(&["write"][..], "write"), (&["ai_gateway"][..], "ai_gateway"), (&["proxy"][..], "proxy")]
    {
        let key = app.key(&user.token, perms).await;
        app.me(Auth::Bearer(&key)).await.forbidden("read", current);
        app.list_keys(Auth::Bearer(&key)).await.forbidden("read", current);
    }
}

async fn create_key_needs_an_access_token(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("create").await;
    let body = json!({"name": "child", "permissions": ["read"]});
    app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    for perms in
        [&["read"][..], &["write"][..], &["ai_gateway"][..], &["proxy"][..], &["admin"][..]]
    {
        let key = app.key(&user.token, perms).await;
        app.create_key_raw(Auth::Bearer(&key), &body).await.forbidden("access_token", "api_key");
    }
    // Without any credential: 401, not 403.
    app.create_key_raw(Auth::None, &body).await.unauthorized();
}

async fn revoke_needs_write(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("revokeperm").await;
    let target = app.create_key(&user.token, &["proxy"], None).await;
    let id = target["id"].as_str().unwrap();
    for (perms, current) in
        [(&["read"][..], "read"), (&["ai_gateway"][..], "ai_gateway"), (&["proxy"][..], "proxy")]
    {
        let key = app.key(&user.token, perms).await;
        app.revoke_key(Auth::Bearer(&key), id).await.forbidden("write", current);
    }
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    let listed = list["api_keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == target["id"])
        .cloned()
        .unwrap();
    assert_eq!(listed["revoked_at"], serde_json::Value::Null);
    let writer = app.key(&user.token, &["write"]).await;
    let data = app.revoke_key(Auth::Bearer(&writer), id).await.data(200);
    assert_timestamp(&data["revoked_at"]);
    // With the access token.
    let other = app.create_key(&user.token, &["read"], None).await;
    app.revoke_key(Auth::Bearer(&user.token), other["id"].as_str().unwrap()).await.data(200);
}

async fn delete_needs_write(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("deleteperm").await;
    let target = app.create_key(&user.token, &["proxy"], None).await;
    let id = target["id"].as_str().unwrap();
    for (perms, current) in
        [(&["read"][..], "read"), (&["ai_gateway"][..], "ai_gateway"), (&["proxy"][..], "proxy")]
    {
        let key = app.key(&user.token, perms).await;
        app.delete_key(Auth::Bearer(&key), id).await.forbidden("write", current);
    }
    // Still there and still working.
    app.chat(Auth::Bearer(target["key"].as_str().unwrap()), &chat_body("echo", "x"))
        .await
        .forbidden("ai_gateway", "proxy");
    let writer = app.key(&user.token, &["write"]).await;
    let data = app.delete_key(Auth::Bearer(&writer), id).await.data(200);
    assert_eq!(data, json!({"id": id, "deleted": true}));
    let other = app.create_key(&user.token, &["read"], None).await;
    let oid = other["id"].as_str().unwrap();
    let data = app.delete_key(Auth::Bearer(&user.token), oid).await.data(200);
    assert_eq!(data, json!({"id": oid, "deleted": true}));
}

async fn chat_needs_an_api_key_with_ai_gateway(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("chatperm").await;
    let body = chat_body("echo", "hello");
    app.chat(Auth::Bearer(&user.token), &body).await.forbidden("api_key", "access_token");
    let key = app.key(&user.token, &["read", "write"]).await;
    app.chat(Auth::Bearer(&key), &body).await.forbidden("ai_gateway", "read,write");
    let key = app.key(&user.token, &["proxy"]).await;
    app.chat(Auth::Raw(&key), &body).await.forbidden("ai_gateway", "proxy");
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let reply = app.chat(Auth::Bearer(&key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    app.chat(Auth::None, &body).await.unauthorized();
}

async fn admin_includes_every_other_permission(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("admin").await;
    let admin = app.key(&user.token, &["admin"]).await;
    app.me(Auth::Bearer(&admin)).await.data(200);
    app.list_keys(Auth::Bearer(&admin)).await.data(200);
    let reply = app.chat(Auth::Bearer(&admin), &chat_body("echo", "hi")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let target = app.create_key(&user.token, &["read"], None).await;
    app.revoke_key(Auth::Bearer(&admin), target["id"].as_str().unwrap()).await.data(200);
    app.delete_key(Auth::Bearer(&admin), target["id"].as_str().unwrap()).await.data(200);
    // ...except creating keys.
    app.create_key_raw(Auth::Bearer(&admin), &json!({"name": "x", "permissions": ["read"]}))
        .await
        .forbidden("access_token", "api_key");
}

async fn bearer_scheme_is_case_insensitive_and_bare_keys_work(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("scheme").await;
    let key = app.key(&user.token, &["read"]).await;
    for header in
        [format!("Bearer {key}"), format!("bearer {key}"), format!("BEARER {key}"), key.clone()]
    {
        app.me(Auth::Raw(&header)).await.data(200);
    }
    app.me(Auth::Raw(&format!("bearer {}", user.token))).await.data(200);
    // A bare JWT (no scheme) is not accepted.
    app.me(Auth::Raw(&user.token)).await.unauthorized();
}
