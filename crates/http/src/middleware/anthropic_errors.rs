//! Anthropic's error shape on the `/ai/anthropic` routes: every error answer there (the
//! gateway's, the extractors' 401, 413, 415 and 429, an upstream's refusal) keeps aigw's
//! envelope (`success`, `error.code`, `error.message`, `error.details`) and also carries what
//! Anthropic's SDKs read: a top-level `"type": "error"` and `error.type`, Anthropic's name
//! of the status ([`error_type`]).

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::CONTENT_TYPE;
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use serde_json::Value;

/// Anthropic's `error.type` for an answer of `status`: `invalid_request_error` (400 and any
/// other 4xx), `authentication_error` (401), `permission_error` (403), `not_found_error`
/// (404), `request_too_large` (413), `rate_limit_error` (429), `overloaded_error` (503, 529),
/// `api_error` (any other 5xx).
pub(crate) fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `body`, an error envelope, with Anthropic's `type` and `error.type` for `status`; `None`
/// when it is not an envelope.
fn reshaped(status: StatusCode, body: &[u8]) -> Option<Vec<u8>> {
    let mut envelope: Value = serde_json::from_slice(body).ok()?;
    let object = envelope.as_object_mut()?;
    let error = object.get_mut("error")?.as_object_mut()?;
    error.insert("type".to_owned(), Value::from(error_type(status)));
    object.insert("type".to_owned(), Value::from("error"));
    serde_json::to_vec(&envelope).ok()
}

/// Middleware: gives every JSON error answer Anthropic's error shape (see the module
/// documentation); other answers pass untouched.
///
/// # Errors
/// Those of the wrapped service, unchanged; 500 when an error body cannot be read.
pub(crate) async fn shape(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let response = next.call(req).await?;
    let status = response.status();
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || !json {
        return Ok(response.map_into_boxed_body());
    }
    let (request, response) = response.into_parts();
    let (head, body) = response.into_parts();
    let bytes = actix_web::body::to_bytes(body)
        .await
        .map_err(|_| actix_web::error::ErrorInternalServerError("error body unreadable"))?;
    let body = reshaped(status, &bytes).unwrap_or_else(|| bytes.to_vec());
    Ok(ServiceResponse::new(request, head.set_body(BoxBody::new(body))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelopes_gain_anthropics_type() {
        let envelope = json!({"success": false,
            "error": {"code": "unauthorized", "message": "m", "details": {"hint": "h"}}});
        let bytes = serde_json::to_vec(&envelope).unwrap_or_default();
        let shaped = reshaped(StatusCode::UNAUTHORIZED, &bytes)
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        assert_eq!(
            shaped,
            Some(
                json!({"type": "error", "success": false, "error": {"type": "authentication_error",
                "code": "unauthorized", "message": "m", "details": {"hint": "h"}}})
            )
        );
        assert_eq!(reshaped(StatusCode::BAD_REQUEST, b"[1]"), None);
        let names: Vec<&str> = [400, 401, 403, 404, 405, 413, 429, 500, 502, 503, 504, 529]
            .into_iter()
            .filter_map(|s| StatusCode::from_u16(s).ok())
            .map(error_type)
            .collect();
        assert_eq!(
            names,
            [
                "invalid_request_error",
                "authentication_error",
                "permission_error",
                "not_found_error",
                "invalid_request_error",
                "request_too_large",
                "rate_limit_error",
                "api_error",
                "api_error",
                "overloaded_error",
                "api_error",
                "overloaded_error"
            ]
        );
    }
}
