//! What wraps every request and connection, outermost first: the connection admission by
//! client address (`connections`, in front of actix-http), the request id and access log
//! (`request_id`, `access_log`), and the rate-limit answer fields (`rate_limit_headers`); on
//! the `/ai/anthropic` routes, Anthropic's error shape (`anthropic_errors`).

pub(crate) mod access_log;
pub(crate) mod anthropic_errors;
pub(crate) mod connections;
pub(crate) mod rate_limit_headers;
