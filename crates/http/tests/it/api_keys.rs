//! API keys: create, list, revoke, delete, validation, ownership.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

backend_tests!(
    create_returns_201_with_the_full_key_once,
    create_with_expiry_echoes_it,
    create_accepts_every_permission,
    create_is_refused_with_an_api_key,
    create_validates_permissions,
    create_validates_expires_at,
    create_validates_name,
    list_is_newest_first_without_secrets,
    list_shows_only_own_keys,
    list_pages_by_cursor_when_asked,
    revoke_sets_revoked_at_and_refuses_the_key,
    delete_removes_the_key,
    other_users_key_is_not_found,
    missing_key_is_not_found,
    last_used_at_is_recorded,
    key_with_future_expiry_expires,
    revocation_and_deletion_hold_on_every_node_at_once,
);

fn permissions_of(key: &Value) -> BTreeSet<String> {
    key["permissions"]
        .as_array()
        .unwrap_or_else(|| panic!("permissions must be an array: {key}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

async fn create_returns_201_with_the_full_key_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("keys").await;
    let reply = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "ci deploy", "permissions": ["read", "write"]}),
        )
        .await;
    let data = reply.data(201);
    let keys: BTreeSet<&str> = data.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "id",
        "name",
        "key",
        "key_prefix",
        "permissions",
        "expires_at",
        "created_at",
        "revoked_at",
        "last_used_at",
    ] {
        assert!(keys.contains(k), "key object lacks {k}: {data}");
    }
    assert!(data["id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(data["name"], json!("ci deploy"));
    let key = data["key"].as_str().unwrap();
    assert!(key.starts_with("aigw_"), "key: {key}");
    assert_eq!(key.chars().count(), 43, "key: {key}");
    assert!(
        key["aigw_".len()..].chars().all(|c| c.is_ascii_alphanumeric()),
        "key body must be base62: {key}"
    );
    assert_eq!(data["key_prefix"], json!(&key[..12]));
    assert_eq!(permissions_of(&data), set(&["read", "write"]));
    assert_eq!(data["expires_at"], Value::Null);
    assert_eq!(data["revoked_at"], Value::Null);
    assert_eq!(data["last_used_at"], Value::Null);
    assert_timestamp(&data["created_at"]);
    // The key works.
    app.me(Auth::Bearer(key)).await.data(200);
    // A second key differs.
    let other = app.key(&user.token, &["read"]).await;
    assert_ne!(other, key);
    // The list never shows the secret.
    let list = app.list_keys(Auth::Bearer(&user.token)).await;
    assert!(!list.text.contains(key), "list leaks the key: {}", list.text);
    assert!(!list.text.contains(&other), "list leaks the key");
}

async fn create_with_expiry_echoes_it(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("expiry").await;
    let expires = "2099-01-02T03:04:05Z";
    let data = app.create_key(&user.token, &["read"], Some(expires)).await;
    assert_timestamp(&data["expires_at"]);
    let got = chrono::DateTime::parse_from_rfc3339(data["expires_at"].as_str().unwrap()).unwrap();
    let want = chrono::DateTime::parse_from_rfc3339(expires).unwrap();
    assert_eq!(got, want);
    // With an offset: the same instant, rendered in UTC.
    let data = app.create_key(&user.token, &["read"], Some("2099-01-02T05:04:05+02:00")).await;
    assert_timestamp(&data["expires_at"]);
    let got = chrono::DateTime::parse_from_rfc3339(data["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(got, want);
    // A key that has not expired yet works.
    app.me(Auth::Bearer(data["key"].as_str().unwrap())).await.data(200);
}

async fn create_accepts_every_permission(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("allperms").await;
    let all = ["ai_gateway", "proxy", "read", "write", "admin"];
    let data = app.create_key(&user.token, &all, None).await;
    assert_eq!(permissions_of(&data), set(&all));
    for p in all {
        let data = app.create_key(&user.token, &[p], None).await;
        assert_eq!(permissions_of(&data), set(&[p]));
    }
}

async fn create_is_refused_with_an_api_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("keykey").await;
    let admin = app.key(&user.token, &["admin", "read", "write", "ai_gateway", "proxy"]).await;
    for auth in [Auth::Bearer(&admin), Auth::Raw(&admin)] {
        app.create_key_raw(auth, &json!({"name": "child", "permissions": ["read"]}))
            .await
            .forbidden("access_token", "api_key");
    }
    // Nothing was created.
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(list["api_keys"].as_array().unwrap().len(), 1);
}

async fn create_validates_permissions(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("perms").await;
    let auth = Auth::Bearer(&user.token);
    app.create_key_raw(auth, &json!({"name": "k", "permissions": ["bogus"]}))
        .await
        .invalid("permissions[0]");
    app.create_key_raw(auth, &json!({"name": "k", "permissions": ["read", "superuser"]}))
        .await
        .invalid("permissions[1]");
    app.create_key_raw(auth, &json!({"name": "k", "permissions": ["read", 5]}))
        .await
        .invalid("permissions[1]");
    app.create_key_raw(auth, &json!({"name": "k", "permissions": ["READ"]}))
        .await
        .invalid("permissions[0]");
    app.create_key_raw(auth, &json!({"name": "k", "permissions": []})).await.invalid("permissions");
    app.create_key_raw(auth, &json!({"name": "k", "permissions": "read"}))
        .await
        .invalid("permissions");
    app.create_key_raw(auth, &json!({"name": "k"})).await.invalid("permissions");
    // None of those created a key.
    let list = app.list_keys(auth).await.data(200);
    assert_eq!(list["api_keys"], json!([]));
}

async fn create_validates_expires_at(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("exp").await;
    let auth = Auth::Bearer(&user.token);
    for bad in [
        json!("2000-01-01T00:00:00Z"),
        json!(in_secs(-60)),
        json!("tomorrow"),
        json!("2099-01-01"),
        json!("2099-01-01 00:00:00"),
        json!(""),
        json!(4_102_444_800_i64),
    ] {
        app.create_key_raw(auth, &json!({"name": "k", "permissions": ["read"], "expires_at": bad}))
            .await
            .invalid("expires_at");
    }
    // Explicit null means no expiry.
    let data = app
        .create_key_raw(auth, &json!({"name": "k", "permissions": ["read"], "expires_at": null}))
        .await
        .data(201);
    assert_eq!(data["expires_at"], Value::Null);
}

async fn create_validates_name(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("keyname").await;
    let auth = Auth::Bearer(&user.token);
    app.create_key_raw(auth, &json!({"permissions": ["read"]})).await.invalid("name");
    app.create_key_raw(auth, &json!({"name": 7, "permissions": ["read"]})).await.invalid("name");
    app.create_key_raw(auth, &json!({"name": "   ", "permissions": ["read"]}))
        .await
        .invalid("name");
}

async fn list_is_newest_first_without_secrets(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("list").await;
    let mut created = Vec::new();
    for (i, perms) in
        [&["read"][..], &["write"][..], &["ai_gateway", "proxy"][..]].iter().enumerate()
    {
        let data = app
            .create_key_raw(
                Auth::Bearer(&user.token),
                &json!({"name": format!("key {i}"), "permissions": perms}),
            )
            .await
            .data(201);
        created.push(data);
    }
    let data = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    let list = data["api_keys"].as_array().expect("data.api_keys array");
    assert_eq!(list.len(), 3);
    let ids: Vec<&Value> = list.iter().map(|k| &k["id"]).collect();
    let want: Vec<&Value> = created.iter().rev().map(|k| &k["id"]).collect();
    assert_eq!(ids, want, "newest first");
    for (item, made) in list.iter().zip(created.iter().rev()) {
        assert!(item.get("key").is_none(), "list must not carry key: {item}");
        assert_eq!(item["key_prefix"], made["key_prefix"]);
        assert_eq!(item["name"], made["name"]);
        assert_eq!(permissions_of(item), permissions_of(made));
        assert_eq!(item["created_at"], made["created_at"]);
        assert_eq!(item["expires_at"], Value::Null);
        assert_eq!(item["revoked_at"], Value::Null);
        assert!(item.get("last_used_at").is_some(), "item: {item}");
        assert!(!data.to_string().contains(made["key"].as_str().unwrap()));
    }
    // A read key lists the same.
    let read = created[0]["key"].as_str().unwrap();
    let via_key = app.list_keys(Auth::Raw(read)).await.data(200);
    assert_eq!(via_key["api_keys"].as_array().unwrap().len(), 3);
}

async fn list_shows_only_own_keys(backend: Backend) {
    let app = spawn_app(backend).await;
    let alice = app.new_user("alice").await;
    let bob = app.new_user("bob").await;
    let a = app.create_key(&alice.token, &["read"], None).await;
    let data = app.list_keys(Auth::Bearer(&bob.token)).await.data(200);
    assert_eq!(data["api_keys"], json!([]));
    let b = app.create_key(&bob.token, &["read"], None).await;
    let data = app.list_keys(Auth::Bearer(&bob.token)).await.data(200);
    let list = data["api_keys"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], b["id"]);
    let data = app.list_keys(Auth::Bearer(&alice.token)).await.data(200);
    let list = data["api_keys"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], a["id"]);
}

async fn revoke_sets_revoked_at_and_refuses_the_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("revoke").await;
    let made = app.create_key(&user.token, &["read", "write"], None).await;
    let key = made["key"].as_str().unwrap();
    let id = made["id"].as_str().unwrap();
    app.me(Auth::Bearer(key)).await.data(200);
    let data = app.revoke_key(Auth::Bearer(&user.token), id).await.data(200);
    assert_eq!(data["id"], made["id"]);
    assert_eq!(data["name"], made["name"]);
    assert_eq!(data["key_prefix"], made["key_prefix"]);
    assert_eq!(permissions_of(&data), permissions_of(&made));
    assert!(data.get("key").is_none(), "revoke must not return the key: {data}");
    assert_timestamp(&data["revoked_at"]);
    // Refused at once, in both header forms.
    app.me(Auth::Bearer(key)).await.unauthorized();
    app.me(Auth::Raw(key)).await.unauthorized();
    app.list_keys(Auth::Bearer(key)).await.unauthorized();
    // The list shows it revoked.
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    let item = list["api_keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == made["id"])
        .cloned()
        .expect("revoked key still listed");
    assert_eq!(item["revoked_at"], data["revoked_at"]);
    // Revoking again: still revoked, not an error that says otherwise.
    let again = app.revoke_key(Auth::Bearer(&user.token), id).await;
    assert!(
        again.status == 200 || again.status == 404,
        "second revoke: {} {}",
        again.status,
        again.text
    );
    app.me(Auth::Bearer(key)).await.unauthorized();
}

async fn delete_removes_the_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("delete").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let keep = app.create_key(&user.token, &["read"], None).await;
    let key = made["key"].as_str().unwrap();
    let id = made["id"].as_str().unwrap();
    app.me(Auth::Bearer(key)).await.data(200);
    let data = app.delete_key(Auth::Bearer(&user.token), id).await.data(200);
    assert_eq!(data, json!({"id": id, "deleted": true}));
    app.me(Auth::Bearer(key)).await.unauthorized();
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    let ids: Vec<&Value> = list["api_keys"].as_array().unwrap().iter().map(|k| &k["id"]).collect();
    assert_eq!(ids, vec![&keep["id"]]);
    // Deleting again: 404.
    app.delete_key(Auth::Bearer(&user.token), id).await.not_found("api_key", id);
    app.revoke_key(Auth::Bearer(&user.token), id).await.not_found("api_key", id);
    // The other key is untouched.
    app.me(Auth::Bearer(keep["key"].as_str().unwrap())).await.data(200);
}

async fn other_users_key_is_not_found(backend: Backend) {
    let app = spawn_app(backend).await;
    let alice = app.new_user("alice").await;
    let mallory = app.new_user("mallory").await;
    let made = app.create_key(&alice.token, &["read"], None).await;
    let id = made["id"].as_str().unwrap();
    let mallory_write = app.key(&mallory.token, &["write"]).await;
    for auth in [Auth::Bearer(&mallory.token), Auth::Bearer(&mallory_write)] {
        let revoke = app.revoke_key(auth, id).await;
        revoke.not_found("api_key", id);
        let delete = app.delete_key(auth, id).await;
        delete.not_found("api_key", id);
        // Exactly as for a key that does not exist.
        let missing = app.delete_key(auth, "0190f0f0-0000-7000-8000-000000000000").await;
        let missing_error = missing.not_found("api_key", "0190f0f0-0000-7000-8000-000000000000");
        assert_eq!(
            delete.json()["error"]["message"],
            missing_error["message"],
            "another user's key must look missing"
        );
    }
    // Alice's key is unharmed.
    app.me(Auth::Bearer(made["key"].as_str().unwrap())).await.data(200);
    let list = app.list_keys(Auth::Bearer(&alice.token)).await.data(200);
    assert_eq!(list["api_keys"][0]["revoked_at"], Value::Null);
}

async fn missing_key_is_not_found(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("missing").await;
    let auth = Auth::Bearer(&user.token);
    for id in ["0190f0f0-0000-7000-8000-000000000000", "nope", "12345"] {
        app.revoke_key(auth, id).await.not_found("api_key", id);
        app.delete_key(auth, id).await.not_found("api_key", id);
    }
}

async fn last_used_at_is_recorded(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("lastused").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let unused = app.create_key(&user.token, &["read"], None).await;
    app.me(Auth::Bearer(made["key"].as_str().unwrap())).await.data(200);
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    for item in list["api_keys"].as_array().unwrap() {
        if item["id"] == made["id"] {
            assert_timestamp(&item["last_used_at"]);
        } else {
            assert_eq!(item["id"], unused["id"]);
            assert_eq!(item["last_used_at"], Value::Null);
        }
    }
}

async fn key_with_future_expiry_expires(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |_| {}).await;
    let user = app.new_user("expires").await;
    let made = app.create_key(&user.token, &["read"], Some(&in_secs(3))).await;
    let key = made["key"].as_str().unwrap();
    app.me(Auth::Bearer(key)).await.data(200);
    advance(&clock, 3300);
    let reply = app.me(Auth::Bearer(key)).await;
    reply.unauthorized();
    // Still listed, with its expiry.
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(list["api_keys"][0]["expires_at"], made["expires_at"]);
}

async fn revocation_and_deletion_hold_on_every_node_at_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let node_b = app.spawn_sibling(|_| {}).await;
    let user = app.new_user("nodes").await;
    let revoked = app.create_key(&user.token, &["read"], None).await;
    let deleted = app.create_key(&user.token, &["read"], None).await;
    for made in [&revoked, &deleted] {
        node_b.me(Auth::Bearer(made["key"].as_str().unwrap())).await.data(200);
    }
    app.revoke_key(Auth::Bearer(&user.token), revoked["id"].as_str().unwrap()).await.data(200);
    app.delete_key(Auth::Bearer(&user.token), deleted["id"].as_str().unwrap()).await.data(200);
    // No waiting: the other node refuses both keys immediately.
    for made in [&revoked, &deleted] {
        node_b.me(Auth::Bearer(made["key"].as_str().unwrap())).await.unauthorized();
    }
}

async fn list_pages_by_cursor_when_asked(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("paged-keys").await;
    for name in ["one", "two", "three"] {
        let body = json!({"name": name, "permissions": ["read"]});
        app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    }
    let names = |data: &Value| -> Vec<String> {
        data["api_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // Without paging parameters: every key, and no cursor field (as before paging existed).
    let whole = app.get("/api/v1/auth/api-keys", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(names(&whole), ["three", "two", "one"]);
    assert!(whole.get("next_cursor").is_none(), "{whole}");

    let first = app.get("/api/v1/auth/api-keys?limit=2", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(names(&first), ["three", "two"]);
    let cursor = first["next_cursor"].as_str().expect("a cursor").to_owned();
    let path = format!("/api/v1/auth/api-keys?limit=2&cursor={cursor}");
    let last = app.get(&path, Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(names(&last), ["one"]);
    assert_eq!(last["next_cursor"], Value::Null, "{last}");

    for bad in ["limit=0", "limit=201", "limit=x", "cursor=garbage"] {
        let field = bad.split('=').next().unwrap();
        app.get(&format!("/api/v1/auth/api-keys?{bad}"), Auth::Bearer(&user.token))
            .await
            .invalid(field);
    }
}
