//! Refresh-token rotation under stress: grace window, concurrency, absolute
//! lifetime, plus concurrent registration.

use crate::common;

use common::*;
use serde_json::json;
use std::time::Duration;

backend_tests!(
    parent_replayed_inside_grace_gets_the_same_successor,
    grandparent_replayed_inside_grace_revokes_the_family,
    parent_replayed_after_grace_revokes_the_family,
    concurrent_refreshes_do_not_fork,
    concurrent_refreshes_without_grace_never_fork,
    refresh_lifetime_is_absolute_from_login,
    concurrent_registrations_of_one_email,
    logout_with_an_api_key_is_refused,
    refresh_replay_on_one_node_ends_the_session_on_another,
);

async fn parent_replayed_inside_grace_gets_the_same_successor(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.auth.refresh_reuse_grace_secs = 10).await;
    let user = app.new_user("grace").await;
    let first = app.refresh_raw(&user.refresh_token).await.data(200);
    let again = app.refresh_raw(&user.refresh_token).await.data(200);
    assert_eq!(
        again["refresh_token"], first["refresh_token"],
        "the parent replayed inside the grace window must get the same successor"
    );
    // The successor still works and rotates normally.
    let next = app.refresh_raw(first["refresh_token"].as_str().unwrap()).await.data(200);
    assert_ne!(next["refresh_token"], first["refresh_token"]);
    app.me(Auth::Bearer(next["token"].as_str().unwrap())).await.data(200);
}

async fn grandparent_replayed_inside_grace_revokes_the_family(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.auth.refresh_reuse_grace_secs = 10).await;
    let user = app.new_user("grandparent").await;
    let t1 = app.refresh_raw(&user.refresh_token).await.data(200);
    let t2 = app.refresh_raw(t1["refresh_token"].as_str().unwrap()).await.data(200);
    // t0 is now a grandparent: refused even inside the window, and the family dies.
    app.refresh_raw(&user.refresh_token).await.error(401, "unauthorized");
    app.refresh_raw(t2["refresh_token"].as_str().unwrap()).await.error(401, "unauthorized");
    app.me(Auth::Bearer(t2["token"].as_str().unwrap())).await.unauthorized();
}

async fn parent_replayed_after_grace_revokes_the_family(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |s| s.auth.refresh_reuse_grace_secs = 1).await;
    let user = app.new_user("aftergrace").await;
    let t1 = app.refresh_raw(&user.refresh_token).await.data(200);
    advance(&clock, 2100);
    app.refresh_raw(&user.refresh_token).await.error(401, "unauthorized");
    app.refresh_raw(t1["refresh_token"].as_str().unwrap()).await.error(401, "unauthorized");
    app.me(Auth::Bearer(t1["token"].as_str().unwrap())).await.unauthorized();
}

/// Sends `n` refreshes of `token` at once.
fn race_refreshes(app: &TestApp, token: &str, n: usize) -> Vec<tokio::task::JoinHandle<Reply>> {
    (0..n)
        .map(|_| {
            let client = app.client.clone();
            let url = app.url("/api/v1/auth/refresh");
            let token = token.to_owned();
            tokio::spawn(async move {
                let response =
                    client.post(url).json(&json!({"refresh_token": token})).send().await.unwrap();
                Reply::from_response(response).await
            })
        })
        .collect()
}

async fn concurrent_refreshes_do_not_fork(backend: Backend) {
    // 16 concurrent refreshes of one token produce no 5xx and exactly one successor;
    // inside the grace window (default 10 s) every racer is handed that same successor.
    let app = spawn_app(backend).await;
    let user = app.new_user("concurrent").await;
    let tasks = race_refreshes(&app, &user.refresh_token, 16);
    let mut successors = std::collections::BTreeSet::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(
            reply.status, 200,
            "concurrent refresh answered {}: {}",
            reply.status, reply.text
        );
        successors.insert(reply.data(200)["refresh_token"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        successors.len(),
        1,
        "concurrent refreshes of one token must yield exactly one successor: {successors:?}"
    );
    // That single successor is live.
    let live = successors.into_iter().next().unwrap();
    app.refresh_raw(&live).await.data(200);
}

async fn concurrent_refreshes_without_grace_never_fork(backend: Backend) {
    // With the grace window off, racers beyond the first are replays: no 5xx, no second
    // successor, and the family ends up revoked.
    let app = spawn_app_with(backend, |s| s.auth.refresh_reuse_grace_secs = 0).await;
    let user = app.new_user("concurrent0").await;
    let tasks = race_refreshes(&app, &user.refresh_token, 16);
    let mut successors = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert!(reply.status == 200 || reply.status == 401, "{}: {}", reply.status, reply.text);
        if reply.status == 200 {
            successors.push(reply.data(200)["refresh_token"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(successors.len(), 1, "{successors:?}");
    app.refresh_raw(&successors[0]).await.unauthorized();
}

async fn refresh_lifetime_is_absolute_from_login(backend: Backend) {
    let (app, clock) = spawn_app_with_clock(backend, |s| {
        s.auth.refresh_token_ttl_secs = 3;
        s.auth.refresh_reuse_grace_secs = 0;
    })
    .await;
    let user = app.new_user("absolute").await;
    advance(&clock, 1500);
    let t1 = app.refresh_raw(&user.refresh_token).await.data(200);
    advance(&clock, 2000);
    // 3.5 s after login: the session is over although t1 is only 2 s old.
    app.refresh_raw(t1["refresh_token"].as_str().unwrap()).await.error(401, "unauthorized");
}

async fn concurrent_registrations_of_one_email(backend: Backend) {
    let app = spawn_app(backend).await;
    let email = unique_email("race");
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = app.client.clone();
        let url = app.url("/api/v1/auth/register");
        let body = json!({"email": email, "password": format!("{PASSWORD} {i}")});
        tasks.push(tokio::spawn(async move {
            Reply::from_response(client.post(url).json(&body).send().await.unwrap()).await
        }));
    }
    let mut created = 0;
    for task in tasks {
        let reply = task.await.unwrap();
        match reply.status {
            201 => created += 1,
            _ => {
                reply.invalid("email");
            }
        }
    }
    assert_eq!(created, 1, "exactly one registration may win");
}

async fn logout_with_an_api_key_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("keylogout").await;
    let key = app.key(&user.token, &["admin"]).await;
    app.post_empty("/api/v1/auth/logout", Auth::Bearer(&key))
        .await
        .forbidden("access_token", "api_key");
    app.me(Auth::Bearer(&user.token)).await.data(200);
}

async fn refresh_replay_on_one_node_ends_the_session_on_another(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.auth.refresh_reuse_grace_secs = 0).await;
    let node_b = app.spawn_sibling(|s| s.auth.refresh_reuse_grace_secs = 0).await;
    let user = app.new_user("replaynodes").await;
    let t1 = app.refresh_raw(&user.refresh_token).await.data(200);
    let access = t1["token"].as_str().unwrap().to_owned();
    node_b.me(Auth::Bearer(&access)).await.data(200);
    // Replay on node B: the family dies, on node A too.
    node_b.refresh_raw(&user.refresh_token).await.error(401, "unauthorized");
    app.refresh_raw(t1["refresh_token"].as_str().unwrap()).await.error(401, "unauthorized");
    node_b.me(Auth::Bearer(&access)).await.unauthorized();
    // Node A learns of the revocation within a couple of seconds.
    let refused = || async {
        let reply = app.me(Auth::Bearer(&access)).await;
        if reply.status == 401 {
            Ok(reply)
        } else {
            Err(reply.text)
        }
    };
    let what = "node A still accepts the access token of a revoked session";
    eventually(what, Duration::from_secs(3), refused).await.unauthorized();
}
