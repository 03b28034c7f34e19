//! Metered calls still running (`calls_in_flight`): each node writes the calls it has had in
//! flight for longer than a usage flush interval, and the flush that counts a call deletes its
//! row in the same transaction ([`crate::usage::apply_flush`]).
//!
//! - A budget counter opened while calls run (a new period after a PATCH, a Redis restart, a
//!   counter expired) starts at the ledger's spend **plus** the reservations of the calls in
//!   flight ([`reserved_for`]), so it never forgets what is running.
//! - A call whose node stopped reporting (a crash, `kill -9`) before its usage was written
//!   is billed at its reservation by another node, or by the same one after a restart
//!   ([`of_stopped_nodes`], then [`crate::usage::bill_interrupted`], which marks the row
//!   `billed_at` rather than deleting it: a node that was only cut off and records the call
//!   later finds it billed and does not count it twice). Marked rows are pruned with the raw
//!   records ([`crate::usage::prune_flushes_before`]).

use crate::error::PersistenceError;
use crate::models::{from_utc, to_utc};
use crate::pool::DbConnection;
use crate::schema::{calls_in_flight as f, credential_feed_nodes};
use aigw_domain::usage::Endpoint;
use aigw_domain::CounterSubject;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::dsl::{exists, not, sql};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable};

/// One call in flight and what it reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallInFlight {
    /// The call's request id (its usage record's id).
    pub request_id: String,
    /// The node running it (its id in the change feed's `credential_feed_nodes`).
    pub node_id: String,
    /// The API key that made the call.
    pub api_key_id: String,
    /// The key's owner.
    pub user_id: String,
    /// The requested model.
    pub model: String,
    /// The provider serving it.
    pub provider: String,
    /// The endpoint called (a row written before endpoints were kept reads as `chat`).
    pub endpoint: Endpoint,
    /// Whether the caller asked for a stream.
    pub streamed: bool,
    /// What the call reserved (its worst case), micro-USD: what it is billed if a crash cuts
    /// it.
    pub reserved_micros: i64,
    /// Whether the model had a price.
    pub priced: bool,
    /// The call's worst-case prompt tokens.
    pub prompt_tokens: i64,
    /// The call's worst-case completion tokens.
    pub completion_tokens: i64,
    /// When the call started, UTC.
    pub started_at: DateTime<Utc>,
    /// The team the call counts against, if its key is scoped to one.
    pub team_id: Option<String>,
    /// The member whose team budget the call counts against (`None` for a team key).
    pub member_id: Option<String>,
}

#[derive(Debug, Queryable, Selectable, Insertable)]
#[diesel(table_name = f)]
struct Row {
    request_id: String,
    node_id: String,
    api_key_id: String,
    user_id: String,
    model: String,
    provider: String,
    streamed: bool,
    reserved_micros: i64,
    priced: bool,
    prompt_tokens: i64,
    completion_tokens: i64,
    started_at: NaiveDateTime,
    team_id: Option<String>,
    member_id: Option<String>,
    endpoint: String,
}

impl From<&CallInFlight> for Row {
    fn from(c: &CallInFlight) -> Self {
        Self {
            request_id: c.request_id.clone(),
            node_id: c.node_id.clone(),
            api_key_id: c.api_key_id.clone(),
            user_id: c.user_id.clone(),
            model: c.model.clone(),
            provider: c.provider.clone(),
            streamed: c.streamed,
            reserved_micros: c.reserved_micros,
            priced: c.priced,
            prompt_tokens: c.prompt_tokens,
            completion_tokens: c.completion_tokens,
            started_at: from_utc(c.started_at),
            team_id: c.team_id.clone(),
            member_id: c.member_id.clone(),
            endpoint: c.endpoint.as_str().to_owned(),
        }
    }
}

impl From<Row> for CallInFlight {
    fn from(r: Row) -> Self {
        Self {
            request_id: r.request_id,
            node_id: r.node_id,
            api_key_id: r.api_key_id,
            user_id: r.user_id,
            model: r.model,
            provider: r.provider,
            endpoint: Endpoint::parse(&r.endpoint).unwrap_or_default(),
            streamed: r.streamed,
            reserved_micros: r.reserved_micros,
            priced: r.priced,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            started_at: to_utc(r.started_at),
            team_id: r.team_id,
            member_id: r.member_id,
        }
    }
}

/// Writes `calls` (a request id already there is left as it is); returns how many rows were
/// written.
///
/// # Errors
/// On database failure; then nothing was written.
pub fn insert(conn: &mut DbConnection, calls: &[CallInFlight]) -> Result<usize, PersistenceError> {
    if calls.is_empty() {
        return Ok(0);
    }
    let rows: Vec<Row> = calls.iter().map(Row::from).collect();
    let mut written = 0;
    match conn {
        DbConnection::Postgres(c) => {
            for chunk in rows.chunks(1000) {
                written += diesel::insert_into(f::table)
                    .values(chunk)
                    .on_conflict_do_nothing()
                    .execute(c)?;
            }
        }
        DbConnection::Sqlite(c) => c.immediate_transaction(|c| {
            for row in &rows {
                written += diesel::insert_into(f::table)
                    .values(row)
                    .on_conflict_do_nothing()
                    .execute(c)?;
            }
            QueryResult::Ok(())
        })?,
    }
    Ok(written)
}

/// The request ids of node `node_id`'s calls not billed by another node.
///
/// # Errors
/// On database failure.
pub fn request_ids_of_node(
    conn: &mut DbConnection,
    node_id: &str,
) -> Result<Vec<String>, PersistenceError> {
    Ok(f::table
        .filter(f::node_id.eq(node_id))
        .filter(f::billed_at.is_null())
        .select(f::request_id)
        .load(conn)?)
}

/// Micro-USD reserved by the calls in flight that count against `subject` (a key, a team, a
/// member of a team or a user; 0 without any).
///
/// # Errors
/// On database failure.
pub fn reserved_for(
    conn: &mut DbConnection,
    subject: CounterSubject<'_>,
) -> Result<i64, PersistenceError> {
    let sum = sql::<Nullable<BigInt>>("CAST(SUM(reserved_micros) AS BIGINT)");
    let open = f::table.filter(f::billed_at.is_null());
    let reserved: Option<i64> = match subject {
        CounterSubject::Key(key_id) => {
            open.filter(f::api_key_id.eq(key_id)).select(sum).first(conn)?
        }
        CounterSubject::Team(team_id) => {
            open.filter(f::team_id.eq(team_id)).select(sum).first(conn)?
        }
        CounterSubject::Member { team_id, user_id } => open
            .filter(f::team_id.eq(team_id))
            .filter(f::member_id.eq(user_id))
            .select(sum)
            .first(conn)?,
        CounterSubject::User(user_id) => open
            .filter(f::user_id.eq(user_id))
            .filter(f::team_id.is_null().or(f::member_id.is_not_null()))
            .select(sum)
            .first(conn)?,
    };
    Ok(reserved.unwrap_or(0))
}

/// Up to `limit` calls in flight of nodes other than `me` that have not reported to the
/// change feed since `live_since` (stopped or cut off), oldest first.
///
/// # Errors
/// On database failure.
pub fn of_stopped_nodes(
    conn: &mut DbConnection,
    me: &str,
    live_since: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<CallInFlight>, PersistenceError> {
    let live = exists(
        credential_feed_nodes::table
            .filter(credential_feed_nodes::node_id.eq(f::node_id))
            .filter(credential_feed_nodes::heartbeat_at.ge(from_utc(live_since))),
    );
    let rows: Vec<Row> = f::table
        .filter(f::node_id.ne(me))
        .filter(f::billed_at.is_null())
        .filter(not(live))
        .order(f::started_at.asc())
        .limit(limit)
        .select(Row::as_select())
        .load(conn)?;
    Ok(rows.into_iter().map(CallInFlight::from).collect())
}

/// Deletes the calls with these request ids that no other node has billed (a billed row is
/// the mark that keeps the call from counting twice, pruned with the raw records).
///
/// # Errors
/// On database failure.
pub fn forget(conn: &mut DbConnection, request_ids: &[String]) -> Result<usize, PersistenceError> {
    let mut forgotten = 0;
    for chunk in request_ids.chunks(1000) {
        forgotten += diesel::delete(
            f::table.filter(f::request_id.eq_any(chunk)).filter(f::billed_at.is_null()),
        )
        .execute(conn)?;
    }
    Ok(forgotten)
}
