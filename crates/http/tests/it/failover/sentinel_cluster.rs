//! A Redis master, its replica and three Sentinels of a test's own, on loopback, from the
//! machine's `redis-server` (`AIGW_TEST_REDIS_SERVER`, else `redis-server`; Sentinel is the
//! same binary with `--sentinel`). The Sentinels call the master down after 1 s without an
//! answer and need two of them to agree. Every process is killed when the cluster is dropped.

use crate::common::eventually::{eventually_blocking, listening};
use crate::rate_limit_contract::redis_binary;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The master's name in the Sentinels' configuration.
pub const MASTER_NAME: &str = "aigw-test";

/// A child process, killed (and reaped) when dropped or by [`Server::kill`].
struct Server {
    port: u16,
    child: Option<Child>,
}

impl Server {
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The servers of one test.
pub struct SentinelCluster {
    master: Server,
    replica: Server,
    sentinels: Vec<Server>,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A connection to the server on `port`.
pub fn connection(port: u16) -> redis::Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    client.get_connection_with_timeout(Duration::from_secs(2)).unwrap()
}

/// A field of `INFO <section>` of the server on `port` (`None` when it does not answer).
pub fn info_field(port: u16, section: &str, field: &str) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client.get_connection_with_timeout(Duration::from_millis(500)).ok()?;
    let info: String = redis::cmd("INFO").arg(section).query(&mut conn).ok()?;
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(field)?.strip_prefix(':').map(str::to_owned))
}

fn spawn(binary: &str, args: &[String]) -> Child {
    Command::new(binary)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {binary}: {e}"))
}

impl SentinelCluster {
    /// Starts the master, the replica and the Sentinels, and waits until the replica is in
    /// sync and every Sentinel knows the replica and the two other Sentinels. `None` after a
    /// loud message when `redis-server` is not installed (a failure under `CI=true`).
    pub fn start() -> Option<Self> {
        let Some(binary) = redis_binary() else {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true but redis-server is not installed: the Sentinel test cannot run"
            );
            eprintln!("\n!!! redis-server not found: SKIPPING the Redis Sentinel test !!!\n");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().display().to_string();
        let data = |port: u16| {
            // `--dir`: a replica writes the master's snapshot to disk before loading it.
            let mut args: Vec<String> =
                ["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir", &folder]
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
            // No disk; a replica syncs at once (Redis 7 waits 5 s for more replicas).
            args.extend(
                ["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"]
                    .map(str::to_owned),
            );
            args
        };
        let master_port = free_port();
        let master = Server { port: master_port, child: Some(spawn(&binary, &data(master_port))) };
        let replica_port = free_port();
        let mut replica_args = data(replica_port);
        replica_args.extend(["--replicaof".into(), "127.0.0.1".into(), master_port.to_string()]);
        let replica = Server { port: replica_port, child: Some(spawn(&binary, &replica_args)) };
        let sentinels = (0..3)
            .map(|i| {
                let port = free_port();
                let config = dir.path().join(format!("sentinel-{i}.conf"));
                std::fs::write(
                    &config,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                         sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                         sentinel failover-timeout {MASTER_NAME} 10000\n",
                        dir = dir.path().display()
                    ),
                )
                .unwrap();
                let args = [config.display().to_string(), "--sentinel".to_owned()];
                Server { port, child: Some(spawn(&binary, &args)) }
            })
            .collect();
        let cluster = Self { master, replica, sentinels, _dir: dir };
        cluster.wait_until_watched();
        Some(cluster)
    }

    fn wait_until_watched(&self) {
        for port in [self.master.port, self.replica.port] {
            eventually_blocking("Redis listening", Duration::from_secs(10), || listening(port));
        }
        let port = self.replica.port;
        eventually_blocking("the replica in sync", Duration::from_secs(20), || {
            match info_field(port, "replication", "master_link_status").as_deref() {
                Some("up") => Ok(()),
                other => Err(other.map(str::to_owned)),
            }
        });
        for sentinel in &self.sentinels {
            let port = sentinel.port;
            eventually_blocking("a Sentinel seeing all", Duration::from_secs(30), || {
                let seen = || -> Option<(i64, i64)> {
                    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
                    let mut conn =
                        client.get_connection_with_timeout(Duration::from_millis(500)).ok()?;
                    let master: std::collections::HashMap<String, String> = redis::cmd("SENTINEL")
                        .arg("master")
                        .arg(MASTER_NAME)
                        .query(&mut conn)
                        .ok()?;
                    let number = |k: &str| master.get(k).and_then(|v| v.parse().ok());
                    Some((number("num-slaves")?, number("num-other-sentinels")?))
                };
                match seen() {
                    Some((1, 2)) => Ok(()),
                    other => Err(other),
                }
            });
        }
    }

    /// The Sentinels' URLs (`rate_limit.redis_sentinels`).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| format!("redis://127.0.0.1:{}", s.port)).collect()
    }

    /// The master's port, then the replica's.
    pub fn ports(&self) -> (u16, u16) {
        (self.master.port, self.replica.port)
    }

    /// Kills the master (SIGKILL): nothing it has not sent to the replica survives.
    pub fn kill_master(&mut self) {
        self.master.kill();
    }

    /// Waits until the replica is the master and the Sentinels say so; returns the seconds
    /// that took.
    pub fn wait_for_promotion(&self) -> f64 {
        let started = std::time::Instant::now();
        let (replica, sentinel) = (self.replica.port, self.sentinels[0].port);
        eventually_blocking("the replica promoted", Duration::from_secs(60), || {
            let role = info_field(replica, "replication", "role");
            let named: Option<(String, String)> =
                redis::Client::open(format!("redis://127.0.0.1:{sentinel}"))
                    .ok()
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)).ok())
                    .and_then(|mut conn| {
                        redis::cmd("SENTINEL")
                            .arg("get-master-addr-by-name")
                            .arg(MASTER_NAME)
                            .query(&mut conn)
                            .ok()
                    });
            let named_port = named.map(|(_, port)| port);
            if role.as_deref() == Some("master") && named_port == Some(replica.to_string()) {
                Ok(())
            } else {
                Err((role, named_port))
            }
        });
        started.elapsed().as_secs_f64()
    }
}
