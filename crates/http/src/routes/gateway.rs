//! What every gateway route shares: the call handed to the gateway's pipeline for its
//! endpoint, and its answer built for the caller (the provider's JSON or server-sent events,
//! with OpenAI's `x-ratelimit-*` headers for keys with their own limits, and the deployment
//! that served and the attempts made).

use crate::error::ApiError;
use crate::extract::read_json_payload;
use crate::state::AppState;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;
use aigw_service::gateway::Served;
use aigw_service::governance::key_rates::RateStatus;
use aigw_service::GatewayReply;
use futures_util::StreamExt;

/// OpenAI's `x-ratelimit-*` header names, built at compile time: requests' limit,
/// remaining and reset, then the same for tokens.
static RATE_LIMIT_HEADERS: [[HeaderName; 3]; 2] = [
    [
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ],
    [
        HeaderName::from_static("x-ratelimit-limit-tokens"),
        HeaderName::from_static("x-ratelimit-remaining-tokens"),
        HeaderName::from_static("x-ratelimit-reset-tokens"),
    ],
];

/// The `x-ratelimit-*` headers OpenAI sends, for the limits the key has: limit and remaining
/// (never below 0) as integers, the reset as a duration as OpenAI writes it (`"37s"`), for
/// requests (`rpm_limit`) and tokens (`tpm_limit`). The values are written with `itoa` into
/// one buffer that they share instead of a `format!` and a `String` per header (most of what
/// the six headers cost, ~5 k instructions per call, is actix's header map, not this).
fn rate_limit_headers(status: &RateStatus) -> Vec<(HeaderName, HeaderValue)> {
    let mut text = bytes::BytesMut::with_capacity(128);
    let mut put = |n: i64, unit: &[u8]| {
        let start = text.len();
        text.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        text.extend_from_slice(unit);
        start..text.len()
    };
    let reset = put(status.reset_secs.max(0), b"s");
    let mut values = Vec::with_capacity(6);
    for (counts, names) in [status.requests, status.tokens].into_iter().zip(&RATE_LIMIT_HEADERS) {
        if let Some((limit, remaining)) = counts {
            values.push((&names[0], put(limit, b"")));
            values.push((&names[1], put(remaining.max(0), b"")));
            values.push((&names[2], reset.clone()));
        }
    }
    let text = text.freeze();
    values
        .into_iter()
        .filter_map(|(name, range)| {
            Some((name.clone(), HeaderValue::from_maybe_shared(text.slice(range)).ok()?))
        })
        .collect()
}

/// Hands a request to `endpoint` to the gateway for `caller` (an API key with `ai_gateway`
/// whose address is verified where that is required) and answers what it returns: the
/// provider's answer unchanged (JSON, or server-sent events passed through as they come),
/// with the key's `x-ratelimit-*` headers. `dialect_headers` are the caller's headers of the
/// endpoint's dialect to pass upstream (Anthropic's `anthropic-version`, `anthropic-beta`).
///
/// # Errors
/// As `aigw_service::Gateway::call`, and the body's reading (`read_json_payload`).
pub(crate) async fn forward(
    state: &AppState,
    req: &HttpRequest,
    caller: &aigw_service::Authorized<op::ChatCompletion>,
    payload: web::Payload,
    endpoint: Endpoint,
    dialect_headers: Vec<(&'static str, String)>,
) -> Result<HttpResponse, ApiError> {
    state.account_email.ensure_email_verified(caller).await?;
    // Read only now that the caller is known (see `read_json_payload`).
    let body = read_json_payload(req, payload).await?;
    let request_id = crate::request_id::current_request_id();
    let arrived = req
        .extensions()
        .get::<crate::middleware::access_log::Arrival>()
        .map_or_else(std::time::Instant::now, |a| a.0);
    let mut forward = crate::telemetry::upstream_headers(req, &request_id);
    forward.extend(dialect_headers);
    let answered =
        state.gateway.call(endpoint, caller, &request_id, body, arrived, &forward).await?;
    let mut response = answer(answered.reply, answered.limits);
    served_headers(&mut response, &answered.served);
    Ok(response)
}

/// The `x-aigw-deployment` (`{provider}/{model}` that answered) and `x-aigw-attempts`
/// (upstream calls made, retries and fallbacks included) headers of `served`.
fn served_headers(response: &mut HttpResponse, served: &Served) {
    let headers = response.headers_mut();
    if let Ok(deployment) = HeaderValue::from_str(&served.deployment) {
        headers.insert(DEPLOYMENT_HEADER.clone(), deployment);
    }
    headers.insert(ATTEMPTS_HEADER.clone(), HeaderValue::from(served.attempts));
}

/// The deployment that answered a gateway call.
static DEPLOYMENT_HEADER: HeaderName = HeaderName::from_static("x-aigw-deployment");
/// The upstream calls a gateway call made.
static ATTEMPTS_HEADER: HeaderName = HeaderName::from_static("x-aigw-attempts");

/// The caller's answer of `reply`: the provider's JSON or its server-sent events as they
/// come, with the key's `x-ratelimit-*` headers when it has its own `limits`.
pub(crate) fn answer(reply: GatewayReply, limits: Option<RateStatus>) -> HttpResponse {
    // A key with its own rpm_limit / tpm_limit: OpenAI's x-ratelimit-* headers.
    let with_limits = |status: http::StatusCode| {
        let mut builder = HttpResponse::build(actix_status(status));
        for header in limits.iter().flat_map(rate_limit_headers) {
            builder.insert_header(header);
        }
        builder
    };
    match reply {
        GatewayReply::Json { status, body } => {
            with_limits(status).content_type("application/json").body(body)
        }
        GatewayReply::Stream { status, content_type, body } => {
            let body = body.map(|chunk| chunk.map_err(|e| std::io::Error::other(e.to_string())));
            with_limits(status)
                .content_type(content_type)
                .insert_header(("cache-control", "no-cache"))
                .insert_header(("x-accel-buffering", "no"))
                .streaming(body)
        }
    }
}

/// `status` (the `http` crate's type, which service and the upstream clients use) as
/// actix-web's (the same type of an older `http` release): every code from 100 to 999 is
/// valid in both, so the fallback is never taken.
pub(crate) fn actix_status(status: http::StatusCode) -> StatusCode {
    StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(status: &RateStatus) -> Vec<(String, String)> {
        rate_limit_headers(status)
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("?").to_owned()))
            .collect()
    }

    #[test]
    fn rate_limit_headers_are_openais_for_the_limits_the_key_has() {
        let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        let status = RateStatus { requests: Some((60, 59)), tokens: None, reset_secs: 37 };
        assert_eq!(
            headers(&status),
            [
                pair("x-ratelimit-limit-requests", "60"),
                pair("x-ratelimit-remaining-requests", "59"),
                pair("x-ratelimit-reset-requests", "37s"),
            ]
        );
        let status = RateStatus { requests: None, tokens: Some((1000, -5)), reset_secs: -1 };
        assert_eq!(
            headers(&status),
            [
                pair("x-ratelimit-limit-tokens", "1000"),
                pair("x-ratelimit-remaining-tokens", "0"),
                pair("x-ratelimit-reset-tokens", "0s"),
            ]
        );
        let status =
            RateStatus { requests: Some((1, 0)), tokens: Some((i64::MAX, 7)), reset_secs: 60 };
        assert_eq!(headers(&status).len(), 6);
        assert_eq!(headers(&status)[3], pair("x-ratelimit-limit-tokens", &i64::MAX.to_string()));
        assert_eq!(headers(&status)[5], pair("x-ratelimit-reset-tokens", "60s"));
        let none = RateStatus { requests: None, tokens: None, reset_secs: 60 };
        assert!(headers(&none).is_empty());
    }
}
