//! Metering one chat completion: the seam between the gateway and the recorder.
//!
//! The gateway starts a [`CallMeter`] once a request is routed to a provider, lets it adjust
//! the upstream body of a stream ([`CallMeter::upstream_body`]: ask for `usage`), and hands it
//! the provider's answer ([`CallMeter::finish`]). The meter then records exactly once:
//!
//! - a JSON answer or a failure at once;
//! - a stream when it ends, fails, or is dropped before its end (the caller went away:
//!   `client_cancelled`), through the [`super::sse::MeteredStream`] that wraps it;
//! - a call whose future is dropped before the provider answered (the caller went away while
//!   waiting) from the meter's own `Drop`.
//!
//! Nothing here blocks or fails the request: the record is finished on the thread that ends
//! the call (reading the answer's `usage` and pricing it: microseconds) and added to that
//! thread's sums ([`super::aggregate`]); an estimate with a tokenizer, which a long prompt
//! makes slow, runs on the blocking pool ([`Pending::finish`]).

use super::in_flight::{CallFacts, InFlight, InFlightTicket};
use super::prices::PriceTable;
use super::recorder::RecorderHandle;
use super::sse::MeteredStream;
use super::tokens;
use crate::auth::Principal;
use crate::error::ServiceError;
use crate::gateway::chat_request::ChatRequestSummary;
use crate::gateway::reply::ChatReply;
use crate::limits::key_limits::Admitted;
use crate::limits::key_rates::TokenReservation;
use crate::limits::reservation::Reservation;
use aigw_domain::usage::{TokenUsage, UsageOutcome, UsageRecord};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use std::time::Instant;

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
    pub(crate) api_key_id: String,
    pub(crate) user_id: String,
    pub(crate) model: String,
    pub(crate) provider: String,
    pub(crate) streamed: bool,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) outcome: UsageOutcome,
    pub(crate) latency_ms: u64,
    /// The request body as the caller sent it (for a prompt estimate).
    pub(crate) request: Bytes,
    pub(crate) observed: Observed,
    /// The team the key is scoped to, and the member charged (see [`UsageRecord`]).
    pub(crate) team_id: Option<String>,
    pub(crate) member_id: Option<String>,
    /// Per level the call counts against (key, member, team): its budget reservation,
    /// settled to the record's cost, and its `tpm_limit` reservation, settled to the record's
    /// total tokens.
    pub(crate) held: Vec<(Option<Reservation>, Option<TokenReservation>)>,
    /// The call's place among the node's calls in flight; it leaves them with the record.
    pub(crate) in_flight: Option<InFlightTicket>,
}

/// The `usage` object of an OpenAI answer or chunk.
#[derive(Debug, Deserialize)]
struct UsageField {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: Option<u64>,
}

impl UsageField {
    fn into_usage(self) -> TokenUsage {
        let sum = self.prompt_tokens.saturating_add(self.completion_tokens);
        TokenUsage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.total_tokens.unwrap_or(sum),
        }
    }
}

/// An answer, of which only `usage` is read: kept as the raw text of its value (borrowed from
/// the answer, no tree), then read as a [`UsageField`] by [`UsageOnly::usage`].
#[derive(Debug, Deserialize)]
struct UsageOnly<'a> {
    #[serde(default, borrow)]
    usage: Option<&'a serde_json::value::RawValue>,
}

impl UsageOnly<'_> {
    /// The answer's `usage`; one that is null or not a usage object reads as absent rather
    /// than failing the answer's parse.
    fn usage(&self) -> Option<UsageField> {
        self.usage.and_then(|raw| serde_json::from_str::<UsageField>(raw.get()).ok())
    }
}

/// Reads a `usage` object (`prompt_tokens`, `completion_tokens`, optional `total_tokens`).
pub(crate) fn parse_usage(value: &Value) -> Option<TokenUsage> {
    UsageField::deserialize(value).ok().map(UsageField::into_usage)
}

impl Pending {
    /// The call's tokens when they need no estimate: the provider's `usage`, or none at all for
    /// a failure before any answer (`upstream_error`: nothing was generated). `None` when
    /// finishing the record takes a tokenizer estimate, which a long prompt makes slow. Only
    /// `usage` is read from a JSON answer (serde skips the rest without building a tree).
    pub(crate) fn known_usage(&self) -> Option<TokenUsage> {
        let failed = self.outcome == UsageOutcome::UpstreamError;
        match &self.observed {
            Observed::Json(body) => {
                let reported =
                    serde_json::from_slice::<UsageOnly<'_>>(body).ok().and_then(|a| a.usage());
                match reported {
                    Some(usage) => Some(usage.into_usage()),
                    None => failed.then(TokenUsage::default),
                }
            }
            Observed::Stream { usage, .. } => *usage,
            Observed::Nothing => failed.then(TokenUsage::default),
        }
    }

    /// The final record: `known` tokens ([`Pending::known_usage`]) when given, else an
    /// estimate with the model's tokenizer (marked `estimated`), priced from `prices`; the
    /// call's budget and token reservations are settled to it, and the call leaves the node's
    /// calls in flight. Also says whether the call may have a row among the calls in flight
    /// (see [`aigw_domain::ledger::UsageFlush::tracked`]).
    ///
    /// A call cut by a timeout or by the caller counts the prompt (the provider read it) and
    /// what was streamed so far, estimated.
    pub(crate) fn finish(
        mut self,
        prices: &PriceTable,
        known: Option<TokenUsage>,
    ) -> (UsageRecord, bool) {
        let held = std::mem::take(&mut self.held);
        let tracked = self.in_flight.take().is_some_and(InFlightTicket::leave);
        let (usage, estimated) = match known {
            Some(usage) => (usage, false),
            None => (self.estimate(), true),
        };
        let price = prices.get(&self.model);
        let cost_micros = price.map_or(0, |p| p.cost_micros(&usage));
        for (reservation, tokens_reserved) in held {
            if let Some(reservation) = reservation {
                reservation.settle(cost_micros, usage.total_tokens);
            }
            if let Some(reserved) = tokens_reserved {
                reserved.settle(usage.total_tokens);
            }
        }
        let record = UsageRecord {
            request_id: self.request_id,
            api_key_id: self.api_key_id,
            user_id: self.user_id,
            model: self.model,
            provider: self.provider,
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
        (record, tracked)
    }
}

impl Pending {
    /// The call's tokens counted with the model's tokenizer: the prompt, plus what came of
    /// the answer (a JSON answer's message, or the text streamed so far).
    fn estimate(&self) -> TokenUsage {
        let encoding = tokens::encoding_for_model(&self.model);
        let prompt = serde_json::from_slice::<Value>(&self.request)
            .map(|body| tokens::count_prompt(encoding, &body))
            .unwrap_or(0);
        let completion = match &self.observed {
            Observed::Json(body) => {
                let answer = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
                tokens::count_completion_json(encoding, &answer)
            }
            Observed::Stream { completion, .. } => tokens::count_text(encoding, completion),
            Observed::Nothing => 0,
        };
        TokenUsage::new(prompt, completion)
    }
}

/// Starts meters for routed chat completions (cheap to clone; one per gateway).
#[derive(Debug, Clone)]
pub struct Meter {
    recorder: RecorderHandle,
    in_flight: Option<InFlight>,
}

impl Meter {
    pub(crate) fn new(recorder: RecorderHandle) -> Self {
        Self { recorder, in_flight: None }
    }

    /// Enters every metered call in `book` while it runs ([`super::in_flight`]).
    pub(crate) fn with_in_flight(mut self, book: InFlight) -> Self {
        self.in_flight = Some(book);
        self
    }

    /// Starts metering a call of `principal` (an API key; `None` for anything else, which
    /// cannot call the gateway) to `provider`'s `model`. `request` is the body as received.
    pub fn start(
        &self,
        principal: &Principal,
        request_id: &str,
        model: &str,
        provider: &str,
        streamed: bool,
        request: &Bytes,
    ) -> Option<CallMeter> {
        let Principal::ApiKey { key_id, user_id, team, .. } = principal else {
            return None;
        };
        Some(CallMeter {
            recorder: self.recorder.clone(),
            in_flight: self.in_flight.clone(),
            pending: Some(Pending {
                request_id: request_id.to_owned(),
                api_key_id: key_id.clone(),
                user_id: user_id.clone(),
                model: model.to_owned(),
                provider: provider.to_owned(),
                streamed,
                started_at: aigw_domain::time::now(),
                outcome: UsageOutcome::Ok,
                latency_ms: 0,
                request: request.clone(),
                observed: Observed::Nothing,
                team_id: team.as_ref().map(|t| t.team_id.clone()),
                member_id: team.as_ref().and_then(|t| t.member.as_ref()).map(|m| m.user_id.clone()),
                held: Vec::new(),
                in_flight: None,
            }),
            started: Instant::now(),
            caller_wants_usage: false,
        })
    }
}

/// The metering of one call; records exactly once (see the module docs).
#[derive(Debug)]
pub struct CallMeter {
    recorder: RecorderHandle,
    in_flight: Option<InFlight>,
    pending: Option<Pending>,
    started: Instant,
    caller_wants_usage: bool,
}

impl CallMeter {
    /// The body to send upstream, and whether it asks for a final `usage` chunk.
    ///
    /// For a stream whose caller did not ask for `usage`, aigw asks for it
    /// (`stream_options.include_usage = true`) and later removes what that adds to the stream,
    /// so the caller gets what it would have got without. The insertion keeps the caller's
    /// bytes: `"stream_options":{"include_usage":true},` goes right after the opening brace.
    /// Only when the caller sent `stream_options` without `include_usage: true` is the body
    /// re-serialised (same fields, `include_usage` set). Other bodies go unchanged.
    pub fn upstream_body(&mut self, body: Bytes, request: &ChatRequestSummary) -> (Bytes, bool) {
        let streamed = self.pending.as_ref().is_some_and(|p| p.streamed);
        self.caller_wants_usage = request.include_usage;
        if !streamed || self.caller_wants_usage {
            return (body, self.caller_wants_usage);
        }
        if !request.has_stream_options {
            if let Some(open) = body.iter().position(|b| *b == b'{') {
                let mut out = Vec::with_capacity(body.len() + 40);
                out.extend_from_slice(&body[..=open]);
                out.extend_from_slice(br#""stream_options":{"include_usage":true},"#);
                out.extend_from_slice(&body[open + 1..]);
                return (Bytes::from(out), true);
            }
        }
        // The caller sent `stream_options` without `include_usage: true`: the only case that
        // builds a tree of the body, to set that one member.
        let Ok(mut changed) = serde_json::from_slice::<Value>(&body) else {
            return (body, false);
        };
        if let Some(object) = changed.as_object_mut() {
            let options = object
                .entry("stream_options")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if !options.is_object() {
                *options = Value::Object(serde_json::Map::new());
            }
            if let Some(options) = options.as_object_mut() {
                options.insert("include_usage".to_owned(), Value::Bool(true));
            }
        }
        match serde_json::to_vec(&changed) {
            Ok(bytes) => (Bytes::from(bytes), true),
            Err(_) => (body, false),
        }
    }

    /// Hands the call's budget and token reservations at every level to the meter: they
    /// settle to the call's real cost and tokens when the call is recorded. The call enters
    /// the node's calls in flight with its worst case: the first budget reservation when it
    /// has one, else `worst` tokens at the model's price.
    pub fn hold(&mut self, admitted: Admitted, worst: TokenUsage) {
        let Some(pending) = self.pending.as_mut() else {
            return;
        };
        let held: Vec<_> =
            admitted.levels.into_iter().map(|level| (level.reservation, level.tokens)).collect();
        if let Some(book) = &self.in_flight {
            let price = self.recorder.prices().get(&pending.model);
            let reserved = match held.iter().find_map(|(reservation, _)| reservation.as_ref()) {
                Some(reservation) => reservation.reserved_micros(),
                None => price.map_or(0, |p| p.cost_micros(&worst)),
            };
            let facts = CallFacts {
                request_id: &pending.request_id,
                api_key_id: &pending.api_key_id,
                user_id: &pending.user_id,
                model: &pending.model,
                provider: &pending.provider,
                streamed: pending.streamed,
                started_at: pending.started_at,
                team_id: pending.team_id.as_deref(),
                member_id: pending.member_id.as_deref(),
            };
            pending.in_flight = Some(book.enter(&facts, reserved, price.is_some(), worst));
        }
        pending.held = held;
    }

    /// Records the outcome of the provider call and returns its answer; a stream comes back
    /// wrapped so that it is recorded when it ends or is dropped.
    ///
    /// # Errors
    /// The provider's error, unchanged.
    pub fn finish(
        mut self,
        reply: Result<ChatReply, ServiceError>,
    ) -> Result<ChatReply, ServiceError> {
        match reply {
            Ok(ChatReply::Json { status, body }) => {
                let outcome =
                    if status < 400 { UsageOutcome::Ok } else { UsageOutcome::UpstreamError };
                self.record(outcome, Observed::Json(body.clone()));
                Ok(ChatReply::Json { status, body })
            }
            Ok(ChatReply::Stream { status, content_type, body }) => {
                let strip = !self.caller_wants_usage;
                Ok(ChatReply::Stream {
                    status,
                    content_type,
                    body: Box::pin(MeteredStream::new(body, self, strip)),
                })
            }
            Err(e) => {
                let outcome = match e {
                    ServiceError::UpstreamTimeout { .. } => UsageOutcome::Timeout,
                    _ => UsageOutcome::UpstreamError,
                };
                self.record(outcome, Observed::Nothing);
                Err(e)
            }
        }
    }

    /// Records `outcome` unless already recorded.
    pub(crate) fn record(&mut self, outcome: UsageOutcome, observed: Observed) {
        if let Some(mut pending) = self.pending.take() {
            pending.outcome = outcome;
            pending.observed = observed;
            pending.latency_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(0);
            self.recorder.submit(pending);
        }
    }
}

impl Drop for CallMeter {
    /// The call was dropped before the provider's answer was recorded: the caller went away.
    fn drop(&mut self) {
        self.record(UsageOutcome::ClientCancelled, Observed::Nothing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(answer: &str) -> Option<TokenUsage> {
        serde_json::from_str::<UsageOnly<'_>>(answer).ok()?.usage().map(UsageField::into_usage)
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
