//! What the credential-taking handlers share, the API's and the console's: the client a
//! request comes from, failed credentials counted against the client address's
//! `auth_failure` quota, and login attempts counted by outcome.

use crate::error::ApiError;
use crate::observe::metric;
use crate::state::AppState;
use actix_web::{HttpRequest, ResponseError};
use aigw_service::{ClientInfo, LoginOutcome, ServiceError};

/// Counts a login attempt in `aigw_logins_total` by its outcome (`ok`, `mfa_required`,
/// `invalid`, `rate_limited`, `bad_request`, `error`), which it returns.
pub(crate) fn count_login(
    state: &AppState,
    result: &Result<LoginOutcome, ApiError>,
) -> &'static str {
    let outcome = match result {
        Ok(LoginOutcome::MfaRequired(_)) => "mfa_required",
        Ok(_) => "ok",
        Err(e) => match e.status_code().as_u16() {
            401 => "invalid",
            429 => "rate_limited",
            400..=499 => "bad_request",
            _ => "error",
        },
    };
    state.telemetry.metrics.count(metric::LOGINS_TOTAL, &[("outcome", outcome)]);
    outcome
}

/// Where `req` comes from: the client address (trusted-proxy rules) and `User-Agent`.
pub(crate) fn client_info(state: &AppState, req: &HttpRequest) -> ClientInfo {
    let user_agent = req.headers().get(actix_web::http::header::USER_AGENT);
    ClientInfo::new(
        Some(state.limits.client_ip(req).to_string()),
        user_agent.and_then(|v| v.to_str().ok()),
    )
}

/// Awaits a credential check and counts a refusal (401) against the client IP's
/// `auth_failure` quota.
pub(crate) async fn failures_counted<T>(
    state: &AppState,
    req: &HttpRequest,
    check: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, ApiError> {
    match check.await {
        Err(e @ ServiceError::Unauthorized { .. }) => {
            state.limits.count_failure(req).await;
            Err(e.into())
        }
        other => other.map_err(ApiError::from),
    }
}
