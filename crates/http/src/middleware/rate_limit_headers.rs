//! The `RateLimit-Policy` and `RateLimit` answer fields of draft-ietf-httpapi-ratelimit-headers,
//! from the decision `crate::rate_limit` kept in the request's extensions, or from the
//! resource's [`LimitedBy`] for a request refused before it was counted.

use crate::rate_limit::LimitedBy;
use crate::state::AppState;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage};
use aigw_service::{Decision, Policy};

/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers): the quota of the policy.
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers): what is left of it.
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `RateLimit-Policy` value: `"name";q=limit;w=window_secs`.
fn policy_value(policy: Policy, limit: u32, window_secs: u64) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("\"{}\";q={limit};w={window_secs}", policy.name())).ok()
}

/// `RateLimit` value: `"name";r=remaining;t=reset_secs`.
fn state_value(decision: &Decision) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "\"{}\";r={};t={}",
        decision.policy.name(),
        decision.remaining,
        decision.reset_secs()
    ))
    .ok()
}

/// Middleware: adds `RateLimit-Policy` and `RateLimit` to the answers of limited endpoints
/// (see the module documentation).
///
/// # Errors
/// Those of the wrapped service, unchanged.
pub(crate) async fn headers(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let mut response = next.call(req).await?;
    let decision = response.request().extensions().get::<Decision>().copied();
    let (policy, state) = match decision {
        Some(d) => (policy_value(d.policy, d.limit, d.window_secs), state_value(&d)),
        None => {
            let request = response.request();
            let quota = request.app_data::<LimitedBy>().and_then(|LimitedBy(policy)| {
                let state = request.app_data::<web::Data<AppState>>()?;
                let q = state.limits.limiter().policy(*policy)?;
                Some((*policy, q))
            });
            (quota.and_then(|(p, q)| policy_value(p, q.limit, q.window_secs)), None)
        }
    };
    let headers = response.headers_mut();
    if let Some(value) = policy {
        headers.insert(RATELIMIT_POLICY, value);
    }
    if let Some(value) = state {
        headers.insert(RATELIMIT, value);
    }
    Ok(response)
}
