//! A metered call's record before it is finished ([`Pending`]), what was seen of the
//! provider's answer ([`Observed`]), and how its `usage` is read and, failing that, estimated.
//! The meter fills it while the call runs; the recorder finishes it.

use super::in_flight::InFlightTicket;
use crate::dialect::{tokens, usage};
use crate::governance::key_rates::TokenReservation;
use crate::governance::reservation::Reservation;
use crate::prices::PriceTable;
use aigw_domain::usage::{Endpoint, TokenUsage, UsageOutcome, UsageRecord};
use aigw_domain::{ApiKeyId, TeamId, UserId};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;

/// What was seen of the provider's answer.
#[derive(Debug)]
pub(crate) enum Observed {
    /// No answer (failure before any byte, or cancelled while waiting).
    Nothing,
    /// A complete JSON answer.
    Json(Bytes),
    /// A stream, as far as it went: the `usage` it reported, if any, and its text.
    Stream {
        /// The `usage` of a chunk, if one came.
        usage: Option<TokenUsage>,
        /// The concatenated text of the deltas (for an estimate).
        completion: String,
    },
}

/// A metered call waiting to become a [`UsageRecord`] in the recorder.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) request_id: String,
    pub(crate) api_key_id: ApiKeyId,
    pub(crate) user_id: UserId,
    /// The endpoint called: which dialect's usage its answer reports.
    pub(crate) endpoint: Endpoint,
    pub(crate) model: String,
    /// The provider of the deployment that served (when none did, of the one tried last).
    pub(crate) provider: String,
    /// The model that served, when a fallback did.
    pub(crate) served_model: Option<String>,
    /// Upstream calls made.
    pub(crate) attempts: u32,
    pub(crate) streamed: bool,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) outcome: UsageOutcome,
    pub(crate) latency_ms: u64,
    /// The request body as the caller sent it (for a prompt estimate).
    pub(crate) request: Bytes,
    pub(crate) observed: Observed,
    /// The team the key is scoped to, and the member charged (see [`UsageRecord`]).
    pub(crate) team_id: Option<TeamId>,
    pub(crate) member_id: Option<UserId>,
    /// Per level the call counts against (key, member, team): its budget reservation,
    /// settled to the record's cost, and its `tpm_limit` reservation, settled to the record's
    /// total tokens.
    pub(crate) held: Vec<(Option<Reservation>, Option<TokenReservation>)>,
    /// The call's place among the node's calls in flight; it leaves them with the record.
    pub(crate) in_flight: Option<InFlightTicket>,
}

impl Pending {
    /// The call's tokens when they need no estimate: the provider's `usage`, or none at all for
    /// a failure before any answer (`upstream_error`: nothing was generated). `None` when
    /// finishing the record takes a tokenizer estimate, which a long prompt makes slow. Only
    /// `usage` is read from a JSON answer (serde skips the rest without building a tree).
    pub(crate) fn known_usage(&self) -> Option<TokenUsage> {
        let failed = self.outcome == UsageOutcome::UpstreamError;
        match &self.observed {
            Observed::Json(body) => match usage::json_answer_usage(self.endpoint, body) {
                Some(usage) => Some(usage),
                None => failed.then(TokenUsage::default),
            },
            Observed::Stream { usage, .. } => *usage,
            Observed::Nothing => failed.then(TokenUsage::default),
        }
    }

    /// The final record: `known` tokens ([`Pending::known_usage`]) when given, else an
    /// estimate with the model's tokenizer (marked `estimated`), priced from `prices`; the
    /// call leaves the node's calls in flight. Also says whether the call may have a row among
    /// the calls in flight (see [`aigw_domain::ledger::UsageFlush::tracked`]).
    ///
    /// The call's budget and token reservations settle to the record: at once when the call
    /// has no row in flight; otherwise the [`Settlement`] returned is applied once the record
    /// is in the ledger (or the spool). Until then the counters hold the call's reservation,
    /// which is what another node bills it at should this node die first (its row in flight
    /// is still there): the ledger never holds more for a call than its counters did.
    ///
    /// A call cut by a timeout or by the caller counts the prompt (the provider read it) and
    /// what was streamed so far, estimated.
    pub(crate) fn finish(
        mut self,
        prices: &PriceTable,
        known: Option<TokenUsage>,
    ) -> (UsageRecord, bool, Option<Settlement>) {
        let held = std::mem::take(&mut self.held);
        let tracked = self.in_flight.take().is_some_and(InFlightTicket::leave);
        let (usage, estimated) = match known {
            Some(usage) => (usage, false),
            None => (self.estimate(), true),
        };
        // The serving deployment's price.
        let served = self.served_model.as_deref().unwrap_or(&self.model);
        let price = prices.served(&self.provider, served);
        let cost_micros = price.map_or(0, |p| p.cost_micros(&usage));
        let settlement = Settlement { held, cost_micros, total_tokens: usage.total_tokens };
        let settlement = if tracked && !settlement.held.is_empty() {
            Some(settlement)
        } else {
            settlement.apply();
            None
        };
        let record = UsageRecord {
            request_id: self.request_id,
            api_key_id: self.api_key_id,
            user_id: self.user_id,
            model: self.model,
            provider: self.provider,
            served_model: self.served_model,
            attempts: self.attempts,
            endpoint: self.endpoint,
            streamed: self.streamed,
            outcome: self.outcome,
            tokens: usage,
            estimated,
            cost_micros,
            priced: price.is_some(),
            latency_ms: self.latency_ms,
            started_at: self.started_at,
            team_id: self.team_id,
            member_id: self.member_id,
        };
        (record, tracked, settlement)
    }
}

/// What a finished call's reservations settle to: its record's cost and total tokens.
#[derive(Debug)]
pub(crate) struct Settlement {
    held: Vec<(Option<Reservation>, Option<TokenReservation>)>,
    cost_micros: u64,
    total_tokens: u64,
}

impl Settlement {
    /// Settles every level's budget and token reservations (in the background where they
    /// live outside the node).
    pub(crate) fn apply(self) {
        for (reservation, tokens_reserved) in self.held {
            if let Some(reservation) = reservation {
                reservation.settle(self.cost_micros, self.total_tokens);
            }
            if let Some(reserved) = tokens_reserved {
                reserved.settle(self.total_tokens);
            }
        }
    }
}

impl Pending {
    /// The call's tokens counted with the model's tokenizer: the prompt (chat: its messages
    /// in the chat format; embeddings: its input; the other dialects: the text of the whole
    /// body, an over-count of their prompt), plus what came of the answer (a JSON answer's
    /// generated text, or the text streamed so far).
    fn estimate(&self) -> TokenUsage {
        let encoding = tokens::encoding_for_model(&self.model);
        let prompt = match self.endpoint {
            Endpoint::Chat => serde_json::from_slice::<Value>(&self.request)
                .map(|body| tokens::count_prompt(encoding, &body))
                .unwrap_or(0),
            Endpoint::Embeddings => serde_json::from_slice::<Value>(&self.request)
                .map(|body| tokens::count_embeddings_input(Some(encoding), &body))
                .unwrap_or(0),
            Endpoint::Responses | Endpoint::Messages => {
                tokens::count_text(encoding, &String::from_utf8_lossy(&self.request))
            }
        };
        let completion = match &self.observed {
            Observed::Json(body) => {
                let answer = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
                match self.endpoint {
                    Endpoint::Chat => tokens::count_completion_json(encoding, &answer),
                    other => tokens::count_text(encoding, &usage::answer_text(other, &answer)),
                }
            }
            Observed::Stream { completion, .. } => tokens::count_text(encoding, completion),
            Observed::Nothing => 0,
        };
        TokenUsage::new(prompt, completion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(answer: &str) -> Option<TokenUsage> {
        usage::json_answer_usage(Endpoint::Chat, answer.as_bytes())
    }

    #[test]
    fn only_a_usage_object_counts_and_nothing_else_fails_the_answer() {
        let usage = reported(
            r#"{"id":"x","choices":[{"message":{"content":"a \"quoted\" \u00e9"}}],
                "usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16,"details":{}}}"#,
        );
        assert_eq!(usage, Some(TokenUsage::new(12, 4)));
        assert_eq!(
            reported(r#"{"usage":{"prompt_tokens":1,"completion_tokens":2}}"#),
            Some(TokenUsage::new(1, 2)),
            "total_tokens defaults to the sum"
        );
        for answer in [
            r#"{"choices":[]}"#,
            r#"{"usage":null}"#,
            r#"{"usage":"twelve"}"#,
            r#"{"usage":{"prompt_tokens":-1,"completion_tokens":2}}"#,
            r#"{"usage":[1,2]}"#,
        ] {
            assert_eq!(reported(answer), None, "{answer}");
        }
    }
}
