//! The account's second factor and e-mail change in the console, over HTTP as a browser
//! without a script engine uses them: enrollment with the QR code and the key, confirmation,
//! recovery codes shown once, new ones, turning it off; and an address change whose link
//! arrives at a real SMTP server (aiosmtpd). Time moves by an adjustable clock.

use crate::common;

use aigw_service::Clock;
use common::browser::{Browser, Page};
use common::smtp::SmtpServer;
use common::{spawn_app_with, unique_email, Auth, Backend, TestApp, PASSWORD};
use serde_json::json;
use totp_rs::{Algorithm, Secret, TOTP};

backend_tests!(
    the_second_factor_goes_on_and_off_in_the_console,
    an_email_change_from_the_console_sends_its_link,
);

/// The code of `secret` (base32) at the clock's time.
fn code(secret: &str, clock: &Clock) -> String {
    let bytes = Secret::Encoded(secret.to_owned()).to_bytes().unwrap();
    let totp = TOTP::new_unchecked(Algorithm::SHA1, 6, 1, 30, bytes, None, String::new());
    totp.generate(u64::try_from(clock.now().timestamp()).unwrap())
}

/// The key shown on the enrollment page, without the spaces that group it.
fn shown_secret(page: &Page) -> String {
    page.element_text("mfa-secret").split_whitespace().collect()
}

/// The recovery codes of a codes page.
fn shown_codes(page: &Page) -> Vec<String> {
    let list = page.element("ol", "recovery-codes");
    list.split("<code>").skip(1).map(|c| c.split('<').next().unwrap().to_owned()).collect()
}

/// Logs in through the API and completes the challenge with `recovery_code`: the status.
async fn log_in_with_recovery_code(app: &TestApp, email: &str, recovery_code: &str) -> u16 {
    let challenge = app.login(email, PASSWORD).await;
    assert_eq!(challenge["mfa_required"], json!(true), "{challenge}");
    let body = json!({"mfa_token": challenge["mfa_token"], "recovery_code": recovery_code});
    app.post("/api/v1/auth/login/mfa", Auth::None, &body).await.status
}

async fn the_second_factor_goes_on_and_off_in_the_console(backend: Backend) {
    let clock = Clock::adjustable();
    let app = spawn_app_with(backend, |s| s.clock = clock.clone()).await;
    let user = app.new_user("console-mfa").await;
    let mut browser = Browser::signed_in(&app, &user).await;
    let account = browser.get("/account").await;
    assert!(account.element_text("mfa-link").contains("Turn on"), "{}", account.text);
    let page = browser.get("/account/mfa").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("id=\"mfa-enroll-form\""), "{}", page.text);
    assert_eq!(browser.get("/account/mfa/qr.svg").await.status, 404, "no enrollment yet");
    let csrf = page.csrf();

    // Start: the page shows the QR code (an image from this origin) and the key until a code
    // confirms it, across reloads.
    let started = browser.post("/account/mfa/enroll", &[("csrf", &csrf)]).await;
    assert_eq!((started.status, started.location.as_deref()), (303, Some("/account/mfa")));
    let page = browser.get("/account/mfa").await;
    assert!(page.text.contains("src=\"/account/mfa/qr.svg\""), "{}", page.text);
    let secret = shown_secret(&page);
    assert_eq!(secret.len(), 32, "20 bytes in base32: {secret}");
    assert_eq!(shown_secret(&browser.get("/account/mfa").await), secret, "kept on reload");
    let qr = browser.get("/account/mfa/qr.svg").await;
    assert_eq!(qr.status, 200, "{}", qr.text);
    assert_eq!(qr.header("content-type"), "image/svg+xml");
    assert_eq!(qr.header("cache-control"), "no-store");
    assert!(qr.text.contains("<svg") && qr.text.contains("<path"), "{}", qr.text);

    // A wrong code: the field marked, the same enrollment still waiting.
    let right = code(&secret, &clock);
    let wrong = format!("{:06}", (right.parse::<u32>().unwrap() + 500_000) % 1_000_000);
    let refused = browser.post("/account/mfa/confirm", &[("csrf", &csrf), ("code", &wrong)]).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.section("<input id=\"code\"", ">").contains("aria-invalid=\"true\""));
    assert_eq!(shown_secret(&refused), secret);
    let status = app.get("/api/v1/auth/mfa", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!((status["enabled"].clone(), status["pending"].clone()), (json!(false), json!(true)));

    // The right one: on, and ten recovery codes shown once.
    let on = browser.post("/account/mfa/confirm", &[("csrf", &csrf), ("code", &right)]).await;
    assert_eq!(on.status, 200, "{}", on.text);
    assert!(on.text.contains("id=\"mfa-enabled\""), "{}", on.text);
    let codes = shown_codes(&on);
    assert_eq!(codes.len(), 10, "{}", on.text);
    let status = app.get("/api/v1/auth/mfa", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(status["enabled"], json!(true), "{status}");
    let page = browser.get("/account/mfa").await;
    assert_eq!(page.element_text("recovery-left").trim(), "10 recovery codes left.");
    assert!(!page.text.contains(&secret), "the key is never shown again");
    assert_eq!(browser.get("/account/mfa/qr.svg").await.status, 404);
    assert_eq!(log_in_with_recovery_code(&app, &user.email, &codes[0]).await, 200);
    clock.advance(chrono::Duration::seconds(30));

    // New codes: a wrong password is a counted 401 and changes nothing; then the old codes
    // stop working.
    let now = code(&secret, &clock);
    let fields =
        [("csrf", csrf.as_str()), ("password", "not the password"), ("code", now.as_str())];
    let wrong_password = browser.post("/account/mfa/recovery-codes", &fields).await;
    assert_eq!(wrong_password.status, 401, "{}", wrong_password.text);
    assert!(wrong_password.text.contains("id=\"error\""), "{}", wrong_password.text);
    let fields = [("csrf", csrf.as_str()), ("password", PASSWORD), ("code", now.as_str())];
    let renewed = browser.post("/account/mfa/recovery-codes", &fields).await;
    assert_eq!(renewed.status, 200, "{}", renewed.text);
    let new_codes = shown_codes(&renewed);
    assert_eq!(new_codes.len(), 10);
    assert!(!renewed.text.contains("id=\"mfa-enabled\""), "not the first time");
    assert_eq!(log_in_with_recovery_code(&app, &user.email, &codes[1]).await, 401);

    // Off, with a recovery code.
    let fields = [
        ("csrf", csrf.as_str()),
        ("password", PASSWORD),
        ("code", new_codes[0].as_str()),
        ("recovery", "1"),
    ];
    let off = browser.post("/account/mfa/disable", &fields).await;
    assert_eq!((off.status, off.location.as_deref()), (303, Some("/account/mfa")), "{}", off.text);
    let status = app.get("/api/v1/auth/mfa", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(status["enabled"], json!(false), "{status}");
    assert!(app.login(&user.email, PASSWORD).await["token"].is_string());
    let page = browser.get("/account/mfa").await;
    assert!(page.text.contains("id=\"mfa-enroll-form\""), "{}", page.text);
}

async fn an_email_change_from_the_console_sends_its_link(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let app = spawn_app_with(backend, |s| {
        smtp.configure(s);
        s.auth.email_verification = aigw_service::config::EmailVerification::Off;
    })
    .await;
    let user = app.new_user("console-mover").await;
    let other = app.new_user("console-taken").await;
    let mut browser = Browser::signed_in(&app, &user).await;
    let page = browser.get("/account").await;
    assert!(page.text.contains("id=\"email-form\""), "{}", page.text);
    let csrf = page.csrf();
    let new_email = unique_email("console-moved");

    // A wrong password: 401, the password field marked, the typed address kept.
    let fields = [
        ("csrf", csrf.as_str()),
        ("email", new_email.as_str()),
        ("password", "not the password at all"),
    ];
    let wrong = browser.post("/account/email", &fields).await;
    assert_eq!(wrong.status, 401, "{}", wrong.text);
    assert!(wrong.section("<input id=\"email_password\"", ">").contains("aria-invalid=\"true\""));
    assert!(wrong.section("<input id=\"new_email\"", ">").contains(&new_email));
    // An address already registered: 400 naming it.
    let taken = [("csrf", csrf.as_str()), ("email", other.email.as_str()), ("password", PASSWORD)];
    let taken = browser.post("/account/email", &taken).await;
    assert_eq!(taken.status, 400, "{}", taken.text);
    assert!(taken.section("<input id=\"new_email\"", ">").contains("aria-invalid=\"true\""));

    // The right password: the link goes to the new address; nothing moves until it is opened.
    let fields = [("csrf", csrf.as_str()), ("email", new_email.as_str()), ("password", PASSWORD)];
    let asked = browser.post("/account/email", &fields).await;
    assert_eq!(
        (asked.status, asked.location.as_deref()),
        (303, Some("/account")),
        "{}",
        asked.text
    );
    let page = browser.get("/account").await;
    assert!(page.element_text("flash").contains(&new_email), "{}", page.text);
    assert_eq!(page.element_text("account-email"), user.email);
    let mail = smtp.wait_for(&new_email, "Confirm your new e-mail address", 1).await;
    let token = mail.token("aigwe_");
    app.post("/api/v1/auth/email/verify", Auth::None, &json!({"token": token})).await.data(200);
    assert_eq!(browser.get("/account").await.element_text("account-email"), new_email);
}
