//! The console's team pages over HTTP, as a browser without a script engine uses them: an
//! owner sets a team up (members, roles, policy, invitations, a team key), a plain member sees
//! the policy and cannot change it, a stranger gets 404, team names are shown as text.

use crate::common;
use common::browser::Browser;
use common::{spawn_app, spawn_app_with, Auth, Backend};
use serde_json::json;

/// Creates team `name` in the console; its id.
async fn create_team(browser: &mut Browser<'_>, name: &str) -> String {
    let csrf = browser.get("/teams").await.csrf();
    let created = browser.post_with_csrf("/teams", &csrf, &[("name", name)]).await;
    assert_eq!(created.status, 303, "{}", created.text);
    let location = created.location.unwrap();
    location.strip_prefix("/teams/").expect("the team's page").to_owned()
}

/// The policy form's fields with `changes` over the defaults of an empty policy.
fn policy<'a>(name: &'a str, changes: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut fields = vec![
        ("name", name),
        ("max_budget_usd", ""),
        ("budget_period", "total"),
        ("member_budget_usd", ""),
        ("rpm_limit", ""),
        ("tpm_limit", ""),
        ("allowed_models", ""),
    ];
    for (field, value) in changes {
        fields.retain(|(f, _)| f != field);
        fields.push((field, value));
    }
    fields
}

async fn an_owner_sets_a_team_up_in_the_console(backend: Backend) {
    let app = spawn_app(backend).await;
    let owner = app.new_user("ct-owner").await;
    let ada = app.new_user("ct-ada").await;
    let mut browser = Browser::signed_in(&app, &owner).await;
    let id = create_team(&mut browser, "data").await;
    let page = browser.get(&format!("/teams/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("The team is created"), "{}", page.text);
    let csrf = page.csrf();
    let listed = browser.get("/teams").await;
    let row = listed.element("table", "teams");
    assert!(row.contains(&format!("href=\"/teams/{id}\"")) && row.contains("owner"), "{row}");

    // A registered user joins at once; their role changes.
    let path = format!("/teams/{id}/members");
    let added =
        browser.post_with_csrf(&path, &csrf, &[("email", &ada.email), ("role", "member")]).await;
    assert_eq!(added.status, 303, "{}", added.text);
    let page = browser.get(&format!("/teams/{id}")).await;
    assert!(page.text.contains("joined the team as member"), "{}", page.text);
    assert!(page.element("table", "members").contains(&ada.email), "{}", page.text);
    let role = format!("/teams/{id}/members/{}/role", ada.id);
    let changed = browser.post_with_csrf(&role, &csrf, &[("role", "admin")]).await;
    assert_eq!(changed.status, 303, "{}", changed.text);
    let members =
        app.get(&format!("/api/v1/teams/{id}/members"), Auth::Bearer(&owner.token)).await.data(200);
    let ada_row = members["members"].as_array().unwrap().iter().find(|m| m["user_id"] == ada.id);
    assert_eq!(ada_row.unwrap()["role"], "admin", "{members}");
    // The last owner stays one: the API's refusal is shown, nothing changes.
    let own_role = format!("/teams/{id}/members/{}/role", owner.id);
    let refused = browser.post_with_csrf(&own_role, &csrf, &[("role", "member")]).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("at least one owner"), "{}", refused.text);

    // An address without an account is invited.
    let stranger = common::unique_email("ct-invited");
    let invited =
        browser.post_with_csrf(&path, &csrf, &[("email", &stranger), ("role", "member")]).await;
    assert_eq!(invited.status, 303, "{}", invited.text);
    let page = browser.get(&format!("/teams/{id}")).await;
    assert!(page.text.contains("it is invited"), "{}", page.text);
    assert!(page.element("table", "team-invitations").contains(&stranger), "{}", page.text);

    // The policy: the API's GET of the team then shows it, and the page shows the budget.
    let fields = policy(
        "data",
        &[("max_budget_usd", "50"), ("budget_period", "monthly"), ("rpm_limit", "100")],
    );
    let saved = browser.post_with_csrf(&format!("/teams/{id}/policy"), &csrf, &fields).await;
    assert_eq!(saved.status, 303, "{}", saved.text);
    let team = app.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(
        (&team["max_budget_usd"], &team["budget_period"], &team["rpm_limit"]),
        (&json!(50.0), &json!("monthly"), &json!(100)),
        "{team}"
    );
    let page = browser.get(&format!("/teams/{id}")).await;
    let budget = page.element("div", "team-budget");
    assert!(budget.contains("$50.00") && budget.contains("<meter"), "{budget}");
    // The budget mode and the rule on members' keys; a member's own budget.
    let fields = policy(
        "data",
        &[
            ("max_budget_usd", "50"),
            ("budget_period", "monthly"),
            ("rpm_limit", "100"),
            ("budget_mode", "clamp"),
            ("require_scoped_keys", "on"),
        ],
    );
    let saved = browser.post_with_csrf(&format!("/teams/{id}/policy"), &csrf, &fields).await;
    assert_eq!(saved.status, 303, "{}", saved.text);
    let team = app.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(
        (&team["budget_mode"], &team["require_scoped_keys"]),
        (&json!("clamp"), &json!(true))
    );
    let page = browser.get(&format!("/teams/{id}")).await;
    assert!(page.text.contains("id=\"team_require_scoped_keys\" name=\"require_scoped_keys\" type=\"checkbox\" checked"), "{}", page.text);
    let ada_budget = format!("/teams/{id}/members/{}/budget", ada.id);
    let set = browser.post_with_csrf(&ada_budget, &csrf, &[("budget_usd", "12.5")]).await;
    assert_eq!(set.status, 303, "{}", set.text);
    let members =
        app.get(&format!("/api/v1/teams/{id}/members"), Auth::Bearer(&owner.token)).await.data(200);
    let ada_row = members["members"].as_array().unwrap().iter().find(|m| m["user_id"] == ada.id);
    assert_eq!(ada_row.unwrap()["budget_usd"], json!(12.5), "{members}");
    let bad = browser.post_with_csrf(&ada_budget, &csrf, &[("budget_usd", "lots")]).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    let cleared = browser.post_with_csrf(&ada_budget, &csrf, &[("budget_usd", "")]).await;
    assert_eq!(cleared.status, 303, "{}", cleared.text);
    // A key made for Ada from her row: hers, its secret shown once to the owner.
    let for_ada = format!("/teams/{id}/members/{}/keys/new", ada.id);
    let page = browser.get(&format!("/teams/{id}")).await;
    assert!(page.text.contains(&format!("href=\"{for_ada}\"")), "{}", page.text);
    let form = browser.get(&for_ada).await;
    assert_eq!(form.status, 200, "{}", form.text);
    assert!(!form.text.contains("id=\"team_id\""), "{}", form.text);
    let fields = [("name", "for ada"), ("permissions", "ai_gateway"), ("budget_period", "total")];
    let made = browser.post_with_csrf(&for_ada, &csrf, &fields).await;
    assert_eq!(made.status, 201, "{}", made.text);
    assert!(made.text.contains("pass it on to them"), "{}", made.text);
    let ada_keys = app.get("/api/v1/auth/api-keys", Auth::Bearer(&ada.token)).await.data(200);
    let mine =
        ada_keys["api_keys"].as_array().unwrap().iter().find(|k| k["name"] == "for ada").cloned();
    let mine = mine.unwrap_or_else(|| panic!("not in Ada's keys: {ada_keys}"));
    assert_eq!((&mine["created_by"], &mine["team_id"]), (&json!(owner.id), &json!(id)), "{mine}");
    let fields = policy(
        "data",
        &[("max_budget_usd", "50"), ("budget_period", "monthly"), ("rpm_limit", "100")],
    );
    browser.post_with_csrf(&format!("/teams/{id}/policy"), &csrf, &fields).await;
    let team = app.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(team["require_scoped_keys"], false, "an unchecked box turns the rule off");
    assert!(page.text.contains("id=\"team_max_budget_usd\""), "{}", page.text);
    // A field that is not a number comes back named, with what was typed.
    let fields = policy("data", &[("max_budget_usd", "lots"), ("budget_period", "monthly")]);
    let bad = browser.post_with_csrf(&format!("/teams/{id}/policy"), &csrf, &fields).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(
        bad.text.contains("value=\"lots\"") && bad.text.contains("aria-invalid"),
        "{}",
        bad.text
    );

    // A team key: its secret shown once, and it calls the gateway.
    let new_key = browser.get(&format!("/teams/{id}/keys/new")).await;
    assert_eq!(new_key.status, 200, "{}", new_key.text);
    assert!(!new_key.text.contains("id=\"team_id\""), "{}", new_key.text);
    let created = browser
        .post_with_csrf(
            &format!("/teams/{id}/keys/new"),
            &csrf,
            &[("name", "nightly"), ("permissions", "ai_gateway"), ("budget_period", "monthly")],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let secret = created.element("code", "secret");
    let secret = secret[secret.find('>').unwrap() + 1..].to_owned();
    assert!(secret.starts_with("aigw_"), "{secret}");
    assert!(created.text.contains("data-copy=\"secret\""), "{}", created.text);
    let chat = app.chat(Auth::Bearer(&secret), &common::chat_body("echo", "hi")).await;
    assert_eq!(chat.status, 200, "{}", chat.text);
    // Its call is in the usage tables once recorded: the team's, under the key's name.
    let usage = format!("/api/v1/teams/{id}/usage?group_by=api_key");
    let recorded = || async {
        match app.get(&usage, Auth::Bearer(&owner.token)).await.data(200)["rows"].take() {
            rows if rows == json!([]) => Err(rows),
            _ => Ok(()),
        }
    };
    let within = std::time::Duration::from_secs(10);
    common::eventually("the call's usage was not recorded", within, recorded).await;
    let page = browser.get(&format!("/teams/{id}")).await;
    assert!(page.element("table", "team-keys").contains("nightly"), "{}", page.text);
    let by_key = page.element("table", "usage-by-key");
    assert!(by_key.contains("nightly") && by_key.contains(">1<"), "{by_key}");
    assert!(page.element("table", "usage-by-member").contains("Team keys"), "{}", page.text);
    // The owner's own keys list names the team of a key scoped to it, and a personal key's.
    let body = json!({"name": "scoped", "permissions": ["read"], "team_id": id});
    app.create_key_raw(Auth::Bearer(&owner.token), &body).await.data(201);
    let body = json!({"name": "mine", "permissions": ["read"]});
    app.create_key_raw(Auth::Bearer(&owner.token), &body).await.data(201);
    let listed = browser.get("/keys").await;
    let keys = listed.element("table", "keys");
    assert!(keys.contains(&format!("<a href=\"/teams/{id}\">data</a>")), "{keys}");
    assert!(keys.contains(">personal<"), "{keys}");

    // The alerts webhook: a bad URL is refused on the page, a good one shows its secret once.
    let hook = format!("/teams/{id}/webhook");
    let bad = browser.post_with_csrf(&hook, &csrf, &[("url", "http://127.0.0.1/hook")]).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad.text.contains("https://"), "{}", bad.text);
    let url = "https://hooks.example.com/aigw";
    let set = browser.post_with_csrf(&hook, &csrf, &[("url", url)]).await;
    assert_eq!(set.status, 200, "{}", set.text);
    assert!(set.element("code", "secret").contains("whsec_"), "{}", set.text);
    let page = browser.get(&format!("/teams/{id}")).await;
    let section = page.element("form", "team-webhook");
    assert!(section.contains("A new URL"), "{section}");
    assert!(page.text.contains("hooks.example.com&#x2f;aigw</code>"), "{}", page.text);
    let removed = browser.post_with_csrf(&format!("{hook}/delete"), &csrf, &[]).await;
    assert_eq!(removed.status, 303, "{}", removed.text);
    app.get(&format!("/api/v1{hook}"), Auth::Bearer(&owner.token)).await.not_found("webhook", &id);

    // Deleting the team.
    let deleted = browser.post_with_csrf(&format!("/teams/{id}/delete"), &csrf, &[]).await;
    assert_eq!((deleted.status, deleted.location.as_deref()), (303, Some("/teams")));
    app.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token))
        .await
        .error(404, "not_found");
}

async fn a_plain_member_cannot_change_the_policy(backend: Backend) {
    let app = spawn_app(backend).await;
    let owner = app.new_user("ct-boss").await;
    let member = app.new_user("ct-plain").await;
    let body = json!({"name": "ops", "max_budget_usd": 20.0, "budget_period": "weekly"});
    let team = app.post("/api/v1/teams", Auth::Bearer(&owner.token), &body).await.data(201);
    let id = team["id"].as_str().unwrap().to_owned();
    let add = json!({"email": member.email, "role": "member"});
    app.post(&format!("/api/v1/teams/{id}/members"), Auth::Bearer(&owner.token), &add)
        .await
        .data(201);

    let mut browser = Browser::signed_in(&app, &member).await;
    let page = browser.get(&format!("/teams/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.element("table", "members").contains(&owner.email), "{}", page.text);
    assert!(page.element("div", "team-budget").contains("$20.00"), "{}", page.text);
    for form in
        ["id=\"team-policy\"", "id=\"add-member\"", "id=\"team-keys\"", "id=\"delete-team\""]
    {
        assert!(!page.text.contains(form), "{form} shown to a plain member");
    }
    assert!(page.element("dl", "team-policy-view").contains("$20.00"), "{}", page.text);

    let csrf = page.csrf();
    let fields = policy("ops", &[("max_budget_usd", "9999"), ("budget_period", "weekly")]);
    let refused = browser.post_with_csrf(&format!("/teams/{id}/policy"), &csrf, &fields).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert!(refused.text.contains("requires team_admin"), "{}", refused.text);
    let role = format!("/teams/{id}/members/{}/role", member.id);
    let promoted = browser.post_with_csrf(&role, &csrf, &[("role", "owner")]).await;
    assert_eq!(promoted.status, 403, "{}", promoted.text);
    let team = app.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!((&team["max_budget_usd"], &team["role"]), (&json!(20.0), &json!("owner")));
    let members =
        app.get(&format!("/api/v1/teams/{id}/members"), Auth::Bearer(&owner.token)).await.data(200);
    let own = members["members"].as_array().unwrap().iter().find(|m| m["user_id"] == member.id);
    assert_eq!(own.unwrap()["role"], "member", "{members}");

    // A member may leave.
    let left = browser
        .post_with_csrf(&format!("/teams/{id}/members/{}/remove", member.id), &csrf, &[])
        .await;
    assert_eq!((left.status, left.location.as_deref()), (303, Some("/teams")), "{}", left.text);
    assert_eq!(browser.get(&format!("/teams/{id}")).await.status, 404);
}

async fn team_names_are_text_and_strangers_get_404(backend: Backend) {
    let app = spawn_app(backend).await;
    let owner = app.new_user("ct-xss").await;
    let stranger = app.new_user("ct-stranger").await;
    let xss = "<img src=x onerror=alert(1)>";
    let mut browser = Browser::signed_in(&app, &owner).await;
    let id = create_team(&mut browser, xss).await;
    for path in ["/teams".to_owned(), format!("/teams/{id}")] {
        let page = browser.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.text);
        assert!(page.text.contains("&lt;img src=x onerror=alert(1)&gt;"), "{}", page.text);
        assert!(!page.text.contains(xss), "{}", page.text);
    }

    let mut other = Browser::signed_in(&app, &stranger).await;
    let page = other.get(&format!("/teams/{id}")).await;
    assert_eq!(page.status, 404, "{}", page.text);
    assert!(page.text.contains("team not found"), "{}", page.text);
    assert!(!page.text.contains("onerror=alert"), "{}", page.text);
    let csrf = other.get("/teams").await.csrf();
    let fields = policy("mine now", &[]);
    let refused = other.post_with_csrf(&format!("/teams/{id}/policy"), &csrf, &fields).await;
    assert_eq!(refused.status, 404, "{}", refused.text);
    let team = app.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(team["name"], xss);
}

async fn team_creation_kept_to_admins_is_refused_on_the_page(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.auth.team_creation = aigw_service::TeamCreation::Admins;
    })
    .await;
    let user = app.new_user("ct-noteam").await;
    let mut browser = Browser::signed_in(&app, &user).await;
    let csrf = browser.get("/teams").await.csrf();
    let refused = browser.post_with_csrf("/teams", &csrf, &[("name", "skunkworks")]).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert!(refused.text.contains("requires admin"), "{}", refused.text);
    assert!(refused.text.contains("value=\"skunkworks\""), "{}", refused.text);
    let teams = app.get("/api/v1/teams", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(teams["teams"], json!([]), "{teams}");
}

backend_tests!(
    an_owner_sets_a_team_up_in_the_console,
    a_plain_member_cannot_change_the_policy,
    team_names_are_text_and_strangers_get_404,
    team_creation_kept_to_admins_is_refused_on_the_page,
);
