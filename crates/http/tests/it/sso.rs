//! Single sign-on against a real OpenID Connect provider on loopback (oauth2-mock-server,
//! `tests/oidc/provider.mjs`): the console's sign-in (authorization code, PKCE, state and
//! nonce) makes the account on the first sign-in and signs the same subject in again; a
//! domain that is not allowed, an existing account under the linking rules, and every forged
//! or replayed answer are refused with a 401 saying why, and no session starts.

use crate::common;

use aigw_service::sso::SsoProviderConfig;
use common::browser::{Browser, Page};
use common::oidc::OidcProvider;
use common::{spawn_app_with, unique_email, Auth, Backend, TestApp, PASSWORD};
use serde_json::{json, Value};

backend_tests!(
    the_first_sign_in_makes_the_account_and_the_next_finds_it,
    a_domain_that_is_not_allowed_is_refused,
    an_existing_account_is_linked_only_by_the_rules,
    forged_and_replayed_answers_are_refused,
    sso_only_domains_lose_password_login,
    group_rules_grant_and_remove_team_memberships,
    admin_groups_make_a_platform_admin_and_take_back_only_that,
);

/// The provider's id in the tests' configuration.
const PROVIDER: &str = "corp";

/// [`PROVIDER`]'s configuration for `provider`: domain `example.com` allowed, no linking.
fn provider_config(provider: &OidcProvider) -> SsoProviderConfig {
    SsoProviderConfig {
        id: PROVIDER.to_owned(),
        name: "Corp".to_owned(),
        issuer: provider.issuer.clone(),
        client_id: "aigw-test".to_owned(),
        allowed_domains: vec!["example.com".to_owned()],
        ..SsoProviderConfig::default()
    }
}

/// Points `settings` at `config` (and a public URL for its callback).
fn with_provider(settings: &mut aigw_http::settings::Settings, config: SsoProviderConfig) {
    settings.server.public_url = Some("https://gw.example.test".to_owned());
    settings.sso.providers = vec![config];
}

/// An app with `provider` configured as [`PROVIDER`], `tweak` applied to its configuration.
async fn app_with(
    backend: Backend,
    provider: &OidcProvider,
    tweak: impl FnOnce(&mut SsoProviderConfig),
) -> TestApp {
    let mut config = provider_config(provider);
    tweak(&mut config);
    spawn_app_with(backend, |s| with_provider(s, config)).await
}

/// The callback URL the provider sends the browser to, after `browser` started a sign-in as
/// `claims` (the provider answers its authorize request at once).
async fn provider_answer(browser: &mut Browser<'_>, claims: &Value) -> String {
    let hint = OidcProvider::hint(claims);
    let start = browser.get(&format!("/sso/{PROVIDER}/start?next=/usage&login_hint={hint}")).await;
    assert_eq!(start.status, 303, "{}", start.text);
    assert!(start.cookie("aigw_sso").is_some_and(|c| c.contains("SameSite=Lax")), "{start:?}");
    let authorize = start.location.clone().unwrap();
    assert!(authorize.contains("code_challenge_method=S256") && authorize.contains("nonce="));
    let client =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let answer = client.get(&authorize).send().await.unwrap();
    assert_eq!(answer.status(), 302, "{:?}", answer.text().await);
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    let prefix = format!("https://gw.example.test/sso/{PROVIDER}/callback?");
    assert!(location.starts_with(&prefix), "{location}");
    location.trim_start_matches("https://gw.example.test").to_owned()
}

/// Signs `claims` in through the console; the callback's page.
async fn sign_in(browser: &mut Browser<'_>, claims: &Value) -> Page {
    let callback = provider_answer(browser, claims).await;
    browser.get(&callback).await
}

/// The access token of a signed-in browser.
fn access_token(browser: &Browser<'_>) -> String {
    browser.jar.get("aigw_access").cloned().expect("a session cookie")
}

/// A refusal page: 401, saying `why`, no session cookie.
fn refused(page: &Page, why: &str) {
    assert_eq!(page.status, 401, "{}", page.text);
    assert!(page.text.replace("&#x27;", "'").contains(why), "{why}: {}", page.text);
    assert!(page.cookie("aigw_access").is_none(), "a refused sign-in set a session: {page:?}");
}

fn person(tag: &str) -> (String, Value) {
    let email = unique_email(tag);
    let claims = json!({
        "sub": format!("sub-{}", uuid::Uuid::now_v7().simple()), "email": email,
        "email_verified": true, "name": format!("{tag} person"),
    });
    (email, claims)
}

async fn the_first_sign_in_makes_the_account_and_the_next_finds_it(backend: Backend) {
    let Some(provider) = OidcProvider::start() else { return };
    let app = app_with(backend, &provider, |_| {}).await;
    let login = app.get("/login", Auth::None).await;
    assert!(
        login.text.contains(&format!("href=\"&#x2f;sso&#x2f;{PROVIDER}&#x2f;start")),
        "{}",
        login.text
    );
    let (email, claims) = person("sso-first");
    let mut browser = Browser::new(&app);
    let done = sign_in(&mut browser, &claims).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert!(done.text.contains("http-equiv=\"refresh\""), "{}", done.text);
    assert!(done.cookie("aigw_sso").is_some_and(|c| c.contains("Max-Age=0")), "{done:?}");
    let token = access_token(&browser);
    let me = app.me(Auth::Bearer(&token)).await.data(200);
    assert_eq!(me["user"]["email"], json!(email));
    assert_eq!(me["user"]["name"], json!("sso-first person"));
    common::assert_timestamp(&me["user"]["email_verified_at"]);
    assert_eq!(browser.get("/keys").await.status, 200, "the console session works");
    // The account has no password anybody knows.
    app.login_raw(&email, PASSWORD).await.unauthorized();

    // The same subject again: the same account, whatever address it asserts now.
    let mut again = Browser::new(&app);
    let mut moved = claims.clone();
    moved["email"] = json!(unique_email("sso-moved"));
    assert_eq!(sign_in(&mut again, &moved).await.status, 200);
    let me_again = app.me(Auth::Bearer(&access_token(&again))).await.data(200);
    assert_eq!(me_again["user"]["id"], me["user"]["id"]);
    let audit = app.get("/api/v1/audit", Auth::Bearer(&token)).await.data(200);
    let signed =
        audit["events"].as_array().unwrap().iter().filter(|e| e["action"] == "sso_sign_in");
    assert_eq!(signed.count(), 2, "{audit}");

    // Another subject with the first one's address: an account has it, linking is off.
    let (_, mut other) = person("sso-other");
    other["email"] = json!(email);
    refused(&sign_in(&mut Browser::new(&app), &other).await, "does not link accounts");
}

async fn a_domain_that_is_not_allowed_is_refused(backend: Backend) {
    let Some(provider) = OidcProvider::start() else { return };
    let app = app_with(backend, &provider, |_| {}).await;
    let (_, mut claims) = person("sso-outsider");
    let email = format!("outsider-{}@elsewhere.test", uuid::Uuid::now_v7().simple());
    claims["email"] = json!(email);
    refused(&sign_in(&mut Browser::new(&app), &claims).await, "domain may not sign in");
    let mut no_address = claims.clone();
    no_address.as_object_mut().unwrap().remove("email");
    refused(&sign_in(&mut Browser::new(&app), &no_address).await, "asserted no address");
    app.login_raw(&email, PASSWORD).await.unauthorized();
}

async fn an_existing_account_is_linked_only_by_the_rules(backend: Backend) {
    let Some(provider) = OidcProvider::start() else { return };
    let app = app_with(backend, &provider, |p| p.link_existing_accounts = true).await;
    let user = app.new_user("sso-linked").await;
    let claims = json!({"sub": "linked-subject", "email": user.email, "email_verified": false});
    refused(&sign_in(&mut Browser::new(&app), &claims).await, "does not assert that the address");
    let verified = json!({"sub": "linked-subject", "email": user.email, "email_verified": true});
    let mut browser = Browser::new(&app);
    assert_eq!(sign_in(&mut browser, &verified).await.status, 200);
    let me = app.me(Auth::Bearer(&access_token(&browser))).await.data(200);
    assert_eq!(me["user"]["id"], json!(user.id), "the existing account, linked");
    // The password still works, and the subject now finds the account without the rule.
    app.login(&user.email, PASSWORD).await;
    let renamed = json!({"sub": "linked-subject", "email": "whatever@example.com"});
    let mut later = Browser::new(&app);
    assert_eq!(sign_in(&mut later, &renamed).await.status, 200);
}

async fn forged_and_replayed_answers_are_refused(backend: Backend) {
    let Some(provider) = OidcProvider::start() else { return };
    let app = app_with(backend, &provider, |_| {}).await;

    // A replayed callback: the same answer and cookie twice.
    let (_, claims) = person("sso-replay");
    let mut browser = Browser::new(&app);
    let callback = provider_answer(&mut browser, &claims).await;
    let cookie = browser.jar.get("aigw_sso").cloned().unwrap();
    assert_eq!(browser.get(&callback).await.status, 200);
    let mut replay = Browser::new(&app);
    replay.jar.insert("aigw_sso".to_owned(), cookie.clone());
    refused(&replay.get(&callback).await, "came back already");

    // A forged state, and an answer with no sign-in started in this browser.
    let (_, claims) = person("sso-forged");
    let mut browser = Browser::new(&app);
    let callback = provider_answer(&mut browser, &claims).await;
    let forged = callback.replace("state=", "state=forged");
    refused(&browser.get(&forged).await, "state is not this browser's");
    refused(&Browser::new(&app).get(&callback).await, "started no sign-in");
    // Another browser's sign-in cookie does not fit this answer either.
    let mut other = Browser::new(&app);
    other.jar.insert("aigw_sso".to_owned(), cookie);
    refused(&other.get(&callback).await, "state is not this browser's");

    // ID tokens forged in one part each.
    for (tweak, why) in [
        ("issuer", "from another issuer"),
        ("audience", "for another client"),
        ("expired", "has expired"),
        ("nonce", "nonce is not this sign-in's"),
        ("kid", "signature does not verify"),
    ] {
        let (_, mut claims) = person("sso-tweak");
        claims["tweak"] = json!(tweak);
        refused(&sign_in(&mut Browser::new(&app), &claims).await, why);
    }

    // The provider's own refusal, and an answer without its code.
    let error = format!("/sso/{PROVIDER}/callback?error=access_denied&error_description=no");
    refused(&Browser::new(&app).get(&error).await, "access_denied");
    let bare = Browser::new(&app).get(&format!("/sso/{PROVIDER}/callback?state=x")).await;
    assert_eq!(bare.status, 400, "{}", bare.text);
    let unknown = Browser::new(&app).get("/sso/nobody/start").await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
}

/// With `auth.sso_only_domains`, a password login for an address of such a domain is refused
/// before any lookup (the same answer with or without an account), and so is a registration
/// with a password; single sign-on still signs the account in, and other domains are
/// unaffected.
async fn sso_only_domains_lose_password_login(backend: Backend) {
    let Some(provider) = OidcProvider::start() else { return };
    let plain = spawn_app_with(backend, |_| {}).await;
    let user = plain.new_user("sso-only").await;
    let other = format!("other-{}@elsewhere.test", uuid::Uuid::now_v7().simple());
    plain.register(&other, PASSWORD, None).await;
    // A node of the same database where example.com signs in only through the provider.
    let app = plain
        .spawn_sibling(|s| {
            let config =
                SsoProviderConfig { link_existing_accounts: true, ..provider_config(&provider) };
            with_provider(s, config);
            s.auth.sso_only_domains = vec!["Example.COM".to_owned()];
        })
        .await;
    let why = "sign in with single sign-on";
    let existing = app.login_raw(&user.email, PASSWORD).await;
    let unknown = app.login_raw(&unique_email("sso-nobody"), PASSWORD).await;
    for reply in [&existing, &unknown] {
        let error = reply.unauthorized();
        assert!(error["details"]["hint"].as_str().unwrap_or_default().contains(why), "{error}");
    }
    let body = json!({"email": unique_email("sso-new"), "password": PASSWORD});
    app.register_raw(&body).await.invalid("email");
    // The console's login form is refused the same way.
    let mut browser = Browser::new(&app);
    let refused_login = browser.log_in(&user.email, PASSWORD).await;
    assert_eq!(refused_login.status, 401, "{}", refused_login.text);
    // Single sign-on still reaches the account; another domain keeps its password.
    let claims = json!({"sub": "only-sub", "email": user.email, "email_verified": true});
    assert_eq!(sign_in(&mut browser, &claims).await.status, 200);
    let me = app.me(Auth::Bearer(&access_token(&browser))).await.data(200);
    assert_eq!(me["user"]["id"], json!(user.id));
    app.login(&other, PASSWORD).await;
}

/// The roles of `user_id` in team `team`, as its owner lists them (`None`: not a member).
async fn role_in(app: &TestApp, owner: &str, team: &str, user_id: &Value) -> Option<String> {
    let path = format!("/api/v1/teams/{team}/members?limit=200");
    let listed = app.get(&path, Auth::Bearer(owner)).await.data(200);
    listed["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["user_id"] == *user_id)
        .map(|m| m["role"].as_str().unwrap().to_owned())
}

/// Group rules grant team memberships on every sign-in: added, their role changed, removed
/// once no group grants them (seen by another node's key check at once), while a membership
/// made by hand stays whatever the groups say.
async fn group_rules_grant_and_remove_team_memberships(backend: Backend) {
    use aigw_service::sso_config::SsoTeamRule;
    let Some(provider) = OidcProvider::start() else { return };
    let plain = spawn_app_with(backend, |_| {}).await;
    let owner = plain.new_user("sso-team-owner").await;
    let research = crate::teams::team(&plain, &owner, json!({"name": "research"})).await;
    let ops = crate::teams::team(&plain, &owner, json!({"name": "ops"})).await;
    let rule = |group: &str, team: &str, role: &str| SsoTeamRule {
        group: group.to_owned(),
        team_id: team.to_owned(),
        role: role.to_owned(),
    };
    let rules = vec![
        rule("eng", &research, "member"),
        rule("leads", &research, "admin"),
        rule("ops", &ops, ""),
    ];
    let app = plain
        .spawn_sibling(|s| {
            with_provider(s, SsoProviderConfig { team_rules: rules, ..provider_config(&provider) });
        })
        .await;
    let other_node = plain.spawn_sibling(|_| {}).await;
    let (email, claims) = person("sso-groups");
    let signed = |groups: Value| {
        let mut claims = claims.clone();
        claims["groups"] = groups;
        claims
    };

    // eng: a member of research.
    let mut browser = Browser::new(&app);
    assert_eq!(sign_in(&mut browser, &signed(json!(["eng"]))).await.status, 200);
    let token = access_token(&browser);
    let me = app.me(Auth::Bearer(&token)).await.data(200);
    let id = me["user"]["id"].clone();
    assert_eq!(role_in(&app, &owner.token, &research, &id).await.as_deref(), Some("member"));
    let body = json!({"name": "scoped", "permissions": ["ai_gateway"], "team_id": research});
    let key = app.create_key_raw(Auth::Bearer(&token), &body).await.data(201);
    let key = key["key"].as_str().unwrap().to_owned();
    let call = common::chat_body("echo", "hi");
    assert_eq!(other_node.chat(Auth::Bearer(&key), &call).await.status, 200);
    // Made a member of ops by hand, by its owner.
    let add = json!({"email": email, "role": "member"});
    let path = format!("/api/v1/teams/{ops}/members");
    plain.post(&path, Auth::Bearer(&owner.token), &add).await.data(201);

    // eng and leads: admin of research; ops untouched. Then ops too: still the hand-made one.
    assert_eq!(
        sign_in(&mut Browser::new(&app), &signed(json!(["eng", "leads"]))).await.status,
        200
    );
    assert_eq!(role_in(&app, &owner.token, &research, &id).await.as_deref(), Some("admin"));
    assert_eq!(sign_in(&mut Browser::new(&app), &signed(json!(["ops"]))).await.status, 200);
    assert_eq!(role_in(&app, &owner.token, &ops, &id).await.as_deref(), Some("member"));

    // No group: out of research (its scoped key refused on the other node at once), still in
    // ops, which no rule ever granted.
    assert_eq!(sign_in(&mut Browser::new(&app), &signed(json!([]))).await.status, 200);
    assert_eq!(role_in(&app, &owner.token, &research, &id).await, None);
    assert_eq!(role_in(&app, &owner.token, &ops, &id).await.as_deref(), Some("member"));
    let refused = || async {
        let status = other_node.chat(Auth::Bearer(&key), &call).await.status;
        if status == 200 {
            Err(status)
        } else {
            Ok(status)
        }
    };
    common::eventually("the key of a removed member", std::time::Duration::from_secs(2), refused)
        .await;
    let audit = app.get("/api/v1/audit", Auth::Bearer(&token)).await.data(200);
    let by_sso = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["details"]["by"] == "sso")
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(by_sso, ["member_removed", "member_role_changed", "member_added"], "{audit}");
}

/// The provider's admin groups make a platform admin on sign-in and take the role back once
/// the account is in none of them; a role given by hand stays.
async fn admin_groups_make_a_platform_admin_and_take_back_only_that(backend: Backend) {
    let Some(provider) = OidcProvider::start() else { return };
    let config = SsoProviderConfig {
        admin_groups: vec!["aigw-admins".to_owned()],
        ..provider_config(&provider)
    };
    let app = spawn_app_with(backend, |s| with_provider(s, config)).await;
    let (_, claims) = person("sso-admin");
    let with_groups = |groups: Value| {
        let mut claims = claims.clone();
        claims["groups"] = groups;
        claims
    };
    let role_after = |groups: Value| {
        let app = &app;
        let claims = with_groups(groups);
        async move {
            let mut browser = Browser::new(app);
            assert_eq!(sign_in(&mut browser, &claims).await.status, 200);
            let token = access_token(&browser);
            let me = app.me(Auth::Bearer(&token)).await.data(200);
            let admin_page = app.get("/api/v1/admin/users?limit=1", Auth::Bearer(&token)).await;
            (me["user"]["role"].as_str().unwrap().to_owned(), admin_page.status, me)
        }
    };
    let (role, admin_page, me) = role_after(json!(["aigw-admins", "eng"])).await;
    assert_eq!((role.as_str(), admin_page), ("admin", 200));
    let (role, admin_page, _) = role_after(json!(["eng"])).await;
    assert_eq!((role.as_str(), admin_page), ("user", 403));
    // Made an admin by hand: the groups do not take that back.
    let email = me["user"]["email"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let settings = common::test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &email, aigw_domain::Role::Admin).await.unwrap();
    let (role, _, _) = role_after(json!([])).await;
    assert_eq!(role, "admin");
}
