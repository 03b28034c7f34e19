//! Database faults get a bounded answer: a hung database (a
//! test-owned TCP proxy that stops forwarding, in front of the shared PostgreSQL; a lock
//! holder on SQLite), a full disk (SQLite on a small tmpfs the test mounts) and a read-only
//! database (PostgreSQL `default_transaction_read_only`, as after a failover) answer
//! 503 `service_unavailable` with `Retry-After` within `acquire + statement` timeout, and
//! `/readyz` follows within 2 s either way.

use crate::common;

use common::proxy::TcpProxy;
use common::*;
use diesel::{Connection, RunQueryDsl};
use serde_json::json;
use std::time::{Duration, Instant};

backend_tests!(
    hung_database_answers_503_within_the_deadline,
    refused_writes_answer_503_and_readyz_says_so,
    database_work_runs_on_at_most_pool_size_threads
);

/// acquire 1 s + statement 1 s.
const DEADLINE: Duration = Duration::from_secs(2);
/// Scheduling slack on a shared 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

fn fast_timeouts(s: &mut aigw_http::settings::Settings) {
    s.database.acquire_timeout_secs = 1;
    s.database.statement_timeout_secs = 1;
    s.database.max_connections = 2;
}

/// Asserts `reply` is a 503 `service_unavailable` with `Retry-After`, that came within `bound`.
fn assert_bounded_503(label: &str, reply: &Reply, took: Duration, bound: Duration) {
    assert_eq!(reply.status, 503, "{label}: {} {}", reply.status, reply.text);
    reply.error(503, "service_unavailable");
    assert!(
        reply.header("retry-after").is_some_and(|v| v.parse::<u64>().is_ok()),
        "{label}: {reply:?}"
    );
    eprintln!("{label}: 503 after {took:?}");
    assert!(took <= bound, "{label}: answered after {took:?}, bound {bound:?}");
}

async fn timed<F: std::future::Future<Output = Reply>>(f: F) -> (Reply, Duration) {
    let started = Instant::now();
    let reply = f.await;
    (reply, started.elapsed())
}

/// Polls `/readyz` until it answers `status`; returns how long that took.
async fn readyz_becomes(app: &TestApp, status: u16, within: Duration) -> Duration {
    let started = Instant::now();
    let answers = || async {
        let reply = app.get("/readyz", Auth::None).await;
        if reply.status == status {
            Ok(started.elapsed())
        } else {
            Err(format!("{} {}", reply.status, reply.text))
        }
    };
    eventually(&format!("/readyz did not answer {status}"), within, answers).await
}

/// A SQLite connection holding the write lock until dropped (sent `()`).
pub(crate) fn hold_sqlite_write_lock(
    path: String,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        let mut conn = diesel::SqliteConnection::establish(&path).unwrap();
        diesel::sql_query("BEGIN IMMEDIATE").execute(&mut conn).unwrap();
        diesel::sql_query("UPDATE users SET name = name").execute(&mut conn).unwrap();
        locked_tx.send(()).unwrap();
        let _ = release_rx.recv();
        diesel::sql_query("ROLLBACK").execute(&mut conn).unwrap();
    });
    locked_rx.recv().unwrap();
    (release_tx, handle)
}

async fn hung_database_answers_503_within_the_deadline(backend: Backend) {
    let admin = pg_admin_url();
    let proxy = TcpProxy::start(pg_host_port(&admin)).await;
    let port = proxy.port;
    let app = spawn_app_routed(
        backend,
        |url| if backend == Backend::Postgres { pg_via_port(url, port) } else { url.to_owned() },
        fast_timeouts,
    )
    .await;
    let user = app.new_user("hung").await;
    let key = app.key(&user.token, &["read"]).await;
    assert_eq!(app.get("/readyz", Auth::None).await.status, 200);

    // Hang: PostgreSQL stops answering (nothing is forwarded), SQLite's write lock is held.
    let lock = match backend {
        Backend::Postgres => {
            proxy.pause();
            None
        }
        Backend::Sqlite => {
            let path = app.database_url.trim_start_matches("sqlite://").to_owned();
            Some(tokio::task::spawn_blocking(move || hold_sqlite_write_lock(path)).await.unwrap())
        }
    };
    let hung_at = Instant::now();
    // More requests at once than the pool has connections (2), each needing the database.
    let mut calls = Vec::new();
    for i in 0..6 {
        let app = &app;
        let (key, token) = (key.clone(), user.token.clone());
        calls.push(async move {
            match (backend, i % 3) {
                // Reads keep working on SQLite while a writer holds the lock (WAL).
                (Backend::Postgres, 0) => {
                    ("me with a key", timed(app.me(Auth::Bearer(&key))).await)
                }
                (_, 1) => {
                    (
                        "register",
                        timed(app.register_raw(
                            &json!({"email": unique_email("h"), "password": PASSWORD}),
                        ))
                        .await,
                    )
                }
                _ => (
                    "create key",
                    timed(app.create_key_raw(
                        Auth::Bearer(&token),
                        &json!({"name": "k", "permissions": ["read"]}),
                    ))
                    .await,
                ),
            }
        });
    }
    let idempotent = async {
        let request = app
            .request(reqwest::Method::POST, "/api/v1/auth/api-keys", Auth::Bearer(&user.token))
            .header("idempotency-key", "hung-1")
            .json(&json!({"name": "k", "permissions": ["read"]}));
        timed(app.send(request)).await
    };
    let (replies, (reply, took)) =
        futures_util::future::join(futures_util::future::join_all(calls), idempotent).await;
    for (label, (reply, took)) in replies {
        assert_bounded_503(label, &reply, took, DEADLINE + SLACK);
    }
    assert_bounded_503("create key with an Idempotency-Key", &reply, took, DEADLINE + SLACK);
    let (ready, took) = timed(app.get("/readyz", Auth::None)).await;
    assert_eq!(ready.status, 503, "readyz while hung: {}", ready.text);
    assert!(took < Duration::from_secs(2), "readyz took {took:?}");
    assert!(hung_at.elapsed() < Duration::from_secs(12), "{:?}", hung_at.elapsed());
    assert_eq!(app.get("/healthz", Auth::None).await.status, 200);

    // Recovery: ready again within 2 s, and the service works without a restart.
    match lock {
        None => proxy.resume(),
        Some((release, handle)) => {
            release.send(()).unwrap();
            tokio::task::spawn_blocking(move || handle.join().unwrap()).await.unwrap();
        }
    }
    let took = readyz_becomes(&app, 200, Duration::from_secs(5)).await;
    assert!(took <= Duration::from_millis(2500), "readyz recovered after {took:?}");
    app.me(Auth::Bearer(&key)).await.data(200);
    app.create_key(&user.token, &["read"], None).await;
}

/// Mounts a tmpfs of `size` on `dir` (root only); `false` when that is not possible.
fn mount_tmpfs(dir: &std::path::Path, size: &str) -> bool {
    std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` with one file until it refuses more bytes.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 4096];
    while file.write_all(&block).is_ok() {}
    let _ = file.sync_all();
    path
}

/// Makes the test's PostgreSQL database read-only (or writable again) for new sessions, and
/// ends the current ones so the pool reconnects under the new setting.
pub(crate) async fn pg_read_only(app: &TestApp, on: bool) {
    let name = pg_db_name(&app.database_url);
    let value = if on { "on" } else { "off" };
    tokio::task::spawn_blocking(move || {
        pg_admin(&format!("ALTER DATABASE \"{name}\" SET default_transaction_read_only = {value}"));
        pg_admin(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ));
    })
    .await
    .unwrap();
}

fn pg_db_name(url: &str) -> String {
    url.rsplit('/').next().unwrap().split('?').next().unwrap().to_owned()
}

/// Writes refused by the database itself: SQLite's disk is full (`SQLITE_FULL`), PostgreSQL
/// is read-only (25006, as a replica after a failover). 503 with `Retry-After`, never 500;
/// `/readyz` says so; both recover by themselves.
async fn refused_writes_answer_503_and_readyz_says_so(backend: Backend) {
    let mount = tempfile::tempdir().unwrap();
    let (app, _unmount) = match backend {
        Backend::Sqlite => {
            if !mount_tmpfs(mount.path(), "3m") {
                eprintln!(
                    "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
                );
                eprintln!(
                    "!!! SKIPPED disk-full test: cannot mount a tmpfs (needs root)       !!!"
                );
                eprintln!(
                    "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
                );
                return;
            }
            let guard = Unmount(mount.path().to_owned());
            let url = format!("sqlite://{}", mount.path().join("aigw.db").display());
            (spawn_app_routed(backend, |_| url, fast_timeouts).await, Some(guard))
        }
        Backend::Postgres => (spawn_app_with(backend, fast_timeouts).await, None),
    };
    let user = app.new_user("full").await;
    let key = app.key(&user.token, &["read"]).await;
    assert_eq!(app.get("/readyz", Auth::None).await.status, 200);

    let filler = match backend {
        Backend::Sqlite => Some(fill(mount.path())),
        Backend::Postgres => {
            pg_read_only(&app, true).await;
            None
        }
    };
    // Writes until one is refused; none may be a 500.
    let mut refused = None;
    for i in 0..200 {
        let body = json!({"name": format!("k{i}-{}", "x".repeat(90)), "permissions": ["read"]});
        let (reply, took) = timed(app.create_key_raw(Auth::Bearer(&user.token), &body)).await;
        assert_ne!(reply.status, 500, "write {i}: {}", reply.text);
        if reply.status != 201 {
            assert_bounded_503("create key", &reply, took, DEADLINE + SLACK);
            refused = Some(i);
            break;
        }
    }
    assert!(refused.is_some(), "no write was refused");
    readyz_becomes(&app, 503, Duration::from_secs(2) + SLACK).await;
    // Reads still work.
    app.me(Auth::Bearer(&key)).await.data(200);

    match filler {
        Some(path) => std::fs::remove_file(path).unwrap(),
        None => {
            pg_read_only(&app, false).await;
        }
    }
    readyz_becomes(&app, 200, Duration::from_secs(5)).await;
    app.create_key(&user.token, &["read"], None).await;
}

/// Database work runs on threads of its own (`aigw-db`), never more of them than the pool has
/// connections however many calls wait: a hung database can hold no more (docs/deploy.md).
async fn database_work_runs_on_at_most_pool_size_threads(backend: Backend) {
    use aigw_persistence::{DatabaseUrl, Pool, PoolOptions};
    let app = spawn_app(backend).await;
    let url = DatabaseUrl::parse(&app.database_url).unwrap();
    let options = PoolOptions { max_connections: 3, ..PoolOptions::default() };
    let db = aigw_service::Db::new(Pool::new(&url, &options).unwrap()).unwrap();
    let calls = (0..40).map(|_| {
        let db = db.clone();
        async move {
            db.run(|_conn| {
                // Real time: each call holds its connection a while, so that the 40 overlap.
                std::thread::sleep(Duration::from_millis(5));
                let thread = std::thread::current();
                Ok((thread.id(), thread.name().map(str::to_owned)))
            })
            .await
            .unwrap()
        }
    });
    let ran_on = futures_util::future::join_all(calls).await;
    assert!(ran_on.iter().all(|(_, name)| name.as_deref() == Some("aigw-db")), "{ran_on:?}");
    let threads: std::collections::HashSet<_> = ran_on.iter().map(|(id, _)| *id).collect();
    assert!((1..=3).contains(&threads.len()), "{} threads: {ran_on:?}", threads.len());
}
