//! Unauthenticated callers cannot buy database or hashing work without limit:
//! failed authentication is limited per client IP before any lookup
//! (`auth_failure`), login per IP across e-mails (`login_ip`), the hashing queue is bounded
//! (503 with `Retry-After` when full), and an unknown refresh token costs one read, never a
//! write transaction.

use crate::common;

use crate::db_faults::{hold_sqlite_write_lock, pg_read_only};
use aigw_service::rate_limit::PolicyConfig;
use common::*;
use std::time::{Duration, Instant};

backend_tests!(
    failed_authentication_is_limited_per_ip_before_any_lookup,
    login_is_limited_per_ip_across_emails,
    the_hashing_queue_is_bounded,
    an_unknown_refresh_token_opens_no_write_transaction,
    failed_authentication_limit_is_shared_through_redis,
);

fn refused(reply: &Reply, policy: &str) {
    reply.error(429, "rate_limit_exceeded");
    assert!(reply.header("retry-after").is_some(), "{reply:?}");
    let p = reply.header("ratelimit-policy").unwrap_or_default();
    assert!(p.starts_with(&format!("\"{policy}\"")), "policy {p}");
}

async fn failed_authentication_is_limited_per_ip_before_any_lookup(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.rate_limit.enabled = true;
        s.rate_limit.policies.auth_failure = PolicyConfig::new(3, 60);
    })
    .await;
    let user = app.new_user("fail").await;
    let key = app.key(&user.token, &["read"]).await;
    // Successes do not count.
    for _ in 0..5 {
        app.me(Auth::Bearer(&key)).await.data(200);
    }
    // Three well-formed keys that pass the checksum but were never issued: one lookup each.
    let forged = flip_char(&key, 10);
    let unknown = {
        // A valid checksum over other random characters: take another user's real key format
        // by creating and deleting a key.
        let data = app.create_key(&user.token, &["read"], None).await;
        app.delete_key(Auth::Bearer(&user.token), data["id"].as_str().unwrap()).await.data(200);
        data["key"].as_str().unwrap().to_owned()
    };
    app.me(Auth::Bearer(&forged)).await.unauthorized();
    app.me(Auth::Bearer(&unknown)).await.unauthorized();
    app.login_raw(&user.email, "wrong password entirely").await.unauthorized();
    // The address is now refused before any lookup, even with good credentials.
    refused(&app.me(Auth::Bearer(&key)).await, "auth_failure");
    refused(&app.me(Auth::Bearer(&user.token)).await, "auth_failure");
    refused(&app.login_raw(&user.email, PASSWORD).await, "auth_failure");
    refused(&app.refresh_raw(&user.refresh_token).await, "auth_failure");
    // Another address is not affected (a trusted proxy forwarding another client).
    let other = app
        .spawn_sibling(|s| {
            s.rate_limit.enabled = true;
            s.rate_limit.policies.auth_failure = PolicyConfig::new(3, 60);
        })
        .await;
    other.me(Auth::Bearer(&key)).await.data(200);
}

async fn login_is_limited_per_ip_across_emails(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.rate_limit.enabled = true;
        s.rate_limit.policies.login_ip = PolicyConfig::new(3, 60);
    })
    .await;
    for i in 0..3 {
        app.login_raw(&unique_email(&format!("rot{i}")), PASSWORD).await.unauthorized();
    }
    refused(&app.login_raw(&unique_email("rot4"), PASSWORD).await, "login_ip");
}

async fn the_hashing_queue_is_bounded(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.auth.argon2.memory_kib = 19_456;
        s.auth.argon2.iterations = 2;
        s.auth.argon2.max_concurrent = 1;
        s.auth.argon2.max_queued = 1;
    })
    .await;
    let user = app.new_user("queue").await;
    let replies =
        futures_util::future::join_all((0..16).map(|_| app.login_raw(&user.email, PASSWORD))).await;
    let mut busy = 0;
    for reply in &replies {
        match reply.status {
            200 => {}
            503 => {
                reply.error(503, "service_unavailable");
                assert_eq!(reply.header("retry-after"), Some("1"));
                busy += 1;
            }
            other => panic!("{other}: {}", reply.text),
        }
    }
    assert!(busy > 0, "16 logins at once on 1 hashing thread with a queue of 1: none refused");
    assert!(busy < 16, "at least the first login must pass");
}

async fn an_unknown_refresh_token_opens_no_write_transaction(backend: Backend) {
    let app = spawn_app_with(backend, |s| {
        s.database.acquire_timeout_secs = 2;
        s.database.statement_timeout_secs = 3;
    })
    .await;
    let user = app.new_user("guess").await;
    // Several pooled connections, all idle when the database ends them below.
    let lists = (0..20).map(|_| app.list_keys(Auth::Bearer(&user.token)));
    for reply in futures_util::future::join_all(lists).await {
        reply.data(200);
    }
    let guess = format!("aigwr_{}", "A1b2C3d4E5".repeat(5).chars().take(44).collect::<String>());
    // Writes are impossible now: SQLite's write lock is held elsewhere, PostgreSQL is
    // read-only. A guessed token still gets its 401 at once, from a read.
    let lock = match backend {
        Backend::Sqlite => {
            let path = app.database_url.trim_start_matches("sqlite://").to_owned();
            Some(tokio::task::spawn_blocking(move || hold_sqlite_write_lock(path)).await.unwrap())
        }
        Backend::Postgres => {
            pg_read_only(&app, true).await;
            // The pooled connections were ended; /readyz notices and replaces them.
            let deadline = Instant::now() + Duration::from_secs(5);
            while app.get("/readyz", Auth::None).await.status != 503 {
                assert!(Instant::now() < deadline, "readyz never noticed the read-only database");
            }
            None
        }
    };
    // Every guess, not only the first: the idle connections the database ended were
    // discarded when the first of them failed, not handed to the next callers one by one.
    for _ in 0..5 {
        let started = Instant::now();
        app.refresh_raw(&guess).await.unauthorized();
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    }
    // A real refresh needs the write and is refused cleanly meanwhile.
    let reply = app.refresh_raw(&user.refresh_token).await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    match lock {
        Some((release, handle)) => {
            release.send(()).unwrap();
            tokio::task::spawn_blocking(move || handle.join().unwrap()).await.unwrap();
        }
        None => pg_read_only(&app, false).await,
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.get("/readyz", Auth::None).await.status != 200 {
        assert!(Instant::now() < deadline, "readyz never recovered");
    }
    app.refresh_raw(&user.refresh_token).await.data(200);
}

/// With `backend = "redis"` the failures counted on one node refuse the address on another.
async fn failed_authentication_limit_is_shared_through_redis(backend: Backend) {
    use crate::rate_limit_contract::{use_redis, RedisServer};
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let prefix = format!("aigw-test:{}:", uuid::Uuid::now_v7().simple());
    let setup = |s: &mut aigw_http::settings::Settings| {
        s.rate_limit.enabled = true;
        use_redis(s, &redis);
        s.rate_limit.redis_key_prefix = prefix.clone();
        s.rate_limit.policies.auth_failure = PolicyConfig::new(2, 60);
    };
    let a = spawn_app_with(backend, setup).await;
    let user = a.new_user("redisfail").await;
    let key = a.key(&user.token, &["read"]).await;
    let b = a.spawn_sibling(setup).await;
    b.me(Auth::Bearer(&key)).await.data(200);
    a.me(Auth::Bearer(&flip_char(&key, 10))).await.unauthorized();
    a.me(Auth::Bearer(&flip_char(&key, 11))).await.unauthorized();
    refused(&b.me(Auth::Bearer(&key)).await, "auth_failure");
    refused(&a.me(Auth::Bearer(&key)).await, "auth_failure");
}
