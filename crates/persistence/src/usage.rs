//! Repository of the usage ledger: `usage_daily` (rollups per API key, model, endpoint and
//! UTC day),
//! the per-request records where those are kept (in batches: [`crate::usage_records`]) and
//! `usage_flushes` (the ids of the flushes applied).
//!
//! Nodes write flushes, not calls: [`apply_flush`] adds a node's sums of one interval to the
//! rollups, and its per-request records as batches, in one transaction recording the
//! flush's id, so a flush replayed after a crash or an outage never counts twice. Rollup rows
//! are updated in a fixed order (by key, model, endpoint, day), so two nodes writing at once cannot
//! deadlock. [`bill_interrupted`] bills the calls cut by a stopped node.
//!
//! Usage queries read the rollups only ([`summary`], [`team_summary`]); the raw records are
//! read and pruned by [`crate::usage_records`].

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::usage_daily;
use crate::usage_records::insert_batches;
use aigw_domain::ledger::{RollupKey, UsageFlush, UsageSums};
use aigw_domain::usage::{format_day, UsageRecord};
use aigw_domain::{TeamId, UserId};
use chrono::{NaiveDate, NaiveDateTime};
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel::upsert::excluded;
use std::collections::BTreeMap;

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
    endpoint: String,
    cached_tokens: i64,
    cache_write_tokens: i64,
    reasoning_tokens: i64,
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
        self.cached_tokens = self.cached_tokens.saturating_add(to_i64(sums.cached_tokens));
        self.cache_write_tokens =
            self.cache_write_tokens.saturating_add(to_i64(sums.cache_write_tokens));
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(to_i64(sums.reasoning_tokens));
    }
}

/// Rollup rows per upsert statement (17 values each, under SQLite's 32,766 bind parameters):
/// a flush of 1,000 keys × 5 models is 10 statements, not 5,000 round trips.
const ROLLUP_ROWS_PER_UPSERT: usize = 500;

/// Adds increments to their rollup rows in one multi-row statement, creating those missing
/// (on a concrete connection: the multi-backend connection has no `ON CONFLICT`). The rows
/// must be distinct (one per key, model, endpoint and day).
macro_rules! upsert_daily {
    ($c:ident, $inc:expr) => {{
        use usage_daily::dsl as d;
        diesel::insert_into(d::usage_daily)
            .values($inc)
            .on_conflict((d::api_key_id, d::model, d::endpoint, d::day))
            .do_update()
            .set((
                d::requests.eq(d::requests + excluded(d::requests)),
                d::prompt_tokens.eq(d::prompt_tokens + excluded(d::prompt_tokens)),
                d::completion_tokens.eq(d::completion_tokens + excluded(d::completion_tokens)),
                d::total_tokens.eq(d::total_tokens + excluded(d::total_tokens)),
                d::cost_micros.eq(d::cost_micros + excluded(d::cost_micros)),
                d::estimated_requests.eq(d::estimated_requests + excluded(d::estimated_requests)),
                d::unpriced_requests.eq(d::unpriced_requests + excluded(d::unpriced_requests)),
                d::cached_tokens.eq(d::cached_tokens + excluded(d::cached_tokens)),
                d::cache_write_tokens.eq(d::cache_write_tokens + excluded(d::cache_write_tokens)),
                d::reasoning_tokens.eq(d::reasoning_tokens + excluded(d::reasoning_tokens)),
            ))
            .execute($c)?;
    }};
}
/// [`apply_flush`] on a concrete connection (the multi-backend connection has no
/// `ON CONFLICT`).
macro_rules! apply_flush_on {
    ($c:ident, $flush:expr) => {{
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
        let kept = if flush.keep_records { counted.as_slice() } else { &[] };
        insert_batches!($c, flush.records.iter().chain(kept.iter().copied()));
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
            insert_batches!($c, billed.iter().copied());
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
    let applied = match conn {
        DbConnection::Postgres(c) => c.transaction(|c| apply_flush_on!(c, flush)),
        DbConnection::Sqlite(c) => c.immediate_transaction(|c| apply_flush_on!(c, flush)),
    };
    Ok(applied?)
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

/// A rollup row's identity: API key, model, endpoint, day (the table's key, in its order).
type RowId = (String, String, &'static str, NaiveDate);

/// The rollup rows of `increments`, merged per row and ordered by row (key, model, endpoint,
/// day), so concurrent writers lock rollup rows in the same order.
fn daily_rows<K: std::borrow::Borrow<RollupKey>>(
    increments: impl Iterator<Item = (K, UsageSums)>,
) -> BTreeMap<RowId, DailyRow> {
    let mut rows = BTreeMap::new();
    for (key, sums) in increments {
        add_daily(&mut rows, key.borrow(), sums);
    }
    rows
}

fn add_daily(rows: &mut BTreeMap<RowId, DailyRow>, key: &RollupKey, sums: UsageSums) {
    let endpoint = key.endpoint.as_str();
    let row = rows
        .entry((key.api_key_id.as_str().to_owned(), key.model.clone(), endpoint, key.day))
        .or_insert_with(|| DailyRow {
            api_key_id: key.api_key_id.as_str().to_owned(),
            model: key.model.clone(),
            endpoint: endpoint.to_owned(),
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
            sql::<BigInt>("CAST(SUM(cached_tokens) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(cache_write_tokens) AS BIGINT)"),
            sql::<BigInt>("CAST(SUM(reasoning_tokens) AS BIGINT)"),
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
    /// By endpoint (`chat`, `embeddings`, `responses`, `messages`).
    Endpoint,
}

/// Sums over a group of rollup rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Queryable)]
pub struct UsageTotalsRow {
    /// The group's value: a day, a model, an API key id, an endpoint, a member or a team.
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
    /// Of the prompt tokens, those read from the provider's prompt cache.
    pub cached_tokens: i64,
    /// Of the prompt tokens, those written to the provider's prompt cache.
    pub cache_write_tokens: i64,
    /// Of the completion tokens, the model's reasoning.
    pub reasoning_tokens: i64,
}

/// Which rollups a summary reads, besides its days and owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageFilter<'a> {
    /// Only this API key's calls.
    pub api_key_id: Option<&'a str>,
    /// Only the calls to this endpoint (`Endpoint::as_str`).
    pub endpoint: Option<&'a str>,
}

/// The rollups of `user_id` for the days `from..=to` (only those `filter` selects: one API key,
/// one endpoint), summed per `group` and sorted by it; team keys' calls are their team's
/// ([`team_summary`]), not their creator's. Reads `usage_daily` only, through its
/// `(user_id, day)` index.
///
/// # Errors
/// On database failure.
pub fn summary(
    conn: &mut DbConnection,
    user_id: &UserId,
    from: NaiveDate,
    to: NaiveDate,
    filter: UsageFilter<'_>,
    group: UsageGroup,
) -> Result<Vec<UsageTotalsRow>, PersistenceError> {
    let user_id = user_id.as_str();
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
            if let Some(key) = filter.api_key_id {
                query = query.filter(d::api_key_id.eq(key));
            }
            if let Some(endpoint) = filter.endpoint {
                query = query.filter(d::endpoint.eq(endpoint));
            }
            query.load::<UsageTotalsRow>(conn)?
        }};
    }
    Ok(match group {
        UsageGroup::Day => grouped!(d::day),
        UsageGroup::Model => grouped!(d::model),
        UsageGroup::ApiKey => grouped!(d::api_key_id),
        UsageGroup::Endpoint => grouped!(d::endpoint),
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
    /// By endpoint (`chat`, `embeddings`, `responses`, `messages`).
    Endpoint,
}

/// The rollups of team `team_id` (of every team when `None`) for the days `from..=to` (of
/// one endpoint when `endpoint` is given), summed per `group` and sorted by it. Reads
/// `usage_daily` through its `(team_id, day)` index.
///
/// # Errors
/// On database failure.
pub fn team_summary(
    conn: &mut DbConnection,
    team_id: Option<&TeamId>,
    from: NaiveDate,
    to: NaiveDate,
    endpoint: Option<&str>,
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
                query = query.filter(d::team_id.eq(team.as_str()));
            }
            if let Some(endpoint) = endpoint {
                query = query.filter(d::endpoint.eq(endpoint));
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
        TeamUsageGroup::Endpoint => grouped!(d::endpoint, d::endpoint.nullable()),
    })
}

/// The rollups of teams `team_ids` for the days `from..=to`, summed per team (`group` is the
/// team's id; a team without usage has no row). Reads `usage_daily` through its
/// `(team_id, day)` index.
///
/// # Errors
/// On database failure.
pub fn teams_totals(
    conn: &mut DbConnection,
    team_ids: &[TeamId],
    from: NaiveDate,
    to: NaiveDate,
) -> Result<Vec<UsageTotalsRow>, PersistenceError> {
    use usage_daily::dsl as d;
    if team_ids.is_empty() {
        return Ok(Vec::new());
    }
    let (from, to) = (format_day(from), format_day(to));
    let rows: Vec<NullableTotalsRow> = d::usage_daily
        .filter(d::team_id.eq_any(team_ids.iter().map(TeamId::as_str)))
        .filter(d::day.ge(&from))
        .filter(d::day.le(&to))
        .group_by(d::team_id)
        .select(sums_of!(d::team_id))
        .load(conn)?;
    Ok(rows.into_iter().map(NullableTotalsRow::into_row).collect())
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
    cached_tokens: i64,
    cache_write_tokens: i64,
    reasoning_tokens: i64,
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
            cached_tokens: self.cached_tokens,
            cache_write_tokens: self.cache_write_tokens,
            reasoning_tokens: self.reasoning_tokens,
        }
    }
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
