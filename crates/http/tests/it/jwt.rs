//! Access-token validation: tokens signed here with the test secret, so
//! each claim can be changed alone; a re-signed unchanged token is the positive control.

use crate::common;

use common::*;
use serde_json::{json, Value};

backend_tests!(
    test_signer_matches_the_server,
    wrong_or_missing_typ_is_401,
    expiry_and_not_before_are_enforced,
    issuer_and_audience_are_required,
    subject_session_and_expiry_are_required,
    claims_of_the_wrong_json_type_are_401,
    unknown_or_missing_kid_is_401,
    access_token_expires_after_its_lifetime,
    token_of_another_issuer_configuration_is_401,
);

struct Parts {
    header: Value,
    claims: Value,
}

async fn genuine(app: &TestApp) -> (User, Parts) {
    let user = app.new_user("jwt").await;
    let parts = Parts { header: jwt_part(&user.token, 0), claims: jwt_part(&user.token, 1) };
    (user, parts)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

async fn test_signer_matches_the_server(backend: Backend) {
    let app = spawn_app(backend).await;
    let (user, p) = genuine(&app).await;
    // Our HMAC over the server's own signing input gives the server's signature.
    let segments: Vec<&str> = user.token.split('.').collect();
    let input = format!("{}.{}", segments[0], segments[1]);
    let sig = hmac_sha256(test_jwt_secret().as_bytes(), input.as_bytes());
    assert_eq!(b64url(&sig), segments[2], "test HMAC-SHA256 disagrees with the server");
    // A token re-signed here with unchanged claims is accepted (positive control).
    let resigned = sign_jwt(&p.header, &p.claims);
    app.me(Auth::Bearer(&resigned)).await.data(200);
}

async fn wrong_or_missing_typ_is_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, p) = genuine(&app).await;
    let mut cases = Vec::new();
    for typ in [json!("refresh"), json!("api_key"), json!("ACCESS"), json!(null)] {
        let mut claims = p.claims.clone();
        claims["typ"] = typ.clone();
        cases.push((format!("typ {typ}"), bearer(&sign_jwt(&p.header, &claims))));
    }
    let mut claims = p.claims.clone();
    claims.as_object_mut().unwrap().remove("typ");
    cases.push(("typ missing".into(), bearer(&sign_jwt(&p.header, &claims))));
    expect_all_unauthorized(&app, &cases).await;
}

async fn expiry_and_not_before_are_enforced(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, p) = genuine(&app).await;
    // Expired a minute ago (beyond the 5 s leeway).
    let mut claims = p.claims.clone();
    claims["iat"] = json!(now() - 3700);
    claims["nbf"] = json!(now() - 3700);
    claims["exp"] = json!(now() - 60);
    app.me(Auth::Bearer(&sign_jwt(&p.header, &claims))).await.unauthorized();
    // Not valid before five minutes from now.
    let mut claims = p.claims.clone();
    claims["nbf"] = json!(now() + 300);
    app.me(Auth::Bearer(&sign_jwt(&p.header, &claims))).await.unauthorized();
    // Inside the leeway: still accepted.
    let mut claims = p.claims.clone();
    claims["exp"] = json!(now() + 60);
    app.me(Auth::Bearer(&sign_jwt(&p.header, &claims))).await.data(200);
}

async fn issuer_and_audience_are_required(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, p) = genuine(&app).await;
    assert_eq!(p.claims["iss"], json!("aigw"), "claims: {}", p.claims);
    assert!(
        p.claims["aud"] == json!("aigw") || p.claims["aud"] == json!(["aigw"]),
        "claims: {}",
        p.claims
    );
    let mut cases = Vec::new();
    for (claim, value) in [
        ("iss", json!("someone-else")),
        ("aud", json!("someone-else")),
        ("aud", json!(["someone-else"])),
    ] {
        let mut claims = p.claims.clone();
        claims[claim] = value.clone();
        cases.push((format!("{claim} = {value}"), bearer(&sign_jwt(&p.header, &claims))));
    }
    for claim in ["iss", "aud"] {
        let mut claims = p.claims.clone();
        claims.as_object_mut().unwrap().remove(claim);
        cases.push((format!("{claim} missing"), bearer(&sign_jwt(&p.header, &claims))));
    }
    expect_all_unauthorized(&app, &cases).await;
}

async fn subject_session_and_expiry_are_required(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, p) = genuine(&app).await;
    let mut cases = Vec::new();
    for claim in ["sub", "sid", "exp"] {
        let mut claims = p.claims.clone();
        claims.as_object_mut().unwrap().remove(claim);
        cases.push((format!("{claim} missing"), bearer(&sign_jwt(&p.header, &claims))));
    }
    // A role aigw never signs is a token it did not issue.
    for role in ["superuser", "Admin", ""] {
        let mut claims = p.claims.clone();
        claims["role"] = json!(role);
        cases.push((format!("role {role:?}"), bearer(&sign_jwt(&p.header, &claims))));
    }
    expect_all_unauthorized(&app, &cases).await;
}

async fn claims_of_the_wrong_json_type_are_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, p) = genuine(&app).await;
    let exp = p.claims["exp"].as_i64().unwrap();
    let mut cases = Vec::new();
    for (claim, value) in [
        ("exp", json!(exp.to_string())),
        ("exp", json!([exp])),
        ("nbf", json!("0")),
        ("iss", json!(["aigw", "x"])),
        ("sub", json!(5)),
    ] {
        let mut claims = p.claims.clone();
        claims[claim] = value.clone();
        cases.push((format!("{claim} = {value}"), bearer(&sign_jwt(&p.header, &claims))));
    }
    expect_all_unauthorized(&app, &cases).await;
}

async fn unknown_or_missing_kid_is_401(backend: Backend) {
    let app = spawn_app(backend).await;
    let (_, p) = genuine(&app).await;
    assert!(p.header["kid"].is_string(), "header: {}", p.header);
    let mut header = p.header.clone();
    header["kid"] = json!("hs256-0000000000000000");
    app.me(Auth::Bearer(&sign_jwt(&header, &p.claims))).await.unauthorized();
    let mut header = p.header.clone();
    header.as_object_mut().unwrap().remove("kid");
    app.me(Auth::Bearer(&sign_jwt(&header, &p.claims))).await.unauthorized();
    let mut header = p.header.clone();
    header["kid"] = json!(42);
    app.me(Auth::Bearer(&sign_jwt(&header, &p.claims))).await.unauthorized();
}

async fn access_token_expires_after_its_lifetime(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |s| {
        s.auth.access_token_ttl_secs = 1;
        s.auth.leeway_secs = 0;
    })
    .await;
    let email = unique_email("short");
    let data = app.register(&email, PASSWORD, None).await;
    assert_eq!(data["expires_in"], json!(1));
    let token = data["token"].as_str().unwrap().to_owned();
    let claims = jwt_part(&token, 1);
    assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 1);
    advance(&clock, 2200);
    app.me(Auth::Bearer(&token)).await.unauthorized();
    // The refresh token still gets a new access token.
    let refreshed = app.refresh_raw(data["refresh_token"].as_str().unwrap()).await.data(200);
    assert_eq!(refreshed["expires_in"], json!(1));
    app.me(Auth::Bearer(refreshed["token"].as_str().unwrap())).await.data(200);
}

async fn token_of_another_issuer_configuration_is_401(backend: Backend) {
    // Same secret and same database (so the session exists), another issuer / audience.
    let app = spawn_app(backend).await;
    let other_iss = app.spawn_sibling(|s| s.auth.issuer = "other".into()).await;
    let t1 = other_iss.new_user("iss").await.token;
    other_iss.me(Auth::Bearer(&t1)).await.data(200);
    let other_aud = app.spawn_sibling(|s| s.auth.audience = "other".into()).await;
    let t2 = other_aud.new_user("aud").await.token;
    other_aud.me(Auth::Bearer(&t2)).await.data(200);
    app.me(Auth::Bearer(&t1)).await.unauthorized();
    app.me(Auth::Bearer(&t2)).await.unauthorized();
    // A sibling with the same configuration accepts the main app's tokens (positive control).
    let twin = app.spawn_sibling(|_| {}).await;
    let user = app.new_user("twin").await;
    twin.me(Auth::Bearer(&user.token)).await.data(200);
}
