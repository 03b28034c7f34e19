//! The `aigw` binary itself: `aigw migrate`, configuration errors, and SIGTERM draining an
//! in-flight request before exiting 0.

use crate::common;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_aigw");

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub(crate) fn write_config(dir: &Path, port: u16, upstream: u16) -> std::path::PathBuf {
    let path = dir.join("aigw.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[server]
listen = "127.0.0.1:{port}"
data_dir = "{dir}/data"
shutdown_timeout_secs = 10
[database]
url = "sqlite://{dir}/data/aigw.db"
[auth]
jwt_secret = "a test secret that is long enough!!"
[auth.argon2]
memory_kib = 8192
iterations = 1
[[providers]]
name = "slow"
kind = "openai"
base_url = "http://127.0.0.1:{upstream}"
api_key = "sk-upstream"
models = ["slow-model"]
"#,
            dir = dir.display()
        ),
    )
    .unwrap();
    path
}

/// Starts the binary on `config` in `dir` (RUST_LOG unset), its standard output to `stdout`
/// and its standard error discarded.
pub(crate) fn spawn_aigw(config: &Path, dir: &Path, stdout: Stdio) -> std::process::Child {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Appends `text` (TOML) to the configuration file `config`.
pub(crate) fn append_config(config: &Path, text: &str) {
    let mut all = std::fs::read_to_string(config).unwrap();
    all.push_str(text);
    std::fs::write(config, all).unwrap();
}

/// An upstream that answers one chat completion after `delay`, telling `started` when the
/// request has arrived.
async fn slow_upstream(delay: Duration) -> (u16, tokio::sync::oneshot::Receiver<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let _ = socket.read(&mut buf).await.unwrap();
        let _ = tx.send(());
        common::upstream::slow_down(delay).await;
        let body = json!({"id": "chatcmpl-slow", "object": "chat.completion", "model": "slow-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "late"}, "finish_reason": "stop"}]})
        .to_string();
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(response.as_bytes()).await.unwrap();
        socket.shutdown().await.ok();
    });
    (port, rx)
}

pub(crate) async fn wait_until_healthy(client: &reqwest::Client, base: &str) {
    let healthy = || async {
        match client.get(format!("{base}/healthz")).send().await {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(r.status().to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    common::eventually("aigw did not become healthy", Duration::from_secs(30), healthy).await;
}

/// Registers `email` on the server at `base` and creates an `ai_gateway` key; returns
/// (access token, key).
pub(crate) async fn register_with_key(
    client: &reqwest::Client,
    base: &str,
    email: &str,
) -> (String, String) {
    let post = |path: &str, token: Option<&str>, body: Value| {
        let mut request = client.post(format!("{base}{path}")).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let reg = post(
        "/api/v1/auth/register",
        None,
        json!({"email": email, "password": "a long passphrase"}),
    )
    .await;
    let token = reg["data"]["token"].as_str().unwrap().to_owned();
    let body = json!({"name": "test", "permissions": ["ai_gateway"]});
    let key = post("/api/v1/auth/api-keys", Some(&token), body).await;
    (token, key["data"]["key"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    drains_in_flight_requests_and_exits_zero("TERM").await;
}

/// Ctrl-C (SIGINT) drains as SIGTERM does: the request in flight gets its whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_drains_in_flight_requests_and_exits_zero() {
    drains_in_flight_requests_and_exits_zero("INT").await;
}

/// Sends `signal` while a request waits on a slow upstream: the request is answered in full,
/// then the process exits 0.
async fn drains_in_flight_requests_and_exits_zero(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (upstream, started) = slow_upstream(Duration::from_millis(1500)).await;
    let config = write_config(dir.path(), port, upstream);
    let mut child = spawn_aigw(&config, dir.path(), Stdio::null());
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&client, &base).await;

    let (_, key) = register_with_key(&client, &base, "drain@example.com").await;

    let in_flight = tokio::spawn({
        let client = client.clone();
        let url = format!("{base}/api/v1/ai/chat/completions");
        async move {
            client
                .post(url)
                .header("authorization", key)
                .json(&json!({"model": "slow-model", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
        }
    });
    started.await.unwrap();
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());

    let response = in_flight.await.unwrap().expect("in-flight request was dropped");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "late");

    let exited = || std::future::ready(child.try_wait().unwrap().ok_or("running"));
    let what = format!("aigw did not exit after SIG{signal}");
    let exit = common::eventually(&what, Duration::from_secs(15), exited).await;
    assert_eq!(exit.code(), Some(0), "exit status {exit:?}");
}

/// With `server.drain_delay_secs`, SIGTERM first makes `/readyz` answer 503 `draining` while
/// the node goes on serving (a new request still gets its answer), and only after the delay
/// does the port close and the process exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_not_ready_for_the_drain_delay_before_the_port_closes() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(dir.path(), port, free_port());
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen("[server]\n", "[server]\ndrain_delay_secs = 3\n", 1);
    std::fs::write(&config, text).unwrap();
    let mut child = spawn_aigw(&config, dir.path(), Stdio::null());
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&client, &base).await;
    assert_eq!(client.get(format!("{base}/readyz")).send().await.unwrap().status(), 200);

    let signalled = std::time::Instant::now();
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let readyz = || async {
        let reply = client.get(format!("{base}/readyz")).send().await.map_err(|e| e.to_string())?;
        if reply.status() == 503 {
            Ok(reply.json::<Value>().await.map_err(|e| e.to_string())?)
        } else {
            Err(reply.status().to_string())
        }
    };
    let draining = common::eventually("readyz answering 503", Duration::from_secs(2), readyz).await;
    assert_eq!(draining["status"], json!("draining"));
    // Still serving: a fresh connection is accepted and answered.
    let fresh = reqwest::Client::new();
    assert_eq!(fresh.get(format!("{base}/healthz")).send().await.unwrap().status(), 200);
    assert!(child.try_wait().unwrap().is_none(), "exited during the drain delay");

    let exited = || std::future::ready(child.try_wait().unwrap().ok_or("running"));
    let exit = common::eventually("aigw exiting", Duration::from_secs(15), exited).await;
    assert_eq!(exit.code(), Some(0), "exit status {exit:?}");
    let took = signalled.elapsed();
    assert!(took >= Duration::from_secs(3), "exited {took:?} after SIGTERM, before the delay");
}

#[test]
fn migrate_applies_migrations_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BIN)
        .arg("migrate")
        .current_dir(dir.path())
        .env("AIGW__DATABASE__URL", format!("sqlite://{}/db/aigw.db", dir.path().display()))
        .env("AIGW__SERVER__DATA_DIR", dir.path().join("data"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(dir.path().join("db/aigw.db").exists());
    // Running it again is a no-op.
    let again = Command::new(BIN)
        .arg("migrate")
        .current_dir(dir.path())
        .env("AIGW__DATABASE__URL", format!("sqlite://{}/db/aigw.db", dir.path().display()))
        .output()
        .unwrap();
    assert!(again.status.success());
}

#[test]
fn unknown_configuration_keys_are_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:0\"\nlisen = \"oops\"\n").unwrap();
    let output =
        Command::new(BIN).arg("--config").arg(&config).current_dir(dir.path()).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("lisen"), "{stderr}");

    let missing = Command::new(BIN)
        .arg("--config")
        .arg(dir.path().join("nope.toml"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
}

#[test]
fn production_without_a_secret_exits_with_one_line_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BIN)
        .current_dir(dir.path())
        .env("AIGW__SERVER__ENVIRONMENT", "production")
        .env("AIGW__SERVER__LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr.lines().find(|l| l.starts_with("aigw: ")).unwrap_or_default();
    assert!(line.contains("production") && line.contains("jwt_secret"), "{stderr}");
}

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// mimalloc as built (`MI_DEFAULT_ARENA_MAX_OBJECT_SIZE` in `.cargo/config.toml`) maps a
/// password hash's work area (64 MiB here) for itself, so it goes back to the system once the
/// hash is done instead of staying resident on the idle hashing thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_hash_memory_goes_back_after_the_hash() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(dir.path(), port, free_port());
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env_remove("MIMALLOC_PURGE_DELAY")
        .env_remove("MIMALLOC_ARENA_MAX_OBJECT_SIZE")
        .env("AIGW__AUTH__ARGON2__MEMORY_KIB", "65536")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&client, &base).await;
    let pid = child.id();
    let before = rss_kib(pid);
    register_with_key(&client, &base, "memory@example.com").await;
    // The hash's 64 MiB go back to the system within 300 ms.
    let returned = || {
        let grown = rss_kib(pid).saturating_sub(before);
        std::future::ready(if grown < 32 * 1024 { Ok(()) } else { Err(grown) })
    };
    let what = "resident memory grew by 32 MiB or more (KiB below) after one 64 MiB hash";
    common::eventually(what, Duration::from_millis(300), returned).await;
    child.kill().unwrap();
    child.wait().unwrap();
}
