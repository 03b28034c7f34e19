//! A PostgreSQL primary and its streaming standby of a test's own, on loopback, from the
//! machine's PostgreSQL binaries (`AIGW_TEST_PG_BIN`, else the newest
//! `/usr/lib/postgresql/*/bin`; scripts/test.sh names it). As root the servers run as the
//! `postgres` user (PostgreSQL refuses root). Every server started is stopped (`pg_ctl stop
//! -m immediate`, which signals the postmaster named by its PID file) when the cluster is
//! dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The servers of one test, in one temporary folder.
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    as_postgres: bool,
    started: Vec<PathBuf>,
}

/// One server of a [`PgCluster`]: its data folder and port.
#[derive(Debug, Clone)]
pub struct PgServer {
    pub data: PathBuf,
    pub port: u16,
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        for data in std::mem::take(&mut self.started) {
            let data = data.display().to_string();
            let _ = self.command("pg_ctl").args(["stop", "-m", "immediate", "-D", &data]).output();
        }
    }
}

/// A free loopback port.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl PgCluster {
    /// A cluster folder, or `None` after a loud message when the PostgreSQL server binaries
    /// are not installed (a failure under `CI=true`).
    pub fn new() -> Option<Self> {
        let bin = std::env::var_os("AIGW_TEST_PG_BIN").map(PathBuf::from).or_else(newest_bin);
        let Some(bin) = bin.filter(|b| b.join("initdb").exists()) else {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true but the PostgreSQL server binaries (initdb, pg_ctl) are missing"
            );
            eprintln!(
                "\n!!! PostgreSQL server binaries not found: SKIPPING the failover test (set \
                 AIGW_TEST_PG_BIN to the folder of initdb and pg_ctl) !!!\n"
            );
            return None;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        // The servers run as postgres when this runs as root: they create folders here.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .expect("chmod");
        let uid = Command::new("id").arg("-u").output().map(|o| o.stdout).unwrap_or_default();
        Some(Self { bin, dir, as_postgres: uid.trim_ascii() == b"0", started: Vec::new() })
    }

    /// `tool` of the binaries, as the user the servers run as.
    fn command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    /// Runs `tool` with `args`; panics with its output when it fails.
    fn run(&self, tool: &str, args: &[&str]) {
        let output = self
            .command(tool)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {tool}: {e}"));
        assert!(
            output.status.success(),
            "{tool} {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Appends `settings` to the `postgresql.conf` of `data` (later lines win).
    fn configure(data: &Path, settings: &str) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .expect("postgresql.conf");
        file.write_all(settings.as_bytes()).expect("postgresql.conf");
    }

    /// A new primary (trust authentication on loopback, replication allowed), started, with
    /// an empty database `aigw`.
    pub fn primary(&mut self) -> PgServer {
        let data = self.path("primary");
        let port = free_port();
        let data_arg = data.display().to_string();
        self.run("initdb", &["-D", &data_arg, "-U", "postgres", "--auth=trust", "-N"]);
        Self::configure(
            &data,
            &format!(
                "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = \
                 '{}'\nwal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n\
                 fsync = off\nmax_connections = 200\n",
                self.dir.path().display()
            ),
        );
        let server = PgServer { data, port };
        self.start(&server);
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
        use diesel::{Connection, RunQueryDsl};
        let mut conn = diesel::PgConnection::establish(&url).expect("the new primary");
        diesel::sql_query("CREATE DATABASE aigw").execute(&mut conn).expect("CREATE DATABASE");
        server
    }

    /// A streaming standby of `primary`, copied with `pg_basebackup` (after a fast checkpoint:
    /// the default, spread one waits most of `checkpoint_timeout`), started.
    pub fn standby(&mut self, primary: &PgServer) -> PgServer {
        let data = self.path("standby");
        let port = free_port();
        let data_arg = data.display().to_string();
        let from = primary.port.to_string();
        self.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &from,
                "-U",
                "postgres",
                "-D",
                &data_arg,
                "-R",
                "-c",
                "fast",
            ],
        );
        Self::configure(&data, &format!("\nport = {port}\n"));
        let server = PgServer { data, port };
        self.start(&server);
        server
    }

    /// Starts `server` and waits until it accepts connections.
    pub fn start(&mut self, server: &PgServer) {
        let data = server.data.display().to_string();
        let log = self.path(&format!("{}.log", server.port)).display().to_string();
        self.run("pg_ctl", &["start", "-w", "-D", &data, "-l", &log]);
        if !self.started.contains(&server.data) {
            self.started.push(server.data.clone());
        }
    }

    /// Stops `server` with a fast shutdown: its sessions end, and its WAL reaches the
    /// connected standbys before it exits (a planned switchover loses no commit).
    pub fn stop(&mut self, server: &PgServer) {
        let data = server.data.display().to_string();
        self.run("pg_ctl", &["stop", "-w", "-m", "fast", "-D", &data]);
        self.started.retain(|d| d != &server.data);
    }

    /// Promotes the standby `server` to primary and waits until it accepts writes.
    pub fn promote(&self, server: &PgServer) {
        let data = server.data.display().to_string();
        self.run("pg_ctl", &["promote", "-w", "-D", &data]);
    }
}

/// The newest `/usr/lib/postgresql/VERSION/bin`.
fn newest_bin() -> Option<PathBuf> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .map(|v| PathBuf::from(format!("/usr/lib/postgresql/{v}/bin")))
}
