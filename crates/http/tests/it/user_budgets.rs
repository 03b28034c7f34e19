//! Nothing spends outside governance, black box on both backends with a fake upstream
//! (`up-bill`) that bills what it was asked for: a user's own budget holds over all their keys
//! (personal and scoped to a team) under 200 concurrent calls on two nodes, and the platform
//! default applies until an admin overrides it; a team that requires scoped keys refuses its
//! members' personal keys on every node at once; the platform may require every gateway key
//! to be scoped; a team's owners make keys for members, who are told by e-mail.

use crate::admin::new_admin;
use crate::budget_walkarounds::{billing, cluster, slow_call, Cluster};
use crate::common::smtp::SmtpServer;
use crate::common::upstream::FakeUpstream;
use crate::common::*;
use crate::key_counters_redis::RedisCounters;
use crate::rate_limit_contract::RedisServer;
use crate::teams::{add, fire, spent_by, team, team_scoped_key};
use serde_json::{json, Value};
use std::time::Duration;

backend_tests!(
    a_user_budget_holds_over_three_keys_and_two_nodes,
    a_user_budget_holds_through_redis,
    the_platform_user_budget_applies_until_an_admin_overrides_it,
    a_team_may_require_its_members_keys_to_be_scoped,
    the_platform_may_require_every_gateway_key_to_be_scoped,
    owners_make_keys_for_members,
);

async fn patch(app: &TestApp, path: &str, auth: Auth<'_>, body: &Value) -> Reply {
    app.send(app.request(reqwest::Method::PATCH, path, auth).json(body)).await
}

/// A personal key of `user` with `permissions` (no limits of its own): its secret.
async fn personal_key(app: &TestApp, user: &User, permissions: &[&str]) -> String {
    let body = json!({"name": "own", "permissions": permissions});
    let made = app.create_key_raw(Auth::Bearer(&user.token), &body).await.data(201);
    assert_eq!(made["team_id"], Value::Null);
    made["key"].as_str().unwrap().to_owned()
}

/// Sets `user`'s own budget (`null`: the platform default) as `admin`.
async fn set_user_budget(app: &TestApp, admin: &User, user: &User, usd: Value) -> Value {
    let path = format!("/api/v1/admin/users/{}", user.id);
    patch(app, &path, Auth::Bearer(&admin.token), &json!({"budget_usd": usd})).await.data(200)
}

/// A user's budget of $0.80 (twenty calls of $0.0398) holds against 200 calls at once spread
/// over three of their keys (two personal, one scoped to a team without limits) and two
/// nodes: every refusal names the user's budget, and the ledger stays within it.
async fn a_user_budget_holds_over_three_keys_and_two_nodes(backend: Backend) {
    user_budget_holds(&cluster(backend, None).await).await;
}

/// The same with the counters in Redis, shared by both nodes.
async fn a_user_budget_holds_through_redis(backend: Backend) {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let counters = RedisCounters::new(&server);
    user_budget_holds(&cluster(backend, Some(&counters)).await).await;
}

/// See [`a_user_budget_holds_over_three_keys_and_two_nodes`].
async fn user_budget_holds(nodes: &Cluster) {
    let admin = new_admin(&nodes.a, "ub-adm").await;
    let user = nodes.a.new_user("ub-user").await;
    let set = set_user_budget(&nodes.a, &admin, &user, json!(0.80)).await;
    assert_eq!(set["budget_usd"], json!(0.8), "{set}");
    let id = team(&nodes.a, &user, json!({"name": "lab"})).await;
    let keys = [
        personal_key(&nodes.a, &user, &["ai_gateway", "read"]).await,
        team_scoped_key(&nodes.a, &user, &id).await,
        personal_key(&nodes.a, &user, &["ai_gateway"]).await,
    ];
    let (ok, scopes) = fire([&nodes.a, &nodes.b], &keys, &slow_call(0, 390), 200).await;
    assert!((1..=20).contains(&ok), "{ok} calls of $0.0398 in $0.80");
    assert!(scopes.iter().all(|s| s == "user"), "{scopes:?}");
    let spent = spent_by(&nodes.a, &[&user], ok).await;
    assert!(spent <= 0.80 + 1e-9, "the user spent ${spent:.4} of $0.80");
    let refused = nodes.b.chat(Auth::Bearer(&keys[1]), &slow_call(0, 390)).await;
    let error = refused.error(429, "budget_exceeded");
    assert_eq!(error["details"]["scope"], "user", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("your budget across all your keys"), "{message}");
    assert!(error["details"]["reset"].is_i64(), "monthly by default: {error}");
    let path = format!("/api/v1/admin/users/{}", user.id);
    let shown = nodes.a.get(&path, Auth::Bearer(&admin.token)).await;
    assert_eq!(shown.data(200)["budget_usd"], json!(0.8));
}

/// `gateway.user_budget_usd` bounds every user's keys; an admin's override lifts it for one
/// user on every node before the PATCH answers, and `null` restores it. A team key spends
/// the team's money, not its creator's: the creator's spent budget does not stop it.
async fn the_platform_user_budget_applies_until_an_admin_overrides_it(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let tweak = |s: &mut aigw_http::settings::Settings| {
        billing(&upstream.base_url, None)(s);
        s.gateway.user_budget_usd = Some(0.08);
    };
    let a = spawn_app_with(backend, tweak).await;
    let b = a
        .spawn_sibling(|s| {
            billing(&upstream.base_url, None)(s);
            s.gateway.user_budget_usd = Some(0.08);
        })
        .await;
    let admin = new_admin(&a, "pd-adm").await;
    let user = a.new_user("pd-user").await;
    let key = personal_key(&a, &user, &["ai_gateway"]).await;
    let id = team(&a, &user, json!({"name": "pipelines"})).await;
    let body = json!({"name": "nightly", "permissions": ["ai_gateway"]});
    let path = format!("/api/v1/teams/{id}/api-keys");
    let team_key = a.post(&path, Auth::Bearer(&user.token), &body).await.data(201);
    let team_key = team_key["key"].as_str().unwrap().to_owned();
    let call = slow_call(0, 390);
    for _ in 0..2 {
        assert_eq!(a.chat(Auth::Bearer(&key), &call).await.status, 200);
    }
    for node in [&a, &b] {
        let refused = node.chat(Auth::Bearer(&key), &call).await;
        assert_eq!(refused.error(429, "budget_exceeded")["details"]["scope"], "user");
        assert_eq!(node.chat(Auth::Bearer(&team_key), &call).await.status, 200, "team key");
    }
    let mine = eventually("the two calls in the ledger", Duration::from_secs(10), || async {
        let mine = a.get("/api/v1/usage/budget", Auth::Bearer(&user.token)).await.data(200);
        if (mine["spent_usd"].as_f64().unwrap() - 0.0796).abs() < 1e-9 {
            Ok(mine)
        } else {
            Err(mine)
        }
    })
    .await;
    assert_eq!((&mine["limit_usd"], &mine["source"]), (&json!(0.08), &json!("platform")), "{mine}");
    assert_eq!(mine["budget_period"], "monthly");
    assert!(mine["budget_reset_at"].is_string(), "{mine}");
    let set = set_user_budget(&a, &admin, &user, json!(1.0)).await;
    assert_eq!(set["budget_usd"], json!(1.0));
    let mine = b.get("/api/v1/usage/budget", Auth::Bearer(&user.token)).await.data(200);
    assert_eq!((&mine["limit_usd"], &mine["source"]), (&json!(1.0), &json!("own")), "{mine}");
    for node in [&b, &a] {
        assert_eq!(node.chat(Auth::Bearer(&key), &call).await.status, 200, "override");
    }
    let cleared = set_user_budget(&a, &admin, &user, Value::Null).await;
    assert_eq!(cleared["budget_usd"], Value::Null);
    for node in [&b, &a] {
        let refused = node.chat(Auth::Bearer(&key), &call).await;
        assert_eq!(refused.error(429, "budget_exceeded")["details"]["scope"], "user");
    }
    let path = format!("/api/v1/admin/users/{}", user.id);
    for bad in [json!(-1), json!("ten"), json!(2e9)] {
        patch(&a, &path, Auth::Bearer(&admin.token), &json!({"budget_usd": bad}))
            .await
            .invalid("budget_usd");
    }
    patch(&a, &path, Auth::Bearer(&user.token), &json!({"budget_usd": 5}))
        .await
        .forbidden("admin", "user");
}

/// With `require_scoped_keys` on, a member's personal gateway key answers 403 on both nodes
/// as soon as the PATCH answers, a new one is refused naming `team_id`, and keys scoped to the
/// team (and personal keys without `ai_gateway`) still work; off again, or out of the team,
/// the personal key works again.
async fn a_team_may_require_its_members_keys_to_be_scoped(backend: Backend) {
    let nodes = cluster(backend, None).await;
    let (owner, member) = (nodes.a.new_user("rs-own").await, nodes.a.new_user("rs-mem").await);
    let id = team(&nodes.a, &owner, json!({"name": "research"})).await;
    add(&nodes.a, &owner, &id, &member, "member").await;
    let personal = personal_key(&nodes.a, &member, &["ai_gateway", "read"]).await;
    let scoped = team_scoped_key(&nodes.a, &member, &id).await;
    let call = chat_body("echo", "hi");
    let path = format!("/api/v1/teams/{id}");
    let (on, off) = (json!({"require_scoped_keys": true}), json!({"require_scoped_keys": false}));
    let turned_on = patch(&nodes.a, &path, Auth::Bearer(&owner.token), &on).await;
    assert_eq!(turned_on.data(200)["require_scoped_keys"], true);
    let why = format!("team {id} requires its members' gateway keys to be scoped to it");
    for node in [&nodes.b, &nodes.a] {
        node.chat(Auth::Bearer(&personal), &call).await.forbidden("team_scoped_key", &why);
        assert_eq!(node.chat(Auth::Bearer(&scoped), &call).await.status, 200);
        // The key still reads its owner's account: only gateway calls are refused.
        assert_eq!(node.get("/api/v1/auth/me", Auth::Bearer(&personal)).await.status, 200);
    }
    let body = json!({"name": "laptop", "permissions": ["ai_gateway"]});
    nodes.a.create_key_raw(Auth::Bearer(&member.token), &body).await.invalid("team_id");
    personal_key(&nodes.a, &member, &["read"]).await;
    // The owner's own personal keys are refused too: the rule is about the team's members.
    let body = json!({"name": "own", "permissions": ["ai_gateway"]});
    nodes.a.create_key_raw(Auth::Bearer(&owner.token), &body).await.invalid("team_id");
    patch(&nodes.a, &path, Auth::Bearer(&member.token), &off)
        .await
        .forbidden("team_admin", "member");
    patch(&nodes.a, &path, Auth::Bearer(&owner.token), &json!({"require_scoped_keys": null}))
        .await
        .invalid("require_scoped_keys");
    let turned_off = patch(&nodes.a, &path, Auth::Bearer(&owner.token), &off).await;
    assert_eq!(turned_off.data(200)["require_scoped_keys"], false);
    for node in [&nodes.b, &nodes.a] {
        assert_eq!(node.chat(Auth::Bearer(&personal), &call).await.status, 200);
    }
    patch(&nodes.a, &path, Auth::Bearer(&owner.token), &on).await.data(200);
    nodes.b.chat(Auth::Bearer(&personal), &call).await.forbidden("team_scoped_key", &why);
    let leave = format!("/api/v1/teams/{id}/members/{}", member.id);
    nodes.a.delete(&leave, Auth::Bearer(&member.token)).await.data(200);
    for node in [&nodes.b, &nodes.a] {
        assert_eq!(node.chat(Auth::Bearer(&personal), &call).await.status, 200, "left the team");
    }
}

/// With `gateway.require_team_scope`, a gateway key without `team_id` is refused at creation
/// and, made before the setting, on every call; keys scoped to a team work.
async fn the_platform_may_require_every_gateway_key_to_be_scoped(backend: Backend) {
    let before = spawn_app(backend).await;
    let user = before.new_user("ps-user").await;
    let old = personal_key(&before, &user, &["ai_gateway"]).await;
    let app = before.spawn_sibling(|s| s.gateway.require_team_scope = true).await;
    let call = chat_body("echo", "hi");
    let why = "the platform requires every gateway key to be scoped to a team";
    app.chat(Auth::Bearer(&old), &call).await.forbidden("team_scoped_key", why);
    let body = json!({"name": "new", "permissions": ["ai_gateway", "read"]});
    app.create_key_raw(Auth::Bearer(&user.token), &body).await.invalid("team_id");
    personal_key(&app, &user, &["read"]).await;
    let id = team(&app, &user, json!({"name": "platform"})).await;
    let scoped = team_scoped_key(&app, &user, &id).await;
    assert_eq!(app.chat(Auth::Bearer(&scoped), &call).await.status, 200);
}

/// A team's owner makes a key for a member: the member owns it (it is in their list, with
/// `created_by` naming the owner), it counts against the member's budget in the team, the
/// member is told by e-mail, and the secret is shown to the owner only. A plain member may not
/// make one, and a user outside the team gets none.
async fn owners_make_keys_for_members(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let upstream = FakeUpstream::start().await;
    let app = spawn_app_with(backend, |s| {
        billing(&upstream.base_url, None)(s);
        smtp.configure(s);
    })
    .await;
    let (owner, member) = (app.new_user("mk-own").await, app.new_user("mk-mem").await);
    let outsider = app.new_user("mk-out").await;
    let body = json!({"name": "ml", "member_budget_usd": 0.08, "budget_period": "monthly"});
    let id = team(&app, &owner, body).await;
    add(&app, &owner, &id, &member, "member").await;
    let key_body = json!({"name": "for ada", "permissions": ["ai_gateway"]});
    let path = format!("/api/v1/teams/{id}/members/{}/api-keys", member.id);
    let made = app.post(&path, Auth::Bearer(&owner.token), &key_body).await.data(201);
    assert_eq!(made["team_id"], json!(id));
    assert_eq!(made["team_owned"], false);
    assert_eq!(made["created_by"], json!(owner.id));
    let key = made["key"].as_str().unwrap().to_owned();
    let listed = app.get("/api/v1/auth/api-keys", Auth::Bearer(&member.token)).await.data(200);
    let listed = listed["api_keys"].as_array().cloned().unwrap_or_default();
    let mine = listed.iter().find(|k| k["id"] == made["id"]).expect("in the member's list");
    assert_eq!(mine["created_by"], json!(owner.id));
    assert!(mine.get("key").is_none(), "the secret is shown once, to its creator");
    let call = slow_call(0, 390);
    for _ in 0..2 {
        assert_eq!(app.chat(Auth::Bearer(&key), &call).await.status, 200);
    }
    let refused = app.chat(Auth::Bearer(&key), &call).await;
    assert_eq!(refused.error(429, "budget_exceeded")["details"]["scope"], "member");
    let mail = smtp.wait_for(&member.email, "An API key was made for you", 1).await;
    assert!(mail.text.contains("for ada"), "{}", mail.text);
    assert!(mail.text.contains(made["key_prefix"].as_str().unwrap()), "{}", mail.text);
    assert!(!mail.text.contains(&key), "the secret never travels by e-mail");
    let as_member = format!("/api/v1/teams/{id}/members/{}/api-keys", owner.id);
    app.post(&as_member, Auth::Bearer(&member.token), &key_body)
        .await
        .forbidden("team_admin", "member");
    let outside = format!("/api/v1/teams/{id}/members/{}/api-keys", outsider.id);
    let missing = app.post(&outside, Auth::Bearer(&owner.token), &key_body).await;
    missing.not_found("team_member", &outsider.id);
}
