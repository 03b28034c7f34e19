//! The TOTP second factor: enrollment and confirmation, login with a code or a recovery
//! code, single use of codes (across nodes too), the challenge's attempts and lifetime,
//! disabling, recovery-code regeneration, `amr` in access tokens, and admins under
//! `auth.require_mfa_for_admins`. Time moves by an adjustable clock, never by sleeping.

use crate::common;

use aigw_domain::Role;
use aigw_service::Clock;
use common::{jwt_part, spawn_app_with, test_settings, Auth, Backend, Reply, TestApp, User};
use serde_json::{json, Value};
use totp_rs::{Algorithm, Secret, TOTP};

backend_tests!(
    enroll_confirm_and_log_in_with_a_code,
    a_code_works_once_on_every_node,
    concurrent_uses_of_one_code_on_two_nodes_one_wins,
    a_recovery_code_works_once,
    five_wrong_codes_kill_the_challenge,
    ten_wrong_codes_in_an_hour_stop_new_challenges,
    an_expired_challenge_is_refused,
    disable_needs_the_password_and_a_code,
    regenerated_recovery_codes_replace_the_old_ones,
    admins_are_refused_until_they_log_in_with_the_second_factor,
    amr_is_in_the_access_token_and_kept_across_refresh,
    bad_input_is_a_400_naming_the_field,
);

const ENROLL: &str = "/api/v1/auth/mfa/totp/enroll";
const CONFIRM: &str = "/api/v1/auth/mfa/totp/confirm";
const DISABLE: &str = "/api/v1/auth/mfa/totp/disable";
const RECOVERY_CODES: &str = "/api/v1/auth/mfa/recovery-codes";
const STATUS: &str = "/api/v1/auth/mfa";
const LOGIN_MFA: &str = "/api/v1/auth/login/mfa";

/// An app whose clock the test moves.
async fn app_with_clock(backend: Backend) -> (TestApp, Clock) {
    let clock = Clock::adjustable();
    let app = spawn_app_with(backend, |s| s.clock = clock.clone()).await;
    (app, clock)
}

/// The code of `secret` (base32) at the clock's time.
fn code(secret: &str, clock: &Clock) -> String {
    let bytes = Secret::Encoded(secret.to_owned()).to_bytes().unwrap();
    let totp = TOTP::new_unchecked(Algorithm::SHA1, 6, 1, 30, bytes, None, String::new());
    totp.generate(u64::try_from(clock.now().timestamp()).unwrap())
}

/// A 6-digit code that is not `secret`'s around the clock's time.
fn wrong_code(secret: &str, clock: &Clock) -> String {
    let right = code(secret, clock);
    let wrong = (right.parse::<u32>().unwrap() + 500_000) % 1_000_000;
    format!("{wrong:06}")
}

/// Moves the clock to the next TOTP step.
fn next_step(clock: &Clock) {
    clock.advance(chrono::Duration::seconds(30));
}

/// A user with the factor on: returns the user, the secret and the recovery codes. The
/// clock has moved past the step of the confirming code.
async fn enrolled(app: &TestApp, clock: &Clock, tag: &str) -> (User, String, Vec<String>) {
    let user = app.new_user(tag).await;
    let (secret, codes) = enable(app, clock, &user).await;
    (user, secret, codes)
}

async fn enable(app: &TestApp, clock: &Clock, user: &User) -> (String, Vec<String>) {
    let enrollment = app.post_empty(ENROLL, Auth::Bearer(&user.token)).await.data(200);
    let secret = enrollment["secret"].as_str().unwrap().to_owned();
    let confirmed = app
        .post(CONFIRM, Auth::Bearer(&user.token), &json!({"code": code(&secret, clock)}))
        .await
        .data(200);
    let codes = confirmed["recovery_codes"].as_array().unwrap();
    let codes = codes.iter().map(|c| c.as_str().unwrap().to_owned()).collect();
    next_step(clock);
    (secret, codes)
}

/// Logs in with the password and returns the challenge's token (asserting the shape).
async fn challenge(app: &TestApp, user: &User) -> String {
    let data = app.login(&user.email, &user.password).await;
    assert_eq!(data["mfa_required"], json!(true), "{data}");
    assert_eq!(data["methods"], json!(["totp", "recovery_code"]), "{data}");
    assert!(data.get("token").is_none() && data.get("refresh_token").is_none(), "{data}");
    data["mfa_token"].as_str().unwrap().to_owned()
}

async fn complete(app: &TestApp, mfa_token: &str, code: &str) -> Reply {
    app.post(LOGIN_MFA, Auth::None, &json!({"mfa_token": mfa_token, "code": code})).await
}

async fn complete_with_recovery(app: &TestApp, mfa_token: &str, recovery_code: &str) -> Reply {
    app.post(
        LOGIN_MFA,
        Auth::None,
        &json!({"mfa_token": mfa_token, "recovery_code": recovery_code}),
    )
    .await
}

fn hint(reply: &Reply) -> String {
    reply.unauthorized()["details"]["hint"].as_str().unwrap().to_owned()
}

fn amr(token: &str) -> Value {
    jwt_part(token, 1)["amr"].clone()
}

async fn enroll_confirm_and_log_in_with_a_code(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let user = app.new_user("mfa").await;
    let auth = Auth::Bearer(&user.token);
    let status = app.get(STATUS, auth).await.data(200);
    assert_eq!(
        status,
        json!({"enabled": false, "enabled_at": null, "pending": false,
        "recovery_codes_left": 0, "methods": []})
    );

    let enrollment = app.post_empty(ENROLL, auth).await.data(200);
    let secret = enrollment["secret"].as_str().unwrap();
    let uri = enrollment["otpauth_uri"].as_str().unwrap();
    let account = user.email.replace('@', "%40");
    assert_eq!(uri, format!("otpauth://totp/aigw:{account}?secret={secret}&issuer=aigw"));
    assert!(enrollment["qr_svg"].as_str().unwrap().contains("<svg"), "{enrollment}");
    assert_eq!(enrollment["enabled"], json!(false));
    let status = app.get(STATUS, auth).await.data(200);
    assert_eq!((status["enabled"].clone(), status["pending"].clone()), (json!(false), json!(true)));
    // Pending: a login still answers tokens.
    app.login(&user.email, &user.password).await["token"].as_str().unwrap();

    app.post(CONFIRM, auth, &json!({"code": wrong_code(secret, &clock)})).await.invalid("code");
    let confirming = code(secret, &clock);
    let confirmed = app.post(CONFIRM, auth, &json!({"code": confirming})).await.data(200);
    let codes = confirmed["recovery_codes"].as_array().unwrap();
    assert_eq!(codes.len(), 10);
    assert!(codes.iter().all(|c| c.as_str().unwrap().len() == 19), "{confirmed}");
    common::assert_timestamp(&confirmed["enabled_at"]);
    let status = app.get(STATUS, auth).await.data(200);
    assert_eq!(status["enabled"], json!(true));
    assert_eq!(status["recovery_codes_left"], json!(10));
    assert_eq!(status["methods"], json!(["totp", "recovery_code"]));
    app.post(CONFIRM, auth, &json!({"code": code(secret, &clock)})).await.invalid("mfa");
    app.post_empty(ENROLL, auth).await.invalid("mfa");

    // The confirming code's step is used: a login needs the next one.
    let token = challenge(&app, &user).await;
    assert!(token.starts_with("aigwm_"), "{token}");
    let reused = complete(&app, &token, &confirming).await;
    assert!(hint(&reused).contains("wrong"), "{}", reused.text);
    next_step(&clock);
    let set = complete(&app, &token, &code(secret, &clock)).await.data(200);
    for field in ["token", "refresh_token", "expires_at", "expires_in", "user", "token_type"] {
        assert!(set.get(field).is_some(), "{field}: {set}");
    }
    assert_eq!(set["user"]["email"], json!(user.email));
    app.me(Auth::Bearer(set["token"].as_str().unwrap())).await.data(200);
    // The challenge completes once.
    next_step(&clock);
    let again = complete(&app, &token, &code(secret, &clock)).await;
    assert!(hint(&again).contains("already used"), "{}", again.text);

    let audit = app.get("/api/v1/audit", auth).await.data(200);
    let actions: Vec<&str> =
        audit["events"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for action in ["mfa_enrollment_started", "mfa_enabled", "mfa_challenge_failed"] {
        assert!(actions.contains(&action), "{action}: {actions:?}");
    }
    let login = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == json!("login_succeeded"))
        .unwrap();
    assert_eq!(login["details"]["amr"], json!(["pwd", "otp"]), "{login}");
}

async fn a_code_works_once_on_every_node(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, _) = enrolled(&app, &clock, "once").await;
    let now = code(&secret, &clock);
    let first = challenge(&app, &user).await;
    complete(&app, &first, &now).await.data(200);
    let second = challenge(&app, &user).await;
    complete(&app, &second, &now).await.unauthorized();
    {
        let sibling = app.spawn_sibling(|s| s.clock = clock.clone()).await;
        let there = challenge(&sibling, &user).await;
        complete(&sibling, &there, &now).await.unauthorized();
        // A challenge made on one node completes on the other, with the next step's code.
        next_step(&clock);
        complete(&sibling, &second, &code(&secret, &clock)).await.data(200);
    }
}

async fn concurrent_uses_of_one_code_on_two_nodes_one_wins(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, _) = enrolled(&app, &clock, "race").await;
    let sibling = app.spawn_sibling(|s| s.clock = clock.clone()).await;
    for _ in 0..3 {
        let here = challenge(&app, &user).await;
        let there = challenge(&sibling, &user).await;
        let now = code(&secret, &clock);
        let (a, b) = tokio::join!(complete(&app, &here, &now), complete(&sibling, &there, &now));
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 401], "{} / {}", a.text, b.text);
        next_step(&clock);
    }
    drop(sibling);
}

async fn a_recovery_code_works_once(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, _, codes) = enrolled(&app, &clock, "recovery").await;
    let token = challenge(&app, &user).await;
    // Typed in upper case with spaces: the same code.
    let typed = codes[0].to_uppercase().replace('-', " ");
    let set = complete_with_recovery(&app, &token, &typed).await.data(200);
    assert_eq!(amr(set["token"].as_str().unwrap()), json!(["pwd", "otp"]));
    let token = challenge(&app, &user).await;
    let used = complete_with_recovery(&app, &token, &codes[0]).await;
    assert!(hint(&used).contains("wrong"), "{}", used.text);
    complete_with_recovery(&app, &token, &codes[1]).await.data(200);
    let status = app.get(STATUS, Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(status["recovery_codes_left"], json!(8));
}

async fn five_wrong_codes_kill_the_challenge(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, _) = enrolled(&app, &clock, "five").await;
    let token = challenge(&app, &user).await;
    for _ in 0..4 {
        let refused = complete(&app, &token, &wrong_code(&secret, &clock)).await;
        assert!(!hint(&refused).contains("dead"), "{}", refused.text);
    }
    let fifth = complete(&app, &token, &wrong_code(&secret, &clock)).await;
    assert!(hint(&fifth).contains("dead after 5 failed attempts"), "{}", fifth.text);
    let right = complete(&app, &token, &code(&secret, &clock)).await;
    assert!(hint(&right).contains("dead"), "{}", right.text);
    // A new login gets a new challenge, which the right code completes.
    let token = challenge(&app, &user).await;
    complete(&app, &token, &code(&secret, &clock)).await.data(200);
}

async fn ten_wrong_codes_in_an_hour_stop_new_challenges(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, _) = enrolled(&app, &clock, "guesser").await;
    // Whoever knows the password gets five codes per challenge, and ten per hour in all.
    for _ in 0..2 {
        let token = challenge(&app, &user).await;
        for _ in 0..5 {
            complete(&app, &token, &wrong_code(&secret, &clock)).await.unauthorized();
        }
    }
    let refused = app.login_raw(&user.email, &user.password).await;
    let error = refused.error(429, "rate_limit_exceeded");
    assert_eq!(error["details"]["limit"], json!(10), "{error}");
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((3000..=3600).contains(&retry), "{retry}");
    // Also on another node: the count is in the database.
    let other = app.spawn_sibling(|s| s.clock = clock.clone()).await;
    other.login_raw(&user.email, &user.password).await.error(429, "rate_limit_exceeded");
    drop(other);
    // Once the failures leave the window, a right password gets a challenge again.
    clock.advance(chrono::Duration::minutes(61));
    let token = challenge(&app, &user).await;
    complete(&app, &token, &code(&secret, &clock)).await.data(200);
}

async fn an_expired_challenge_is_refused(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, codes) = enrolled(&app, &clock, "expired").await;
    let token = challenge(&app, &user).await;
    clock.advance(chrono::Duration::seconds(301));
    let late = complete(&app, &token, &code(&secret, &clock)).await;
    assert!(hint(&late).contains("expired"), "{}", late.text);
    let late = complete_with_recovery(&app, &token, &codes[0]).await;
    assert!(hint(&late).contains("expired"), "{}", late.text);
    // Neither the step nor the recovery code was used up.
    let token = challenge(&app, &user).await;
    complete(&app, &token, &code(&secret, &clock)).await.data(200);
    let status = app.get(STATUS, Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(status["recovery_codes_left"], json!(10));
}

async fn disable_needs_the_password_and_a_code(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, codes) = enrolled(&app, &clock, "disable").await;
    let auth = Auth::Bearer(&user.token);
    let body = |password: &str, code: &str| json!({"password": password, "code": code});
    app.post(DISABLE, auth, &body("wrong password!", &code(&secret, &clock))).await.unauthorized();
    app.post(DISABLE, auth, &body(&user.password, &wrong_code(&secret, &clock)))
        .await
        .unauthorized();
    let key = app.key(&user.token, &["read", "write"]).await;
    app.post(DISABLE, Auth::Raw(&key), &body(&user.password, &code(&secret, &clock)))
        .await
        .forbidden("access_token", "api_key");
    let off = app
        .post(DISABLE, auth, &json!({"password": user.password, "recovery_code": codes[3]}))
        .await
        .data(200);
    assert_eq!(off, json!({"enabled": false}));
    let status = app.get(STATUS, Auth::Raw(&key)).await.data(200);
    assert_eq!(
        (status["enabled"].clone(), status["recovery_codes_left"].clone()),
        (json!(false), json!(0))
    );
    app.post(DISABLE, auth, &body(&user.password, &code(&secret, &clock))).await.invalid("mfa");
    // Tokens at once again.
    app.login(&user.email, &user.password).await["token"].as_str().unwrap();
    // Enrolling again gives a new secret.
    let (again, _) = enable(&app, &clock, &user).await;
    assert_ne!(again, secret);
    challenge(&app, &user).await;
}

async fn regenerated_recovery_codes_replace_the_old_ones(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, old) = enrolled(&app, &clock, "regen").await;
    let auth = Auth::Bearer(&user.token);
    let body = json!({"password": user.password, "code": code(&secret, &clock)});
    let fresh = app.post(RECOVERY_CODES, auth, &body).await.data(200);
    let fresh: Vec<String> = fresh["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(fresh.len(), 10);
    assert!(fresh.iter().all(|c| !old.contains(c)));
    // The same code again: its step is used.
    app.post(RECOVERY_CODES, auth, &body).await.unauthorized();
    let token = challenge(&app, &user).await;
    complete_with_recovery(&app, &token, &old[0]).await.unauthorized();
    complete_with_recovery(&app, &token, &fresh[0]).await.data(200);
}

/// Makes the account with `email` an admin, as the operator command does.
async fn make_admin(app: &TestApp, email: &str) {
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, email, Role::Admin).await.unwrap();
}

async fn admins_are_refused_until_they_log_in_with_the_second_factor(backend: Backend) {
    let clock = Clock::adjustable();
    let app = spawn_app_with(backend, |s| {
        s.clock = clock.clone();
        s.auth.require_mfa_for_admins = true;
    })
    .await;
    let admin = app.new_user("admin").await;
    make_admin(&app, &admin.email).await;
    let key = app.key(&admin.token, &["admin"]).await;
    let users = "/api/v1/admin/users";
    let refused = app.get(users, Auth::Bearer(&admin.token)).await.forbidden("mfa", "none");
    assert!(refused["details"]["hint"].as_str().unwrap().contains("enroll"), "{refused}");
    app.get(users, Auth::Raw(&key)).await.forbidden("mfa", "none");
    // A plain user still gets the role's refusal.
    let user = app.new_user("plain").await;
    app.get(users, Auth::Bearer(&user.token)).await.forbidden("admin", "user");

    let (secret, _) = enable(&app, &clock, &admin).await;
    // The factor is on, but this session was made with the password alone.
    let refused = app.get(users, Auth::Bearer(&admin.token)).await.forbidden("mfa", "pwd");
    assert!(refused["details"]["hint"].as_str().unwrap().contains("log in again"), "{refused}");
    // The owner's factor is on: the admin key works.
    app.get(users, Auth::Raw(&key)).await.data(200);
    let token = challenge(&app, &admin).await;
    let set = complete(&app, &token, &code(&secret, &clock)).await.data(200);
    app.get(users, Auth::Bearer(set["token"].as_str().unwrap())).await.data(200);
    // Refreshed, the session keeps its second factor.
    let refreshed = app.refresh_raw(set["refresh_token"].as_str().unwrap()).await.data(200);
    app.get(users, Auth::Bearer(refreshed["token"].as_str().unwrap())).await.data(200);
}

async fn amr_is_in_the_access_token_and_kept_across_refresh(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let plain = app.new_user("plain").await;
    assert_eq!(amr(&plain.token), json!(["pwd"]));
    let logged_in = app.login(&plain.email, &plain.password).await;
    assert_eq!(amr(logged_in["token"].as_str().unwrap()), json!(["pwd"]));
    let refreshed = app.refresh_raw(&plain.refresh_token).await.data(200);
    assert_eq!(amr(refreshed["token"].as_str().unwrap()), json!(["pwd"]));

    let (user, secret, _) = enrolled(&app, &clock, "amr").await;
    let token = challenge(&app, &user).await;
    let set = complete(&app, &token, &code(&secret, &clock)).await.data(200);
    assert_eq!(amr(set["token"].as_str().unwrap()), json!(["pwd", "otp"]));
    let mut refresh = set["refresh_token"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let next = app.refresh_raw(&refresh).await.data(200);
        assert_eq!(amr(next["token"].as_str().unwrap()), json!(["pwd", "otp"]));
        refresh = next["refresh_token"].as_str().unwrap().to_owned();
    }
    // A token issued before `amr` existed (no claim) still verifies.
    let mut claims = jwt_part(&plain.token, 1);
    claims.as_object_mut().unwrap().remove("amr");
    let header = jwt_part(&plain.token, 0);
    app.me(Auth::Bearer(&common::sign_jwt(&header, &claims))).await.data(200);
}

async fn bad_input_is_a_400_naming_the_field(backend: Backend) {
    let (app, clock) = app_with_clock(backend).await;
    let (user, secret, _) = enrolled(&app, &clock, "bad").await;
    let token = challenge(&app, &user).await;
    let app_ref = &app;
    let post = |body: Value| async move { app_ref.post(LOGIN_MFA, Auth::None, &body).await };
    post(json!({"mfa_token": token})).await.invalid("code");
    post(json!({"mfa_token": token, "code": "123456", "recovery_code": "x"}))
        .await
        .invalid("recovery_code");
    post(json!({"mfa_token": token, "code": "12345"})).await.invalid("code");
    post(json!({"mfa_token": token, "code": 123456})).await.invalid("code");
    post(json!({"mfa_token": token, "recovery_code": "not-a-code"})).await.invalid("recovery_code");
    post(json!({"code": "123456"})).await.invalid("mfa_token");
    post(json!({"mfa_token": "aigwm_\u{0}", "code": "123456"})).await.invalid("mfa_token");
    post(json!({"mfa_token": "nonsense", "code": "123456"})).await.unauthorized();
    let raw = app.post_raw(LOGIN_MFA, Auth::None, "{").await;
    raw.error(400, "invalid_request");
    let auth = Auth::Bearer(&user.token);
    app.post(CONFIRM, auth, &json!({})).await.invalid("code");
    app.post(CONFIRM, auth, &json!({"code": "abcdef"})).await.invalid("code");
    app.post(DISABLE, auth, &json!({"code": "123456"})).await.invalid("password");
    app.post(DISABLE, auth, &json!({"password": user.password})).await.invalid("code");
    app.post(RECOVERY_CODES, auth, &json!({"password": "x".repeat(300), "code": "123456"}))
        .await
        .invalid("password");
    // None of them used up an attempt: the challenge still completes.
    complete(&app, &token, &code(&secret, &clock)).await.data(200);
}
