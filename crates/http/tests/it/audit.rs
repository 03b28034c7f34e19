//! The audit trail: every security event recorded, with its client and request, and
//! never a secret; the caller's own trail and the admin's view; retention.

use crate::common;

use aigw_domain::Role;
use aigw_domain::{AuditAction, RecordedAction};
use aigw_persistence::audit::{self, AuditEventRow};
use aigw_persistence::{DatabaseUrl, Pool, PoolOptions};
use common::{spawn_app, test_settings, Auth, Backend, TestApp};
use serde_json::{json, Value};

async fn promote(app: &TestApp, email: &str) {
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, email, Role::Admin).await.unwrap();
}

/// Every event of the installation, newest first (through every page).
async fn all_events(app: &TestApp, token: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut path = "/api/v1/admin/audit?limit=200".to_owned();
    loop {
        let page = app.get(&path, Auth::Bearer(token)).await.data(200);
        events.extend(page["events"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/v1/admin/audit?limit=200&cursor={cursor}"),
            None => return events,
        }
    }
}

async fn every_security_event_is_recorded_without_a_secret(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = app.new_user("auditor").await;
    promote(&app, &admin.email).await;
    let user = app.new_user("audited").await;
    let mut secrets = vec![
        common::PASSWORD.to_owned(),
        admin.token.clone(),
        admin.refresh_token.clone(),
        user.token.clone(),
        user.refresh_token.clone(),
    ];
    app.login_raw(&user.email, "a wrong password here").await.unauthorized();
    app.login_raw("nobody@example.com", "a wrong password here").await.unauthorized();
    let login = app
        .send(
            app.request(reqwest::Method::POST, "/api/v1/auth/login", Auth::None)
                .header("user-agent", "audit-test/1.0")
                .json(&json!({"email": user.email, "password": user.password})),
        )
        .await;
    let login_request_id = login.header("x-request-id").unwrap().to_owned();
    let second = login.data(200);
    secrets.push(second["token"].as_str().unwrap().to_owned());
    secrets.push(second["refresh_token"].as_str().unwrap().to_owned());
    let made = app.create_key(&user.token, &["read"], None).await;
    let (key, key_id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    secrets.push(key.to_owned());
    app.revoke_key(Auth::Bearer(&user.token), key_id).await.data(200);
    app.delete_key(Auth::Bearer(&user.token), key_id).await.data(200);
    let other_key = app.create_key(&user.token, &["read"], None).await;
    secrets.push(other_key["key"].as_str().unwrap().to_owned());
    let other_key_id = other_key["id"].as_str().unwrap();
    // Key changes: a PATCH and a rotation (its new secret never recorded).
    let key_path = format!("/api/v1/auth/api-keys/{other_key_id}");
    let renamed = app.request(reqwest::Method::PATCH, &key_path, Auth::Bearer(&user.token));
    app.send(renamed.json(&json!({"name": "renamed", "rpm_limit": 60}))).await.data(200);
    let rotated_key = app
        .post(&format!("{key_path}/rotate"), Auth::Bearer(&user.token), &json!({}))
        .await
        .data(200);
    secrets.push(rotated_key["key"].as_str().unwrap().to_owned());
    // An older refresh token replayed (outside the retry grace): reuse detected, its session
    // ended.
    let rotated = app.refresh_raw(second["refresh_token"].as_str().unwrap()).await.data(200);
    let rotated = app.refresh_raw(rotated["refresh_token"].as_str().unwrap()).await.data(200);
    secrets.push(rotated["refresh_token"].as_str().unwrap().to_owned());
    app.refresh_raw(second["refresh_token"].as_str().unwrap()).await.unauthorized();
    let third = app.login(&user.email, &user.password).await;
    secrets.push(third["token"].as_str().unwrap().to_owned());
    let sessions = app.get("/api/v1/auth/sessions", Auth::Bearer(&user.token)).await.data(200);
    let third_session = sessions["sessions"][0]["id"].as_str().unwrap().to_owned();
    app.delete(&format!("/api/v1/auth/sessions/{third_session}"), Auth::Bearer(&user.token))
        .await
        .data(200);
    let new_password = "an entirely new passphrase 42";
    secrets.push(new_password.to_owned());
    let body = json!({"current_password": user.password, "new_password": new_password});
    let fresh = app.post("/api/v1/auth/password", Auth::Bearer(&user.token), &body).await.data(200);
    secrets.push(fresh["token"].as_str().unwrap().to_owned());
    secrets.push(fresh["refresh_token"].as_str().unwrap().to_owned());
    app.logout(fresh["token"].as_str().unwrap(), None).await.data(200);
    let patch = |body: Value| {
        app.request(
            reqwest::Method::PATCH,
            &format!("/api/v1/admin/users/{}", user.id),
            Auth::Bearer(&admin.token),
        )
        .json(&body)
    };
    app.send(patch(json!({"disabled": true}))).await.data(200);
    app.send(patch(json!({"disabled": false}))).await.data(200);
    app.send(patch(json!({"role": "admin"}))).await.data(200);
    app.post_empty(
        &format!("/api/v1/admin/api-keys/{other_key_id}/revoke"),
        Auth::Bearer(&admin.token),
    )
    .await
    .data(200);

    let events = all_events(&app, &admin.token).await;
    let text = serde_json::to_string(&events).unwrap();
    for secret in &secrets {
        assert!(!text.contains(secret.as_str()), "an audit event carries a secret: {secret}");
    }
    let of = |action: &str| -> Vec<&Value> {
        events.iter().filter(|e| e["action"] == json!(action)).collect()
    };
    for action in [
        "user_registered",
        "login_succeeded",
        "login_failed",
        "refresh_reuse_detected",
        "logged_out",
        "session_ended",
        "password_changed",
        "api_key_created",
        "api_key_updated",
        "api_key_rotated",
        "api_key_revoked",
        "api_key_deleted",
        "user_disabled",
        "user_enabled",
        "role_changed",
    ] {
        assert!(!of(action).is_empty(), "no {action} event in {text}");
    }
    // Newest first.
    let ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "not newest first");
    // The failed logins name the e-mail, never the password; the unknown one concerns nobody.
    let failed = of("login_failed");
    assert!(failed.iter().any(|e| e["user_id"] == json!(user.id)
        && e["details"]["email"] == json!(user.email)
        && e["details"]["reason"] == json!("wrong_password")));
    assert!(failed
        .iter()
        .any(|e| e["user_id"].is_null() && e["details"]["email"] == json!("nobody@example.com")));
    // Where a login came from.
    let login_event = of("login_succeeded")
        .into_iter()
        .find(|e| e["request_id"] == json!(login_request_id))
        .unwrap_or_else(|| panic!("no login_succeeded with request id {login_request_id}"));
    assert_eq!(login_event["ip"], json!("127.0.0.1"));
    assert_eq!(login_event["user_agent"], json!("audit-test/1.0"));
    assert_eq!(login_event["actor"], json!(user.id));
    common::assert_timestamp(&login_event["at"]);
    // Admin actions name the acting admin.
    let disabled = of("user_disabled")[0];
    assert_eq!(
        (disabled["actor"].clone(), disabled["target"].clone()),
        (json!(admin.id), json!(user.id))
    );
    let promoted = of("role_changed");
    assert!(promoted.iter().any(|e| e["target"] == json!(user.id)
        && e["details"] == json!({"from": "user", "to": "admin"})
        && e["actor"] == json!(admin.id)));
    let updated = of("api_key_updated")[0];
    assert_eq!(
        (updated["target"].clone(), updated["actor"].clone(), updated["details"].clone()),
        (json!(other_key_id), json!(user.id), json!({"fields": ["name", "rpm_limit"]}))
    );
    let rotation = of("api_key_rotated")[0];
    assert_eq!(rotation["target"], json!(other_key_id));
    assert_eq!(rotation["details"]["grace_period_secs"], json!(86400));
    assert_eq!(rotation["details"]["key_prefix"], rotated_key["key_prefix"]);
    let by_admin = of("api_key_revoked");
    assert!(by_admin
        .iter()
        .any(|e| e["target"] == json!(other_key_id) && e["actor"] == json!(admin.id)));

    // The user's own trail: only events concerning their account; filters and pages.
    let token = app.login(&user.email, new_password).await["token"].as_str().unwrap().to_owned();
    let own = app.get("/api/v1/audit?limit=200", Auth::Bearer(&token)).await.data(200);
    let own_events = own["events"].as_array().unwrap();
    assert!(own_events.iter().all(|e| e["user_id"] == json!(user.id)), "{own}");
    assert!(own_events.iter().any(|e| e["action"] == json!("user_disabled")));
    let only = app.get("/api/v1/audit?action=login_failed", Auth::Bearer(&token)).await.data(200);
    assert_eq!(only["events"].as_array().unwrap().len(), 1, "{only}");
    let first = app.get("/api/v1/audit?limit=2", Auth::Bearer(&token)).await.data(200);
    let cursor = first["next_cursor"].as_str().unwrap();
    let next = app
        .get(&format!("/api/v1/audit?limit=2&cursor={cursor}"), Auth::Bearer(&token))
        .await
        .data(200);
    assert_eq!(next["events"][0]["id"], own_events[2]["id"]);
    app.get("/api/v1/audit?action=dancing", Auth::Bearer(&token)).await.invalid("action");
    app.get("/api/v1/audit?user_id=x", Auth::Bearer(&token)).await.invalid("user_id");
    let ai_key = app.key(&token, &["ai_gateway"]).await;
    app.get("/api/v1/audit", Auth::Raw(&ai_key)).await.forbidden("read", "ai_gateway");
    let outsider = app.new_user("outsider").await;
    app.get("/api/v1/admin/audit", Auth::Bearer(&outsider.token)).await.forbidden("admin", "user");
    let filtered = app
        .get(
            &format!("/api/v1/admin/audit?user_id={}&action=user_enabled", user.id),
            Auth::Bearer(&admin.token),
        )
        .await
        .data(200);
    assert_eq!(filtered["events"].as_array().unwrap().len(), 1, "{filtered}");
}

async fn old_events_are_pruned(backend: Backend) {
    let app = spawn_app(backend).await;
    let url = DatabaseUrl::parse(&app.database_url).unwrap();
    let pool = Pool::new(&url, &PoolOptions::default()).unwrap();
    let now = chrono::Utc::now();
    let event = |days_old: i64| AuditEventRow {
        id: uuid::Uuid::now_v7().to_string(),
        at: (now - chrono::Duration::days(days_old)).naive_utc(),
        user_id: None,
        actor: None,
        action: AuditAction::LoginFailed.into(),
        target: None,
        ip: None,
        user_agent: None,
        request_id: None,
        details: "{}".into(),
    };
    let (old, recent) = (event(400), event(10));
    // A row a newer version wrote, with an action this one does not know: read back as written.
    let newer = AuditEventRow { action: "a_newer_versions_action".to_owned().into(), ..event(5) };
    let rows = [old.clone(), recent.clone(), newer.clone()];
    let writer = pool.clone();
    tokio::task::spawn_blocking(move || {
        let mut conn = writer.get().unwrap();
        for row in &rows {
            audit::insert(&mut conn, row).unwrap();
        }
    })
    .await
    .unwrap();
    let db = aigw_service::Db::new(pool.clone()).unwrap();
    assert_eq!(aigw_service::audit::prune(&db, 365).await.unwrap(), 1);
    let left = tokio::task::spawn_blocking(move || {
        let mut conn = pool.get().unwrap();
        let every = audit::list(&mut conn, None, None, None, 10).unwrap();
        (audit::list(&mut conn, None, Some(AuditAction::LoginFailed), None, 10).unwrap(), every)
    })
    .await
    .unwrap();
    let (left, every) = left;
    let ids: Vec<String> = left.into_iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![recent.id.clone()]);
    let read: Vec<(String, RecordedAction)> = every.into_iter().map(|e| (e.id, e.action)).collect();
    let unknown = RecordedAction::Unknown("a_newer_versions_action".to_owned());
    assert_eq!(
        read,
        vec![(newer.id, unknown), (recent.id, RecordedAction::from(AuditAction::LoginFailed))]
    );
}

backend_tests!(every_security_event_is_recorded_without_a_secret, old_events_are_pruned);
