//! `/api/v1/auth/{register, login, me, refresh, logout}`.

use crate::dto::mfa::LoginData;
use crate::dto::{
    BodyErrors, Envelope, ErrorEnvelope, LoginRequest, LogoutData, LogoutRequest, LogoutScopeDto,
    MeData, RefreshRequest, RegisterData, RegisterRequest, ServerErrors, TokenSetDto,
};
use crate::error::ApiError;
use crate::extract::{After, Authorized, JsonBody, OptionalJsonBody};
use crate::observe::metric;
use crate::routes::attempts::{client_info, count_login, failures_counted};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_service::{LoginOutcome, LogoutScope, Policy};

/// Create an account; starts a session and answers its tokens.
#[utoipa::path(post, path = "/api/v1/auth/register", tag = "auth", request_body = RegisterRequest,
    responses(
        (status = 201, description = "Account created", body = Envelope<RegisterData>),
        (status = 400, description = "Invalid field, e-mail (or a look-alike of it) already registered, an e-mail mixing scripts, a domain that may not register, or a missing, used, expired or mismatched invitation", body = ErrorEnvelope),
        (status = 403, description = "auth.registration = closed (required: invitation, current: none)", body = ErrorEnvelope),
        BodyErrors,
        ServerErrors))]
pub(crate) async fn register(
    state: web::Data<AppState>,
    req: HttpRequest,
    JsonBody(body): JsonBody<RegisterRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.by_ip(&req, Policy::Register).await?;
    let client = client_info(&state, &req);
    let (name, invitation) = (body.name.as_deref(), body.invitation.as_deref());
    let set =
        state.accounts.register(&body.email, body.password, name, invitation, &client).await?;
    state.telemetry.metrics.count(metric::SESSIONS_CREATED_TOTAL, &[]);
    let tokens = TokenSetDto::from(set);
    let data = RegisterData {
        id: tokens.user.id.clone(),
        email: tokens.user.email.clone(),
        name: tokens.user.name.clone(),
        role: tokens.user.role.clone(),
        tokens,
    };
    Ok(HttpResponse::Created().json(Envelope::ok(data)))
}

/// Log in with e-mail and password; starts a session. When the account's second factor is
/// on, the answer is an MFA challenge instead (`mfa_required: true`), completed with
/// `POST /api/v1/auth/login/mfa`.
#[utoipa::path(post, path = "/api/v1/auth/login", tag = "auth", request_body = LoginRequest,
    responses(
        (status = 200, description = "Logged in (the token set), or, with the second factor on, an MFA challenge (no tokens)", body = Envelope<LoginData>),
        (status = 400, body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "Unknown e-mail or wrong password (one answer for both)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn login(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: Result<JsonBody<LoginRequest>, ApiError>,
) -> Result<HttpResponse, ApiError> {
    let result = async {
        let JsonBody(body) = body?;
        state.limits.refuse_if_failing(&req).await?;
        state.limits.login(&req, &body.email).await?;
        let client = client_info(&state, &req);
        let login = state.accounts.login(&body.email, body.password, &client);
        failures_counted(&state, &req, login).await
    }
    .await;
    let outcome = count_login(&state, &result);
    match result {
        Ok(outcome) => Ok(login_answer(&state, outcome)),
        Err(e) => {
            if outcome == "invalid" {
                // A security event, at info (the e-mail stays out of the logs).
                let client_ip = state.limits.client_ip(&req);
                tracing::info!(event = "login_failed", %client_ip, "login failed");
            }
            Err(e)
        }
    }
}

/// The 200 answer of a login (and of a single sign-on's code exchange): the token set, or the
/// MFA challenge.
pub(crate) fn login_answer(state: &AppState, outcome: LoginOutcome) -> HttpResponse {
    match outcome {
        LoginOutcome::Tokens(set) => {
            state.telemetry.metrics.count(metric::SESSIONS_CREATED_TOTAL, &[]);
            HttpResponse::Ok().json(Envelope::ok(LoginData::Tokens(TokenSetDto::from(set))))
        }
        LoginOutcome::MfaRequired(challenge) => {
            HttpResponse::Ok().json(Envelope::ok(LoginData::MfaRequired(challenge.into())))
        }
    }
}

/// The caller's account (access token, or API key with `read`).
#[utoipa::path(get, path = "/api/v1/auth/me", tag = "auth",
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<MeData>),
        (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn me(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ReadAccount>,
) -> Result<HttpResponse, ApiError> {
    let user = state.accounts.me(&caller).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MeData { user: user.into() })))
}

/// Exchange a refresh token for a new token set; the presented token stops working.
#[utoipa::path(post, path = "/api/v1/auth/refresh", tag = "auth", request_body = RefreshRequest,
    responses(
        (status = 200, body = Envelope<TokenSetDto>),
        (status = 400, body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "Invalid, used, expired or revoked refresh token", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn refresh(
    state: web::Data<AppState>,
    req: HttpRequest,
    JsonBody(body): JsonBody<RefreshRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.refuse_if_failing(&req).await?;
    state.limits.by_ip(&req, Policy::Refresh).await?;
    let set = failures_counted(&state, &req, state.accounts.refresh(&body.refresh_token)).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(TokenSetDto::from(set))))
}

/// End the current session (default), every session (`global`) or all others (`others`).
#[utoipa::path(post, path = "/api/v1/auth/logout", tag = "auth", request_body(content = Option<LogoutRequest>, description = "Optional: no body at all ends the current session"),
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<LogoutData>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        BodyErrors,
        (status = 403, description = "Called with an API key", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn logout(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::Logout>,
    body: After<OptionalJsonBody<LogoutRequest>>,
) -> Result<HttpResponse, ApiError> {
    let OptionalJsonBody(body) = body.into_inner()?;
    let scope = match body.scope {
        LogoutScopeDto::Local => LogoutScope::Local,
        LogoutScopeDto::Global => LogoutScope::Global,
        LogoutScopeDto::Others => LogoutScope::Others,
    };
    let revoked_sessions =
        state.accounts.logout(&caller, scope, body.refresh_token.as_deref()).await?;
    state
        .telemetry
        .metrics
        .counter(metric::SESSIONS_REVOKED_TOTAL, &[("reason", "logout")])
        .increment(revoked_sessions as u64);
    Ok(HttpResponse::Ok().json(Envelope::ok(LogoutData { revoked_sessions })))
}

/// The public keys that verify access tokens, as a JWK Set (RFC 7517): EdDSA keys only, so
/// other services of the gateway can verify access tokens without holding a secret.
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "auth",
    responses((status = 200, description = "JWK Set (`{\"keys\": [...]}`); empty when only HS256 keys are configured", body = Object)))]
pub(crate) async fn jwks(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("cache-control", "public, max-age=300"))
        .json(state.context.tokens().jwks())
}
