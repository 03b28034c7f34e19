//! Hostile inputs: a NUL character (U+0000) in any string a client sends (JSON bodies, query
//! parameters, path segments) and numbers outside their documented ranges are 400
//! `invalid_request` naming the field, never 500 or 503 (PostgreSQL `text` cannot hold NUL),
//! and nothing is written.

use crate::common;

use aigw_domain::Role;
use common::*;
use serde_json::{json, Value};

backend_tests!(
    nul_in_bodies_is_400_naming_the_field,
    nul_in_query_parameters_is_400_naming_it,
    nul_in_path_ids_is_400_naming_id,
    every_documented_string_refuses_nul,
    out_of_range_numbers_are_400_naming_the_field,
    out_of_range_times_are_400_naming_the_field,
);

const NUL_ISSUE: &str = "must not contain the NUL character (U+0000)";
/// The OpenAPI `pattern` of a string that refuses NUL.
const NO_NUL_PATTERN: &str = "^[^\\u0000]*$";

/// 400 naming `field` with the NUL issue.
fn nul_refused(reply: &Reply, field: &str, what: &str) {
    assert_eq!(reply.status, 400, "{what}: {}", reply.text);
    let error = reply.invalid(field);
    assert_eq!(error["details"]["issue"], json!(NUL_ISSUE), "{what}: {error}");
}

/// A registered user made an admin the way an operator does.
async fn new_admin(app: &TestApp, tag: &str) -> User {
    let user = app.new_user(tag).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &user.email, Role::Admin).await.unwrap();
    user
}

async fn send_json(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    auth: Auth<'_>,
    body: &Value,
) -> Reply {
    app.send(app.request(method, path, auth).json(body)).await
}

async fn nul_in_bodies_is_400_naming_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("nul");
    // The measured case: a NUL in the login e-mail.
    let reply = app.login_raw("a\u{0}@x.io", PASSWORD).await;
    nul_refused(&reply, "email", "login email");
    nul_refused(&app.login_raw(&email, "pass\u{0}word").await, "password", "login password");
    for (field, body) in [
        ("email", json!({"email": format!("\u{0}{email}"), "password": PASSWORD})),
        ("password", json!({"email": email, "password": "correct horse\u{0}"})),
        ("name", json!({"email": email, "password": PASSWORD, "name": "A\u{0}nn"})),
        ("invitation", json!({"email": email, "password": PASSWORD, "invitation": "\u{0}"})),
    ] {
        nul_refused(&app.register_raw(&body).await, field, "register");
    }
    // Nothing was registered: the address is still free.
    app.register(&email, PASSWORD, None).await;

    let admin = new_admin(&app, "nul-admin").await;
    let user = app.new_user("nul-user").await;
    let bearer = Auth::Bearer(&user.token);
    let refresh = json!({"refresh_token": "\u{0}"});
    let reply = app.post("/api/v1/auth/refresh", Auth::None, &refresh).await;
    nul_refused(&reply, "refresh_token", "refresh");
    let logout = app.logout(&user.token, Some(&json!({"refresh_token": "aigwr_\u{0}"}))).await;
    nul_refused(&logout, "refresh_token", "logout");
    app.me(bearer).await.data(200);

    let key = json!({"name": "k", "permissions": ["read"]});
    let with = |field: &str, value: Value| {
        let mut body = key.clone();
        body[field] = value;
        body
    };
    for (field, body) in [
        ("name", with("name", json!("k\u{0}"))),
        ("permissions[0]", with("permissions", json!(["read\u{0}"]))),
        ("expires_at", with("expires_at", json!("2099-01-01T00:00:00Z\u{0}"))),
        ("allowed_models[1]", with("allowed_models", json!(["gpt-4o", "gpt\u{0}"]))),
        ("budget_period", with("budget_period", json!("daily\u{0}"))),
        ("metadata.team", with("metadata", json!({"team": "a\u{0}b"}))),
        ("metadata", with("metadata", json!({"te\u{0}am": "ab"}))),
        ("rpm_limit", with("rpm_limit", json!("\u{0}"))),
    ] {
        nul_refused(&app.create_key_raw(bearer, &body).await, field, "create key");
    }
    // Not a half-written key: the caller still has none.
    let keys = app.list_keys(bearer).await.data(200);
    assert_eq!(keys["api_keys"], json!([]), "{keys}");

    let id = app.create_key(&user.token, &["read"], None).await["id"].as_str().unwrap().to_owned();
    let key_path = format!("/api/v1/auth/api-keys/{id}");
    for (field, body) in [
        ("name", json!({"name": "\u{0}"})),
        ("expires_at", json!({"expires_at": "\u{0}"})),
        ("allowed_models[0]", json!({"allowed_models": ["\u{0}"]})),
        ("metadata.a", json!({"metadata": {"a": "\u{0}"}})),
    ] {
        let reply = send_json(&app, reqwest::Method::PATCH, &key_path, bearer, &body).await;
        nul_refused(&reply, field, "update key");
    }
    let name = json!({"name": "\u{0}"});
    let me = send_json(&app, reqwest::Method::PATCH, "/api/v1/auth/me", bearer, &name).await;
    nul_refused(&me, "name", "update me");
    for (field, body) in [
        (
            "current_password",
            json!({"current_password": "\u{0}", "new_password": "a new long passphrase"}),
        ),
        (
            "new_password",
            json!({"current_password": PASSWORD, "new_password": "a new long\u{0}phrase"}),
        ),
    ] {
        nul_refused(&app.post("/api/v1/auth/password", bearer, &body).await, field, "password");
    }
    let admin_auth = Auth::Bearer(&admin.token);
    for (field, body) in [
        ("email", json!({"email": "bob\u{0}@example.com"})),
        ("expires_at", json!({"email": "bob@example.com", "expires_at": "\u{0}"})),
    ] {
        let reply = app.post("/api/v1/admin/invitations", admin_auth, &body).await;
        nul_refused(&reply, field, "invitation");
    }
    // The chat body is forwarded, not walked: a NUL model is no configured model, and a NUL
    // in the messages goes to the upstream; neither reaches SQL.
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("ec\u{0}ho", "hi")).await;
    assert!(matches!(reply.status, 400 | 404), "chat model with NUL: {}", reply.text);
    let reply = app.chat(Auth::Bearer(&key), &chat_body("echo", "h\u{0}i")).await;
    assert_eq!(reply.status, 200, "chat content with NUL: {}", reply.text);
    let user_path = format!("/api/v1/admin/users/{}", user.id);
    let reply =
        send_json(&app, reqwest::Method::PATCH, &user_path, admin_auth, &json!({"role": "\u{0}"}))
            .await;
    nul_refused(&reply, "role", "update user");
}

async fn nul_in_query_parameters_is_400_naming_it(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "q-admin").await;
    let auth = Auth::Bearer(&admin.token);
    for (path, field) in [
        // The measured cases.
        ("/api/v1/admin/users?email=ann%00", "email"),
        ("/api/v1/admin/api-keys?user_id=0190a1b2-0000-7000-8000-000000000000%00", "user_id"),
        ("/api/v1/usage?api_key_id=0190a1b2-0000-7000-8000-000000000000%00", "api_key_id"),
        ("/api/v1/admin/users?cursor=%00", "cursor"),
        ("/api/v1/admin/users?limit=1%00", "limit"),
        ("/api/v1/admin/audit?user_id=%00", "user_id"),
        ("/api/v1/admin/audit?action=login_failed%00", "action"),
        ("/api/v1/audit?action=%00", "action"),
        ("/api/v1/audit?cursor=a%00", "cursor"),
        ("/api/v1/usage?from=2026-01-01%00", "from"),
        ("/api/v1/usage?group_by=day%00", "group_by"),
        ("/api/v1/usage/requests?cursor=%00", "cursor"),
        ("/api/v1/usage/requests?limit=%00", "limit"),
        // A parameter name with NUL is unknown, and not echoed.
        ("/api/v1/admin/users?email%00=ann", "query"),
    ] {
        let reply = app.get(path, auth).await;
        if field == "query" {
            reply.invalid("query");
        } else {
            nul_refused(&reply, field, path);
        }
    }
}

async fn nul_in_path_ids_is_400_naming_id(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "p-admin").await;
    let auth = Auth::Bearer(&admin.token);
    let id = "0190a1b2-0000-7000-8000-000000000000%00";
    let patch = reqwest::Method::PATCH;
    let cases: Vec<(reqwest::Method, String, Option<Value>)> = vec![
        (reqwest::Method::DELETE, format!("/api/v1/auth/sessions/{id}"), None),
        (reqwest::Method::GET, format!("/api/v1/admin/users/{id}"), None),
        (patch.clone(), format!("/api/v1/admin/users/{id}"), Some(json!({"disabled": true}))),
        (reqwest::Method::POST, format!("/api/v1/admin/api-keys/{id}/revoke"), None),
        (patch, format!("/api/v1/auth/api-keys/{id}"), Some(json!({"name": "x"}))),
        (reqwest::Method::DELETE, format!("/api/v1/auth/api-keys/{id}"), None),
        (reqwest::Method::POST, format!("/api/v1/auth/api-keys/{id}/revoke"), None),
        (reqwest::Method::POST, format!("/api/v1/auth/api-keys/{id}/rotate"), None),
    ];
    for (method, path, body) in cases {
        let with_body = |builder: reqwest::RequestBuilder| match &body {
            Some(b) => builder.json(b),
            None => builder,
        };
        let reply = app.send(with_body(app.request(method.clone(), &path, auth))).await;
        nul_refused(&reply, "id", &format!("{method} {path}"));
        // Without a credential the answer is still the 401.
        app.send(with_body(app.request(method.clone(), &path, Auth::None))).await.unauthorized();
    }
}

/// Every string parameter and every free-text field of every request body in the OpenAPI
/// document (but the forwarded chat completion) says it refuses NUL, and does: 400 naming it.
async fn every_documented_string_refuses_nul(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "doc-admin").await;
    let auth = Auth::Bearer(&admin.token);
    let doc = app.get("/api/v1/openapi.json", Auth::None).await.json();
    let schemas = &doc["components"]["schemas"];
    let is_text = |schema: &Value| {
        let t = &schema["type"];
        let string = t == "string" || t.as_array().is_some_and(|ts| ts.contains(&json!("string")));
        string && schema.get("enum").is_none()
    };
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        // The gateway's routes take an API key, not this admin's token, and pass their bodies
        // through as the caller wrote them (`embeddings.rs` checks the one path parameter).
        if path.starts_with("/api/v1/ai/") {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            let method: reqwest::Method = method.to_uppercase().parse().unwrap();
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                // Header values cannot carry NUL at all (HTTP refuses it before aigw).
                if !is_text(&parameter["schema"]) || parameter["in"] == "header" {
                    continue;
                }
                let name = parameter["name"].as_str().unwrap();
                let described = parameter["description"].as_str().unwrap_or_default();
                assert!(described.contains("U+0000"), "{method} {path} {name}: {described}");
                let pattern = &parameter["schema"]["pattern"];
                assert!(pattern.is_string(), "{method} {path} {name}: no pattern");
                let url = match parameter["in"].as_str() {
                    Some("path") => path.replace(&format!("{{{name}}}"), "a%00"),
                    _ => format!("{}?{name}=a%00", path.replace("{id}", "x")),
                };
                let mut request = app.request(method.clone(), &url, auth);
                if !operation["requestBody"].is_null() {
                    request = request.json(&json!({}));
                }
                nul_refused(&app.send(request).await, name, &format!("{method} {url}"));
                checked += 1;
            }
            let Some(reference) =
                operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].as_str()
            else {
                continue;
            };
            let schema = &schemas[reference.rsplit('/').next().unwrap()];
            let url = path.replace("{id}", "0190a1b2-0000-7000-8000-000000000000");
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                let (value, field, pattern) = if is_text(property) {
                    (json!("a\u{0}"), name.clone(), &property["pattern"])
                } else if is_text(&property["items"]) {
                    (json!(["a\u{0}"]), format!("{name}[0]"), &property["items"]["pattern"])
                } else if is_text(&property["additionalProperties"]) {
                    assert_eq!(property["propertyNames"]["pattern"], json!(NO_NUL_PATTERN));
                    let values = &property["additionalProperties"]["pattern"];
                    (json!({"k": "a\u{0}"}), format!("{name}.k"), values)
                } else {
                    continue;
                };
                assert_eq!(pattern, &json!(NO_NUL_PATTERN), "{method} {path} {name}");
                let described = property["description"].as_str().unwrap_or_default();
                assert!(described.contains("U+0000"), "{method} {path} {name}: {described}");
                let body = json!({ name.as_str(): value });
                let reply = send_json(&app, method.clone(), &url, auth, &body).await;
                nul_refused(&reply, &field, &format!("{method} {path} {body}"));
                checked += 1;
            }
        }
    }
    assert!(checked >= 40, "only {checked} strings found in the OpenAPI document");
    // The admin is still logged in: none of those requests did anything.
    app.me(auth).await.data(200);
}

async fn out_of_range_numbers_are_400_naming_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "n-admin").await;
    let auth = Auth::Bearer(&admin.token);
    for base in ["/api/v1/admin/users", "/api/v1/admin/api-keys", "/api/v1/admin/audit"]
        .into_iter()
        .chain(["/api/v1/audit", "/api/v1/usage/requests"])
    {
        for limit in ["-1", "0", "201", "9223372036854775808", "-9223372036854775809", "1e3"] {
            let path = format!("{base}?limit={limit}");
            app.get(&path, auth).await.invalid("limit");
        }
    }
    let key = |field: &str, raw: &str| {
        format!(r#"{{"name":"k","permissions":["read"],"{field}":{raw}}}"#)
    };
    let huge = ["9223372036854775807", "9223372036854775808", "-9223372036854775809", "1e400"];
    for field in ["rpm_limit", "tpm_limit"] {
        for raw in ["0", "-1", "1000000001", "1.5", "1e30"].into_iter().chain(huge) {
            let reply = app.post_raw("/api/v1/auth/api-keys", auth, key(field, raw)).await;
            reply.invalid(field);
        }
    }
    for raw in ["-1", "-0.5", "1000000000.5", "1e308", "1e400", "-1e400"] {
        let reply = app.post_raw("/api/v1/auth/api-keys", auth, key("max_budget_usd", raw)).await;
        reply.invalid("max_budget_usd");
    }
    // Nothing was created.
    assert_eq!(app.list_keys(auth).await.data(200)["api_keys"], json!([]));

    let id = app.create_key(&admin.token, &["read"], None).await["id"].as_str().unwrap().to_owned();
    let key_path = format!("/api/v1/auth/api-keys/{id}");
    for (field, raw) in [
        ("rpm_limit", "0"),
        ("rpm_limit", "9223372036854775808"),
        ("tpm_limit", "1e400"),
        ("tpm_limit", "-9223372036854775809"),
        ("max_budget_usd", "1e400"),
        ("max_budget_usd", "-1"),
    ] {
        let builder = app
            .request(reqwest::Method::PATCH, &key_path, auth)
            .header("content-type", "application/json")
            .body(format!(r#"{{"{field}":{raw}}}"#));
        app.send(builder).await.invalid(field);
    }
    for raw in ["-1", "604801", "9223372036854775808", "-9223372036854775809", "1e400", "0.5"] {
        let reply = app
            .post_raw(
                &format!("{key_path}/rotate"),
                auth,
                format!(r#"{{"grace_period_secs":{raw}}}"#),
            )
            .await;
        reply.invalid("grace_period_secs");
    }
    // The key is as it was: never rotated, no limits.
    let keys = app.list_keys(auth).await.data(200);
    let listed = &keys["api_keys"][0];
    assert_eq!(listed["rotated_at"], Value::Null, "{listed}");
    assert_eq!(listed["rpm_limit"], Value::Null, "{listed}");
    assert_eq!(listed["max_budget_usd"], Value::Null, "{listed}");
}

async fn out_of_range_times_are_400_naming_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "t-admin").await;
    let auth = Auth::Bearer(&admin.token);
    // Later than the end of year 9999 UTC (also through a negative offset).
    for late in ["9999-12-31T23:59:59-10:00", "+10000-01-01T00:00:00Z", "99999-01-01T00:00:00Z"] {
        let body = json!({"name": "k", "permissions": ["read"], "expires_at": late});
        app.create_key_raw(auth, &body).await.invalid("expires_at");
        let reply = app
            .post(
                "/api/v1/admin/invitations",
                auth,
                &json!({"email": "bob@example.com", "expires_at": late}),
            )
            .await;
        reply.invalid("expires_at");
    }
    // The latest accepted instant reads back as it was written.
    let last = "9999-12-31T23:59:59Z";
    let created = app.create_key(&admin.token, &["read"], Some(last)).await;
    assert_eq!(created["expires_at"], json!(last), "{created}");
    let listed = app.list_keys(auth).await.data(200);
    assert_eq!(listed["api_keys"][0]["expires_at"], json!(last), "{listed}");
    let id = created["id"].as_str().unwrap();
    let reply = send_json(
        &app,
        reqwest::Method::PATCH,
        &format!("/api/v1/auth/api-keys/{id}"),
        auth,
        &json!({"expires_at": "9999-12-31T23:59:59-00:01"}),
    )
    .await;
    reply.invalid("expires_at");

    // A usage cursor whose time is outside what PostgreSQL's `timestamp` holds.
    for micros in [i64::MIN, -1, 253_402_300_800_000_000, i64::MAX] {
        let cursor = b64url(format!("{micros}:0190a1b2-0000-7000-8000-000000000000").as_bytes());
        let reply = app.get(&format!("/api/v1/usage/requests?cursor={cursor}"), auth).await;
        reply.invalid("cursor");
    }
    // Days outside four-digit years do not parse.
    for day in ["%2B10000-01-01", "-0001-01-01", "99999-01-01"] {
        app.get(&format!("/api/v1/usage?from={day}"), auth).await.invalid("from");
        app.get(&format!("/api/v1/usage?to={day}"), auth).await.invalid("to");
    }
}
