//! `/api/v1/auth/sso/…`: single sign-on for single-page applications (docs/sso.md). The
//! providers to offer, and the exchange of the one-time code a sign-in started at
//! `/sso/<id>/start?redirect_uri=…&code_challenge=…` ends with, for the answer a login gets.

use super::attempts::{client_info, failures_counted};
use crate::dto::mfa::LoginData;
use crate::dto::sso::{SsoExchangeRequest, SsoProviderDto, SsoProviderListData};
use crate::dto::{BodyErrors, Envelope, ErrorEnvelope, ServerErrors};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_service::Policy;

/// The identity providers people may sign in with, and where each sign-in starts. A
/// single-page application sends the browser to `start_path` with `redirect_uri`,
/// `code_challenge`, `code_challenge_method=S256` and its own `state`.
#[utoipa::path(get, path = "/api/v1/auth/sso/providers", tag = "auth",
    responses(
        (status = 200, body = Envelope<SsoProviderListData>),
        ServerErrors))]
pub(crate) async fn providers(state: web::Data<AppState>) -> HttpResponse {
    let providers = state
        .sso
        .providers()
        .into_iter()
        .map(|p| SsoProviderDto {
            start_path: format!("/sso/{}/start", p.id),
            id: p.id,
            name: p.name,
        })
        .collect();
    HttpResponse::Ok().json(Envelope::ok(SsoProviderListData { providers }))
}

/// Exchange the one-time code a single sign-on ended with (at one of the configured
/// `sso.app_redirect_uris`) and the PKCE verifier of its `code_challenge` for the answer a
/// login gets: the token set, or an MFA challenge for an account with aigw's second factor on
/// whose provider asserted none (completed with `POST /api/v1/auth/login/mfa`). A code works
/// once, for 60 seconds; its first exchange takes it, right or wrong.
#[utoipa::path(post, path = "/api/v1/auth/sso/exchange", tag = "auth", request_body = SsoExchangeRequest,
    responses(
        (status = 200, description = "Signed in (the token set), or, with aigw's second factor to give, an MFA challenge (no tokens)", body = Envelope<LoginData>),
        (status = 400, description = "A malformed code or code_verifier (details.field names it)", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "An unknown, used or expired code, a code_verifier that does not match, or an account disabled since (details.hint says which)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn exchange(
    state: web::Data<AppState>,
    req: HttpRequest,
    JsonBody(body): JsonBody<SsoExchangeRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.refuse_if_failing(&req).await?;
    state.limits.by_ip(&req, Policy::Login).await?;
    let client = client_info(&state, &req);
    let exchanged = state.sso.exchange(&body.code, &body.code_verifier, &client);
    let outcome = failures_counted(&state, &req, exchanged).await?;
    Ok(super::auth::login_answer(&state, outcome))
}
