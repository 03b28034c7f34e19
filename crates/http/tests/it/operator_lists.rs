//! The operator's lists (`aigw admin list-users`, `list-keys`, `list-teams`), run as the real
//! binary on the test server's database: JSON with `--json`, aligned columns otherwise, a
//! sentence for an empty list, and never a key's secret.

use crate::common::*;
use serde_json::{json, Value};
use std::process::{Command, Stdio};

backend_tests!(the_operator_lists_users_keys_and_teams);

/// Runs `aigw admin <args> [<extra>]` (the real binary) on `app`'s database; returns its
/// output, whatever its exit status.
pub(crate) async fn admin_command(
    app: &TestApp,
    args: &[&str],
    extra: Vec<std::ffi::OsString>,
) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("aigw.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndata_dir = \"{}/data\"\n[database]\nurl = \"{}\"\n[auth]\njwt_secret = \"{}\"\n",
            dir.path().display(),
            app.database_url,
            test_jwt_secret()
        ),
    )
    .unwrap();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(crate::binary::BIN)
            .arg("--config")
            .arg(&config)
            .arg("admin")
            .args(&args)
            .args(&extra)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// Runs `aigw admin <args>` on `app`'s database; returns its standard output (asserting exit 0).
async fn admin(app: &TestApp, args: &[&str]) -> String {
    let out = admin_command(app, args, Vec::new()).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

async fn json_list(app: &TestApp, args: &[&str]) -> Vec<Value> {
    let out = admin(app, args).await;
    serde_json::from_str::<Value>(&out)
        .unwrap_or_else(|e| panic!("{e}: {out}"))
        .as_array()
        .unwrap()
        .clone()
}

async fn the_operator_lists_users_keys_and_teams(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("listed").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let name = format!("listed-{}", uuid::Uuid::now_v7().simple());
    let body = json!({"name": name});
    app.post("/api/v1/teams", Auth::Bearer(&user.token), &body).await.data(201);

    let users = json_list(&app, &["list-users", "--email", &user.email, "--json"]).await;
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(
        (users[0]["email"].as_str(), users[0]["role"].as_str()),
        (Some(&*user.email), Some("user"))
    );
    let table = admin(&app, &["list-users", "--email", &user.email]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("id ") && lines[0].contains("verified"), "{table}");
    assert!(lines.len() == 2 && lines[1].contains(&user.email), "{table}");
    assert_eq!(admin(&app, &["list-users", "--email", "nobody-at-all@"]).await, "no users\n");

    let keys = json_list(&app, &["list-keys", "--email", &user.email, "--json"]).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0]["owner"], json!(user.email));
    assert!(key.starts_with(keys[0]["prefix"].as_str().unwrap()), "{keys:?}");
    let all = admin(&app, &["list-keys", "--limit", "10000"]).await;
    assert!(!all.contains(&key), "a key's secret in the list");

    let teams = json_list(&app, &["list-teams", "--name", &name, "--json"]).await;
    assert_eq!(teams.len(), 1, "{teams:?}");
    assert_eq!(
        (teams[0]["name"].as_str(), teams[0]["members"].as_str()),
        (Some(&*name), Some("1"))
    );
    assert_eq!(
        admin(&app, &["list-teams", "--name", "no team is called this"]).await,
        "no teams\n"
    );
    assert_eq!(
        json_list(&app, &["list-teams", "--name", "no team is called this", "--json"]).await,
        Vec::<Value>::new()
    );
}
