//! Extractors: JSON bodies with field-naming errors, and the authenticated caller.
//!
//! JSON bodies must be `application/json` (or `…+json`), else 415; larger than the scope's
//! [`BodyLimit`], else 413; and parse into the target type, else 400 `invalid_request` naming
//! the field by its JSON path (`email`, `permissions[1]`). serde's own messages are never sent
//! as they are, because they can quote the input (a password); only the expected type is kept.

use crate::connections::{PendingRequests, PendingSlot};
use crate::error::ApiError;
use crate::rate_limit::LimitedBy;
use crate::startup::AppState;
use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use aigw_domain::access::RouteOperation;
use aigw_domain::FieldError;
use aigw_service::admin::Admin;
use aigw_service::{Principal, ServiceError};
use bytes::{Bytes, BytesMut};
use futures_util::future::LocalBoxFuture;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use std::task::Poll;

/// Largest accepted request body of a scope, in bytes (set as app data).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// How long a whole request body may take to arrive (app data; `server.body_read_timeout_secs`).
#[derive(Debug, Clone, Copy)]
pub struct BodyReadTimeout(pub std::time::Duration);

/// A JSON request body parsed into `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

/// A JSON request body that may be absent (no body at all gives `T::default()`).
#[derive(Debug)]
pub struct OptionalJsonBody<T>(pub T);

/// The raw bytes of a JSON request body (content type and size checked, not parsed).
#[derive(Debug)]
pub struct RawJson(pub Bytes);

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
pub async fn read_json_payload(
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
            // A pending slot of the client's address (`crate::connections`), taken when the
            // body has to be waited for and held until the read ends, however it ends.
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
/// (see `crate::connections`); `None` where the address is not capped.
///
/// # Errors
/// 429 `rate_limit_exceeded`, closing the connection, when the address already has
/// `server.max_pending_requests_per_address` bodies still arriving.
fn take_pending_slot(req: &HttpRequest) -> Result<Option<PendingSlot>, ApiError> {
    let Some(pending) = req.conn_data::<PendingRequests>() else {
        return Ok(None);
    };
    pending.take().map(Some).map_err(|limit| {
        ApiError::pending_requests_over(limit, crate::connections::PENDING_RETRY_AFTER_SECS)
    })
}

/// Parses `bytes` as a JSON object into `T`, turning serde's error into a [`FieldError`] that
/// names the field. The body must be an object: serde would otherwise accept an array for a
/// struct (`["ann@example.com", "pw"]` as a login).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FieldError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|err| describe_json_error("", &err))?;
    if !value.is_object() {
        return Err(FieldError::new("body", "must be a JSON object"));
    }
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        describe_json_error(&path, err.inner())
    })
}

fn join_path(path: &str, field: &str) -> String {
    if path.is_empty() || path == "." {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// Builds the `field`/`issue` pair from a serde_json error without quoting the input.
fn describe_json_error(path: &str, err: &serde_json::Error) -> FieldError {
    use serde_json::error::Category;
    match err.classify() {
        Category::Syntax | Category::Eof | Category::Io => FieldError::new(
            "body",
            format!("is not valid JSON (line {}, column {})", err.line(), err.column()),
        ),
        Category::Data => {
            let message = err.to_string();
            // serde_json appends the position only when it parsed bytes; a typed value read
            // from a `Value` has none, and then a trailing " at line ..." is input text.
            let position = format!(" at line {} column {}", err.line(), err.column());
            let message = match message.strip_suffix(&position) {
                Some(stripped) if err.line() > 0 => stripped,
                _ => &message[..],
            };
            let field =
                if path.is_empty() || path == "." { "body".to_owned() } else { path.to_owned() };
            if let Some(rest) = message.strip_prefix("missing field `") {
                let name = rest.split('`').next().unwrap_or("");
                return FieldError::new(join_path(path, name), "is required");
            }
            // An unknown field (bodies that refuse them, e.g. PATCH) is named when it is a
            // plausible field name; anything else is not echoed.
            if let Some(rest) = message.strip_prefix("unknown field `") {
                let name = rest.split('`').next().unwrap_or("");
                let plausible = !name.is_empty()
                    && name.len() <= 64
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                // serde_path_to_error's path already ends with the unknown field's name.
                let field = if plausible { field } else { "body".to_owned() };
                return FieldError::new(field, "is not a known field");
            }
            // serde's messages read "<what was found>, expected <what the type wants>". The
            // first half quotes the input and may itself contain ", expected "; the second half
            // comes from our types and never does, so only the text after the last separator
            // is used, and only for serde's own shapes (a custom message is just "is invalid").
            const SHAPES: [&str; 5] = [
                "invalid type: ",
                "invalid value: ",
                "invalid length ",
                "unknown variant `",
                "unknown field `",
            ];
            let expected = if SHAPES.iter().any(|shape| message.starts_with(shape)) {
                message.rfind(", expected ").map(|i| &message[i + ", expected ".len()..])
            } else {
                None
            };
            let issue = match expected {
                Some(e) if e.starts_with("struct ") || e.starts_with("a map") => {
                    "must be a JSON object".to_owned()
                }
                Some(e) => format!("must be {}", e.replace('`', "")),
                None => "is invalid".to_owned(),
            };
            FieldError::new(field, issue)
        }
    }
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

/// An extractor whose failure is handed to the handler instead of answering at once.
///
/// actix-web runs a handler's extractors concurrently, so a body error could otherwise beat
/// the (slower) credential check and a bad credential would get a 400 instead of a 401.
/// Handlers that authenticate take their body as `After<JsonBody<T>>` and open it with
/// [`After::into_inner`] once the caller is authenticated and authorized.
#[derive(Debug)]
pub struct After<T>(Result<T, ApiError>);

impl<T> After<T> {
    /// The extracted value, or the extractor's error.
    ///
    /// # Errors
    /// Whatever the wrapped extractor failed with (400, 413, 415).
    pub fn into_inner(self) -> Result<T, ApiError> {
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
pub struct Authorized<O>(pub aigw_service::Authorized<O>);

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
pub struct AdminCaller(pub Admin);

impl FromRequest for AdminCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let caller = authenticate_and_limit(req);
        Box::pin(async move {
            let (state, principal) = caller.await?;
            Ok(AdminCaller(state.auth.authorize_admin(&principal).await?))
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
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().map(str::to_owned).unwrap_or_else(|_| "\u{0}".to_owned()));
    let req = req.clone();
    Box::pin(async move {
        let state = state.ok_or_else(|| ApiError::internal("application state missing"))?;
        // An address that failed too often is refused before any lookup (auth_failure).
        state.limits.refuse_if_failing(&req).await?;
        let result = state.auth.authenticate(authorization.as_deref()).await;
        if let Err(ServiceError::Unauthorized { hint, token_presented }) = &result {
            let (credential, outcome) =
                refusal_labels(authorization.as_deref(), hint, *token_presented);
            state.telemetry.metrics.count(
                "aigw_authentications_total",
                &[("credential", credential), ("outcome", outcome)],
            );
        }
        match result {
            // Counted as `ok` or `forbidden` once the answer is known (access log).
            Ok(principal) => {
                req.extensions_mut().insert(crate::telemetry::CallerIds::of(&principal));
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
    hint: &str,
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
    let outcome = if hint.contains("expired") {
        "expired"
    } else if hint.contains("revoked") || hint.contains("ended") || hint.contains("no longer") {
        "revoked"
    } else {
        "invalid"
    };
    (credential, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Body {
        email: String,
        password: String,
        permissions: Option<Vec<String>>,
    }

    fn field_of(json: &str) -> (String, String) {
        match parse_json::<Body>(json.as_bytes()) {
            Ok(_) => (String::new(), String::new()),
            Err(e) => (e.field, e.issue),
        }
    }

    mod properties {
        use super::super::parse_json;
        use crate::dto::{CreateApiKeyRequest, LoginRequest, LogoutRequest, RegisterRequest};
        use proptest::prelude::*;

        fn json_value() -> impl Strategy<Value = serde_json::Value> {
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>().prop_map(serde_json::Value::from),
                "\\PC{0,20}".prop_map(serde_json::Value::from),
            ];
            leaf.prop_recursive(3, 24, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                    prop::collection::btree_map(
                        prop_oneof![
                            Just("email".to_owned()),
                            Just("password".to_owned()),
                            Just("name".to_owned()),
                            Just("permissions".to_owned()),
                            Just("expires_at".to_owned()),
                            Just("scope".to_owned()),
                            "[a-z_]{1,10}",
                        ],
                        inner,
                        0..6
                    )
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse_json::<RegisterRequest>(&bytes);
                let _ = parse_json::<LoginRequest>(&bytes);
                let _ = parse_json::<CreateApiKeyRequest>(&bytes);
                let _ = parse_json::<LogoutRequest>(&bytes);
                let _ = aigw_service::gateway::validate_chat_request(&bytes);
            }

            #[test]
            fn arbitrary_json_never_panics_or_echoes_the_password(
                value in json_value(),
                secret in "[A-Za-z0-9]{12,24}",
            ) {
                let mut value = value;
                if let Some(object) = value.as_object_mut() {
                    object.insert("password".to_owned(), serde_json::Value::from(secret.clone()));
                }
                let bytes = serde_json::to_vec(&value).unwrap_or_default();
                for err in [
                    parse_json::<RegisterRequest>(&bytes).err(),
                    parse_json::<LoginRequest>(&bytes).err(),
                ]
                .into_iter()
                .flatten()
                {
                    prop_assert!(!err.issue.contains(&secret) && !err.field.contains(&secret));
                }
                let _ = aigw_service::gateway::validate_chat_request(&bytes);
            }
        }
    }

    /// Found while writing the no-echo property of `fuzz/fuzz_targets/json_bodies.rs`: a string
    /// that looks like the tail of a serde message (", expected X at line") put X into the issue.
    #[test]
    fn string_values_shaped_like_serde_messages_are_not_echoed() {
        use crate::dto::{CreateApiKeyRequest, LogoutRequest};
        fn error_of<T: DeserializeOwned>(json: &str) -> (String, String) {
            match parse_json::<T>(json.as_bytes()) {
                Ok(_) => (String::new(), String::new()),
                Err(e) => (e.field, e.issue),
            }
        }
        let (field, issue) = error_of::<CreateApiKeyRequest>(
            r#"{"name":"ci","permissions":"pw, expected TOPSECRETVALUE at line 1"}"#,
        );
        assert_eq!((field.as_str(), issue.as_str()), ("permissions", "must be a sequence"));
        for body in [
            r#"{"scope":"x, expected TOPSECRETVALUE at line "}"#,
            r#"{"scope":"x`, expected TOPSECRETVALUE"}"#,
        ] {
            let (field, issue) = error_of::<LogoutRequest>(body);
            assert_eq!(field, "scope");
            assert!(issue.starts_with("must be one of") && !issue.contains("TOPSECRET"), "{issue}");
        }
    }

    #[test]
    fn names_fields_without_echoing_input() {
        assert_eq!(field_of(r#"{"email": "a"}"#).0, "password");
        let (field, issue) = field_of(r#"{"email": "a", "password": 12345}"#);
        assert_eq!(field, "password");
        assert!(!issue.contains("12345"), "{issue}");
        let (field, issue) = field_of(r#"{"email": "a", "password": ["secret-pw"]}"#);
        assert_eq!(field, "password");
        assert!(!issue.contains("secret-pw"), "{issue}");
        let (field, _) = field_of(r#"{"email": "a", "password": "p", "permissions": ["read", 5]}"#);
        assert_eq!(field, "permissions[1]");
        assert_eq!(field_of(r#"{"email": "#).0, "body");
        assert_eq!(field_of(r#""just a string""#), ("body".into(), "must be a JSON object".into()));
    }
}
