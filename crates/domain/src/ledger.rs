//! What a node writes to the usage ledger at each flush: the calls it metered since the last
//! one, summed per rollup row, plus the per-request records where those are kept.
//!
//! A node does not write one row per call. It adds every finished call to in-memory sums per
//! (API key, model, endpoint, UTC day) and writes the sums as one [`UsageFlush`] per
//! interval, so the statements it sends depend on how many keys and models were active, not
//! on the call rate.
//! A flush carries an id (a UUIDv7) recorded in the same transaction as its sums: a flush
//! applied twice (a replay of the spool file after a crash or an outage) counts once.

use crate::id::{ApiKeyId, TeamId, UserId};
use crate::usage::{Endpoint, UsageRecord};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

/// Sums over a set of calls: a row of the daily rollups, or an increment added to one.
/// Tokens are counts, nested as in [`crate::usage::TokenUsage`] (`cached_tokens` and
/// `cache_write_tokens` are parts of `prompt_tokens`, `reasoning_tokens` of
/// `completion_tokens`); cost is integer micro-USD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageSums {
    /// Calls counted.
    pub requests: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Total tokens.
    pub total_tokens: u64,
    /// Cost in micro-USD.
    pub cost_micros: u64,
    /// Calls whose tokens were estimated.
    pub estimated_requests: u64,
    /// Calls of models without a price.
    pub unpriced_requests: u64,
    /// Of `prompt_tokens`, those read from the provider's prompt cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Of `completion_tokens`, the model's reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl UsageSums {
    /// Counts one call.
    pub fn add_record(&mut self, record: &UsageRecord) {
        self.add(&Self::of(record));
    }

    /// The sums of one call.
    pub fn of(record: &UsageRecord) -> Self {
        Self {
            requests: 1,
            prompt_tokens: record.tokens.prompt_tokens,
            completion_tokens: record.tokens.completion_tokens,
            total_tokens: record.tokens.total_tokens,
            cost_micros: record.cost_micros,
            estimated_requests: u64::from(record.estimated),
            unpriced_requests: u64::from(!record.priced),
            cached_tokens: record.tokens.cached_tokens,
            cache_write_tokens: record.tokens.cache_write_tokens,
            reasoning_tokens: record.tokens.reasoning_tokens,
        }
    }

    /// Whether every call counted had a price.
    pub fn priced(&self) -> bool {
        self.unpriced_requests == 0
    }

    /// Adds `other` (saturating: a sum never wraps).
    pub fn add(&mut self, other: &Self) {
        self.requests = self.requests.saturating_add(other.requests);
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.cost_micros = self.cost_micros.saturating_add(other.cost_micros);
        self.estimated_requests = self.estimated_requests.saturating_add(other.estimated_requests);
        self.unpriced_requests = self.unpriced_requests.saturating_add(other.unpriced_requests);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }
}

/// Which rollup row a call counts towards: its API key, model, endpoint and UTC day, with the key's
/// owner, team and team member (the same for every call of a key) and the provider that
/// served the model (for the per-provider metrics; not part of the row's identity).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RollupKey {
    /// The API key.
    pub api_key_id: ApiKeyId,
    /// The requested model.
    pub model: String,
    /// The endpoint called (`chat` in a flush spooled before endpoints were recorded).
    #[serde(default)]
    pub endpoint: Endpoint,
    /// The UTC day of the calls' start.
    pub day: NaiveDate,
    /// The key's owner.
    pub user_id: UserId,
    /// The team the key is scoped to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<TeamId>,
    /// The member charged in the team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<UserId>,
    /// The provider that served the calls.
    pub provider: String,
}

impl RollupKey {
    /// The row `record` counts towards (its strings copied).
    pub fn of(record: &UsageRecord) -> Self {
        Self {
            api_key_id: record.api_key_id.clone(),
            model: record.model.clone(),
            endpoint: record.endpoint,
            day: record.day(),
            user_id: record.user_id.clone(),
            team_id: record.team_id.clone(),
            member_id: record.member_id.clone(),
            provider: record.provider.clone(),
        }
    }
}

/// One rollup increment: a row and what to add to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRollup {
    /// The row.
    pub key: RollupKey,
    /// What to add.
    pub sums: UsageSums,
}

/// One write to the ledger (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageFlush {
    /// Unique per flush (a UUIDv7); a flush whose id the ledger has seen is skipped.
    pub id: String,
    /// Sums of the calls that never had a row among the calls in flight, ordered by row
    /// (concurrent writers lock rollup rows in the same order).
    pub rollups: Vec<UsageRollup>,
    /// Per-request records of those calls, where per-request records are kept (else empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<UsageRecord>,
    /// Calls that may have a row among the calls in flight (they ran longer than a flush
    /// interval): each counts unless another node already billed it as interrupted (its row
    /// marked billed); its row is deleted in the same transaction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracked: Vec<UsageRecord>,
    /// Whether the per-request records of `tracked` calls are kept.
    #[serde(default)]
    pub keep_records: bool,
}

impl UsageFlush {
    /// Calls this flush counts (before any tracked call is found already billed).
    pub fn calls(&self) -> u64 {
        let summed: u64 = self.rollups.iter().map(|r| r.sums.requests).sum();
        summed + self.tracked.len() as u64
    }

    /// Whether it counts nothing.
    pub fn is_empty(&self) -> bool {
        self.rollups.is_empty() && self.tracked.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{TokenUsage, UsageOutcome};

    fn record(cost: u64, estimated: bool, priced: bool) -> UsageRecord {
        UsageRecord {
            request_id: "r".into(),
            api_key_id: "k".into(),
            user_id: "u".into(),
            model: "m".into(),
            provider: "p".into(),
            served_model: None,
            attempts: 1,
            endpoint: crate::usage::Endpoint::Chat,
            streamed: false,
            outcome: UsageOutcome::Ok,
            tokens: TokenUsage { cached_tokens: 1, reasoning_tokens: 2, ..TokenUsage::new(3, 4) },
            estimated,
            cost_micros: cost,
            priced,
            latency_ms: 1,
            started_at: chrono::DateTime::from_timestamp(86_400 * 3 + 5, 0).unwrap_or_default(),
            team_id: None,
            member_id: None,
        }
    }

    #[test]
    fn sums_count_each_call_once_with_its_flags() {
        let mut sums = UsageSums::default();
        sums.add_record(&record(10, true, true));
        sums.add_record(&record(0, false, false));
        assert_eq!(
            sums,
            UsageSums {
                requests: 2,
                prompt_tokens: 6,
                completion_tokens: 8,
                total_tokens: 14,
                cost_micros: 10,
                estimated_requests: 1,
                unpriced_requests: 1,
                cached_tokens: 2,
                cache_write_tokens: 0,
                reasoning_tokens: 4,
            }
        );
        let key = RollupKey::of(&record(1, false, true));
        assert_eq!(key.day.to_string(), "1970-01-04");
        assert_eq!(key.endpoint, crate::usage::Endpoint::Chat);
    }

    #[test]
    fn a_flush_round_trips_through_json_and_counts_its_calls() {
        let r = record(7, false, true);
        let flush = UsageFlush {
            id: "f".into(),
            rollups: vec![UsageRollup { key: RollupKey::of(&r), sums: UsageSums::of(&r) }],
            records: vec![r.clone()],
            tracked: vec![r],
            keep_records: true,
        };
        let text = serde_json::to_string(&flush).unwrap_or_default();
        assert_eq!(serde_json::from_str::<UsageFlush>(&text).ok(), Some(flush.clone()));
        assert_eq!(flush.calls(), 2);
        assert!(!flush.is_empty());
    }

    #[test]
    fn a_flush_spooled_before_endpoints_and_token_kinds_reads_as_chat_with_zeros() {
        let old = r#"{"id":"f","rollups":[{"key":{"api_key_id":"k","model":"m",
            "day":"2026-11-27","user_id":"u","provider":"p"},"sums":{"requests":1,
            "prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"cost_micros":9,
            "estimated_requests":0,"unpriced_requests":0}}]}"#;
        let flush: UsageFlush = serde_json::from_str(old).unwrap_or_default();
        let rollup = &flush.rollups[0];
        assert_eq!(rollup.key.endpoint, crate::usage::Endpoint::Chat);
        assert_eq!(rollup.sums.prompt_tokens, 3);
        assert_eq!(
            (
                rollup.sums.cached_tokens,
                rollup.sums.cache_write_tokens,
                rollup.sums.reasoning_tokens
            ),
            (0, 0, 0)
        );
    }
}
