//! The error envelope and how every failure becomes one.
//!
//! Policy: handlers return `Result<_, ApiError>`; [`ApiError`] is built from a
//! [`ServiceError`] (use cases) or by the extractors (bad JSON, wrong `Content-Type`, oversize
//! bodies). A 500 or 503 answer carries `request_id` (also sent as `x-request-id`) and
//! `timestamp`, never internal text; the cause is logged on the request's access-log line
//! (`crate::middleware::access_log`), at `error`, with the same request id. Every 401
//! carries `WWW-Authenticate: Bearer` (RFC 6750 §3).

use crate::request_id::current_request_id;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use aigw_domain::LimitScope;
use aigw_domain::{time, ErrorCode, FieldError};
use aigw_service::ServiceError;
use serde_json::{json, Value};
use std::fmt;

/// An error answer: `{"success": false, "error": {"code", "message", "details"}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: ErrorCode,
    message: String,
    details: Value,
    /// Extra response headers (`WWW-Authenticate`, `Allow`, `Retry-After`).
    headers: Vec<(header::HeaderName, String)>,
    /// The status when it is not the code's own (`upstream_rejected` carries the upstream's).
    status: Option<StatusCode>,
    /// What went wrong, for the access log (a 5xx's cause, an upstream refusal); never sent.
    cause: Option<String>,
    /// Whether the answer closes the connection (`Connection: close`).
    close: bool,
}

impl ApiError {
    /// An error with `code`, `message` and `details`.
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>, details: Value) -> Self {
        Self {
            code,
            message: message.into(),
            details,
            headers: Vec::new(),
            status: None,
            cause: None,
            close: false,
        }
    }

    /// The message and details the envelope carries (the console shows them on a page).
    pub(crate) fn message_and_details(&self) -> (&str, &Value) {
        (&self.message, &self.details)
    }

    /// This error with `cause` for the access log (never sent to the client).
    fn caused_by(mut self, cause: String) -> Self {
        self.cause = Some(cause);
        self
    }

    /// 400 `invalid_request` for `field` with `issue`.
    pub(crate) fn invalid(field: impl Into<String>, issue: impl Into<String>) -> Self {
        Self::from(FieldError::new(field, issue))
    }

    /// 404 `not_found` for an unknown route. An OpenAI-style path (`/v1/chat/completions`,
    /// `/chat/completions`, `/v1/models`) gets a `hint` naming aigw's base URL for OpenAI
    /// clients, `/api/v1/ai`.
    pub(crate) fn no_route(path: &str) -> Self {
        let id: String = path.chars().take(256).collect();
        let openai = ["/chat/completions", "/models", "/completions", "/embeddings"];
        let trimmed = path.trim_end_matches('/');
        let looks_openai =
            !trimmed.starts_with("/api/") && openai.iter().any(|p| trimmed.ends_with(p));
        if looks_openai {
            return Self::new(
                ErrorCode::NotFound,
                "no such endpoint; OpenAI clients use the base URL http://HOST:PORT/api/v1/ai",
                json!({"resource": "route", "id": id,
                       "hint": "set the client's base URL to http://HOST:PORT/api/v1/ai (chat completions are POST /api/v1/ai/chat/completions)"}),
            );
        }
        Self::new(ErrorCode::NotFound, "no such endpoint", json!({"resource": "route", "id": id}))
    }

    /// 405 `method_not_allowed`.
    pub(crate) fn method_not_allowed(method: &str, allowed: &[&str]) -> Self {
        let mut allow: Vec<&str> = allowed.to_vec();
        if allowed.contains(&"GET") {
            allow.push("HEAD");
        }
        let mut err = Self::new(
            ErrorCode::MethodNotAllowed,
            format!("method {method} is not allowed here"),
            json!({"method": method, "allowed": allow}),
        );
        err.headers.push((header::ALLOW, allow.join(", ")));
        err
    }

    /// 413 `payload_too_large`.
    pub(crate) fn too_large(limit_bytes: usize) -> Self {
        Self::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than {limit_bytes} bytes"),
            json!({"limit_bytes": limit_bytes}),
        )
    }

    /// 408 `request_timeout`: the body did not arrive in time. The connection is closed.
    pub(crate) fn request_timeout(timeout_secs: u64) -> Self {
        Self::new(
            ErrorCode::RequestTimeout,
            format!("the request body did not arrive within {timeout_secs} s"),
            json!({"timeout_secs": timeout_secs}),
        )
    }

    /// 429 `rate_limit_exceeded`: the client's address already has `limit` requests whose
    /// body the server waits for (`server.max_pending_requests_per_address`). Carries
    /// `Retry-After: retry_after_secs` and closes the connection (the rest of the body is not
    /// read).
    pub(crate) fn pending_requests_over(limit: u32, retry_after_secs: u64) -> Self {
        let reset = time::now().timestamp().saturating_add_unsigned(retry_after_secs);
        let mut err = Self::new(
            ErrorCode::RateLimitExceeded,
            format!(
                "too many requests from this address are still sending their body; retry in \
                 {retry_after_secs} s"
            ),
            json!({"limit": limit, "remaining": 0, "reset": reset}),
        );
        err.headers.push((header::RETRY_AFTER, retry_after_secs.max(1).to_string()));
        err.close = true;
        err
    }

    /// 415 `unsupported_media_type`.
    pub(crate) fn unsupported_media_type() -> Self {
        Self::new(
            ErrorCode::UnsupportedMediaType,
            "the request body must be JSON",
            json!({"expected": "application/json"}),
        )
    }

    /// 500 `internal_error`; `cause` is logged (on the request's access-log line, at
    /// `error`), never sent.
    pub(crate) fn internal(cause: &str) -> Self {
        let request_id = current_request_id();
        Self::new(
            ErrorCode::InternalError,
            "an unexpected error occurred; quote the request_id when reporting it",
            json!({"request_id": request_id, "timestamp": time::format_timestamp(time::now())}),
        )
        .caused_by(format!("internal error: {cause}"))
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::new(
            ErrorCode::InvalidRequest,
            format!("invalid request: {} {}", e.field, e.issue),
            json!({"field": e.field, "issue": e.issue}),
        )
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(field) => field.into(),
            ServiceError::Unauthorized { hint, token_presented, .. } => {
                unauthorized(hint, token_presented)
            }
            ServiceError::Forbidden { required, current } => Self::new(
                ErrorCode::Forbidden,
                format!("this operation requires {required}"),
                json!({"required": required, "current": current}),
            ),
            ServiceError::EmailUnverified => email_unverified(),
            ServiceError::SecondFactorRequired { current, hint } => Self::new(
                ErrorCode::Forbidden,
                "this operation requires a second factor (mfa)",
                json!({"required": "mfa", "current": current, "hint": hint}),
            ),
            ServiceError::NotFound { resource, id } => Self::new(
                ErrorCode::NotFound,
                format!("{resource} not found"),
                json!({"resource": resource, "id": id}),
            ),
            ServiceError::Upstream { provider, reason } => upstream_failed(&provider, &reason),
            ServiceError::UpstreamRejected(rejection) => upstream_rejected(*rejection),
            ServiceError::UpstreamTimeout { provider } => upstream_timeout(&provider),
            ServiceError::Unavailable(reason) => {
                unavailable().caused_by(format!("database unavailable: {reason}"))
            }
            ServiceError::RateLimited { limit, remaining, reset, retry_after_secs, scope } => {
                rate_limited(limit, remaining, reset, retry_after_secs, scope)
            }
            ServiceError::BudgetExceeded {
                scope,
                limit_micros,
                spent_micros,
                reserved_micros,
                reset,
                retry_after_secs,
            } => budget_exceeded(
                scope,
                limit_micros,
                spent_micros,
                reserved_micros,
                reset,
                retry_after_secs,
            ),
            ServiceError::IdempotencyInFlight { key } => {
                let mut err = Self::new(
                    ErrorCode::Conflict,
                    "a request with this Idempotency-Key is still in progress; retry later",
                    json!({"idempotency_key": key}),
                );
                err.headers.push((header::RETRY_AFTER, "1".to_owned()));
                err
            }
            ServiceError::IdempotencyKeyReused { key } => Self::new(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was already used for another request",
                json!({"idempotency_key": key}),
            ),
            ServiceError::NoDeployment { model, reason, retry_after_secs } => {
                let mut err = Self::new(
                    ErrorCode::ServiceUnavailable,
                    format!(
                        "no deployment of model {model} can take a call now; retry after \
                         {retry_after_secs} s"
                    ),
                    json!({"model": model, "reason": reason, "request_id": current_request_id()}),
                );
                err.headers.push((header::RETRY_AFTER, retry_after_secs.max(1).to_string()));
                err
            }
            ServiceError::Busy { what, retry_after_secs } => {
                let mut err = unavailable();
                err.headers.push((header::RETRY_AFTER, retry_after_secs.max(1).to_string()));
                err.caused_by(format!("{what} is full"))
            }
            ServiceError::Internal(cause) => Self::internal(&cause),
        }
    }
}

/// 403 for an account whose address is not verified yet, with how to verify it.
fn email_unverified() -> ApiError {
    ApiError::new(
        ErrorCode::Forbidden,
        "this operation requires a verified e-mail address",
        json!({
            "required": "verified_email",
            "current": "unverified_email",
            "hint": "open the link sent to your address, or ask for a new one with POST /api/v1/auth/email/verification",
        }),
    )
}

/// 502 `upstream_error`: `provider` failed (`reason` goes to the log only).
fn upstream_failed(provider: &str, reason: &str) -> ApiError {
    ApiError::new(
        ErrorCode::UpstreamError,
        format!("the upstream provider {provider} failed"),
        json!({"provider": provider}),
    )
    .caused_by(format!("upstream {provider} failed: {reason}"))
}

/// 504 `upstream_timeout`: `provider` did not answer in time.
fn upstream_timeout(provider: &str) -> ApiError {
    ApiError::new(
        ErrorCode::UpstreamTimeout,
        format!("the upstream provider {provider} did not answer in time"),
        json!({"provider": provider}),
    )
    .caused_by(format!("upstream {provider} timed out"))
}

/// 503 `service_unavailable` naming the request (its id) and the time, UTC.
fn unavailable() -> ApiError {
    ApiError::new(
        ErrorCode::ServiceUnavailable,
        "the service is temporarily unavailable; retry later",
        json!({"request_id": current_request_id(), "timestamp": time::format_timestamp(time::now())}),
    )
}

/// 401 `unauthorized` with `details.hint` and the `WWW-Authenticate` challenge (RFC 6750 §3:
/// `error="invalid_token"` when a credential was presented).
fn unauthorized(hint: &str, token_presented: bool) -> ApiError {
    let mut err = ApiError::new(
        ErrorCode::Unauthorized,
        "missing or invalid credential",
        json!({"hint": hint}),
    );
    let challenge = if token_presented {
        format!("Bearer realm=\"aigw\", error=\"invalid_token\", error_description=\"{hint}\"")
    } else {
        "Bearer realm=\"aigw\"".to_owned()
    };
    err.headers.push((header::WWW_AUTHENTICATE, challenge));
    err
}

/// The upstream's 4xx passed on: its status, message, `type`, `code` and `param`, and for a
/// 429 its `Retry-After` in seconds.
fn upstream_rejected(rejection: aigw_service::error::UpstreamRejection) -> ApiError {
    let aigw_service::error::UpstreamRejection {
        provider,
        status,
        message,
        kind,
        code,
        param,
        retry_after_secs,
    } = rejection;
    let cause = format!("upstream {provider} refused the request with {status}");
    let mut err = ApiError::new(
        ErrorCode::UpstreamRejected,
        message,
        json!({"provider": provider, "upstream_status": status,
               "type": kind, "code": code, "param": param}),
    );
    err.status = StatusCode::from_u16(status).ok().filter(|s| s.is_client_error());
    if let Some(secs) = retry_after_secs {
        err.headers.push((header::RETRY_AFTER, secs.max(1).to_string()));
    }
    err.caused_by(cause)
}

/// 429 `rate_limit_exceeded` with `limit`, `remaining`, `reset` (Unix seconds), the level
/// (`scope`) of a key's rpm/tpm limit, and `Retry-After` in seconds.
fn rate_limited(
    limit: u32,
    remaining: u32,
    reset: i64,
    retry_after_secs: u64,
    scope: Option<LimitScope>,
) -> ApiError {
    let mut details = json!({"limit": limit, "remaining": remaining, "reset": reset});
    if let Some(scope) = scope {
        details["scope"] = json!(scope.as_str());
    }
    let mut err = ApiError::new(
        ErrorCode::RateLimitExceeded,
        format!("rate limit exceeded; retry in {retry_after_secs} s"),
        details,
    );
    if let Some(scope) = scope {
        // The access log names the limit that refused.
        err = err.caused_by(format!("refused by the {} rpm/tpm limit", scope.as_str()));
    }
    err.headers.push((header::RETRY_AFTER, retry_after_secs.max(1).to_string()));
    err
}

/// 429 `budget_exceeded` of level `scope` with the limit, spend and reservation in USD (from
/// micro-USD), the period's `reset` (Unix seconds) and `Retry-After` in seconds; the message
/// says how to fit when the call's worst case, not what was spent, is what refused.
fn budget_exceeded(
    scope: LimitScope,
    limit_micros: i64,
    spent_micros: i64,
    reserved_micros: i64,
    reset: Option<i64>,
    retry_after_secs: u64,
) -> ApiError {
    let usd = |m: i64| aigw_domain::usage::micros_to_usd(u64::try_from(m).unwrap_or(0));
    let mut details = json!({
        "scope": scope.as_str(),
        "limit_usd": usd(limit_micros),
        "spent_usd": usd(spent_micros),
        "reserved_usd": usd(reserved_micros),
    });
    if let Some(reset) = reset {
        details["reset"] = json!(reset);
    }
    let whose = match scope {
        LimitScope::Key => "the API key's budget",
        LimitScope::Member => "your budget in the key's team",
        LimitScope::Team => "the team's budget",
        LimitScope::User => "your budget across all your keys",
    };
    // Refused by the worst case rather than by what was spent: say how to fit.
    let message = if spent_micros.saturating_add(reserved_micros) > limit_micros
        && spent_micros < limit_micros
    {
        format!(
            "{whose} for this period cannot cover this call's worst case \
                 (reserved_usd); lower max_tokens (or max_completion_tokens) to fit \
                 what is left"
        )
    } else {
        format!("{whose} for this period is spent")
    };
    let mut err = ApiError::new(ErrorCode::BudgetExceeded, message, details)
        .caused_by(format!("refused by the {} budget", scope.as_str()));
    err.headers.push((header::RETRY_AFTER, retry_after_secs.max(1).to_string()));
    err
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status.unwrap_or_else(|| {
            StatusCode::from_u16(self.code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        })
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if self.code == ErrorCode::ServiceUnavailable
            && !self.headers.iter().any(|(name, _)| name == header::RETRY_AFTER)
        {
            response.insert_header((header::RETRY_AFTER, "5"));
        }
        if self.code == ErrorCode::RequestTimeout || self.close {
            // The rest of the body may still come; the connection cannot be reused.
            response.force_close();
        }
        for (name, value) in &self.headers {
            if let Ok(value) = HeaderValue::from_str(value) {
                response.insert_header((name.clone(), value));
            }
        }
        let mut response = response.json(crate::dto::ErrorEnvelope {
            success: false,
            error: crate::dto::ErrorBody {
                code: self.code.as_str().to_owned(),
                message: self.message.clone(),
                details: self.details.clone(),
            },
        });
        if let Some(cause) = &self.cause {
            response.extensions_mut().insert(ErrorCause(cause.clone()));
        }
        response
    }
}

/// The cause of a 5xx answer, for the access log (response extension set by
/// [`ApiError`]); never sent to the client.
#[derive(Debug, Clone)]
pub(crate) struct ErrorCause(pub(crate) String);
