//! Machine-readable error codes, with the HTTP status each one keeps.
//!
//! The first six codes are the contract's and keep their statuses and `details` fields exactly:
//!
//! | status | code | `details` |
//! |---|---|---|
//! | 400 | `invalid_request` | `field`, `issue` |
//! | 401 | `unauthorized` | `hint` |
//! | 403 | `forbidden` | `required`, `current` |
//! | 404 | `not_found` | `resource`, `id` |
//! | 429 | `rate_limit_exceeded` | `limit`, `remaining`, `reset` |
//! | 500 | `internal_error` | `request_id`, `timestamp` |
//!
//! The others exist only where HTTP itself needs a status the contract does not list; `docs/errors.md` is the one table of all of them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A stable, snake_case error code, as sent in `error.code` of the error envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// 400: invalid parameters or malformed JSON. Details: `field`, `issue`.
    InvalidRequest,
    /// 401: missing or invalid credential. Details: `hint`.
    Unauthorized,
    /// 403: the credential is valid but lacks a permission. Details: `required`, `current`.
    Forbidden,
    /// 404: the resource does not exist (or belongs to someone else). Details: `resource`, `id`.
    NotFound,
    /// 405: the path exists but not with this method. Details: `method`, `allowed`.
    MethodNotAllowed,
    /// 408: the request body did not arrive within `server.body_read_timeout_secs`. Details:
    /// `timeout_secs`. The connection is closed after the answer.
    RequestTimeout,
    /// 409: a request with the same `Idempotency-Key` is still being processed. Details:
    /// `idempotency_key`.
    Conflict,
    /// 413: the request body is larger than the endpoint accepts. Details: `limit_bytes`.
    PayloadTooLarge,
    /// 415: the request body is not `application/json`. Details: `expected`.
    UnsupportedMediaType,
    /// 422: an `Idempotency-Key` was reused with another request (method, path or body).
    /// Details: `idempotency_key`.
    IdempotencyKeyReused,
    /// 429: a rate limit was exceeded. Details: `limit`, `remaining`, `reset` (Unix seconds).
    RateLimitExceeded,
    /// 500: an unexpected server error. Details: `request_id`, `timestamp` (RFC 3339, UTC).
    InternalError,
    /// 502: the upstream AI provider could not be reached or failed. Details: `provider`.
    UpstreamError,
    /// 503: a dependency (the database) is unavailable; retry later. Details: `request_id`,
    /// `timestamp`.
    ServiceUnavailable,
    /// 504: the upstream AI provider did not answer in time. Details: `provider`.
    UpstreamTimeout,
    /// The upstream AI provider refused the request with a 4xx (other than 401/403): sent with
    /// the upstream's own status (400, 404, 409, 413, 422, 429, ...), so it is the one code
    /// whose status varies. Details: `provider`, `upstream_status`, and the upstream's
    /// `type`, `code`, `param` when it gave them.
    UpstreamRejected,
    /// 429: the API key's budget for the current period is spent. Details:
    /// `limit_usd`, `spent_usd`, and `reset` (Unix seconds of the period's end; absent for a
    /// `total` budget). Sent with `Retry-After`.
    BudgetExceeded,
}

impl ErrorCode {
    /// Every code, in table order (used by tests that check each one is documented and used).
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::RequestTimeout,
        ErrorCode::Conflict,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::RateLimitExceeded,
        ErrorCode::InternalError,
        ErrorCode::UpstreamError,
        ErrorCode::ServiceUnavailable,
        ErrorCode::UpstreamTimeout,
        ErrorCode::UpstreamRejected,
        ErrorCode::BudgetExceeded,
    ];

    /// The code as sent on the wire, e.g. `"invalid_request"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Conflict => "conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::RateLimitExceeded => "rate_limit_exceeded",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::UpstreamError => "upstream_error",
            ErrorCode::ServiceUnavailable => "service_unavailable",
            ErrorCode::UpstreamTimeout => "upstream_timeout",
            ErrorCode::UpstreamRejected => "upstream_rejected",
            ErrorCode::BudgetExceeded => "budget_exceeded",
        }
    }

    /// The HTTP status code this error code is always sent with; for
    /// [`ErrorCode::UpstreamRejected`], which carries the upstream's status, 400 as a default.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::Conflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::IdempotencyKeyReused => 422,
            ErrorCode::RateLimitExceeded => 429,
            ErrorCode::InternalError => 500,
            ErrorCode::UpstreamError => 502,
            ErrorCode::ServiceUnavailable => 503,
            ErrorCode::UpstreamTimeout => 504,
            ErrorCode::UpstreamRejected => 400,
            ErrorCode::BudgetExceeded => 429,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_name_matches_as_str_and_statuses_are_distinct() {
        let mut statuses = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            // `upstream_rejected` passes the upstream's status on, `budget_exceeded` shares
            // 429 with `rate_limit_exceeded` (both say "not now"); every other code owns one.
            if code != ErrorCode::UpstreamRejected && code != ErrorCode::BudgetExceeded {
                assert!(statuses.insert(code.http_status()), "{code} shares a status");
            }
        }
    }

    #[test]
    fn contract_codes_keep_their_statuses() {
        assert_eq!(ErrorCode::InvalidRequest.http_status(), 400);
        assert_eq!(ErrorCode::Unauthorized.http_status(), 401);
        assert_eq!(ErrorCode::Forbidden.http_status(), 403);
        assert_eq!(ErrorCode::NotFound.http_status(), 404);
        assert_eq!(ErrorCode::RateLimitExceeded.http_status(), 429);
        assert_eq!(ErrorCode::InternalError.http_status(), 500);
    }
}
