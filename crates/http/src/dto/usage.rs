//! Bodies of the usage API (`GET /api/v1/usage`, `GET /api/v1/usage/requests`) with their
//! OpenAPI schemas. Money is shown in USD (`cost_usd`), computed from integer micro-USD.

use aigw_domain::time::format_timestamp;
use aigw_domain::usage::{format_day, micros_to_usd, UsageRecord};
use aigw_service::usage::{GroupBy, GroupLabel, UsagePage, UsageSummary, UsageTotals};
use serde::Serialize;
use utoipa::ToSchema;

/// Usage summed over a set of requests.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct UsageTotalsDto {
    /// Gateway calls recorded (every endpoint).
    pub(crate) requests: u64,
    /// Prompt (input) tokens, every kind: cached and cache-write tokens included.
    pub(crate) prompt_tokens: u64,
    /// Completion (output) tokens, reasoning included.
    pub(crate) completion_tokens: u64,
    /// Total tokens.
    pub(crate) total_tokens: u64,
    /// Of `prompt_tokens`, those read from the provider's prompt cache.
    pub(crate) cached_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's prompt cache.
    pub(crate) cache_write_tokens: u64,
    /// Of `completion_tokens`, the model's reasoning.
    pub(crate) reasoning_tokens: u64,
    /// Cost in USD (exact sum of integer micro-USD; unpriced models count 0).
    pub(crate) cost_usd: f64,
    /// Requests whose tokens were estimated with a tokenizer (the provider reported none).
    pub(crate) estimated_requests: u64,
    /// False when some of these requests were of a model without a configured price.
    pub(crate) priced: bool,
}

impl From<&UsageTotals> for UsageTotalsDto {
    fn from(t: &UsageTotals) -> Self {
        Self {
            requests: t.requests,
            prompt_tokens: t.prompt_tokens,
            completion_tokens: t.completion_tokens,
            total_tokens: t.total_tokens,
            cached_tokens: t.cached_tokens,
            cache_write_tokens: t.cache_write_tokens,
            reasoning_tokens: t.reasoning_tokens,
            cost_usd: micros_to_usd(t.cost_micros),
            estimated_requests: t.estimated_requests,
            priced: t.priced(),
        }
    }
}

/// One row of a usage summary: the group's value (`day`, `model`, `api_key_id`, `endpoint`,
/// `member_id` or `team_id`, as grouped) and its sums.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct UsageRowDto {
    /// UTC day `YYYY-MM-DD` (`group_by=day`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) day: Option<String>,
    /// Model name (`group_by=model`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// API key id (`group_by=api_key`); deleted keys keep their usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) api_key_id: Option<String>,
    /// Member's user id (`group_by=member` of a team's usage; empty for its team keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) member_id: Option<String>,
    /// Team id (`group_by=team`, platform admins).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) team_id: Option<String>,
    /// Endpoint (`group_by=endpoint`): `chat`, `embeddings`, `responses` or `messages`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) endpoint: Option<String>,
    /// The member's e-mail address (`group_by=member`; absent for the team keys' row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) member_email: Option<String>,
    /// The member's display name (`group_by=member`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) member_name: Option<String>,
    /// The key's name (`group_by=api_key`; absent for a deleted key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) api_key_name: Option<String>,
    /// The key's first 12 characters (`group_by=api_key`; absent for a deleted key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key_prefix: Option<String>,
    /// The team's name (`group_by=team`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) team_name: Option<String>,
    /// The sums.
    #[serde(flatten)]
    pub(crate) totals: UsageTotalsDto,
}

/// `GET /usage` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UsageSummaryData {
    /// First day, `YYYY-MM-DD` (UTC).
    pub(crate) from: String,
    /// Last day, inclusive.
    pub(crate) to: String,
    /// `day`, `model`, `api_key`, `endpoint`, `member` (a team's usage) or `team` (platform
    /// admins).
    pub(crate) group_by: String,
    /// One row per value with usage, sorted by it.
    pub(crate) rows: Vec<UsageRowDto>,
    /// The sum of the rows.
    pub(crate) totals: UsageTotalsDto,
}

impl From<UsageSummary> for UsageSummaryData {
    fn from(s: UsageSummary) -> Self {
        let rows = s
            .rows
            .iter()
            .map(|(value, totals)| {
                let mut row = UsageRowDto {
                    day: None,
                    model: None,
                    api_key_id: None,
                    member_id: None,
                    team_id: None,
                    endpoint: None,
                    member_email: None,
                    member_name: None,
                    api_key_name: None,
                    key_prefix: None,
                    team_name: None,
                    totals: totals.into(),
                };
                match s.labels.get(value) {
                    Some(GroupLabel::Member { email, name }) => {
                        (row.member_email, row.member_name) =
                            (Some(email.clone()), Some(name.clone()));
                    }
                    Some(GroupLabel::ApiKey { name, key_prefix }) => {
                        (row.api_key_name, row.key_prefix) =
                            (Some(name.clone()), Some(key_prefix.clone()));
                    }
                    Some(GroupLabel::Team { name }) => row.team_name = Some(name.clone()),
                    None => {}
                }
                let slot = match s.group_by {
                    GroupBy::Day => &mut row.day,
                    GroupBy::Model => &mut row.model,
                    GroupBy::ApiKey => &mut row.api_key_id,
                    GroupBy::Member => &mut row.member_id,
                    GroupBy::Team => &mut row.team_id,
                    GroupBy::Endpoint => &mut row.endpoint,
                };
                *slot = Some(value.clone());
                row
            })
            .collect();
        Self {
            from: format_day(s.range.from),
            to: format_day(s.range.to),
            group_by: s.group_by.as_str().to_owned(),
            rows,
            totals: (&s.totals).into(),
        }
    }
}

/// One usage record: a metered gateway call.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UsageRecordDto {
    /// The call's request id (its `x-request-id`).
    pub(crate) request_id: String,
    /// The API key that made it.
    pub(crate) api_key_id: String,
    /// The requested model.
    pub(crate) model: String,
    /// The provider of the deployment that served it, or, when none did, of the
    /// deployment tried last (`echo` for the built-in model).
    pub(crate) provider: String,
    /// The model that served it: `model` itself, or the fallback that did. Its deployment is
    /// `{provider}/{served_model}` (the answer's `x-aigw-deployment`), whose price the cost is.
    pub(crate) served_model: String,
    /// Upstream calls made for it, retries and fallbacks included (0 for the built-in model
    /// and calls refused before any).
    pub(crate) attempts: u32,
    /// The endpoint called: `chat`, `embeddings`, `responses` or `messages`.
    pub(crate) endpoint: String,
    /// Whether it was a `"stream": true` call.
    pub(crate) streamed: bool,
    /// `ok`, `upstream_error`, `client_cancelled`, `timeout` or `interrupted`.
    pub(crate) outcome: String,
    /// Prompt (input) tokens, every kind: cached and cache-write tokens included.
    pub(crate) prompt_tokens: u64,
    /// Completion (output) tokens, reasoning included.
    pub(crate) completion_tokens: u64,
    /// Total tokens.
    pub(crate) total_tokens: u64,
    /// Of `prompt_tokens`, those read from the provider's prompt cache.
    pub(crate) cached_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's prompt cache.
    pub(crate) cache_write_tokens: u64,
    /// Of `completion_tokens`, the model's reasoning.
    pub(crate) reasoning_tokens: u64,
    /// True when the tokens were estimated with a tokenizer.
    pub(crate) estimated: bool,
    /// Cost in USD (0 when unpriced).
    pub(crate) cost_usd: f64,
    /// Whether the model had a price.
    pub(crate) priced: bool,
    /// Milliseconds from the upstream request to its last byte (or failure).
    pub(crate) latency_ms: u64,
    /// When the call started, RFC 3339 UTC.
    pub(crate) started_at: String,
}

impl From<UsageRecord> for UsageRecordDto {
    fn from(r: UsageRecord) -> Self {
        Self {
            request_id: r.request_id,
            api_key_id: r.api_key_id.into(),
            served_model: r.served_model.unwrap_or_else(|| r.model.clone()),
            model: r.model,
            provider: r.provider,
            attempts: r.attempts,
            endpoint: r.endpoint.as_str().to_owned(),
            streamed: r.streamed,
            outcome: r.outcome.as_str().to_owned(),
            prompt_tokens: r.tokens.prompt_tokens,
            completion_tokens: r.tokens.completion_tokens,
            total_tokens: r.tokens.total_tokens,
            cached_tokens: r.tokens.cached_tokens,
            cache_write_tokens: r.tokens.cache_write_tokens,
            reasoning_tokens: r.tokens.reasoning_tokens,
            estimated: r.estimated,
            cost_usd: micros_to_usd(r.cost_micros),
            priced: r.priced,
            latency_ms: r.latency_ms,
            started_at: format_timestamp(r.started_at),
        }
    }
}

/// `GET /usage/requests` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UsageRequestsData {
    /// Records, newest first.
    pub(crate) requests: Vec<UsageRecordDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub(crate) next_cursor: Option<String>,
}

impl From<UsagePage> for UsageRequestsData {
    fn from(p: UsagePage) -> Self {
        Self {
            requests: p.records.into_iter().map(UsageRecordDto::from).collect(),
            next_cursor: p.next_cursor,
        }
    }
}

/// `GET /usage/budget` answer: the caller's budget across all their keys.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UserBudgetData {
    /// The limit per period, USD; null when no budget applies.
    pub(crate) limit_usd: Option<f64>,
    /// `own` (set for this user by an admin) or `platform` (`gateway.user_budget_usd`); null
    /// with no limit.
    #[schema(example = "platform")]
    pub(crate) source: Option<String>,
    /// `daily`, `weekly`, `monthly` or `total` (the platform's `gateway.user_budget_period`).
    #[schema(value_type = crate::dto::BudgetPeriodName)]
    pub(crate) budget_period: String,
    /// What the caller's keys (team keys excepted) spent in the current period, USD, from the
    /// ledger.
    pub(crate) spent_usd: f64,
    /// When the period ends, RFC 3339 UTC; null for `total`.
    pub(crate) budget_reset_at: Option<String>,
}

impl From<aigw_service::accounts::budget::UserBudgetView> for UserBudgetData {
    fn from(b: aigw_service::accounts::budget::UserBudgetView) -> Self {
        use aigw_service::accounts::budget::BudgetSource;
        let usd = |m: i64| micros_to_usd(u64::try_from(m).unwrap_or(0));
        Self {
            limit_usd: b.limit_micros.map(usd),
            source: b.source.map(|s| match s {
                BudgetSource::Own => "own".to_owned(),
                BudgetSource::Platform => "platform".to_owned(),
            }),
            budget_period: b.period.as_str().to_owned(),
            spent_usd: usd(b.spent_micros),
            budget_reset_at: b.reset_at.map(format_timestamp),
        }
    }
}
