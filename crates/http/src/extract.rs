//! Extractors: JSON bodies with field-naming errors, path ids, query parameters, and the
//! authenticated caller.
//!
//! JSON bodies must be `application/json` (or `…+json`), else 415; larger than the scope's
//! `BodyLimit`, else 413; and parse into the target type, else 400 `invalid_request` naming
//! the field ([`parse_json`], in `crate::json_body`).
//!
//! No string of a JSON body that the endpoint reads, of a query parameter or of a path
//! segment may contain U+0000 (NUL): PostgreSQL `text` cannot hold it, so such a request is
//! answered 400 naming the field here, before any use case sees it.

use crate::error::ApiError;
use crate::middleware::connections::{PendingRequests, PendingSlot};
use crate::observe::metric;
use crate::rate_limit::LimitedBy;
use crate::state::AppState;
use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use aigw_domain::access::RouteOperation;
use aigw_service::admin::Admin;
use aigw_service::{Principal, ServiceError};
use bytes::{Bytes, BytesMut};
use futures_util::future::LocalBoxFuture;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use std::task::Poll;

pub use crate::json_body::parse_json;

/// App data of a scope whose callers may present their API key in `x-api-key` (Anthropic's
/// SDKs send it there) when they send no `Authorization`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcceptsXApiKey;

/// Anthropic's API key header.
const X_API_KEY: header::HeaderName = header::HeaderName::from_static("x-api-key");

/// Largest accepted request body of a scope, in bytes (set as app data).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize);

/// How long a whole request body may take to arrive (app data; `server.body_read_timeout_secs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyReadTimeout(pub(crate) std::time::Duration);

/// A JSON request body parsed into `T`.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

/// A JSON request body that may be absent (no body at all gives `T::default()`).
#[derive(Debug)]
pub(crate) struct OptionalJsonBody<T>(pub(crate) T);

/// The raw bytes of a JSON request body (content type and size checked, not parsed).
#[derive(Debug)]
pub(crate) struct RawJson(pub(crate) Bytes);

fn is_json(req: &HttpRequest) -> bool {
    let Some(value) = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Reads the body, enforcing the content type (unless `allow_empty` and there is no body)
/// and the size limit.
fn read_body(
    req: &HttpRequest,
    payload: &mut Payload,
    allow_empty: bool,
) -> LocalBoxFuture<'static, Result<Option<Bytes>, ApiError>> {
    read_stream(req, payload.take(), allow_empty)
}

/// Reads a JSON body from `payload` after the handler has checked the caller: the chat
/// endpoint takes up to `server.chat_body_limit_bytes`, so it reads nothing for a caller that
/// fails authentication (no unauthenticated client can make it buffer megabytes).
///
/// # Errors
/// 413, 415, 408 or 400 as for [`RawJson`].
pub(crate) async fn read_json_payload(
    req: &HttpRequest,
    payload: actix_web::web::Payload,
) -> Result<Bytes, ApiError> {
    Ok(read_stream(req, payload, false).await?.unwrap_or_default())
}

fn read_stream<S>(
    req: &HttpRequest,
    payload: S,
    allow_empty: bool,
) -> LocalBoxFuture<'static, Result<Option<Bytes>, ApiError>>
where
    S: futures_util::Stream<Item = Result<Bytes, actix_web::error::PayloadError>> + Unpin + 'static,
{
    let limit = req.app_data::<BodyLimit>().map_or(64 * 1024, |l| l.0);
    let timeout =
        req.app_data::<BodyReadTimeout>().map_or(std::time::Duration::from_secs(10), |t| t.0);
    let json = is_json(req);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut payload = payload;
    // Looked up only when the body has to be waited for.
    let conn = req.clone();
    Box::pin(async move {
        if declared.is_some_and(|n| n > limit) {
            return Err(ApiError::too_large(limit));
        }
        let mut body = BytesMut::new();
        let read = async {
            // A pending slot of the client's address (`crate::middleware::connections`), taken
            // when the body has to be waited for and held until the read ends, however it ends.
            let mut waiting: Option<PendingSlot> = None;
            let mut looked_up = false;
            loop {
                // The first `Pending` of a chunk may only mean that actix-http has not yet
                // handed over what it already read (it calls the handler as soon as the head
                // is parsed, then feeds the body it has): poll once more before counting it.
                let mut polled = false;
                let next = std::future::poll_fn(|cx| match payload.poll_next_unpin(cx) {
                    Poll::Ready(next) => Poll::Ready(Ok(next)),
                    Poll::Pending if looked_up => Poll::Pending,
                    Poll::Pending if !polled => {
                        polled = true;
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    Poll::Pending => {
                        looked_up = true;
                        match take_pending_slot(&conn) {
                            Ok(slot) => {
                                waiting = slot;
                                Poll::Pending
                            }
                            Err(refused) => Poll::Ready(Err(refused)),
                        }
                    }
                })
                .await?;
                let Some(chunk) = next else {
                    break;
                };
                let chunk = chunk.map_err(|_| ApiError::invalid("body", "could not be read"))?;
                if body.len() + chunk.len() > limit {
                    return Err(ApiError::too_large(limit));
                }
                body.extend_from_slice(&chunk);
            }
            drop(waiting);
            Ok(())
        };
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| ApiError::request_timeout(timeout.as_secs()))??;
        if body.is_empty() && allow_empty {
            return Ok(None);
        }
        if !json {
            return Err(ApiError::unsupported_media_type());
        }
        Ok(Some(body.freeze()))
    })
}

/// A pending slot of the connection's client address for a body that has to be waited for
/// (see `crate::middleware::connections`); `None` where the address is not capped.
///
/// # Errors
/// 429 `rate_limit_exceeded`, closing the connection, when the address already has
/// `server.max_pending_requests_per_address` bodies still arriving.
fn take_pending_slot(req: &HttpRequest) -> Result<Option<PendingSlot>, ApiError> {
    let Some(pending) = req.conn_data::<PendingRequests>() else {
        return Ok(None);
    };
    pending.take().map(Some).map_err(|limit| {
        ApiError::pending_requests_over(
            limit,
            crate::middleware::connections::PENDING_RETRY_AFTER_SECS,
        )
    })
}

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload, false);
        Box::pin(async move {
            let bytes = body.await?.unwrap_or_default();
            Ok(JsonBody(parse_json(&bytes)?))
        })
    }
}

impl<T: DeserializeOwned + Default + 'static> FromRequest for OptionalJsonBody<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload, true);
        Box::pin(async move {
            match body.await? {
                None => Ok(OptionalJsonBody(T::default())),
                // JSON `null` says "no body" too (the OpenAPI description marks it optional).
                Some(bytes) if bytes.trim_ascii() == b"null" => Ok(OptionalJsonBody(T::default())),
                Some(bytes) => Ok(OptionalJsonBody(parse_json(&bytes)?)),
            }
        })
    }
}

impl FromRequest for RawJson {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload, false);
        Box::pin(async move { Ok(RawJson(body.await?.unwrap_or_default())) })
    }
}

/// The `{id}` segment of a route's path, percent-decoded (as `web::Path<String>` gives it),
/// as the id type `T` of what the route names (`TeamId`, `ApiKeyId`, …; text by default).
/// Taken as `After<PathId<T>>`, so a bad credential is still a 401 first.
///
/// # Errors
/// 400 `invalid_request` on `id` when the segment contains U+0000 (`%00`).
#[derive(Debug)]
pub(crate) struct PathId<T = String>(pub(crate) T);

impl<T: From<String>> FromRequest for PathId<T> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let id = web::Path::<String>::from_request(req, payload)
            .into_inner()
            .map_err(|_| ApiError::invalid("id", "is not a valid path segment"))
            .and_then(|id| {
                let id = id.into_inner();
                aigw_domain::validation::refuse_nul("id", &id)?;
                Ok(PathId(T::from(id)))
            });
        std::future::ready(id)
    }
}

/// A path's `{id}` and a second segment under it (`{member_id}`, `{key_id}`,
/// `{invitation_id}`), both free of U+0000, as the id types `A` and `B` (see [`PathId`]).
///
/// # Errors
/// 400 `invalid_request` on the segment's name (`id`, `key_id`, …) when it contains U+0000.
#[derive(Debug)]
pub(crate) struct PathIds<A = String, B = String>(pub(crate) A, pub(crate) B);

impl<A: From<String>, B: From<String>> FromRequest for PathIds<A, B> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let ids = web::Path::<(String, String)>::from_request(req, payload)
            .into_inner()
            .map_err(|_| ApiError::invalid("id", "is not a valid path segment"))
            .and_then(|ids| {
                let (id, inner) = ids.into_inner();
                // Each segment's error names it as the route does (`key_id`, `user_id`, …).
                let names: Vec<&str> = req.match_info().iter().map(|(name, _)| name).collect();
                let inner_name = names.get(1).copied().unwrap_or("id");
                aigw_domain::validation::refuse_nul("id", &id)?;
                aigw_domain::validation::refuse_nul(inner_name, &inner)?;
                Ok(PathIds(A::from(id), B::from(inner)))
            });
        std::future::ready(ids)
    }
}

/// The query parameters of `req`, each at most once and each one of `allowed`.
///
/// # Errors
/// 400 `invalid_request`: on `query` for a string that is not a query; on a parameter that is
/// not one of `allowed` (named when it is a plausible name, else `query`) or given twice; on a
/// parameter whose value contains U+0000.
pub(crate) fn query_params(
    req: &HttpRequest,
    allowed: &[&str],
) -> Result<std::collections::HashMap<String, String>, ApiError> {
    let pairs = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map_err(|_| ApiError::invalid("query", "is not a valid query string"))?
        .into_inner();
    let mut params = std::collections::HashMap::new();
    for (name, value) in pairs {
        if !allowed.contains(&name.as_str()) {
            let field: String = if name.chars().any(char::is_control) {
                "query".to_owned()
            } else {
                name.chars().take(64).collect()
            };
            return Err(ApiError::invalid(
                field,
                format!("is not a parameter of this endpoint; allowed: {}", allowed.join(", ")),
            ));
        }
        if params.contains_key(&name) {
            return Err(ApiError::invalid(name, "is given more than once"));
        }
        aigw_domain::validation::refuse_nul(&name, &value)?;
        params.insert(name, value);
    }
    Ok(params)
}

/// An extractor whose failure is handed to the handler instead of answering at once.
///
/// actix-web runs a handler's extractors concurrently, so a body error could otherwise beat
/// the (slower) credential check and a bad credential would get a 400 instead of a 401.
/// Handlers that authenticate take their body as `After<JsonBody<T>>` and open it with
/// [`After::into_inner`] once the caller is authenticated and authorized.
#[derive(Debug)]
pub(crate) struct After<T>(Result<T, ApiError>);

impl<T> After<T> {
    /// The extracted value, or the extractor's error.
    ///
    /// # Errors
    /// Whatever the wrapped extractor failed with (400, 413, 415).
    pub(crate) fn into_inner(self) -> Result<T, ApiError> {
        self.0
    }
}

impl<T: FromRequest<Error = ApiError> + 'static> FromRequest for After<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let inner = T::from_request(req, payload);
        Box::pin(async move { Ok(After(inner.await)) })
    }
}

/// The caller of a route whose operation is `O` (a type of [`aigw_domain::access::op`]):
/// authenticated (access token or API key), counted against the route's rate limit
/// ([`LimitedBy`] on the resource) and checked against the who-may-call-what table, in that
/// order, once. A handler names its operation only here; the proof inside is what the use
/// cases take (docs/permissions.md "How a route is checked").
///
/// A handler's body is extracted as [`After`] and opened after this succeeded, so an
/// unauthorized caller never has its body read or parsed.
///
/// # Errors
/// 401 for a missing or bad credential; 429 over the route's limit; 403 `forbidden`
/// (`required`, `current`) when the table refuses.
#[derive(Debug)]
pub(crate) struct Authorized<O>(pub(crate) aigw_service::Authorized<O>);

impl<O: RouteOperation + 'static> FromRequest for Authorized<O> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let caller = authenticate_and_limit(req);
        Box::pin(async move {
            let (_, principal) = caller.await?;
            Ok(Authorized(aigw_service::Authorized::check(principal)?))
        })
    }
}

/// The caller of an administrative route (row [`aigw_domain::access::Operation::Administer`],
/// which also needs the account's role, read now): authenticated, rate-limited, and holding
/// the [`Admin`] proof the admin use cases take.
///
/// # Errors
/// As [`Authorized`]; 403 with `required: admin` for a caller who is not an admin.
#[derive(Debug)]
pub(crate) struct AdminCaller(pub(crate) Admin);

impl FromRequest for AdminCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let caller = authenticate_and_limit(req);
        Box::pin(async move {
            let (state, principal) = caller.await?;
            Ok(AdminCaller(state.admin.authorize_admin(&principal).await?))
        })
    }
}

/// Authenticates the caller, then counts the request against the resource's [`LimitedBy`]
/// policy for that caller.
fn authenticate_and_limit(
    req: &HttpRequest,
) -> LocalBoxFuture<'static, Result<(web::Data<AppState>, Principal), ApiError>> {
    let caller = authenticate(req);
    let policy = req.app_data::<LimitedBy>().map(|LimitedBy(policy)| *policy);
    let req = req.clone();
    Box::pin(async move {
        let (state, principal) = caller.await?;
        let policy = policy.ok_or_else(|| ApiError::internal("route without a rate limit"))?;
        state.limits.by_caller(&req, policy, &principal).await?;
        Ok((state, principal))
    })
}

/// The authenticated caller (access token or API key) of a request.
fn authenticate(
    req: &HttpRequest,
) -> LocalBoxFuture<'static, Result<(web::Data<AppState>, Principal), ApiError>> {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    // Where the scope accepts it (Anthropic's SDKs), `x-api-key` when there is no
    // `Authorization`: the bare key, as `Authorization` may carry it.
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .or_else(|| req.app_data::<AcceptsXApiKey>().and_then(|_| req.headers().get(X_API_KEY)));
    let authorization =
        presented.map(|v| v.to_str().map(str::to_owned).unwrap_or_else(|_| "\u{0}".to_owned()));
    let req = req.clone();
    Box::pin(async move {
        let state = state.ok_or_else(|| ApiError::internal("application state missing"))?;
        // An address that failed too often is refused before any lookup (auth_failure).
        state.limits.refuse_if_failing(&req).await?;
        let result = state.authenticator.authenticate(authorization.as_deref()).await;
        if let Err(ServiceError::Unauthorized { token_presented, refusal, .. }) = &result {
            let (credential, outcome) =
                refusal_labels(authorization.as_deref(), *refusal, *token_presented);
            state.telemetry.metrics.count(
                metric::AUTHENTICATIONS_TOTAL,
                &[("credential", credential), ("outcome", outcome)],
            );
        }
        match result {
            // Counted as `ok` or `forbidden` once the answer is known (access log).
            Ok(principal) => {
                req.extensions_mut()
                    .insert(crate::middleware::access_log::CallerIds::of(&principal));
                Ok((state, principal))
            }
            Err(e @ ServiceError::Unauthorized { token_presented: true, .. }) => {
                state.limits.count_failure(&req).await;
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    })
}

/// The `credential` and `outcome` labels of a refused credential (bounded sets, see
/// `aigw_authentications_total` in docs/operations.md).
fn refusal_labels(
    authorization: Option<&str>,
    refusal: aigw_service::error::Refusal,
    token_presented: bool,
) -> (&'static str, &'static str) {
    if !token_presented {
        return ("none", "missing");
    }
    let credential = match aigw_domain::PresentedCredential::from_authorization(authorization) {
        Ok(aigw_domain::PresentedCredential::AccessToken(_)) => "access_token",
        Ok(aigw_domain::PresentedCredential::ApiKey(_)) => "api_key",
        Err(_) => "malformed",
    };
    (credential, refusal.as_str())
}
