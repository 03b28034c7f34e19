//! The browser console over HTTP, as a browser without a script engine would use it: cookies,
//! redirects, forms and their CSRF tokens, the security headers, escaping, paging, and the
//! setting that turns it off. (The real browser runs in `scripts/browser_test.sh`.)

use crate::common;
use common::browser::{Browser, Page};
use common::{spawn_app, spawn_app_with, test_settings, Auth, Backend, PASSWORD};
use serde_json::json;

/// The CSP of every page: nothing inline, nothing from elsewhere, never framed.
fn assert_strict_policy(page: &Page) {
    let csp = page.header("content-security-policy");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(page.header("x-frame-options"), "DENY");
    assert_eq!(page.header("cache-control"), "no-store");
    assert_eq!(page.header("referrer-policy"), "same-origin");
}

async fn signs_in_with_cookies_no_script_can_read(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("console").await;
    let mut browser = Browser::new(&app);

    let home = browser.get("/").await;
    assert_eq!((home.status, home.location.as_deref()), (303, Some("/login")));
    let keys = browser.get("/keys").await;
    assert_eq!((keys.status, keys.location.as_deref()), (303, Some("/login?next=%2Fkeys")));
    // HEAD works where GET does; browsers' icon request gets an empty answer, not a 404.
    let head = browser.send(browser.client.head(app.url("/login"))).await;
    assert_eq!(head.status, 200);
    assert_eq!(browser.get("/favicon.ico").await.status, 204);
    // Every page before a session renders, with the strict policy.
    for path in ["/login", "/register", "/password-reset", "/login?next=%2Fusage"] {
        let form = browser.get(path).await;
        assert_eq!(form.status, 200, "{path}: {}", form.text);
        assert_strict_policy(&form);
    }

    let wrong = browser.log_in(&user.email, "not the password at all").await;
    assert_eq!(wrong.status, 401, "{}", wrong.text);
    assert!(wrong.text.contains("invalid e-mail or password"), "{}", wrong.text);
    assert!(wrong.set_cookies.is_empty());

    let done = browser.log_in(&user.email, &user.password).await;
    assert_eq!((done.status, done.location.as_deref()), (303, Some("/keys")), "{}", done.text);
    for name in ["aigw_access", "aigw_refresh"] {
        let cookie = done.cookie(name).unwrap_or_else(|| panic!("{name}: {:?}", done.set_cookies));
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
        // Development serves plain HTTP on localhost: no `Secure` there (production sets it).
        assert!(!cookie.contains("Secure"), "{cookie}");
    }
    let keys = browser.get("/keys").await;
    assert_eq!(keys.status, 200, "{}", keys.text);
    assert_strict_policy(&keys);
    assert!(keys.text.contains(&user.email));

    // The console's session is an ordinary one: listed by the API, ended by logout.
    let sessions = app.get("/api/v1/auth/sessions", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 2, "{sessions}");
    let csrf = keys.csrf();
    let out = browser.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!((out.status, out.location.as_deref()), (303, Some("/login")));
    assert!(browser.jar.is_empty(), "{:?}", browser.jar);
    let sessions = app.get("/api/v1/auth/sessions", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1, "{sessions}");
}

async fn forms_without_the_sessions_csrf_token_change_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("csrf").await;
    let other = app.new_user("csrf-other").await;
    let mut browser = Browser::new(&app);
    browser.log_in(&user.email, &user.password).await;
    let mut other_browser = Browser::new(&app);
    other_browser.log_in(&other.email, &other.password).await;
    let others_token = other_browser.get("/keys/new").await.csrf();
    let own_token = browser.get("/keys/new").await.csrf();
    assert_ne!(own_token, others_token);

    let fields = |csrf: &'static str| {
        vec![("csrf", csrf), ("name", "sneaky"), ("permissions", "ai_gateway")]
    };
    let missing = browser.post("/keys/new", &fields("")).await;
    assert_eq!(missing.status, 403, "{}", missing.text);
    let leaked: &'static str = Box::leak(others_token.into_boxed_str());
    let foreign = browser.post("/keys/new", &fields(leaked)).await;
    assert_eq!(foreign.status, 403, "{}", foreign.text);
    // Another site's page: refused by its Origin even with the right token.
    let own: &'static str = Box::leak(own_token.into_boxed_str());
    let cross_site = browser
        .client
        .post(app.url("/keys/new"))
        .form(&fields(own))
        .header("origin", "https://evil.example");
    assert_eq!(browser.send(cross_site).await.status, 403);
    for (name, value) in
        [("origin", "null"), ("sec-fetch-site", "cross-site"), ("sec-fetch-site", "same-site")]
    {
        let sent = browser.client.post(app.url("/keys/new")).form(&fields(own)).header(name, value);
        assert_eq!(browser.send(sent).await.status, 403, "{name}: {value}");
    }
    let listed = app.get("/api/v1/auth/api-keys", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(listed["api_keys"], json!([]), "{listed}");

    // The right token from this origin creates the key and shows its secret once.
    let same_site = browser
        .client
        .post(app.url("/keys/new"))
        .form(&fields(own))
        .header("origin", app.address.clone())
        .header("sec-fetch-site", "same-origin");
    let created = browser.send(same_site).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let start = created.text.find("id=\"secret\"").expect("the secret on the page");
    let after = &created.text[start..];
    let secret = after[after.find('>').unwrap() + 1..].split('<').next().unwrap().to_owned();
    assert!(secret.starts_with("aigw_"), "{secret}");
    let chat = app
        .post(
            "/api/v1/ai/chat/completions",
            Auth::Bearer(&secret),
            &json!({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(chat.status, 200, "{}", chat.text);
}

async fn user_text_is_shown_as_text(backend: Backend) {
    let app = spawn_app(backend).await;
    let xss = "<img src=x onerror=alert(1)>";
    let email = common::unique_email("xss");
    let mut browser = Browser::new(&app);
    let registered = browser
        .post("/register", &[("email", &email), ("password", PASSWORD), ("name", xss)])
        .await;
    assert_eq!(
        (registered.status, registered.location.as_deref()),
        (303, Some("/keys")),
        "{}",
        registered.text
    );
    let csrf = browser.get("/keys/new").await.csrf();
    let created =
        browser.post("/keys/new", &[("csrf", &csrf), ("name", xss), ("permissions", "read")]).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let keys = browser.get("/keys").await;
    assert!(keys.text.contains("&lt;img src=x onerror=alert(1)&gt;"), "{}", keys.text);
    assert!(!keys.text.contains(xss), "{}", keys.text);
    // A bad field is named, and the form comes back with what was typed.
    let refused = browser.post("/keys/new", &[("csrf", &csrf), ("name", "no permissions")]).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("permissions"), "{}", refused.text);
    assert!(refused.text.contains("value=\"no permissions\""), "{}", refused.text);
}

async fn an_ended_session_sends_the_browser_to_the_login_page(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("disabled").await;
    let admin = app.new_user("admin").await;
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &admin.email, aigw_domain::Role::Admin).await.unwrap();
    let mut browser = Browser::new(&app);
    browser.log_in(&user.email, &user.password).await;
    assert_eq!(browser.get("/keys").await.status, 200);

    // Without the access cookie the refresh cookie renews the session (both cookies rotate).
    let refresh = browser.jar.get("aigw_refresh").cloned().unwrap();
    browser.jar.remove("aigw_access");
    let renewed = browser.get("/keys").await;
    assert_eq!(renewed.status, 200, "{}", renewed.text);
    assert!(renewed.cookie("aigw_access").is_some() && renewed.cookie("aigw_refresh").is_some());
    assert_ne!(browser.jar.get("aigw_refresh"), Some(&refresh));

    let admin_token =
        app.login(&admin.email, &admin.password).await["token"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/admin/users/{}", user.id);
    let patched = app
        .request(reqwest::Method::PATCH, &path, Auth::Bearer(&admin_token))
        .json(&json!({"disabled": true}));
    app.send(patched).await.data(200);
    let next = browser.get("/keys").await;
    assert_eq!((next.status, next.location.as_deref()), (303, Some("/login?next=%2Fkeys")));
    assert!(browser.jar.is_empty(), "{:?}", browser.jar);
}

async fn key_pages_are_cut_by_cursor(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("paged").await;
    for i in 0..53 {
        let body = json!({"name": format!("key {i:02}"), "permissions": ["read"]});
        app.post("/api/v1/auth/api-keys", Auth::Bearer(&user.token), &body).await.data(201);
    }
    let mut browser = Browser::new(&app);
    browser.log_in(&user.email, &user.password).await;
    let first = browser.get("/keys").await;
    assert_eq!(first.text.matches("data-key-id=").count(), 50);
    assert!(first.text.contains(">key 52<") && !first.text.contains(">key 02<"));
    let start = first.text.find("rel=\"next\" href=\"").expect("a next link") + 17;
    let next = first.text[start..].split('"').next().unwrap().to_owned();
    let second = browser.get(&next.replace("&#x2f;", "/").replace("&amp;", "&")).await;
    assert_eq!(second.text.matches("data-key-id=").count(), 3, "{}", second.text);
    assert!(!second.text.contains("rel=\"next\""));
    let bad = browser.get("/keys?cursor=not-a-cursor").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad.text.contains("cursor"), "{}", bad.text);
}

async fn the_console_can_be_turned_off(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.console.enabled = false).await;
    for path in ["/", "/login", "/keys", "/console/assets/console.css"] {
        let reply = app.get(path, Auth::None).await;
        reply.error(404, "not_found");
    }
    assert_eq!(app.get("/healthz", Auth::None).await.status, 200);
}

/// The sessions of the user of `token`, as the API lists them.
async fn sessions(app: &common::TestApp, token: &str) -> usize {
    let listed = app.get("/api/v1/auth/sessions", Auth::Bearer(token)).await.data(200);
    listed["sessions"].as_array().unwrap().len()
}

/// The hidden `next` field of the login page, unescaped.
fn next_field(page: &str) -> String {
    let field = "name=\"next\" value=\"";
    let start = page.find(field).expect("a next field") + field.len();
    let escaped = page[start..].split('"').next().unwrap();
    [("&#x2f;", "/"), ("&quot;", "\""), ("&#x27;", "'"), ("&lt;", "<"), ("&gt;", ">")]
        .iter()
        .fold(escaped.to_owned(), |text, (entity, c)| text.replace(entity, c))
        .replace("&amp;", "&")
}

/// `next` values a browser would read as a way to another site (a tab, a newline or a
/// carriage return dropped, a backslash read as a slash, encodings, look-alikes of `/`) send
/// the browser to the default page after the login, with the session's cookies: each login
/// makes exactly one session, and the browser has it. A path of this origin is kept.
async fn a_next_leading_off_the_origin_goes_to_the_default_page(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("next").await;
    let before = sessions(&app, &user.token).await;
    // The reproductions, as sent on the wire: `GET /login?next=/%09/evil.example`, ….
    for query in ["/%09/evil.example", "/%0A/x", "/%0D/x", "/%5C/evil.example", "//evil.example"] {
        let form = Browser::new(&app).get(&format!("/login?next={query}")).await;
        assert_eq!(form.status, 200, "{query}: {}", form.text);
        assert_eq!(next_field(&form.text), "/keys", "{query}");
    }
    let hostile = [
        "/\t/evil.example",
        "/\n/x",
        "/\r/x",
        "/\r\n/x",
        "/\\evil.example",
        "/ /evil.example",
        "/%2F%2Fevil.example",
        "/%5Cevil.example",
        "/%09/evil.example",
        "https://evil.example/",
        "/\u{2215}evil.example",
        "/\u{ff0f}evil.example",
    ];
    for (logins, next) in hostile.iter().enumerate() {
        let mut browser = Browser::new(&app);
        let done = browser
            .post("/login", &[("email", &user.email), ("password", &user.password), ("next", next)])
            .await;
        assert_eq!((done.status, done.location.as_deref()), (303, Some("/keys")), "{next:?}");
        assert!(done.cookie("aigw_access").is_some(), "{next:?}: {:?}", done.set_cookies);
        assert_eq!(browser.get("/keys").await.status, 200, "{next:?}");
        assert_eq!(sessions(&app, &user.token).await, before + logins + 1, "{next:?}");
    }
    let mut browser = Browser::new(&app);
    let kept = browser
        .post("/login", &[("email", &user.email), ("password", &user.password), ("next", "/usage")])
        .await;
    assert_eq!((kept.status, kept.location.as_deref()), (303, Some("/usage")), "{}", kept.text);
}

/// Whatever `next` the login page is given, the `next` its form carries on, resolved by the
/// `url` crate as a browser resolves a `Location` on this page, stays on this origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_next_the_login_page_keeps_stays_on_the_origin() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let app = spawn_app(Backend::Sqlite).await;
    let piece = prop_oneof![
        (0u32..=0x9f).prop_filter_map("a character", char::from_u32).prop_map(String::from),
        proptest::sample::select(vec![
            " ",
            "\u{a0}",
            "\u{2028}",
            "\u{3000}",
            "\u{200b}",
            "\u{feff}",
            "\u{2215}",
            "\u{ff0f}",
            "\u{29f8}",
            "\u{ff3c}",
            "\u{2216}",
            "%2F",
            "%5C",
            "%09",
            "%0A",
            "%0D",
            "%00",
            "%E2%88%95",
            "%EF%BC%8F",
            "%252F",
            "/",
            "//",
            "\\",
            "@",
            ":",
            "?",
            "#",
            "..",
            "evil.example",
            "https://",
        ])
        .prop_map(str::to_owned),
        "[a-z0-9._~-]{1,6}",
    ];
    let candidate = (
        proptest::sample::select(vec!["/", "//", "/\\", "", "http://"]),
        proptest::collection::vec(piece, 0..6),
    )
        .prop_map(|(start, pieces)| format!("{start}{}", pieces.concat()));
    let origin = url::Url::parse("http://aigw.test/login").unwrap();
    let handle = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(Config::with_cases(256));
    let outcome = runner.run(&candidate, |next| {
        let form = tokio::task::block_in_place(|| {
            handle.block_on(async {
                let sent = app.client.get(app.url("/login")).query(&[("next", next.as_str())]);
                sent.send().await.unwrap().text().await.unwrap()
            })
        });
        let kept = next_field(&form);
        prop_assert!(kept == "/keys" || kept == next, "{:?} became {:?}", next, kept);
        let landed = origin.join(&kept).unwrap();
        prop_assert_eq!(landed.origin(), origin.origin(), "{:?} leads to {}", next, landed);
        prop_assert!(landed.username().is_empty() && landed.password().is_none());
        prop_assert_eq!(&landed[url::Position::BeforePath..], kept.as_str());
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

backend_tests!(
    a_next_leading_off_the_origin_goes_to_the_default_page,
    signs_in_with_cookies_no_script_can_read,
    forms_without_the_sessions_csrf_token_change_nothing,
    user_text_is_shown_as_text,
    an_ended_session_sends_the_browser_to_the_login_page,
    key_pages_are_cut_by_cursor,
    the_console_can_be_turned_off,
);
