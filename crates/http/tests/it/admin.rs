//! Administration: roles, the admin endpoints, disabling accounts (on one node and
//! across two), and the operator commands that make the first admin.

use crate::common;
use crate::credential_cache::reply_eventually;

use aigw_domain::Role;
use common::{spawn_app, test_settings, Auth, Backend, Reply, TestApp, User};
use serde_json::{json, Value};
use std::time::Duration;

/// How soon every other node must refuse a revoked credential.
const WITHIN: Duration = Duration::from_secs(1);

/// Makes the account with `email` an admin (or a user) the way an operator does: the
/// `aigw admin set-role` code, on the app's database, outside the server.
async fn set_role(app: &TestApp, email: &str, role: Role) {
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, email, role).await.unwrap();
}

pub(crate) async fn new_admin(app: &TestApp, tag: &str) -> User {
    let user = app.new_user(tag).await;
    set_role(app, &user.email, Role::Admin).await;
    user
}

async fn patch(app: &TestApp, path: &str, auth: Auth<'_>, body: &Value) -> Reply {
    app.send(app.request(reqwest::Method::PATCH, path, auth).json(body)).await
}

fn user_path(id: &str) -> String {
    format!("/api/v1/admin/users/{id}")
}

async fn only_admins_administer(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("plain").await;
    let admin = app.new_user("boss").await;
    // Taken before the promotion: its `role` claim says `user`; the role is read from the
    // account, so it administers as soon as the promotion is made.
    let early_token = admin.token.clone();
    let paths = ["/api/v1/admin/users", "/api/v1/admin/api-keys", &user_path(&admin.id)];
    for path in paths {
        app.get(path, Auth::Bearer(&user.token)).await.forbidden("admin", "user");
        app.get(path, Auth::None).await.unauthorized();
    }
    // A user's own `admin` key is no way up.
    let user_admin_key = app.key(&user.token, &["admin"]).await;
    app.get("/api/v1/admin/users", Auth::Raw(&user_admin_key)).await.forbidden("admin", "user");
    app.post_empty("/api/v1/admin/api-keys/x/revoke", Auth::Bearer(&user.token))
        .await
        .forbidden("admin", "user");
    patch(&app, &user_path(&user.id), Auth::Bearer(&user.token), &json!({"role": "admin"}))
        .await
        .forbidden("admin", "user");
    // 403 comes before the body and query checks.
    patch(&app, &user_path(&user.id), Auth::Bearer(&user.token), &json!({"role": 5}))
        .await
        .forbidden("admin", "user");
    app.get("/api/v1/admin/users?limit=0", Auth::Bearer(&user.token))
        .await
        .forbidden("admin", "user");

    set_role(&app, &admin.email, Role::Admin).await;
    app.get("/api/v1/admin/users", Auth::Bearer(&early_token)).await.data(200);
    let read_key = app.key(&admin.token, &["read"]).await;
    app.get("/api/v1/admin/users", Auth::Raw(&read_key)).await.forbidden("admin", "read");
    let admin_key = app.key(&admin.token, &["admin"]).await;
    let shown = app.get(&user_path(&user.id), Auth::Raw(&admin_key)).await.data(200);
    assert_eq!(shown["email"], json!(user.email));
    assert_eq!((shown["role"].clone(), shown["disabled"].clone()), (json!("user"), json!(false)));
    common::assert_timestamp(&shown["created_at"]);
    common::assert_timestamp(&shown["updated_at"]);
    app.get(&user_path("01a1fb7f-0100-733f-9984-2509643042fa"), Auth::Raw(&admin_key))
        .await
        .not_found("user", "01a1fb7f-0100-733f-9984-2509643042fa");
    // The user's own view keeps the contract's shape and shows the new role.
    let me = app.me(Auth::Bearer(&admin.token)).await.data(200);
    assert_eq!(me["user"]["role"], json!("admin"));
    assert!(me["user"].get("disabled").is_none(), "{me}");
}

async fn users_are_listed_newest_first_by_pages(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "lister").await;
    let tag = format!("pg{}_x", uuid::Uuid::now_v7().simple());
    let mut ids = Vec::new();
    for i in 0..3 {
        let data = app.register(&format!("{tag}{i}@example.com"), common::PASSWORD, None).await;
        ids.push(data["user"]["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let auth = Auth::Bearer(&admin.token);
    // `_` is a literal character of the prefix, not a wildcard.
    let wildcard = tag.replace("_x", "_");
    let first = app
        .get(&format!("/api/v1/admin/users?limit=2&email={}", tag.to_uppercase()), auth)
        .await
        .data(200);
    let got: Vec<&str> =
        first["users"].as_array().unwrap().iter().map(|u| u["id"].as_str().unwrap()).collect();
    assert_eq!(got, ids[..2].iter().map(String::as_str).collect::<Vec<_>>());
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = app
        .get(&format!("/api/v1/admin/users?limit=2&email={tag}&cursor={cursor}"), auth)
        .await
        .data(200);
    assert_eq!(second["users"].as_array().unwrap().len(), 1);
    assert_eq!(second["users"][0]["id"], json!(ids[2]));
    assert_eq!(second["next_cursor"], Value::Null);
    let all = app.get(&format!("/api/v1/admin/users?email={wildcard}"), auth).await.data(200);
    assert_eq!(all["users"].as_array().unwrap().len(), 3, "{all}");
    let other = app.get("/api/v1/admin/users?email=pg%25", auth).await.data(200);
    assert_eq!(other["users"], json!([]), "% must not be a wildcard");
    app.get("/api/v1/admin/users?limit=0", auth).await.invalid("limit");
    app.get("/api/v1/admin/users?limit=201", auth).await.invalid("limit");
    app.get("/api/v1/admin/users?cursor=garbage", auth).await.invalid("cursor");
    app.get("/api/v1/admin/users?user_id=x", auth).await.invalid("user_id");
}

async fn admins_change_roles_but_not_their_own(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "chief").await;
    let user = app.new_user("deputy").await;
    let auth = Auth::Bearer(&admin.token);
    let own = user_path(&admin.id);
    patch(&app, &own, auth, &json!({"disabled": true})).await.invalid("disabled");
    patch(&app, &own, auth, &json!({"role": "user"})).await.invalid("role");
    patch(&app, &own, auth, &json!({})).await.invalid("body");
    // null means nothing here (a role or a state cannot be cleared): refused, and nothing
    // else in the body is applied (schemathesis found `{"disabled": null, "role": …}` taken).
    patch(&app, &own, auth, &json!({"disabled": null})).await.invalid("disabled");
    let promoted = app.new_user("not-by-null").await;
    let body = json!({"role": "admin", "disabled": null});
    patch(&app, &user_path(&promoted.id), auth, &body).await.invalid("disabled");
    let unchanged = app.get(&user_path(&promoted.id), auth).await.data(200);
    assert_eq!(unchanged["role"], json!("user"));
    patch(&app, &own, auth, &json!({"disable": true})).await.invalid("disable");
    patch(&app, &own, auth, &json!({"role": "root"})).await.invalid("role");
    // Changing one's own account in no real way is allowed.
    patch(&app, &own, auth, &json!({"role": "admin", "disabled": false})).await.data(200);
    patch(&app, &user_path("nope"), auth, &json!({"role": "admin"}))
        .await
        .not_found("user", "nope");

    let promoted =
        patch(&app, &user_path(&user.id), auth, &json!({"role": "admin"})).await.data(200);
    assert_eq!(promoted["role"], json!("admin"));
    app.get("/api/v1/admin/users", Auth::Bearer(&user.token)).await.data(200);
    // Two admins: the other one may demote this one.
    patch(&app, &own, Auth::Bearer(&user.token), &json!({"role": "user"})).await.data(200);
    app.get("/api/v1/admin/users", auth).await.forbidden("admin", "user");
}

async fn admins_see_and_revoke_every_key(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "keeper").await;
    let user = app.new_user("holder").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let (key, id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    app.create_key(&user.token, &["ai_gateway"], None).await;
    let auth = Auth::Bearer(&admin.token);
    let page = app
        .get(&format!("/api/v1/admin/api-keys?user_id={}&limit=1", user.id), auth)
        .await
        .data(200);
    assert_eq!(page["api_keys"].as_array().unwrap().len(), 1);
    assert_eq!(page["api_keys"][0]["user_id"], json!(user.id));
    assert!(page["api_keys"][0].get("key").is_none() && !page.to_string().contains(key));
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = app
        .get(&format!("/api/v1/admin/api-keys?user_id={}&cursor={cursor}", user.id), auth)
        .await
        .data(200);
    assert_eq!(rest["api_keys"][0]["id"], json!(id));
    assert_eq!(rest["next_cursor"], Value::Null);

    app.me(Auth::Raw(key)).await.data(200);
    let revoked =
        app.post_empty(&format!("/api/v1/admin/api-keys/{id}/revoke"), auth).await.data(200);
    common::assert_timestamp(&revoked["revoked_at"]);
    let refused = app.me(Auth::Raw(key)).await.unauthorized();
    assert_eq!(refused["details"]["hint"], json!("the API key has been revoked"));
    app.post_empty("/api/v1/admin/api-keys/nope/revoke", auth).await.not_found("api_key", "nope");
}

async fn admins_find_keys_by_their_prefix(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "finder").await;
    let user = app.new_user("prefixed").await;
    let auth = Auth::Bearer(&admin.token);
    let first = app.create_key(&user.token, &["read"], None).await;
    let second = app.create_key(&user.token, &["read"], None).await;
    let other = app.new_user("other-prefixed").await;
    app.create_key(&other.token, &["read"], None).await;
    let ids = |page: &Value| -> Vec<String> {
        page["api_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["id"].as_str().unwrap().to_owned())
            .collect()
    };
    // The whole visible prefix, and a shorter start of it, find the key (and only the keys
    // that start so: 5 random base62 characters after `aigw_` make another match unlikely).
    let prefix = first["key_prefix"].as_str().unwrap();
    assert_eq!(prefix.len(), 12);
    assert!(first["key"].as_str().unwrap().starts_with(prefix));
    for start in [prefix, &prefix[..10]] {
        let page =
            app.get(&format!("/api/v1/admin/api-keys?key_prefix={start}"), auth).await.data(200);
        assert_eq!(ids(&page), vec![first["id"].as_str().unwrap().to_owned()], "{start}: {page}");
    }
    // With the owner: both of that user's keys, newest first, paged.
    let path = format!("/api/v1/admin/api-keys?key_prefix=aigw_&user_id={}&limit=1", user.id);
    let page = app.get(&path, auth).await.data(200);
    assert_eq!(ids(&page), vec![second["id"].as_str().unwrap().to_owned()]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = app.get(&format!("{path}&cursor={cursor}"), auth).await.data(200);
    assert_eq!(ids(&rest), vec![first["id"].as_str().unwrap().to_owned()]);
    assert_eq!(rest["next_cursor"], Value::Null);
    // Case counts (base62), and no character is a wildcard.
    let swapped: String =
        prefix
            .chars()
            .map(|c| {
                if c.is_ascii_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect();
    let page =
        app.get(&format!("/api/v1/admin/api-keys?key_prefix={swapped}"), auth).await.data(200);
    assert_eq!(page["api_keys"], json!([]), "{page}");
    for bad in ["", "aigw%25", "aigw-", "aigw_%C3%A9", "aigw_01234567", "%20aigw"] {
        app.get(&format!("/api/v1/admin/api-keys?key_prefix={bad}"), auth)
            .await
            .invalid("key_prefix");
    }
    app.get("/api/v1/admin/api-keys?key_prefix=aigw_", Auth::Bearer(&user.token))
        .await
        .forbidden("admin", "user");
}

/// The error a wrong password gets, for comparing.
async fn wrong_password_error(app: &TestApp, email: &str) -> Value {
    app.login_raw(email, "not the password at all").await.unauthorized()
}

async fn disabling_ends_sessions_and_refuses_keys_until_enabled(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin = new_admin(&app, "warden").await;
    let user = app.new_user("suspect").await;
    let key = app.key(&user.token, &["read"]).await;
    app.me(Auth::Raw(&key)).await.data(200);
    let auth = Auth::Bearer(&admin.token);
    let path = user_path(&user.id);
    let changed = patch(&app, &path, auth, &json!({"disabled": true})).await.data(200);
    assert_eq!(changed["disabled"], json!(true));

    let refused = app.me(Auth::Raw(&key)).await.unauthorized();
    assert_eq!(refused["details"]["hint"], json!("the account is disabled"));
    app.me(Auth::Bearer(&user.token)).await.unauthorized();
    app.refresh_raw(&user.refresh_token).await.unauthorized();
    // A disabled account's right password gets what a wrong one gets.
    let disabled_login = app.login_raw(&user.email, &user.password).await;
    assert_eq!(disabled_login.unauthorized(), wrong_password_error(&app, &user.email).await);
    // Disabling twice changes nothing.
    patch(&app, &path, auth, &json!({"disabled": true})).await.data(200);
    // A role change and a disabling at once: two audit events, each with its own id (they
    // shared one: 500 on the second insert, found by schemathesis).
    let both = app.new_user("both-at-once").await;
    let body = json!({"role": "admin", "disabled": true});
    let changed = patch(&app, &user_path(&both.id), auth, &body).await.data(200);
    assert_eq!(
        (changed["role"].clone(), changed["disabled"].clone()),
        (json!("admin"), json!(true))
    );
    let events = app.get(&format!("/api/v1/admin/audit?user_id={}", both.id), auth).await.data(200)
        ["events"]
        .clone();
    let actions: Vec<&str> =
        events.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert!(actions.contains(&"role_changed") && actions.contains(&"user_disabled"), "{events}");

    let enabled = patch(&app, &path, auth, &json!({"disabled": false})).await.data(200);
    assert_eq!(enabled["disabled"], json!(false));
    app.me(Auth::Raw(&key)).await.data(200);
    app.me(Auth::Bearer(&user.token)).await.unauthorized(); // sessions stay ended
    app.login(&user.email, &user.password).await;
}

async fn disabling_and_demoting_hold_on_another_node_within_a_second(backend: Backend) {
    let a = spawn_app(backend).await;
    let b = a.spawn_sibling(|_| {}).await;
    let admin = new_admin(&a, "node-admin").await;
    let other_admin = new_admin(&a, "node-admin2").await;
    let user = a.new_user("node-user").await;
    let key = a.key(&user.token, &["read"]).await;
    // Warm node B's caches with every credential first.
    for _ in 0..3 {
        b.me(Auth::Raw(&key)).await.data(200);
        b.me(Auth::Bearer(&user.token)).await.data(200);
        b.get("/api/v1/admin/users", Auth::Bearer(&other_admin.token)).await.data(200);
    }
    patch(&a, &user_path(&user.id), Auth::Bearer(&admin.token), &json!({"disabled": true}))
        .await
        .data(200);
    let refused =
        reply_eventually(WITHIN, "disabled key", || b.me(Auth::Raw(&key)), |r| r.status == 401)
            .await
            .unauthorized();
    assert_eq!(refused["details"]["hint"], json!("the account is disabled"));
    reply_eventually(
        WITHIN,
        "disabled session",
        || b.me(Auth::Bearer(&user.token)),
        |r| r.status == 401,
    )
    .await
    .unauthorized();

    patch(&a, &user_path(&other_admin.id), Auth::Bearer(&admin.token), &json!({"role": "user"}))
        .await
        .data(200);
    reply_eventually(
        WITHIN,
        "demoted admin",
        || b.get("/api/v1/admin/users", Auth::Bearer(&other_admin.token)),
        |r| r.status == 403,
    )
    .await
    .forbidden("admin", "user");
    patch(&a, &user_path(&user.id), Auth::Bearer(&admin.token), &json!({"disabled": false}))
        .await
        .data(200);
    reply_eventually(WITHIN, "re-enabled key", || b.me(Auth::Raw(&key)), |r| r.status == 200).await;
    drop(b);
}

backend_tests!(
    only_admins_administer,
    users_are_listed_newest_first_by_pages,
    admins_change_roles_but_not_their_own,
    admins_see_and_revoke_every_key,
    admins_find_keys_by_their_prefix,
    disabling_ends_sessions_and_refuses_keys_until_enabled,
    disabling_and_demoting_hold_on_another_node_within_a_second,
);

/// `aigw admin create-user` and `set-role`, the real binary on a configured SQLite file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_commands_make_the_first_admin() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let config = crate::binary::write_config(dir.path(), crate::binary::free_port(), 9);
    // What the last command printed on stdout alone (its log lines go to stderr).
    let last_stdout = std::sync::Mutex::new(String::new());
    let run = |args: &[&str], stdin: Option<&str>| {
        let mut child = Command::new(crate::binary::BIN)
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        *last_stdout.lock().unwrap() = stdout.clone();
        (out.status.success(), stdout + &String::from_utf8_lossy(&out.stderr))
    };
    let create = [
        "admin",
        "create-user",
        "--email",
        "Root@Example.com",
        "--name",
        "Root",
        "--role",
        "admin",
        "--password-stdin",
    ];
    let (ok, out) = run(&create, Some("correct horse battery staple\n"));
    assert!(ok, "{out}");
    assert!(out.contains("root@example.com") && out.contains("role=admin"), "{out}");
    assert!(!out.contains("correct horse"), "the password was echoed: {out}");
    let stdout = last_stdout.lock().unwrap().clone();
    assert!(
        stdout.starts_with("created ") && stdout.lines().count() == 1,
        "stdout holds the result alone: {stdout:?}"
    );
    assert!(!stdout.contains('\u{1b}'), "no escape codes on a pipe: {stdout:?}");
    let (ok, out) = run(&create, Some("correct horse battery staple\n"));
    assert!(!ok && out.contains("email: is already registered"), "{out}");
    let weak =
        ["admin", "create-user", "--email", "b@example.com", "--role", "user", "--password-stdin"];
    let (ok, out) = run(&weak, Some("short\n"));
    assert!(!ok && out.contains("password"), "{out}");
    // Without --password-stdin and no terminal: a clear refusal, not a hang.
    let (ok, out) = run(&weak[..6], None);
    assert!(!ok && out.contains("--password-stdin"), "{out}");
    let (ok, out) =
        run(&["admin", "set-role", "--email", "root@example.com", "--role", "user"], None);
    assert!(ok && out.contains("role=user"), "{out}");
    let (ok, out) =
        run(&["admin", "set-role", "--email", "nobody@example.com", "--role", "admin"], None);
    assert!(!ok && out.contains("no user"), "{out}");
    let (ok, out) =
        run(&["admin", "set-role", "--email", "root@example.com", "--role", "root"], None);
    assert!(!ok, "{out}");

    // The account works: log in on a server started on that database.
    let url = format!("sqlite://{}/data/aigw.db", dir.path().display());
    let (ok, out) =
        run(&["admin", "set-role", "--email", "root@example.com", "--role", "admin"], None);
    assert!(ok, "{out}");
    let app = common::spawn_app_routed(Backend::Sqlite, |_| url, |_| {}).await;
    let login = app.login("root@example.com", "correct horse battery staple").await;
    assert_eq!(login["user"]["role"], json!("admin"));
    let token = login["token"].as_str().unwrap();
    let users = app.get("/api/v1/admin/users", Auth::Bearer(token)).await.data(200);
    assert_eq!(users["users"][0]["email"], json!("root@example.com"));
}
