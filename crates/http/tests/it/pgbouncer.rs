//! Through PgBouncer in transaction pooling mode, with a direct `session_url`: two nodes
//! register, make keys, serve concurrent metered calls on a budget, and see a revocation at
//! once, while few server connections serve many client connections (so that a cached
//! statement name would reach a server connection that lacks it, or where it names another
//! statement). Twice:
//!
//! - Debian's 1.18 (no prepared statements across transactions) with `database.pooler =
//!   "transaction"`: statements unnamed and uncached (`AIGW_TEST_PGBOUNCER`, else
//!   /usr/sbin/pgbouncer; scripts/test.sh installs it);
//! - 1.24 with `max_prepared_statements` and `database.pooler = "transaction_prepared"`:
//!   statements prepared and cached, which PgBouncer prepares on each server connection under
//!   names of its own; its counters show the statements prepared once and bound many times
//!   (`AIGW_TEST_PGBOUNCER_PREPARED`; scripts/test.sh builds Debian 13's source with
//!   scripts/build_pgbouncer.sh).
//!
//! Both need PostgreSQL; the second also `psql` for PgBouncer's admin console.

use crate::common::gateway_calls::{records_of, refused_by};
use crate::common::*;
use aigw_http::settings::PoolerSetting;
use serde_json::json;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A PgBouncer of this test in front of the test server's PostgreSQL, on a free port; killed
/// when dropped.
struct PgBouncer {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PgBouncer {
    /// Starts the PgBouncer that the environment variable `binary_var` names (or `fallback`)
    /// in transaction mode with `pool_size` server connections per database and
    /// `max_prepared_statements`, or returns `None` after a loud message when it is missing (a
    /// failure under `CI=true`).
    fn start(
        binary_var: &str,
        fallback: Option<&str>,
        pool_size: u32,
        max_prepared_statements: u32,
    ) -> Option<Self> {
        let binary = std::env::var(binary_var)
            .ok()
            .or_else(|| fallback.map(str::to_owned))
            .filter(|b| std::path::Path::new(b).exists());
        let Some(binary) = binary else {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true but pgbouncer is missing ({binary_var})"
            );
            eprintln!(
                "\n!!! pgbouncer not found: SKIPPING this PgBouncer test (scripts/test.sh \
                 provides it, or set {binary_var}) !!!\n"
            );
            return None;
        };
        let server = pg_host_port(&pg_admin_url());
        let dir = tempfile::tempdir().expect("tempdir");
        // PgBouncer refuses to run as root: as root it runs as postgres, which must read its
        // files and write its log.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .expect("chmod");
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(path("users.txt"), "\"postgres\" \"\"\n").expect("users.txt");
        let ini = format!(
            "[databases]\n* = host={} port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}\n\
             pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n\
             ignore_startup_parameters = extra_float_digits\nlogfile = {}\npidfile = {}\n\
             admin_users = postgres\n{prepared}",
            server.ip(),
            server.port(),
            path("users.txt"),
            path("pgbouncer.log"),
            path("pgbouncer.pid"),
            prepared = if max_prepared_statements > 0 {
                format!("max_prepared_statements = {max_prepared_statements}\n")
            } else {
                String::new()
            },
        );
        std::fs::write(path("pgbouncer.ini"), ini).expect("pgbouncer.ini");
        let mut command = Command::new(&binary);
        let uid = Command::new("id").arg("-u").output().map(|o| o.stdout).unwrap_or_default();
        if uid.trim_ascii() == b"0" {
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(path("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        let log_path = path("pgbouncer.log");
        let bouncer = Self { port, child, _dir: dir };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(bouncer);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = std::fs::read_to_string(log_path).unwrap_or_default();
        panic!("pgbouncer did not start on {port}: {log}");
    }

    /// The URL of database `name` through this PgBouncer.
    fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// PgBouncer's `SHOW STATS` totals of every database, by column (`psql` on the admin
    /// console).
    fn stats(&self) -> std::collections::HashMap<String, i64> {
        let output = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres"])
            .args(["-d", "pgbouncer", "-A", "-F", "\t", "-c", "SHOW STATS"])
            .output()
            .expect("psql (postgresql-client) for PgBouncer's admin console");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut lines = text.lines();
        let header: Vec<String> =
            lines.next().unwrap_or_default().split('\t').map(str::to_owned).collect();
        let mut totals = std::collections::HashMap::new();
        for line in lines.filter(|l| l.contains('\t')) {
            for (name, value) in header.iter().zip(line.split('\t')) {
                if let Ok(value) = value.parse::<i64>() {
                    *totals.entry(name.clone()).or_insert(0) += value;
                }
            }
        }
        totals
    }
}

/// Two nodes through `bouncer` with `pooler`: 100 concurrent metered calls, every one
/// recorded, and a revocation seen by the other node.
async fn two_nodes_through(bouncer: &PgBouncer, pooler: PoolerSetting) {
    let direct = spawn_app(Backend::Postgres).await;
    let through = bouncer.url(&pg_db_name(&direct.database_url));
    let session = direct.database_url.clone();
    let node = |s: &mut aigw_http::settings::Settings| {
        s.database.url = Some(through.clone());
        s.database.session_url = Some(session.clone());
        s.database.pooler = pooler;
        s.database.max_connections = 8;
    };
    let a = direct.spawn_sibling(node).await;
    let b = direct.spawn_sibling(node).await;
    let user = a.new_user("bouncer").await;
    let made = a
        .create_key_raw(
            Auth::Bearer(&user.token),
            &json!({"name": "bounced", "permissions": ["ai_gateway", "read"],
                    "max_budget_usd": 100.0, "rpm_limit": 100000}),
        )
        .await
        .data(201);
    let key = made["key"].as_str().unwrap().to_owned();
    // 100 metered calls at once over both nodes: every statement of every one runs on one of
    // the two server connections, in whatever order the pooler hands them out.
    let calls = (0..100).map(|i| {
        let node = if i % 2 == 0 { &a } else { &b };
        let key = key.clone();
        async move { node.chat(Auth::Bearer(&key), &chat_body("echo", "through the pooler")).await }
    });
    for reply in futures_util::future::join_all(calls).await {
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let records = records_of(&a, &[&user], 100).await;
    assert!(records.iter().all(|r| r["outcome"] == json!("ok")), "{records:?}");
    // A revocation on one node is seen by the other (its change feed LISTENs on the session
    // URL), and its key is refused there, not answered 503.
    let id = made["id"].as_str().unwrap();
    a.revoke_key(Auth::Bearer(&user.token), id).await.data(200);
    refused_by(&b, &key, Duration::from_secs(5)).await;
    drop(b);
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_through_pgbouncer_in_transaction_mode_lose_nothing() {
    // Two server connections for everything two nodes do at once.
    let Some(bouncer) = PgBouncer::start("AIGW_TEST_PGBOUNCER", Some("/usr/sbin/pgbouncer"), 2, 0)
    else {
        return;
    };
    two_nodes_through(&bouncer, PoolerSetting::Transaction).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_through_pgbouncer_with_prepared_statements_lose_nothing() {
    let Some(bouncer) = PgBouncer::start("AIGW_TEST_PGBOUNCER_PREPARED", None, 2, 200) else {
        return;
    };
    two_nodes_through(&bouncer, PoolerSetting::TransactionPrepared).await;
    // The nodes sent named statements (unnamed ones, `transaction`, count 0 here), each
    // parsed once per connection and bound more often: the statement cache was in use,
    // through the pooler.
    let stats = bouncer.stats();
    let (parsed, prepared, bound) = (
        stats.get("total_client_parse_count").copied().unwrap_or(0),
        stats.get("total_server_parse_count").copied().unwrap_or(0),
        stats.get("total_bind_count").copied().unwrap_or(0),
    );
    eprintln!(
        "pgbouncer: {parsed} statements parsed by clients, {prepared} by servers, {bound} bound"
    );
    assert!(parsed > 0 && bound > parsed, "the statement cache was not used: {stats:?}");
    assert!(prepared > 0 && prepared < bound, "{stats:?}");
}
