//! Repository of the usage ledger: `usage_daily` (rollups per API key, model and UTC day),
//! `usage_records` (one row per metered chat completion, where per-request records are kept)
//! and `usage_flushes` (the ids of the flushes applied).
//!
//! Nodes write flushes, not calls: [`apply_flush`] adds a node's sums of one interval to the
//! rollups, and its per-request records to `usage_records`, in one transaction recording the
//! flush's id, so a flush replayed after a crash or an outage never counts twice. Rollup rows
//! are updated in a fixed order (by key, model, day), so two nodes writing at once cannot
//! deadlock. [`bill_interrupted`] bills the calls cut by a stopped node.
//!
//! Usage queries read the rollups only ([`summary`], [`team_summary`]); the raw records are
//! read newest first by keyset paging ([`list_records`]) and pruned by age ([`prune_before`]).

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::{usage_daily, usage_records};
use aigw_domain::ledger::{RollupKey, UsageFlush, UsageSums};
use aigw_domain::usage::{format_day, TokenUsage, UsageOutcome, UsageRecord};
use chrono::{NaiveDate, NaiveDateTime};
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel::upsert::excluded;
use std::collections::BTreeMap;

/// Rows per PostgreSQL `INSERT` statement (its 15 parameters are arrays of this many values).
const ROWS_PER_STATEMENT: usize = 500;

/// A row of `usage_records`, as read (records are written by [`apply_flush`]).
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = usage_records)]
pub struct UsageRecordRow {
    /// Request id (UUIDv7), unique.
    pub request_id: String,
    /// API key id (no foreign key: the ledger outlives deleted keys).
    pub api_key_id: String,
    /// The key's owner.
    pub user_id: String,
    /// Model name.
    pub model: String,
    /// Provider name.
    pub provider: String,
    /// Whether the call streamed.
    pub streamed: bool,
    /// `ok`, `upstream_error`, `client_cancelled`, `timeout` or `interrupted`.
    pub outcome: String,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Total tokens.
    pub total_tokens: i64,
    /// Whether the tokens were estimated.
    pub estimated: bool,
    /// Cost in micro-USD.
    pub cost_micros: i64,
    /// Whether the model had a price.
    pub priced: bool,
    /// Upstream latency in milliseconds.
    pub latency_ms: i64,
    /// Start of the call, UTC.
    pub started_at: NaiveDateTime,
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl UsageRecordRow {
    /// The domain record. An outcome name this build does not know reads as `upstream_error`.
    pub fn into_record(self) -> UsageRecord {
        UsageRecord {
            request_id: self.request_id,
            api_key_id: self.api_key_id.into(),
            user_id: self.user_id.into(),
            model: self.model,
            provider: self.provider,
            streamed: self.streamed,
            outcome: UsageOutcome::parse(&self.outcome).unwrap_or(UsageOutcome::UpstreamError),
            tokens: TokenUsage {
                prompt_tokens: to_u64(self.prompt_tokens),
                completion_tokens: to_u64(self.completion_tokens),
                total_tokens: to_u64(self.total_tokens),
            },
            estimated: self.estimated,
            cost_micros: to_u64(self.cost_micros),
            priced: self.priced,
            latency_ms: to_u64(self.latency_ms),
            started_at: self.started_at.and_utc(),
            team_id: None,
            member_id: None,
        }
    }
}

/// A row of `usage_daily`, also the increment added to one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = usage_daily, treat_none_as_default_value = false)]
struct DailyRow {
    api_key_id: String,
    model: String,
    day: String,
    user_id: String,
    requests: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    total_tokens: i64,
    cost_micros: i64,
    estimated_requests: i64,
    unpriced_requests: i64,
    team_id: Option<String>,
    member_id: Option<String>,
}

impl DailyRow {
    fn add(&mut self, sums: &UsageSums) {
        let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.requests = self.requests.saturating_add(to_i64(sums.requests));
        self.prompt_tokens = self.prompt_tokens.saturating_add(to_i64(sums.prompt_tokens));
        self.completion_tokens =
            self.completion_tokens.saturating_add(to_i64(sums.completion_tokens));
        self.total_tokens = self.total_tokens.saturating_add(to_i64(sums.total_tokens));
        self.cost_micros = self.cost_micros.saturating_add(to_i64(sums.cost_micros));
        self.estimated_requests =
            self.estimated_requests.saturating_add(to_i64(sums.estimated_requests));
        self.unpriced_requests =
            self.unpriced_requests.saturating_add(to_i64(sums.unpriced_requests));
    }
}

/// Rollup rows per upsert statement (13 values each): a flush of 1,000 keys × 5 models is 10
/// statements, not 5,000 round trips.
const ROLLUP_ROWS_PER_UPSERT: usize = 500;

/// Adds increments to their rollup rows in one multi-row statement, creating those missing
/// (on a concrete connection: the multi-backend connection has no `ON CONFLICT`). The rows
/// must be distinct (one per key, model and day).
macro_rules! upsert_daily {
    ($c:ident, $inc:expr) => {{
        use usage_daily::dsl as d;
        diesel::insert_into(d::usage_daily)
            .values($inc)
            .on_conflict((d::api_key_id, d::model, d::day))
            .do_update()
            .set((
                d::requests.eq(d::requests + excluded(d::requests)),
                d::prompt_tokens.eq(d::prompt_tokens + excluded(d::prompt_tokens)),
                d::completion_tokens.eq(d::completion_tokens + excluded(d::completion_tokens)),
                d::total_tokens.eq(d::total_tokens + excluded(d::total_tokens)),
                d::cost_micros.eq(d::cost_micros + excluded(d::cost_micros)),
                d::estimated_requests.eq(d::estimated_requests + excluded(d::estimated_requests)),
                d::unpriced_requests.eq(d::unpriced_requests + excluded(d::unpriced_requests)),
            ))
            .execute($c)?;
    }};
}
/// A record to insert, borrowed from its [`UsageRecord`] (no copies of its strings).
/// `Insertable` for PostgreSQL's binary `COPY` (every column written, none defaulted).
#[derive(Debug, Insertable)]
#[diesel(table_name = usage_records, treat_none_as_default_value = false)]
struct NewUsageRecord<'a> {
    request_id: &'a str,
    api_key_id: &'a str,
    user_id: &'a str,
    model: &'a str,
    provider: &'a str,
    streamed: bool,
    outcome: &'static str,
    prompt_tokens: i64,
    completion_tokens: i64,
    total_tokens: i64,
    estimated: bool,
    cost_micros: i64,
    priced: bool,
    latency_ms: i64,
    started_at: NaiveDateTime,
}

impl<'a> From<&'a UsageRecord> for NewUsageRecord<'a> {
    fn from(r: &'a UsageRecord) -> Self {
        Self {
            request_id: &r.request_id,
            api_key_id: &r.api_key_id,
            user_id: &r.user_id,
            model: &r.model,
            provider: &r.provider,
            streamed: r.streamed,
            outcome: r.outcome.as_str(),
            prompt_tokens: to_i64(r.tokens.prompt_tokens),
            completion_tokens: to_i64(r.tokens.completion_tokens),
            total_tokens: to_i64(r.tokens.total_tokens),
            estimated: r.estimated,
            cost_micros: to_i64(r.cost_micros),
            priced: r.priced,
            latency_ms: to_i64(r.latency_ms),
            started_at: r.started_at.naive_utc(),
        }
    }
}

/// A ledger row as `column = value` pairs, with its text columns (but `outcome`) as `S`.
type Columns<S> = (
    diesel::dsl::Eq<usage_records::request_id, S>,
    diesel::dsl::Eq<usage_records::api_key_id, S>,
    diesel::dsl::Eq<usage_records::user_id, S>,
    diesel::dsl::Eq<usage_records::model, S>,
    diesel::dsl::Eq<usage_records::provider, S>,
    diesel::dsl::Eq<usage_records::streamed, bool>,
    diesel::dsl::Eq<usage_records::outcome, &'static str>,
    diesel::dsl::Eq<usage_records::prompt_tokens, i64>,
    diesel::dsl::Eq<usage_records::completion_tokens, i64>,
    diesel::dsl::Eq<usage_records::total_tokens, i64>,
    diesel::dsl::Eq<usage_records::estimated, bool>,
    diesel::dsl::Eq<usage_records::cost_micros, i64>,
    diesel::dsl::Eq<usage_records::priced, bool>,
    diesel::dsl::Eq<usage_records::latency_ms, i64>,
    diesel::dsl::Eq<usage_records::started_at, SqliteTimestamp>,
);

impl<'a> NewUsageRecord<'a> {
    /// The row as `column = value` pairs: the form diesel identifies by its type alone, so
    /// that its statement is prepared once per connection and found again without building
    /// or hashing its SQL.
    fn columns(&self) -> Columns<&'a str> {
        self.columns_with(|text| text)
    }

    /// The same with owned text: a multi-row statement is identified by the type of its rows,
    /// which diesel needs to be `'static`.
    fn owned_columns(&self) -> Columns<String> {
        self.columns_with(str::to_owned)
    }

    fn columns_with<S>(&self, text: impl Fn(&'a str) -> S) -> Columns<S>
    where
        S: diesel::expression::AsExpression<diesel::sql_types::Text>,
    {
        use usage_records::dsl as r;
        (
            r::request_id.eq(text(self.request_id)),
            r::api_key_id.eq(text(self.api_key_id)),
            r::user_id.eq(text(self.user_id)),
            r::model.eq(text(self.model)),
            r::provider.eq(text(self.provider)),
            r::streamed.eq(self.streamed),
            r::outcome.eq(self.outcome),
            r::prompt_tokens.eq(self.prompt_tokens),
            r::completion_tokens.eq(self.completion_tokens),
            r::total_tokens.eq(self.total_tokens),
            r::estimated.eq(self.estimated),
            r::cost_micros.eq(self.cost_micros),
            r::priced.eq(self.priced),
            r::latency_ms.eq(self.latency_ms),
            r::started_at.eq(SqliteTimestamp(self.started_at)),
        )
    }
}

/// A `TIMESTAMP` bound for SQLite as the same text diesel writes for a [`NaiveDateTime`]
/// (chrono's `%F %T%.f`), written digit by digit: chrono's formatter parses the format string
/// again for every value, about 3 000 instructions of each ledger row (docs/performance.md).
#[derive(Debug, Clone, Copy, diesel::expression::AsExpression)]
#[diesel(sql_type = diesel::sql_types::Timestamp)]
struct SqliteTimestamp(NaiveDateTime);

impl diesel::serialize::ToSql<diesel::sql_types::Timestamp, diesel::sqlite::Sqlite>
    for SqliteTimestamp
{
    fn to_sql<'b>(
        &'b self,
        out: &mut diesel::serialize::Output<'b, '_, diesel::sqlite::Sqlite>,
    ) -> diesel::serialize::Result {
        out.set_value(sqlite_timestamp_text(&self.0));
        Ok(diesel::serialize::IsNull::No)
    }
}

/// The format diesel writes a SQLite `TIMESTAMP` in (chrono's, for a [`NaiveDateTime`]).
const SQLITE_TIMESTAMP_FORMAT: &str = "%F %T%.f";

/// `at` as `YYYY-MM-DD HH:MM:SS` and, unless whole, `.` and 3, 6 or 9 digits of the second
/// (the fewest that hold it): `at.format(SQLITE_TIMESTAMP_FORMAT)`, with the format parsed
/// once.
fn sqlite_timestamp_text(at: &NaiveDateTime) -> String {
    use chrono::format::{Item, StrftimeItems};
    // A constant format, which parses (the test below compares with `format`'s text).
    static ITEMS: std::sync::LazyLock<Vec<Item<'static>>> = std::sync::LazyLock::new(|| {
        StrftimeItems::new(SQLITE_TIMESTAMP_FORMAT).parse().unwrap_or_default()
    });
    at.format_with_items(ITEMS.iter()).to_string()
}

/// The PostgreSQL insert of a whole chunk: one statement of fixed text whatever the number of
/// rows (15 array parameters, one per column), skipping request ids already there.
const PG_INSERT_UNNEST: &str = "INSERT INTO usage_records (request_id, api_key_id, user_id, \
    model, provider, streamed, outcome, prompt_tokens, completion_tokens, total_tokens, \
    estimated, cost_micros, priced, latency_ms, started_at) \
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
    $6::bool[], $7::text[], $8::int8[], $9::int8[], $10::int8[], $11::bool[], $12::int8[], \
    $13::bool[], $14::int8[], $15::timestamp[]) \
    ON CONFLICT (request_id) DO NOTHING";

/// Inserts `chunk` on PostgreSQL in one statement, skipping request ids already there.
fn insert_chunk_pg<'a>(
    conn: &mut diesel::PgConnection,
    chunk: &'a [NewUsageRecord<'a>],
) -> QueryResult<usize> {
    use diesel::sql_types::{Array, BigInt, Bool, Text, Timestamp};
    let texts = |f: fn(&'a NewUsageRecord<'a>) -> &'a str| chunk.iter().map(f).collect::<Vec<_>>();
    let numbers = |f: fn(&'a NewUsageRecord<'a>) -> i64| chunk.iter().map(f).collect::<Vec<_>>();
    let flags = |f: fn(&'a NewUsageRecord<'a>) -> bool| chunk.iter().map(f).collect::<Vec<_>>();
    diesel::sql_query(PG_INSERT_UNNEST)
        .bind::<Array<Text>, _>(texts(|r| r.request_id))
        .bind::<Array<Text>, _>(texts(|r| r.api_key_id))
        .bind::<Array<Text>, _>(texts(|r| r.user_id))
        .bind::<Array<Text>, _>(texts(|r| r.model))
        .bind::<Array<Text>, _>(texts(|r| r.provider))
        .bind::<Array<Bool>, _>(flags(|r| r.streamed))
        .bind::<Array<Text>, _>(texts(|r| r.outcome))
        .bind::<Array<BigInt>, _>(numbers(|r| r.prompt_tokens))
        .bind::<Array<BigInt>, _>(numbers(|r| r.completion_tokens))
        .bind::<Array<BigInt>, _>(numbers(|r| r.total_tokens))
        .bind::<Array<Bool>, _>(flags(|r| r.estimated))
        .bind::<Array<BigInt>, _>(numbers(|r| r.cost_micros))
        .bind::<Array<Bool>, _>(flags(|r| r.priced))
        .bind::<Array<BigInt>, _>(numbers(|r| r.latency_ms))
        .bind::<Array<Timestamp>, _>(chunk.iter().map(|r| r.started_at).collect::<Vec<_>>())
        .execute(conn)
}

/// [`apply_flush`] on a concrete connection (the multi-backend connection has no
/// `ON CONFLICT`).
macro_rules! apply_flush_on {
    ($c:ident, $flush:expr, $with_records:expr) => {{
        let flush: &UsageFlush = $flush;
        use crate::schema::{calls_in_flight as f, usage_flushes as u};
        let now = aigw_domain::time::now().naive_utc();
        let fresh = diesel::insert_into(u::table)
            .values((u::flush_id.eq(&flush.id), u::applied_at.eq(now)))
            .on_conflict_do_nothing()
            .execute($c)?;
        if fresh == 0 {
            return QueryResult::Ok(FlushApplied::default());
        }
        let mut billed = std::collections::HashSet::new();
        for chunk in flush.tracked.chunks(1000) {
            let ids: Vec<&str> = chunk.iter().map(|r| r.request_id.as_str()).collect();
            // One statement deletes the rows and says which were billed: a recovering node
            // that marks a row meanwhile either commits first (this delete then sees its
            // mark) or finds the row gone. Reading the marks before the delete would miss a
            // mark made in between, and count the call twice.
            let deleted: Vec<(String, Option<NaiveDateTime>)> =
                diesel::delete(f::table.filter(f::request_id.eq_any(&ids)))
                    .returning((f::request_id, f::billed_at))
                    .load($c)?;
            billed.extend(deleted.into_iter().filter(|(_, at)| at.is_some()).map(|(id, _)| id));
        }
        let counted: Vec<&UsageRecord> =
            flush.tracked.iter().filter(|r| !billed.contains(&r.request_id)).collect();
        let mut rows = daily_rows(flush.rollups.iter().map(|r| (&r.key, r.sums)));
        for record in &counted {
            add_daily(&mut rows, &RollupKey::of(record), UsageSums::of(record));
        }
        let rows: Vec<DailyRow> = rows.into_values().collect();
        for chunk in rows.chunks(ROLLUP_ROWS_PER_UPSERT) {
            upsert_daily!($c, chunk);
        }
        let mut records: Vec<NewUsageRecord<'_>> = if $with_records {
            flush.records.iter().map(NewUsageRecord::from).collect()
        } else {
            Vec::new()
        };
        if flush.keep_records {
            records.extend(counted.iter().map(|r| NewUsageRecord::from(*r)));
        }
        InsertRecords::insert($c, &records)?;
        QueryResult::Ok(FlushApplied {
            applied: true,
            calls: flush.rollups.iter().map(|r| r.sums.requests).sum::<u64>()
                + counted.len() as u64,
            already_billed: billed.len() as u64,
        })
    }};
}

/// [`bill_interrupted`] on a concrete connection.
macro_rules! bill_interrupted_on {
    ($c:ident, $records:expr, $keep:expr) => {{
        let records: &[UsageRecord] = $records;
        use crate::schema::calls_in_flight as f;
        let now = aigw_domain::time::now().naive_utc();
        let mut claimed = std::collections::HashSet::new();
        for chunk in records.chunks(1000) {
            let ids: Vec<&str> = chunk.iter().map(|r| r.request_id.as_str()).collect();
            claimed.extend(
                diesel::update(
                    f::table.filter(f::request_id.eq_any(&ids)).filter(f::billed_at.is_null()),
                )
                .set(f::billed_at.eq(now))
                .returning(f::request_id)
                .load::<String>($c)?,
            );
        }
        let billed: Vec<&UsageRecord> =
            records.iter().filter(|r| claimed.contains(&r.request_id)).collect();
        let rows = daily_rows(billed.iter().map(|r| (RollupKey::of(r), UsageSums::of(r))));
        let rows: Vec<DailyRow> = rows.into_values().collect();
        for chunk in rows.chunks(ROLLUP_ROWS_PER_UPSERT) {
            upsert_daily!($c, chunk);
        }
        if $keep {
            let new: Vec<NewUsageRecord<'_>> =
                billed.iter().map(|r| NewUsageRecord::from(*r)).collect();
            InsertRecords::insert($c, &new)?;
        }
        QueryResult::Ok(billed.len() as u64)
    }};
}

/// What [`apply_flush`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushApplied {
    /// False when the ledger had seen the flush's id already (a replay): nothing was written.
    pub applied: bool,
    /// Calls added to the rollups.
    pub calls: u64,
    /// Tracked calls found already billed as interrupted by another node: not counted again.
    pub already_billed: u64,
}

/// Applies one flush to the ledger in one transaction (see [`aigw_domain::ledger`]): records
/// its id (a flush seen before is skipped whole), deletes the rows among the calls in flight
/// of its tracked calls and counts those that were not billed already, adds its sums to the
/// daily rollups (one upsert per row, in row order, so two nodes cannot deadlock), and
/// inserts its per-request records.
///
/// # Errors
/// On database failure; then nothing was written.
pub fn apply_flush(
    conn: &mut DbConnection,
    flush: &UsageFlush,
) -> Result<FlushApplied, PersistenceError> {
    apply_flush_with(conn, flush, true)
}

/// [`apply_flush`] without inserting `flush.records`, which the caller has inserted already
/// ([`insert_records`], several connections at once); the records of tracked calls are still
/// inserted here. A crash between the two leaves records whose flush is not applied: the
/// flush's replay inserts them again, and the insert skips them.
///
/// # Errors
/// On database failure; then nothing was written.
pub fn apply_flush_records_written(
    conn: &mut DbConnection,
    flush: &UsageFlush,
) -> Result<FlushApplied, PersistenceError> {
    apply_flush_with(conn, flush, false)
}

fn apply_flush_with(
    conn: &mut DbConnection,
    flush: &UsageFlush,
    with_records: bool,
) -> Result<FlushApplied, PersistenceError> {
    let applied = match conn {
        DbConnection::Postgres(c) => c.transaction(|c| apply_flush_on!(c, flush, with_records)),
        DbConnection::Sqlite(c) => {
            c.immediate_transaction(|c| apply_flush_on!(c, flush, with_records))
        }
    };
    Ok(applied?)
}

/// Inserts per-request `records` in a transaction of their own, skipping request ids already
/// in the ledger (see `InsertRecords`). Their calls are counted by their flush, not here.
///
/// # Errors
/// On database failure; then nothing was written.
pub fn insert_records(
    conn: &mut DbConnection,
    records: &[UsageRecord],
) -> Result<(), PersistenceError> {
    let rows: Vec<NewUsageRecord<'_>> = records.iter().map(NewUsageRecord::from).collect();
    match conn {
        DbConnection::Postgres(c) => c.transaction(|c| InsertRecords::insert(c, &rows))?,
        DbConnection::Sqlite(c) => c.immediate_transaction(|c| InsertRecords::insert(c, &rows))?,
    }
    Ok(())
}

/// Bills `calls` (rows of the calls in flight of stopped nodes) as `records`, in one
/// transaction: marks each row billed unless it was billed or deleted meanwhile (by another
/// node, or by its own node recording it), and adds exactly the calls it marked to the
/// rollups (and their records where `keep_records`). Returns how many it billed.
///
/// # Errors
/// On database failure; then nothing was written.
pub fn bill_interrupted(
    conn: &mut DbConnection,
    records: &[UsageRecord],
    keep_records: bool,
) -> Result<u64, PersistenceError> {
    let billed = match conn {
        DbConnection::Postgres(c) => {
            c.transaction(|c| bill_interrupted_on!(c, records, keep_records))
        }
        DbConnection::Sqlite(c) => {
            c.immediate_transaction(|c| bill_interrupted_on!(c, records, keep_records))
        }
    };
    Ok(billed?)
}

/// Inserts per-request records on a concrete connection, skipping a request id already in the
/// ledger (which only a bug could bring twice: flushes are applied once). PostgreSQL: one
/// binary `COPY` in a savepoint, and only if that meets a request id already there, statements
/// of 500 rows taking each column as an array with `ON CONFLICT DO NOTHING`. SQLite:
/// `INSERT OR IGNORE` statements of 16 rows (prepared once per connection), then one row each
/// for the rest.
trait InsertRecords {
    fn insert(&mut self, rows: &[NewUsageRecord<'_>]) -> QueryResult<()>;
}

impl InsertRecords for diesel::PgConnection {
    fn insert(&mut self, rows: &[NewUsageRecord<'_>]) -> QueryResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let copied = self.transaction(|c| {
            diesel::copy_from(usage_records::table).from_insertable(rows).execute(c)
        });
        match copied {
            Ok(_) => Ok(()),
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            )) => {
                for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                    insert_chunk_pg(self, chunk)?;
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl InsertRecords for diesel::SqliteConnection {
    fn insert(&mut self, rows: &[NewUsageRecord<'_>]) -> QueryResult<()> {
        let mut chunks = rows.chunks_exact(SQLITE_ROWS_PER_INSERT);
        for chunk in &mut chunks {
            if let Ok(chunk) = <&[NewUsageRecord<'_>; SQLITE_ROWS_PER_INSERT]>::try_from(chunk) {
                let values: [_; SQLITE_ROWS_PER_INSERT] =
                    std::array::from_fn(|i| chunk[i].owned_columns());
                diesel::insert_or_ignore_into(usage_records::table).values(values).execute(self)?;
            }
        }
        for row in chunks.remainder() {
            diesel::insert_or_ignore_into(usage_records::table)
                .values(row.columns())
                .execute(self)?;
        }
        Ok(())
    }
}

/// Rows per multi-row ledger insert on SQLite: 16 rows of 15 columns bind 240 values. The
/// statement's shape is fixed, so diesel prepares it once per connection and finds it again
/// by its type.
const SQLITE_ROWS_PER_INSERT: usize = 16;

/// The rollup rows of `increments`, merged per row and ordered by row (key, model, day), so
/// concurrent writers lock rollup rows in the same order.
fn daily_rows<K: std::borrow::Borrow<RollupKey>>(
    increments: impl Iterator<Item = (K, UsageSums)>,
) -> BTreeMap<(String, String, NaiveDate), DailyRow> {
    let mut rows = BTreeMap::new();
    for (key, sums) in increments {
        add_daily(&mut rows, key.borrow(), sums);
    }
    rows
}

fn add_daily(
    rows: &mut BTreeMap<(String, String, NaiveDate), DailyRow>,
    key: &RollupKey,
    sums: UsageSums,
) {
    let row = rows
        .entry((key.api_key_id.as_str().to_owned(), key.model.clone(), key.day))
        .or_insert_with(|| DailyRow {
            api_key_id: key.api_key_id.as_str().to_owned(),
            model: key.model.clone(),
            day: format_day(key.day),
            user_id: key.user_id.as_str().to_owned(),
            team_id: key.team_id.as_deref().map(str::to_owned),
            member_id: key.member_id.as_deref().map(str::to_owned),
            ..DailyRow::default()
        });
    row.add(&sums);
}

/// The select list of a usage summary: the group's value, then the rollups' sums in the
/// order of [`UsageTotalsRow`].
macro_rules! sums_of {
    ($group:expr) => {
        (
            $group,
            sql::<BigInt>("CAST(SUM(requests) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(prompt_tokens) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(completion_tokens) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(total_tokens) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(cost_micros) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(estimated_requests) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(unpriced_requests) AS BIGINT)"),
        )
    };
}

/// How [`summary`] groups the rollups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageGroup {
    /// By UTC day (`YYYY-MM-DD`).
    Day,
    /// By model name.
    Model,
    /// By API key id.
    ApiKey,
}

/// Sums over a group of rollup rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Queryable)]
pub struct UsageTotalsRow {
    /// The group's value: a day, a model or an API key id.
    pub group: String,
    /// Requests counted.
    pub requests: i64,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Total tokens.
    pub total_tokens: i64,
    /// Cost in micro-USD.
    pub cost_micros: i64,
    /// Requests whose tokens were estimated.
    pub estimated_requests: i64,
    /// Requests of models without a price.
    pub unpriced_requests: i64,
}

/// The rollups of `user_id` for the days `from..=to` (optionally of one API key), summed per
/// `group` and sorted by it; team keys' calls are their team's ([`team_summary`]), not their
/// creator's. Reads `usage_daily` only, through its `(user_id, day)` index.
///
/// # Errors
/// On database failure.
pub fn summary(
    conn: &mut DbConnection,
    user_id: &str,
    from: NaiveDate,
    to: NaiveDate,
    api_key_id: Option<&str>,
    group: UsageGroup,
) -> Result<Vec<UsageTotalsRow>, PersistenceError> {
    use usage_daily::dsl as d;
    let (from, to) = (format_day(from), format_day(to));
    macro_rules! grouped {
        ($column:expr) => {{
            // A team key's calls belong to its team (they carry a team but no member), not
            // to the user who created the key.
            let mut query = d::usage_daily
                .filter(d::user_id.eq(user_id))
                .filter(d::team_id.is_null().or(d::member_id.is_not_null()))
                .filter(d::day.ge(&from))
                .filter(d::day.le(&to))
                .group_by($column)
                .select(sums_of!($column))
                .order($column.asc())
                .into_boxed();
            if let Some(key) = api_key_id {
                query = query.filter(d::api_key_id.eq(key));
            }
            query.load::<UsageTotalsRow>(conn)?
        }};
    }
    Ok(match group {
        UsageGroup::Day => grouped!(d::day),
        UsageGroup::Model => grouped!(d::model),
        UsageGroup::ApiKey => grouped!(d::api_key_id),
    })
}

/// How [`team_summary`] groups a team's rollups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamUsageGroup {
    /// By UTC day (`YYYY-MM-DD`).
    Day,
    /// By model name.
    Model,
    /// By API key id.
    ApiKey,
    /// By member (user id; empty for the team keys' calls).
    Member,
    /// By team id (every team's usage: [`team_summary`] with no team).
    Team,
}

/// The rollups of team `team_id` (of every team when `None`) for the days `from..=to`,
/// summed per `group` and sorted by it. Reads `usage_daily` through its `(team_id, day)`
/// index.
///
/// # Errors
/// On database failure.
pub fn team_summary(
    conn: &mut DbConnection,
    team_id: Option<&str>,
    from: NaiveDate,
    to: NaiveDate,
    group: TeamUsageGroup,
) -> Result<Vec<UsageTotalsRow>, PersistenceError> {
    use usage_daily::dsl as d;
    let (from, to) = (format_day(from), format_day(to));
    macro_rules! grouped {
        ($column:expr, $shown:expr) => {{
            let mut query = d::usage_daily
                .filter(d::team_id.is_not_null())
                .filter(d::day.ge(&from))
                .filter(d::day.le(&to))
                .group_by($column)
                .select(sums_of!($shown))
                .order($column.asc())
                .into_boxed();
            if let Some(team) = team_id {
                query = query.filter(d::team_id.eq(team));
            }
            let rows: Vec<NullableTotalsRow> = query.load(conn)?;
            rows.into_iter().map(NullableTotalsRow::into_row).collect::<Vec<_>>()
        }};
    }
    Ok(match group {
        TeamUsageGroup::Day => grouped!(d::day, d::day.nullable()),
        TeamUsageGroup::Model => grouped!(d::model, d::model.nullable()),
        TeamUsageGroup::ApiKey => grouped!(d::api_key_id, d::api_key_id.nullable()),
        TeamUsageGroup::Member => grouped!(d::member_id, d::member_id),
        TeamUsageGroup::Team => grouped!(d::team_id, d::team_id),
    })
}

/// [`UsageTotalsRow`] grouped by a column that may be NULL.
#[derive(Debug, Queryable)]
struct NullableTotalsRow {
    group: Option<String>,
    requests: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    total_tokens: i64,
    cost_micros: i64,
    estimated_requests: i64,
    unpriced_requests: i64,
}

impl NullableTotalsRow {
    fn into_row(self) -> UsageTotalsRow {
        UsageTotalsRow {
            group: self.group.unwrap_or_default(),
            requests: self.requests,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.total_tokens,
            cost_micros: self.cost_micros,
            estimated_requests: self.estimated_requests,
            unpriced_requests: self.unpriced_requests,
        }
    }
}

/// Up to `limit` records of `user_id`, newest first (by `started_at`, then `request_id`),
/// strictly after the keyset position `after` (the last record of the previous page).
///
/// # Errors
/// On database failure.
pub fn list_records(
    conn: &mut DbConnection,
    user_id: &str,
    after: Option<(NaiveDateTime, &str)>,
    limit: i64,
) -> Result<Vec<UsageRecordRow>, PersistenceError> {
    use usage_records::dsl as r;
    let mut query = r::usage_records
        .filter(r::user_id.eq(user_id))
        .order((r::started_at.desc(), r::request_id.desc()))
        .limit(limit)
        .into_boxed();
    if let Some((started_at, request_id)) = after {
        query = query.filter(
            r::started_at
                .lt(started_at)
                .or(r::started_at.eq(started_at).and(r::request_id.lt(request_id))),
        );
    }
    Ok(query.select(UsageRecordRow::as_select()).load(conn)?)
}

/// The record `request_id`, if in the ledger.
///
/// # Errors
/// On database failure.
pub fn find_record(
    conn: &mut DbConnection,
    request_id: &str,
) -> Result<Option<UsageRecordRow>, PersistenceError> {
    Ok(usage_records::table
        .find(request_id)
        .select(UsageRecordRow::as_select())
        .first(conn)
        .optional()?)
}

/// Deletes at most `batch` records that started before `cutoff` (UTC), oldest first. Returns
/// how many were deleted; call again while it returns `batch`. Rollups are kept.
///
/// # Errors
/// On database failure.
pub fn prune_before(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> Result<usize, PersistenceError> {
    use usage_records::dsl as r;
    let oldest: Vec<String> = r::usage_records
        .filter(r::started_at.lt(cutoff))
        .order(r::started_at.asc())
        .select(r::request_id)
        .limit(batch)
        .load(conn)?;
    if oldest.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(r::usage_records.filter(r::request_id.eq_any(&oldest))).execute(conn)?)
}

/// Deletes the ids of flushes applied before `cutoff` (UTC) and the rows of calls in flight
/// billed as interrupted before it: a spool file older than that would count again. Returns
/// how many rows were deleted.
///
/// # Errors
/// On database failure.
pub fn prune_flushes_before(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
) -> Result<usize, PersistenceError> {
    use crate::schema::{calls_in_flight as f, usage_flushes as u};
    let flushes = diesel::delete(u::table.filter(u::applied_at.lt(cutoff))).execute(conn)?;
    let billed = diesel::delete(f::table.filter(f::billed_at.lt(cutoff))).execute(conn)?;
    Ok(flushes + billed)
}

#[cfg(test)]
mod tests {
    use super::{sqlite_timestamp_text, SQLITE_TIMESTAMP_FORMAT};
    use chrono::{NaiveDate, NaiveDateTime};

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, nano: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|d| d.and_hms_nano_opt(h, mi, s, nano))
            .unwrap_or_default()
    }

    #[test]
    fn sqlite_timestamps_are_the_text_diesel_writes() {
        let cases = [
            at(2026, 11, 25, 9, 38, 34, 4_060_000),
            at(2026, 1, 2, 3, 4, 5, 0),
            at(2026, 12, 31, 23, 59, 59, 120_000_000),
            at(2026, 6, 30, 23, 59, 59, 1_500_000_000),
            at(1999, 12, 31, 0, 0, 0, 1),
            at(1, 1, 1, 0, 0, 0, 999_999_999),
            at(9999, 12, 31, 23, 59, 59, 7_000),
            at(10_000, 1, 1, 0, 0, 0, 0),
            at(-5, 3, 4, 5, 6, 7, 8_000_000),
        ];
        for case in cases {
            assert_eq!(
                sqlite_timestamp_text(&case),
                case.format(SQLITE_TIMESTAMP_FORMAT).to_string()
            );
        }
        assert_eq!(sqlite_timestamp_text(&cases[0]), "2026-11-25 09:38:34.004060");
    }
}
