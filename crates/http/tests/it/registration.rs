//! Who may register: `auth.registration = open | invite | closed`,
//! `auth.allowed_email_domains`, and single-use invitations.

use crate::common;

use aigw_domain::Role;
use aigw_service::RegistrationMode;
use common::{spawn_app_with, test_settings, Auth, Backend, TestApp, PASSWORD};
use serde_json::json;

/// An admin made by the operator command (registration may be closed) and its access token.
async fn operator_admin(app: &TestApp) -> String {
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    let email = common::unique_email("inviter");
    aigw_http::operator::create_user(&settings, &email, None, Role::Admin, PASSWORD.to_owned())
        .await
        .unwrap();
    app.login(&email, PASSWORD).await["token"].as_str().unwrap().to_owned()
}

async fn closed_registration_is_forbidden(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.auth.registration = RegistrationMode::Closed).await;
    let body = json!({"email": common::unique_email("closed"), "password": PASSWORD});
    app.register_raw(&body).await.forbidden("invitation", "none");
    // The operator still creates accounts, and they log in.
    operator_admin(&app).await;
}

async fn only_allowed_domains_register(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.auth.allowed_email_domains = vec!["example.com".into(), "corp.example".into()]
    })
    .await;
    let body = json!({"email": "eve@elsewhere.org", "password": PASSWORD});
    app.register_raw(&body).await.invalid("email");
    let body = json!({"email": "eve@sub.example.com", "password": PASSWORD});
    app.register_raw(&body).await.invalid("email");
    app.register("Ann@Example.COM", PASSWORD, None).await;
    app.register("bob@corp.example", PASSWORD, None).await;
}

async fn invitations_are_single_use_for_one_email(backend: Backend) {
    let (app, clock) =
        common::spawn_app_with_clock(backend, |s| s.auth.registration = RegistrationMode::Invite)
            .await;
    let admin = operator_admin(&app).await;
    let email = common::unique_email("invited");
    let created = app
        .post("/api/v1/admin/invitations", Auth::Bearer(&admin), &json!({"email": email}))
        .await
        .data(201);
    let invitation = created["invitation"].as_str().unwrap().to_owned();
    assert!(invitation.starts_with("aigwi_"), "{created}");
    assert_eq!(created["email"], json!(email));
    common::assert_timestamp(&created["expires_at"]);

    let register = |email: &str, invitation: Option<&str>| {
        let mut body = json!({"email": email, "password": PASSWORD});
        if let Some(i) = invitation {
            body["invitation"] = json!(i);
        }
        body
    };
    app.register_raw(&register(&email, None)).await.invalid("invitation");
    app.register_raw(&register(&email, Some("aigwi_nonsense"))).await.invalid("invitation");
    let other = common::unique_email("uninvited");
    app.register_raw(&register(&other, Some(&invitation))).await.invalid("invitation");
    let forged = format!("aigwi_{}", "A".repeat(44));
    app.register_raw(&register(&email, Some(&forged))).await.invalid("invitation");
    app.register_raw(&register(&email, Some(&invitation))).await.data(201);
    // Used.
    let again = register(&email.replace("invited", "invited2"), Some(&invitation));
    app.register_raw(&again).await.invalid("invitation");
    app.register_raw(&register(&email, Some(&invitation))).await.invalid("invitation");

    // Expired.
    let soon = common::unique_email("late");
    let expiring = app
        .post(
            "/api/v1/admin/invitations",
            Auth::Bearer(&admin),
            &json!({"email": soon, "expires_at": common::in_secs(1)}),
        )
        .await
        .data(201);
    common::advance(&clock, 2100);
    let late = register(&soon, expiring["invitation"].as_str());
    app.register_raw(&late).await.invalid("invitation");

    // Only admins invite; bad fields name themselves.
    let user = app.login(&email, PASSWORD).await["token"].as_str().unwrap().to_owned();
    app.post("/api/v1/admin/invitations", Auth::Bearer(&user), &json!({"email": other}))
        .await
        .forbidden("admin", "user");
    let bad = json!({"email": "not-an-email"});
    app.post("/api/v1/admin/invitations", Auth::Bearer(&admin), &bad).await.invalid("email");
    let past = json!({"email": other, "expires_at": "2020-01-01T00:00:00Z"});
    app.post("/api/v1/admin/invitations", Auth::Bearer(&admin), &past).await.invalid("expires_at");

    // The trail records the invitation, never its token.
    let trail = app
        .get("/api/v1/admin/audit?action=invitation_created", Auth::Bearer(&admin))
        .await
        .data(200);
    assert_eq!(trail["events"].as_array().unwrap().len(), 2, "{trail}");
    assert!(!trail.to_string().contains(&invitation));
}

backend_tests!(
    closed_registration_is_forbidden,
    only_allowed_domains_register,
    invitations_are_single_use_for_one_email,
);
