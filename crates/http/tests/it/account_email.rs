//! E-mail verification, e-mail change and password reset, against a real SMTP server
//! (aiosmtpd): each test reads the message the server received and follows its token.

use crate::common;
use crate::credential_cache::reply_eventually;

use common::smtp::SmtpServer;
use common::{spawn_app_with, unique_email, Auth, Backend, Reply, TestApp, PASSWORD};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const VERIFY_SUBJECT: &str = "Confirm your e-mail address";
const CHANGE_SUBJECT: &str = "Confirm your new e-mail address";
const CHANGED_SUBJECT: &str = "Your e-mail address was changed";
const RESET_SUBJECT: &str = "Reset your password";
const RESET_DONE_SUBJECT: &str = "Your password was reset";
const INVITATION_SUBJECT: &str = "You are invited to a team";
const REGISTRATION_INVITATION_SUBJECT: &str = "You are invited to create an account";

/// An app whose account e-mail goes to `smtp`, with `auth.email_verification = mode`.
async fn app_with_mail(
    backend: Backend,
    smtp: &SmtpServer,
    mode: &str,
    clock: Option<&aigw_service::Clock>,
) -> TestApp {
    let mode: aigw_service::config::EmailVerification =
        serde_json::from_value(json!(mode)).unwrap();
    spawn_app_with(backend, |s| {
        smtp.configure(s);
        s.auth.email_verification = mode;
        if let Some(clock) = clock {
            s.clock = clock.clone();
        }
    })
    .await
}

async fn verify(app: &TestApp, token: &str) -> Reply {
    app.post("/api/v1/auth/email/verify", Auth::None, &json!({"token": token})).await
}

async fn ask_reset(app: &TestApp, email: &str) -> Reply {
    app.post("/api/v1/auth/password-reset", Auth::None, &json!({"email": email})).await
}

async fn confirm_reset(app: &TestApp, token: &str, password: &str) -> Reply {
    let body = json!({"token": token, "password": password});
    app.post("/api/v1/auth/password-reset/confirm", Auth::None, &body).await
}

async fn own_actions(app: &TestApp, token: &str) -> Vec<String> {
    let own = app.get("/api/v1/audit?limit=200", Auth::Bearer(token)).await.data(200);
    own["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect()
}

async fn registration_sends_a_link_that_verifies_the_address(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "optional", None).await;
    let user = app.new_user("verify").await;
    let me = app.me(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(me["user"]["email_verified_at"], Value::Null, "{me}");

    let mail = smtp.wait_for(&user.email, VERIFY_SUBJECT, 1).await;
    let token = mail.token("aigwe_");
    assert_eq!(mail.link(), format!("https://gw.example.test/account/verify-email?token={token}"));
    assert!(mail.html.contains(&token), "the HTML part carries the token too");

    let verified = verify(&app, &token).await.data(200);
    assert_eq!(verified["user"]["email"], json!(user.email));
    common::assert_timestamp(&verified["user"]["email_verified_at"]);
    let me = app.me(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(me["user"]["email_verified_at"], verified["user"]["email_verified_at"]);
    // Single use; and a token of the right shape that was never issued is refused alike.
    verify(&app, &token).await.invalid("token");
    verify(&app, &format!("aigwe_{}", "A".repeat(44))).await.invalid("token");
    verify(&app, "not a token").await.invalid("token");
    // A verified address needs no new link.
    let again = app.post_empty("/api/v1/auth/email/verification", Auth::Bearer(&user.token)).await;
    again.invalid("email");
    assert!(own_actions(&app, &user.token).await.contains(&"email_verified".to_owned()));
}

async fn a_new_link_withdraws_the_older_one(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "off", None).await;
    let user = app.new_user("resend").await;
    // Verification off: registration sends nothing; a user may still ask.
    let sent = app.post_empty("/api/v1/auth/email/verification", Auth::Bearer(&user.token)).await;
    let sent = sent.data(202);
    assert_eq!(sent["email"], json!(user.email));
    common::assert_timestamp(&sent["expires_at"]);
    let first = smtp.wait_for(&user.email, VERIFY_SUBJECT, 1).await.token("aigwe_");
    app.post_empty("/api/v1/auth/email/verification", Auth::Bearer(&user.token)).await.data(202);
    let second = smtp.wait_for(&user.email, VERIFY_SUBJECT, 2).await.token("aigwe_");
    assert_ne!(first, second);
    verify(&app, &first).await.invalid("token");
    verify(&app, &second).await.data(200);
    assert_eq!(smtp.count_to(&user.email), 2, "nothing was sent at registration");
}

async fn required_verification_holds_back_keys_and_the_gateway(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "optional", None).await;
    let user = app.new_user("required").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    // A second node on the same database requires verified addresses.
    let strict = app
        .spawn_sibling(|s| {
            smtp.configure(s);
            s.auth.email_verification = aigw_service::config::EmailVerification::Required;
        })
        .await;
    let chat = strict.chat(Auth::Bearer(&key), &common::chat_body("echo", "hi")).await;
    let refused = chat.forbidden("verified_email", "unverified_email");
    assert!(refused["details"]["hint"].as_str().unwrap().contains("/auth/email/verification"));
    let create = strict
        .create_key_raw(Auth::Bearer(&user.token), &json!({"name": "k", "permissions": ["read"]}))
        .await;
    create.forbidden("verified_email", "unverified_email");
    // Logging in and reading still work.
    strict.login(&user.email, &user.password).await;
    strict.me(Auth::Bearer(&user.token)).await.data(200);
    strict.list_keys(Auth::Bearer(&user.token)).await.data(200);

    let token = smtp.wait_for(&user.email, VERIFY_SUBJECT, 1).await.token("aigwe_");
    verify(&app, &token).await.data(200);
    // The other node learns it through the change feed.
    let body = common::chat_body("echo", "hi");
    reply_eventually(
        Duration::from_secs(2),
        "chat after verification",
        || strict.chat(Auth::Bearer(&key), &body),
        |r| r.status == 200,
    )
    .await;
    strict
        .create_key_raw(Auth::Bearer(&user.token), &json!({"name": "k", "permissions": ["read"]}))
        .await
        .data(201);
    drop(strict);
}

async fn password_reset_replaces_the_password_and_ends_every_session(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "off", None).await;
    let user = app.new_user("reset").await;
    let second = app.login(&user.email, &user.password).await;

    ask_reset(&app, &user.email).await.data(202);
    let mail = smtp.wait_for(&user.email, RESET_SUBJECT, 1).await;
    let token = mail.token("aigwp_");
    assert_eq!(
        mail.link(),
        format!("https://gw.example.test/account/reset-password?token={token}")
    );

    // The password policy applies, and a refused password does not use the token up.
    confirm_reset(&app, &token, "short").await.invalid("password");
    let new_password = "a new and long enough passphrase";
    let done = confirm_reset(&app, &token, new_password).await.data(200);
    assert_eq!(done["ended_sessions"], json!(2), "{done}");
    confirm_reset(&app, &token, "another long passphrase").await.invalid("token");

    app.login_raw(&user.email, &user.password).await.unauthorized();
    let fresh = app.login(&user.email, new_password).await;
    app.refresh_raw(&user.refresh_token).await.unauthorized();
    app.refresh_raw(second["refresh_token"].as_str().unwrap()).await.unauthorized();
    app.me(Auth::Bearer(&user.token)).await.unauthorized();
    // The account is told, and the address counts as verified (the link reached it).
    let notice = smtp.wait_for(&user.email, RESET_DONE_SUBJECT, 1).await;
    assert!(notice.text.contains("every session of the account was ended"), "{}", notice.text);
    let token = fresh["token"].as_str().unwrap();
    let me = app.me(Auth::Bearer(token)).await.data(200);
    common::assert_timestamp(&me["user"]["email_verified_at"]);
    let actions = own_actions(&app, token).await;
    for action in ["password_reset_requested", "password_reset"] {
        assert!(actions.contains(&action.to_owned()), "{action}: {actions:?}");
    }
}

async fn a_reset_link_expires_after_thirty_minutes(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let clock = aigw_service::Clock::adjustable();
    let app = app_with_mail(backend, &smtp, "off", Some(&clock)).await;
    let user = app.new_user("expiry").await;

    ask_reset(&app, &user.email).await.data(202);
    let token = smtp.wait_for(&user.email, RESET_SUBJECT, 1).await.token("aigwp_");
    clock.advance(chrono::Duration::minutes(29));
    confirm_reset(&app, &token, "still in time, long enough").await.data(200);

    ask_reset(&app, &user.email).await.data(202);
    let token = smtp.wait_for(&user.email, RESET_SUBJECT, 2).await.token("aigwp_");
    clock.advance(chrono::Duration::minutes(30) + chrono::Duration::seconds(1));
    confirm_reset(&app, &token, "too late, though long enough").await.invalid("token");
    app.login(&user.email, "still in time, long enough").await;
}

async fn a_reset_request_answers_alike_for_known_and_unknown_addresses(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "off", None).await;
    let user = app.new_user("known").await;
    let unknown = unique_email("unknown");
    ask_reset(&app, "not an address").await.invalid("email");

    const TRIES: u32 = 50;
    let (mut known_time, mut unknown_time) = (Duration::ZERO, Duration::ZERO);
    // Interleaved, so both see the same load (including the background work of the known
    // address's requests).
    for _ in 0..TRIES {
        for (email, total) in [(&user.email, &mut known_time), (&unknown, &mut unknown_time)] {
            let started = Instant::now();
            let reply = ask_reset(&app, email).await;
            *total += started.elapsed();
            assert_eq!(reply.json(), json!({"success": true, "data": {"accepted": true}}));
            assert_eq!(reply.status, 202);
        }
    }
    let (known_mean, unknown_mean) = (known_time / TRIES, unknown_time / TRIES);
    let gap = known_mean.abs_diff(unknown_mean);
    assert!(
        gap < Duration::from_millis(5),
        "mean answer time: known {known_mean:?}, unknown {unknown_mean:?}"
    );
    smtp.wait_for(&user.email, RESET_SUBJECT, 1).await;
    // Every mail job has ended once the known address's TRIES requests are accounted for:
    // its mails sent or failed, or jobs dropped with too many running (a dropped job may be
    // an unknown address's lookup, so drops can outnumber the known address's share).
    let accounted = || async {
        let series = crate::observability::scrape(&app).await;
        let count = |outcome| {
            let labels = [("kind", "password_reset"), ("outcome", outcome)];
            crate::observability::value(&series, "aigw_emails_total", &labels)
        };
        let mailed = count("sent") + count("failed");
        match mailed + count("dropped") {
            n if n >= f64::from(TRIES) => Ok((mailed, count("sent"))),
            n => Err(n),
        }
    };
    let (mailed, sent) =
        crate::common::eventually("mails unaccounted", Duration::from_secs(20), accounted).await;
    assert!(mailed <= f64::from(TRIES), "at most one mail per request for the known address");
    let arrived = smtp.count_to(&user.email) as f64;
    assert!(arrived >= sent && arrived <= f64::from(TRIES), "{arrived} mails arrived, {sent} sent");
    assert_eq!(smtp.count_to(&unknown), 0, "nothing goes to an address without an account");
}

async fn an_email_change_moves_the_account_and_tells_the_old_address(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "off", None).await;
    let user = app.new_user("mover").await;
    let other = app.new_user("taken").await;
    let new_email = unique_email("moved");
    let change = |email: String, password: &str| {
        let body = json!({"email": email, "password": password});
        let token = user.token.clone();
        let app = &app;
        async move { app.post("/api/v1/auth/email/change", Auth::Bearer(&token), &body).await }
    };
    change(new_email.clone(), "wrong password, long enough").await.unauthorized();
    change(user.email.clone(), PASSWORD).await.invalid("email");
    change(other.email.clone(), PASSWORD).await.invalid("email");
    change("nope".into(), PASSWORD).await.invalid("email");
    let key = app.key(&user.token, &["read"]).await;
    let by_key = app
        .post(
            "/api/v1/auth/email/change",
            Auth::Bearer(&key),
            &json!({"email": new_email, "password": PASSWORD}),
        )
        .await;
    by_key.forbidden("access_token", "api_key");

    let pending = change(new_email.clone(), PASSWORD).await.data(202);
    assert_eq!(pending["email"], json!(new_email));
    let mail = smtp.wait_for(&new_email, CHANGE_SUBJECT, 1).await;
    assert!(mail.text.contains(&user.email), "names the old address: {}", mail.text);
    // Nothing changes until the link is opened.
    app.login(&user.email, PASSWORD).await;
    let moved = verify(&app, &mail.token("aigwe_")).await.data(200);
    assert_eq!(moved["user"]["email"], json!(new_email));
    common::assert_timestamp(&moved["user"]["email_verified_at"]);

    let notice = smtp.wait_for(&user.email, CHANGED_SUBJECT, 1).await;
    assert!(notice.text.contains(&new_email), "{}", notice.text);
    app.login_raw(&user.email, PASSWORD).await.unauthorized();
    let session = app.login(&new_email, PASSWORD).await;
    let actions = own_actions(&app, session["token"].as_str().unwrap()).await;
    for action in ["email_change_requested", "email_changed"] {
        assert!(actions.contains(&action.to_owned()), "{action}: {actions:?}");
    }
}

/// The page behind a link: `GET` of the link's path and query on `app`.
async fn open_link(app: &TestApp, link: &str) -> Reply {
    let path = link.strip_prefix("https://gw.example.test").unwrap();
    app.get(path, Auth::None).await
}

async fn submit(app: &TestApp, path: &str, form: &[(&str, &str)]) -> Reply {
    app.send(app.request(reqwest::Method::POST, path, Auth::None).form(form)).await
}

fn assert_page_headers(page: &Reply) {
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
}

async fn the_links_open_forms_that_finish_the_job(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "optional", None).await;
    let user = app.new_user("pages").await;
    let mail = smtp.wait_for(&user.email, VERIFY_SUBJECT, 1).await;
    let token = mail.token("aigwe_");
    // Opening the link only shows the form: a mail scanner fetching it changes nothing.
    let form = open_link(&app, &mail.link()).await;
    assert_eq!(form.status, 200, "{}", form.text);
    assert_page_headers(&form);
    assert!(form.text.contains(&format!("name=\"token\" value=\"{token}\"")), "{}", form.text);
    let me = app.me(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(me["user"]["email_verified_at"], Value::Null);
    let done = submit(&app, "/account/verify-email", &[("token", &token)]).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_page_headers(&done);
    assert!(done.text.contains(&user.email), "{}", done.text);
    let me = app.me(Auth::Bearer(&user.token)).await.data(200);
    common::assert_timestamp(&me["user"]["email_verified_at"]);
    let again = submit(&app, "/account/verify-email", &[("token", &token)]).await;
    assert_eq!(again.status, 400);
    assert!(again.text.contains("invalid, used or expired"), "{}", again.text);
    // What a link carries is shown as text.
    let hostile = app
        .get("/account/verify-email?token=%22%3E%3Cscript%3Ealert(1)%3C/script%3E", Auth::None)
        .await;
    assert!(!hostile.text.contains("<script>"), "{}", hostile.text);
    assert!(hostile.text.contains("&lt;script&gt;"), "{}", hostile.text);
    assert_eq!(app.get("/account/verify-email", Auth::None).await.status, 400);

    ask_reset(&app, &user.email).await.data(202);
    let mail = smtp.wait_for(&user.email, RESET_SUBJECT, 1).await;
    let token = mail.token("aigwp_");
    let form = open_link(&app, &mail.link()).await;
    assert_eq!(form.status, 200, "{}", form.text);
    assert_page_headers(&form);
    let fields = |p: &'static str, c: &'static str| {
        [
            ("token", token.clone()),
            ("password", p.to_owned()),
            ("password_confirmation", c.to_owned()),
        ]
    };
    let post = |form: [(&'static str, String); 3]| {
        let app = &app;
        async move {
            let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            submit(app, "/account/reset-password", &pairs).await
        }
    };
    let differ = post(fields("one long passphrase", "another long passphrase")).await;
    assert_eq!(differ.status, 400);
    assert!(differ.text.contains("differ"), "{}", differ.text);
    let short = post(fields("short", "short")).await;
    assert_eq!(short.status, 400);
    assert!(short.text.contains("The password"), "{}", short.text);
    let done = post(fields("a page-set passphrase", "a page-set passphrase")).await;
    assert_eq!(done.status, 200, "{}", done.text);
    app.login(&user.email, "a page-set passphrase").await;
}

async fn reset_requests_are_limited_per_address_whether_or_not_it_has_an_account(backend: Backend) {
    use aigw_service::rate_limit::config::PolicyConfig;
    let Some(smtp) = SmtpServer::start() else { return };
    let app = spawn_app_with(backend, |s| {
        smtp.configure(s);
        s.rate_limit.enabled = true;
        s.rate_limit.policies.password_reset_email = PolicyConfig::new(2, 3600);
        s.rate_limit.policies.password_reset = PolicyConfig::new(7, 3600);
    })
    .await;
    let user = app.new_user("limited").await;
    let unknown = unique_email("nobody");
    for email in [&user.email, &unknown] {
        for _ in 0..2 {
            ask_reset(&app, email).await.data(202);
        }
        // The same refusal for both: the limit reveals nothing about the account.
        let refused = ask_reset(&app, email).await;
        let body = refused.error(429, "rate_limit_exceeded");
        assert_eq!(body["details"]["limit"], json!(2), "{body}");
    }
    // The per-client limit (7): 6 requests so far, one more passes, then it refuses.
    ask_reset(&app, &unique_email("third")).await.data(202);
    ask_reset(&app, &unique_email("fourth")).await.error(429, "rate_limit_exceeded");
    assert_eq!(smtp.wait_for(&user.email, RESET_SUBJECT, 2).await.to, user.email);
}

async fn ended_tokens_are_pruned_a_day_later(backend: Backend) {
    use aigw_persistence::pool::{DatabaseUrl, Pool, PoolOptions};
    let Some(smtp) = SmtpServer::start() else { return };
    let clock = aigw_service::Clock::adjustable();
    let app = app_with_mail(backend, &smtp, "off", Some(&clock)).await;
    let user = app.new_user("pruned").await;
    ask_reset(&app, &user.email).await.data(202);
    let token = smtp.wait_for(&user.email, RESET_SUBJECT, 1).await.token("aigwp_");
    let url = DatabaseUrl::parse(&app.database_url).unwrap();
    let db = aigw_service::Db::new(Pool::new(&url, &PoolOptions::default()).unwrap()).unwrap();
    let prune = || aigw_service::account_email::pruning::prune(&db, &clock);
    assert_eq!(prune().await.unwrap(), 0, "a live token is kept");
    clock.advance(chrono::Duration::hours(24));
    assert_eq!(prune().await.unwrap(), 0, "an ended token is kept a day");
    clock.advance(chrono::Duration::minutes(31));
    assert_eq!(prune().await.unwrap(), 1);
    confirm_reset(&app, &token, "a long enough passphrase").await.invalid("token");
}

backend_tests!(
    registration_sends_a_link_that_verifies_the_address,
    a_new_link_withdraws_the_older_one,
    required_verification_holds_back_keys_and_the_gateway,
    password_reset_replaces_the_password_and_ends_every_session,
    a_reset_link_expires_after_thirty_minutes,
    a_reset_request_answers_alike_for_known_and_unknown_addresses,
    an_email_change_moves_the_account_and_tells_the_old_address,
    the_links_open_forms_that_finish_the_job,
    ended_tokens_are_pruned_a_day_later,
    reset_requests_are_limited_per_address_whether_or_not_it_has_an_account,
    a_team_invitation_arrives_and_joins_only_once_the_address_is_verified,
    a_team_invitation_expires_and_is_sent_again,
    an_invitation_to_register_arrives_with_its_code,
    an_invitation_to_register_is_sent_again_and_shows_its_state,
);

/// A team's invitation of an address without an account arrives by e-mail, naming the team
/// and who invited; whoever registers with the address does not join until the address is
/// verified, and joins with the verification link (audited as `member_added`).
async fn a_team_invitation_arrives_and_joins_only_once_the_address_is_verified(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "optional", None).await;
    let owner = app.new_user("inv-owner").await;
    let body = json!({"name": "<b>ml</b>"});
    let made = app.post("/api/v1/teams", Auth::Bearer(&owner.token), &body).await.data(201);
    let id = made["id"].as_str().unwrap().to_owned();
    let email = unique_email("inv-mail");
    let path = format!("/api/v1/teams/{id}/members");
    let body = json!({"email": email, "role": "admin"});
    let added = app.post(&path, Auth::Bearer(&owner.token), &body).await.data(201);
    assert_eq!(added["status"], "invited");

    let mail = smtp.wait_for(&email, INVITATION_SUBJECT, 1).await;
    assert!(
        mail.text.contains("\"<b>ml</b>\"") && mail.text.contains(&owner.email),
        "{}",
        mail.text
    );
    assert!(mail.text.contains("as admin"), "{}", mail.text);
    assert!(mail.html.contains("&lt;b&gt;ml") && !mail.html.contains("<b>"), "{}", mail.html);
    assert_eq!(mail.link(), "https://gw.example.test/register");

    let registered = app.register(&email, PASSWORD, None).await;
    let token = registered["token"].as_str().unwrap().to_owned();
    let team_path = format!("/api/v1/teams/{id}");
    app.get(&team_path, Auth::Bearer(&token)).await.not_found("team", &id);
    let link = smtp.wait_for(&email, VERIFY_SUBJECT, 1).await.token("aigwe_");
    verify(&app, &link).await.data(200);
    let team = reply_eventually(
        Duration::from_secs(5),
        "the team, once the address is verified",
        || app.get(&team_path, Auth::Bearer(&token)),
        |reply| reply.status == 200,
    )
    .await;
    assert_eq!(team.data(200)["role"], "admin");
    let events = app.get("/api/v1/audit?limit=50", Auth::Bearer(&token)).await.data(200);
    let joined = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["action"] == "member_added" && e["details"]["invitation_id"].is_string());
    assert!(joined, "{events}");
}

/// The team's invitations, as listed to its owner.
async fn invitations(app: &TestApp, token: &str, team: &str) -> Vec<Value> {
    let path = format!("/api/v1/teams/{team}/invitations");
    let listed = app.get(&path, Auth::Bearer(token)).await.data(200);
    listed["invitations"].as_array().unwrap().clone()
}

/// A team invitation is open 7 days (`auth.team_invitation_ttl_days`): listed `sent`, then
/// `expired`; an address verified after it expired does not join; re-sending e-mails it again
/// and opens it anew, and an account that verified the address meanwhile joins at once.
async fn a_team_invitation_expires_and_is_sent_again(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let clock = aigw_service::Clock::adjustable();
    let app = app_with_mail(backend, &smtp, "optional", Some(&clock)).await;
    let owner = app.new_user("exp-owner").await;
    let body = json!({"name": "expiring"});
    let made = app.post("/api/v1/teams", Auth::Bearer(&owner.token), &body).await.data(201);
    let id = made["id"].as_str().unwrap().to_owned();
    let email = unique_email("exp-mail");
    let path = format!("/api/v1/teams/{id}/members");
    app.post(&path, Auth::Bearer(&owner.token), &json!({"email": email})).await.data(201);
    smtp.wait_for(&email, INVITATION_SUBJECT, 1).await;
    let listed = invitations(&app, &owner.token, &id).await;
    assert_eq!(
        (listed[0]["status"].as_str(), listed[0]["sends"].as_u64()),
        (Some("sent"), Some(1))
    );
    let created = chrono::DateTime::parse_from_rfc3339(listed[0]["created_at"].as_str().unwrap());
    let expires = chrono::DateTime::parse_from_rfc3339(listed[0]["expires_at"].as_str().unwrap());
    assert_eq!(expires.unwrap() - created.unwrap(), chrono::Duration::days(7));

    // Eight days on it has expired: verifying the address does not join the team.
    common::advance(&clock, 8 * 24 * 3600 * 1000);
    let signed_in = app.login(&owner.email, PASSWORD).await;
    let owner_token = signed_in["token"].as_str().unwrap().to_owned();
    assert_eq!(invitations(&app, &owner_token, &id).await[0]["status"], json!("expired"));
    let registered = app.register(&email, PASSWORD, None).await;
    let token = registered["token"].as_str().unwrap().to_owned();
    let link = smtp.wait_for(&email, VERIFY_SUBJECT, 1).await.token("aigwe_");
    verify(&app, &link).await.data(200);
    let team_path = format!("/api/v1/teams/{id}");
    app.get(&team_path, Auth::Bearer(&token)).await.not_found("team", &id);

    // Re-sent: the account verified meanwhile joins at once (no second mail).
    let invitation = listed[0]["id"].as_str().unwrap();
    let resend = format!("/api/v1/teams/{id}/invitations/{invitation}/resend");
    let resent = app.post_empty(&resend, Auth::Bearer(&owner_token)).await.data(200);
    assert_eq!(resent["status"], json!("accepted"), "{resent}");
    let team = app.get(&team_path, Auth::Bearer(&token)).await.data(200);
    assert_eq!(team["role"], json!("member"));
    assert!(invitations(&app, &owner_token, &id).await.is_empty());

    // An address without an account gets the mail again, open for 7 days from now.
    let other = unique_email("exp-other");
    app.post(&path, Auth::Bearer(&owner_token), &json!({"email": other})).await.data(201);
    let pending = invitations(&app, &owner_token, &id).await[0]["id"].as_str().unwrap().to_owned();
    let resend = format!("/api/v1/teams/{id}/invitations/{pending}/resend");
    let resent = app.post_empty(&resend, Auth::Bearer(&owner_token)).await.data(200);
    assert_eq!((resent["status"].as_str(), resent["sends"].as_u64()), (Some("sent"), Some(2)));
    smtp.wait_for(&other, INVITATION_SUBJECT, 2).await;
    let gone = format!("/api/v1/teams/{id}/invitations/{invitation}/resend");
    app.post_empty(&gone, Auth::Bearer(&owner_token))
        .await
        .not_found("team_invitation", invitation);
}

/// An administrator's invitation to register is e-mailed to the address with its code and a
/// link to the console's registration page carrying it; the code registers the address.
async fn an_invitation_to_register_arrives_with_its_code(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = app_with_mail(backend, &smtp, "optional", None).await;
    let admin = app.new_user("reg-admin").await;
    let dir = tempfile::tempdir().unwrap();
    let settings = common::test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &admin.email, aigw_domain::Role::Admin).await.unwrap();
    let email = unique_email("reg-invited");
    let body = json!({"email": email});
    let made = app.post("/api/v1/admin/invitations", Auth::Bearer(&admin.token), &body).await;
    let made = made.data(201);
    let code = made["invitation"].as_str().unwrap();
    let mail = smtp.wait_for(&email, REGISTRATION_INVITATION_SUBJECT, 1).await;
    assert_eq!(mail.link(), format!("https://gw.example.test/register?invitation={code}"));
    assert!(mail.text.contains(&admin.email) && mail.text.contains(code), "{}", mail.text);
    let register = json!({"email": email, "password": PASSWORD, "invitation": code});
    app.register_raw(&register).await.data(201);
}

/// The invitations of `admin` to register, as `GET /admin/invitations?state=…` lists them,
/// by e-mail address.
async fn invitations_to_register(
    app: &TestApp,
    admin: &str,
    state: &str,
) -> std::collections::HashMap<String, Value> {
    let path = format!("/api/v1/admin/invitations?state={state}");
    let listed = app.get(&path, Auth::Bearer(admin)).await.data(200);
    let rows = listed["invitations"].as_array().unwrap().iter();
    rows.map(|i| (i["email"].as_str().unwrap().to_owned(), i.clone())).collect()
}

/// An invitation to register is e-mailed and sent again with a new code (the old one stops
/// working); its state reads sent, accepted, revoked or expired, and an expired one opens
/// again when sent again. A used or revoked one cannot be.
async fn an_invitation_to_register_is_sent_again_and_shows_its_state(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let clock = aigw_service::Clock::adjustable();
    let app = app_with_mail(backend, &smtp, "optional", Some(&clock)).await;
    let admin = app.new_user("resend-admin").await;
    let dir = tempfile::tempdir().unwrap();
    let settings = common::test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &admin.email, aigw_domain::Role::Admin).await.unwrap();
    // A key, not an access token: it outlives the days the clock moves below.
    let admin_key = app.key(&admin.token, &["admin", "read"]).await;
    let token = admin_key.as_str();
    // A second node on the same database where registering takes an invitation.
    let invite_only = app
        .spawn_sibling(|s| {
            smtp.configure(s);
            s.clock = clock.clone();
            s.auth.registration = aigw_service::RegistrationMode::Invite;
        })
        .await;
    let invite = |email: &str| {
        let body = json!({"email": email});
        let app = &app;
        async move { app.post("/api/v1/admin/invitations", Auth::Bearer(token), &body).await }
    };
    let resend = |id: &str| {
        let path = format!("/api/v1/admin/invitations/{id}/resend");
        let app = &app;
        async move { app.post_empty(&path, Auth::Bearer(token)).await }
    };
    let (a, b, c) = (unique_email("inv-a"), unique_email("inv-b"), unique_email("inv-c"));

    // Sent, then sent again: a second message with a new code; the first code is dead.
    let made = invite(&a).await.data(201);
    let (id_a, first) = (made["id"].as_str().unwrap(), made["invitation"].as_str().unwrap());
    smtp.wait_for(&a, REGISTRATION_INVITATION_SUBJECT, 1).await;
    let open = invitations_to_register(&app, token, "open").await;
    assert_eq!((open[&a]["status"].clone(), open[&a]["sends"].clone()), (json!("sent"), json!(1)));
    common::assert_timestamp(&open[&a]["sent_at"]);
    let again = resend(id_a).await.data(200);
    let second = again["invitation"].as_str().unwrap();
    assert_ne!(first, second);
    let mail = smtp.wait_for(&a, REGISTRATION_INVITATION_SUBJECT, 2).await;
    assert!(mail.text.contains(second), "{}", mail.text);
    assert_eq!(invitations_to_register(&app, token, "open").await[&a]["sends"], json!(2));
    let register = |code: &str| json!({"email": a, "password": PASSWORD, "invitation": code});
    invite_only.register_raw(&register(first)).await.invalid("invitation");
    invite_only.register_raw(&register(second)).await.data(201);
    assert!(!invitations_to_register(&app, token, "open").await.contains_key(&a));
    let all = invitations_to_register(&app, token, "all").await;
    assert_eq!(all[&a]["status"], json!("accepted"), "{}", all[&a]);
    common::assert_timestamp(&all[&a]["accepted_at"]);
    resend(id_a).await.not_found("invitation", id_a);

    // Revoked: listed as such, and not sent again.
    let made = invite(&b).await.data(201);
    let id_b = made["id"].as_str().unwrap().to_owned();
    app.delete(&format!("/api/v1/admin/invitations/{id_b}"), Auth::Bearer(token)).await.data(200);
    assert_eq!(invitations_to_register(&app, token, "all").await[&b]["status"], json!("revoked"));
    resend(&id_b).await.not_found("invitation", &id_b);

    // Expired: out of the open list, and open again once sent again.
    let made = invite(&c).await.data(201);
    let id_c = made["id"].as_str().unwrap().to_owned();
    clock.advance(chrono::Duration::days(8));
    assert!(!invitations_to_register(&app, token, "open").await.contains_key(&c));
    assert_eq!(invitations_to_register(&app, token, "all").await[&c]["status"], json!("expired"));
    resend(&id_c).await.data(200);
    let open = invitations_to_register(&app, token, "open").await;
    assert_eq!((open[&c]["status"].clone(), open[&c]["sends"].clone()), (json!("sent"), json!(2)));
    // Registering where no invitation is needed takes it all the same.
    app.register_raw(&json!({"email": c, "password": PASSWORD})).await.data(201);
    assert_eq!(invitations_to_register(&app, token, "all").await[&c]["status"], json!("accepted"));

    let bad = app.get("/api/v1/admin/invitations?state=used", Auth::Bearer(token)).await;
    bad.invalid("state");
    resend("no-such-invitation").await.not_found("invitation", "no-such-invitation");
}

/// Mail to an SMTP server that is down is tried again with backoff and, once the server is
/// up, delivered; `aigw_emails_total` counts the retries and the delivery. One backend is
/// enough: the database plays no part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_is_retried_until_the_server_answers() {
    let Some(probe) = SmtpServer::start() else { return };
    drop(probe);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.email.transport = aigw_service::email::EmailTransportKind::Smtp;
        s.email.host = "127.0.0.1".into();
        s.email.port = Some(port);
        s.email.security = aigw_service::email::SmtpSecurity::None;
        s.email.retry_base_ms = 200;
        s.email.max_attempts = 6;
    })
    .await;
    let user = app.new_user("retry").await;
    ask_reset(&app, &user.email).await.data(202);
    // A first try has failed (nothing listens yet) before the server starts.
    let failed_once = || async {
        let series = crate::observability::scrape(&app).await;
        let labels = [("kind", "password_reset"), ("outcome", "retried")];
        match crate::observability::value(&series, "aigw_emails_total", &labels) {
            n if n >= 1.0 => Ok(()),
            n => Err(n),
        }
    };
    crate::common::eventually("no try failed", Duration::from_secs(10), failed_once).await;
    let smtp = SmtpServer::start_on(port);
    let mail = smtp.wait_for(&user.email, RESET_SUBJECT, 1).await;
    assert!(mail.token("aigwp_").starts_with("aigwp_"));
    let series = crate::observability::scrape(&app).await;
    let count = |outcome| {
        crate::observability::value(
            &series,
            "aigw_emails_total",
            &[("kind", "password_reset"), ("outcome", outcome)],
        )
    };
    assert_eq!(count("sent"), 1.0);
    assert!(count("retried") >= 1.0, "{}", count("retried"));
    assert_eq!(count("failed"), 0.0);
}
