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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::SQLITE;
    use crate::pool::DbConnection;
    use diesel::migration::MigrationSource;
    use diesel::prelude::*;
    use diesel_migrations::MigrationHarness;

    /// The records kept one row per call before records were stored in batches are moved
    /// into batches by the migration, every field kept.
    #[test]
    fn records_kept_per_row_move_into_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut c =
            SqliteConnection::establish(&dir.path().join("a.db").to_string_lossy()).unwrap();
        let all = MigrationSource::<diesel::sqlite::Sqlite>::migrations(&SQLITE).unwrap();
        let before =
            all.iter().filter(|m| m.name().version().to_string().as_str() < "20261201").count();
        for _ in 0..before {
            c.run_next_migration(SQLITE).unwrap();
        }
        diesel::sql_query(
            "INSERT INTO usage_records VALUES \
             ('r1','k1','u1','gpt','openai',1,'ok',10,20,30,0,123,1,45,'2026-11-27 10:00:01.5'), \
             ('r2','k1','u1','gpt','openai',0,'timeout',10,0,10,1,5,0,45,'2026-11-27 10:00:59'), \
             ('r3','k2','u1','gpt','openai',0,'ok',1,2,3,0,7,1,4,'2026-11-27 10:01:00.123456'), \
             ('r4','k3','u2','gpt','openai',0,'ok',1,2,3,0,7,1,4,'2026-11-27 10:01:00')",
        )
        .execute(&mut c)
        .unwrap();
        c.run_pending_migrations(SQLITE).unwrap();
        let mut conn = DbConnection::Sqlite(c);
        assert_eq!(crate::usage_records::count(&mut conn).unwrap(), 4);
        let listed = crate::usage_records::list_records(&mut conn, &"u1".into(), None, 10).unwrap();
        let ids: Vec<&str> = listed.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["r3", "r2", "r1"]);
        let r1 = &listed[2];
        assert_eq!(r1.started_at.timestamp_micros(), 1_795_773_601_500_000);
        assert_eq!(
            (r1.api_key_id.as_str(), r1.model.as_str(), r1.provider.as_str()),
            ("k1", "gpt", "openai")
        );
        assert!(r1.streamed && r1.priced && !r1.estimated);
        assert_eq!(
            (r1.tokens.prompt_tokens, r1.tokens.completion_tokens, r1.tokens.total_tokens),
            (10, 20, 30)
        );
        assert_eq!((r1.cost_micros, r1.latency_ms), (123, 45));
        let r2 = &listed[1];
        assert_eq!(r2.outcome, aigw_domain::usage::UsageOutcome::Timeout);
        assert!(!r2.streamed && !r2.priced && r2.estimated);
        assert_eq!(listed[0].started_at.timestamp_micros(), 1_795_773_660_123_456);
    }
}
