//! Metering one gateway call: the seam between the gateway and the recorder.
//!
//! The gateway starts a [`CallMeter`] once a request is routed to a provider, lets it adjust
//! the upstream body of a stream ([`CallMeter::upstream_body`]: ask for `usage`), and hands it
//! the provider's answer ([`CallMeter::finish`]). The meter then records exactly once:
//!
//! - a JSON answer or a failure at once;
//! - a stream when it ends, fails, or is dropped before its end (the caller went away:
//!   `client_cancelled`), through the [`super::sse::MeteredStream`] that wraps it (see
//!   [`super::answer`]);
//! - a call whose future is dropped before the provider answered (the caller went away while
//!   waiting) from the meter's own `Drop`.
//!
//! Nothing here blocks or fails the request: the record is finished on the thread that ends
//! the call (reading the answer's `usage` and pricing it: microseconds) and added to that
//! thread's sums ([`super::aggregate`]); an estimate with a tokenizer, which a long prompt
//! makes slow, runs on the blocking pool ([`Pending::finish`](super::pending::Pending::finish)).

use super::in_flight::{CallFacts, InFlight};
use super::pending::{Observed, Pending};
use super::recorder::RecorderHandle;
use crate::auth::Principal;
use crate::dialect::summary::RequestSummary;
use crate::governance::key_limits::{Admitted, Held};
use crate::Clock;
use aigw_domain::usage::{Endpoint, TokenUsage, UsageOutcome};
use bytes::Bytes;
use serde_json::Value;
use std::time::Instant;

/// Starts meters for routed gateway calls (cheap to clone; one per gateway).
#[derive(Debug, Clone)]
pub struct Meter {
    recorder: RecorderHandle,
    in_flight: Option<InFlight>,
    /// The time calls are dated by (`started_at`, and so the day they count on).
    clock: Clock,
}

impl Meter {
    pub(crate) fn new(recorder: RecorderHandle, clock: Clock) -> Self {
        Self { recorder, in_flight: None, clock }
    }

    /// Enters every metered call in `book` while it runs ([`super::in_flight`]).
    pub(crate) fn with_in_flight(mut self, book: InFlight) -> Self {
        self.in_flight = Some(book);
        self
    }

    /// Starts metering a call of `principal` (an API key; `None` for anything else, which
    /// cannot call the gateway), summarised as `summary` (its endpoint, model and whether it
    /// streams), to `provider`. `request` is the body as received.
    pub fn start(
        &self,
        principal: &Principal,
        request_id: &str,
        summary: &RequestSummary,
        provider: &str,
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
                endpoint: summary.endpoint,
                model: summary.model.clone(),
                provider: provider.to_owned(),
                served_model: None,
                attempts: 0,
                streamed: summary.stream,
                started_at: self.clock.now(),
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
    pub(super) caller_wants_usage: bool,
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
    ///
    /// Only chat completions need this: the other dialects always report usage (a stream's
    /// final event carries it), so their body goes unchanged and nothing is stripped.
    pub fn upstream_body(&mut self, body: Bytes, request: &RequestSummary) -> (Bytes, bool) {
        let streamed = self.pending.as_ref().is_some_and(|p| p.streamed);
        self.caller_wants_usage = request.include_usage || request.endpoint != Endpoint::Chat;
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
                None => price.map_or(0, |p| p.worst_cost_micros(&worst)),
            };
            let facts = CallFacts {
                request_id: &pending.request_id,
                api_key_id: &pending.api_key_id,
                user_id: &pending.user_id,
                model: &pending.model,
                provider: &pending.provider,
                endpoint: pending.endpoint,
                streamed: pending.streamed,
                started_at: pending.started_at,
                team_id: pending.team_id.as_deref(),
                member_id: pending.member_id.as_deref(),
            };
            pending.in_flight = Some(book.enter(&facts, reserved, price.is_some(), worst));
        }
        pending.held = held;
    }

    /// Takes back what the call holds at every level (its budget and token reservations),
    /// for a fallback to another model to be admitted afresh
    /// ([`crate::governance::key_limits::SpendGovernance::release`] gives them back).
    pub(crate) fn take_held(&mut self) -> Vec<Held> {
        self.pending.as_mut().map(|p| std::mem::take(&mut p.held)).unwrap_or_default()
    }

    /// Holds the reservations of `admitted` (a fallback's admission) in place of those taken
    /// back; the call's place among the calls in flight keeps its first worst case.
    pub(crate) fn rehold(&mut self, admitted: Admitted) {
        if let Some(pending) = self.pending.as_mut() {
            pending.held = admitted.levels.into_iter().map(|l| (l.reservation, l.tokens)).collect();
        }
    }

    /// Names what served the call: `provider`'s deployment of `model` (the fallback's, when
    /// it differs from the model asked for), after `attempts` upstream calls.
    pub(crate) fn served(&mut self, provider: &str, model: &str, attempts: u32) {
        if let Some(pending) = self.pending.as_mut() {
            provider.clone_into(&mut pending.provider);
            pending.served_model = (model != pending.model).then(|| model.to_owned());
            pending.attempts = attempts;
        }
    }

    /// The endpoint of the metered call (`chat` once recorded: it is not read then).
    pub(crate) fn endpoint(&self) -> Endpoint {
        self.pending.as_ref().map_or(Endpoint::Chat, |p| p.endpoint)
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
