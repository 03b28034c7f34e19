//! The request id: a UUIDv7 per request, sent as `x-request-id`, named in error bodies and on
//! every log line of the request (a task-local while the request is handled). Given by
//! `crate::middleware::access_log`, which also keeps the `x-request-id` of a trusted proxy.

use actix_web::http::header::{HeaderMap, HeaderName};

tokio::task_local! {
    /// The id of the request being handled (set by the access-log middleware).
    pub(crate) static REQUEST_ID: String;
}

/// The answer header that carries the request id (and the header a trusted proxy may send).
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// A new request id (a UUIDv7: ordered by time).
pub(crate) fn new_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The current request's id, or `"unknown"` outside a request.
pub(crate) fn current_request_id() -> String {
    REQUEST_ID.try_with(Clone::clone).unwrap_or_else(|_| "unknown".to_owned())
}

/// The `x-request-id` of `headers` when they come from a trusted proxy (`trusted`): 1 to 128
/// characters of `A-Z a-z 0-9 - _ . : / + =` (anything else is ignored rather than logged).
pub(crate) fn proxy_request_id(headers: &HeaderMap, trusted: bool) -> Option<String> {
    if !trusted {
        return None;
    }
    let value = headers.get(X_REQUEST_ID)?.to_str().ok()?;
    let ok = !value.is_empty()
        && value.len() <= 128
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(&b));
    ok.then(|| value.to_owned())
}
