//! The HTTP side of `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header): reads and
//! checks the header, replays a recorded answer, or runs the use case with a
//! [`Recording`] so that it records its answer in its own transaction (see
//! `aigw_service::idempotency`). Every state-creating `POST` handler goes through [`run`].
//!
//! The header is a structured-field string (`Idempotency-Key: "8e03978e-…"`); the bare form
//! (`Idempotency-Key: 8e03978e-…`) is accepted too. 1 to 255 visible ASCII characters, else
//! 400 naming the header. A replayed answer carries `Idempotent-Replayed: true`.

use crate::error::ApiError;
use crate::state::AppState;
use actix_web::http::header::HeaderName;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use aigw_service::idempotency::{Begin, IdempotentRequest, Recording, MAX_KEY_CHARS};
use aigw_service::{Principal, ServiceError};
use std::future::Future;

/// `Idempotency-Key`.
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// `Idempotent-Replayed: true` on an answer given again.
pub(crate) const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The request's `Idempotency-Key`, if it sent one.
///
/// # Errors
/// 400 `invalid_request` (`field: Idempotency-Key`) when it is empty, too long, sent twice or
/// not visible ASCII.
pub(crate) fn key_of(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let mut values = req.headers().get_all(IDEMPOTENCY_KEY);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |issue: &str| ApiError::invalid("Idempotency-Key", issue);
    if values.next().is_some() {
        return Err(bad("must be sent once"));
    }
    let raw = value.to_str().map_err(|_| bad("must be visible ASCII"))?.trim();
    let key = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(raw);
    if key.is_empty() || key.len() > MAX_KEY_CHARS {
        return Err(bad("must be 1 to 255 characters"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ') || key.contains('"') {
        return Err(bad("must be visible ASCII"));
    }
    Ok(Some(key.to_owned()))
}

fn answer(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    HttpResponse::build(status).content_type("application/json").body(body)
}

/// Runs a state-creating use case idempotently for `caller`: without an `Idempotency-Key` it
/// just runs `work(None)`; with one, it replays a recorded answer, refuses a key reused for
/// another request (422) or one still in flight (409), or runs `work(Some(recording))` and
/// gives the claim up again when the use case fails. `body` is the raw request body;
/// `render` turns the result into the success body (it is also what is recorded).
///
/// # Errors
/// The use case's error, 400 for a bad header, 409, 422, or 503 from the store.
pub(crate) async fn run<T, F, Fut>(
    state: &AppState,
    req: &HttpRequest,
    caller: &Principal,
    body: &[u8],
    status: StatusCode,
    render: fn(&T) -> Vec<u8>,
    work: F,
) -> Result<HttpResponse, ApiError>
where
    F: FnOnce(Option<Recording<T>>) -> Fut,
    Fut: Future<Output = Result<T, ServiceError>>,
{
    let Some(key) = key_of(req)? else {
        let value = work(None).await?;
        return Ok(answer(status, render(&value)));
    };
    let request =
        IdempotentRequest::new(caller.user_id(), &key, req.method().as_str(), req.path(), body);
    match state.idempotency.begin(request).await? {
        Begin::Replay { status, body } => {
            let mut response = answer(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body);
            response.headers_mut().insert(
                IDEMPOTENT_REPLAYED,
                actix_web::http::header::HeaderValue::from_static("true"),
            );
            Ok(response)
        }
        Begin::Proceed(claim) => {
            let recording = Recording { claim: claim.clone(), status: status.as_u16(), render };
            match work(Some(recording)).await {
                Ok(value) => Ok(answer(status, render(&value))),
                Err(e) => {
                    match e {
                        ServiceError::IdempotencyInFlight { .. } => {}
                        // The database is in trouble: release in the background, since waiting
                        // could cost a whole deadline more and the answer must not.
                        ServiceError::Unavailable(_) | ServiceError::Busy { .. } => {
                            let store = state.idempotency.clone();
                            tokio::spawn(async move { store.release(claim).await });
                        }
                        // A refusal (4xx): released before answering, so that a corrected
                        // retry with the same key is never told 409.
                        _ => state.idempotency.release(claim).await,
                    }
                    Err(e.into())
                }
            }
        }
    }
}
