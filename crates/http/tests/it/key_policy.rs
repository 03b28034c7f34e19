//! Keys that govern spend: the new key fields on create and PATCH, and rotation with
//! a grace period (on one node and across two).

use crate::common;

use aigw_service::{ProviderConfig, ProviderKind};
use common::*;
use serde_json::{json, Value};

backend_tests!(
    create_accepts_and_shows_the_policy_fields,
    every_key_object_shows_the_policy_fields,
    create_validates_the_policy_fields,
    patch_sets_clears_and_keeps_fields,
    patch_validates_and_refuses_unknown_fields,
    patch_is_for_access_tokens_and_own_keys_only,
    patch_reaches_the_other_node_at_once,
    rotate_keeps_the_id_and_the_old_secret_until_the_grace_ends,
    rotating_again_ends_the_older_secret_at_once,
    rotate_refuses_revoked_keys_bad_grace_and_api_keys,
    rotated_secret_dies_on_the_other_node_too,
    allowed_models_are_enforced_and_filter_the_model_list,
);

impl TestApp {
    pub async fn patch_key(&self, auth: Auth<'_>, id: &str, body: &Value) -> Reply {
        let path = format!("/api/v1/auth/api-keys/{id}");
        self.send(self.request(reqwest::Method::PATCH, &path, auth).json(body)).await
    }

    pub async fn rotate_key(&self, auth: Auth<'_>, id: &str, body: Option<&Value>) -> Reply {
        let path = format!("/api/v1/auth/api-keys/{id}/rotate");
        match body {
            Some(b) => self.post(&path, auth, b).await,
            None => self.post_empty(&path, auth).await,
        }
    }
}

const POLICY_FIELDS: [&str; 8] = [
    "allowed_models",
    "max_budget_usd",
    "budget_period",
    "rpm_limit",
    "tpm_limit",
    "metadata",
    "spend_usd",
    "budget_reset_at",
];

fn assert_policy_fields(key: &Value) {
    for field in POLICY_FIELDS {
        assert!(key.get(field).is_some(), "key object lacks {field}: {key}");
    }
}

fn full_policy() -> Value {
    json!({
        "name": "team key",
        "permissions": ["ai_gateway", "read"],
        "allowed_models": ["echo", "gpt-4o*"],
        "max_budget_usd": 12.5,
        "budget_period": "monthly",
        "rpm_limit": 60,
        "tpm_limit": 10000,
        "metadata": {"team": "ml", "cost_center": "42"}
    })
}

async fn create_accepts_and_shows_the_policy_fields(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("policy").await;
    let data = app.create_key_raw(Auth::Bearer(&user.token), &full_policy()).await.data(201);
    assert_policy_fields(&data);
    assert_eq!(data["allowed_models"], json!(["echo", "gpt-4o*"]));
    assert_eq!(data["max_budget_usd"], json!(12.5));
    assert_eq!(data["budget_period"], json!("monthly"));
    assert_eq!(data["rpm_limit"], json!(60));
    assert_eq!(data["tpm_limit"], json!(10000));
    assert_eq!(data["metadata"], json!({"team": "ml", "cost_center": "42"}));
    assert_eq!(data["spend_usd"], json!(0.0));
    // The first midnight UTC of next month.
    let reset = data["budget_reset_at"].as_str().unwrap();
    let reset = chrono::DateTime::parse_from_rfc3339(reset).unwrap().with_timezone(&chrono::Utc);
    let now = chrono::Utc::now();
    assert!(reset > now && reset - now <= chrono::Duration::days(31), "reset: {reset}");
    assert_eq!(reset.format("%d %H:%M:%S").to_string(), "01 00:00:00");
    // A key without limits shows nulls, and a total budget never resets.
    let plain = app.create_key(&user.token, &["read"], None).await;
    assert_policy_fields(&plain);
    for field in ["allowed_models", "max_budget_usd", "budget_period", "rpm_limit", "tpm_limit"] {
        assert_eq!(plain[field], Value::Null, "{field}: {plain}");
    }
    assert_eq!(plain["budget_reset_at"], Value::Null);
    let total = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "t", "permissions": ["read"], "max_budget_usd": 1, "budget_period": "total"}),
        )
        .await
        .data(201);
    assert_eq!(total["budget_period"], json!("total"));
    assert_eq!(total["budget_reset_at"], Value::Null);
    // A glob matching no model is allowed.
    let none = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "g", "permissions": ["read"], "allowed_models": ["no-such-model-*"]}),
        )
        .await
        .data(201);
    assert_eq!(none["allowed_models"], json!(["no-such-model-*"]));
}

async fn every_key_object_shows_the_policy_fields(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("objects").await;
    let made = app.create_key_raw(Auth::Bearer(&user.token), &full_policy()).await.data(201);
    let id = made["id"].as_str().unwrap();
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    let listed = &list["api_keys"][0];
    assert_policy_fields(listed);
    for field in POLICY_FIELDS {
        assert_eq!(listed[field], made[field], "{field} differs in the list");
    }
    let patched = app.patch_key(Auth::Bearer(&user.token), id, &json!({})).await.data(200);
    assert_policy_fields(&patched);
    let rotated = app.rotate_key(Auth::Bearer(&user.token), id, None).await.data(200);
    assert_policy_fields(&rotated);
    let revoked = app.revoke_key(Auth::Bearer(&user.token), id).await.data(200);
    assert_policy_fields(&revoked);
    assert_eq!(revoked["max_budget_usd"], json!(12.5));
}

async fn create_validates_the_policy_fields(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("invalid").await;
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cases = [
        (json!({"max_budget_usd": -1}), "max_budget_usd"),
        (json!({"max_budget_usd": "ten"}), "max_budget_usd"),
        (json!({"budget_period": "hourly"}), "budget_period"),
        (json!({"rpm_limit": -5}), "rpm_limit"),
        (json!({"rpm_limit": 0}), "rpm_limit"),
        (json!({"rpm_limit": 1.5}), "rpm_limit"),
        (json!({"tpm_limit": -1}), "tpm_limit"),
        (json!({"allowed_models": []}), "allowed_models"),
        (json!({"allowed_models": ["ok", ""]}), "allowed_models[1]"),
        (json!({"allowed_models": "echo"}), "allowed_models"),
        (json!({"metadata": {"a": 1}}), "metadata.a"),
        (json!({"metadata": many}), "metadata"),
        (json!({"metadata": {"big": "x".repeat(5000)}}), "metadata"),
    ];
    for (extra, field) in cases {
        let mut body = json!({"name": "k", "permissions": ["read"]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        app.create_key_raw(Auth::Bearer(&user.token), &body).await.invalid(field);
    }
    // Nothing half-written.
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(list["api_keys"], json!([]));
}

async fn patch_sets_clears_and_keeps_fields(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("patch").await;
    let made = app.create_key_raw(Auth::Bearer(&user.token), &full_policy()).await.data(201);
    let id = made["id"].as_str().unwrap();
    let auth = Auth::Bearer(&user.token);
    let patched = app
        .patch_key(
            auth,
            id,
            &json!({"name": "renamed", "max_budget_usd": null, "rpm_limit": 5,
                    "budget_period": "daily", "permissions": ["read"], "expires_at": in_secs(3600)}),
        )
        .await
        .data(200);
    assert_eq!(patched["id"], made["id"]);
    assert_eq!(patched["key_prefix"], made["key_prefix"]);
    assert_eq!(patched["name"], json!("renamed"));
    assert_eq!(patched["max_budget_usd"], Value::Null);
    assert_eq!(patched["rpm_limit"], json!(5));
    assert_eq!(patched["budget_period"], json!("daily"));
    assert_eq!(patched["permissions"], json!(["read"]));
    assert_timestamp(&patched["expires_at"]);
    // Untouched fields are kept.
    assert_eq!(patched["tpm_limit"], json!(10000));
    assert_eq!(patched["allowed_models"], made["allowed_models"]);
    assert_eq!(patched["metadata"], made["metadata"]);
    // Every nullable field clears with null.
    let cleared = app
        .patch_key(
            auth,
            id,
            &json!({"allowed_models": null, "budget_period": null, "rpm_limit": null,
                    "tpm_limit": null, "metadata": null, "expires_at": null}),
        )
        .await
        .data(200);
    for field in
        ["allowed_models", "budget_period", "rpm_limit", "tpm_limit", "metadata", "expires_at"]
    {
        assert_eq!(cleared[field], Value::Null, "{field}: {cleared}");
    }
    // And the list reads what was stored.
    let list = app.list_keys(auth).await.data(200);
    assert_eq!(list["api_keys"][0]["name"], json!("renamed"));
    assert_eq!(list["api_keys"][0]["rpm_limit"], Value::Null);
    // The key still works with its new permissions (read, no ai_gateway).
    let secret = made["key"].as_str().unwrap();
    app.me(Auth::Bearer(secret)).await.data(200);
    app.chat(Auth::Bearer(secret), &chat_body("echo", "hi")).await.forbidden("ai_gateway", "read");
}

async fn patch_validates_and_refuses_unknown_fields(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("patchbad").await;
    let made = app.create_key_raw(Auth::Bearer(&user.token), &full_policy()).await.data(201);
    let id = made["id"].as_str().unwrap();
    let auth = Auth::Bearer(&user.token);
    let cases = [
        (json!({"owner": "x"}), "owner"),
        (json!({"key_prefix": "aigw_x"}), "key_prefix"),
        (json!({"name": null}), "name"),
        (json!({"name": ""}), "name"),
        (json!({"permissions": null}), "permissions"),
        (json!({"permissions": ["root"]}), "permissions[0]"),
        (json!({"expires_at": "2001-01-01T00:00:00Z"}), "expires_at"),
        (json!({"max_budget_usd": -0.5}), "max_budget_usd"),
        (json!({"budget_period": "yearly"}), "budget_period"),
        (json!({"tpm_limit": 0}), "tpm_limit"),
        (json!({"metadata": {"a": true}}), "metadata.a"),
    ];
    for (body, field) in cases {
        app.patch_key(auth, id, &body).await.invalid(field);
    }
    let reply = app
        .send(
            app.request(reqwest::Method::PATCH, &format!("/api/v1/auth/api-keys/{id}"), auth)
                .header("content-type", "application/json")
                .body("[1]"),
        )
        .await;
    reply.invalid("body");
    // Nothing changed.
    let list = app.list_keys(auth).await.data(200);
    for field in POLICY_FIELDS {
        assert_eq!(list["api_keys"][0][field], made[field], "{field} changed");
    }
    assert_eq!(list["api_keys"][0]["name"], made["name"]);
}

async fn patch_is_for_access_tokens_and_own_keys_only(backend: Backend) {
    let app = spawn_app(backend).await;
    let alice = app.new_user("alice").await;
    let mallory = app.new_user("mallory").await;
    let made = app.create_key(&alice.token, &["admin"], None).await;
    let id = made["id"].as_str().unwrap();
    let admin_key = made["key"].as_str().unwrap();
    // A key never changes a key, not even itself, not even with admin.
    app.patch_key(Auth::Bearer(admin_key), id, &json!({"rpm_limit": 1}))
        .await
        .forbidden("access_token", "api_key");
    app.rotate_key(Auth::Bearer(admin_key), id, None).await.forbidden("access_token", "api_key");
    // Another user's key is indistinguishable from a missing one.
    app.patch_key(Auth::Bearer(&mallory.token), id, &json!({"rpm_limit": 1}))
        .await
        .not_found("api_key", id);
    app.rotate_key(Auth::Bearer(&mallory.token), id, None).await.not_found("api_key", id);
    let missing = "0190f0f0-0000-7000-8000-000000000000";
    app.patch_key(Auth::Bearer(&alice.token), missing, &json!({}))
        .await
        .not_found("api_key", missing);
    app.patch_key(Auth::None, id, &json!({})).await.unauthorized();
    let list = app.list_keys(Auth::Bearer(&alice.token)).await.data(200);
    assert_eq!(list["api_keys"][0]["rpm_limit"], Value::Null);
    assert_eq!(list["api_keys"][0]["key_prefix"], made["key_prefix"]);
}

async fn patch_reaches_the_other_node_at_once(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |_| {}).await;
    let node_b = app.spawn_sibling(|s| s.clock = clock.clone()).await;
    let user = app.new_user("patchnodes").await;
    let made = app.create_key(&user.token, &["read", "ai_gateway"], None).await;
    let (id, secret) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    // Node B caches the key.
    node_b.me(Auth::Bearer(secret)).await.data(200);
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"permissions": ["ai_gateway"]}))
        .await
        .data(200);
    // No waiting: node B applies the change before the PATCH answered.
    node_b.me(Auth::Bearer(secret)).await.forbidden("read", "ai_gateway");
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"expires_at": in_secs(1)}))
        .await
        .data(200);
    advance(&clock, 1100);
    node_b.me(Auth::Bearer(secret)).await.unauthorized();
}

async fn rotate_keeps_the_id_and_the_old_secret_until_the_grace_ends(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |_| {}).await;
    let user = app.new_user("rotate").await;
    let made = app.create_key_raw(Auth::Bearer(&user.token), &full_policy()).await.data(201);
    let (id, old) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    app.me(Auth::Bearer(old)).await.data(200);
    let rotated = app
        .rotate_key(Auth::Bearer(&user.token), id, Some(&json!({"grace_period_secs": 2})))
        .await
        .data(200);
    let new = rotated["key"].as_str().unwrap();
    assert_eq!(rotated["id"], made["id"], "rotation must keep the key's identity");
    assert_ne!(new, old);
    assert_eq!(new.len(), 43);
    assert_eq!(rotated["key_prefix"], json!(&new[..12]));
    assert_ne!(rotated["key_prefix"], made["key_prefix"]);
    assert_timestamp(&rotated["rotated_at"]);
    for field in
        ["name", "permissions", "allowed_models", "max_budget_usd", "rpm_limit", "metadata"]
    {
        assert_eq!(rotated[field], made[field], "rotation changed {field}");
    }
    // Both secrets work inside the grace period, as the same key.
    app.me(Auth::Bearer(new)).await.data(200);
    app.me(Auth::Bearer(old)).await.data(200);
    let list = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(list["api_keys"].as_array().unwrap().len(), 1);
    assert_eq!(list["api_keys"][0]["key_prefix"], rotated["key_prefix"]);
    // After the grace period the old secret is refused, saying why.
    advance(&clock, 2100);
    let error = app.me(Auth::Bearer(old)).await.unauthorized();
    assert!(
        error["details"]["hint"].as_str().unwrap().contains("rotated"),
        "hint must say the key was rotated: {error}"
    );
    app.me(Auth::Bearer(new)).await.data(200);
    // A zero grace period ends the old secret at once; the default is 24 hours.
    let now_old = new;
    let again = app
        .rotate_key(Auth::Bearer(&user.token), id, Some(&json!({"grace_period_secs": 0})))
        .await
        .data(200);
    app.me(Auth::Bearer(now_old)).await.unauthorized();
    app.me(Auth::Bearer(again["key"].as_str().unwrap())).await.data(200);
}

async fn rotating_again_ends_the_older_secret_at_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("rotate2").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let (id, first) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    let second = app.rotate_key(Auth::Bearer(&user.token), id, None).await.data(200);
    let second = second["key"].as_str().unwrap();
    app.me(Auth::Bearer(first)).await.data(200);
    let third = app.rotate_key(Auth::Bearer(&user.token), id, None).await.data(200);
    let third = third["key"].as_str().unwrap();
    // Never more than two live secrets: the first is gone, the second in its grace period.
    app.me(Auth::Bearer(first)).await.unauthorized();
    app.me(Auth::Bearer(second)).await.data(200);
    app.me(Auth::Bearer(third)).await.data(200);
    // Revoking the key ends every secret.
    app.revoke_key(Auth::Bearer(&user.token), id).await.data(200);
    app.me(Auth::Bearer(second)).await.unauthorized();
    app.me(Auth::Bearer(third)).await.unauthorized();
}

async fn rotate_refuses_revoked_keys_bad_grace_and_api_keys(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("rotatebad").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let id = made["id"].as_str().unwrap();
    let auth = Auth::Bearer(&user.token);
    for body in [json!({"grace_period_secs": -1}), json!({"grace_period_secs": 604801})] {
        app.rotate_key(auth, id, Some(&body)).await.invalid("grace_period_secs");
    }
    app.rotate_key(auth, id, Some(&json!({"grace_period_secs": "1"})))
        .await
        .invalid("grace_period_secs");
    app.rotate_key(auth, id, Some(&json!({"grace": 1}))).await.invalid("grace");
    // The key was not rotated by any of those.
    app.me(Auth::Bearer(made["key"].as_str().unwrap())).await.data(200);
    let list = app.list_keys(auth).await.data(200);
    assert_eq!(list["api_keys"][0]["key_prefix"], made["key_prefix"]);
    assert_eq!(list["api_keys"][0]["rotated_at"], Value::Null);
    app.revoke_key(auth, id).await.data(200);
    let error = app.rotate_key(auth, id, None).await.error(400, "invalid_request");
    assert!(error["details"]["issue"].as_str().unwrap().contains("revoked"), "{error}");
    app.rotate_key(auth, id, Some(&json!({"grace_period_secs": 604800})))
        .await
        .error(400, "invalid_request");
}

async fn rotated_secret_dies_on_the_other_node_too(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |_| {}).await;
    let node_b = app.spawn_sibling(|s| s.clock = clock.clone()).await;
    let user = app.new_user("rotatenodes").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let (id, old) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    // Node B caches the old secret as the key's current one.
    node_b.me(Auth::Bearer(old)).await.data(200);
    let rotated = app
        .rotate_key(Auth::Bearer(&user.token), id, Some(&json!({"grace_period_secs": 1})))
        .await
        .data(200);
    let new = rotated["key"].as_str().unwrap();
    node_b.me(Auth::Bearer(new)).await.data(200);
    node_b.me(Auth::Bearer(old)).await.data(200);
    advance(&clock, 1100);
    let error = node_b.me(Auth::Bearer(old)).await.unauthorized();
    assert!(error["details"]["hint"].as_str().unwrap().contains("rotated"), "{error}");
    node_b.me(Auth::Bearer(new)).await.data(200);
    // A zero-grace rotation kills the secret on node B before the answer.
    let again = app
        .rotate_key(Auth::Bearer(&user.token), id, Some(&json!({"grace_period_secs": 0})))
        .await
        .data(200);
    node_b.me(Auth::Bearer(new)).await.unauthorized();
    node_b.me(Auth::Bearer(again["key"].as_str().unwrap())).await.data(200);
}

/// An echo provider that also serves `gpt-4o`, `gpt-4o-mini` and `o3`.
fn more_models(s: &mut aigw_http::settings::Settings) {
    s.providers = vec![ProviderConfig {
        name: "local".into(),
        kind: ProviderKind::Echo,
        base_url: None,
        api_key: None,
        models: vec!["gpt-4o".into(), "gpt-4o-mini".into(), "o3".into()],
        tokenizers: Default::default(),
        prices: Default::default(),
        ..ProviderConfig::default()
    }];
}

fn model_ids(reply: &Reply) -> Vec<String> {
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn allowed_models_are_enforced_and_filter_the_model_list(backend: Backend) {
    let app = spawn_app_with(backend, more_models).await;
    let node_b = app.spawn_sibling(more_models).await;
    let user = app.new_user("models").await;
    let made = app
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "m", "permissions": ["ai_gateway"], "allowed_models": ["gpt-4o*", "echo"]}),
        )
        .await
        .data(201);
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    for model in ["gpt-4o", "gpt-4o-mini", "echo"] {
        completed(app.chat(Auth::Bearer(key), &chat_body(model, "hi")).await);
    }
    let error = app
        .chat(Auth::Bearer(key), &chat_body("o3", "hi"))
        .await
        .forbidden("model:o3", "gpt-4o*,echo");
    assert!(error["message"].as_str().unwrap().contains("model:o3"), "{error}");
    // A model that does not exist is refused the same way (nothing about the configuration
    // leaks to a key that may not call it).
    app.chat(Auth::Bearer(key), &chat_body("nope", "hi"))
        .await
        .forbidden("model:nope", "gpt-4o*,echo");
    let listed = app.get("/api/v1/ai/models", Auth::Bearer(key)).await;
    assert_eq!(model_ids(&listed), ["echo", "gpt-4o", "gpt-4o-mini"]);
    // A key without allowed_models sees and calls every model.
    let open = app.key(&user.token, &["ai_gateway"]).await;
    assert_eq!(
        model_ids(&app.get("/api/v1/ai/models", Auth::Bearer(&open)).await),
        ["echo", "gpt-4o", "gpt-4o-mini", "o3"]
    );
    completed(app.chat(Auth::Bearer(&open), &chat_body("o3", "hi")).await);
    // A change reaches the other node at once.
    app.chat(Auth::Bearer(key), &chat_body("o3", "hi")).await.forbidden("model:o3", "gpt-4o*,echo");
    completed(node_b.chat(Auth::Bearer(key), &chat_body("gpt-4o", "hi")).await);
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"allowed_models": ["o3"]}))
        .await
        .data(200);
    node_b
        .chat(Auth::Bearer(key), &chat_body("gpt-4o", "hi"))
        .await
        .forbidden("model:gpt-4o", "o3");
    completed(node_b.chat(Auth::Bearer(key), &chat_body("o3", "hi")).await);
    assert_eq!(model_ids(&node_b.get("/api/v1/ai/models", Auth::Bearer(key)).await), ["o3"]);
    app.patch_key(Auth::Bearer(&user.token), id, &json!({"allowed_models": null})).await.data(200);
    completed(node_b.chat(Auth::Bearer(key), &chat_body("gpt-4o", "hi")).await);
}

/// Asserts a chat completion answered 200 (OpenAI's body, no envelope).
fn completed(reply: Reply) {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["object"], json!("chat.completion"), "{}", reply.text);
}
