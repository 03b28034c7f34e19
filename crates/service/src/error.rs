//! The error of every use case, mapped one-to-one onto the error envelope by the HTTP layer.
//!
//! Use [`ServiceError::Invalid`] for anything the client can fix in its request (it names the
//! field), [`ServiceError::Unauthorized`] for a missing or bad credential (always the same
//! text for the same cause, never saying whether an account exists),
//! [`ServiceError::Forbidden`] when the credential is good but not enough, and
//! [`ServiceError::Internal`] only for what the client cannot fix; its text is logged and never
//! sent.

use aigw_domain::FieldError;
use aigw_domain::LimitScope;
use aigw_persistence::PersistenceError;

/// An error of a use case.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// 400 `invalid_request` naming the field and the issue.
    #[error("invalid request: {0}")]
    Invalid(#[from] FieldError),
    /// 401 `unauthorized` with a hint; `token_presented` says whether a credential was sent
    /// (RFC 6750 §3 `error="invalid_token"`).
    #[error("unauthorized: {hint}")]
    Unauthorized {
        /// Text for `details.hint`.
        hint: &'static str,
        /// Whether the request carried a credential at all.
        token_presented: bool,
        /// Why a presented credential was refused (the `outcome` of
        /// `aigw_authentications_total`).
        refusal: Refusal,
    },
    /// 403 `forbidden`: `required` names what was needed, `current` what the caller has.
    #[error("forbidden: requires {required}, caller has {current}")]
    Forbidden {
        /// The permission or credential kind needed.
        required: String,
        /// The caller's credential kind or permissions.
        current: String,
    },
    /// 403 `forbidden` (`required: verified_email`): `auth.email_verification = "required"`
    /// and the account has not verified its address yet.
    #[error("forbidden: the e-mail address is not verified")]
    EmailUnverified,
    /// 403 `forbidden` with `required: mfa`: an admin without the second factor that
    /// `auth.require_mfa_for_admins` asks for; `hint` says how to get it.
    #[error("forbidden: requires a second factor, caller has {current}")]
    SecondFactorRequired {
        /// `none` (no factor enrolled) or `pwd` (a session made with the password alone).
        current: &'static str,
        /// What to do: enroll, or log in again with the second factor.
        hint: &'static str,
    },
    /// 404 `not_found`.
    #[error("{resource} {id} not found")]
    NotFound {
        /// Kind of resource (`api_key`, `model`).
        resource: &'static str,
        /// The id that was asked for.
        id: String,
    },
    /// 502 `upstream_error`: the provider could not be reached or failed.
    #[error("upstream {provider} failed: {reason}")]
    Upstream {
        /// Provider name from configuration.
        provider: String,
        /// What went wrong (logged, not sent).
        reason: String,
    },
    /// The upstream refused the request with a 4xx other than 401/403 (its own
    /// misconfiguration): `upstream_rejected` with the upstream's status and error message.
    #[error("upstream {} refused the request with {}", .0.provider, .0.status)]
    UpstreamRejected(Box<UpstreamRejection>),
    /// 504 `upstream_timeout`.
    #[error("upstream {provider} timed out")]
    UpstreamTimeout {
        /// Provider name from configuration.
        provider: String,
    },
    /// 429 `rate_limit_exceeded`: `details` carry `limit`, `remaining` and `reset`;
    /// the answer carries `Retry-After: retry_after_secs`.
    #[error("rate limit of {limit} exceeded; retry after {retry_after_secs} s")]
    RateLimited {
        /// The policy's requests per window.
        limit: u32,
        /// Requests left now (always 0 in a refusal).
        remaining: u32,
        /// Unix time in seconds when a request will pass again.
        reset: i64,
        /// Whole seconds to wait, at least 1 (RFC 9110 §10.2.3 `Retry-After`).
        retry_after_secs: u64,
        /// The level whose `rpm_limit` / `tpm_limit` refused (`details.scope`); `None` for the
        /// service's own rate limits.
        scope: Option<LimitScope>,
    },
    /// 429 `budget_exceeded`: the budget of a level the call counts against (its key, its
    /// member in the team, or its team) cannot take the call's worst case for the period.
    #[error("budget of {limit_micros} µUSD spent")]
    BudgetExceeded {
        /// The level whose budget refused (`details.scope`).
        scope: LimitScope,
        /// The level's budget per period, micro-USD.
        limit_micros: i64,
        /// Committed in the period (settled spend plus running reservations), micro-USD.
        spent_micros: i64,
        /// What the refused call would have reserved (its worst-case cost), micro-USD.
        reserved_micros: i64,
        /// Unix seconds of the period's end; `None` for a `total` budget.
        reset: Option<i64>,
        /// Whole seconds to wait, at least 1.
        retry_after_secs: u64,
    },
    /// 409 `conflict`: a request with this `Idempotency-Key` is still running.
    #[error("a request with this Idempotency-Key is still in progress")]
    IdempotencyInFlight {
        /// The key as sent.
        key: String,
    },
    /// 422 `idempotency_key_reused`: the key was used for another request.
    #[error("the Idempotency-Key was used for another request")]
    IdempotencyKeyReused {
        /// The key as sent.
        key: String,
    },
    /// 503 `service_unavailable` with `Retry-After: retry_after_secs`: a bounded queue of
    /// this node is full (password hashing).
    #[error("{what} is busy; retry after {retry_after_secs} s")]
    Busy {
        /// What is full, for logs.
        what: &'static str,
        /// Seconds to wait.
        retry_after_secs: u64,
    },
    /// 503 `service_unavailable` with `Retry-After`: no deployment of `model` may take a call
    /// now (their breakers are open, or they are at their own quota), so none is tried.
    #[error("no deployment of {model} can take a call: {reason}")]
    NoDeployment {
        /// The model asked for.
        model: String,
        /// Why: `breakers_open` or `at_quota`.
        reason: &'static str,
        /// Seconds until one may (at least 1).
        retry_after_secs: u64,
    },
    /// 503 `service_unavailable`: the database cannot be reached.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// 500 `internal_error`. The text is for logs only.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What an upstream said when it refused a request (see [`ServiceError::UpstreamRejected`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamRejection {
    /// Provider name from configuration.
    pub provider: String,
    /// The upstream's status (4xx).
    pub status: u16,
    /// The upstream's `error.message`, with the provider's own key blanked out.
    pub message: String,
    /// The upstream's `error.type`, when given.
    pub kind: Option<String>,
    /// The upstream's `error.code`, when given.
    pub code: Option<String>,
    /// The upstream's `error.param`, when given.
    pub param: Option<String>,
    /// The upstream's `Retry-After` (429), in seconds.
    pub retry_after_secs: Option<u64>,
}

/// Why a presented credential was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a credential aigw issued, or not usable as presented (malformed, unknown, rotated
    /// away, its account disabled).
    Invalid,
    /// Past its expiry.
    Expired,
    /// Revoked, its session ended, or its account deleted or its team deleted.
    Revoked,
}

impl Refusal {
    /// `invalid`, `expired` or `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Expired => "expired",
            Self::Revoked => "revoked",
        }
    }
}

impl ServiceError {
    /// A 401 for a request that presented a credential which is not valid.
    pub fn invalid_credential(hint: &'static str) -> Self {
        Self::Unauthorized { hint, token_presented: true, refusal: Refusal::Invalid }
    }

    /// A 401 for a presented credential past its expiry.
    pub fn expired_credential(hint: &'static str) -> Self {
        Self::Unauthorized { hint, token_presented: true, refusal: Refusal::Expired }
    }

    /// A 401 for a presented credential that was revoked, whose session ended, or whose
    /// account (or team) is gone.
    pub fn revoked_credential(hint: &'static str) -> Self {
        Self::Unauthorized { hint, token_presented: true, refusal: Refusal::Revoked }
    }

    /// A 401 for failed login or refresh, whose credentials travel in the body: no bearer
    /// token was presented, so `WWW-Authenticate` carries no `invalid_token` (RFC 6750 §3).
    pub fn rejected(hint: &'static str) -> Self {
        Self::Unauthorized { hint, token_presented: false, refusal: Refusal::Invalid }
    }
}

impl From<PersistenceError> for ServiceError {
    fn from(e: PersistenceError) -> Self {
        match e {
            PersistenceError::Unavailable(reason) | PersistenceError::Retryable(reason) => {
                Self::Unavailable(reason)
            }
            other => Self::Internal(other.to_string()),
        }
    }
}
