//! Connections and the connection pool.
//!
//! The backend is chosen by the URL scheme:
//!
//! | URL | backend |
//! |---|---|
//! | `sqlite://data/aigw.db` (relative), `sqlite:///var/lib/aigw.db` (absolute), `sqlite:FILE` | SQLite file, created with its folder if missing |
//! | `postgres://user@host:5432/db`, `postgresql://…` | PostgreSQL (libpq connection URI) |
//!
//! SQLite connections are set up with `journal_mode=WAL`, `busy_timeout` (writers queue instead
//! of failing), `foreign_keys=ON` and `synchronous=NORMAL`, and
//! `temp_store=MEMORY`: a savepoint's journal (the usage ledger's multi-row inserts run in
//! savepoints) otherwise spills to a temporary file past 64 KiB and then costs a `pwrite` per
//! page for the rest of the transaction, about one system call per metered call
//! (docs/performance.md).
//!
//! PostgreSQL connections are bounded in time: libpq's
//! `connect_timeout`, TCP keepalives and `tcp_user_timeout` are added to the URL unless it sets
//! them, and every session runs with `statement_timeout`, `lock_timeout` and
//! `idle_in_transaction_session_timeout`, so that neither a slow statement nor a lock holder
//! nor a dead peer keeps a connection (and the blocking thread using it) forever.
//!
//! Through a pooler in transaction mode ([`Pooler::Transaction`], PgBouncer's
//! `pool_mode = transaction`), consecutive statements of one connection may run on different
//! server connections: statements are then sent unnamed with their parameters in one round
//! trip (no prepared-statement cache: a cached statement's name would reach a server
//! connection where it does not exist, or names another statement), and no session setting is
//! sent (it would stay on a server connection other clients then use); the timeouts are the
//! server's or the role's. What needs a session of its own (the change feed's `LISTEN`, the
//! migrations' advisory lock) goes to the pool's session URL ([`Pool::with_session_url`]).
//! A pooler that tracks prepared statements itself (PgBouncer 1.21 and later with
//! `max_prepared_statements`: it prepares a client's named statement on whichever server
//! connection runs it, under a name of its own) keeps the cache
//! ([`Pooler::TransactionPrepared`]); only the session settings stay off.

use crate::error::PersistenceError;
use diesel::connection::{CacheSize, SimpleConnection};
use diesel::prelude::*;
use diesel::r2d2::R2D2Connection;
use std::path::PathBuf;
use std::time::Duration;

/// The connection type and the backend types its derive generates (undocumented items).
mod connection {
    #![allow(missing_docs, missing_debug_implementations)]

    /// One connection to either backend. Queries written against the shared schema run on both.
    #[derive(diesel::MultiConnection)]
    pub enum DbConnection {
        /// A PostgreSQL connection.
        Postgres(diesel::PgConnection),
        /// A SQLite connection.
        Sqlite(diesel::SqliteConnection),
    }
}

pub use connection::DbConnection;

/// A parsed database URL.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URI, as given.
    Postgres(String),
}

impl std::fmt::Debug for DatabaseUrl {
    /// Never prints a PostgreSQL password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseUrl::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            DatabaseUrl::Postgres(url) => write!(f, "{}", aigw_domain::redact::redact_url(url)),
        }
    }
}

impl DatabaseUrl {
    /// Parses a database URL (see the module table).
    ///
    /// # Errors
    /// [`PersistenceError::BadUrl`] for any other scheme, or an empty SQLite path.
    pub fn parse(url: &str) -> Result<Self, PersistenceError> {
        let url = url.trim();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() || path == ":memory:" {
                return Err(PersistenceError::BadUrl(
                    "a SQLite URL needs a file path, e.g. sqlite://data/aigw.db".to_owned(),
                ));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        Err(PersistenceError::BadUrl(format!(
            "{} (expected sqlite://PATH or postgres://…)",
            aigw_domain::redact::redact_url(url)
        )))
    }
}

/// What lies between aigw and PostgreSQL (`database.pooler`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing, or a pooler in session mode: each connection is one server session, its
    /// prepared statements cached and its session settings kept.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): statements are
    /// sent unnamed, uncached, and no session setting is sent (module docs).
    Transaction,
    /// A pooler in transaction mode that carries named prepared statements across its server
    /// connections (PgBouncer 1.21 and later with `max_prepared_statements` above 0):
    /// statements stay prepared and cached, and no session setting is sent.
    TransactionPrepared,
}

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Most connections held open (default 10).
    pub max_connections: u32,
    /// How long a checkout waits for a connection before the database counts as unavailable,
    /// in seconds (default 5).
    pub acquire_timeout_secs: u64,
    /// Longest run of one statement, in seconds (default 5): PostgreSQL `statement_timeout`
    /// and `lock_timeout`; SQLite's `busy_timeout` (how long a writer waits for the write lock).
    pub statement_timeout_secs: u64,
    /// What lies between aigw and PostgreSQL (default none).
    pub pooler: Pooler,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            max_connections: 10,
            acquire_timeout_secs: 5,
            statement_timeout_secs: 5,
            pooler: Pooler::None,
        }
    }
}

impl PoolOptions {
    /// The libpq parameters added to a PostgreSQL URL that does not set them itself:
    /// `connect_timeout` (the acquire timeout, at least 2 s as libpq requires), keepalives
    /// every 5 s after 5 s idle, and `tcp_user_timeout` (unacknowledged data for longer than
    /// acquire plus statement timeout closes the connection).
    pub fn libpq_parameters(&self) -> Vec<(&'static str, String)> {
        let connect = self.acquire_timeout_secs.max(2);
        let user_timeout_ms =
            self.acquire_timeout_secs.saturating_add(self.statement_timeout_secs).max(1) * 1000;
        vec![
            ("connect_timeout", connect.to_string()),
            ("keepalives", "1".to_owned()),
            ("keepalives_idle", "5".to_owned()),
            ("keepalives_interval", "5".to_owned()),
            ("keepalives_count", "3".to_owned()),
            ("tcp_user_timeout", user_timeout_ms.to_string()),
        ]
    }

    /// `url` with each of [`PoolOptions::libpq_parameters`] it does not already set appended
    /// to its query string, and `target_session_attrs=read-write` when it names several hosts
    /// (`postgres://u@primary:5432,standby:5432/db`: libpq tries them in order and keeps the
    /// first that accepts writes, so after a failover new connections find the new primary,
    /// and never a standby).
    pub fn postgres_url(&self, url: &str) -> String {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let present: Vec<&str> = query.split('&').filter_map(|kv| kv.split('=').next()).collect();
        let mut out = url.to_owned();
        let authority = url.split_once("://").map_or("", |(_, rest)| rest);
        let authority = authority.split(['/', '?']).next().unwrap_or_default();
        let several_hosts = authority.rsplit('@').next().is_some_and(|hosts| hosts.contains(','));
        let mut parameters = self.libpq_parameters();
        if several_hosts {
            parameters.push(("target_session_attrs", "read-write".to_owned()));
        }
        for (name, value) in parameters {
            if present.contains(&name) {
                continue;
            }
            out.push(if out.contains('?') { '&' } else { '?' });
            out.push_str(name);
            out.push('=');
            out.push_str(&value);
        }
        out
    }

    /// The session settings run on every new PostgreSQL connection.
    fn postgres_session_sql(&self) -> String {
        let statement_ms = self.statement_timeout_secs.max(1) * 1000;
        format!(
            "SET statement_timeout = {statement_ms}; SET lock_timeout = {statement_ms}; \
             SET idle_in_transaction_session_timeout = {};",
            statement_ms.saturating_mul(2)
        )
    }
}

/// The r2d2 connection manager for [`DbConnection`].
#[derive(Debug)]
pub struct ConnectionManager {
    url: DatabaseUrl,
    options: PoolOptions,
}

impl r2d2::ManageConnection for ConnectionManager {
    type Connection = DbConnection;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<DbConnection, Self::Error> {
        match &self.url {
            DatabaseUrl::Postgres(url) => {
                let mut conn = diesel::PgConnection::establish(&self.options.postgres_url(url))
                    .map_err(diesel::r2d2::Error::ConnectionError)?;
                match self.options.pooler {
                    Pooler::None => conn
                        .batch_execute(&self.options.postgres_session_sql())
                        .map_err(diesel::r2d2::Error::QueryError)?,
                    Pooler::Transaction => {
                        conn.set_prepared_statement_cache_size(CacheSize::Disabled);
                    }
                    Pooler::TransactionPrepared => {}
                }
                Ok(DbConnection::Postgres(conn))
            }
            DatabaseUrl::Sqlite(path) => {
                let path = path.to_string_lossy();
                let mut conn = diesel::SqliteConnection::establish(&path)
                    .map_err(diesel::r2d2::Error::ConnectionError)?;
                conn.batch_execute(&format!(
                    "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL; \
                     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
                     PRAGMA temp_store = MEMORY;",
                    self.options.statement_timeout_secs.max(1) * 1000
                ))
                .map_err(diesel::r2d2::Error::QueryError)?;
                Ok(DbConnection::Sqlite(conn))
            }
        }
    }

    fn is_valid(&self, conn: &mut DbConnection) -> Result<(), Self::Error> {
        conn.batch_execute("SELECT 1").map_err(diesel::r2d2::Error::QueryError)
    }

    fn has_broken(&self, conn: &mut DbConnection) -> bool {
        Pool::is_broken(conn)
    }
}

/// A pool of [`DbConnection`]s. Cloning is cheap (it is a handle).
#[derive(Clone)]
pub struct Pool {
    inner: r2d2::Pool<ConnectionManager>,
    options: PoolOptions,
    url: DatabaseUrl,
    /// Where connections that keep session state go (`LISTEN`, session advisory locks):
    /// `url` itself unless set.
    session_url: Option<DatabaseUrl>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("max_size", &self.inner.max_size()).finish_non_exhaustive()
    }
}

/// A connection checked out of the [`Pool`]; returned to it on drop.
pub type PooledConnection = r2d2::PooledConnection<ConnectionManager>;

impl Pool {
    /// Whether several connections can write at the same time (PostgreSQL), rather than one
    /// at a time (SQLite's single writer).
    pub fn concurrent_writes(&self) -> bool {
        matches!(self.url, DatabaseUrl::Postgres(_))
    }

    /// Builds a pool for `url`. For SQLite the file's folder is created if missing. No
    /// connection is opened yet (the pool connects lazily), so a database that is down at start
    /// does not stop the process; [`Pool::get`] reports it.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`] when the SQLite folder cannot be created.
    pub fn new(url: &DatabaseUrl, options: &PoolOptions) -> Result<Self, PersistenceError> {
        if let DatabaseUrl::Sqlite(path) = url {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    PersistenceError::Unavailable(format!("cannot create {}: {e}", dir.display()))
                })?;
            }
        }
        let manager = ConnectionManager { url: url.clone(), options: options.clone() };
        let inner = r2d2::Pool::builder()
            .max_size(options.max_connections.max(1))
            .min_idle(Some(0))
            .connection_timeout(Duration::from_secs(options.acquire_timeout_secs.max(1)))
            .test_on_check_out(false)
            .build_unchecked(manager);
        Ok(Self { inner, options: options.clone(), url: url.clone(), session_url: None })
    }

    /// Opens [`Pool::session_connection`]s on `url` (a direct connection, or a pooler in
    /// session mode) instead of the pool's own URL: needed when that URL is a pooler in
    /// transaction mode.
    pub fn with_session_url(mut self, url: DatabaseUrl) -> Self {
        self.session_url = Some(url);
        self
    }

    /// Checks out a connection, waiting at most the acquire timeout. Blocking.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`] when no connection could be had in time.
    pub fn get(&self) -> Result<PooledConnection, PersistenceError> {
        Ok(self.inner.get()?)
    }

    /// Whether `conn` can no longer be used: its server ended it, or it failed inside a
    /// transaction. The pool discards such a connection when it comes back.
    pub fn is_broken(conn: &mut DbConnection) -> bool {
        match conn {
            DbConnection::Postgres(c) => c.is_broken(),
            DbConnection::Sqlite(c) => c.is_broken(),
        }
    }

    /// Checks every idle connection with `SELECT 1` and discards those that fail; returns how
    /// many were discarded. Called after one connection was found broken: a server that
    /// restarted, failed over or ended its sessions left every idle connection dead, and
    /// without a sweep each would fail one caller in turn. Blocking; at most one statement per
    /// connection of the pool, and it never opens a connection.
    pub fn sweep_idle(&self) -> usize {
        let mut alive = Vec::new();
        let mut discarded = 0;
        for _ in 0..self.inner.max_size() {
            let Some(mut conn) = self.inner.try_get() else {
                break;
            };
            if conn.batch_execute("SELECT 1").is_ok() && !Self::is_broken(&mut conn) {
                // Held until the sweep ends, so that the next `try_get` takes another one.
                alive.push(conn);
            } else {
                discarded += 1;
            }
        }
        if discarded > 0 {
            tracing::warn!(
                discarded,
                kept = alive.len(),
                "discarded broken idle database connections"
            );
        }
        discarded
    }

    /// Opens a connection outside the pool, set up like the pool's (for a long-lived task such
    /// as the change-feed tailer, which must never wait behind requests for a connection).
    /// Blocking.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`] when the database cannot be reached.
    pub fn dedicated_connection(&self) -> Result<DbConnection, PersistenceError> {
        let manager = ConnectionManager { url: self.url.clone(), options: self.options.clone() };
        r2d2::ManageConnection::connect(&manager)
            .map_err(|e| PersistenceError::Unavailable(e.to_string()))
    }

    /// Opens a connection outside the pool that is one server session for its whole life, on
    /// the session URL ([`Pool::with_session_url`]; else the pool's own, which is then one):
    /// for what keeps session state, the change feed's `LISTEN` and the migrations' advisory
    /// lock. Blocking.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`] when the database cannot be reached.
    pub fn session_connection(&self) -> Result<DbConnection, PersistenceError> {
        let Some(url) = &self.session_url else {
            return self.dedicated_connection();
        };
        let options = PoolOptions { pooler: Pooler::None, ..self.options.clone() };
        let manager = ConnectionManager { url: url.clone(), options };
        r2d2::ManageConnection::connect(&manager)
            .map_err(|e| PersistenceError::Unavailable(e.to_string()))
    }

    /// The most connections the pool holds.
    pub fn max_size(&self) -> u32 {
        self.inner.max_size()
    }

    /// The options the pool was built with.
    pub fn options(&self) -> &PoolOptions {
        &self.options
    }
}

/// PostgreSQL's `statement_timeout` for `conn`'s statements, as `SHOW statement_timeout`
/// answers it (`"0"`: none); `None` on SQLite. Through a transaction-mode pooler this is the
/// server's or the role's setting, since aigw sends none there.
///
/// # Errors
/// The database's error.
pub fn statement_timeout(conn: &mut DbConnection) -> Result<Option<String>, PersistenceError> {
    #[derive(QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        statement_timeout: String,
    }
    match conn {
        DbConnection::Postgres(c) => {
            let setting: Setting = diesel::sql_query("SHOW statement_timeout").get_result(c)?;
            Ok(Some(setting.statement_timeout))
        }
        DbConnection::Sqlite(_) => Ok(None),
    }
}

/// Runs `f` in a transaction on `conn`: committed when `f` returns `Ok`, rolled back when it
/// returns `Err` (whose value is passed through unchanged) or when the database fails. When
/// the database says the transaction may be retried (SQLSTATE 40001, see
/// [`PersistenceError::Retryable`]), it is run once more, so `f` may be called twice.
///
/// On SQLite, make the first statement of `f` a write where a transaction both reads and
/// writes, so the write lock is taken up front (and waits on `busy_timeout`) instead of being
/// upgraded from a read lock, which SQLite refuses at once under contention.
///
/// # Errors
/// Whatever `f` returns, or the database error of `BEGIN`/`COMMIT` converted into `E`.
pub fn transaction<T, E, F>(conn: &mut DbConnection, mut f: F) -> Result<T, E>
where
    F: FnMut(&mut DbConnection) -> Result<T, E>,
    E: From<PersistenceError>,
{
    match attempt(conn, &mut f) {
        Err(Attempt::Database(e)) if e.is_retryable() => {
            tracing::info!(error = %e, "retrying a transaction the database asked to retry");
            attempt(conn, &mut f).map_err(Attempt::into_caller)
        }
        other => other.map_err(Attempt::into_caller),
    }
}

enum Attempt<E> {
    Database(PersistenceError),
    Caller(E),
}

impl<E: From<PersistenceError>> Attempt<E> {
    fn into_caller(self) -> E {
        match self {
            Attempt::Database(e) => E::from(e),
            Attempt::Caller(e) => e,
        }
    }
}

fn attempt<T, E, F>(conn: &mut DbConnection, f: &mut F) -> Result<T, Attempt<E>>
where
    F: FnMut(&mut DbConnection) -> Result<T, E>,
{
    enum TxError<E> {
        Database(diesel::result::Error),
        Caller(E),
    }
    impl<E> From<diesel::result::Error> for TxError<E> {
        fn from(e: diesel::result::Error) -> Self {
            TxError::Database(e)
        }
    }
    conn.transaction::<T, TxError<E>, _>(|c| f(c).map_err(TxError::Caller)).map_err(|e| match e {
        TxError::Database(d) => Attempt::Database(PersistenceError::from(d)),
        TxError::Caller(e) => Attempt::Caller(e),
    })
}

/// Runs `SELECT 1` to check the database answers.
///
/// # Errors
/// [`PersistenceError::Unavailable`] when it does not.
pub fn ping(conn: &mut DbConnection) -> Result<(), PersistenceError> {
    conn.batch_execute("SELECT 1").map_err(|e| PersistenceError::Unavailable(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    /// No `Debug` of a type holding a database URL prints its password.
    #[test]
    fn database_url_pool_and_manager_hide_the_password() {
        // The second password holds an `@` its writer did not percent-encode: no part of it
        // may show either.
        for (raw, secret) in [
            ("postgres://aigw:TOPSECRET@db.internal:5432/aigw", "TOPSECRET"),
            ("postgres://aigw:TOP@SECRET@db.internal:5432/aigw", "SECRET"),
        ] {
            let url = DatabaseUrl::parse(raw).unwrap_or_else(|e| panic!("{e}"));
            let manager = ConnectionManager { url: url.clone(), options: PoolOptions::default() };
            let pool = Pool::new(&url, &PoolOptions::default()).unwrap_or_else(|e| panic!("{e}"));
            for shown in [format!("{url:?}"), format!("{manager:?}"), format!("{pool:?}")] {
                assert!(!shown.contains(secret), "{shown}");
            }
        }
        let url = DatabaseUrl::parse("postgres://aigw:TOPSECRET@db.internal:5432/aigw")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(format!("{url:?}").contains("db.internal"));
    }

    #[test]
    fn libpq_parameters_are_added_unless_the_url_sets_them() {
        let options = PoolOptions { acquire_timeout_secs: 1, ..PoolOptions::default() };
        let url = options.postgres_url("postgres://u@h/db");
        assert!(url.starts_with("postgres://u@h/db?connect_timeout=2&keepalives=1"), "{url}");
        assert!(url.ends_with("&tcp_user_timeout=6000"), "{url}");
        let url = options.postgres_url("postgres://u@h/db?sslmode=require&connect_timeout=9");
        assert!(url.contains("sslmode=require&connect_timeout=9&keepalives=1"), "{url}");
        assert_eq!(url.matches("connect_timeout").count(), 1, "{url}");
        assert!(!url.contains("target_session_attrs"), "{url}");
    }

    /// A URL naming several hosts asks for the one that accepts writes, unless it says
    /// otherwise.
    #[test]
    fn several_hosts_mean_the_writable_one() {
        let options = PoolOptions::default();
        let url = options.postgres_url("postgres://u:p,w@a:5432,b:5433/db");
        assert!(url.ends_with("&target_session_attrs=read-write"), "{url}");
        let url = options.postgres_url("postgres://u@a,b/db?target_session_attrs=any");
        assert_eq!(url.matches("target_session_attrs").count(), 1, "{url}");
        assert!(url.contains("target_session_attrs=any"), "{url}");
        let url = options.postgres_url("postgres://u:p,w@a/db?application_name=x,y");
        assert!(!url.contains("target_session_attrs"), "{url}");
    }

    /// Every SQLite connection of the pool keeps its temporary store (savepoint journals
    /// included) in memory, and the other settings of the module documentation.
    #[test]
    fn sqlite_connections_are_set_up_with_their_pragmas() {
        #[derive(QueryableByName)]
        struct Setting {
            #[diesel(sql_type = diesel::sql_types::Text)]
            value: String,
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let url = DatabaseUrl::parse(&format!("sqlite://{}/pragmas.db", dir.path().display()))
            .unwrap_or_else(|e| panic!("{e}"));
        let pool = Pool::new(&url, &PoolOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let mut conn = pool.get().unwrap_or_else(|e| panic!("{e}"));
        let DbConnection::Sqlite(lite) = &mut *conn else { panic!("not SQLite") };
        for (pragma, expected) in [
            ("temp_store", "2"),
            ("journal_mode", "wal"),
            ("synchronous", "1"),
            ("foreign_keys", "1"),
        ] {
            let setting: Setting =
                diesel::sql_query(format!("SELECT {pragma} AS value FROM pragma_{pragma}"))
                    .get_result(lite)
                    .unwrap_or_else(|e| panic!("{pragma}: {e}"));
            assert_eq!(setting.value, expected, "{pragma}");
        }
    }
}
