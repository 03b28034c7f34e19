//! A key's own `rpm_limit` and `tpm_limit`, across every node sharing the
//! database, whatever `rate_limit.enabled` says: they are part of the key.
//!
//! Counters are fixed one-minute UTC windows (`aigw_persistence::key_rates`). A call is
//! admitted by one conditional `UPDATE` that counts one request and the call's worst-case
//! tokens (as for budgets: prompt plus `max_tokens` or the default cap) only if both stay
//! within the limits; the tokens settle to the real count when the usage recorder records
//! the call. With `gateway.key_counters = "node"` the windows live in the node's memory
//! ([`crate::governance::key_counters`]) instead, with `"redis"` in Redis ([`crate::governance::redis_counters`]).
//! Answers of keys with limits carry OpenAI's `x-ratelimit-*` headers.

use crate::db::Db;
use crate::error::ServiceError;
use crate::governance::key_counters::NodeCounters;
use crate::governance::reservation::settle_in_background;
use crate::levels::LimitLevel;
use aigw_domain::usage::TokenUsage;
use aigw_domain::LimitScope;
use aigw_persistence::key_rates;
use chrono::{DateTime, Utc};

/// Length of a counting window, in seconds.
pub const WINDOW_SECS: i64 = 60;

/// Where a key stands after an admitted call, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateStatus {
    /// `rpm_limit` and the requests left in the window, when the key has one.
    pub requests: Option<(i64, i64)>,
    /// `tpm_limit` and the tokens left in the window, when the key has one.
    pub tokens: Option<(i64, i64)>,
    /// Seconds until the window ends (both counters reset then).
    pub reset_secs: i64,
}

/// One call's admission to make: the key's window, its limits and the call's worst case.
#[derive(Debug, Clone)]
pub(crate) struct RatePlan {
    /// The level whose limits these are.
    pub(crate) scope: LimitScope,
    /// The counter's name (the key id, or a team's [`aigw_domain::CounterSubject`]).
    pub(crate) key_id: String,
    /// Unix seconds of the window's (the UTC minute's) start.
    pub(crate) window_start: i64,
    /// Unix seconds when the plan was made (the limits' clock).
    pub(crate) now: i64,
    reset_secs: i64,
    /// Worst-case tokens counted (0 without a `tpm_limit`).
    pub(crate) tokens: i64,
    /// Requests counted: 1, or [`crate::governance::key_leases`]' lease of several.
    pub(crate) requests: i64,
    /// Requests of the `rpm_limit` the admission must leave free (a lease keeps room for more
    /// calls; 0 otherwise).
    pub(crate) request_room: i64,
    pub(crate) rpm: Option<i64>,
    pub(crate) tpm: Option<i64>,
    /// Tokens of the `tpm_limit` the admission must leave free (0: all of it may be used); an
    /// upper-bound admission keeps room for more such calls (see [`KeyRates::admit_bounded`]).
    pub(crate) room: i64,
}

impl RatePlan {
    /// The admission a call with worst-case token use `worst` needs at `level` at `now` (the
    /// limits' clock; `None`: the level has neither `rpm_limit` nor `tpm_limit`).
    pub(crate) fn new(
        level: &LimitLevel<'_>,
        worst: &TokenUsage,
        now: DateTime<Utc>,
    ) -> Option<Self> {
        let policy = level.policy;
        if policy.rpm_limit.is_none() && policy.tpm_limit.is_none() {
            return None;
        }
        let now = now.timestamp();
        let window_start = now - now.rem_euclid(WINDOW_SECS);
        Some(Self {
            scope: level.scope,
            key_id: level.counter.to_owned(),
            window_start,
            now,
            reset_secs: window_start + WINDOW_SECS - now,
            tokens: match policy.tpm_limit {
                Some(_) => i64::try_from(worst.total_tokens).unwrap_or(i64::MAX),
                None => 0,
            },
            requests: 1,
            request_room: 0,
            rpm: policy.rpm_limit,
            tpm: policy.tpm_limit,
            room: 0,
        })
    }

    /// The refusal, with `requests` counted in the window.
    pub(crate) fn refused(&self, requests: i64) -> ServiceError {
        let limit = match (self.rpm, self.tpm) {
            (Some(rpm), _) if requests >= rpm => rpm,
            (_, Some(tpm)) => tpm,
            (Some(rpm), None) => rpm,
            (None, None) => 0,
        };
        ServiceError::RateLimited {
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            remaining: 0,
            reset: self.window_start + WINDOW_SECS,
            retry_after_secs: u64::try_from(self.reset_secs).unwrap_or(1).max(1),
            scope: Some(self.scope),
        }
    }

    /// Where the key stands with `requests` and `tokens` counted in the window.
    pub(crate) fn status(&self, requests: i64, tokens: i64) -> RateStatus {
        RateStatus {
            requests: self.rpm.map(|l| (l, l - requests)),
            tokens: self.tpm.map(|l| (l, l - tokens)),
            reset_secs: self.reset_secs,
        }
    }
}

/// The tokens reserved by an admitted call; settled by [`TokenReservation::settle`] (a
/// dropped one stays counted at its worst case).
#[derive(Debug)]
pub struct TokenReservation {
    db: Db,
    node: Option<NodeCounters>,
    key_id: String,
    window_start: i64,
    reserved: i64,
}

impl TokenReservation {
    /// Settles to the real `total_tokens`, in the background.
    pub(crate) fn settle(self, total_tokens: u64) {
        let delta = i64::try_from(total_tokens).unwrap_or(i64::MAX) - self.reserved;
        if delta != 0 {
            let TokenReservation { db, node, key_id, window_start, .. } = self;
            if let Some(node) = node {
                node.settle_tokens(&key_id, window_start, delta);
                return;
            }
            settle_in_background(db, "tpm_limit", move |conn| {
                key_rates::settle_tokens(conn, &key_id, window_start, delta)
            });
        }
    }
}

/// The per-key rate limiter of a node (cheap to clone).
#[derive(Debug, Clone)]
pub struct KeyRates {
    db: Db,
    /// The node's memory counters, when `gateway.key_counters = "node"`.
    node: Option<NodeCounters>,
}

impl KeyRates {
    /// A limiter over `db`.
    pub fn new(db: Db) -> Self {
        Self { db, node: None }
    }

    /// Keeps the windows in `node`'s memory instead of the database (`gateway.key_counters =
    /// "node"`: one node only).
    pub fn with_node_counters(mut self, node: NodeCounters) -> Self {
        self.node = Some(node);
        self
    }

    /// Makes the admission `plan` in the node's memory or the database.
    pub(crate) async fn admit_planned(
        &self,
        plan: RatePlan,
    ) -> Result<(RateStatus, Option<TokenReservation>), ServiceError> {
        match self.admit_bounded(plan).await? {
            Some(admitted) => Ok(admitted),
            None => Err(ServiceError::Unavailable("the key's window answered out of turn".into())),
        }
    }

    /// Makes the admission `plan` (with `plan.room`: its tokens an upper bound); `None`, with
    /// nothing counted, when only the room refused it: the caller then counts the call exactly.
    ///
    /// # Errors
    /// As [`KeyRates::admit`].
    pub(crate) async fn admit_bounded(
        &self,
        plan: RatePlan,
    ) -> Result<Option<(RateStatus, Option<TokenReservation>)>, ServiceError> {
        let (window_start, tokens, requests) = (plan.window_start, plan.tokens, plan.requests);
        let rpm_max = plan.rpm.map_or(i64::MAX, |rpm| rpm.saturating_sub(plan.request_room));
        let tpm_max = plan.tpm.map_or(i64::MAX, |tpm| tpm.saturating_sub(plan.room));
        let counts = match &self.node {
            Some(node) => {
                // The node's memory is never leased from: one request per admission.
                let (admitted, requests, tokens) =
                    node.admit(&plan.key_id, window_start, tokens, rpm_max, tpm_max);
                key_rates::WindowCounts { admitted, requests, tokens }
            }
            None => {
                let key = plan.key_id.clone();
                self.db
                    .run(move |conn| {
                        let counted = (requests, tokens);
                        Ok(key_rates::admit(conn, &key, window_start, counted, rpm_max, tpm_max)?)
                    })
                    .await?
            }
        };
        if !counts.admitted {
            if plan.room > 0 && counts.requests.saturating_add(requests) <= rpm_max {
                return Ok(None);
            }
            return Err(plan.refused(counts.requests));
        }
        let status = plan.status(counts.requests, counts.tokens);
        let reservation = plan.tpm.map(|_| TokenReservation {
            db: self.db.clone(),
            node: self.node.clone(),
            key_id: plan.key_id,
            window_start,
            reserved: tokens,
        });
        Ok(Some((status, reservation)))
    }
}

impl KeyRates {
    /// Takes `requests` admitted by a lease but never used off key `key_id`'s window starting
    /// at `window_start`, in the background (database counters only; a failure leaves them
    /// counted until the window ends).
    pub(crate) fn give_back_requests(&self, key_id: &str, window_start: i64, requests: i64) {
        if requests <= 0 || self.node.is_some() {
            return;
        }
        let key = key_id.to_owned();
        settle_in_background(self.db.clone(), "rpm_limit", move |conn| {
            key_rates::give_back_requests(conn, &key, window_start, requests)
        });
    }
}
