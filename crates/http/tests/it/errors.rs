//! The error envelope: 400 validation, 401 credential failures, 404/405/413/415, and the
//! service endpoints (OpenAPI document, health).

use crate::common;

use common::*;
use serde_json::json;

backend_tests!(
    malformed_json_is_400_body,
    non_object_json_is_400_body,
    wrong_types_name_the_field,
    missing_fields_name_the_field,
    passwords_are_never_echoed,
    strings_shaped_like_serde_messages_are_never_echoed,
    no_credential_is_401,
    garbage_credentials_are_401,
    tampered_jwt_is_401,
    jwt_with_alg_none_is_401,
    jwt_signed_with_another_secret_is_401,
    refresh_token_as_bearer_is_401,
    api_key_with_bad_checksum_is_401,
    unknown_but_well_formed_api_key_is_401,
    unknown_route_is_404_envelope,
    wrong_method_is_405_envelope,
    oversized_body_is_413_envelope,
    wrong_content_type_is_415_envelope,
    openapi_document_lists_every_path,
    health_endpoints,
    request_id_is_unique_per_request,
    www_authenticate_names_invalid_token_only_when_one_was_sent,
);

const REGISTER: &str = "/api/v1/auth/register";
const LOGIN: &str = "/api/v1/auth/login";

async fn malformed_json_is_400_body(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut failures = Vec::new();
    for raw in [
        "{",
        "{\"email\": \"a@example.com\", \"password\": \"hunter2secret\",}",
        "not json at all",
        "",
        "{\"email\": \"a@example.com\", \"password\": \"hunter2secret\"",
        "[1, 2",
    ] {
        for path in [REGISTER, LOGIN] {
            let reply = app.post_raw(path, Auth::None, raw).await;
            assert!(!reply.text.contains("hunter2secret"), "{}", reply.text);
            let field = reply.json()["error"]["details"]["field"].clone();
            if reply.status != 400 || field != json!("body") {
                failures.push(format!("{path} {raw:?}: {} {}", reply.status, reply.text));
            } else {
                reply.invalid("body");
            }
        }
    }
    assert!(failures.is_empty(), "malformed JSON must be 400 field body:\n{}", failures.join("\n"));
    let user = app.new_user("badjson").await;
    app.post_raw("/api/v1/auth/api-keys", Auth::Bearer(&user.token), "{\"name\":")
        .await
        .invalid("body");
}

async fn non_object_json_is_400_body(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("arr");
    // The account exists, so an array accepted as login credentials would log in.
    app.register(&email, PASSWORD, None).await;
    let array_register = format!("[\"{email}\", \"{PASSWORD}\"]");
    let mut failures = Vec::new();
    for raw in ["[]", "\"string\"", "null", "5", "true", array_register.as_str()] {
        for path in [REGISTER, LOGIN] {
            let reply = app.post_raw(path, Auth::None, raw.to_owned()).await;
            let field = reply.json()["error"]["details"]["field"].clone();
            if reply.status != 400 || field != json!("body") {
                failures.push(format!("{path} {raw:?}: {} {}", reply.status, reply.text));
            } else {
                reply.invalid("body");
            }
        }
    }
    assert!(
        failures.is_empty(),
        "a JSON body that is not an object must be 400 field body:\n{}",
        failures.join("\n")
    );
}

async fn wrong_types_name_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_raw(&json!({"email": 5, "password": PASSWORD})).await.invalid("email");
    app.register_raw(&json!({"email": unique_email("t"), "password": PASSWORD, "name": 5}))
        .await
        .invalid("name");
    app.post(LOGIN, Auth::None, &json!({"email": ["x"], "password": PASSWORD}))
        .await
        .invalid("email");
    let user = app.new_user("types").await;
    app.create_key_raw(
        Auth::Bearer(&user.token),
        &json!({"name": "k", "permissions": ["read", 5]}),
    )
    .await
    .invalid("permissions[1]");
    app.create_key_raw(
        Auth::Bearer(&user.token),
        &json!({"name": "k", "permissions": ["read"], "expires_at": true}),
    )
    .await
    .invalid("expires_at");
}

async fn missing_fields_name_the_field(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register_raw(&json!({"email": unique_email("m")})).await.invalid("password");
    app.register_raw(&json!({"password": PASSWORD})).await.invalid("email");
    app.register_raw(&json!({})).await.error(400, "invalid_request");
    app.post(LOGIN, Auth::None, &json!({"email": unique_email("m")})).await.invalid("password");
    app.post(LOGIN, Auth::None, &json!({"password": PASSWORD})).await.invalid("email");
    app.register_raw(&json!({"email": null, "password": PASSWORD})).await.invalid("email");
}

async fn passwords_are_never_echoed(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("echo");
    let secret_values = [
        json!(["hunter2secret"]),
        json!({"value": "hunter2secret"}),
        json!(12_345_678),
        json!(true),
    ];
    for value in &secret_values {
        for path in [REGISTER, LOGIN] {
            let reply =
                app.post(path, Auth::None, &json!({"email": email, "password": value})).await;
            reply.invalid("password");
            for needle in ["hunter2secret", "12345678"] {
                assert!(!reply.text.contains(needle), "{path} echoed the password: {}", reply.text);
            }
        }
    }
    // A too-short password string is not echoed either, nor a bad one in broken JSON.
    let reply = app.register_raw(&json!({"email": email, "password": "hunter2"})).await;
    reply.invalid("password");
    assert!(!reply.text.contains("hunter2"), "{}", reply.text);
    let reply =
        app.post_raw(REGISTER, Auth::None, "{\"email\": 5, \"password\": \"hunter2secret\"}").await;
    reply.invalid("email");
    assert!(!reply.text.contains("hunter2secret"), "{}", reply.text);
    let reply = app
        .post_raw(
            REGISTER,
            Auth::None,
            "{\"password\": \"hunter2secret\" \"email\": \"x@example.com\"}",
        )
        .await;
    reply.invalid("body");
    assert!(!reply.text.contains("hunter2secret"), "{}", reply.text);
}

/// Found while writing the `json_bodies` fuzz target: serde quotes a wrong-typed string in its
/// message, so a value ending in ", expected X at line" once made the issue read "must be X".
async fn strings_shaped_like_serde_messages_are_never_echoed(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("serde-shaped").await;
    for permissions in [
        "pw, expected TOPSECRETVALUE at line 1",
        "pw, expected TOPSECRETVALUE",
        "x`, expected TOPSECRETVALUE",
    ] {
        let body = json!({"name": "ci", "permissions": permissions});
        let reply = app.create_key_raw(Auth::Bearer(&user.token), &body).await;
        let error = reply.invalid("permissions");
        assert_eq!(error["details"]["issue"], "must be a sequence", "{error}");
        assert!(!reply.text.contains("TOPSECRET"), "{}", reply.text);
    }
    for scope in ["x, expected TOPSECRETVALUE at line ", "x`, expected TOPSECRETVALUE"] {
        let reply = app.logout(&user.token, Some(&json!({"scope": scope}))).await;
        reply.invalid("scope");
        assert!(!reply.text.contains("TOPSECRET"), "{}", reply.text);
    }
    // The session survived the refused logouts.
    app.me(Auth::Bearer(&user.token)).await.data(200);
}

async fn no_credential_is_401(backend: Backend) {
    let app = spawn_app(backend).await;
    app.me(Auth::None).await.unauthorized();
    app.list_keys(Auth::None).await.unauthorized();
    app.create_key_raw(Auth::None, &json!({"name": "k", "permissions": ["read"]}))
        .await
        .unauthorized();
    app.revoke_key(Auth::None, "x").await.unauthorized();
    app.delete_key(Auth::None, "x").await.unauthorized();
    app.me(Auth::Raw("")).await.unauthorized();
    app.me(Auth::Raw("Bearer")).await.unauthorized();
    app.me(Auth::Raw("Bearer ")).await.unauthorized();
}

async fn garbage_credentials_are_401(backend: Backend) {
    let app = spawn_app(backend).await;
    for header in [
        "Bearer garbage",
        "garbage",
        "Basic dXNlcjpwYXNz",
        "Bearer a.b.c",
        "Bearer ...",
        "Bearer aigw_",
        "Bearer aigw_short",
        "Token aigw_xxx",
        "Bearer two words",
    ] {
        let reply = app.me(Auth::Raw(header)).await;
        reply.unauthorized();
    }
    let long = format!("Bearer {}", "a".repeat(5000));
    app.me(Auth::Raw(&long)).await.unauthorized();
}

async fn tampered_jwt_is_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let alice = app.new_user("alice").await;
    let bob = app.new_user("bob").await;
    let parts: Vec<&str> = alice.token.split('.').collect();
    let bob_parts: Vec<&str> = bob.token.split('.').collect();
    // Bob's payload under Alice's signature.
    let swapped = format!("{}.{}.{}", parts[0], bob_parts[1], parts[2]);
    app.me(Auth::Bearer(&swapped)).await.unauthorized();
    // A payload edited to another subject.
    let mut claims = jwt_part(&alice.token, 1);
    claims["sub"] = json!(bob.id);
    let forged = format!("{}.{}.{}", parts[0], b64url(claims.to_string().as_bytes()), parts[2]);
    app.me(Auth::Bearer(&forged)).await.unauthorized();
    // A longer expiry.
    let mut claims = jwt_part(&alice.token, 1);
    claims["exp"] = json!(claims["exp"].as_i64().unwrap() + 86_400);
    let extended = format!("{}.{}.{}", parts[0], b64url(claims.to_string().as_bytes()), parts[2]);
    app.me(Auth::Bearer(&extended)).await.unauthorized();
    // Signature changed.
    let sig = flip_char(parts[2], 3);
    let resigned = format!("{}.{}.{}", parts[0], parts[1], sig);
    app.me(Auth::Bearer(&resigned)).await.unauthorized();
    // Signature removed.
    let unsigned = format!("{}.{}.", parts[0], parts[1]);
    app.me(Auth::Bearer(&unsigned)).await.unauthorized();
    // The genuine token still works.
    app.me(Auth::Bearer(&alice.token)).await.data(200);
}

async fn jwt_with_alg_none_is_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("algnone").await;
    let claims = jwt_part(&user.token, 1);
    let mut header = jwt_part(&user.token, 0);
    for alg in ["none", "None", "NONE"] {
        header["alg"] = json!(alg);
        let h = b64url(header.to_string().as_bytes());
        let p = b64url(claims.to_string().as_bytes());
        app.me(Auth::Bearer(&format!("{h}.{p}."))).await.unauthorized();
        // With the original signature attached.
        let sig = user.token.split('.').nth(2).unwrap();
        app.me(Auth::Bearer(&format!("{h}.{p}.{sig}"))).await.unauthorized();
    }
    // Another algorithm named in the header with the HS256 signature.
    for alg in ["HS384", "HS512", "RS256"] {
        header["alg"] = json!(alg);
        let h = b64url(header.to_string().as_bytes());
        let rest: Vec<&str> = user.token.split('.').skip(1).collect();
        app.me(Auth::Bearer(&format!("{h}.{}", rest.join(".")))).await.unauthorized();
    }
}

async fn jwt_signed_with_another_secret_is_401(backend: Backend) {
    // Another node on the same database but with another secret: its tokens name a live
    // session, yet the main app refuses them.
    let app = spawn_app(backend).await;
    let other = app
        .spawn_sibling(|s| {
            s.auth.jwt_secret = Some(secrecy::SecretString::from("y".repeat(40)));
        })
        .await;
    let foreign = other.new_user("foreign").await;
    other.me(Auth::Bearer(&foreign.token)).await.data(200);
    app.me(Auth::Bearer(&foreign.token)).await.unauthorized();
    // Its API keys, however, are shared through the database.
    let key = other.key(&foreign.token, &["read"]).await;
    app.me(Auth::Bearer(&key)).await.data(200);
}

async fn refresh_token_as_bearer_is_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("refbearer").await;
    app.me(Auth::Bearer(&user.refresh_token)).await.unauthorized();
    app.me(Auth::Raw(&user.refresh_token)).await.unauthorized();
    app.list_keys(Auth::Bearer(&user.refresh_token)).await.unauthorized();
    // The refresh token is still good for refreshing.
    app.refresh_raw(&user.refresh_token).await.data(200);
}

async fn api_key_with_bad_checksum_is_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("checksum").await;
    let key = app.key(&user.token, &["read"]).await;
    for index in [5, 12, 20, 36, 42] {
        let bad = flip_char(&key, index);
        app.me(Auth::Bearer(&bad)).await.unauthorized();
        app.me(Auth::Raw(&bad)).await.unauthorized();
    }
    // Truncated and extended.
    app.me(Auth::Bearer(&key[..42])).await.unauthorized();
    app.me(Auth::Bearer(&format!("{key}x"))).await.unauthorized();
    app.me(Auth::Bearer(&key)).await.data(200);
}

async fn unknown_but_well_formed_api_key_is_401(backend: Backend) {
    // A genuine key of another deployment: valid checksum, unknown digest.
    let other = spawn_app(backend).await;
    let stranger = other.new_user("stranger").await;
    let foreign_key = other.key(&stranger.token, &["read"]).await;
    let app = spawn_app(backend).await;
    app.me(Auth::Bearer(&foreign_key)).await.unauthorized();
    app.me(Auth::Raw(&foreign_key)).await.unauthorized();
}

async fn unknown_route_is_404_envelope(backend: Backend) {
    let app = spawn_app(backend).await;
    for path in ["/api/v1/nope", "/nope", "/api/v2/auth/login", "/api/v1/auth/api-keys/x/y/z"] {
        app.get(path, Auth::None).await.error(404, "not_found");
    }
    app.post("/api/v1/does-not-exist", Auth::None, &json!({"x": 1})).await.error(404, "not_found");
}

async fn wrong_method_is_405_envelope(backend: Backend) {
    let app = spawn_app(backend).await;
    app.get(REGISTER, Auth::None).await.error(405, "method_not_allowed");
    app.get(LOGIN, Auth::None).await.error(405, "method_not_allowed");
    app.delete("/api/v1/auth/me", Auth::None).await.error(405, "method_not_allowed");
    app.send(app.request(reqwest::Method::PUT, "/api/v1/auth/api-keys", Auth::None))
        .await
        .error(405, "method_not_allowed");
    app.get("/api/v1/ai/chat/completions", Auth::None).await.error(405, "method_not_allowed");
}

async fn oversized_body_is_413_envelope(backend: Backend) {
    let app = spawn_app(backend).await;
    let huge = json!({
        "email": unique_email("big"),
        "password": PASSWORD,
        "name": "n".repeat(70 * 1024),
    })
    .to_string();
    let reply = app.post_raw(REGISTER, Auth::None, huge).await;
    reply.error(413, "payload_too_large");
    assert!(!reply.text.contains(PASSWORD));
    let huge = format!("{{\"email\": \"{}\", \"password\": \"{}\"}}", "a".repeat(70_000), PASSWORD);
    app.post_raw(LOGIN, Auth::None, huge).await.error(413, "payload_too_large");
}

async fn wrong_content_type_is_415_envelope(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = json!({"email": unique_email("ct"), "password": PASSWORD}).to_string();
    for ct in ["text/plain", "application/x-www-form-urlencoded", "application/xml"] {
        let reply = app
            .send(
                app.request(reqwest::Method::POST, REGISTER, Auth::None)
                    .header("content-type", ct)
                    .body(body.clone()),
            )
            .await;
        reply.error(415, "unsupported_media_type");
        assert!(!reply.text.contains(PASSWORD));
    }
    // Nothing was registered by those.
    let email: serde_json::Value = serde_json::from_str(&body).unwrap();
    app.login_raw(email["email"].as_str().unwrap(), PASSWORD).await.unauthorized();
    // `application/json; charset=utf-8` is fine.
    let reply = app
        .send(
            app.request(reqwest::Method::POST, REGISTER, Auth::None)
                .header("content-type", "application/json; charset=utf-8")
                .body(body),
        )
        .await;
    reply.data(201);
}

async fn openapi_document_lists_every_path(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app.get("/api/v1/openapi.json", Auth::None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let ct = reply.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("application/json"), "content-type {ct}");
    let doc = reply.json();
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")),
        "openapi version: {}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().expect("paths object");
    let expect = [
        ("/api/v1/auth/register", "post"),
        ("/api/v1/auth/login", "post"),
        ("/api/v1/auth/me", "get"),
        ("/api/v1/auth/refresh", "post"),
        ("/api/v1/auth/logout", "post"),
        ("/api/v1/auth/api-keys", "post"),
        ("/api/v1/auth/api-keys", "get"),
        ("/api/v1/auth/api-keys/{id}/revoke", "post"),
        ("/api/v1/auth/api-keys/{id}", "delete"),
        ("/api/v1/ai/chat/completions", "post"),
    ];
    for (path, method) in expect {
        let item = paths
            .get(path)
            .unwrap_or_else(|| panic!("openapi.json lacks {path}; has {:?}", paths.keys()));
        assert!(item.get(method).is_some(), "{path} lacks {method}");
    }
}

async fn health_endpoints(backend: Backend) {
    let app = spawn_app(backend).await;
    let reply = app.get("/healthz", Auth::None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reply = app.get("/readyz", Auth::None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn request_id_is_unique_per_request(backend: Backend) {
    let app = spawn_app(backend).await;
    let a = app.me(Auth::None).await;
    let b = app.me(Auth::None).await;
    let c = app.get("/healthz", Auth::None).await;
    let ids = [
        a.header("x-request-id").unwrap(),
        b.header("x-request-id").unwrap(),
        c.header("x-request-id").unwrap(),
    ];
    assert_ne!(ids[0], ids[1]);
    assert_ne!(ids[1], ids[2]);
}

async fn www_authenticate_names_invalid_token_only_when_one_was_sent(backend: Backend) {
    let app = spawn_app(backend).await;
    // RFC 6750 §3.1: no error code when the request carried no credential...
    let reply = app.me(Auth::None).await;
    reply.unauthorized();
    let www = reply.header("www-authenticate").unwrap().to_owned();
    assert!(!www.contains("error="), "no credential, yet {www}");
    // ...and `invalid_token` when it carried a bad one.
    for header in ["Bearer garbage.token.here", "Bearer aigw_x"] {
        let reply = app.me(Auth::Raw(header)).await;
        reply.unauthorized();
        let www = reply.header("www-authenticate").unwrap();
        assert!(www.contains("error=\"invalid_token\""), "{header}: {www}");
    }
}
