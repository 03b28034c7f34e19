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
    // SQLite: the thread holding the write lock, and the sender that lets it commit.
    let mut holder = None;
    match app.backend {
        Backend::Postgres => pg_set_reachable(&app.database_url, false).await,
        Backend::Sqlite => {
            use diesel::connection::SimpleConnection;
            use diesel::Connection;
            let path = app.database_url.trim_start_matches("sqlite://").to_owned();
            let (held, held_rx) = tokio::sync::oneshot::channel();
            let (release, released) = tokio::sync::oneshot::channel::<()>();
            let thread = tokio::task::spawn_blocking(move || {
                let mut conn = diesel::SqliteConnection::establish(&path).unwrap();
                conn.batch_execute("PRAGMA busy_timeout = 10000; BEGIN EXCLUSIVE;").unwrap();
                let _ = held.send(());
                let _ = released.blocking_recv();
                conn.batch_execute("COMMIT;").unwrap();
            });
            held_rx.await.unwrap();
            holder = Some((release, thread));
        }
    }
    let _ = taken.send(());
    // Real time: the outage is a window of the machine's database; the pool's acquire
    // timeout, the recorder's retries and the load around it all run on the real clock.
    tokio::time::sleep(OUTAGE).await;
    match holder {
        None => pg_set_reachable(&app.database_url, true).await,
        Some((release, thread)) => {
            let _ = release.send(());
            thread.await.unwrap();
        }
    }
}

async fn database_away_for_five_seconds_under_load_loses_no_record(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, user, key, _) = app_with_upstream(backend, &upstream.base_url, |s| {
        s.database.acquire_timeout_secs = 1;
        s.providers[0].models.push("up-bill".into());
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
    // Steady load on `up-bill` throughout (bounded: it stops after the outage).
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
                    // Paced by the upstream, which answers each after 20 ms.
                    let body = json!({"model": "up-bill", "metadata": {"delay_ms": "20"},
                        "messages": [{"role": "user", "content": format!("load {i}")}]});
                    let reply = app.chat(Auth::Bearer(&key), &body).await;
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
                }
                refused
            })
        })
        .collect();
    // The streams are under way (authenticated) and the load runs before the outage starts.
    let under_way = || async {
        let requests = upstream.requests();
        let streams =
            requests.iter().filter(|r| r.body.windows(9).any(|w| w == b"\"up-slow\"")).count();
        let load = made_during.lock().unwrap().len();
        if streams >= 20 && load >= 4 {
            Ok(())
        } else {
            Err(format!("{streams} streams, {load} load calls"))
        }
    };
    eventually("the streams and the load did not start", Duration::from_secs(10), under_way).await;
    let (taken, taken_rx) = tokio::sync::oneshot::channel();
    let away = {
        let app = app.clone();
        tokio::spawn(async move { outage(&app, taken).await })
    };
    taken_rx.await.unwrap();
    // While the database is away the recorder spools: /readyz shows it (and stays ready on
    // SQLite, whose reads still work).
    let spooled = || async {
        let usage = app.get("/readyz", Auth::None).await.json()["usage"].take();
        match usage["spooled"].as_u64() {
            Some(1..) => Ok(()),
            _ => Err(usage),
        }
    };
    eventually("records made during the outage must go to the spool", OUTAGE, spooled).await;
    away.await.unwrap();
    // The load goes on after the outage, answered again.
    let before = made_during.lock().unwrap().len();
    let answered_again = || async {
        let after = made_during.lock().unwrap().len() - before;
        if after >= 8 {
            Ok(())
        } else {
            Err(after)
        }
    };
    eventually("no call answered after the outage", Duration::from_secs(15), answered_again).await;
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
    let drained = || async {
        let ready = app.get("/readyz", Auth::None).await.json();
        if ready["usage"]["spooled"] == json!(0) && ready["usage"]["status"] == json!("ok") {
            Ok(())
        } else {
            Err(ready)
        }
    };
    eventually("the spool did not drain", Duration::from_secs(30), drained).await;
}
