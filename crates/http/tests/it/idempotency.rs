//! `Idempotency-Key` on key creation: a retried create answers the
//! first result and creates nothing new; the key with another body is 422; concurrent
//! duplicates create one key (the others wait for it: 409 `conflict`); keys are per caller;
//! the recorded answer is sealed, never the key in clear.

use crate::common;

use common::*;
use diesel::{Connection, RunQueryDsl};
use serde_json::{json, Value};

backend_tests!(
    a_retried_create_answers_the_first_result,
    a_key_reused_with_another_body_is_422,
    concurrent_duplicates_create_one_key,
    keys_are_per_caller_and_checked,
    recorded_answers_are_sealed,
);

async fn create_with_key(app: &TestApp, token: &str, key: &str, body: &Value) -> Reply {
    app.send(
        app.request(reqwest::Method::POST, "/api/v1/auth/api-keys", Auth::Bearer(token))
            .header("idempotency-key", key)
            .json(body),
    )
    .await
}

fn key_count(app_keys: &Reply) -> usize {
    app_keys.data(200)["api_keys"].as_array().unwrap().len()
}

async fn a_retried_create_answers_the_first_result(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("idem").await;
    let body = json!({"name": "ci", "permissions": ["read"]});
    let first = create_with_key(&app, &user.token, "\"retry-1\"", &body).await;
    let data = first.data(201);
    assert!(first.header("idempotent-replayed").is_none());
    let again = create_with_key(&app, &user.token, "\"retry-1\"", &body).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.text, first.text, "the same answer, byte for byte");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    // The key given twice is the one stored, and works.
    app.me(Auth::Bearer(data["key"].as_str().unwrap())).await.data(200);
    assert_eq!(key_count(&app.list_keys(Auth::Bearer(&user.token)).await), 1);
    // Without the header every create is new.
    app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    assert_eq!(key_count(&app.list_keys(Auth::Bearer(&user.token)).await), 2);
}

async fn a_key_reused_with_another_body_is_422(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("idem422").await;
    create_with_key(&app, &user.token, "k-1", &json!({"name": "a", "permissions": ["read"]}))
        .await
        .data(201);
    let error =
        create_with_key(&app, &user.token, "k-1", &json!({"name": "b", "permissions": ["read"]}))
            .await
            .error(422, "idempotency_key_reused");
    assert_eq!(error["details"]["idempotency_key"], json!("k-1"));
    // A failed request leaves the key free for a corrected retry.
    create_with_key(&app, &user.token, "k-2", &json!({"name": "", "permissions": ["read"]}))
        .await
        .invalid("name");
    create_with_key(&app, &user.token, "k-2", &json!({"name": "ok", "permissions": ["read"]}))
        .await
        .data(201);
}

async fn concurrent_duplicates_create_one_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("idemrace").await;
    let body = json!({"name": "race", "permissions": ["read"]});
    let replies = futures_util::future::join_all(
        (0..8).map(|_| create_with_key(&app, &user.token, "race-1", &body)),
    )
    .await;
    let mut ids = std::collections::BTreeSet::new();
    for reply in &replies {
        match reply.status {
            201 => {
                ids.insert(reply.data(201)["id"].as_str().unwrap().to_owned());
            }
            _ => {
                let error = reply.error(409, "conflict");
                assert_eq!(error["details"]["idempotency_key"], json!("race-1"));
                assert!(reply.header("retry-after").is_some());
            }
        }
    }
    assert_eq!(ids.len(), 1, "every 201 must be the same key: {ids:?}");
    assert_eq!(key_count(&app.list_keys(Auth::Bearer(&user.token)).await), 1);
}

async fn keys_are_per_caller_and_checked(backend: Backend) {
    let app = spawn_app(backend).await;
    let (ann, bob) = (app.new_user("ann").await, app.new_user("bob").await);
    let body = json!({"name": "same", "permissions": ["read"]});
    let a = create_with_key(&app, &ann.token, "shared", &body).await.data(201);
    let b = create_with_key(&app, &bob.token, "shared", &body).await.data(201);
    assert_ne!(a["id"], b["id"]);
    for bad in ["", "\"\"", &"x".repeat(256), "a\tb", "caf\u{e9}"] {
        let reply = app
            .send(
                app.request(
                    reqwest::Method::POST,
                    "/api/v1/auth/api-keys",
                    Auth::Bearer(&ann.token),
                )
                .header(
                    "idempotency-key",
                    reqwest::header::HeaderValue::from_bytes(bad.as_bytes()).unwrap(),
                )
                .json(&body),
            )
            .await;
        reply.invalid("Idempotency-Key");
    }
}

#[derive(diesel::QueryableByName)]
struct Sealed {
    #[diesel(sql_type = diesel::sql_types::Text)]
    response_sealed: String,
}

async fn recorded_answers_are_sealed(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("sealed").await;
    let data =
        create_with_key(&app, &user.token, "s-1", &json!({"name": "s", "permissions": ["read"]}))
            .await
            .data(201);
    let secret = data["key"].as_str().unwrap().to_owned();
    let url = app.database_url.clone();
    let rows = tokio::task::spawn_blocking(move || {
        let query = diesel::sql_query("SELECT response_sealed FROM idempotency_keys");
        match backend {
            Backend::Sqlite => {
                let mut c =
                    diesel::SqliteConnection::establish(url.trim_start_matches("sqlite://"))
                        .unwrap();
                query.load::<Sealed>(&mut c).unwrap()
            }
            Backend::Postgres => {
                query.load::<Sealed>(&mut diesel::PgConnection::establish(&url).unwrap()).unwrap()
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(!rows[0].response_sealed.contains(&secret[5..]), "the key is stored in clear");
    assert!(!rows[0].response_sealed.contains("aigw_"));
}
