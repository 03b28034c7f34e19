//! The console's administration pages (`/admin/…`) over HTTP, as a browser without a script
//! engine uses them: users (search, disable, enable, role), every key (search by prefix,
//! revoke), invitations, the audit trail; and the 403 page everyone else gets.

use crate::common;
use aigw_domain::Role;
use common::browser::Browser;
use common::{spawn_app, test_settings, Auth, Backend, TestApp, User};
use serde_json::json;

/// A new account made an admin the way an operator does (`aigw admin set-role`).
async fn new_admin(app: &TestApp, tag: &str) -> User {
    let user = app.new_user(tag).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &user.email, Role::Admin).await.unwrap();
    user
}

/// An admin's browser, signed in.
async fn admin_browser<'a>(app: &'a TestApp, admin: &User) -> Browser<'a> {
    let mut browser = Browser::new(app);
    browser.sign_in(&admin.email, &admin.password).await;
    browser
}

async fn admins_search_disable_and_enable_users(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "console-admin").await;
    let tag = format!("target{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let user = app.new_user(&tag).await;
    let mut browser = admin_browser(&app, &admin).await;
    let mut users_browser = Browser::new(&app);
    users_browser.sign_in(&user.email, &user.password).await;
    assert_eq!(users_browser.get("/keys").await.status, 200);

    let all = browser.get("/admin/users").await;
    assert_eq!(all.status, 200, "{}", all.text);
    assert!(all.text.contains("Registration is <strong>open</strong>"), "{}", all.text);
    assert!(all.text.contains("aria-current=\"page\">Users</a>"), "{}", all.text);
    // The e-mail search is by prefix (and upper case is normalised away).
    let found = browser.get(&format!("/admin/users?q={}", tag.to_uppercase())).await;
    assert_eq!(found.status, 200, "{}", found.text);
    assert!(found.text.contains("id=\"users\""), "{}", found.text);
    let row = found.row("data-user-id", &user.id).expect("the user's row");
    assert!(row.contains(&user.email) && row.contains("form class=\"disable-user\""), "{row}");
    assert!(found.row("data-user-id", &admin.id).is_none(), "only those that start so");

    // Disabling: back to the search with a notice; the user's console session has ended.
    let csrf = found.csrf();
    let disabled = browser
        .post(&format!("/admin/users/{}/disable", user.id), &[("csrf", &csrf), ("q", &tag)])
        .await;
    let after = browser.follow(&disabled, &format!("/admin/users?q={tag}")).await;
    assert!(after.text.contains("id=\"flash\""), "{}", after.text);
    let row = after.row("data-user-id", &user.id).unwrap();
    assert!(row.contains("badge disabled") && row.contains("form class=\"enable-user\""), "{row}");
    let out = users_browser.get("/keys").await;
    assert_eq!((out.status, out.location.as_deref()), (303, Some("/login?next=%2Fkeys")));

    // An admin cannot disable or demote themselves: the page says why.
    let own = browser.post(&format!("/admin/users/{}/disable", admin.id), &[("csrf", &csrf)]).await;
    assert_eq!(own.status, 400, "{}", own.text);
    assert!(own.text.contains("an admin cannot disable themselves"), "{}", own.text);
    assert!(own.text.contains("id=\"users\""), "the list comes back: {}", own.text);
    let demoted = browser
        .post(&format!("/admin/users/{}/role", admin.id), &[("csrf", &csrf), ("role", "user")])
        .await;
    assert_eq!(demoted.status, 400, "{}", demoted.text);
    assert!(demoted.text.contains("an admin cannot demote themselves"), "{}", demoted.text);
    let unknown = browser
        .post(&format!("/admin/users/{}/role", user.id), &[("csrf", &csrf), ("role", "root")])
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.text);
    // Without the session's token nothing changes.
    let forged = browser.post(&format!("/admin/users/{}/enable", user.id), &[("q", "")]).await;
    assert_eq!(forged.status, 403, "{}", forged.text);

    // Re-enabled, the user signs in again; a promotion shows in the row.
    let enabled =
        browser.post(&format!("/admin/users/{}/enable", user.id), &[("csrf", &csrf)]).await;
    browser.follow(&enabled, "/admin/users").await;
    users_browser.sign_in(&user.email, &user.password).await;
    assert_eq!(users_browser.get("/keys").await.status, 200);
    let promoted = browser
        .post(&format!("/admin/users/{}/role", user.id), &[("csrf", &csrf), ("role", "admin")])
        .await;
    let after = browser.follow(&promoted, "/admin/users").await;
    let row = after.row("data-user-id", &user.id).unwrap();
    assert!(row.contains("<td class=\"role\">admin</td>"), "{row}");
    assert_eq!(users_browser.get("/admin/users").await.status, 200);
    // A user's own budget, set and cleared from their row.
    let path = format!("/admin/users/{}/budget", user.id);
    let set = browser.post(&path, &[("csrf", &csrf), ("budget_usd", "25")]).await;
    let after = browser.follow(&set, "/admin/users").await;
    assert!(after.text.contains("own budget is now $25.00"), "{}", after.text);
    let row = after.row("data-user-id", &user.id).unwrap();
    assert!(row.contains("value=\"25\""), "{row}");
    let api = format!("/api/v1/admin/users/{}", user.id);
    let shown = app.get(&api, Auth::Bearer(&admin.token)).await;
    assert_eq!(shown.data(200)["budget_usd"], serde_json::json!(25.0));
    let bad = browser.post(&path, &[("csrf", &csrf), ("budget_usd", "lots")]).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    let cleared = browser.post(&path, &[("csrf", &csrf), ("budget_usd", "")]).await;
    let after = browser.follow(&cleared, "/admin/users").await;
    assert!(after.text.contains("user budget again"), "{}", after.text);
}

async fn everyone_else_gets_the_apis_403(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("not-admin").await;
    let victim = app.new_user("victim").await;
    let mut browser = Browser::new(&app);
    let away = browser.get("/admin/users").await;
    assert_eq!(
        (away.status, away.location.as_deref()),
        (303, Some("/login?next=%2Fadmin%2Fusers"))
    );
    browser.sign_in(&user.email, &user.password).await;
    let keys = browser.get("/keys").await;
    assert!(!keys.text.contains("href=\"/admin/users\""), "no Administration link: {}", keys.text);
    for path in ["/admin/users", "/admin/keys", "/admin/invitations", "/admin/audit"] {
        let page = browser.get(path).await;
        assert_eq!(page.status, 403, "{path}: {}", page.text);
        assert!(page.text.contains("this operation requires admin"), "{path}: {}", page.text);
    }
    let csrf = keys.csrf();
    let refused =
        browser.post(&format!("/admin/users/{}/disable", victim.id), &[("csrf", &csrf)]).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    let refused = browser
        .post("/admin/invitations", &[("csrf", &csrf), ("email", "someone@example.com")])
        .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    app.me(Auth::Bearer(&victim.token)).await.data(200);
}

async fn admins_find_a_key_by_its_prefix_and_revoke_it(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "key-admin").await;
    let owner = app.new_user("key-owner").await;
    let made = app.create_key(&owner.token, &["ai_gateway"], None).await;
    let (key, id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    let chat = json!({"model": "echo", "messages": [{"role": "user", "content": "hi"}]});
    let answer = app.post("/api/v1/ai/chat/completions", Auth::Bearer(key), &chat).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let mut browser = admin_browser(&app, &admin).await;

    let prefix = &key[..10];
    let found = browser.get(&format!("/admin/keys?prefix={prefix}")).await;
    assert_eq!(found.status, 200, "{}", found.text);
    assert!(found.text.contains("id=\"all-keys\""), "{}", found.text);
    let row = found.row("data-key-id", id).expect("the key's row");
    assert!(row.contains(&owner.email) && row.contains(&owner.id), "{row}");
    assert!(row.contains("form class=\"revoke-key\"") && row.contains("data-confirm="), "{row}");
    assert!(!found.text.contains(key), "never the secret");
    // Case counts: the same letters in the other case find nothing.
    let upper = browser.get("/admin/keys?prefix=AIGW_").await;
    assert!(upper.row("data-key-id", id).is_none(), "{}", upper.text);
    // By owner, with the e-mail address.
    let by_owner = browser.get(&format!("/admin/keys?owner={}", owner.email)).await;
    assert!(by_owner.row("data-key-id", id).is_some(), "{}", by_owner.text);
    let nobody = browser.get("/admin/keys?owner=nobody%40example.com").await;
    assert_eq!(nobody.status, 404, "{}", nobody.text);
    // A prefix that no key can start with is named.
    let bad = browser.get("/admin/keys?prefix=aigw%25").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad.text.contains("key_prefix"), "{}", bad.text);
    assert!(bad.text.contains("id=\"prefix\" name=\"prefix\" value=\"aigw%\""), "{}", bad.text);

    let csrf = found.csrf();
    let revoked = browser
        .post(&format!("/admin/keys/{id}/revoke"), &[("csrf", &csrf), ("prefix", prefix)])
        .await;
    let after = browser.follow(&revoked, &format!("/admin/keys?prefix={prefix}")).await;
    assert!(after.text.contains("is revoked"), "{}", after.text);
    let row = after.row("data-key-id", id).unwrap();
    assert!(row.contains("badge revoked") && !row.contains("revoke-key"), "{row}");
    let refused = app.post("/api/v1/ai/chat/completions", Auth::Bearer(key), &chat).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    let unknown = browser.post("/admin/keys/nope/revoke", &[("csrf", &csrf)]).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
}

async fn admins_invite_and_revoke_invitations(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "inviter").await;
    let mut browser = admin_browser(&app, &admin).await;
    let page = browser.get("/admin/invitations").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("id=\"create-invitation\""), "{}", page.text);
    let csrf = page.csrf();

    let refused =
        browser.post("/admin/invitations", &[("csrf", &csrf), ("email", "not an address")]).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("value=\"not an address\""), "{}", refused.text);

    let email = common::unique_email("invited");
    let created = browser
        .post("/admin/invitations", &[("csrf", &csrf), ("email", &email), ("expires_at", "")])
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let secret = created.element_text("secret");
    assert!(secret.starts_with("aigwi_"), "{secret}");
    assert!(created.text.contains("data-copy=\"secret\""), "{}", created.text);

    let listed = browser.get("/admin/invitations").await;
    assert!(listed.text.contains("id=\"invitations\""), "{}", listed.text);
    assert!(!listed.text.contains(&secret), "the token is shown once");
    let start = listed.text.find("data-invitation-id=\"").unwrap() + 20;
    let id = listed.text[start..].split('"').next().unwrap().to_owned();
    assert!(listed.row("data-invitation-id", &id).unwrap().contains(&email));
    let api = app.get("/api/v1/admin/invitations", Auth::Bearer(&admin.token)).await.data(200);
    assert_eq!(api["invitations"][0]["id"], json!(id), "{api}");
    // An unknown state is refused as the API refuses it, over the open invitations.
    let unknown = browser.get("/admin/invitations?state=used").await;
    assert_eq!(unknown.status, 400, "{}", unknown.text);
    assert!(unknown.text.contains("must be open or all"), "{}", unknown.text);
    assert!(unknown.row("data-invitation-id", &id).is_some(), "{}", unknown.text);

    let revoked =
        browser.post(&format!("/admin/invitations/{id}/revoke"), &[("csrf", &csrf)]).await;
    let after = browser.follow(&revoked, "/admin/invitations").await;
    assert!(after.text.contains("The invitation is revoked."), "{}", after.text);
    assert!(after.row("data-invitation-id", &id).is_none(), "{}", after.text);
    let again = browser.post(&format!("/admin/invitations/{id}/revoke"), &[("csrf", &csrf)]).await;
    assert_eq!(again.status, 404, "{}", again.text);
}

async fn the_audit_page_shows_a_disabling(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "auditor").await;
    let user = app.new_user("audited").await;
    let mut browser = admin_browser(&app, &admin).await;
    let csrf = browser.get("/admin/users").await.csrf();
    let disabled =
        browser.post(&format!("/admin/users/{}/disable", user.id), &[("csrf", &csrf)]).await;
    assert_eq!(disabled.status, 303, "{}", disabled.text);
    let email = common::unique_email("audit-invited");
    browser.post("/admin/invitations", &[("csrf", &csrf), ("email", &email)]).await;

    let all = browser.get("/admin/audit").await;
    assert_eq!(all.status, 200, "{}", all.text);
    assert!(all.text.contains("id=\"audit\""), "{}", all.text);
    // Details are compact JSON, escaped as text.
    assert!(all.text.contains("{&quot;email&quot;:&quot;"), "{}", all.text);
    let events = browser.get("/admin/audit?action=user_disabled").await;
    assert_eq!(events.status, 200, "{}", events.text);
    assert!(events.text.contains("<option value=\"user_disabled\" selected>"), "{}", events.text);
    let start = events.text.find("<tbody>").unwrap();
    let body = &events.text[start..];
    assert_eq!(body.matches("<tr data-event-id=").count(), 1, "{body}");
    assert!(body.contains("<code>user_disabled</code>") && body.contains(&user.id), "{body}");
    assert!(body.contains(&admin.id), "the actor: {body}");
    // By the account, named by its address.
    let theirs = browser.get(&format!("/admin/audit?user={}", user.email)).await;
    assert!(theirs.text.contains("<code>user_disabled</code>"), "{}", theirs.text);
    assert!(theirs.text.contains("<code>user_registered</code>"), "{}", theirs.text);
    assert!(!theirs.text.contains("<code>invitation_created</code>"), "{}", theirs.text);
    let bad = browser.get("/admin/audit?action=nope").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad.text.contains("action"), "{}", bad.text);
}

backend_tests!(
    admins_search_disable_and_enable_users,
    everyone_else_gets_the_apis_403,
    admins_find_a_key_by_its_prefix_and_revoke_it,
    admins_invite_and_revoke_invitations,
    the_audit_page_shows_a_disabling,
);
