//! Credential rules not covered elsewhere: EdDSA signing keys and the JWK Set, rotation of
//! signing keys, production start-up rules, the common-password blocklist, re-hashing at login
//! when argon2 parameters are raised, and logout scopes (on SQLite and PostgreSQL).

use crate::common;

use aigw_http::settings::{Environment, Settings};
use aigw_http::startup::Application;
use aigw_service::{KeyAlgorithm, SigningKeyConfig};
use common::{spawn_app_with, unique_email, Auth, Backend, TestApp};
use diesel::prelude::*;
use serde_json::{json, Value};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn eddsa_key(kid: &str, file: &str) -> SigningKeyConfig {
    SigningKeyConfig {
        kid: kid.to_owned(),
        algorithm: KeyAlgorithm::EdDsa,
        secret: None,
        private_key_file: Some(fixture(file)),
    }
}

fn hs256_key(kid: &str, secret: &str) -> SigningKeyConfig {
    SigningKeyConfig {
        kid: kid.to_owned(),
        algorithm: KeyAlgorithm::Hs256,
        secret: Some(secret.to_owned().into()),
        private_key_file: None,
    }
}

/// The decoded JOSE header of a compact JWS.
fn jwt_header(token: &str) -> Value {
    let header = token.split('.').next().unwrap();
    let bytes = base64_url_decode(header);
    serde_json::from_slice(&bytes).unwrap()
}

fn base64_url_decode(input: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in input.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
        bits = (bits << 6) | v;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    out
}

async fn eddsa_tokens_verify_and_jwks_publishes_only_public_keys(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.auth.jwt_secret = None;
        s.auth.signing_keys = vec![eddsa_key("ed-1", "ed25519-test-only.pem")];
    })
    .await;
    let user = app.new_user("eddsa").await;
    let header = jwt_header(&user.token);
    assert_eq!(header["alg"], "EdDSA");
    assert_eq!(header["kid"], "ed-1");
    app.me(Auth::Bearer(&user.token)).await.data(200);

    let jwks = app.get("/.well-known/jwks.json", Auth::None).await;
    assert_eq!(jwks.status, 200);
    let keys = jwks.json()["keys"].as_array().cloned().unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0]["kid"], "ed-1");
    assert_eq!(keys[0]["kty"], "OKP");
    assert_eq!(keys[0]["crv"], "Ed25519");
    assert_eq!(keys[0]["x"].as_str().map(|x| base64_url_decode(x).len()), Some(32));
    assert!(keys[0].get("d").is_none(), "private key published: {}", keys[0]);
}

async fn hs256_secrets_are_never_published(backend: Backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let jwks = app.get("/.well-known/jwks.json", Auth::None).await;
    assert_eq!(jwks.status, 200);
    assert_eq!(jwks.json(), json!({"keys": []}));
}

async fn rotating_the_signing_key_logs_nobody_out(backend: Backend) {
    let old_secret = "old-secret-old-secret-old-secret-01";
    let before = spawn_app_with(backend, |s| {
        s.auth.jwt_secret = None;
        s.auth.signing_keys = vec![hs256_key("k-old", old_secret)];
    })
    .await;
    let user = before.new_user("rotation").await;
    assert_eq!(jwt_header(&user.token)["kid"], "k-old");

    // The new node signs with k-new and still verifies k-old.
    let after = before
        .spawn_sibling(|s| {
            s.auth.jwt_secret = None;
            s.auth.signing_keys =
                vec![hs256_key("k-old", old_secret), eddsa_key("k-new", "ed25519-test-only-2.pem")];
            s.auth.active_kid = Some("k-new".into());
        })
        .await;
    after.me(Auth::Bearer(&user.token)).await.data(200);
    let fresh = after.login(&user.email, &user.password).await;
    let fresh_token = fresh["token"].as_str().unwrap().to_owned();
    assert_eq!(jwt_header(&fresh_token)["kid"], "k-new");
    assert_eq!(jwt_header(&fresh_token)["alg"], "EdDSA");
    after.me(Auth::Bearer(&fresh_token)).await.data(200);

    // A node that never had k-new refuses its tokens with a 401, not a 500.
    before.me(Auth::Bearer(&fresh_token)).await.unauthorized();
    drop(after);
}

async fn common_passwords_are_refused_unless_turned_off(backend: Backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let reply = app
        .register_raw(&json!({"email": unique_email("common"), "password": "Password123"}))
        .await;
    reply.invalid("password");
    assert!(!reply.text.contains("Password123"));

    let lenient = spawn_app_with(backend, |s| s.auth.password_blocklist = false).await;
    let reply = lenient
        .register_raw(&json!({"email": unique_email("common"), "password": "Password123"}))
        .await;
    reply.data(201);
}

fn stored_password_hash(app: &TestApp, email: &str) -> String {
    use aigw_persistence::schema::users;
    let query = users::table.filter(users::email.eq(email)).select(users::password_hash);
    if let Some(path) = app.database_url.strip_prefix("sqlite://") {
        let mut conn = diesel::SqliteConnection::establish(path).unwrap();
        query.first::<String>(&mut conn).unwrap()
    } else {
        let mut conn = diesel::PgConnection::establish(&app.database_url).unwrap();
        query.first::<String>(&mut conn).unwrap()
    }
}

async fn raised_argon2_parameters_rehash_at_login(backend: Backend) {
    let cheap = spawn_app_with(backend, |s| {
        s.auth.argon2.memory_kib = 8192;
        s.auth.argon2.iterations = 1;
    })
    .await;
    let user = cheap.new_user("rehash").await;
    assert!(stored_password_hash(&cheap, &user.email).contains("m=8192,t=1,p=1"));

    let strong = cheap
        .spawn_sibling(|s| {
            s.auth.argon2.memory_kib = 19456;
            s.auth.argon2.iterations = 2;
        })
        .await;
    strong.login(&user.email, &user.password).await;
    let upgraded = stored_password_hash(&cheap, &user.email);
    assert!(upgraded.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{upgraded}");
    // The new hash still verifies, on both nodes.
    strong.login(&user.email, &user.password).await;
    cheap.login(&user.email, &user.password).await;
    drop(strong);
}

async fn logout_scopes(backend: Backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let user = app.new_user("scopes").await;
    let second = app.login(&user.email, &user.password).await;
    let third = app.login(&user.email, &user.password).await;
    let token = |v: &Value| v["token"].as_str().unwrap().to_owned();
    let refresh = |v: &Value| v["refresh_token"].as_str().unwrap().to_owned();

    // others: every session but the caller's.
    let reply = app.logout(&user.token, Some(&json!({"scope": "others"}))).await;
    assert_eq!(reply.data(200)["revoked_sessions"], 2);
    app.me(Auth::Bearer(&user.token)).await.data(200);
    app.refresh_raw(&refresh(&second)).await.unauthorized();
    app.refresh_raw(&refresh(&third)).await.unauthorized();

    // A refresh token in the body ends its own session too (only the caller's).
    let fourth = app.login(&user.email, &user.password).await;
    let stranger = app.new_user("stranger").await;
    let reply = app
        .logout(
            &token(&app.login(&user.email, &user.password).await),
            Some(&json!({"refresh_token": refresh(&fourth)})),
        )
        .await;
    assert_eq!(reply.data(200)["revoked_sessions"], 2);
    app.refresh_raw(&refresh(&fourth)).await.unauthorized();
    let reply = app
        .logout(
            &user.token,
            Some(&json!({"scope": "local", "refresh_token": stranger.refresh_token})),
        )
        .await;
    assert_eq!(reply.data(200)["revoked_sessions"], 1);
    app.refresh_raw(&stranger.refresh_token).await.data(200);

    // global: every session, the caller's included.
    let a = app.login(&user.email, &user.password).await;
    let b = app.login(&user.email, &user.password).await;
    let reply = app.logout(&token(&a), Some(&json!({"scope": "global"}))).await;
    assert_eq!(reply.data(200)["revoked_sessions"], 2);
    app.me(Auth::Bearer(&token(&a))).await.unauthorized();
    app.me(Auth::Bearer(&token(&b))).await.unauthorized();
    app.refresh_raw(&refresh(&b)).await.unauthorized();

    // An unknown scope is a 400 naming the field.
    let c = app.login(&user.email, &user.password).await;
    app.logout(&token(&c), Some(&json!({"scope": "everywhere"}))).await.invalid("scope");
}

async fn logout_on_one_node_is_refused_on_another_within_a_second(backend: Backend) {
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|_| {}).await;
    let user = a.new_user("nodes").await;
    b.me(Auth::Bearer(&user.token)).await.data(200);
    a.logout(&user.token, None).await.data(200);
    a.me(Auth::Bearer(&user.token)).await.unauthorized();
    let refused = || async {
        let reply = b.me(Auth::Bearer(&user.token)).await;
        if reply.status == 401 {
            Ok(())
        } else {
            Err(reply.status)
        }
    };
    let within = std::time::Duration::from_secs(1);
    common::eventually("node B still accepts the token", within, refused).await;
    drop(b);
}

async fn api_key_revoked_or_deleted_on_one_node_is_refused_on_another_at_once(backend: Backend) {
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|_| {}).await;
    let user = a.new_user("keynodes").await;
    for action in ["revoke", "delete"] {
        let created = a.create_key(&user.token, &["read"], None).await;
        let key = created["key"].as_str().unwrap().to_owned();
        let id = created["id"].as_str().unwrap().to_owned();
        b.me(Auth::Raw(&key)).await.data(200);
        match action {
            "revoke" => a.revoke_key(Auth::Bearer(&user.token), &id).await.data(200),
            _ => a.delete_key(Auth::Bearer(&user.token), &id).await.data(200),
        };
        // Keys are looked up in the shared database on every use: no window at all.
        b.me(Auth::Raw(&key)).await.unauthorized();
    }
    drop(b);
}

backend_tests!(
    api_key_revoked_or_deleted_on_one_node_is_refused_on_another_at_once,
    eddsa_tokens_verify_and_jwks_publishes_only_public_keys,
    hs256_secrets_are_never_published,
    rotating_the_signing_key_logs_nobody_out,
    common_passwords_are_refused_unless_turned_off,
    raised_argon2_parameters_rehash_at_login,
    logout_scopes,
    logout_on_one_node_is_refused_on_another_within_a_second,
);

fn start_up_settings(dir: &std::path::Path) -> Settings {
    let mut settings = Settings::default();
    settings.server.listen = "127.0.0.1:0".into();
    settings.server.data_dir = dir.to_path_buf();
    settings.database.url = Some(format!("sqlite://{}/aigw.db", dir.display()));
    settings
}

#[tokio::test]
async fn production_refuses_to_start_without_an_explicit_secret() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = start_up_settings(dir.path());
    settings.server.environment = Environment::Production;
    let err = Application::build(settings.clone()).await.err().map(|e| format!("{e:#}"));
    let err = err.expect("production started without a secret");
    assert!(err.contains("production") && err.contains("32 bytes"), "{err}");
    assert!(!dir.path().join("jwt_secret").exists(), "a secret was generated in production");

    settings.auth.jwt_secret = Some("too-short-secret".to_owned().into());
    let err = Application::build(settings.clone()).await.err().map(|e| format!("{e:#}"));
    assert!(err.expect("short secret accepted").contains("at least 32 bytes in production"));

    settings.auth.jwt_secret = Some("a".repeat(32).into());
    assert!(Application::build(settings).await.is_ok());
}

#[tokio::test]
async fn development_accepts_the_sample_configuration_secret() {
    // The documented sample value is 27 bytes: development warns, production refuses.
    let dir = tempfile::tempdir().unwrap();
    let mut settings = start_up_settings(dir.path());
    settings.auth.jwt_secret = Some("at least 32 bytes of secret".to_owned().into());
    assert!(Application::build(settings).await.is_ok());
}

#[tokio::test]
async fn development_generates_a_private_secret_once() {
    let dir = tempfile::tempdir().unwrap();
    let settings = start_up_settings(dir.path());
    let first = Application::build(settings.clone()).await.unwrap();
    let path = dir.path().join("jwt_secret");
    let secret = std::fs::read_to_string(&path).unwrap();
    assert!(secret.len() >= 64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    drop(first);
    let _second = Application::build(settings).await.unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), secret, "secret regenerated");
}
