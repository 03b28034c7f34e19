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

    /// The rollups kept before endpoints were recorded stay, as `chat` with no cached or
    /// reasoning tokens, under the new key (API key, model, endpoint, day) with the table's
    /// indexes; a call of another endpoint the same day is a row of its own, and sums by the
    /// old key add both. Reverting folds them back into one row.
    #[test]
    #[allow(clippy::too_many_lines)]
    fn rollups_kept_before_endpoints_read_as_chat_and_endpoints_get_rows_of_their_own() {
        use crate::usage::{summary, UsageFilter, UsageGroup};
        use aigw_domain::usage::{Endpoint, TokenUsage, UsageOutcome, UsageRecord};
        let dir = tempfile::tempdir().unwrap();
        let mut c =
            SqliteConnection::establish(&dir.path().join("a.db").to_string_lossy()).unwrap();
        let all = MigrationSource::<diesel::sqlite::Sqlite>::migrations(&SQLITE).unwrap();
        let before =
            all.iter().filter(|m| m.name().version().to_string().as_str() < "20261202").count();
        for _ in 0..before {
            c.run_next_migration(SQLITE).unwrap();
        }
        diesel::sql_query(
            "INSERT INTO usage_daily (api_key_id, model, day, user_id, requests, prompt_tokens, \
             completion_tokens, total_tokens, cost_micros, estimated_requests, \
             unpriced_requests, team_id, member_id) VALUES \
             ('k1','gpt','2026-11-27','u1',3,30,60,90,900,1,0,NULL,NULL), \
             ('k2','gpt','2026-11-27','u2',1,1,2,3,4,0,1,'t1','u2')",
        )
        .execute(&mut c)
        .unwrap();
        c.run_pending_migrations(SQLITE).unwrap();
        let indexes: Vec<String> = diesel::dsl::sql::<diesel::sql_types::Text>(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'usage_daily' \
             AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
        )
        .load(&mut c)
        .unwrap();
        assert_eq!(indexes, ["usage_daily_team_idx", "usage_daily_user_day_idx"]);
        let mut conn = DbConnection::Sqlite(c);
        let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 27).unwrap();
        let read = |conn: &mut DbConnection, group| {
            summary(conn, &"u1".into(), day, day, UsageFilter::default(), group).unwrap()
        };
        let rows = read(&mut conn, UsageGroup::Endpoint);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].group.as_str(), rows[0].requests, rows[0].cost_micros),
            ("chat", 3, 900)
        );
        assert_eq!((rows[0].cached_tokens, rows[0].reasoning_tokens), (0, 0));
        let started_at = day.and_hms_opt(12, 0, 0).unwrap().and_utc();
        let record = UsageRecord {
            request_id: "r1".into(),
            api_key_id: "k1".into(),
            user_id: "u1".into(),
            model: "gpt".into(),
            provider: "p".into(),
            served_model: None,
            attempts: 1,
            endpoint: Endpoint::Embeddings,
            streamed: false,
            outcome: UsageOutcome::Ok,
            tokens: TokenUsage { cached_tokens: 4, ..TokenUsage::new(10, 0) },
            estimated: false,
            cost_micros: 100,
            priced: true,
            latency_ms: 1,
            started_at,
            team_id: None,
            member_id: None,
        };
        let flush = aigw_domain::ledger::UsageFlush {
            id: "f1".into(),
            tracked: vec![record],
            ..Default::default()
        };
        crate::usage::apply_flush(&mut conn, &flush).unwrap();
        let rows = read(&mut conn, UsageGroup::Endpoint);
        let shown: Vec<(&str, i64, i64)> =
            rows.iter().map(|r| (r.group.as_str(), r.requests, r.cached_tokens)).collect();
        assert_eq!(shown, [("chat", 3, 0), ("embeddings", 1, 4)]);
        let by_key = read(&mut conn, UsageGroup::ApiKey);
        assert_eq!((by_key.len(), by_key[0].requests, by_key[0].cost_micros), (1, 4, 1000));
        let spent = crate::budgets::ledger_spend_since(
            &mut conn,
            aigw_domain::CounterSubject::Key("k1"),
            "2026-11-01",
        )
        .unwrap();
        assert_eq!(spent, 1000);
        let team = crate::usage::team_summary(
            &mut conn,
            Some(&aigw_domain::TeamId::from("t1")),
            day,
            day,
            None,
            crate::usage::TeamUsageGroup::Member,
        )
        .unwrap();
        assert_eq!((team.len(), team[0].group.as_str(), team[0].requests), (1, "u2", 1));

        let DbConnection::Sqlite(mut c) = conn else { unreachable!() };
        // Back to before the endpoints' migration (reverting the later ones first).
        loop {
            let reverted = c.revert_last_migration(SQLITE).unwrap().to_string().replace('-', "");
            if reverted == "20261202000100" {
                break;
            }
            assert!(reverted.as_str() > "20261202000100", "went past it: {reverted}");
        }
        let rows: Vec<(String, i64, i64)> = diesel::dsl::sql::<(
            diesel::sql_types::Text,
            diesel::sql_types::BigInt,
            diesel::sql_types::BigInt,
        )>(
            "SELECT api_key_id, requests, cost_micros FROM usage_daily ORDER BY api_key_id",
        )
        .load(&mut c)
        .unwrap();
        assert_eq!(rows, [("k1".to_owned(), 4, 1000), ("k2".to_owned(), 1, 4)]);
    }
}
