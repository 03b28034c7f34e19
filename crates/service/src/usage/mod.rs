//! The usage ledger: every routed gateway call (chat completions, embeddings, the Responses
//! API, Anthropic's Messages) is metered and recorded once, off the request path, under its
//! endpoint and with every token kind, and read back by its owner.
//!
//! - [`meter`]: the seam in the gateway; a [`meter::CallMeter`] per call, [`sse`] for streams.
//! - [`aggregate`]: the calls metered since the last flush, summed per thread.
//! - [`recorder`]: the supervised task that writes one flush per interval, with the [`spool`]
//!   file for when the database is away.
//! - [`tokens`]: tokenizer estimates when a provider reports no `usage`.
//! - [`prices`]: per-model prices, in integer micro-USD.
//! - [`retention`]: pruning of old raw records.
//! - [`UsageService`]: the queries behind `GET /api/v1/usage`, `GET /api/v1/usage/requests`
//!   and the `usage_30d` of key objects.

pub mod aggregate;
mod answer;
pub mod config;
pub mod in_flight;
mod labels;
pub mod meter;
mod pending;
pub mod recorder;
mod retention;
pub mod spool;
pub mod sse;
mod supervisor;

use crate::auth::{Authorized, Principal};
use crate::config::ProviderConfig;
use crate::db::Db;
use crate::error::ServiceError;
use crate::metrics::Metrics;
use crate::prices::PriceTable;
use crate::spend_signal::SpendSignals;
use crate::Clock;
use aggregate::KeepRecords;
use aigw_domain::access::op;
use aigw_domain::usage::{DayRange, Endpoint, UsageRecord, DEFAULT_RANGE_DAYS};
use aigw_domain::{FieldError, Role, UserId};
use aigw_persistence::usage::{self as ledger, UsageFilter, UsageGroup, UsageTotalsRow};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use config::{RequestRecords, UsageConfig};
use recorder::{Recorder, RecorderHealth, RecorderOptions};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// Default page size of `GET /usage/requests`.
pub const DEFAULT_PAGE_LIMIT: i64 = 50;
/// Largest page size of `GET /usage/requests`.
pub const MAX_PAGE_LIMIT: i64 = 200;

/// Sums of usage over a set of calls (a row of a usage answer, or its totals).
pub use aigw_domain::ledger::UsageSums as UsageTotals;
pub use labels::GroupLabel;

/// The sums of a summary row read from the rollups.
fn totals_of(r: &UsageTotalsRow) -> UsageTotals {
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    UsageTotals {
        requests: n(r.requests),
        prompt_tokens: n(r.prompt_tokens),
        completion_tokens: n(r.completion_tokens),
        total_tokens: n(r.total_tokens),
        cost_micros: n(r.cost_micros),
        estimated_requests: n(r.estimated_requests),
        unpriced_requests: n(r.unpriced_requests),
        cached_tokens: n(r.cached_tokens),
        cache_write_tokens: n(r.cache_write_tokens),
        reasoning_tokens: n(r.reasoning_tokens),
    }
}

/// How a usage summary is grouped (`group_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// `day`: one row per UTC day (`YYYY-MM-DD`).
    Day,
    /// `model`.
    Model,
    /// `api_key`: one row per API key id.
    ApiKey,
    /// `member`: one row per member of a team (user id; empty for its team keys' calls).
    Member,
    /// `team`: one row per team (platform admins).
    Team,
    /// `endpoint`: one row per endpoint called (`chat`, `embeddings`, `responses`,
    /// `messages`).
    Endpoint,
}

impl GroupBy {
    /// `day`, `model`, `api_key`, `member`, `team` or `endpoint`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Model => "model",
            Self::ApiKey => "api_key",
            Self::Member => "member",
            Self::Team => "team",
            Self::Endpoint => "endpoint",
        }
    }

    /// Parses `group_by` among `allowed`.
    ///
    /// # Errors
    /// [`FieldError`] on `group_by` for any other value.
    pub(crate) fn parse_among(raw: Option<&str>, allowed: &[GroupBy]) -> Result<Self, FieldError> {
        let wanted = raw.unwrap_or("day");
        allowed.iter().copied().find(|g| g.as_str() == wanted).ok_or_else(|| {
            let names: Vec<&str> = allowed.iter().map(|g| g.as_str()).collect();
            FieldError::new("group_by", format!("must be one of {}", names.join(", ")))
        })
    }
}

/// The parameters of `GET /usage`, as received (validated by [`UsageService::summary`]).
#[derive(Debug, Clone, Default)]
pub struct UsageQuery {
    /// First day, `YYYY-MM-DD` (default: 29 days before `to`).
    pub from: Option<String>,
    /// Last day, inclusive (default: today, UTC).
    pub to: Option<String>,
    /// `day` (default), `model`, `api_key` or `endpoint` (`member` for a team, `team` for
    /// platform admins).
    pub group_by: Option<String>,
    /// Only this API key's usage.
    pub api_key_id: Option<String>,
    /// Only the usage of this endpoint (`chat`, `embeddings`, `responses`, `messages`).
    pub endpoint: Option<String>,
}

impl UsageQuery {
    /// The endpoint filter, parsed.
    ///
    /// # Errors
    /// [`FieldError`] on `endpoint` for a name that is not an endpoint.
    pub(crate) fn endpoint(&self) -> Result<Option<Endpoint>, FieldError> {
        let Some(raw) = self.endpoint.as_deref() else { return Ok(None) };
        Endpoint::parse(raw).map(Some).ok_or_else(|| {
            let names: Vec<&str> = Endpoint::ALL.iter().map(|e| e.as_str()).collect();
            FieldError::new("endpoint", format!("must be one of {}", names.join(", ")))
        })
    }
}

/// The answer of `GET /usage`.
#[derive(Debug, Clone)]
pub struct UsageSummary {
    /// The days covered.
    pub range: DayRange,
    /// The grouping.
    pub group_by: GroupBy,
    /// One row per group value that has usage, sorted by it.
    pub rows: Vec<(String, UsageTotals)>,
    /// The sum of the rows.
    pub totals: UsageTotals,
    /// What a person reads beside each group value (`member`, `api_key`, `team`), by value;
    /// values without one (a deleted key, the team keys' empty member) are absent.
    pub labels: std::collections::BTreeMap<String, GroupLabel>,
}

impl UsageSummary {
    /// The summary of ledger `rows` grouped by `group_by` over `range`, with their sum and
    /// the labels of their values (read on `conn`).
    ///
    /// # Errors
    /// On database failure.
    pub(crate) fn labelled(
        conn: &mut aigw_persistence::DbConnection,
        range: DayRange,
        group_by: GroupBy,
        rows: &[ledger::UsageTotalsRow],
    ) -> Result<Self, aigw_persistence::PersistenceError> {
        let what = match group_by {
            GroupBy::Member => Some(labels::Labelled::Member),
            GroupBy::ApiKey => Some(labels::Labelled::ApiKey),
            GroupBy::Team => Some(labels::Labelled::Team),
            GroupBy::Day | GroupBy::Model | GroupBy::Endpoint => None,
        };
        let labels = match what {
            Some(what) => labels::labels_of(conn, what, rows)?,
            None => std::collections::BTreeMap::new(),
        };
        Ok(Self { labels, ..Self::of(range, group_by, rows) })
    }

    /// The summary of ledger `rows` grouped by `group_by` over `range`, with their sum.
    pub(crate) fn of(range: DayRange, group_by: GroupBy, rows: &[ledger::UsageTotalsRow]) -> Self {
        let rows: Vec<(String, UsageTotals)> =
            rows.iter().map(|r| (r.group.clone(), totals_of(r))).collect();
        let mut totals = UsageTotals::default();
        for (_, row) in &rows {
            totals.add(row);
        }
        Self { range, group_by, rows, totals, labels: std::collections::BTreeMap::new() }
    }
}

/// A page of `GET /usage/requests`.
#[derive(Debug, Clone)]
pub struct UsagePage {
    /// Records, newest first.
    pub records: Vec<UsageRecord>,
    /// Opaque cursor of the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// The usage ledger of a node: its recorder (when metering is on), its calls in flight, its
/// retention task, and the queries of the usage API.
#[derive(Debug, Clone)]
pub struct UsageService {
    db: Db,
    recorder: Option<Arc<Recorder>>,
    in_flight: Option<(in_flight::InFlight, Arc<tokio::task::JoinHandle<()>>)>,
    /// Whether calls are metered and one row per call is written (`usage.enabled` and
    /// `usage.request_records = "database"`).
    keeps_request_records: bool,
    signals: SpendSignals,
    /// The time calls are dated by and the usage queries count days by.
    clock: Clock,
}

impl UsageService {
    /// Starts the recorder (when `config.enabled`) with its spool in `data_dir`, counting
    /// tokens and cost by model into `metrics`; the writer of the calls in flight of node
    /// `node_id` (its id in the change feed, [`crate::credential_cache::CredentialCache::node_id`]);
    /// and the retention task. Must run on a tokio runtime.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] for a bad price in `providers` or an unusable spool folder.
    pub fn start_with_metrics(
        db: Db,
        config: &UsageConfig,
        providers: &[ProviderConfig],
        data_dir: &Path,
        metrics: Metrics,
        node_id: &str,
        clock: Clock,
    ) -> Result<Self, ServiceError> {
        let prices = PriceTable::from_providers(providers)?;
        let signals = SpendSignals::default();
        let flush_interval = Duration::from_millis(config.flush_interval_ms.max(10));
        let keeps_request_records =
            config.enabled && config.request_records == RequestRecords::Database;
        let (recorder, in_flight) = if config.enabled {
            let keep_records = match config.request_records {
                RequestRecords::Database => KeepRecords::Database,
                RequestRecords::None => KeepRecords::None,
            };
            let options = RecorderOptions {
                flush_interval,
                queue_capacity: config.queue_capacity.max(1),
                keep_records,
                request_log: config.request_log,
                spool_dir: data_dir.to_path_buf(),
                metrics,
                signals: signals.clone(),
            };
            let recorder = Arc::new(Recorder::start(db.clone(), prices, options)?);
            let book = in_flight::InFlight::new(node_id.to_owned());
            let writer = book.spawn_writer(
                db.clone(),
                in_flight::WriterOptions {
                    interval: flush_interval,
                    stopped_after: Duration::from_secs(config.interrupted_after_secs.max(1)),
                    keep_records: keep_records == KeepRecords::Database,
                    ledger_lock: recorder.ledger_lock(),
                },
            );
            (Some(recorder), Some((book, Arc::new(writer))))
        } else {
            (None, None)
        };
        // The retention task runs for the life of the runtime.
        let _retention = retention::spawn(
            db.clone(),
            config.retention_days,
            Duration::from_secs(config.prune_interval_secs),
            Arc::new(AtomicU64::new(0)),
            clock.clone(),
        );
        // The tokenizer's tables (about 19 MiB resident for cl100k) load when first needed:
        // an estimate for a provider that reports no usage, a key's budget or token limit, or
        // the echo model. A node whose providers report usage never loads them.
        Ok(Self { db, recorder, in_flight, keeps_request_records, signals, clock })
    }

    /// Where the recorder tells which keys' budgets each written flush spent: listen to it
    /// ([`SpendSignals::listen`]) for budget alerts.
    pub fn spend_signals(&self) -> SpendSignals {
        self.signals.clone()
    }

    /// Whether [`UsageService::requests`] can answer anything: calls are metered and kept one
    /// row each (`usage.request_records = "database"`); otherwise only the daily sums exist.
    pub fn keeps_request_records(&self) -> bool {
        self.keeps_request_records
    }

    /// The meter for the gateway; `None` when metering is off.
    pub fn meter(&self) -> Option<meter::Meter> {
        let meter =
            self.recorder.as_ref().map(|r| meter::Meter::new(r.handle(), self.clock.clone()))?;
        Some(match &self.in_flight {
            Some((book, _)) => meter.with_in_flight(book.clone()),
            None => meter,
        })
    }

    /// The recorder's health; `None` when metering is off.
    pub fn health(&self) -> Option<RecorderHealth> {
        self.recorder.as_ref().map(|r| r.health())
    }

    /// Writes every accepted record (or spools it) and stops the recorder, then deletes this
    /// node's calls in flight that have a record: call after the HTTP server has stopped.
    pub async fn shutdown(&self) {
        if let Some(recorder) = &self.recorder {
            recorder.shutdown().await;
        }
        if let Some((book, writer)) = &self.in_flight {
            writer.abort();
            book.shutdown(&self.db).await;
        }
    }

    /// The caller's usage over a range of days, grouped (`GET /usage`), optionally of one API
    /// key or one endpoint. Reads the daily rollups only.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `from`, `to`, `group_by` or `endpoint`;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn summary(
        &self,
        principal: &Authorized<op::ReadUsage>,
        query: UsageQuery,
    ) -> Result<UsageSummary, ServiceError> {
        let today = self.clock.now().date_naive();
        let range = DayRange::parse(query.from.as_deref(), query.to.as_deref(), today)?;
        let platform_admin = matches!(&**principal, Principal::User { role: Role::Admin, .. });
        let mut allowed = vec![GroupBy::Day, GroupBy::Model, GroupBy::ApiKey, GroupBy::Endpoint];
        if platform_admin {
            allowed.push(GroupBy::Team);
        }
        let group_by = GroupBy::parse_among(query.group_by.as_deref(), &allowed)?;
        let endpoint = query.endpoint()?.map(Endpoint::as_str);
        if group_by == GroupBy::Team {
            // Every team's usage, for platform admins.
            return self
                .db
                .run(move |conn| {
                    let group = ledger::TeamUsageGroup::Team;
                    let rows =
                        ledger::team_summary(conn, None, range.from, range.to, endpoint, group)?;
                    Ok(UsageSummary::labelled(conn, range, group_by, &rows)?)
                })
                .await;
        }
        let group = match group_by {
            GroupBy::Model => UsageGroup::Model,
            GroupBy::ApiKey => UsageGroup::ApiKey,
            GroupBy::Endpoint => UsageGroup::Endpoint,
            _ => UsageGroup::Day,
        };
        let user_id = principal.user_id().to_owned();
        let key = query.api_key_id;
        self.db
            .run(move |conn| {
                let filter = UsageFilter { api_key_id: key.as_deref(), endpoint };
                let rows = ledger::summary(conn, &user_id, range.from, range.to, filter, group)?;
                Ok(UsageSummary::labelled(conn, range, group_by, &rows)?)
            })
            .await
    }

    /// The last [`DEFAULT_RANGE_DAYS`] days of usage of each of `user_id`'s keys (or of key
    /// `api_key_id` only), by key id; keys without usage are absent.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn usage_30d(
        &self,
        user_id: &str,
        api_key_id: Option<&str>,
    ) -> Result<HashMap<String, UsageTotals>, ServiceError> {
        let range = DayRange::last_days(self.clock.now().date_naive(), DEFAULT_RANGE_DAYS);
        let (user_id, key) = (UserId::from(user_id), api_key_id.map(str::to_owned));
        let rows = self
            .db
            .run(move |conn| {
                let filter = UsageFilter { api_key_id: key.as_deref(), endpoint: None };
                Ok(ledger::summary(
                    conn,
                    &user_id,
                    range.from,
                    range.to,
                    filter,
                    UsageGroup::ApiKey,
                )?)
            })
            .await?;
        Ok(rows.iter().map(|r| (r.group.clone(), totals_of(r))).collect())
    }

    /// What each of `keys` has spent in its current budget period, in micro-USD, by key id
    /// (keys without spend are absent), from the daily rollups: since the period's first UTC
    /// day, or ever for `total` and keys without a period. At most one query per distinct
    /// period start (four at most).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn period_spend(
        &self,
        user_id: &str,
        keys: &[crate::views::ApiKeyView],
    ) -> Result<HashMap<String, i64>, ServiceError> {
        let now = self.clock.now();
        let ever = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
        let mut by_start: HashMap<chrono::NaiveDate, Vec<String>> = HashMap::new();
        for key in keys {
            let start = key.policy.budget_period.and_then(|p| p.start_day(now)).unwrap_or(ever);
            by_start.entry(start).or_default().push(key.id.to_string());
        }
        let (user_id, today, single) = (
            UserId::from(user_id),
            now.date_naive(),
            (keys.len() == 1).then(|| keys[0].id.to_string()),
        );
        self.db
            .run(move |conn| {
                let mut spend = HashMap::new();
                for (from, ids) in by_start {
                    let filter = UsageFilter { api_key_id: single.as_deref(), endpoint: None };
                    let rows =
                        ledger::summary(conn, &user_id, from, today, filter, UsageGroup::ApiKey)?;
                    for row in rows.into_iter().filter(|r| ids.contains(&r.group)) {
                        spend.insert(row.group, row.cost_micros);
                    }
                }
                Ok(spend)
            })
            .await
    }

    /// The caller's usage records, newest first, a page at a time (`GET /usage/requests`).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `limit` (not an integer from 1 to [`MAX_PAGE_LIMIT`]) or `cursor` (not one this
    /// service issued); [`ServiceError::Unavailable`] when the database is down.
    pub async fn requests(
        &self,
        principal: &Authorized<op::ReadUsage>,
        limit: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<UsagePage, ServiceError> {
        let limit = match limit {
            None => DEFAULT_PAGE_LIMIT,
            Some(raw) => {
                raw.parse::<i64>().ok().filter(|n| (1..=MAX_PAGE_LIMIT).contains(n)).ok_or_else(
                    || {
                        FieldError::new(
                            "limit",
                            format!("must be an integer from 1 to {MAX_PAGE_LIMIT}"),
                        )
                    },
                )?
            }
        };
        self.records_page(principal, cursor, limit).await
    }

    /// The caller's next [`EXPORT_CHUNK`] usage records after `cursor` (the `next_cursor` of
    /// the previous chunk; `None`: the newest), for a CSV export that streams them a chunk at a
    /// time: no more than one chunk is ever held.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `cursor`; [`ServiceError::Unavailable`] when the database
    /// is down.
    pub async fn export_chunk(
        &self,
        principal: &Authorized<op::ReadUsage>,
        cursor: Option<&str>,
    ) -> Result<UsagePage, ServiceError> {
        self.records_page(principal, cursor, EXPORT_CHUNK).await
    }

    /// Up to `limit` of the caller's records after `cursor`, newest first.
    async fn records_page(
        &self,
        principal: &Authorized<op::ReadUsage>,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<UsagePage, ServiceError> {
        let after = cursor.map(decode_cursor).transpose()?;
        let user_id = principal.user_id().to_owned();
        let mut rows = self
            .db
            .run(move |conn| {
                let after = after.as_ref().map(|(t, id)| (*t, id.as_str()));
                Ok(aigw_persistence::usage_records::list_records(conn, &user_id, after, limit + 1)?)
            })
            .await?;
        let more = rows.len() > usize::try_from(limit).unwrap_or(usize::MAX);
        rows.truncate(usize::try_from(limit).unwrap_or(0));
        let next_cursor = more.then(|| rows.last().map(encode_cursor)).flatten();
        Ok(UsagePage { records: rows, next_cursor })
    }
}

/// Records per chunk of a CSV export ([`UsageService::export_chunk`]).
pub const EXPORT_CHUNK: i64 = 1000;

/// The cursor after `row`: base64url of `<started_at in µs since the epoch>:<request_id>`.
fn encode_cursor(record: &UsageRecord) -> String {
    let micros = record.started_at.timestamp_micros();
    URL_SAFE_NO_PAD.encode(format!("{micros}:{}", record.request_id))
}

fn decode_cursor(raw: &str) -> Result<(chrono::NaiveDateTime, String), FieldError> {
    let bad = || FieldError::new("cursor", "is not a cursor from a previous page");
    let text = URL_SAFE_NO_PAD.decode(raw.trim()).ok().and_then(|b| String::from_utf8(b).ok());
    let (micros, id) = text.as_deref().and_then(|t| t.split_once(':')).ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    // A record's time: from the epoch to the end of year 9999 (outside, PostgreSQL's
    // `timestamp` cannot even compare with it).
    if !(0..=aigw_domain::time::LATEST_MICROS).contains(&micros) {
        return Err(bad());
    }
    let at = chrono::DateTime::from_timestamp_micros(micros).ok_or_else(bad)?;
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(bad());
    }
    Ok((at.naive_utc(), id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let record = |request_id: &str| UsageRecord {
            request_id: request_id.into(),
            api_key_id: "k".into(),
            user_id: "u".into(),
            model: String::new(),
            provider: String::new(),
            served_model: None,
            attempts: 1,
            endpoint: aigw_domain::usage::Endpoint::Chat,
            streamed: false,
            outcome: aigw_domain::usage::UsageOutcome::Ok,
            tokens: aigw_domain::usage::TokenUsage::new(0, 0),
            estimated: false,
            cost_micros: 0,
            priced: false,
            latency_ms: 0,
            started_at: chrono::DateTime::from_timestamp_micros(1_764_000_000_123_456)
                .unwrap_or_default(),
            team_id: None,
            member_id: None,
        };
        let r = record("01a1fb7f-0100-733f-9984-2509643042fa");
        let cursor = encode_cursor(&r);
        assert_eq!(
            decode_cursor(&cursor).ok(),
            Some((r.started_at.naive_utc(), r.request_id.clone()))
        );
        let out_of_range = [
            URL_SAFE_NO_PAD.encode(format!("{}:a", i64::MIN)),
            URL_SAFE_NO_PAD.encode("-1:a"),
            URL_SAFE_NO_PAD.encode(format!("{}:a", aigw_domain::time::LATEST_MICROS + 1)),
            URL_SAFE_NO_PAD.encode(format!("{}:a", i64::MAX)),
        ];
        for bad in out_of_range.iter().map(String::as_str) {
            assert_eq!(decode_cursor(bad).err().map(|e| e.field), Some("cursor".into()), "{bad}");
        }
        for bad in ["", "!!", "bm9jb2xvbg", &URL_SAFE_NO_PAD.encode("12:a b")] {
            assert_eq!(decode_cursor(bad).err().map(|e| e.field), Some("cursor".into()), "{bad}");
        }
    }
}
