//! Teams, black box on both backends: two nodes sharing the database for the rules about
//! nodes, a fake upstream (`up-bill`) that bills what it was asked for. A team budget and a
//! member budget hold under 200 concurrent calls spread over both nodes and several keys; a
//! refusal names its level; a removed member's key stops on both nodes at once; a team key
//! survives its creator's removal; non-members get 404 and members 403 on management; the
//! last owner cannot leave; models intersect; an invitation joins on registration.

use crate::budget_walkarounds::{cluster, slow_call, Cluster};
use crate::common::*;
use crate::key_counters_redis::RedisCounters;
use crate::rate_limit_contract::RedisServer;
use serde_json::{json, Value};
use std::time::Duration;

backend_tests!(
    a_team_budget_holds_over_members_keys_and_nodes,
    a_member_budget_holds_and_names_its_scope,
    a_removed_members_key_stops_on_both_nodes,
    a_team_key_survives_its_creators_removal,
    who_may_see_and_manage_a_team,
    team_models_intersect_with_the_keys,
    an_invitation_joins_once_the_address_is_verified,
    a_team_budget_holds_through_redis,
    clamping_budgets_lower_max_tokens_instead_of_refusing,
    a_team_reads_its_usage_and_spend,
    invitations_are_listed_and_revoked_by_api_and_operator,
);

/// Asserts a chat completion answered 200.
fn answered(reply: Reply) {
    assert_eq!(reply.status, 200, "{}", reply.text);
}

/// Creates a team of `owner` with `body`'s fields; returns its id.
pub(crate) async fn team(app: &TestApp, owner: &User, body: Value) -> String {
    let made = app.post("/api/v1/teams", Auth::Bearer(&owner.token), &body).await.data(201);
    assert_eq!(made["role"], "owner");
    made["id"].as_str().unwrap().to_owned()
}

/// Adds `user` to team `id` with `role`.
pub(crate) async fn add(app: &TestApp, owner: &User, id: &str, user: &User, role: &str) {
    let body = json!({"email": user.email, "role": role});
    let path = format!("/api/v1/teams/{id}/members");
    let added = app.post(&path, Auth::Bearer(&owner.token), &body).await;
    assert_eq!(added.data(201)["status"], "joined");
}

/// A key of `user` scoped to team `id` (no limits of its own): its secret.
pub(crate) async fn team_scoped_key(app: &TestApp, user: &User, id: &str) -> String {
    let body = json!({"name": "scoped", "permissions": ["ai_gateway", "read"], "team_id": id});
    let made = app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    assert_eq!(made["team_id"], id);
    assert_eq!(made["team_owned"], false);
    made["key"].as_str().unwrap().to_owned()
}

/// Sends `body` `n` times at once, spread over `nodes` and `keys`; returns how many got 200
/// and the scopes named by the 429 `budget_exceeded` answers.
pub(crate) async fn fire(
    nodes: [&TestApp; 2],
    keys: &[String],
    body: &Value,
    n: usize,
) -> (usize, Vec<String>) {
    let calls = (0..n).map(|i| {
        let node = nodes[i % 2];
        let key = &keys[(i / 2) % keys.len()];
        let request = node
            .request(reqwest::Method::POST, "/api/v1/ai/chat/completions", Auth::Bearer(key))
            .json(body);
        async move { node.send(request).await }
    });
    let (mut ok, mut scopes) = (0, Vec::new());
    for reply in futures_util::future::join_all(calls).await {
        match reply.status {
            200 => ok += 1,
            429 => {
                let details = reply.error(429, "budget_exceeded")["details"].clone();
                scopes.push(details["scope"].as_str().unwrap_or_default().to_owned());
            }
            other => panic!("unexpected {other}: {}", reply.text),
        }
    }
    (ok, scopes)
}

/// What `users` spent together, from their ledgers, once `calls` records are there.
pub(crate) async fn spent_by(app: &TestApp, users: &[&User], calls: usize) -> f64 {
    let records = eventually("every answered call recorded", Duration::from_secs(10), || async {
        let mut records = Vec::new();
        for user in users {
            let page = app.get("/api/v1/usage/requests?limit=200", Auth::Bearer(&user.token)).await;
            records.extend(page.data(200)["requests"].as_array().cloned().unwrap_or_default());
        }
        if records.len() >= calls {
            Ok(records)
        } else {
            Err(format!("{} of {calls} records", records.len()))
        }
    })
    .await;
    assert_eq!(records.len(), calls, "one record per answered call");
    records.iter().map(|r| r["cost_usd"].as_f64().unwrap()).sum()
}

/// A team budget of $0.80 (twenty calls of $0.0398) holds against 200 calls at once from two
/// members' keys on two nodes; the refusals name the team and are counted in `/metrics`.
async fn a_team_budget_holds_over_members_keys_and_nodes(backend: Backend) {
    let nodes = cluster(backend, None).await;
    team_budget_holds(&nodes).await;
    let metrics = nodes.a.get("/metrics", Auth::None).await.text;
    let refusals = metrics
        .lines()
        .find(|l| l.starts_with("aigw_limit_refusals_total{") && l.contains("scope=\"team\""));
    let refusals = refusals.unwrap_or_else(|| panic!("no team refusal counted:\n{metrics}"));
    assert!(refusals.contains("reason=\"budget\""), "{refusals}");
}

/// The same with the counters in Redis, shared by both nodes.
async fn a_team_budget_holds_through_redis(backend: Backend) {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let counters = RedisCounters::new(&server);
    team_budget_holds(&cluster(backend, Some(&counters)).await).await;
}

/// Two members' team-scoped keys fire 200 calls of $0.0398 over both `nodes` at a team
/// budget of $0.80: at most twenty pass, every refusal names the team, and the ledger's spend
/// stays within the budget.
async fn team_budget_holds(nodes: &Cluster) {
    let (owner, member) = (nodes.a.new_user("tb-own").await, nodes.a.new_user("tb-mem").await);
    let id = team(&nodes.a, &owner, json!({"name": "data", "max_budget_usd": 0.80})).await;
    add(&nodes.a, &owner, &id, &member, "member").await;
    let keys = [
        team_scoped_key(&nodes.a, &owner, &id).await,
        team_scoped_key(&nodes.a, &member, &id).await,
    ];
    let (ok, scopes) = fire([&nodes.a, &nodes.b], &keys, &slow_call(0, 390), 200).await;
    assert!((1..=20).contains(&ok), "{ok} calls of $0.0398 in $0.80");
    assert!(scopes.iter().all(|s| s == "team"), "{scopes:?}");
    let spent = spent_by(&nodes.a, &[&owner, &member], ok).await;
    assert!(spent <= 0.80 + 1e-9, "the team spent ${spent:.4} of $0.80");
}

/// A key's and a team's budget in `clamp` mode answer a call whose worst case does not fit
/// with its `max_tokens` lowered (cut with `finish_reason: "length"`), and never pass the
/// budget; in `refuse` mode the same call is refused, naming what it would reserve.
async fn clamping_budgets_lower_max_tokens_instead_of_refusing(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let user = nodes.a.new_user("clamp").await;
    // $0.10: 1 000 tokens; the call asks for 5 000 completion tokens ($0.50).
    let big = json!({"model": "up-bill", "max_tokens": 5000,
                     "messages": [{"role": "user", "content": "write a long story"}]});
    let body = json!({"name": "c", "permissions": ["ai_gateway", "read"], "max_budget_usd": 0.10,
                      "budget_mode": "clamp"});
    let made = nodes.a.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    assert_eq!(made["budget_mode"], "clamp");
    let key = made["key"].as_str().unwrap().to_owned();
    let first = nodes.a.chat(Auth::Bearer(&key), &big).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let answer = first.json();
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    let billed = answer["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((800..1000).contains(&billed), "lowered to what $0.10 buys: {billed}");
    let (ok, _) = fire([&nodes.a, &nodes.b], std::slice::from_ref(&key), &big, 20).await;
    let spent = spent_by(&nodes.a, &[&user], ok + 1).await;
    assert!(spent <= 0.10 + 1e-9, "the key spent ${spent:.4} of $0.10");

    let owner = nodes.a.new_user("clamp-team").await;
    let id = team(&nodes.a, &owner, json!({"name": "t", "max_budget_usd": 0.10})).await;
    let key = team_scoped_key(&nodes.a, &owner, &id).await;
    let refused = nodes.a.chat(Auth::Bearer(&key), &big).await;
    let error = refused.error(429, "budget_exceeded");
    assert_eq!(error["details"]["scope"], "team");
    assert!(error["details"]["reserved_usd"].as_f64().unwrap() > 0.10, "{error}");
    assert!(error["message"].as_str().unwrap().contains("max_tokens"), "{error}");
    let path = format!("/api/v1/teams/{id}");
    let clamp = nodes
        .a
        .request(reqwest::Method::PATCH, &path, Auth::Bearer(&owner.token))
        .json(&json!({"budget_mode": "clamp"}));
    assert_eq!(nodes.a.send(clamp).await.data(200)["budget_mode"], "clamp");
    let (ok, _) = fire([&nodes.a, &nodes.b], &[key], &big, 20).await;
    assert!(ok >= 1, "the first call is lowered, not refused");
    let spent = spent_by(&nodes.a, &[&owner], ok).await;
    assert!(spent <= 0.10 + 1e-9, "the team spent ${spent:.4} of $0.10");
}

/// A team's owner reads its usage by member and key, with the members' e-mails and names and
/// the keys' names and prefixes, and the team's and members' spend.
async fn a_team_reads_its_usage_and_spend(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let (owner, member) = (nodes.a.new_user("tu-own").await, nodes.a.new_user("tu-mem").await);
    let id = team(&nodes.a, &owner, json!({"name": "u", "budget_period": "monthly"})).await;
    add(&nodes.a, &owner, &id, &member, "member").await;
    let key = team_scoped_key(&nodes.a, &member, &id).await;
    for _ in 0..3 {
        answered(nodes.a.chat(Auth::Bearer(&key), &slow_call(0, 90)).await);
    }
    spent_by(&nodes.a, &[&member], 3).await;
    let path = format!("/api/v1/teams/{id}/usage?group_by=member");
    let by_member = nodes.a.get(&path, Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(by_member["rows"][0]["member_id"], json!(member.id), "{by_member}");
    assert_eq!(by_member["rows"][0]["member_email"], json!(member.email), "{by_member}");
    assert!(by_member["rows"][0]["member_name"].is_string(), "{by_member}");
    let path = format!("/api/v1/teams/{id}/usage?group_by=api_key");
    let by_key = nodes.a.get(&path, Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(by_key["rows"][0]["api_key_name"], "scoped", "{by_key}");
    assert_eq!(by_key["rows"][0]["key_prefix"], json!(&key[..12]), "{by_key}");
    let path = format!("/api/v1/teams/{id}/usage/export?group_by=member");
    let csv = nodes.a.get(&path, Auth::Bearer(&owner.token)).await;
    assert_eq!(csv.status, 200, "{}", csv.text);
    let mut lines = csv.text.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("member_id,member_email,member_name,requests,"), "{header}");
    let row = lines.next().unwrap_or_default();
    assert!(row.starts_with(&format!("{},{},", member.id, member.email)), "{row}");
    nodes.a.get(&path, Auth::Bearer(&member.token)).await.forbidden("team_admin", "member");
    let own = nodes.a.get("/api/v1/usage?group_by=api_key", Auth::Bearer(&member.token)).await;
    assert_eq!(own.data(200)["rows"][0]["api_key_name"], "scoped");
    assert_eq!(by_member["totals"]["requests"], 3);
    let cost = by_member["totals"]["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0);
    let team = nodes.a.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await;
    let team = team.data(200);
    assert!((team["spend_usd"].as_f64().unwrap() - cost).abs() < 1e-9, "{team}");
    assert!(team["budget_reset_at"].is_string());
    let path = format!("/api/v1/teams/{id}/members");
    let members = nodes.a.get(&path, Auth::Bearer(&owner.token)).await.data(200)["members"].clone();
    let spend: f64 =
        members.as_array().unwrap().iter().map(|m| m["spend_usd"].as_f64().unwrap()).sum();
    assert!((spend - cost).abs() < 1e-9, "{members}");
    let path = format!("/api/v1/teams/{id}/usage?group_by=endpoint");
    let by_endpoint = nodes.a.get(&path, Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(by_endpoint["rows"][0]["endpoint"], json!("chat"), "{by_endpoint}");
    assert_eq!(by_endpoint["rows"][0]["requests"], 3, "{by_endpoint}");
    let path = format!("/api/v1/teams/{id}/usage?endpoint=embeddings");
    let none = nodes.a.get(&path, Auth::Bearer(&owner.token)).await.data(200);
    assert_eq!(none["totals"]["requests"], 0, "{none}");
    let path = format!("/api/v1/teams/{id}/usage");
    nodes.a.get(&path, Auth::Bearer(&member.token)).await.forbidden("team_admin", "member");
    let mine = nodes.a.get("/api/v1/usage", Auth::Bearer(&member.token)).await.data(200);
    assert_eq!(mine["totals"]["requests"], 3, "a member's own key stays in their usage");
    assert!(members[0]["budget_reset_at"].is_string(), "{members}");
    // Every team's usage, for platform admins only.
    let by_team = "/api/v1/usage?group_by=team";
    nodes.a.get(by_team, Auth::Bearer(&owner.token)).await.invalid("group_by");
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), nodes.a.database_url.clone());
    aigw_http::operator::set_role(&settings, &owner.email, aigw_domain::Role::Admin).await.unwrap();
    let login = nodes.a.login(&owner.email, PASSWORD).await;
    let admin_token = login["token"].as_str().unwrap().to_owned();
    let all = nodes.a.get(by_team, Auth::Bearer(&admin_token)).await.data(200);
    let row = all["rows"].as_array().unwrap().iter().find(|r| r["team_id"] == json!(id)).cloned();
    let row = row.unwrap_or_default();
    assert_eq!(row["requests"], 3, "{all}");
    assert_eq!(row["team_name"], "u", "{all}");
}

/// `auth.team_creation = "admins"`: a user who is not an admin cannot create a team.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_creation_may_be_kept_to_admins() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.auth.team_creation = aigw_service::TeamCreation::Admins;
    })
    .await;
    let user = app.new_user("no-teams").await;
    let refused = app.post("/api/v1/teams", Auth::Bearer(&user.token), &json!({"name": "x"})).await;
    refused.forbidden("admin", "user");
}

/// A member budget of $0.40 (ten calls) holds for that member's keys, in a team with a larger
/// budget; the refusal names the member and says what the call would reserve.
async fn a_member_budget_holds_and_names_its_scope(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let owner = nodes.a.new_user("mb-own").await;
    let body = json!({"name": "ml", "max_budget_usd": 100.0, "member_budget_usd": 0.40,
                      "budget_period": "monthly"});
    let id = team(&nodes.a, &owner, body).await;
    let keys = [team_scoped_key(&nodes.a, &owner, &id).await];
    let (ok, scopes) = fire([&nodes.a, &nodes.b], &keys, &slow_call(0, 390), 100).await;
    assert!((1..=10).contains(&ok), "{ok} calls of $0.0398 in $0.40");
    assert!(scopes.iter().all(|s| s == "member"), "{scopes:?}");
    let spent = spent_by(&nodes.a, &[&owner], ok).await;
    assert!(spent <= 0.40 + 1e-9, "the member spent ${spent:.4} of $0.40");
    let refused = nodes.a.chat(Auth::Bearer(&keys[0]), &slow_call(0, 390)).await;
    let details = refused.error(429, "budget_exceeded")["details"].clone();
    assert_eq!(details["scope"], "member");
    assert!(details["reserved_usd"].as_f64().unwrap() > 0.0, "{details}");
    assert!(details["reset"].is_i64(), "a monthly budget resets: {details}");
}

/// The key of a member removed from the team is refused on both nodes as soon as the removal
/// answers, and works again nowhere until they are added back.
async fn a_removed_members_key_stops_on_both_nodes(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let (owner, member) = (nodes.a.new_user("rm-own").await, nodes.a.new_user("rm-mem").await);
    let id = team(&nodes.a, &owner, json!({"name": "ops"})).await;
    add(&nodes.a, &owner, &id, &member, "member").await;
    let key = team_scoped_key(&nodes.a, &member, &id).await;
    let call = chat_body("echo", "hi");
    for node in [&nodes.a, &nodes.b] {
        answered(node.chat(Auth::Bearer(&key), &call).await);
    }
    let path = format!("/api/v1/teams/{id}/members/{}", member.id);
    nodes.a.delete(&path, Auth::Bearer(&owner.token)).await.data(200);
    for node in [&nodes.b, &nodes.a] {
        node.chat(Auth::Bearer(&key), &call)
            .await
            .forbidden("team_member", "the key's owner is not a member of its team");
    }
}

/// A team key made by a team admin keeps working on both nodes when that admin is removed;
/// it is listed by the team, not by its creator.
async fn a_team_key_survives_its_creators_removal(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let (owner, admin) = (nodes.a.new_user("tk-own").await, nodes.a.new_user("tk-adm").await);
    let id = team(&nodes.a, &owner, json!({"name": "pipeline", "rpm_limit": 1000})).await;
    add(&nodes.a, &owner, &id, &admin, "admin").await;
    let body = json!({"name": "nightly", "permissions": ["ai_gateway"]});
    let made = nodes
        .a
        .post(&format!("/api/v1/teams/{id}/api-keys"), Auth::Bearer(&admin.token), &body)
        .await
        .data(201);
    assert_eq!(
        (made["team_owned"].clone(), made["created_by"].clone()),
        (json!(true), json!(admin.id))
    );
    let key = made["key"].as_str().unwrap().to_owned();
    let mine = nodes.a.list_keys(Auth::Bearer(&admin.token)).await.data(200);
    assert_eq!(mine["api_keys"].as_array().unwrap().len(), 0, "a team key is not its creator's");
    let listed =
        nodes.a.get(&format!("/api/v1/teams/{id}/api-keys"), Auth::Bearer(&owner.token)).await;
    assert_eq!(listed.data(200)["api_keys"][0]["id"], made["id"]);
    let path = format!("/api/v1/teams/{id}/members/{}", admin.id);
    nodes.a.delete(&path, Auth::Bearer(&owner.token)).await.data(200);
    for node in [&nodes.a, &nodes.b] {
        answered(node.chat(Auth::Bearer(&key), &chat_body("echo", "still here")).await);
    }
    // Deleting the team revokes its keys on both nodes before it answers.
    nodes.a.delete(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await.data(200);
    for node in [&nodes.b, &nodes.a] {
        node.chat(Auth::Bearer(&key), &chat_body("echo", "gone")).await.unauthorized();
    }
    let gone = nodes.a.get(&format!("/api/v1/teams/{id}"), Auth::Bearer(&owner.token)).await;
    gone.not_found("team", &id);
}

/// A non-member gets 404 on the team; a member 403 on management; nobody outside can scope a
/// key to it; the last owner cannot leave.
async fn who_may_see_and_manage_a_team(backend: Backend) {
    let app = spawn_app(backend).await;
    let (owner, member, stranger) = (
        app.new_user("acc-own").await,
        app.new_user("acc-mem").await,
        app.new_user("acc-out").await,
    );
    let id = team(&app, &owner, json!({"name": "core"})).await;
    add(&app, &owner, &id, &member, "member").await;
    let path = format!("/api/v1/teams/{id}");
    app.get(&path, Auth::Bearer(&stranger.token)).await.not_found("team", &id);
    assert_eq!(app.get(&path, Auth::Bearer(&member.token)).await.data(200)["role"], "member");
    let patch = app
        .request(reqwest::Method::PATCH, &path, Auth::Bearer(&member.token))
        .json(&json!({"max_budget_usd": 1.0}));
    app.send(patch).await.forbidden("team_admin", "member");
    let scoped = json!({"name": "x", "permissions": ["ai_gateway"], "team_id": id});
    app.create_key_raw(Auth::Bearer(&stranger.token), &scoped).await.not_found("team", &id);
    let leave = format!("/api/v1/teams/{id}/members/{}", owner.id);
    app.delete(&leave, Auth::Bearer(&owner.token)).await.invalid("user_id");
    let members = app.get(&format!("{path}/members"), Auth::Bearer(&member.token)).await;
    assert_eq!(members.data(200)["members"].as_array().unwrap().len(), 2);
    let mine = app.get("/api/v1/teams", Auth::Bearer(&member.token)).await.data(200);
    assert_eq!(mine["teams"][0]["id"], json!(id));
    let theirs = app.get("/api/v1/teams", Auth::Bearer(&stranger.token)).await.data(200);
    assert_eq!(theirs["teams"], json!([]));
}

/// A team's `allowed_models` applies to its keys on top of each key's own.
async fn team_models_intersect_with_the_keys(backend: Backend) {
    let app = spawn_app(backend).await;
    let owner = app.new_user("models-own").await;
    let id = team(&app, &owner, json!({"name": "m", "allowed_models": ["gpt-4o*"]})).await;
    let key = team_scoped_key(&app, &owner, &id).await;
    app.chat(Auth::Bearer(&key), &chat_body("echo", "hi")).await.forbidden("model:echo", "gpt-4o*");
    let path = format!("/api/v1/teams/{id}");
    let widen = app
        .request(reqwest::Method::PATCH, &path, Auth::Bearer(&owner.token))
        .json(&json!({"allowed_models": ["echo", "gpt-4o*"]}));
    app.send(widen).await.data(200);
    answered(app.chat(Auth::Bearer(&key), &chat_body("echo", "hi")).await);
}

/// Adding an address without an account invites it; registering with it does not join the
/// team: the address must be verified first (here the operator vouches for it, as a
/// deployment without a mailer does; by e-mail in tests/it/account_email.rs).
async fn an_invitation_joins_once_the_address_is_verified(backend: Backend) {
    let app = spawn_app(backend).await;
    let owner = app.new_user("inv-own").await;
    let id = team(&app, &owner, json!({"name": "later"})).await;
    let email = unique_email("inv-new");
    let body = json!({"email": email, "role": "admin"});
    let path = format!("/api/v1/teams/{id}/members");
    let added = app.post(&path, Auth::Bearer(&owner.token), &body).await;
    assert_eq!(added.data(201)["status"], "invited");
    let open =
        app.get(&format!("/api/v1/teams/{id}/invitations"), Auth::Bearer(&owner.token)).await;
    assert_eq!(open.data(200)["invitations"][0]["email"], json!(email));
    let registered = app.register(&email, PASSWORD, None).await;
    let token = registered["token"].as_str().unwrap().to_owned();
    let team_path = format!("/api/v1/teams/{id}");
    app.get(&team_path, Auth::Bearer(&token)).await.not_found("team", &id);

    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::verify_email(&settings, &email).await.unwrap();
    let team = app.get(&team_path, Auth::Bearer(&token)).await.data(200);
    assert_eq!(team["role"], "admin");
    let open =
        app.get(&format!("/api/v1/teams/{id}/invitations"), Auth::Bearer(&owner.token)).await;
    assert_eq!(open.data(200)["invitations"], json!([]));
}

/// Open invitations, to register and to join a team, are listed and revoked by the admin API
/// and by the operator's command (`aigw admin revoke-invitation`).
async fn invitations_are_listed_and_revoked_by_api_and_operator(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = app.new_user("inv-admin").await;
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &admin.email, aigw_domain::Role::Admin).await.unwrap();
    let auth = Auth::Bearer(&admin.token);
    let body = json!({"email": unique_email("inv-reg")});
    let made = app.post("/api/v1/admin/invitations", auth, &body).await.data(201);
    let id = made["id"].as_str().unwrap().to_owned();
    let open = app.get("/api/v1/admin/invitations", auth).await.data(200);
    assert_eq!(open["invitations"][0]["id"], json!(id));
    app.delete(&format!("/api/v1/admin/invitations/{id}"), auth).await.data(200);
    let open = app.get("/api/v1/admin/invitations", auth).await.data(200);
    assert_eq!(open["invitations"], json!([]));
    app.delete(&format!("/api/v1/admin/invitations/{id}"), auth).await.not_found("invitation", &id);

    let team_id = team(&app, &admin, json!({"name": "inv"})).await;
    let path = format!("/api/v1/teams/{team_id}/members");
    let invited = app.post(&path, auth, &json!({"email": unique_email("inv-team")})).await;
    let invitation = invited.data(201)["invitation"]["id"].as_str().unwrap().to_owned();
    aigw_http::operator::revoke_invitation(&settings, &invitation).await.unwrap();
    let open = app.get(&format!("/api/v1/teams/{team_id}/invitations"), auth).await.data(200);
    assert_eq!(open["invitations"], json!([]));
    assert!(aigw_http::operator::revoke_invitation(&settings, &invitation).await.is_err());
}
