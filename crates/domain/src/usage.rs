//! The usage ledger's pure rules: what one metered chat completion records, what it costs,
//! and which UTC days a usage query covers.
//!
//! - Money is integer **micro-USD** (1 USD = 1,000,000 µUSD) in storage and arithmetic; JSON
//!   shows USD as a number (`cost_usd`).
//! - Prices are configured in USD per million tokens and held as integer µUSD per million
//!   tokens ([`ModelPrice`]); a request's cost is rounded once, half up, to a whole µUSD
//!   ([`ModelPrice::cost_micros`]).
//! - Days are UTC calendar days; a range is inclusive of both ends ([`DayRange`]).

use crate::id::{ApiKeyId, TeamId, UserId};
use crate::validation::FieldError;
use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// How a metered chat completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageOutcome {
    /// The provider answered in full (JSON, or a stream that reached its end).
    Ok,
    /// The provider could not be reached, answered an error, or broke its stream.
    UpstreamError,
    /// The caller went away before the answer was complete.
    ClientCancelled,
    /// The provider did not answer (or send the next chunk) in time.
    Timeout,
    /// The node serving the call stopped (a crash) before the call ended: billed at its
    /// reservation, its worst case, by another node or the same one after a restart.
    Interrupted,
}

impl UsageOutcome {
    /// Every outcome, in a stable order.
    pub const ALL: [UsageOutcome; 5] =
        [Self::Ok, Self::UpstreamError, Self::ClientCancelled, Self::Timeout, Self::Interrupted];

    /// The stored and shown name: `ok`, `upstream_error`, `client_cancelled`, `timeout`,
    /// `interrupted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::UpstreamError => "upstream_error",
            Self::ClientCancelled => "client_cancelled",
            Self::Timeout => "timeout",
            Self::Interrupted => "interrupted",
        }
    }

    /// Parses a stored name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == name)
    }
}

/// Token counts of one request, as the provider reported them or as estimated.
///
/// The kinds nest: `prompt_tokens` counts every input token, those read from and written to
/// the provider's prompt cache included (`cached_tokens`, `cache_write_tokens` are parts of
/// it, never added to it); `completion_tokens` counts every output token, reasoning included
/// (`reasoning_tokens` is a part of it). So a cache hit is never counted twice, whatever the
/// dialect reported it as (OpenAI reports cached tokens inside the prompt; Anthropic beside
/// it, and the dialect's reader adds them in).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Tokens of the input (the request's messages, input or prompt), every kind.
    pub prompt_tokens: u64,
    /// Tokens of the output (the answer), reasoning included.
    pub completion_tokens: u64,
    /// The provider's `total_tokens`, normally their sum.
    pub total_tokens: u64,
    /// Of `prompt_tokens`, those read from the provider's prompt cache (OpenAI's
    /// `cached_tokens`, Anthropic's `cache_read_input_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Of `completion_tokens`, the model's reasoning (billed as output, as providers do).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl TokenUsage {
    /// Counts whose total is the sum of the two parts, with no cached or reasoning tokens.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            ..Self::default()
        }
    }

    /// The prompt tokens billed at the input price: those neither read from nor written to
    /// the cache.
    pub fn uncached_prompt_tokens(&self) -> u64 {
        self.prompt_tokens
            .saturating_sub(self.cached_tokens)
            .saturating_sub(self.cache_write_tokens)
    }
}

/// The endpoint (API dialect) a metered call was made to: the ledger's `endpoint`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// OpenAI's chat completions (`POST /api/v1/ai/chat/completions`).
    #[default]
    Chat,
    /// OpenAI's embeddings (`POST /api/v1/ai/embeddings`).
    Embeddings,
    /// OpenAI's Responses API (`POST /api/v1/ai/responses`).
    Responses,
    /// Anthropic's Messages API (`POST /api/v1/ai/anthropic/v1/messages`).
    Messages,
}

impl Endpoint {
    /// Every endpoint, in a stable order.
    pub const ALL: [Endpoint; 4] = [Self::Chat, Self::Embeddings, Self::Responses, Self::Messages];

    /// The stored and shown name: `chat`, `embeddings`, `responses`, `messages`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Embeddings => "embeddings",
            Self::Responses => "responses",
            Self::Messages => "messages",
        }
    }

    /// Parses a stored name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

/// One metered chat completion: a row of the usage ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// The request's id (the `x-request-id` of the answer, a UUIDv7); unique in the ledger.
    pub request_id: String,
    /// The API key that made the call.
    pub api_key_id: ApiKeyId,
    /// The key's owner.
    pub user_id: UserId,
    /// The `model` of the request.
    pub model: String,
    /// The provider of the deployment that served it, or, when none did, of the
    /// deployment tried last (`echo` for the built-in model).
    pub provider: String,
    /// The model that served it, when a fallback did (`None`: `model` itself). The cost is
    /// the price of `provider`'s deployment of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// Upstream calls made for it, every retry and fallback included (0 for the built-in
    /// model and for a call refused before any).
    #[serde(default)]
    pub attempts: u32,
    /// The endpoint called (`chat` for records written before endpoints were recorded).
    #[serde(default)]
    pub endpoint: Endpoint,
    /// Whether the caller asked for `"stream": true`.
    pub streamed: bool,
    /// How the call ended.
    pub outcome: UsageOutcome,
    /// Token counts.
    pub tokens: TokenUsage,
    /// Whether the counts were estimated with a tokenizer (the provider reported none).
    pub estimated: bool,
    /// Cost in micro-USD (0 when the model has no price).
    pub cost_micros: u64,
    /// Whether the model had a configured price.
    pub priced: bool,
    /// Milliseconds from sending the request upstream to its last byte (or the failure).
    pub latency_ms: u64,
    /// When the gateway started the call, UTC (microsecond precision).
    pub started_at: DateTime<Utc>,
    /// The team the key is scoped to, whose budget the call counted against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<TeamId>,
    /// The member whose team budget the call counted against: the key's owner for a member's
    /// team-scoped key, `None` for a team key and outside teams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<UserId>,
}

impl UsageRecord {
    /// The UTC day the record counts towards (that of `started_at`).
    pub fn day(&self) -> NaiveDate {
        self.started_at.date_naive()
    }
}

/// Most USD per million tokens a price may state (a typo guard).
pub const MAX_USD_PER_MILLION: f64 = 1_000_000.0;

/// µUSD in one USD.
pub const MICROS_PER_USD: u64 = 1_000_000;

/// Tokens in the "per million" of a price.
const TOKENS_PER_PRICE_UNIT: u128 = 1_000_000;

/// A model's price, in integer micro-USD per million tokens (`0.15` USD per million tokens is
/// `150_000`), so costs are exact integer arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelPrice {
    /// µUSD per million prompt tokens.
    pub input_micros_per_million: u64,
    /// µUSD per million completion tokens (reasoning tokens included).
    pub output_micros_per_million: u64,
    /// µUSD per million prompt tokens read from the provider's cache (by default the input
    /// price).
    pub cached_input_micros_per_million: u64,
    /// µUSD per million prompt tokens written to the provider's cache (by default the input
    /// price).
    pub cache_write_micros_per_million: u64,
}

/// A price that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be a number of USD per million tokens between 0 and {MAX_USD_PER_MILLION}")]
pub struct PriceError {
    /// `input_per_million`, `output_per_million`, `cached_input_per_million` or
    /// `cache_write_per_million`.
    pub field: &'static str,
}

/// USD per million tokens as µUSD per million tokens, rounded to the nearest.
fn micros_per_million(usd: f64, field: &'static str) -> Result<u64, PriceError> {
    if !usd.is_finite() || !(0.0..=MAX_USD_PER_MILLION).contains(&usd) {
        return Err(PriceError { field });
    }
    // In range by the check above: at most 1e12, far below u64::MAX.
    Ok((usd * MICROS_PER_USD as f64).round() as u64)
}

impl ModelPrice {
    /// Of each kind, the higher of the two prices: what a call that either may serve is
    /// reserved at.
    pub fn highest(&self, other: &Self) -> Self {
        Self {
            input_micros_per_million: self
                .input_micros_per_million
                .max(other.input_micros_per_million),
            output_micros_per_million: self
                .output_micros_per_million
                .max(other.output_micros_per_million),
            cached_input_micros_per_million: self
                .cached_input_micros_per_million
                .max(other.cached_input_micros_per_million),
            cache_write_micros_per_million: self
                .cache_write_micros_per_million
                .max(other.cache_write_micros_per_million),
        }
    }

    /// Converts prices given in USD per million tokens, rounded to the nearest µUSD per
    /// million tokens (the finest step a price can take); cached and cache-written prompt
    /// tokens cost the input price.
    ///
    /// # Errors
    /// [`PriceError`] when a price is negative, not finite, or above [`MAX_USD_PER_MILLION`].
    pub fn from_usd_per_million(input: f64, output: f64) -> Result<Self, PriceError> {
        let input = micros_per_million(input, "input_per_million")?;
        Ok(Self {
            input_micros_per_million: input,
            output_micros_per_million: micros_per_million(output, "output_per_million")?,
            cached_input_micros_per_million: input,
            cache_write_micros_per_million: input,
        })
    }

    /// This price with its own prices for prompt tokens read from (`cached_input`) and
    /// written to (`cache_write`) the provider's cache, in USD per million tokens; `None`
    /// keeps the input price.
    ///
    /// # Errors
    /// [`PriceError`] naming `cached_input_per_million` or `cache_write_per_million`, as
    /// [`Self::from_usd_per_million`].
    pub fn with_cache_prices(
        mut self,
        cached_input: Option<f64>,
        cache_write: Option<f64>,
    ) -> Result<Self, PriceError> {
        if let Some(usd) = cached_input {
            self.cached_input_micros_per_million =
                micros_per_million(usd, "cached_input_per_million")?;
        }
        if let Some(usd) = cache_write {
            self.cache_write_micros_per_million =
                micros_per_million(usd, "cache_write_per_million")?;
        }
        Ok(self)
    }

    /// The cost of `tokens` in µUSD: `(uncached prompt × input + cached × cached input +
    /// cache writes × cache write + completion × output) / 1,000,000`, computed exactly and
    /// rounded once, half up, to a whole µUSD. The error is thus at most 0.5 µUSD per
    /// request, never accumulated per token.
    pub fn cost_micros(&self, tokens: &TokenUsage) -> u64 {
        let cached = tokens.cached_tokens.min(tokens.prompt_tokens);
        let written = tokens.cache_write_tokens.min(tokens.prompt_tokens - cached);
        let exact = u128::from(tokens.prompt_tokens - cached - written)
            * u128::from(self.input_micros_per_million)
            + u128::from(cached) * u128::from(self.cached_input_micros_per_million)
            + u128::from(written) * u128::from(self.cache_write_micros_per_million)
            + u128::from(tokens.completion_tokens) * u128::from(self.output_micros_per_million);
        let rounded = (exact + TOKENS_PER_PRICE_UNIT / 2) / TOKENS_PER_PRICE_UNIT;
        u64::try_from(rounded).unwrap_or(u64::MAX)
    }

    /// The most `tokens` can cost before the call, when it is not known how much of their
    /// prompt the provider will read from or write to its cache: every prompt token at the
    /// highest of the input, cached-input and cache-write prices (Anthropic bills cache
    /// writes above the input price), the completion at the output price.
    pub fn worst_cost_micros(&self, tokens: &TokenUsage) -> u64 {
        let input = self
            .input_micros_per_million
            .max(self.cached_input_micros_per_million)
            .max(self.cache_write_micros_per_million);
        let uniform = ModelPrice {
            input_micros_per_million: input,
            cached_input_micros_per_million: input,
            cache_write_micros_per_million: input,
            ..*self
        };
        uniform.cost_micros(&TokenUsage::new(tokens.prompt_tokens, tokens.completion_tokens))
    }
}

/// µUSD as USD for JSON (`cost_usd`). Exact for every amount below 2^53 µUSD (9 billion USD).
pub fn micros_to_usd(micros: u64) -> f64 {
    micros as f64 / MICROS_PER_USD as f64
}

/// Default length of a usage query's range when `from` is not given, in days.
pub const DEFAULT_RANGE_DAYS: i64 = 30;

/// Longest range a usage query may cover, in days (both ends included).
pub const MAX_RANGE_DAYS: i64 = 366;

/// An inclusive range of UTC days, at most [`MAX_RANGE_DAYS`] long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayRange {
    /// First day.
    pub from: NaiveDate,
    /// Last day (inclusive).
    pub to: NaiveDate,
}

impl DayRange {
    /// Builds the range of a usage query from its `from` and `to` parameters
    /// (`YYYY-MM-DD`). `to` defaults to `today`; `from` to the [`DEFAULT_RANGE_DAYS`] days
    /// that end on `to`.
    ///
    /// # Errors
    /// [`FieldError`] on `from` or `to` when not a `YYYY-MM-DD` date; on `from` when it is
    /// after `to` or the range spans more than [`MAX_RANGE_DAYS`] days.
    pub fn parse(
        from: Option<&str>,
        to: Option<&str>,
        today: NaiveDate,
    ) -> Result<Self, FieldError> {
        let to = match to {
            Some(raw) => parse_day(raw, "to")?,
            None => today,
        };
        let from = match from {
            Some(raw) => parse_day(raw, "from")?,
            None => to - Duration::days(DEFAULT_RANGE_DAYS - 1),
        };
        if from > to {
            return Err(FieldError::new("from", "must not be after to"));
        }
        if (to - from).num_days() + 1 > MAX_RANGE_DAYS {
            return Err(FieldError::new(
                "from",
                format!("the range from..to may span at most {MAX_RANGE_DAYS} days"),
            ));
        }
        Ok(Self { from, to })
    }

    /// The [`DEFAULT_RANGE_DAYS`] days ending on `today` (`usage_30d` of key objects).
    pub fn last_days(today: NaiveDate, days: i64) -> Self {
        Self { from: today - Duration::days(days.max(1) - 1), to: today }
    }

    /// Number of days in the range.
    pub fn days(&self) -> i64 {
        (self.to - self.from).num_days() + 1
    }
}

/// Parses a `YYYY-MM-DD` day.
fn parse_day(raw: &str, field: &str) -> Result<NaiveDate, FieldError> {
    let valid_shape = raw.len() == 10
        && raw.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    let date = valid_shape.then(|| NaiveDate::parse_from_str(raw, "%Y-%m-%d").ok()).flatten();
    date.ok_or_else(|| FieldError::new(field, "must be a date YYYY-MM-DD"))
}

/// A day as stored and shown: `YYYY-MM-DD` (ISO 8601), as chrono's `Display` of a date
/// writes it (`%Y-%m-%d`; years outside 0 to 9999 with their sign, `+12345-06-07`).
pub fn format_day(day: NaiveDate) -> String {
    day.to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap_or_default()
    }

    #[test]
    fn days_are_written_as_chrono_writes_them() {
        let mut days: Vec<NaiveDate> =
            ["0000-01-01", "0999-12-31", "1970-01-01", "2026-11-26", "2024-02-29", "9999-12-31"]
                .iter()
                .map(|s| day(s))
                .collect();
        days.extend(NaiveDate::from_ymd_opt(12345, 6, 7));
        days.extend(NaiveDate::from_ymd_opt(-44, 3, 15));
        let mut d = day("2025-12-25");
        for _ in 0..400 {
            days.push(d);
            d = d.succ_opt().unwrap_or(d);
        }
        for d in days {
            assert_eq!(format_day(d), d.format("%Y-%m-%d").to_string());
        }
        assert_eq!(format_day(day("0999-12-31")), "0999-12-31");
    }

    #[test]
    fn outcome_names_round_trip() {
        for o in UsageOutcome::ALL {
            assert_eq!(UsageOutcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(UsageOutcome::parse("nope"), None);
    }

    #[test]
    fn prices_are_integer_micro_usd_per_million() {
        let p = ModelPrice::from_usd_per_million(0.15, 0.60);
        assert_eq!(
            p,
            Ok(ModelPrice {
                input_micros_per_million: 150_000,
                output_micros_per_million: 600_000,
                cached_input_micros_per_million: 150_000,
                cache_write_micros_per_million: 150_000,
            })
        );
        assert!(ModelPrice::from_usd_per_million(-1.0, 0.0).is_err());
        assert!(ModelPrice::from_usd_per_million(0.0, f64::NAN).is_err());
        assert!(ModelPrice::from_usd_per_million(2e6, 0.0).is_err());
    }

    #[test]
    fn cost_rounds_once_half_up() {
        let p = ModelPrice::from_usd_per_million(0.15, 0.60).unwrap_or_else(|_| unreachable!());
        // 1000 × 0.15 + 500 × 0.60 = 150 + 300 µUSD.
        assert_eq!(p.cost_micros(&TokenUsage::new(1000, 500)), 450);
        // 3 × 0.15 = 0.45 µUSD rounds down; 4 × 0.15 = 0.6 rounds up; 0.5 rounds up.
        assert_eq!(p.cost_micros(&TokenUsage::new(3, 0)), 0);
        assert_eq!(p.cost_micros(&TokenUsage::new(4, 0)), 1);
        let half = ModelPrice::from_usd_per_million(0.5, 0.0).unwrap_or(p);
        assert_eq!(half.cost_micros(&TokenUsage::new(1, 0)), 1);
        // No overflow at the extremes.
        let max =
            ModelPrice::from_usd_per_million(MAX_USD_PER_MILLION, MAX_USD_PER_MILLION).unwrap_or(p);
        assert_eq!(max.cost_micros(&TokenUsage::new(u64::MAX, u64::MAX)), u64::MAX);
        assert!((micros_to_usd(450) - 0.00045).abs() < 1e-12);
    }

    /// Cached and cache-written tokens are parts of the prompt, each at its own price, never
    /// billed twice; a report whose parts exceed the prompt bills at most the prompt.
    #[test]
    #[allow(clippy::panic)]
    fn cached_tokens_are_billed_once_at_their_price() {
        let p = ModelPrice::from_usd_per_million(3.0, 15.0)
            .and_then(|p| p.with_cache_prices(Some(0.3), Some(3.75)))
            .unwrap_or_else(|e| panic!("{e}"));
        let tokens = TokenUsage {
            cached_tokens: 1000,
            cache_write_tokens: 2000,
            reasoning_tokens: 50,
            ..TokenUsage::new(4000, 100)
        };
        assert_eq!(tokens.uncached_prompt_tokens(), 1000);
        // 1000 × 3 + 1000 × 0.3 + 2000 × 3.75 + 100 × 15 = 3000 + 300 + 7500 + 1500 µUSD.
        assert_eq!(p.cost_micros(&tokens), 12_300);
        let odd =
            TokenUsage { cached_tokens: 9000, cache_write_tokens: 9000, ..TokenUsage::new(10, 0) };
        assert_eq!(p.cost_micros(&odd), 3, "10 cached tokens at 0.3 µUSD");
        let plain = ModelPrice::from_usd_per_million(3.0, 15.0).unwrap_or(p);
        assert_eq!(plain.cost_micros(&tokens), 4000 * 3 + 1500, "no cache prices: the input price");
        // Before the call: every prompt token at the cache-write price, the highest.
        assert_eq!(p.worst_cost_micros(&tokens), 4000 * 15 / 4 + 1500);
        assert!(p.worst_cost_micros(&tokens) >= p.cost_micros(&tokens));
        assert_eq!(plain.worst_cost_micros(&tokens), plain.cost_micros(&tokens));
        assert_eq!(
            p.with_cache_prices(Some(-1.0), None).map_err(|e| e.field),
            Err("cached_input_per_million")
        );
        for e in Endpoint::ALL {
            assert_eq!(Endpoint::parse(e.as_str()), Some(e));
        }
    }

    #[test]
    fn day_ranges_default_and_validate() {
        let today = day("2026-11-22");
        let r = DayRange::parse(None, None, today);
        assert_eq!(r, Ok(DayRange { from: day("2026-10-24"), to: today }));
        assert_eq!(r.map(|r| r.days()), Ok(30));
        let field =
            |f: Option<&str>, t: Option<&str>| DayRange::parse(f, t, today).err().map(|e| e.field);
        assert_eq!(field(Some("2026-13-01"), None), Some("from".into()));
        assert_eq!(field(Some("2026-1-01"), None), Some("from".into()));
        assert_eq!(field(None, Some("yesterday")), Some("to".into()));
        assert_eq!(field(Some("2026-11-23"), Some("2026-11-22")), Some("from".into()));
        assert_eq!(field(Some("2025-11-21"), Some("2026-11-22")), Some("from".into()));
        assert!(DayRange::parse(Some("2025-11-22"), Some("2026-11-22"), today).is_ok());
        assert_eq!(format_day(today), "2026-11-22");
    }
}
