//! The database away for 5 s under load: no record is lost. Records made meanwhile wait in
//! the spool file and are replayed once the database answers again.
//!
//! PostgreSQL: the test's own database refuses connections (the machine's server keeps
//! running). SQLite: another process-level connection holds the write lock
//! (`BEGIN EXCLUSIVE`), as a long backup or a stuck writer would.

use super::*;
use common::upstream::FakeUpstream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

backend_tests!(database_away_for_five_seconds_under_load_loses_no_record);

const OUTAGE: Duration = Duration::from_secs(5);

/// Takes the database away for [`OUTAGE`]; returns when it is back.
async fn outage(app: &TestApp, taken: tokio::sync::oneshot::Sender<()>) {
    match app.backend {
        Backend::Postgres => {
            pg_set_reachable(&app.database_url, false).await;
            let _ = taken.send(());
            tokio::time::sleep(OUTAGE).await;
            pg_set_reachable(&app.database_url, true).await;
        }
        Backend::Sqlite => {
            use diesel::connection::SimpleConnection;
            use diesel::Connection;
            let path = app.database_url.trim_start_matches("sqlite://").to_owned();
            tokio::task::spawn_blocking(move || {
                let mut conn = diesel::SqliteConnection::establish(&path).unwrap();
                conn.batch_execute("PRAGMA busy_timeout = 10000; BEGIN EXCLUSIVE;").unwrap();
                let _ = taken.send(());
                std::thread::sleep(OUTAGE);
                conn.batch_execute("COMMIT;").unwrap();
            })
            .await
            .unwrap();
        }
    }
}

async fn database_away_for_five_seconds_under_load_loses_no_record(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |s| {
        s.database.acquire_timeout_secs = 1;
    })
    .await;
    // A first call records the key's use (`last_used_at`), so the load below writes nothing
    // on the request path.
    let first = app.chat(Auth::Bearer(&key), &chat_body("echo", "warm up")).await;
    let mut made: Vec<String> = vec![first.header("x-request-id").unwrap().to_owned()];
    let app = Arc::new(app);
    let made_during = Arc::new(Mutex::new(Vec::new()));
    // Slow streams, authenticated before the outage, that finish during it.
    let streams: Vec<_> = (0..20)
        .map(|_| {
            let (app, key) = (app.clone(), key.clone());
            tokio::spawn(async move {
                let body = json!({"model": "up-slow", "stream": true,
                    "messages": [{"role": "user", "content": "hello world"}]});
                let reply = app.chat(Auth::Bearer(&key), &body).await;
                assert_eq!(reply.status, 200, "{}", reply.text);
                reply.header("x-request-id").unwrap().to_owned()
            })
        })
        .collect();
    // Steady load on the echo model throughout (bounded: it stops after the outage).
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (app, key, stop, made) =
                (app.clone(), key.clone(), stop.clone(), made_during.clone());
            tokio::spawn(async move {
                let mut refused = 0;
                for i in 0..5000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let reply = app
                        .chat(Auth::Bearer(&key), &chat_body("echo", &format!("load {i}")))
                        .await;
                    match reply.status {
                        200 => made
                            .lock()
                            .unwrap()
                            .push(reply.header("x-request-id").unwrap().to_owned()),
                        // Authentication needs the database (PostgreSQL away): refused, never
                        // routed, so not metered.
                        503 => refused += 1,
                        other => panic!("unexpected {other}: {}", reply.text),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                refused
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (taken, taken_rx) = tokio::sync::oneshot::channel();
    let away = {
        let app = app.clone();
        tokio::spawn(async move { outage(&app, taken).await })
    };
    taken_rx.await.unwrap();
    // While the database is away the recorder spools: /readyz shows it (and stays ready on
    // SQLite, whose reads still work).
    let deadline = Instant::now() + OUTAGE;
    let mut spooled = 0;
    while spooled == 0 && Instant::now() < deadline {
        let ready = app.get("/readyz", Auth::None).await.json();
        spooled = ready["usage"]["spooled"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(spooled > 0, "records made during the outage must go to the spool");
    away.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for stream in streams {
        made.push(stream.await.unwrap());
    }
    for task in load {
        task.await.unwrap();
    }
    made.extend(made_during.lock().unwrap().iter().cloned());
    made.sort();
    assert!(made.len() > 30, "the load made only {} calls", made.len());
    // Every call answered 200 is in the ledger once: nothing lost, nothing doubled.
    let records = wait_for_records(&app, Auth::Bearer(&user.token), made.len()).await;
    let mut recorded: Vec<String> =
        records.iter().map(|r| r["request_id"].as_str().unwrap().to_owned()).collect();
    recorded.sort();
    assert_eq!(recorded, made);
    let totals =
        app.get("/api/v1/usage", Auth::Bearer(&user.token)).await.data(200)["totals"].clone();
    assert_eq!(totals["requests"], json!(made.len()), "rollups count each record once");
    // And the spool is empty again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = app.get("/readyz", Auth::None).await.json();
        if ready["usage"]["spooled"] == json!(0) && ready["usage"]["status"] == json!("ok") {
            break;
        }
        assert!(Instant::now() < deadline, "the spool did not drain: {ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
