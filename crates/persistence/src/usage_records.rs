//! Repository of the per-request usage records (where `usage.request_records = "database"`),
//! stored in batches in `usage_record_batches`.
//!
//! A flush does not insert one row per call: it groups its records by user and by the UTC
//! minute their calls started in, and inserts one row per group (at most [`BATCH_RECORDS`]
//! records), with the records as one JSON array in `body`. A node keeping records at 300,000
//! calls a second writes a few hundred rows a second, and no index grows per call.
//!
//! `body` holds one array per record, in this order:
//! `[request_id, api_key_id, model, provider, streamed, outcome, prompt_tokens,
//! completion_tokens, total_tokens, estimated, cost_micros, priced, latency_ms, started_at,
//! endpoint, cached_tokens, cache_write_tokens, reasoning_tokens]`, money in micro-USD,
//! `latency_ms` in milliseconds, `started_at` in microseconds since the Unix epoch (UTC),
//! `endpoint` as `Endpoint::as_str` names it. Arrays of the first 14 elements (batches
//! written before endpoints and token kinds were kept) read as `chat` with zeros. A batch's oldest and newest (`started_at`, `request_id`) bound its
//! records: the caller's records are read newest first by keyset paging over those bounds
//! ([`list_records`]), and retention deletes a batch once its newest record is older than the
//! cutoff ([`prune_before`]), so records outlive the cutoff by at most a minute.
//!
//! Batches are inserted only in the transaction that applies their flush (or bills the calls
//! of a stopped node), whose id makes a replay write nothing: no record is written twice.

use crate::error::PersistenceError;
use crate::pool::DbConnection;
use crate::schema::usage_record_batches;
use aigw_domain::usage::{Endpoint, TokenUsage, UsageOutcome, UsageRecord};
use aigw_domain::UserId;
use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use diesel::prelude::*;
use std::collections::BTreeMap;

/// Most records in one batch: a page of records never decodes more than a few batches.
pub const BATCH_RECORDS: usize = 1000;

/// Batches read per query while gathering a page.
const BATCHES_PER_READ: i64 = 8;

/// Batches inserted per statement.
pub(crate) const BATCHES_PER_INSERT: usize = 100;

/// A record as stored in a batch's `body` (the user is the batch's), one JSON array.
#[derive(Debug, serde::Serialize)]
struct Stored<'a>(
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    bool,
    &'a str,
    u64,
    u64,
    u64,
    bool,
    u64,
    bool,
    u64,
    i64,
    &'a str,
    u64,
    u64,
    u64,
    Option<&'a str>,
    u32,
);

/// A record as read back from a batch's `body`: 14 elements, 18 (the endpoint and the token
/// kinds) or 20 (the served model and the attempts); the later ones absent from batches
/// written before they were kept.
#[derive(Debug, serde::Deserialize)]
struct Read(
    String,
    String,
    String,
    String,
    bool,
    String,
    u64,
    u64,
    u64,
    bool,
    u64,
    bool,
    u64,
    i64,
    #[serde(default)] Option<String>,
    #[serde(default)] u64,
    #[serde(default)] u64,
    #[serde(default)] u64,
    #[serde(default)] Option<String>,
    #[serde(default)] u32,
);

fn stored(r: &UsageRecord) -> Stored<'_> {
    Stored(
        &r.request_id,
        &r.api_key_id,
        &r.model,
        &r.provider,
        r.streamed,
        r.outcome.as_str(),
        r.tokens.prompt_tokens,
        r.tokens.completion_tokens,
        r.tokens.total_tokens,
        r.estimated,
        r.cost_micros,
        r.priced,
        r.latency_ms,
        r.started_at.timestamp_micros(),
        r.endpoint.as_str(),
        r.tokens.cached_tokens,
        r.tokens.cache_write_tokens,
        r.tokens.reasoning_tokens,
        r.served_model.as_deref(),
        r.attempts,
    )
}

/// The record of `user_id` read from a batch. An outcome name this build does not know reads
/// as `upstream_error`; an endpoint it does not know (or none) as `chat`; a time outside
/// chrono's range as the epoch.
fn record_of(user_id: &str, r: Read) -> UsageRecord {
    let (request_id, api_key_id, model, provider, streamed, outcome, prompt, completion, total) =
        (r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8);
    let endpoint = r.14.as_deref().and_then(Endpoint::parse).unwrap_or_default();
    UsageRecord {
        request_id,
        api_key_id: api_key_id.into(),
        user_id: user_id.into(),
        model,
        provider,
        served_model: r.18,
        attempts: r.19,
        endpoint,
        streamed,
        outcome: UsageOutcome::parse(&outcome).unwrap_or(UsageOutcome::UpstreamError),
        tokens: TokenUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: total,
            cached_tokens: r.15,
            cache_write_tokens: r.16,
            reasoning_tokens: r.17,
        },
        estimated: r.9,
        cost_micros: r.10,
        priced: r.11,
        latency_ms: r.12,
        started_at: DateTime::from_timestamp_micros(r.13).unwrap_or_default(),
        team_id: None,
        member_id: None,
    }
}

/// The records of a batch's `body` (the batches of `user_id`).
///
/// # Errors
/// [`PersistenceError::Query`] (a deserialization error) when `body` is not a batch this
/// module wrote.
pub fn decode(user_id: &str, body: &str) -> Result<Vec<UsageRecord>, PersistenceError> {
    let read: Vec<Read> = serde_json::from_str(body)
        .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))?;
    Ok(read.into_iter().map(|r| record_of(user_id, r)).collect())
}

/// A row of `usage_record_batches` to insert.
#[derive(Debug, Insertable)]
#[diesel(table_name = usage_record_batches)]
pub(crate) struct NewBatch<'a> {
    user_id: &'a str,
    records: i64,
    oldest_started_at: NaiveDateTime,
    oldest_request_id: &'a str,
    newest_started_at: NaiveDateTime,
    newest_request_id: &'a str,
    body: String,
}

/// The (`started_at`, `request_id`) by which records are ordered.
fn key(r: &UsageRecord) -> (DateTime<Utc>, &str) {
    (r.started_at, r.request_id.as_str())
}

/// The batches of `records`: grouped by user and UTC minute of `started_at`, at most
/// [`BATCH_RECORDS`] each.
///
/// # Errors
/// A serialization error if a record cannot be written as JSON (it always can).
pub(crate) fn batches<'a>(
    records: impl Iterator<Item = &'a UsageRecord>,
) -> QueryResult<Vec<NewBatch<'a>>> {
    let mut groups: BTreeMap<(&'a str, i64), Vec<&'a UsageRecord>> = BTreeMap::new();
    for r in records {
        let minute = r.started_at.timestamp().div_euclid(60);
        groups.entry((r.user_id.as_str(), minute)).or_default().push(r);
    }
    let mut out = Vec::new();
    for ((user_id, _), group) in groups {
        for chunk in group.chunks(BATCH_RECORDS) {
            let (Some(oldest), Some(newest)) = (
                chunk.iter().copied().min_by_key(|r| key(r)),
                chunk.iter().copied().max_by_key(|r| key(r)),
            ) else {
                continue;
            };
            let body = serde_json::to_string(&chunk.iter().map(|r| stored(r)).collect::<Vec<_>>())
                .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
            out.push(NewBatch {
                user_id,
                records: i64::try_from(chunk.len()).unwrap_or(i64::MAX),
                oldest_started_at: oldest.started_at.naive_utc(),
                oldest_request_id: &oldest.request_id,
                newest_started_at: newest.started_at.naive_utc(),
                newest_request_id: &newest.request_id,
                body,
            });
        }
    }
    Ok(out)
}

/// Inserts `records` as batches on a concrete connection, in the caller's transaction.
macro_rules! insert_batches {
    ($c:ident, $records:expr) => {{
        let batches = $crate::usage_records::batches($records)?;
        for chunk in batches.chunks($crate::usage_records::BATCHES_PER_INSERT) {
            diesel::insert_into($crate::schema::usage_record_batches::table)
                .values(chunk)
                .execute($c)?;
        }
    }};
}
pub(crate) use insert_batches;

/// Up to `limit` records of `user_id`, newest first (by `started_at`, then `request_id`),
/// strictly after the keyset position `after` (the last record of the previous page).
///
/// Reads the batches that may hold such records, newest bound first, until the records
/// gathered that no unread batch can precede number `limit`. Each read continues after the
/// last batch read (keyset, not offset), so a batch a flush inserts meanwhile is never read
/// twice.
///
/// # Errors
/// On database failure; a deserialization error on a batch this module did not write.
pub fn list_records(
    conn: &mut DbConnection,
    user_id: &UserId,
    after: Option<(NaiveDateTime, &str)>,
    limit: i64,
) -> Result<Vec<UsageRecord>, PersistenceError> {
    let user_id = user_id.as_str();
    use usage_record_batches::dsl as b;
    let wanted = usize::try_from(limit).unwrap_or(0);
    let after = after.map(|(at, id)| (at.and_utc(), id));
    let before_cursor = |r: &UsageRecord| after.is_none_or(|c| key(r) < c);
    let mut gathered: Vec<UsageRecord> = Vec::new();
    // The (newest_started_at, newest_request_id, id) of the last batch read.
    let mut last: Option<(NaiveDateTime, String, i64)> = None;
    loop {
        let mut query = b::usage_record_batches.filter(b::user_id.eq(user_id)).into_boxed();
        if let Some((at, id)) = after {
            // A batch spans one minute of starts: one with a record before the cursor ends
            // less than a minute after it.
            let at = at.naive_utc();
            let horizon = at.checked_add_signed(TimeDelta::minutes(1)).unwrap_or(at);
            query = query.filter(b::newest_started_at.lt(horizon)).filter(
                b::oldest_started_at
                    .lt(at)
                    .or(b::oldest_started_at.eq(at).and(b::oldest_request_id.lt(id.to_owned()))),
            );
        }
        if let Some((at, request_id, id)) = last.take() {
            query = query.filter(
                b::newest_started_at.lt(at).or(b::newest_started_at.eq(at).and(
                    b::newest_request_id
                        .lt(request_id.clone())
                        .or(b::newest_request_id.eq(request_id).and(b::id.lt(id))),
                )),
            );
        }
        let read: Vec<(NaiveDateTime, String, i64, String)> = query
            .order((b::newest_started_at.desc(), b::newest_request_id.desc(), b::id.desc()))
            .limit(BATCHES_PER_READ)
            .select((b::newest_started_at, b::newest_request_id, b::id, b::body))
            .load(conn)?;
        let complete = i64::try_from(read.len()).unwrap_or(0) < BATCHES_PER_READ;
        for (_, _, _, body) in &read {
            gathered.extend(decode(user_id, body)?.into_iter().filter(|r| before_cursor(r)));
        }
        // Batches not read yet end at or before the last one read: what is newer is final.
        let settled = match read.last() {
            Some((at, id, _, _)) if !complete => {
                let bound = (at.and_utc(), id.as_str());
                gathered.iter().filter(|r| key(r) > bound).count()
            }
            _ => gathered.len(),
        };
        if complete || settled >= wanted {
            break;
        }
        last = read.into_iter().last().map(|(at, request_id, id, _)| (at, request_id, id));
    }
    gathered.sort_by(|a, b| key(b).cmp(&key(a)));
    gathered.truncate(wanted);
    Ok(gathered)
}

/// The record `request_id` of `user_id`, if kept. Reads every batch of the user: for tests
/// and support, not for a request path.
///
/// # Errors
/// On database failure; a deserialization error on a batch this module did not write.
pub fn find_record(
    conn: &mut DbConnection,
    user_id: &UserId,
    request_id: &str,
) -> Result<Option<UsageRecord>, PersistenceError> {
    let user_id = user_id.as_str();
    use usage_record_batches::dsl as b;
    let bodies: Vec<String> = b::usage_record_batches
        .filter(b::user_id.eq(user_id))
        .order(b::id.desc())
        .select(b::body)
        .load(conn)?;
    for body in bodies {
        if let Some(r) = decode(user_id, &body)?.into_iter().find(|r| r.request_id == request_id) {
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// Records kept, all users together (the sum of the batches' counts).
///
/// # Errors
/// On database failure.
pub fn count(conn: &mut DbConnection) -> Result<u64, PersistenceError> {
    use usage_record_batches::dsl as b;
    let sum: Option<i64> = b::usage_record_batches
        .select(diesel::dsl::sql::<diesel::sql_types::Nullable<diesel::sql_types::BigInt>>(
            "CAST(SUM(records) AS BIGINT)",
        ))
        .first(conn)?;
    Ok(u64::try_from(sum.unwrap_or(0)).unwrap_or(0))
}

/// What one [`prune_before`] call deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Batches deleted (at most the `batches` asked for).
    pub batches: usize,
    /// Records in them.
    pub records: u64,
}

/// Deletes at most `batches` batches whose newest record started before `cutoff` (UTC),
/// oldest first. Call again while it deletes `batches`. Rollups are kept.
///
/// # Errors
/// On database failure.
pub fn prune_before(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    batches: i64,
) -> Result<Pruned, PersistenceError> {
    use usage_record_batches::dsl as b;
    let oldest: Vec<(i64, i64)> = b::usage_record_batches
        .filter(b::newest_started_at.lt(cutoff))
        .order(b::newest_started_at.asc())
        .select((b::id, b::records))
        .limit(batches)
        .load(conn)?;
    if oldest.is_empty() {
        return Ok(Pruned::default());
    }
    let ids: Vec<i64> = oldest.iter().map(|(id, _)| *id).collect();
    let deleted =
        diesel::delete(b::usage_record_batches.filter(b::id.eq_any(&ids))).execute(conn)?;
    Ok(Pruned {
        batches: deleted,
        records: oldest.iter().map(|(_, n)| u64::try_from(*n).unwrap_or(0)).sum(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_batch_written_before_endpoints_were_kept_reads_as_chat_with_zeros() {
        let old = r#"[["r1","k1","gpt","openai",true,"ok",10,20,30,false,123,true,45,
            1795773601500000]]"#;
        let records = decode("u1", old).unwrap();
        let r = &records[0];
        assert_eq!((r.request_id.as_str(), r.endpoint), ("r1", Endpoint::Chat));
        assert_eq!(r.tokens, TokenUsage::new(10, 20));
        assert_eq!((r.cost_micros, r.latency_ms), (123, 45));
        assert_eq!(r.started_at.timestamp_micros(), 1_795_773_601_500_000);
    }

    #[test]
    fn a_batch_keeps_the_endpoint_every_token_kind_and_what_served() {
        let record = UsageRecord {
            request_id: "r1".into(),
            api_key_id: "k1".into(),
            user_id: "u1".into(),
            model: "m".into(),
            provider: "p".into(),
            served_model: Some("f".into()),
            attempts: 2,
            endpoint: Endpoint::Embeddings,
            streamed: false,
            outcome: UsageOutcome::Ok,
            tokens: TokenUsage {
                cached_tokens: 3,
                cache_write_tokens: 2,
                reasoning_tokens: 4,
                ..TokenUsage::new(10, 20)
            },
            estimated: false,
            cost_micros: 7,
            priced: true,
            latency_ms: 1,
            started_at: DateTime::from_timestamp_micros(1_795_773_601_500_000).unwrap(),
            team_id: None,
            member_id: None,
        };
        let batch = batches(std::iter::once(&record)).unwrap();
        assert!(batch[0].body.contains(r#","embeddings",3,2,4,"f",2]"#), "{}", batch[0].body);
        assert_eq!(decode("u1", &batch[0].body).unwrap(), vec![record]);
        let unknown = r#"[["r","k","m","p",false,"ok",1,2,3,false,0,true,0,0,"telepathy",0,0,0]]"#;
        assert_eq!(decode("u", unknown).unwrap()[0].endpoint, Endpoint::Chat);
    }
}
