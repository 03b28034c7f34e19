//! The real `aigw` binary (SQLite): SIGTERM writes the records still in memory before the
//! process exits, the spool left by a killed process is replayed at the next start, and the
//! streams a killed process was serving are billed at their reservation after it restarts.

use crate::binary::{free_port, register_with_key, wait_until_healthy, BIN};
use crate::common;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start(dir: &Path, port: u16, flush_interval_ms: u64) -> Child {
    start_with(dir, port, flush_interval_ms, "")
}

/// [`start`] with `extra` appended to the configuration file.
fn start_with(dir: &Path, port: u16, flush_interval_ms: u64, extra: &str) -> Child {
    let config = dir.join("aigw.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
listen = "127.0.0.1:{port}"
data_dir = "{dir}/data"
shutdown_timeout_secs = 5
[database]
url = "sqlite://{dir}/data/aigw.db"
[auth]
jwt_secret = "a test secret that is long enough!!"
[auth.argon2]
memory_kib = 8192
iterations = 1
[rate_limit]
enabled = false
[usage]
flush_interval_ms = {flush_interval_ms}
{records}
{extra}
"#,
            dir = dir.display(),
            // Per-request records on, unless `extra` says otherwise.
            records = if extra.contains("request_records") {
                ""
            } else {
                r#"request_records = "database""#
            },
        ),
    )
    .unwrap();
    Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Makes `n` echo calls; returns their request ids.
async fn calls(client: &reqwest::Client, base: &str, key: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let response = client
            .post(format!("{base}/api/v1/ai/chat/completions"))
            .header("authorization", key)
            .json(&json!({"model": "echo", "messages": [{"role": "user", "content": format!("call {i}")}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        ids.push(response.headers()["x-request-id"].to_str().unwrap().to_owned());
    }
    ids
}

/// `GET /api/v1/usage/requests` of the user of `token` (the first page).
async fn usage_requests(client: &reqwest::Client, base: &str, token: &str) -> Value {
    client
        .get(format!("{base}/api/v1/usage/requests"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The request ids in the ledger, read from the database file itself.
fn ledger_ids(dir: &Path) -> Vec<String> {
    use diesel::{Connection, QueryDsl, RunQueryDsl};
    let mut conn =
        diesel::SqliteConnection::establish(&dir.join("data/aigw.db").to_string_lossy()).unwrap();
    use aigw_persistence::schema::usage_record_batches as b;
    let batches: Vec<(String, String)> =
        b::table.select((b::user_id, b::body)).load(&mut conn).unwrap();
    let mut ids: Vec<String> = batches
        .iter()
        .flat_map(|(user, body)| aigw_persistence::usage_records::decode(user, body).unwrap())
        .map(|r| r.request_id)
        .collect();
    ids.sort();
    ids
}

/// Calls in flight in the database file itself (each running stream's row).
fn calls_in_flight(dir: &Path) -> i64 {
    use diesel::{Connection, QueryDsl, RunQueryDsl};
    let mut conn =
        diesel::SqliteConnection::establish(&dir.join("data/aigw.db").to_string_lossy()).unwrap();
    aigw_persistence::schema::calls_in_flight::table.count().get_result(&mut conn).unwrap()
}

/// Polls `check` until it holds; fails with `what` after 30 s.
async fn poll_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let holds = || {
        let holds = check();
        async move { holds.await.then_some(()).ok_or("not yet") }
    };
    common::eventually(what, Duration::from_secs(30), holds).await;
}

fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let exited = || child.try_wait().unwrap().ok_or("running");
    common::eventually_blocking("aigw did not exit", Duration::from_secs(20), exited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_writes_the_records_still_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // A flush interval far longer than the test: only the shutdown can write these.
    let mut child = start(dir.path(), port, 600_000);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&client, &base).await;
    let (_, key) = register_with_key(&client, &base, "usage-bin@example.com").await;
    let mut ids = calls(&client, &base, &key, 5).await;
    assert!(ledger_ids(dir.path()).is_empty(), "nothing written before the shutdown");
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || wait_for_exit(&mut child)).await.unwrap();
    assert_eq!(exit.code(), Some(0), "{exit:?}");
    ids.sort();
    assert_eq!(ledger_ids(dir.path()), ids);
    assert!(!dir.path().join("data/usage-spool.jsonl").exists(), "nothing left to spool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spool_of_a_killed_process_is_replayed_at_start() {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start(dir.path(), port, 100);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&client, &base).await;
    let (token, key) = register_with_key(&client, &base, "usage-bin@example.com").await;
    let mut ids = calls(&client, &base, &key, 1).await;
    poll_until("the first record was not written", || async { ledger_ids(dir.path()) == ids })
        .await;
    // Another process holds SQLite's write lock: the recorder cannot write and spools.
    let db = dir.path().join("data/aigw.db");
    let (locked, locked_rx) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let mut conn = diesel::SqliteConnection::establish(&db.to_string_lossy()).unwrap();
        conn.batch_execute("PRAGMA busy_timeout = 10000; BEGIN EXCLUSIVE;").unwrap();
        locked.send(()).unwrap();
        let _ = release_rx.recv_timeout(Duration::from_secs(60));
        conn.batch_execute("COMMIT;").unwrap();
    });
    locked_rx.recv().unwrap();
    ids.extend(calls(&client, &base, &key, 5).await);
    poll_until("the records were not spooled", || async {
        let ready: Value =
            client.get(format!("{base}/readyz")).send().await.unwrap().json().await.unwrap();
        ready["usage"]["spooled"].as_u64().unwrap_or(0) >= 5
    })
    .await;
    // kill -9: no shutdown, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    release.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(ledger_ids(dir.path()).len(), 1, "only the call before the lock was written");

    let mut child = start(dir.path(), port, 100);
    wait_until_healthy(&client, &base).await;
    ids.sort();
    poll_until("the spool was not replayed", || async {
        let page = usage_requests(&client, &base, &token).await;
        let mut recorded: Vec<String> = page["data"]["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["request_id"].as_str().unwrap().to_owned())
            .collect();
        recorded.sort();
        recorded == ids
    })
    .await;
    let spool_files: Vec<_> = std::fs::read_dir(dir.path().join("data"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("usage-spool"))
        .collect();
    assert!(spool_files.is_empty(), "replayed spool files are removed: {spool_files:?}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_cut_by_kill_9_are_billed_at_their_reservation_after_restart() {
    let upstream = crate::common::upstream::FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Calls in flight are written every 100 ms; a node silent for 1 s counts as stopped.
    let extra = format!(
        r#"interrupted_after_secs = 1
[[providers]]
name = "up"
base_url = "{}"
models = ["up-slow"]
prices = {{ "up-slow" = {{ input_per_million = 1000.0, output_per_million = 2000.0 }} }}
"#,
        upstream.base_url
    );
    let mut child = start_with(dir.path(), port, 100, &extra);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&client, &base).await;
    let (token, key) = register_with_key(&client, &base, "killed@example.com").await;
    // 40 streams (4 s each) whose callers already have a 200 and the first piece of their
    // answer, opened at once.
    let open = (0..40).map(|_| {
        let request = client
            .post(format!("{base}/api/v1/ai/chat/completions"))
            .header("authorization", &key)
            .json(&json!({"model": "up-slow", "stream": true, "max_tokens": 100,
                "messages": [{"role": "user", "content": "tell me a long story"}]}));
        async move {
            let mut response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            let id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
            assert!(response.chunk().await.unwrap().is_some(), "a first piece");
            (id, response)
        }
    });
    let (mut ids, streams): (Vec<String>, Vec<_>) =
        futures_util::future::join_all(open).await.into_iter().unzip();
    // The calls in flight are in the database (written within a flush interval).
    poll_until("the calls in flight were not written", || async {
        calls_in_flight(dir.path()) == 40
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    drop(streams);
    assert!(ledger_ids(dir.path()).is_empty(), "nothing was recorded before the kill");

    let mut child = start_with(dir.path(), port, 100, &extra);
    wait_until_healthy(&client, &base).await;
    ids.sort();
    let billed = || async {
        let page = usage_requests(&client, &base, &token).await;
        let records = page["data"]["requests"].as_array().cloned().unwrap_or_default();
        if records.len() >= ids.len() {
            Ok(records)
        } else {
            Err(page)
        }
    };
    let what = "the interrupted streams were not billed";
    let records = common::eventually(what, Duration::from_secs(30), billed).await;
    let mut recorded: Vec<String> =
        records.iter().map(|r| r["request_id"].as_str().unwrap().to_owned()).collect();
    recorded.sort();
    assert_eq!(recorded, ids);
    for record in &records {
        assert_eq!(record["outcome"], "interrupted", "{record}");
        assert_eq!(record["estimated"], true, "{record}");
        // Billed at the worst case: at least the 100 completion tokens at 2000 USD/M.
        assert!(record["cost_usd"].as_f64().unwrap() >= 0.2, "{record}");
        assert!(record["completion_tokens"].as_u64().unwrap() >= 100, "{record}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Calls counted in the rollups, read from the database file itself.
fn summed_calls(dir: &Path) -> u64 {
    use diesel::{Connection, QueryDsl, RunQueryDsl};
    let mut conn =
        diesel::SqliteConnection::establish(&dir.join("data/aigw.db").to_string_lossy()).unwrap();
    let sum: Option<i64> = aigw_persistence::schema::usage_daily::table
        .select(diesel::dsl::sql::<diesel::sql_types::Nullable<diesel::sql_types::BigInt>>(
            "CAST(SUM(requests) AS BIGINT)",
        ))
        .first(&mut conn)
        .unwrap();
    u64::try_from(sum.unwrap_or(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_at_most_the_calls_of_the_last_flush_interval() {
    const INTERVAL_MS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = start_with(dir.path(), port, INTERVAL_MS, r#"request_records = "none""#);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&client, &base).await;
    let (_token, key) = register_with_key(&client, &base, "usage-kill@example.com").await;
    // Eight clients call in a loop, noting when each answer came; the process is killed while
    // they run.
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (client, base, key) = (client.clone(), base.clone(), key.clone());
            let (answered, stop) = (answered.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let sent = client
                        .post(format!("{base}/api/v1/ai/chat/completions"))
                        .header("authorization", &key)
                        .json(&json!({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}))
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status() == 200 => answered.lock().unwrap().push(Instant::now()),
                        _ => break,
                    }
                }
            })
        })
        .collect();
    // The load runs across several flushes before the kill.
    let flushed = || async {
        let ready: Value =
            client.get(format!("{base}/readyz")).send().await.unwrap().json().await.unwrap();
        match ready["usage"]["flushes"].as_u64() {
            Some(4..) => Ok(()),
            _ => Err(ready),
        }
    };
    common::eventually("the recorder did not flush 4 times", Duration::from_secs(30), flushed)
        .await;
    child.kill().unwrap();
    let killed_at = Instant::now();
    child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    let answered = answered.lock().unwrap().clone();
    let total = answered.len() as u64;
    assert!(total > 100, "the load ran: {total} calls");
    // The documented bound: the calls of the last interval, and a flush whose write was in
    // flight (milliseconds here): two intervals before the kill.
    let window = Duration::from_millis(2 * INTERVAL_MS);
    let recent = answered.iter().filter(|t| killed_at.duration_since(**t) <= window).count() as u64;

    let mut child = start_with(dir.path(), port, INTERVAL_MS, r#"request_records = "none""#);
    wait_until_healthy(&client, &base).await;
    let counted = summed_calls(dir.path());
    child.kill().unwrap();
    child.wait().unwrap();
    // A call answered as the process died may be counted without its answer reaching the
    // client: at most one per client.
    assert!(counted <= total + 8, "never more than made: {counted} counted, {total} answered");
    let lost = total.saturating_sub(counted);
    assert!(
        lost <= recent,
        "lost {lost} calls, more than the {recent} answered in the last {window:?}"
    );
}
