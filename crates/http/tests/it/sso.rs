//! Single sign-on against a real OpenID Connect provider on loopback (oauth2-mock-server,
//! `tests/oidc/provider.mjs`): the console's sign-in (authorization code, PKCE, state and
//! nonce) makes the account on the first sign-in and signs the same subject in again; a
//! domain that is not allowed, an existing account under the linking rules, and every forged
//! or replayed answer are refused with a 401 saying why, and no session starts. Groups (from
//! the ID token and userinfo) grant team memberships and the admin role by rules, teams named
//! by a rule are found or made once across nodes, the provider's second factor counts, and a
//! single-page application's sign-in ends with a one-time code exchanged for a token set.

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
    groups_are_read_from_userinfo_too,
    rules_naming_teams_find_or_make_them,
    a_single_page_application_exchanges_a_one_time_code,
    a_providers_second_factor_counts_and_aigws_is_asked_otherwise,
    sign_in_states_and_codes_are_pruned_a_day_later,
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

/// The access token of a new platform admin of `app`.
async fn admin_of(app: &TestApp) -> String {
    let user = app.new_user("sso-auditor").await;
    let dir = tempfile::tempdir().unwrap();
    let settings = common::test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &user.email, aigw_domain::Role::Admin).await.unwrap();
    app.login(&user.email, PASSWORD).await["token"].as_str().unwrap().to_owned()
}

/// `name=value` of the callback path `callback`'s query.
fn query_part(callback: &str, name: &str) -> String {
    let query = callback.split_once('?').map_or("", |(_, q)| q);
    let part = query.split('&').find(|p| p.starts_with(&format!("{name}=")));
    part.unwrap_or_else(|| panic!("no {name} in {callback}")).to_owned()
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
        ("alg-none", "signature does not verify"),
    ] {
        let (_, mut claims) = person("sso-tweak");
        claims["tweak"] = json!(tweak);
        refused(&sign_in(&mut Browser::new(&app), &claims).await, why);
    }

    // Another sign-in's code in this browser's answer (code injection): the provider refuses
    // it, since this browser's PKCE verifier does not match the challenge it was issued for.
    let (_, victim) = person("sso-victim");
    let mut victim_browser = Browser::new(&app);
    let victim_answer = provider_answer(&mut victim_browser, &victim).await;
    let (_, attacker) = person("sso-attacker");
    let attacker_answer = provider_answer(&mut Browser::new(&app), &attacker).await;
    let (code, state) = (query_part(&attacker_answer, "code"), query_part(&victim_answer, "state"));
    let injected = format!("/sso/{PROVIDER}/callback?{code}&{state}");
    refused(&victim_browser.get(&injected).await, "the provider refused the code");
    // A code used once, replayed in a fresh sign-in of the same browser: refused as well.
    let (_, claims) = person("sso-code-replay");
    let mut browser = Browser::new(&app);
    let first = provider_answer(&mut browser, &claims).await;
    let first_page = browser.get(&first).await;
    assert_eq!(first_page.status, 200, "{}", first_page.text);
    let second = provider_answer(&mut browser, &claims).await;
    let (code, state) = (query_part(&first, "code"), query_part(&second, "state"));
    let replayed = format!("/sso/{PROVIDER}/callback?{code}&{state}");
    refused(&browser.get(&replayed).await, "the provider refused the code");
    let admin = admin_of(&app).await;
    let path = "/api/v1/admin/audit?action=sso_sign_in_refused&limit=100";
    let audit = app.get(path, Auth::Bearer(&admin)).await.data(200);
    // 4 forged or replayed answers, 6 forged ID tokens, 2 refused codes.
    assert_eq!(audit["events"].as_array().unwrap().len(), 12, "every refusal audited: {audit}");

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
        ..SsoTeamRule::default()
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

/// Groups listed only by the userinfo endpoint grant memberships as those of the ID token
/// do (unless the provider is told not to read it); a userinfo answer for another subject
/// refuses the sign-in.
async fn groups_are_read_from_userinfo_too(backend: Backend) {
    use aigw_service::sso_config::SsoTeamRule;
    let Some(provider) = OidcProvider::start() else { return };
    let plain = spawn_app_with(backend, |_| {}).await;
    let owner = plain.new_user("sso-userinfo-owner").await;
    let research = crate::teams::team(&plain, &owner, json!({"name": "research"})).await;
    let rules = vec![SsoTeamRule {
        group: "eng".to_owned(),
        team_id: research.clone(),
        ..SsoTeamRule::default()
    }];
    let config = SsoProviderConfig { team_rules: rules, ..provider_config(&provider) };
    let app = plain.spawn_sibling(|s| with_provider(s, config.clone())).await;
    let (_, mut claims) = person("sso-userinfo");
    claims["groups"] = json!(["other"]);
    claims["userinfo"] = json!({"groups": ["eng"]});
    let mut browser = Browser::new(&app);
    assert_eq!(sign_in(&mut browser, &claims).await.status, 200);
    let me = app.me(Auth::Bearer(&access_token(&browser))).await.data(200);
    let id = me["user"]["id"].clone();
    assert_eq!(role_in(&app, &owner.token, &research, &id).await.as_deref(), Some("member"));

    // A node told not to read userinfo sees only the ID token's groups: out of research.
    let blind = plain
        .spawn_sibling(|s| {
            with_provider(s, SsoProviderConfig { read_userinfo: Some(false), ..config.clone() });
        })
        .await;
    assert_eq!(sign_in(&mut Browser::new(&blind), &claims).await.status, 200);
    assert_eq!(role_in(&app, &owner.token, &research, &id).await, None);

    let mut other_subject = claims.clone();
    other_subject["userinfo"] = json!({"sub": "somebody-else", "groups": ["eng"]});
    refused(&sign_in(&mut Browser::new(&app), &other_subject).await, "for another subject");
}

/// The teams `token`'s account is in: name and role.
async fn teams_of(app: &TestApp, token: &str) -> Vec<(String, String, String)> {
    let listed = app.get("/api/v1/teams?limit=100", Auth::Bearer(token)).await.data(200);
    let mut teams: Vec<_> = listed["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let field = |k: &str| t[k].as_str().unwrap_or_default().to_owned();
            (field("name"), field("role"), field("id"))
        })
        .collect();
    teams.sort();
    teams
}

/// A rule naming its team by name: the one team of that name; made on the first sign-in
/// when no team has it and the provider makes teams, and nothing granted when it does not;
/// people signing in at once on two nodes all land in one team of that name.
async fn rules_naming_teams_find_or_make_them(backend: Backend) {
    use aigw_service::sso_config::SsoTeamRule;
    let Some(provider) = OidcProvider::start() else { return };
    let plain = spawn_app_with(backend, |_| {}).await;
    let owner = plain.new_user("sso-named-owner").await;
    let research = crate::teams::team(&plain, &owner, json!({"name": "Research"})).await;
    let rule = |group: &str, team: &str, role: &str| SsoTeamRule {
        group: group.to_owned(),
        team: team.to_owned(),
        role: role.to_owned(),
        ..SsoTeamRule::default()
    };
    let rules = vec![
        rule("eng", "Research", ""),
        rule("platform", "Platform", "owner"),
        rule("crowd", "Crowd", ""),
        rule("nowhere", "Nowhere", ""),
    ];
    let making = SsoProviderConfig {
        team_rules: rules,
        create_missing_teams: true,
        ..provider_config(&provider)
    };
    let app = plain.spawn_sibling(|s| with_provider(s, making.clone())).await;
    let other_node = plain.spawn_sibling(|s| with_provider(s, making.clone())).await;
    let refusing = SsoProviderConfig { create_missing_teams: false, ..making.clone() };
    let refusing = plain.spawn_sibling(|s| with_provider(s, refusing)).await;

    // A node that makes no team: Research exists and is granted, Nowhere is not made.
    let (_, mut claims) = person("sso-named");
    claims["groups"] = json!(["eng", "nowhere"]);
    let mut browser = Browser::new(&refusing);
    assert_eq!(sign_in(&mut browser, &claims).await.status, 200);
    let teams = teams_of(&refusing, &access_token(&browser)).await;
    assert_eq!(teams, [("Research".to_owned(), "member".to_owned(), research.clone())]);

    // A node that makes teams: Platform made, with this person its owner; Nowhere made too.
    claims["groups"] = json!(["eng", "platform", "nowhere"]);
    let mut browser = Browser::new(&app);
    assert_eq!(sign_in(&mut browser, &claims).await.status, 200);
    let token = access_token(&browser);
    let names: Vec<(String, String)> =
        teams_of(&app, &token).await.into_iter().map(|(n, r, _)| (n, r)).collect();
    let expected = [("Nowhere", "member"), ("Platform", "owner"), ("Research", "member")];
    let expected: Vec<(String, String)> =
        expected.iter().map(|(n, r)| ((*n).to_owned(), (*r).to_owned())).collect();
    assert_eq!(names, expected);
    // Renamed by its owner, Platform stays the rule's team.
    let platform = teams_of(&app, &token).await.into_iter().find(|t| t.0 == "Platform").unwrap();
    let path = format!("/api/v1/teams/{}", platform.2);
    let rename = app.request(reqwest::Method::PATCH, &path, Auth::Bearer(&token));
    app.send(rename.json(&json!({"name": "Platform (renamed)"}))).await.data(200);
    let mut again = Browser::new(&other_node);
    assert_eq!(sign_in(&mut again, &claims).await.status, 200);
    let after = teams_of(&other_node, &access_token(&again)).await;
    assert!(after.iter().any(|t| t.2 == platform.2 && t.0 == "Platform (renamed)"), "{after:?}");
    assert!(!after.iter().any(|t| t.0 == "Platform"), "a second Platform was made: {after:?}");

    // Eight people of group crowd at once, on two nodes: one team Crowd.
    let crowd: Vec<Value> = (0..8)
        .map(|i| {
            let (_, mut claims) = person(&format!("sso-crowd-{i}"));
            claims["groups"] = json!(["crowd"]);
            claims
        })
        .collect();
    let signed_in = futures_util::future::join_all(crowd.iter().enumerate().map(|(i, claims)| {
        let node = if i % 2 == 0 { &app } else { &other_node };
        async move {
            let mut browser = Browser::new(node);
            assert_eq!(sign_in(&mut browser, claims).await.status, 200);
            teams_of(node, &access_token(&browser)).await
        }
    }))
    .await;
    let crowd_ids: std::collections::BTreeSet<String> =
        signed_in.iter().flatten().filter(|t| t.0 == "Crowd").map(|t| t.2.clone()).collect();
    assert_eq!(crowd_ids.len(), 1, "{signed_in:?}");
    assert!(signed_in.iter().all(|teams| teams.len() == 1), "{signed_in:?}");
}

/// A single-page application's sign-in: started with its redirect URI and PKCE challenge,
/// it ends there with a one-time code, exchanged once, with the verifier, for a token set;
/// a wrong verifier, a second exchange, a URI not configured and a refused sign-in are
/// refused.
async fn a_single_page_application_exchanges_a_one_time_code(backend: Backend) {
    use base64::Engine;
    use sha2::Digest;
    let Some(provider) = OidcProvider::start() else { return };
    let spa = "https://app.example.test/signed-in";
    let app = spawn_app_with(backend, |s| {
        with_provider(s, provider_config(&provider));
        s.sso.app_redirect_uris = vec![spa.to_owned()];
    })
    .await;
    let listed = app.get("/api/v1/auth/sso/providers", Auth::None).await.data(200);
    assert_eq!(listed["providers"][0]["start_path"], json!(format!("/sso/{PROVIDER}/start")));
    let verifier = format!("v{}{}", uuid::Uuid::now_v7().simple(), uuid::Uuid::now_v7().simple());
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    let start = |claims: &Value, uri: &str| {
        format!(
            "/sso/{PROVIDER}/start?login_hint={}&redirect_uri={}&code_challenge={challenge}\
             &code_challenge_method=S256&state=app-state-1",
            OidcProvider::hint(claims),
            urlencoding(uri)
        )
    };
    // Ends at the application with a code and its state.
    let (email, claims) = person("sso-spa");
    let ended = app_sign_in(&app, &start(&claims, spa)).await;
    assert!(ended.starts_with(&format!("{spa}?code=")), "{ended}");
    assert!(ended.ends_with("&state=app-state-1"), "{ended}");
    let code = query_part(&ended, "code").trim_start_matches("code=").to_owned();
    let exchange = |code: &str, verifier: &str| json!({"code": code, "code_verifier": verifier});
    // A wrong verifier takes the code: the right one is refused after it.
    let wrong = format!("w{}", &verifier[1..]);
    let path = "/api/v1/auth/sso/exchange";
    app.post(path, Auth::None, &exchange(&code, &wrong)).await.unauthorized();
    app.post(path, Auth::None, &exchange(&code, &verifier)).await.unauthorized();
    // A fresh sign-in: the code and the verifier give the token set, once.
    let ended = app_sign_in(&app, &start(&claims, spa)).await;
    let code = query_part(&ended, "code").trim_start_matches("code=").to_owned();
    let tokens = app.post(path, Auth::None, &exchange(&code, &verifier)).await.data(200);
    let access = tokens["token"].as_str().expect("a token set").to_owned();
    assert!(tokens["refresh_token"].is_string(), "{tokens}");
    let me = app.me(Auth::Bearer(&access)).await.data(200);
    assert_eq!(me["user"]["email"], json!(email));
    let error = app.post(path, Auth::None, &exchange(&code, &verifier)).await.unauthorized();
    assert!(error["details"]["hint"].as_str().unwrap().contains("exchanged already"), "{error}");
    app.post(path, Auth::None, &exchange("", &verifier)).await.invalid("code");
    app.post(path, Auth::None, &exchange(&code, "short")).await.invalid("code_verifier");
    // One code exchanged 8 times at once on two nodes: one token set.
    let other_node = app
        .spawn_sibling(|s| {
            with_provider(s, provider_config(&provider));
            s.sso.app_redirect_uris = vec![spa.to_owned()];
        })
        .await;
    let ended = app_sign_in(&app, &start(&claims, spa)).await;
    let code = query_part(&ended, "code").trim_start_matches("code=").to_owned();
    let body = exchange(&code, &verifier);
    let racing = (0..8).map(|i| {
        let (node, body) = (if i % 2 == 0 { &app } else { &other_node }, &body);
        async move { node.post(path, Auth::None, body).await.status }
    });
    let mut statuses = futures_util::future::join_all(racing).await;
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 401, 401, 401, 401, 401, 401, 401]);

    // A URI that is not configured, and a plain challenge method, are 400s.
    let other = Browser::new(&app).get(&start(&claims, "https://evil.example.test/")).await;
    assert_eq!(other.status, 400, "{}", other.text);
    assert!(other.text.contains("redirect_uri"), "{}", other.text);
    let plain = start(&claims, spa).replace("S256", "plain");
    assert_eq!(Browser::new(&app).get(&plain).await.status, 400);
    // A refused sign-in ends at the application with an error, and no code.
    let (_, mut outsider) = person("sso-spa-outsider");
    outsider["email"] = json!("someone@elsewhere.test");
    let refused = app_sign_in(&app, &start(&outsider, spa)).await;
    assert!(refused.starts_with(&format!("{spa}?error=access_denied&error_description=")));
    assert!(!refused.contains("code="), "{refused}");
}

/// Percent-encodes `value` for a query.
fn urlencoding(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// Runs a sign-in a single-page application started at `start` (a path with its query)
/// through the provider: where the callback sends the browser.
async fn app_sign_in(app: &TestApp, start: &str) -> String {
    let mut browser = Browser::new(app);
    let started = browser.get(start).await;
    assert_eq!(started.status, 303, "{}", started.text);
    let client =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let answer = client.get(started.location.clone().unwrap()).send().await.unwrap();
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    let callback = location.trim_start_matches("https://gw.example.test").to_owned();
    let ended = browser.get(&callback).await;
    assert_eq!(ended.status, 303, "{}", ended.text);
    assert!(ended.cookie("aigw_access").is_none(), "an application's sign-in set a session");
    ended.location.clone().unwrap()
}

/// The TOTP code of `secret` (base32) at `clock`'s time.
fn totp_code(secret: &str, clock: &aigw_service::Clock) -> String {
    use totp_rs::{Algorithm, Secret, TOTP};
    let bytes = Secret::Encoded(secret.to_owned()).to_bytes().unwrap();
    let totp = TOTP::new_unchecked(Algorithm::SHA1, 6, 1, 30, bytes, None, String::new());
    totp.generate(u64::try_from(clock.now().timestamp()).unwrap())
}

/// An account with aigw's second factor on is asked for it after a sign-in, unless the
/// provider's `amr` asserts a second factor of its own; such a session counts as one with a
/// second factor for `auth.require_mfa_for_admins`. A single-page application's exchange
/// answers the same MFA challenge a login does.
async fn a_providers_second_factor_counts_and_aigws_is_asked_otherwise(backend: Backend) {
    let Some(provider) = OidcProvider::start() else { return };
    let clock = aigw_service::Clock::adjustable();
    let spa = "https://app.example.test/signed-in";
    let app = spawn_app_with(backend, |s| {
        with_provider(s, provider_config(&provider));
        s.clock = clock.clone();
        s.auth.require_mfa_for_admins = true;
        s.sso.app_redirect_uris = vec![spa.to_owned()];
    })
    .await;
    let (email, claims) = person("sso-mfa");
    let mut browser = Browser::new(&app);
    assert_eq!(sign_in(&mut browser, &claims).await.status, 200);
    let token = access_token(&browser);
    let dir = tempfile::tempdir().unwrap();
    let settings = common::test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &email, aigw_domain::Role::Admin).await.unwrap();
    let enrollment =
        app.post_empty("/api/v1/auth/mfa/totp/enroll", Auth::Bearer(&token)).await.data(200);
    let secret = enrollment["secret"].as_str().unwrap().to_owned();
    let confirm = json!({"code": totp_code(&secret, &clock)});
    app.post("/api/v1/auth/mfa/totp/confirm", Auth::Bearer(&token), &confirm).await.data(200);
    clock.advance(chrono::Duration::seconds(30));
    let users = "/api/v1/admin/users?limit=1";

    // No second factor asserted: aigw's code form, and no session yet.
    let mut asked = Browser::new(&app);
    let form = sign_in(&mut asked, &claims).await;
    assert_eq!(form.status, 200, "{}", form.text);
    assert!(form.text.contains("name=\"mfa_token\""), "{}", form.text);
    assert!(form.cookie("aigw_access").is_none(), "a session before the second factor");

    // The provider asserts one: a session at once, counted as a second factor.
    let mut strong = claims.clone();
    strong["amr"] = json!(["pwd", "mfa"]);
    let mut trusted = Browser::new(&app);
    assert_eq!(sign_in(&mut trusted, &strong).await.status, 200);
    let strong_token = access_token(&trusted);
    assert_eq!(common::jwt_part(&strong_token, 1)["amr"], json!(["pwd", "otp"]));
    app.get(users, Auth::Bearer(&strong_token)).await.data(200);
    // The first session, made before the factor was on and without the provider's, is not.
    app.get(users, Auth::Bearer(&token)).await.forbidden("mfa", "pwd");

    // A single-page application's exchange answers the MFA challenge, completed as a login's.
    let (start, verifier) = app_start(&claims, spa);
    let ended = app_sign_in(&app, &start).await;
    let code = query_part(&ended, "code").trim_start_matches("code=").to_owned();
    let body = json!({"code": code, "code_verifier": verifier});
    let answer = app.post("/api/v1/auth/sso/exchange", Auth::None, &body).await.data(200);
    assert_eq!(answer["mfa_required"], json!(true), "{answer}");
    let mfa = json!({"mfa_token": answer["mfa_token"], "code": totp_code(&secret, &clock)});
    let set = app.post("/api/v1/auth/login/mfa", Auth::None, &mfa).await.data(200);
    app.get(users, Auth::Bearer(set["token"].as_str().unwrap())).await.data(200);
}

/// The states of sign-ins that came back, and one-time codes nobody exchanged, are deleted by
/// the periodic pruning a day later; a replayed callback is still refused then, by its
/// sign-in's expiry.
async fn sign_in_states_and_codes_are_pruned_a_day_later(backend: Backend) {
    use aigw_persistence::pool::{DatabaseUrl, Pool, PoolOptions};
    let Some(provider) = OidcProvider::start() else { return };
    let clock = aigw_service::Clock::adjustable();
    let spa = "https://app.example.test/signed-in";
    let app = spawn_app_with(backend, |s| {
        with_provider(s, provider_config(&provider));
        s.clock = clock.clone();
        s.sso.app_redirect_uris = vec![spa.to_owned()];
    })
    .await;
    let (_, claims) = person("sso-pruned");
    let mut browser = Browser::new(&app);
    let callback = provider_answer(&mut browser, &claims).await;
    let cookie = browser.jar.get("aigw_sso").cloned().unwrap();
    assert_eq!(browser.get(&callback).await.status, 200);
    let (start, _) = app_start(&claims, spa);
    let ended = app_sign_in(&app, &start).await;
    assert!(ended.contains("code="), "{ended}");

    let url = DatabaseUrl::parse(&app.database_url).unwrap();
    let db = aigw_service::Db::new(Pool::new(&url, &PoolOptions::default()).unwrap()).unwrap();
    let prune = || aigw_service::account_email::pruning::prune(&db, &clock);
    assert_eq!(prune().await.unwrap(), 0, "fresh states and a live code are kept");
    clock.advance(chrono::Duration::hours(25));
    // Two states (the console's and the application's sign-in) and the unexchanged code.
    assert_eq!(prune().await.unwrap(), 3);
    let mut replay = Browser::new(&app);
    replay.jar.insert("aigw_sso".to_owned(), cookie);
    refused(&replay.get(&callback).await, "took too long");
}

/// A single-page application's start of a sign-in of `claims` that ends at `spa`: the path,
/// and the PKCE verifier of its challenge.
fn app_start(claims: &Value, spa: &str) -> (String, String) {
    use base64::Engine;
    use sha2::Digest;
    let verifier = format!("v{}{}", uuid::Uuid::now_v7().simple(), uuid::Uuid::now_v7().simple());
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    let start = format!(
        "/sso/{PROVIDER}/start?login_hint={}&redirect_uri={}&code_challenge={challenge}\
         &code_challenge_method=S256",
        OidcProvider::hint(claims),
        urlencoding(spa)
    );
    (start, verifier)
}
