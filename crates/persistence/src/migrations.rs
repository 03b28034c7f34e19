//! Embedded migrations (`migrations/sqlite`, `migrations/postgres`), applied at start and by
//! `aigw migrate`.
//!
//! On PostgreSQL the run holds a session-level advisory lock, so several nodes starting at
//! once apply each migration exactly once.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use diesel::prelude::*;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

const SQLITE: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
const POSTGRES: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// Advisory-lock key taken while PostgreSQL migrations run ("aigw" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x6169_6777;

/// Applies every pending migration and returns the versions applied (empty when up to date).
///
/// # Errors
/// [`PersistenceError::Migration`] when a migration fails (it is rolled back), or a query
/// error taking the PostgreSQL advisory lock.
pub fn run_pending(conn: &mut DbConnection) -> Result<Vec<String>, PersistenceError> {
    let applied = match conn {
        DbConnection::Sqlite(c) => c.run_pending_migrations(SQLITE).map(versions),
        DbConnection::Postgres(c) => {
            diesel::sql_query(format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
                .execute(c)?;
            let result = c.run_pending_migrations(POSTGRES).map(versions);
            diesel::sql_query(format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))
                .execute(c)?;
            result
        }
    };
    applied.map_err(|e| PersistenceError::Migration(e.to_string()))
}

fn versions(v: Vec<diesel::migration::MigrationVersion<'_>>) -> Vec<String> {
    v.into_iter().map(|m| m.to_string()).collect()
}
