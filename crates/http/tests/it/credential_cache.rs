//! The credential caches and the change feed that invalidates them, on two nodes
//! sharing one database. Every credential is used on node B first, so that B holds it in its
//! caches, before it is revoked, deleted or changed on node A.

use crate::common;

use aigw_domain::{ApiKeySecret, CredentialChangeKind};
use aigw_persistence::{changes, transaction, DatabaseUrl, DbConnection, Pool, PoolOptions};
use common::{spawn_app_with, Auth, Backend, Reply, TestApp};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use serde_json::Value;
use std::future::Future;
use std::time::Duration;

/// How soon every other node must refuse a revoked credential.
const WITHIN: Duration = Duration::from_secs(1);

/// A connection of the test's own to the app's database (not through the app).
fn direct_connection(app: &TestApp) -> DbConnection {
    let url = DatabaseUrl::parse(&app.database_url).unwrap();
    Pool::new(&url, &PoolOptions::default()).unwrap().dedicated_connection().unwrap()
}

async fn on_db<T: Send + 'static>(
    app: &TestApp,
    f: impl FnOnce(&mut DbConnection) -> T + Send + 'static,
) -> T {
    let mut conn = direct_connection(app);
    tokio::task::spawn_blocking(move || f(&mut conn)).await.unwrap()
}

/// Polls `probe` until `done` holds, failing after `within`; returns the last reply.
pub(crate) async fn reply_eventually<F, Fut>(
    within: Duration,
    what: &str,
    probe: F,
    done: impl Fn(&Reply) -> bool,
) -> Reply
where
    F: Fn() -> Fut,
    Fut: Future<Output = Reply>,
{
    let check = || async {
        let reply = probe().await;
        if done(&reply) {
            Ok(reply)
        } else {
            Err(format!("still {} {}", reply.status, reply.text))
        }
    };
    common::eventually(what, within, check).await
}

async fn change_feed_status(app: &TestApp) -> Value {
    let ready = app.get("/readyz", Auth::None).await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    ready.json()["change_feed"].clone()
}

/// Waits (10 s at most) until `/readyz` reports the change feed as `status`; returns it.
async fn feed_becomes(app: &TestApp, status: &str) -> Value {
    let check = || async {
        let feed = change_feed_status(app).await;
        if feed["status"] == status {
            Ok(feed)
        } else {
            Err(feed)
        }
    };
    let what = format!("change feed never became {status}");
    common::eventually(&what, Duration::from_secs(10), check).await
}

async fn revoked_or_deleted_key_is_refused_on_a_warm_sibling_within_a_second(backend: Backend) {
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|_| {}).await;
    feed_becomes(&b, "ok").await; // B trusts its caches from here on
    let user = a.new_user("warm-keys").await;
    for action in ["revoke", "delete"] {
        let made = a.create_key(&user.token, &["read"], None).await;
        let (key, id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
        for _ in 0..3 {
            b.me(Auth::Raw(key)).await.data(200);
        }
        match action {
            "revoke" => a.revoke_key(Auth::Bearer(&user.token), id).await.data(200),
            _ => a.delete_key(Auth::Bearer(&user.token), id).await.data(200),
        };
        a.me(Auth::Raw(key)).await.unauthorized();
        reply_eventually(WITHIN, action, || b.me(Auth::Raw(key)), |r| r.status == 401)
            .await
            .unauthorized();
    }
    drop(b);
}

async fn changed_key_is_refused_on_a_warm_sibling_within_a_second(backend: Backend) {
    use aigw_persistence::schema::api_keys;
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|_| {}).await;
    feed_becomes(&b, "ok").await; // B trusts its caches from here on
    let user = a.new_user("changed-key").await;
    let made = a.create_key(&user.token, &["read"], None).await;
    let (key, id) =
        (made["key"].as_str().unwrap().to_owned(), made["id"].as_str().unwrap().to_owned());
    b.me(Auth::Raw(&key)).await.data(200);

    // A write that bypasses the feed is not seen by B: its hit costs no database read. (Every
    // write path of aigw appends to the feed; this one deliberately does not.)
    let key_id = id.clone();
    on_db(&a, move |conn| {
        diesel::update(api_keys::table.find(&key_id))
            .set(api_keys::permissions.eq("ai_gateway"))
            .execute(conn)
            .unwrap();
    })
    .await;
    b.me(Auth::Raw(&key)).await.data(200);

    // The same kind of write as a later feature (key PATCH) makes: change and feed row in one
    // transaction. B refuses the narrowed key within a second.
    let key_id = id.clone();
    on_db(&a, move |conn| {
        transaction(conn, |conn| {
            diesel::update(api_keys::table.find(&key_id))
                .set(api_keys::permissions.eq("ai_gateway"))
                .execute(conn)?;
            changes::append_change(
                conn,
                CredentialChangeKind::ApiKeyChanged,
                &key_id,
                aigw_domain::time::now(),
            )
        })
        .unwrap();
    })
    .await;
    reply_eventually(WITHIN, "changed key", || b.me(Auth::Raw(&key)), |r| r.status == 403)
        .await
        .forbidden("read", "ai_gateway");
    a.me(Auth::Raw(&key)).await.forbidden("read", "ai_gateway");
    drop(b);
}

async fn logged_out_session_is_refused_on_a_warm_sibling_within_a_second(backend: Backend) {
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|_| {}).await;
    feed_becomes(&b, "ok").await; // B trusts its caches from here on
    let user = a.new_user("warm-logout").await;
    let other = a.login(&user.email, &user.password).await;
    let other_token = other["token"].as_str().unwrap().to_owned();
    for token in [&user.token, &other_token] {
        b.me(Auth::Bearer(token)).await.data(200);
    }
    // Global logout on A ends both sessions, on B too.
    a.logout(&user.token, Some(&serde_json::json!({"scope": "global"}))).await.data(200);
    for token in [&user.token, &other_token] {
        reply_eventually(
            WITHIN,
            "logged-out session",
            || b.me(Auth::Bearer(token)),
            |r| r.status == 401,
        )
        .await
        .unauthorized();
    }
    drop(b);
}

async fn a_node_that_cannot_read_the_feed_reads_the_database_instead(backend: Backend) {
    use aigw_persistence::schema::{api_keys, sessions};
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|_| {}).await;
    feed_becomes(&b, "ok").await; // B trusts its caches from here on
    let user = a.new_user("stale-node").await;
    let made = a.create_key(&user.token, &["read"], None).await;
    let key = made["key"].as_str().unwrap().to_owned();
    let key_id = made["id"].as_str().unwrap().to_owned();
    b.me(Auth::Raw(&key)).await.data(200);
    b.me(Auth::Bearer(&user.token)).await.data(200);
    assert_eq!(change_feed_status(&b).await["status"], "ok");

    // The feed becomes unreadable: every read of it now fails, on every node.
    on_db(&a, |conn| {
        conn.batch_execute("ALTER TABLE credential_changes RENAME TO credential_changes_away")
            .unwrap()
    })
    .await;
    let feed = feed_becomes(&b, "stale").await;
    assert!(feed["lag_ms"].as_u64().unwrap() > 2000, "{feed}");
    // B still answers, from the database.
    b.me(Auth::Raw(&key)).await.data(200);
    b.me(Auth::Bearer(&user.token)).await.data(200);

    // Revocations that no feed row announces (the feed is gone): B must not serve its cached
    // key or its memory of the session.
    let (session_user, revoked_key) = (user.id.clone(), key_id.clone());
    on_db(&a, move |conn| {
        let now = aigw_domain::time::now().naive_utc();
        diesel::update(api_keys::table.find(&revoked_key))
            .set(api_keys::revoked_at.eq(now))
            .execute(conn)
            .unwrap();
        diesel::update(sessions::table.filter(sessions::user_id.eq(&session_user)))
            .set(sessions::revoked_at.eq(now))
            .execute(conn)
            .unwrap();
    })
    .await;
    b.me(Auth::Raw(&key)).await.unauthorized();
    b.me(Auth::Bearer(&user.token)).await.unauthorized();

    // The feed comes back: the tailer is restarted and catches up by itself.
    on_db(&a, |conn| {
        conn.batch_execute("ALTER TABLE credential_changes_away RENAME TO credential_changes")
            .unwrap()
    })
    .await;
    feed_becomes(&b, "ok").await;
    b.me(Auth::Raw(&key)).await.unauthorized();
    drop(b);
}

async fn negative_caching_never_refuses_a_just_created_key(backend: Backend) {
    use rand::rngs::OsRng;
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|_| {}).await;
    feed_becomes(&b, "ok").await; // B trusts its caches from here on
    let user = a.new_user("negative").await;
    // Well-formed keys nobody created are refused, twice (the second time from the cache).
    let unknown = ApiKeySecret::generate(&mut OsRng);
    for node in [&a, &b, &a, &b] {
        node.me(Auth::Raw(unknown.expose())).await.unauthorized();
    }
    // A key created now works at once, on the node that created it and on the other.
    for creator in [&a, &b] {
        let key = creator.key(&user.token, &["read"]).await;
        for node in [&a, &b] {
            node.me(Auth::Raw(&key)).await.data(200);
        }
    }
    drop(b);
}

async fn last_used_at_reaches_the_database_from_any_node(backend: Backend) {
    let a = spawn_app_with(backend, |_| {}).await;
    let b = a.spawn_sibling(|s| s.credential_cache.last_used_flush_secs = 1).await;
    let user = a.new_user("last-used").await;
    let made = a.create_key(&user.token, &["read"], None).await;
    b.me(Auth::Raw(made["key"].as_str().unwrap())).await.data(200);
    // Node A learns of B's use from the database, once B has written it.
    let listed = reply_eventually(
        Duration::from_secs(5),
        "last_used_at written by node B",
        || a.list_keys(Auth::Bearer(&user.token)),
        |r| r.status == 200 && !r.json()["data"]["api_keys"][0]["last_used_at"].is_null(),
    )
    .await;
    common::assert_timestamp(&listed.json()["data"]["api_keys"][0]["last_used_at"]);
    drop(b);
}

backend_tests!(
    revoked_or_deleted_key_is_refused_on_a_warm_sibling_within_a_second,
    changed_key_is_refused_on_a_warm_sibling_within_a_second,
    logged_out_session_is_refused_on_a_warm_sibling_within_a_second,
    a_node_that_cannot_read_the_feed_reads_the_database_instead,
    negative_caching_never_refuses_a_just_created_key,
    last_used_at_reaches_the_database_from_any_node,
);
